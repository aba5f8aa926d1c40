/* vc-tracer: PUSHF and POPF where the tracer single-steps (see trapflag.c). */
#ifndef VC_TRACER_TRAPFLAG_H
#define VC_TRACER_TRAPFLAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#define OP_PUSHF 0x9c
#define OP_POPF 0x9d

/* The instruction in bytes[0..n) is PUSHF or POPF: its length (0 when it is
 * neither), its opcode in *op and its operand size in bytes in *width (8, or
 * 2 with an operand-size prefix). */
size_t flags_insn_form(const uint8_t *bytes, size_t n, uint8_t *op, unsigned *width);
/* Do what the PUSHF at r->rip of the stopped thread pid does on a CPU that
 * is not being stepped: store the RFLAGS image (RF and VM cleared, as PUSHF
 * stores them; TF as the program set it) below RSP, move RSP and RIP in *r
 * (the caller writes the registers back).  False when the stack cannot be
 * written: the caller steps the instruction and the program gets its fault. */
bool pushf_run(pid_t pid, struct user_regs_struct *r, size_t len, unsigned width);
/* After a single-stepped SYSCALL at syscall_rip in the stopped thread pid:
 * 0 when it has not returned to the next instruction yet (ask again at the
 * thread's next stop), 1 when it has and R11 holds the flags the program
 * had, 2 when R11 held the tracer's TF and it was cleared (see trapflag.c).
 * Not for rt_sigreturn, which loads R11 from a signal frame. */
int syscall_r11_mend(pid_t pid, uint64_t syscall_rip);

#endif
