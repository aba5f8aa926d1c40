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
/* r: the registers of a thread that single-stepped the SYSCALL at
 * syscall_rip, at one of its stops: true when the syscall has returned
 * there (RIP just past it, RCX = RIP, as SYSCALL leaves them). */
bool syscall_returned(const struct user_regs_struct *r, uint64_t syscall_rip);
/* Then: R11 holds the RFLAGS the SYSCALL saved; true when its TF was the
 * tracer's and is now cleared in *r (the caller writes the registers
 * back).  Not for rt_sigreturn, which loads R11 from a signal frame. */
bool syscall_r11_mend(struct user_regs_struct *r);

#endif
