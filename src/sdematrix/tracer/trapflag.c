/*
 * vc-tracer: PUSHF and POPF under single-step.
 *
 * ptrace single-steps a thread by setting the trap flag (TF, RFLAGS bit 8),
 * and the x86 kernel keeps TF its own (TIF_FORCED_TF: hidden from
 * PTRACE_GETREGS, taken out of a signal frame, cleared when stepping ends)
 * only as long as no stepped instruction loads RFLAGS.  Two instructions
 * break that, and HotSpot's CPU-feature stub, generated into its code cache
 * and so stepped as JIT code, runs both (pushf; pop; flip AC or ID; push;
 * popf; pushf; pop; compare):
 *
 *  - PUSHF stores RFLAGS with only VM and RF cleared (Intel SDM Vol. 2,
 *    PUSHF), so a stepped one stores TF = 1 where the program expects its
 *    own flags;
 *  - a stepped POPF makes the kernel drop its claim on TF (x86
 *    enable_single_step: when the stepped instruction may change TF, TF is
 *    not marked as the debugger's), and it is not taken back while the
 *    thread keeps being stepped: every later step sets TF as the program's.
 *
 * Either way TF ends up the program's: the thread traps after every
 * instruction once stepping ends, its signal frames carry TF into its
 * handlers, and a trap it cannot take kills it (OpenJDK: SIGTRAP, exit 133).
 * So a PUSHF the tracer would step is run here instead (the image the CPU
 * stores without stepping), and after a stepped POPF the tracer resets the
 * kernel's stepping state by running one syscall in the thread with
 * PTRACE_SYSCALL (whole.c: whole_step_reset), which ends stepping cleanly;
 * the next step starts it afresh with TF the debugger's.
 *
 * A third instruction copies RFLAGS where the program can read it: SYSCALL
 * saves RFLAGS in R11 (and the next RIP in RCX; Intel SDM Vol. 2B, SYSCALL),
 * and Linux returns R11 as saved.  A stepped SYSCALL therefore leaves TF = 1
 * in R11, where natively the program finds its own flags (TF clear).  The
 * tracer clears that bit once the syscall has returned, when TF is not the
 * program's own (PTRACE_GETREGS shows TF only when the program set it:
 * TIF_FORCED_TF hides the debugger's).  The check that the syscall has
 * returned -- RIP just past it and RCX equal to RIP, as SYSCALL leaves them
 * -- keeps R11 alone at any other stop: R11 is a scratch register that may
 * hold anything with bit 8 set.
 */
#include "trapflag.h"

#include <errno.h>
#include <sys/ptrace.h>

#define RFLAGS_TF 0x100ull
#define RFLAGS_RF 0x10000ull
#define RFLAGS_VM 0x20000ull

size_t flags_insn_form(const uint8_t *bytes, size_t n, uint8_t *op, unsigned *width)
{
    size_t i = 0;
    bool o16 = false;
    while (i < n && i < 4 && bytes[i] == 0x66) { /* operand size: 16 bits */
        o16 = true;
        i++;
    }
    if (i < n && (bytes[i] & 0xf0) == 0x40) { /* REX: W makes it 64 bits again */
        if (bytes[i] & 0x08)
            o16 = false;
        i++;
    }
    if (i >= n || (bytes[i] != OP_PUSHF && bytes[i] != OP_POPF))
        return 0;
    *op = bytes[i];
    *width = o16 ? 2 : 8;
    return i + 1;
}

bool pushf_run(pid_t pid, struct user_regs_struct *r, size_t len, unsigned width)
{
    uint64_t image = r->eflags & ~(RFLAGS_RF | RFLAGS_VM);
    uint64_t at = r->rsp - width;
    uint64_t word = image;
    if (width == 2) { /* keep the six stack bytes above the two stored */
        errno = 0;
        long old = ptrace(PTRACE_PEEKDATA, pid, (void *)at, NULL);
        if (errno)
            return false;
        word = ((uint64_t)old & ~0xffffull) | (image & 0xffff);
    }
    if (ptrace(PTRACE_POKEDATA, pid, (void *)at, (void *)word))
        return false;
    r->rsp = at;
    r->rip += len;
    return true;
}

bool syscall_returned(const struct user_regs_struct *r, uint64_t syscall_rip)
{
    return r->rip == syscall_rip + 2 && r->rcx == r->rip;
}

bool syscall_r11_mend(struct user_regs_struct *r)
{
    if (!(r->r11 & RFLAGS_TF) || (r->eflags & RFLAGS_TF))
        return false;
    r->r11 &= ~RFLAGS_TF;
    return true;
}
