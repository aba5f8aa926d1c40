/* vc-tracer whole-process mode: first-visit breakpoints (see whole.c). */
#ifndef VC_TRACER_WHOLE_H
#define VC_TRACER_WHOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

extern bool whole_enabled;

/* x86-64 syscall numbers the JIT and image bookkeeping follows */
#define NR_MMAP 9
#define NR_MPROTECT 10
#define NR_MUNMAP 11
#define NR_MREMAP 25
#define NR_PKEY_MPROTECT 329
#define NR_RT_SIGRETURN 15
/* the kernel's uprobe trampolines' own syscalls (Linux 6.11+, 6.16+) */
#define NR_URETPROBE 335
#define NR_UPROBE 336
/* mmap, mprotect, pkey_mprotect: the calls whose third argument, the
 * protection, can make memory executable */
static inline bool may_map_code(uint64_t nr)
{
    return nr == NR_MMAP || nr == NR_MPROTECT || nr == NR_PKEY_MPROTECT;
}

/* a syscall's length argument in whole pages, as the kernel takes it */
static inline uint64_t page_up(uint64_t len)
{
    return (len + 4095) & ~(uint64_t)4095;
}

/* mremap's flag: the old range stays mapped */
#define W_MREMAP_DONTUNMAP 4

/* profile record `bounds BINFILE PATH` (rest = "BINFILE PATH"); -1 if bad */
int whole_load_bounds(const char *rest);
/* a new address space (exec, fork); copy_from: the forking space or -1 */
void whole_new_space(int space, pid_t tgid, int copy_from);
/* plant first-visit int3s in every executable image mapping of the process;
 * `sites`: the profile's, which may hold tracer.c's own int3s (an int3 at
 * any other start of a new mapping is a kernel uprobe's, see note_probed) */
struct site;
void whole_arm(int space, pid_t pid, const struct site *sites, size_t nsites);
/* an int3 stop with the int3 at addr: 1 when it was ours (the original
 * byte is back and the instruction recorded: the caller rewinds RIP), 2
 * when it was ours and a TZCNT of zero there was run as BSF (tzcnt.c: RIP
 * is already past it); `stepping`: the thread steps a region (its step
 * looks at a TZCNT) */
int whole_trap(int space, pid_t pid, uint64_t addr, bool stepping);
/* replace buf with the image file's bytes at addr; returns the count, 0 when
 * addr is not in an image mapping with boundary data */
size_t whole_fix_bytes(int space, uint64_t addr, uint8_t *buf, size_t n);
/* an instruction that ran without our int3 (stepped, or at a site); true
 * when it was not recorded before */
bool whole_note(int space, uint64_t addr, const uint8_t *bytes, size_t len);
/* JIT code (anonymous executable memory), see whole.c.  Syscall stops:
 * mmap/mprotect/pkey_mprotect(PROT_EXEC) of anonymous memory lose PROT_EXEC
 * at entry and become JIT regions at exit; munmap etc. end them, mremap
 * moves them.  whole_sys_exit is true when a region moved to an address the
 * process's maps may not name yet (the caller reads them again). */
void whole_sys_enter(int space, pid_t tid, uint64_t nr, const uint64_t *args, uint64_t ip);
bool whole_sys_exit(int space, pid_t tid, int64_t rval, bool is_error);
/* [lo, hi) of `space` was unmapped or mapped over: the image mappings there
 * end (an image mapped there again is armed again by whole_arm) */
void whole_unmapped(int space, uint64_t lo, uint64_t hi);
/* the syscall whole_sys_enter was told of did not run (the stopped thread
 * is still at it): its argument is put back as the program gave it */
void whole_sys_cancel(pid_t tid);
/* a SIGSEGV at rip: 1 when rip is in a closed JIT region, now open, and the
 * thread steps in it (drop the signal, then whole_jit_visit at each stop).
 * `fetch`: the fault was an instruction fetch at rip (SEGV_ACCERR, si_addr
 * at rip): in a region another thread opened meanwhile, it was a stale
 * entry fault and the thread steps there too. */
int whole_jit_enter(int space, pid_t tid, uint64_t rip, bool fetch);
/* the thread steps in JIT code */
bool whole_jit_active(pid_t tid);
/* --jit-converge N (0, the default: never): a thread that has stepped N
 * instructions in a row in JIT code without meeting one not recorded before
 * stops stepping, and the region stays executable, unchecked, until the
 * program maps or protects it again (see whole.c) */
void whole_jit_set_converge(uint64_t n);
/* a stop of a JIT-stepping thread at rip: 0 it left JIT code (stepping
 * ends), 1 keep stepping, 2 / 3 / 4: rip is at a CPUID / XGETBV / PUSHF (to
 * emulate or run, trapflag.c, then visit again), 5: at a POPF (step it,
 * then whole_step_reset), 6: a TZCNT of zero was run as BSF (tzcnt.c; visit
 * again), 7: at a SYSCALL (step it, around the step tracer.c's
 * note_syscall_step and syscall_step_done); `record`: record the
 * instruction (false when the thread steps a
 * region, which records it itself) */
int whole_jit_visit(int space, pid_t tid, uint64_t rip, bool record);
/* after a stepped POPF (any mode): end the kernel's single-step state of
 * the stopped thread cleanly by running getpid in it with PTRACE_SYSCALL
 * (trapflag.c); false when the process has not run a `syscall` instruction
 * to borrow (whole_sys_enter notes one in every mode) */
bool whole_step_reset(int space, pid_t tid);
/* the whole-mode lines of the output file; asked: profile_asked() */
void whole_write(FILE *f, uint64_t asked);

#endif
