/*
 * vc-tracer: run a program on the host CPU while it sees a CPU model's CPUID,
 * and record the exact instruction stream of its SSC-marked regions.
 *
 *   vc-tracer --profile FILE --out FILE [--max-steps N] [--cpuid-mode auto|fault|bp]
 *             [--no-blocks] -- prog args...
 *   vc-tracer --host-profile     this CPU's CPUID and XCR0 in the profile format
 *   vc-tracer --print-cpuid      leaves 0 and 1 and XCR0 as this process sees
 *                                them (the backend's self-test traces it)
 *
 * How the program is made to see the model
 * ----------------------------------------
 * CPUID:  two mechanisms, chosen per exec ("auto" tries them in this order):
 *   fault  At the exec stop (before ld.so's first instruction) we inject
 *          arch_prctl(ARCH_SET_CPUID, 0) into the child: the kernel then makes
 *          every CPUID raise SIGSEGV, which we answer from the profile.  The
 *          setting is inherited by fork/clone and reset by execve, so we
 *          re-inject after every exec (after stepping out of the execve: its
 *          return value would otherwise overwrite RAX of the injected call).
 *   bp     When the kernel or CPU has no CPUID faulting (arch_prctl: ENODEV,
 *          e.g. AMD guests), the profile lists the CPUID instructions of the
 *          images (found by decoding them, see backends/ptrace/profile.py);
 *          each gets an int3 and is answered the same way.
 * XGETBV: never trapped by the hardware; the profile lists its occurrences in
 *          the images and each gets an int3: XGETBV(0) answers the model's
 *          XCR0, other ECX values execute the real instruction.
 * While single-stepping, the bytes at RIP are looked at before each step: a
 *          CPUID or XGETBV(0) is emulated wherever it is (JIT, dlopen'd or
 *          LD_PRELOAD'ed code included), in both modes.  The limit of bp
 *          mode: such code outside the listed images that runs *outside* a
 *          region sees the host's CPUID.
 * Images mapped later (dlopen, ld.so loading libc) are armed when an
 * mmap/mprotect with PROT_EXEC returns (the tracee runs under PTRACE_SYSCALL;
 * a stepped thread's mapping syscalls are recognised at their step).
 *
 * SSC marks (`mov ebx, imm32; 64 67 90`) are listed in the profile too; their
 * `64` byte gets an int3.  EBX=0x111 starts single-stepping the thread that hit
 * it, 0x222 stops.  A thread or process created by a stepping thread (clone,
 * fork, vfork) is stepped from its first instruction until it stops at a mark
 * or ends.  An instruction is counted when its step completes (the step trap,
 * or our emulation), so one interrupted by a signal is counted once, when it
 * finally runs; the handler's code ran and is counted.  A rep-prefixed
 * instruction that single-steps once per iteration is counted once per visit.
 *
 * Profile file (text, one record per line, numbers in hex without 0x):
 *   cpuid LEAF SUBLEAF EAX EBX ECX EDX
 *   xcr0 VALUE
 *   site cpuid|xgetbv|mark FILEOFFSET PATH     (PATH = rest of the line)
 *   image PATH          an image whose sites were searched (it may have none)
 *   blocks PATH / b FILEOFFSET LENGTHS   straight-line blocks (see blocks.c)
 *
 * Block stepping: while the only traced thread steps and its RIP is an
 * instruction of a listed block, the rest of the block up to its last
 * instruction E runs natively to a temporary int3 on E, its instructions are
 * counted once each, and E is single-stepped as above.  The records are
 * identical to stepping every instruction (--no-blocks does that).
 * An executable file mapping that is neither a listed image nor holds a site
 * is reported as `unscanned PATH` in the output: its CPUID / XGETBV outside a
 * region are not intercepted in bp mode (XGETBV in no mode).
 * Output file: see write_output() (`sigill SPACE ADDR BYTES`: the last SIGILL
 * delivered, at the faulting instruction; `tzcnt_zero SPACE ADDR N`: TZCNTs
 * seen run with a zero source, see tzcnt.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/ptrace.h>

#include <cpuid.h>

#include "blocks.h"
#include "fatal.h"
#include "profile.h"
#include "trapflag.h"
#include "tracee_mem.h"
#include "tzcnt.h"
#include "whole.h"

#define ARCH_SET_CPUID 0x1012
#define SYS_ARCH_PRCTL 158
#define MARK_START 0x111u
#define MARK_STOP 0x222u
#define PROT_EXEC_BIT 0x4

enum cpuid_mode { MODE_AUTO, MODE_FAULT, MODE_BP };

struct bp {            /* an armed breakpoint in one address space */
    uint64_t addr;
    enum site_kind kind;
    uint8_t orig;
};

struct space {         /* one address space (process) */
    int id;
    pid_t tgid;
    bool fault;        /* CPUID faulting active in this process */
    char *maps;        /* union of the /proc/PID/maps lines seen while stepping */
    struct bp *bps;
    size_t nbps, capbps;
    uint64_t map_gen;  /* successful mmap/munmap/mremap calls so far (rec_at) */
};

struct thread {
    pid_t tid;
    struct space *sp;
    bool stepping;
    bool ever_stepped;  /* counted in n_threads_stepped */
    bool exec_pending;  /* inject + arm at the execve's syscall-exit stop */
    bool new_stop_seen;
    bool creator_seen;  /* the creator's CLONE/FORK/VFORK event was handled */
    bool held;          /* first stop seen before the creator's event: wait */
    /* The single step in flight: the instruction at pending_rip was about to
     * run when the step was issued; it is counted when the step completes
     * (the step trap, or our emulation of it), never before: a signal can
     * stop the thread before it runs. */
    bool pending;
    bool sig_injected;  /* the step in flight delivers a signal first */
    bool exec_map;      /* the step in flight is an mmap/mprotect(PROT_EXEC) */
    bool popf_stepped;  /* the step in flight is a POPF (trapflag.c) */
    uint64_t pending_rip;
    /* a stepped SYSCALL at this address has not been seen returning: its R11
     * is mended at the thread's next stop after it (trapflag.c); 0: none */
    uint64_t syscall_rip;
    bool syscall_whole; /* ...and whole.c saw its entry (whole_sys_enter) */
    uint64_t last_rip;  /* last counted instruction (rep iterations) */
    uint64_t sc_nr, sc_prot;
    uint64_t sc_args[4]; /* the syscall's first four arguments (space_replaced) */
    /* a function region (site func): stepping ends when the call returns,
     * i.e. at func_ret with RSP = func_rsp (the entry RSP + 8) */
    uint64_t func_ret, func_rsp;
};

struct rec {           /* per (space, address, bytes) execution count */
    uint64_t addr;
    int space;
    uint64_t count;
    uint8_t bytes[15];
    uint8_t len;
    bool used;
    bool retired;      /* other bytes run at addr since: see rec_at */
    bool page_known;   /* unreadable code: whether it is the [uprobes] page */
    bool uprobes_page;
    uint64_t gen;      /* the space's map_gen when bytes were last read */
};

/* ---- global state ---------------------------------------------------- */
static char **unscanned; /* reported paths (`unscanned` lines) */
static size_t nunscanned;
static enum cpuid_mode want_mode = MODE_AUTO;
static uint64_t max_steps = 200000000ull;

static struct space **spaces;
static size_t nspaces;
static struct thread **threads;
static size_t nthreads;

static struct rec *recs;
static size_t caprecs, nrecs;

/* block stepping: blocks.h (blocks.c holds the tables and the block in flight) */
static bool use_blocks = true;
static bool block_enter(struct thread *t, uint64_t rip);
static bool block_stop(struct thread *t, int st);

static uint64_t n_cpuid, n_xgetbv, n_steps, n_regions, n_inject_ok, n_inject_fail;
static uint64_t n_threads_stepped, n_cpuid_stepped, n_xgetbv_stepped, n_pushf_run, n_popf_reset;
static uint64_t n_r11_mended, n_syscall_undone, n_uprobe_steps, n_uprobe_tramp;
static long last_inject_rc;
static bool truncated;
/* The last SIGILL delivered to the program: where, and the instruction's
 * bytes (the original ones, not our int3s).  sdematrix tells a model whose
 * CPUID advertises something the host cannot execute from a program bug. */
static struct {
    bool have;
    int space;
    uint64_t addr;
    uint8_t bytes[15];
    uint8_t len;
} last_sigill;

/* ---- profile ------------------------------------------------------------ */
/* ---- memory access -------------------------------------------------------- */
/* ---- spaces, threads, breakpoints ----------------------------------------- */
static struct space *new_space(pid_t tgid, const struct space *copy_from)
{
    struct space *sp = calloc(1, sizeof *sp);
    if (!sp)
        die("out of memory");
    sp->id = (int)nspaces;
    sp->tgid = tgid;
    whole_new_space(sp->id, tgid, copy_from ? copy_from->id : -1);
    if (copy_from) {
        sp->fault = copy_from->fault;
        if (whole_enabled && copy_from->maps)
            sp->maps = strdup(copy_from->maps);
        if (copy_from->nbps) {
            sp->bps = xrealloc(NULL, copy_from->nbps * sizeof *sp->bps);
            memcpy(sp->bps, copy_from->bps, copy_from->nbps * sizeof *sp->bps);
            sp->nbps = sp->capbps = copy_from->nbps;
        }
    }
    spaces = xrealloc(spaces, (nspaces + 1) * sizeof *spaces);
    spaces[nspaces++] = sp;
    return sp;
}

static struct thread *find_thread(pid_t tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i]->tid == tid)
            return threads[i];
    return NULL;
}

static struct thread *add_thread(pid_t tid, struct space *sp)
{
    struct thread *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    t->tid = tid;
    t->sp = sp;
    threads = xrealloc(threads, (nthreads + 1) * sizeof *threads);
    threads[nthreads++] = t;
    return t;
}

static void remove_thread(pid_t tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i]->tid == tid) {
            free(threads[i]);
            threads[i] = threads[--nthreads];
            return;
        }
}

static struct bp *find_bp(struct space *sp, uint64_t addr)
{
    for (size_t i = 0; i < sp->nbps; i++)
        if (sp->bps[i].addr == addr)
            return &sp->bps[i];
    return NULL;
}

static pid_t tgid_of(pid_t tid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return tid;
    pid_t tgid = tid;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Tgid:", 5)) {
            tgid = (pid_t)atoi(line + 5);
            break;
        }
    fclose(f);
    return tgid;
}

static char *read_maps(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 8192, len = 0;
    char *buf = xrealloc(NULL, cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2)
            buf = xrealloc(buf, cap *= 2);
    }
    buf[len] = 0;
    fclose(f);
    return buf;
}

/* The line of pid's maps (now) that holds addr: its range, file offset and
 * name ("" for anonymous memory); false when no mapping holds addr. */
struct maps_line {
    unsigned long lo, hi, off;
    char name[4096];
};

static bool maps_line_at(pid_t pid, uint64_t addr, struct maps_line *m)
{
    char *maps = read_maps(pid);
    if (!maps)
        return false;
    bool found = false;
    for (char *line = strtok(maps, "\n"); line && !found; line = strtok(NULL, "\n")) {
        int pos = 0;
        if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &m->lo, &m->hi, &m->off, &pos) < 3 ||
            addr < m->lo || addr >= m->hi)
            continue;
        snprintf(m->name, sizeof m->name, "%s", pos ? line + pos : "");
        found = true;
    }
    free(maps);
    return found;
}

/* Up to n bytes of `path` at file offset `off`; 0 when unreadable. */
static size_t file_bytes_at(const char *path, uint64_t off, uint8_t *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t r = pread(fd, buf, n, (off_t)off);
    close(fd);
    return r > 0 ? (size_t)r : 0;
}

/* Up to n bytes of the file mapped at `addr` in pid now, as the file holds
 * them; 0 when no file is mapped there. */
static size_t mapped_file_bytes(pid_t pid, uint64_t addr, uint8_t *buf, size_t n)
{
    struct maps_line m;
    if (!maps_line_at(pid, addr, &m) || m.name[0] != '/')
        return 0;
    if (addr + n > m.hi)
        n = (size_t)(m.hi - addr);
    return file_bytes_at(m.name, m.off + (addr - m.lo), buf, n);
}

static const uint8_t site_first_byte[] = {0x0f, 0x0f, 0x64, 0x00};
static void merge_maps(struct space *sp, pid_t pid);

/* Note an executable file mapping the profile knows nothing about. */
static void check_scanned(const char *img)
{
    if (profile_knows_image(img))
        return;
    for (size_t i = 0; i < nunscanned; i++)
        if (!strcmp(unscanned[i], img))
            return;
    if (profile_ask(img)) /* whole mode: the image server sent its records */
        return;
    unscanned = xrealloc(unscanned, (nunscanned + 1) * sizeof *unscanned);
    unscanned[nunscanned++] = strdup(img);
}

/* Sites whose first byte was an int3 that neither the tracer nor the file
 * put there when they were armed: a kernel uprobe's.  The tracer's own int3
 * cannot go there (the kernel takes that stop for itself), so a function
 * region with a probed entry is never entered and a probed CPUID / XGETBV
 * runs unanswered; listed in the output (`site_probed`) for the report. */
struct probed_site {
    int space;
    uint64_t addr;
    const struct site *site;
};
static struct probed_site *probed_sites;
static size_t nprobed_sites;

static void note_site_probed(const struct space *sp, uint64_t addr, const struct site *s)
{
    uint8_t held;
    if (file_bytes_at(s->path, s->off, &held, 1) != 1 || held == 0xcc)
        return;
    for (size_t i = 0; i < nprobed_sites; i++)
        if (probed_sites[i].space == sp->id && probed_sites[i].addr == addr)
            return;
    probed_sites = xrealloc(probed_sites, (nprobed_sites + 1) * sizeof *probed_sites);
    probed_sites[nprobed_sites++] = (struct probed_site){sp->id, addr, s};
}

/* Arm every profile site that falls in an executable mapping of `sp` and is
 * not armed yet.  The byte found must be the one the site expects (the file
 * on disk and the mapping agree), else the site is left alone. */
static void arm_space(struct space *sp, pid_t pid)
{
    char *maps = read_maps(pid);
    if (!maps)
        return;
    for (char *line = strtok(maps, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned long lo, hi, off;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &lo, &hi, perms, &off, &pos) < 4 || !pos)
            continue;
        if (perms[2] != 'x' || line[pos] != '/')
            continue;
        const char *img = line + pos;
        check_scanned(img);
        blocks_note_mapping(sp->id, lo, hi, off, img);
        size_t nsites;
        const struct site *sites = profile_sites(&nsites);
        for (size_t i = 0; i < nsites; i++) {
            const struct site *s = &sites[i];
            if (s->kind == SITE_CPUID && sp->fault)
                continue;
            if (s->off < off || s->off >= off + (hi - lo) || strcmp(s->path, img))
                continue;
            uint64_t addr = lo + (s->off - off);
            if (find_bp(sp, addr))
                continue;
            uint8_t b;
            if (peek_byte(pid, addr, &b))
                continue;
            if (b == 0xcc)
                note_site_probed(sp, addr, s);
            /* a function entry may start with any byte but an int3 */
            if (s->kind == SITE_FUNC ? b == 0xcc : b != site_first_byte[s->kind])
                continue;
            if (poke_byte(pid, addr, 0xcc))
                continue;
            if (sp->nbps == sp->capbps)
                sp->bps = xrealloc(sp->bps, (sp->capbps = sp->capbps * 2 + 32) * sizeof *sp->bps);
            sp->bps[sp->nbps++] = (struct bp){addr, s->kind, b};
        }
    }
    free(maps);
    if (whole_enabled) {
        size_t nsites;
        const struct site *sites = profile_sites(&nsites);
        whole_arm(sp->id, pid, sites, nsites);
        merge_maps(sp, pid);
    }
}

/* Add the lines of the process's current maps that `sp->maps` lacks: the
 * maps of a stepped process are read when its first thread starts stepping
 * and again after every executable mapping made meanwhile, so code mapped
 * inside the region (dlopen) is located too.  A union, not a snapshot: an
 * image unmapped before the end keeps its lines. */
static void merge_maps(struct space *sp, pid_t pid)
{
    char *now = read_maps(pid);
    if (!now)
        return;
    size_t have = sp->maps ? strlen(sp->maps) : 0;
    for (char *line = strtok(now, "\n"); line; line = strtok(NULL, "\n")) {
        size_t n = strlen(line);
        bool found = false;
        for (const char *p = sp->maps; p && (p = strstr(p, line)) != NULL; p++)
            if ((p == sp->maps || p[-1] == '\n') && p[n] == '\n') {
                found = true;
                break;
            }
        if (found)
            continue;
        sp->maps = xrealloc(sp->maps, have + n + 2);
        memcpy(sp->maps + have, line, n);
        have += n;
        sp->maps[have++] = '\n';
        sp->maps[have] = 0;
    }
    free(now);
}

/* ---- registers --------------------------------------------------------------- */
static void get_regs(pid_t pid, struct user_regs_struct *r)
{
    if (ptrace(PTRACE_GETREGS, pid, NULL, r))
        die("PTRACE_GETREGS %d: %s", (int)pid, strerror(errno));
}

static void set_regs(pid_t pid, const struct user_regs_struct *r)
{
    if (ptrace(PTRACE_SETREGS, pid, NULL, r))
        die("PTRACE_SETREGS %d: %s", (int)pid, strerror(errno));
}

/* Wait for one specific thread's next stop (used inside a single operation). */
static int wait_tid(pid_t tid)
{
    int st;
    for (;;) {
        pid_t r = waitpid(tid, &st, __WALL);
        if (r == tid)
            return st;
        if (r < 0 && errno != EINTR)
            die("waitpid %d: %s", (int)tid, strerror(errno));
    }
}

/* Make the stopped thread run arch_prctl(ARCH_SET_CPUID, 0): write `syscall`
 * over the bytes at RIP, single-step it, put bytes and registers back.
 * Returns the syscall's result (0, or -errno such as -ENODEV). */
static long inject_set_cpuid(pid_t pid)
{
    struct user_regs_struct saved, r;
    get_regs(pid, &saved);
    errno = 0;
    long word = ptrace(PTRACE_PEEKTEXT, pid, (void *)saved.rip, NULL);
    if (errno)
        return -errno;
    long patched = (long)(((unsigned long)word & ~0xfffful) | 0x050fu); /* 0F 05 */
    if (ptrace(PTRACE_POKETEXT, pid, (void *)saved.rip, (void *)patched))
        return -errno;
    r = saved;
    r.rax = SYS_ARCH_PRCTL;
    r.orig_rax = (unsigned long long)-1;
    r.rdi = ARCH_SET_CPUID;
    r.rsi = 0;
    set_regs(pid, &r);
    long rc;
    if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL)) {
        rc = -errno;
    } else {
        int st = wait_tid(pid);
        if (!WIFSTOPPED(st))
            die("child vanished during CPUID-faulting injection");
        get_regs(pid, &r);
        rc = (long)r.rax;
    }
    if (ptrace(PTRACE_POKETEXT, pid, (void *)saved.rip, (void *)word))
        die("cannot restore code after injection: %s", strerror(errno));
    set_regs(pid, &saved);
    return rc;
}

/* After an exec: enable CPUID faulting (unless told to use breakpoints) and
 * arm the breakpoints of the new image set. */
static void setup_exec(struct thread *t)
{
    struct space *sp = new_space(t->tid, NULL);
    t->sp = sp;
    t->stepping = false;
    if (want_mode != MODE_BP) {
        long rc = inject_set_cpuid(t->tid);
        last_inject_rc = rc;
        if (rc == 0) {
            sp->fault = true;
            n_inject_ok++;
        } else {
            n_inject_fail++;
            if (want_mode == MODE_FAULT)
                die("arch_prctl(ARCH_SET_CPUID, 0) in the child failed: %s", strerror((int)-rc));
        }
    }
    arm_space(sp, t->tid);
}

/* ---- recording --------------------------------------------------------------- */
static bool has_rep_prefix(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (c == 0xf2 || c == 0xf3)
            return true;
        if (c == 0xf0 || c == 0x2e || c == 0x36 || c == 0x3e || c == 0x26 || c == 0x64 ||
            c == 0x65 || c == 0x66 || c == 0x67 || (c >= 0x40 && c <= 0x4f))
            continue;
        return false;
    }
    return false;
}

static size_t rec_hash(uint64_t addr, int space)
{
    uint64_t h = (addr ^ ((uint64_t)space << 48)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20);
}

static struct rec *rec_lookup(uint64_t addr, int space)
{
    if ((nrecs + 1) * 2 > caprecs) {
        size_t oldcap = caprecs;
        struct rec *old = recs;
        caprecs = caprecs ? caprecs * 2 : 4096;
        recs = calloc(caprecs, sizeof *recs);
        if (!recs)
            die("out of memory");
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].used) {
                size_t j = rec_hash(old[i].addr, old[i].space) & (caprecs - 1);
                while (recs[j].used)
                    j = (j + 1) & (caprecs - 1);
                recs[j] = old[i];
            }
        free(old);
    }
    size_t j = rec_hash(addr, space) & (caprecs - 1);
    while (recs[j].used) {
        if (recs[j].addr == addr && recs[j].space == space && !recs[j].retired)
            return &recs[j];
        j = (j + 1) & (caprecs - 1);
    }
    recs[j].used = true;
    recs[j].addr = addr;
    recs[j].space = space;
    nrecs++;
    return &recs[j];
}

/* Up to 15 bytes of code at `rip` in t's address space as the program wrote
 * them: whole mode's and the sites' int3s replaced by the bytes they cover,
 * and a kernel uprobe's int3 (see on_sigtrap) by the file's bytes: the
 * kernel runs the probed instruction, not an int3. */
static uint8_t read_code(struct thread *t, uint64_t rip, uint8_t bytes[15])
{
    uint8_t len = (uint8_t)read_mem(t->tid, rip, bytes, 15);
    size_t fixed = whole_fix_bytes(t->sp->id, rip, bytes, len);
    if (fixed > len)
        len = (uint8_t)fixed;
    for (size_t i = 0; i < len; i++) {
        struct bp *b = find_bp(t->sp, rip + i);
        if (b)
            bytes[i] = b->orig;
    }
    if (!fixed && len && bytes[0] == 0xcc) {
        uint8_t file[15];
        size_t n = mapped_file_bytes(t->tid, rip, file, sizeof file);
        if (n && file[0] != 0xcc) {
            memcpy(bytes, file, n);
            len = (uint8_t)n;
        }
    }
    return len;
}

/* The record of the instruction at `rip` in t's address space, its bytes
 * read on first sight, and read again after the space's mappings changed
 * (an image loaded where a dlclose'd one ran) and, in an open JIT region
 * (whole mode), at every step: JIT code is rewritten where it ran with no
 * syscall between in an RWX page (a reused code-cache slot, a patched call).
 * New bytes at an address start a new record; the old one keeps its count
 * (the reader merges records whose windows differ only past the
 * instruction). */
static struct rec *rec_at(struct thread *t, uint64_t rip)
{
    struct rec *r = rec_lookup(rip, t->sp->id);
    uint64_t gen = t->sp->map_gen;
    if (r->len && r->gen == gen && !(whole_enabled && whole_jit_active(t->tid)))
        return r;
    uint8_t now[15];
    uint8_t n = read_code(t, rip, now);
    bool changed = r->len && (n != r->len || memcmp(now, r->bytes, n));
    if (changed && r->count) {
        r->retired = true;
        r = rec_lookup(rip, t->sp->id); /* a new slot: r may have moved */
    }
    memcpy(r->bytes, now, n);
    r->len = n;
    r->gen = gen;
    return r;
}

#define OP_CPUID "\x0f\xa2"
#define OP_XGETBV "\x0f\x01\xd0"
#define OP_SYSCALL "\x0f\x05"

/* Whether the recorded instruction starts with the n bytes of `op`. */
static bool rec_is(const struct rec *code, const char *op, size_t n)
{
    return code->len >= n && !memcmp(code->bytes, op, n);
}

/* Whether unreadable code is the kernel's [uprobes] page: a probed
 * function returns into its return-probe trampoline there (a uretprobe
 * replaces the return address), which the kernel maps unreadable. */
static bool in_uprobes_page(struct thread *t, struct rec *r)
{
    if (!r->page_known) {
        struct maps_line m;
        r->page_known = true;
        r->uprobes_page = maps_line_at(t->tid, r->addr, &m) && !strcmp(m.name, "[uprobes]");
    }
    return r->uprobes_page;
}

/* A kernel uprobe at addr: an int3 that is neither ours nor the program's
 * (its file holds another byte there), or the return-probe trampoline (on
 * kernels where it is an int3, not the uretprobe syscall). */
static bool probed_at(struct thread *t, uint64_t addr)
{
    struct rec *r = rec_at(t, addr);
    if (r->len == 0)
        return in_uprobes_page(t, r);
    uint8_t b;
    if (find_bp(t->sp, addr) || read_mem(t->tid, addr, &b, 1) != 1 || b != 0xcc)
        return false;
    return r->bytes[0] != 0xcc;
}

/* Count one completed execution of the instruction at `rip` in thread t;
 * the kernel's own trampoline in [uprobes] is not the program's code (its
 * bytes cannot be read either): only counted as stepped. */
static void commit(struct thread *t, uint64_t rip)
{
    struct rec *r = rec_at(t, rip);
    n_steps++;
    if (r->len == 0 && in_uprobes_page(t, r)) {
        n_uprobe_tramp++;
        return;
    }
    bool again = rip == t->last_rip && has_rep_prefix(r->bytes, r->len);
    t->last_rip = rip;
    if (whole_enabled && r->count == 0)
        whole_note(t->sp->id, rip, r->bytes, r->len);
    if (!again)
        r->count++;
}

/* Thread t starts stepping (a start mark, or created by a stepping thread). */
static void start_stepping(struct thread *t)
{
    t->stepping = true;
    t->pending = false;
    t->last_rip = 0;
    if (!t->ever_stepped) {
        t->ever_stepped = true;
        n_threads_stepped++;
    }
    if (!t->sp->maps)
        merge_maps(t->sp, t->tid);
}

/* ---- emulation ------------------------------------------------------------------ */
static void emulate_cpuid(pid_t pid, struct user_regs_struct *r)
{
    uint32_t out[4];
    profile_answer_cpuid((uint32_t)r->rax, (uint32_t)r->rcx, out);
    r->rax = out[0];
    r->rbx = out[1];
    r->rcx = out[2];
    r->rdx = out[3];
    r->rip += 2;
    set_regs(pid, r);
    n_cpuid++;
}

/* XGETBV(0) answers the model's XCR0 (the caller checked ECX == 0). */
static void emulate_xgetbv(pid_t pid, struct user_regs_struct *r)
{
    const uint64_t xcr0 = profile_xcr0();
    r->rax = (uint32_t)xcr0;
    r->rdx = (uint32_t)(xcr0 >> 32);
    r->rip += 3;
    set_regs(pid, r);
    n_xgetbv++;
}

/* A PUSHF (length len, pushing width bytes) about to be single-stepped is
 * run by trapflag.c instead (a stepped one stores the tracer's trap flag,
 * see there); false: its stack is not writable (step it). */
static bool run_pushf(struct thread *t, struct user_regs_struct *r, size_t len, unsigned width)
{
    if (!pushf_run(t->tid, r, len, width))
        return false;
    set_regs(t->tid, r);
    n_pushf_run++;
    return true;
}

/* A successful mmap, munmap or mremap (nr, its first four arguments, its
 * result) replaced what was mapped in up to two of sp's ranges (mremap: the
 * old one, unless MREMAP_DONTUNMAP, and the new one).  The sites planted
 * there went with it: an image loaded where a dlclose'd one had a site
 * would otherwise have its own instruction taken for that site (the site's
 * byte put back over the new code: a correct program died of SIGILL).
 * whole mode's image mappings there end (whole_unmapped), and records of
 * code there are read again (rec_at). */
static void space_replaced(struct space *sp, uint64_t nr, const uint64_t a[4], uint64_t rval)
{
    uint64_t lo[2], hi[2];
    int n = 0;
    if (nr == NR_MMAP || nr == NR_MUNMAP || (nr == NR_MREMAP && !(a[3] & W_MREMAP_DONTUNMAP))) {
        lo[n] = nr == NR_MMAP ? rval : a[0];
        hi[n] = lo[n] + page_up(a[1]);
        n++;
    }
    if (nr == NR_MREMAP) {
        lo[n] = rval;
        hi[n] = rval + page_up(a[2]);
        n++;
    }
    if (n)
        sp->map_gen++;
    for (int k = 0; k < n; k++) {
        whole_unmapped(sp->id, lo[k], hi[k]);
        for (size_t i = 0; i < sp->nbps;)
            if (sp->bps[i].addr >= lo[k] && sp->bps[i].addr < hi[k])
                sp->bps[i] = sp->bps[--sp->nbps];
            else
                i++;
    }
}

/* A single-stepped SYSCALL has no syscall-entry or -exit stop (those come
 * with PTRACE_SYSCALL only), so what those stops do is done around the
 * step: before it, note_syscall_step (whole.c's entry bookkeeping: an
 * executable mapping made by JIT code or in a stepped region becomes a
 * closed JIT region like any other); at the thread's first stop after it
 * has returned, syscall_step_done (R11 mended, trapflag.c; whole.c's exit
 * bookkeeping).  A stop before it ran (a signal came first: RIP still at
 * it) undoes the entry bookkeeping; the syscall is noted again when it is
 * stepped after the handler (its frame holds the program's arguments).
 * Only a step that delivers no signal is noted (with one, the handler runs
 * first).  rt_sigreturn is left alone: it loads R11 from the signal frame
 * and maps nothing. */
static void note_syscall_step(struct thread *t, const struct user_regs_struct *r)
{
    t->syscall_rip = r->rax == NR_RT_SIGRETURN ? 0 : r->rip;
    t->syscall_whole = false;
    if (!t->syscall_rip || !t->sp)
        return;
    const uint64_t args[6] = {r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9};
    t->sc_nr = r->rax;
    memcpy(t->sc_args, args, sizeof t->sc_args);
    whole_sys_enter(t->sp->id, t->tid, r->rax, args, r->rip + 2);
    t->syscall_whole = true;
}

static void syscall_step_done(struct thread *t)
{
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, t->tid, NULL, &r))
        return;
    if (!syscall_returned(&r, t->syscall_rip)) {
        if (r.rip != t->syscall_rip)
            return; /* not yet: ask again at the next stop */
        if (t->syscall_whole)
            whole_sys_cancel(t->tid);
        n_syscall_undone++;
        t->syscall_rip = 0;
        t->syscall_whole = false;
        return;
    }
    t->syscall_rip = 0;
    if (syscall_r11_mend(&r) && ptrace(PTRACE_SETREGS, t->tid, NULL, &r) == 0)
        n_r11_mended++;
    if (r.rax < (uint64_t)-4095)
        space_replaced(t->sp, t->sc_nr, t->sc_args, r.rax);
    t->sc_nr = (uint64_t)-1;
    if (t->syscall_whole) {
        t->syscall_whole = false;
        if (whole_sys_exit(t->sp->id, t->tid, (int64_t)r.rax, r.rax >= (uint64_t)-4095))
            merge_maps(t->sp, t->tid);
    }
}

/* Execute the original instruction under a breakpoint once (restore the
 * byte, single-step, re-arm).  Other threads of the process could pass the
 * site unseen meanwhile; used for XGETBV with ECX != 0 and for a function
 * region's entry instruction.  A PUSHF there is run, not stepped, and a
 * stepped POPF is followed by the reset of trapflag.c. */
static void step_over(struct thread *t, struct bp *b)
{
    const struct rec *code = rec_at(t, b->addr);
    uint8_t op;
    unsigned width;
    size_t flen = flags_insn_form(code->bytes, code->len, &op, &width);
    if (flen && op == OP_PUSHF) {
        struct user_regs_struct r;
        get_regs(t->tid, &r);
        if (run_pushf(t, &r, flen, width))
            return;
    }
    bool popf = flen && op == OP_POPF;
    if (rec_is(code, OP_SYSCALL, 2)) {
        struct user_regs_struct r;
        get_regs(t->tid, &r);
        note_syscall_step(t, &r);
    }
    poke_byte(t->tid, b->addr, b->orig);
    if (ptrace(PTRACE_SINGLESTEP, t->tid, NULL, NULL) == 0)
        (void)wait_tid(t->tid);
    poke_byte(t->tid, b->addr, 0xcc);
    if (t->syscall_rip)
        syscall_step_done(t);
    if (popf && whole_step_reset(t->sp->id, t->tid))
        n_popf_reset++;
}

/* Handle the breakpoint at r->rip (RIP already points at the site). */
static void func_site(struct thread *t, struct bp *b, struct user_regs_struct *r);

static void run_site(struct thread *t, struct bp *b, struct user_regs_struct *r)
{
    if (whole_enabled && b->kind != SITE_MARK && b->kind != SITE_FUNC) {
        const struct rec *code = rec_at(t, b->addr);
        whole_note(t->sp->id, b->addr, code->bytes, code->len);
    }
    switch (b->kind) {
    case SITE_CPUID:
        emulate_cpuid(t->tid, r);
        break;
    case SITE_XGETBV:
        if ((uint32_t)r->rcx == 0) {
            emulate_xgetbv(t->tid, r);
        } else {
            step_over(t, b);
            get_regs(t->tid, r);
        }
        break;
    case SITE_MARK:
        r->rip += 3;
        set_regs(t->tid, r);
        if ((uint32_t)r->rbx == MARK_START && !t->stepping && !truncated) {
            n_regions++;
            start_stepping(t);
        } else if ((uint32_t)r->rbx == MARK_STOP) {
            t->stepping = false;
        }
        break;
    case SITE_FUNC:
        func_site(t, b, r);
        break;
    }
}

/* ---- function regions ----------------------------------------------------------- */
/* A call of a named function (site func, at its entry): a thread not yet
 * stepping starts a region that ends when this call returns (RIP back at the
 * return address with the caller's RSP); calls met while stepping are part of
 * the region already.  The entry instruction itself runs with the original
 * byte restored for one step and is counted. */
static void func_site(struct thread *t, struct bp *b, struct user_regs_struct *r)
{
    set_regs(t->tid, r); /* RIP at the entry (a breakpoint stop left it past the int3) */
    if (!t->stepping && !truncated) {
        errno = 0;
        long ret = ptrace(PTRACE_PEEKDATA, t->tid, (void *)r->rsp, NULL);
        if (!errno) {
            t->func_ret = (uint64_t)ret;
            t->func_rsp = r->rsp + 8;
            n_regions++;
            start_stepping(t);
        }
    }
    step_over(t, b);
    if (t->stepping)
        commit(t, b->addr);
    get_regs(t->tid, r);
}

/* Whether the stepping thread t at rip has returned from its function
 * region's call (only looked at when rip is the return address). */
static bool func_region_done(struct thread *t, uint64_t rip)
{
    if (!t->func_ret || rip != t->func_ret)
        return false;
    errno = 0;
    uint64_t rsp = (uint64_t)ptrace(PTRACE_PEEKUSER, t->tid,
                                    (void *)offsetof(struct user_regs_struct, rsp), NULL);
    if (errno || rsp != t->func_rsp)
        return false;
    t->func_ret = t->func_rsp = 0;
    return true;
}

/* Resume a stopped thread: single-step when it is in a marked region, else
 * run to the next syscall stop.  A step already in flight (the thread was
 * stopped by an event or a signal before the step completed) is continued,
 * not restarted: its instruction is counted once, when it completes.
 *
 * Before a new step the instruction at RIP is looked at: marks and armed
 * sites are handled as at a breakpoint, and a CPUID or XGETBV(0) is
 * emulated wherever it is (unlisted images, dlopen'd or JIT code): stepped
 * code never sees the host's CPUID, in either CPUID mode. */
static void resume(struct thread *t, int sig)
{
    while (t->stepping) {
        if (t->pending) {
            if (sig)
                t->sig_injected = true;
            ptrace(PTRACE_SINGLESTEP, t->tid, NULL, (void *)(long)sig);
            return;
        }
        if (n_steps >= max_steps) {
            truncated = true;
            for (size_t i = 0; i < nthreads; i++)
                threads[i]->stepping = false;
            break;
        }
        struct user_regs_struct r;
        errno = 0;
        uint64_t rip = (uint64_t)ptrace(PTRACE_PEEKUSER, t->tid,
                                        (void *)offsetof(struct user_regs_struct, rip), NULL);
        if (errno)
            return; /* thread vanished; its exit is reported by waitpid */
        if (func_region_done(t, rip)) {
            t->stepping = false;
            break;
        }
        struct bp *b = find_bp(t->sp, rip);
        if (b) {
            get_regs(t->tid, &r);
            if (b->kind != SITE_MARK && b->kind != SITE_FUNC) /* a mark is not counted;
                                                                func_site counts its own */
                commit(t, rip);
            run_site(t, b, &r);
            continue;
        }
        const struct rec *code = rec_at(t, rip);
        if (rec_is(code, OP_CPUID, 2)) {
            get_regs(t->tid, &r);
            commit(t, rip);
            emulate_cpuid(t->tid, &r);
            n_cpuid_stepped++;
            continue;
        }
        if (rec_is(code, OP_XGETBV, 3)) {
            get_regs(t->tid, &r);
            if ((uint32_t)r.rcx == 0) {
                commit(t, rip);
                emulate_xgetbv(t->tid, &r);
                n_xgetbv_stepped++;
                continue;
            }
        }
        uint8_t op;
        unsigned width;
        size_t flen = flags_insn_form(code->bytes, code->len, &op, &width);
        if (flen && op == OP_PUSHF) {
            get_regs(t->tid, &r);
            if (run_pushf(t, &r, flen, width)) {
                commit(t, rip);
                continue;
            }
        }
        if (tzcnt_note(t->tid, t->sp->id, rip, code->bytes, code->len)) {
            commit(t, rip); /* run as BSF, as the model does */
            continue;
        }
        if (!sig && block_enter(t, rip))
            return;
        t->exec_map = false;
        t->syscall_rip = 0;
        if (rec_is(code, OP_SYSCALL, 2)) {
            /* a syscall: an executable mapping made inside the region gets
             * its sites armed and its maps lines read once it returns */
            get_regs(t->tid, &r);
            t->exec_map = may_map_code(r.rax) && (r.rdx & PROT_EXEC_BIT);
            if (!sig)
                note_syscall_step(t, &r);
        }
        t->pending = true;
        t->pending_rip = rip;
        t->sig_injected = sig != 0;
        t->popf_stepped = flen && op == OP_POPF;
        ptrace(PTRACE_SINGLESTEP, t->tid, NULL, (void *)(long)sig);
        return;
    }
    t->pending = false;
    /* a thread in JIT code (whole mode) steps until it leaves it */
    ptrace(whole_jit_active(t->tid) ? PTRACE_SINGLESTEP : PTRACE_SYSCALL, t->tid, NULL,
           (void *)(long)sig);
}

/* Whole mode: a stop of a thread that steps in JIT code (whole.c).  A thread
 * stepping a region records its own instructions: only JIT bookkeeping, and
 * false (the caller handles the stop as usual).  Else the instruction at RIP
 * is recorded (CPUID / XGETBV(0) emulated, as when stepping a region) and
 * true: resume the thread. */
static bool jit_stop(struct thread *t)
{
    struct user_regs_struct r;
    get_regs(t->tid, &r);
    if (t->stepping) {
        whole_jit_visit(t->sp->id, t->tid, r.rip, false);
        return false;
    }
    for (;;) {
        int v = whole_jit_visit(t->sp->id, t->tid, r.rip, true);
        if (v == 2) {
            emulate_cpuid(t->tid, &r);
            n_cpuid_stepped++;
        } else if (v == 3 && (uint32_t)r.rcx == 0) {
            emulate_xgetbv(t->tid, &r);
            n_xgetbv_stepped++;
        } else if (v == 4) {
            uint8_t code[15], op;
            unsigned width;
            size_t flen = flags_insn_form(code, read_mem(t->tid, r.rip, code, sizeof code), &op,
                                          &width);
            if (!flen || !run_pushf(t, &r, flen, width))
                return true;
        } else if (v == 6) {
            get_regs(t->tid, &r); /* a TZCNT of zero ran as BSF (tzcnt.c) */
        } else {
            t->popf_stepped = v == 5;
            if (v == 7)
                note_syscall_step(t, &r);
            return true;
        }
    }
}

/* Whole mode: a SIGSEGV that is a jump into closed JIT code opens it (the
 * signal is dropped) and the thread steps there. */
static bool jit_enter(struct thread *t)
{
    struct user_regs_struct r;
    get_regs(t->tid, &r);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    ptrace(PTRACE_GETSIGINFO, t->tid, NULL, &si);
    uint64_t at = (uint64_t)(uintptr_t)si.si_addr;
    bool fetch = si.si_code == SEGV_ACCERR && at >= r.rip && at < r.rip + 15;
    if (!whole_jit_enter(t->sp->id, t->tid, r.rip, fetch))
        return false;
    if (!t->stepping)
        jit_stop(t);
    return true;
}

/* The step in flight completed (a step trap): count its instruction. */
static void step_completed(struct thread *t)
{
    if (!t->pending)
        return;
    t->pending = false;
    if (t->stepping)
        commit(t, t->pending_rip);
    if (t->exec_map) {
        t->exec_map = false;
        arm_space(t->sp, t->tid);
        merge_maps(t->sp, t->tid);
    }
}

/* ---- block stepping -------------------------------------------------------------- */
/* Instead of a single step at `rip`: when rip is an instruction of a known
 * block with at least two instructions before its end E, run the thread to
 * an int3 on E (see blocks.c).  Only while t is the one traced thread (the
 * temporary int3 would be met by any other thread of the memory), and only
 * when the region's step budget covers the instructions before E, so that
 * --max-steps truncates at exactly the same instruction as single steps. */
static bool block_enter(struct thread *t, uint64_t rip)
{
    if (!use_blocks || nthreads != 1 || blocks_active_tid())
        return false;
    size_t before = 0;
    const uint8_t *lens = NULL;
    uint64_t end = blocks_find(t->sp->id, rip, &before, &lens);
    if (!end || before < 2 || n_steps + before > max_steps)
        return false;
    /* an armed site on E stops the thread there by itself */
    if (!blocks_begin(t->tid, rip, end, lens, find_bp(t->sp, end) == NULL))
        return false;
    ptrace(PTRACE_SYSCALL, t->tid, NULL, NULL);
    return true;
}

static void block_commit(void *ctx, uint64_t addr)
{
    commit((struct thread *)ctx, addr);
}

/* A stop of the thread running a block.  At the int3 on E: count the
 * instructions before E, put RIP back on E and resume (E is then stepped or
 * handled as a site, as without blocks); true.  Any other stop (a signal):
 * count the instructions before the stop's RIP and return false, the caller
 * handles the stop as a stop of a thread stepping with no step in flight.
 * The bytes of E are restored before counting: an instruction's bytes are
 * read when first counted and must not show our int3. */
static bool block_stop(struct thread *t, int st)
{
    struct user_regs_struct r;
    get_regs(t->tid, &r);
    uint64_t end = blocks_active_end();
    int sig = WSTOPSIG(st);
    bool at_end = false;
    if (sig == SIGTRAP && ((unsigned)st >> 16) == 0 && r.rip == end + 1) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        ptrace(PTRACE_GETSIGINFO, t->tid, NULL, &si);
        at_end = si.si_code == SI_KERNEL;
    }
    if (!blocks_unplant())
        die("cannot restore the code at %" PRIx64 " after a block: %s", end, strerror(errno));
    uint64_t stop = at_end ? end : (uint64_t)r.rip;
    bool left = sig == (SIGTRAP | 0x80) || ((unsigned)st >> 16) != 0;
    if (left || !blocks_each_before(stop, block_commit, t))
        die("thread %d left a straight-line block at %llx (block end %" PRIx64
            "): the image does not run as it was decoded; rerun with --no-blocks "
            "(sdematrix: SDEMATRIX_PTRACE_BLOCKS=0)",
            (int)t->tid, r.rip, end);
    if (!at_end)
        return false;
    r.rip = end;
    set_regs(t->tid, &r);
    resume(t, 0);
    return true;
}

/* ---- output ----------------------------------------------------------------------- */
static int cmp_rec(const void *x, const void *y)
{
    const struct rec *a = x, *b = y;
    if (a->space != b->space)
        return a->space < b->space ? -1 : 1;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void write_output(const char *path, int exit_kind, int exit_val)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "vc-tracer-output 1\n");
    fprintf(f, "cpuid_mode %s\n",
            n_inject_ok ? (n_inject_fail ? "mixed" : "fault") : "bp");
    fprintf(f, "inject %" PRIu64 " ok %" PRIu64 " failed last_rc %ld\n", n_inject_ok,
            n_inject_fail, last_inject_rc);
    fprintf(f, "cpuid_answered %" PRIu64 "\n", n_cpuid);
    fprintf(f, "xgetbv_emulated %" PRIu64 "\n", n_xgetbv);
    fprintf(f, "steps %" PRIu64 "\n", n_steps);
    fprintf(f, "regions %" PRIu64 "\n", n_regions);
    fprintf(f, "truncated %d\n", truncated ? 1 : 0);
    fprintf(f, "threads_stepped %" PRIu64 "\n", n_threads_stepped);
    fprintf(f, "cpuid_stepped %" PRIu64 "\n", n_cpuid_stepped);
    fprintf(f, "xgetbv_stepped %" PRIu64 "\n", n_xgetbv_stepped);
    fprintf(f, "pushf_run %" PRIu64 "\n", n_pushf_run);
    fprintf(f, "popf_reset %" PRIu64 "\n", n_popf_reset);
    fprintf(f, "syscall_r11_mended %" PRIu64 "\n", n_r11_mended);
    fprintf(f, "syscall_steps_undone %" PRIu64 "\n", n_syscall_undone);
    fprintf(f, "uprobe_steps %" PRIu64 "\n", n_uprobe_steps);
    fprintf(f, "uprobe_trampoline_steps %" PRIu64 "\n", n_uprobe_tramp);
    for (size_t i = 0; i < nprobed_sites; i++) {
        const struct probed_site *p = &probed_sites[i];
        fprintf(f, "site_probed %d %s %" PRIx64 " %" PRIx64 " %s\n", p->space,
                site_kind_names[p->site->kind], p->addr, p->site->off, p->site->path);
    }
    blocks_write_stats(f);
    for (size_t i = 0; i < nspaces; i++)
        fprintf(f, "space %d %d bps %zu fault %d\n", spaces[i]->id, (int)spaces[i]->tgid,
                spaces[i]->nbps, spaces[i]->fault ? 1 : 0);
    for (size_t i = 0; i < nunscanned; i++)
        fprintf(f, "unscanned %s\n", unscanned[i]);
    for (size_t i = 0; i < nspaces; i++)
        if (spaces[i]->maps)
            fprintf(f, "maps %d %d\n%sendmaps\n", spaces[i]->id, (int)spaces[i]->tgid,
                    spaces[i]->maps);
    size_t n = 0;
    struct rec *list = xrealloc(NULL, (nrecs ? nrecs : 1) * sizeof *list);
    for (size_t i = 0; i < caprecs; i++)
        if (recs[i].used && recs[i].count)
            list[n++] = recs[i];
    qsort(list, n, sizeof *list, cmp_rec);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "insn %d %" PRIx64 " %" PRIu64 " ", list[i].space, list[i].addr,
                list[i].count);
        for (size_t k = 0; k < list[i].len; k++)
            fprintf(f, "%02x", list[i].bytes[k]);
        fputc('\n', f);
    }
    free(list);
    whole_write(f, profile_asked());
    tzcnt_write(f);
    if (last_sigill.have) {
        fprintf(f, "sigill %d %" PRIx64 " ", last_sigill.space, last_sigill.addr);
        for (size_t k = 0; k < last_sigill.len; k++)
            fprintf(f, "%02x", last_sigill.bytes[k]);
        fputc('\n', f);
    }
    fprintf(f, "exit %s %d\n", exit_kind == 0 ? "code" : "signal", exit_val);
    fprintf(f, "end\n");
    if (fclose(f))
        die("cannot write %s: %s", path, strerror(errno));
}

/* ---- host CPUID ------------------------------------------------------------------ */
static uint64_t host_xcr0(void)
{
    unsigned a, b, c, d;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) /* no OSXSAVE: XGETBV would fault */
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void print_leaf(uint32_t leaf, uint32_t sub)
{
    unsigned a, b, c, d;
    __cpuid_count(leaf, sub, a, b, c, d);
    if (sub && !(a | b | c | d))
        return;
    printf("cpuid %x %x %x %x %x %x\n", leaf, sub, a, b, c, d);
}

/* --host-profile: this CPU as a profile (every basic and extended leaf, the
 * first 64 subleaves of subleaf-indexed ones, XCR0): running a program under
 * it answers every CPUID as the host would. */
static int print_host_profile(void)
{
    unsigned max_basic, max_ext, b, c, d;
    __cpuid(0, max_basic, b, c, d);
    __cpuid(0x80000000u, max_ext, b, c, d);
    for (uint32_t l = 0; l <= max_basic && l < 0x100; l++)
        for (uint32_t s = 0; s < (profile_subleaf_indexed(l) ? 64u : 1u); s++)
            print_leaf(l, s);
    for (uint32_t l = 0x80000000u; l <= max_ext && l < 0x80000100u; l++)
        for (uint32_t s = 0; s < (profile_subleaf_indexed(l) ? 64u : 1u); s++)
            print_leaf(l, s);
    printf("xcr0 %" PRIx64 "\n", host_xcr0());
    return 0;
}

/* --print-cpuid: what this process sees (leaves 0 and 1, XGETBV(0)) in the
 * profile's format: the backend's self-test runs it under the tracer and
 * compares with the profile it gave. */
static int print_seen_cpuid(void)
{
    print_leaf(0, 0);
    print_leaf(1, 0);
    printf("xcr0 %" PRIx64 "\n", host_xcr0());
    return 0;
}

/* ---- main loop --------------------------------------------------------------------- */
static void usage(void)
{
    fputs("usage: vc-tracer --profile FILE --out FILE [--max-steps N] "
          "[--cpuid-mode auto|fault|bp] [--whole] [--jit-converge N] [--no-blocks] "
          "-- prog args...\n"
          "       vc-tracer --host-profile | --print-cpuid | --version\n",
          stderr);
    exit(2);
}

/* A syscall stop: note mmap/mprotect with PROT_EXEC on entry; on exit arm
 * any newly mapped image; finish a pending exec (inject + arm). */
static void on_syscall_stop(struct thread *t)
{
    struct ptrace_syscall_info info;
    memset(&info, 0, sizeof info);
    if (ptrace(PTRACE_GET_SYSCALL_INFO, t->tid, (void *)sizeof info, &info) <= 0)
        return;
    if (info.op == PTRACE_SYSCALL_INFO_ENTRY) {
        t->sc_nr = info.entry.nr;
        t->sc_prot = may_map_code(info.entry.nr) ? info.entry.args[2] : 0;
        for (int k = 0; k < 4; k++)
            t->sc_args[k] = info.entry.args[k];
        if (t->sp) /* whole mode's JIT bookkeeping; in every mode its `syscall` */
            whole_sys_enter(t->sp->id, t->tid, info.entry.nr, (const uint64_t *)info.entry.args,
                            info.instruction_pointer);
    } else if (info.op == PTRACE_SYSCALL_INFO_EXIT) {
        if (t->sp && !t->exec_pending && !info.exit.is_error)
            space_replaced(t->sp, t->sc_nr, t->sc_args, (uint64_t)info.exit.rval);
        if (whole_enabled && t->sp && !t->exec_pending)
            if (whole_sys_exit(t->sp->id, t->tid, info.exit.rval, info.exit.is_error))
                merge_maps(t->sp, t->tid); /* a JIT region moved (mremap) */
        if (t->exec_pending) {
            t->exec_pending = false;
            if (!info.exit.is_error)
                setup_exec(t);
        } else if (may_map_code(t->sc_nr) && (t->sc_prot & PROT_EXEC_BIT) &&
                   !info.exit.is_error) {
            arm_space(t->sp, t->tid);
        }
        t->sc_nr = (uint64_t)-1;
    }
}

struct options {
    const char *profile, *out;
};

/* The command line.  Returns the index of the program to run in argv; an
 * option that is the whole job (--version, --host-profile, --print-cpuid)
 * sets *exit_now to the exit status instead (returns -1). */
static int parse_args(int argc, char **argv, struct options *o, int *exit_now)
{
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            o->profile = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            o->out = argv[++i];
        } else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) {
            max_steps = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--cpuid-mode") && i + 1 < argc) {
            const char *m = argv[++i];
            want_mode = !strcmp(m, "fault") ? MODE_FAULT : !strcmp(m, "bp") ? MODE_BP : MODE_AUTO;
            if (strcmp(m, "fault") && strcmp(m, "bp") && strcmp(m, "auto"))
                usage();
        } else if (!strcmp(argv[i], "--whole")) {
            whole_enabled = true;
        } else if (!strcmp(argv[i], "--jit-converge") && i + 1 < argc) {
            whole_jit_set_converge(strtoull(argv[++i], NULL, 0));
        } else if (!strcmp(argv[i], "--no-blocks")) {
            use_blocks = false;
        } else if (!strcmp(argv[i], "--version")) {
            puts("vc-tracer 1");
            *exit_now = 0;
            return -1;
        } else if (!strcmp(argv[i], "--host-profile") && argc == 2) {
            *exit_now = print_host_profile();
            return -1;
        } else if (!strcmp(argv[i], "--print-cpuid") && argc == 2) {
            *exit_now = print_seen_cpuid();
            return -1;
        } else {
            usage();
        }
    }
    if (!o->profile || !o->out || i >= argc)
        usage();
    return i;
}

/* fork + PTRACE_TRACEME + exec prog; the child stops at the exec. */
static pid_t spawn_traced(char **prog)
{
    pid_t child = fork();
    if (child < 0)
        die("fork: %s", strerror(errno));
    if (child == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL)) {
            fprintf(stderr, "vc-tracer: PTRACE_TRACEME: %s\n", strerror(errno));
            _exit(126);
        }
        execvp(prog[0], prog);
        fprintf(stderr, "vc-tracer: cannot run %s: %s\n", prog[0], strerror(errno));
        _exit(127);
    }
    return child;
}

/* Wait for the child's exec stop and start tracing it (events, syscall
 * stops; its exec is set up like every later one).  false when the exec
 * failed: *code is then the child's exit status. */
static bool attach_at_exec(pid_t child, int *code)
{
    int st;
    if (waitpid(child, &st, 0) != child)
        die("waitpid: %s", strerror(errno));
    if (!WIFSTOPPED(st)) {
        /* exec failed: the child already said why */
        *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
    }
    long opts = PTRACE_O_EXITKILL | PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEEXEC |
                PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;
    if (ptrace(PTRACE_SETOPTIONS, child, NULL, (void *)opts))
        die("PTRACE_SETOPTIONS: %s", strerror(errno));
    struct thread *root = add_thread(child, NULL);
    root->new_stop_seen = true;
    setup_exec(root);
    resume(root, 0);
    return true;
}

/* How the traced program ended: exit status (kind 0) or signal (kind 1). */
struct program_end {
    int kind, val;
};

/* A thread exited or was killed (t may be NULL: never seen stopped). */
static void on_thread_gone(struct thread *t, pid_t pid, int st, pid_t child,
                           struct program_end *end)
{
    if (blocks_active_tid() == pid)
        blocks_forget(); /* killed inside a block: its memory is gone */
    /* A thread that ends while stepping its exit / exit_group syscall did
     * run it; any other pending step did not run. */
    if (t && t->pending && t->stepping && WIFEXITED(st)) {
        const struct rec *code = rec_at(t, t->pending_rip);
        if (rec_is(code, OP_SYSCALL, 2))
            commit(t, t->pending_rip);
    }
    if (pid == child) {
        end->kind = WIFEXITED(st) ? 0 : 1;
        end->val = WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st);
        /* The traced program is done: anything it left running (a forked
         * helper) is not part of the measurement and would otherwise hold
         * the cell until its timeout.  Kill it; the loop reaps it. */
        for (size_t i = 0; i < nthreads; i++)
            if (threads[i]->tid != pid)
                kill(threads[i]->tid, SIGKILL);
    }
    remove_thread(pid);
}

/* A PTRACE_EVENT_* stop (exec, clone, fork, vfork). */
static void on_ptrace_event(struct thread *t, pid_t pid, unsigned event)
{
    unsigned long msg = 0;
    ptrace(PTRACE_GETEVENTMSG, pid, NULL, &msg);
    if (event == PTRACE_EVENT_EXEC) {
        /* other threads of the old image are gone; if a non-leader exec'd,
         * its tid became the leader's.  The execve ran. */
        if (t->pending && t->stepping)
            commit(t, t->pending_rip);
        t->pending = false;
        t->exec_pending = true;
        t->stepping = false;
        t->syscall_rip = 0; /* a new image: its registers are fresh */
        t->syscall_whole = false;
    } else if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK ||
               event == PTRACE_EVENT_VFORK) {
        /* The new thread or process starts where its creator is: in a
         * region if the creator steps.  A thread shares the creator's
         * space; a process gets a copy (same memory image, same int3s). */
        pid_t ntid = (pid_t)msg;
        struct thread *c = find_thread(ntid);
        if (!c)
            c = add_thread(ntid, NULL);
        if (!c->sp) {
            pid_t tg = tgid_of(ntid);
            c->sp = tg == t->sp->tgid ? t->sp : new_space(tg, t->sp);
        }
        c->creator_seen = true;
        if (t->stepping && !truncated)
            start_stepping(c);
        /* the new thread returns from the creator's stepped SYSCALL with a
         * copy of its R11 (the creator's is mended below, after the copy) */
        c->syscall_rip = t->syscall_rip;
        c->syscall_whole = false;
        if (c->held) {
            c->held = false;
            if (c->syscall_rip)
                syscall_step_done(c);
            resume(c, 0);
        }
    }
    if (t->syscall_rip)
        syscall_step_done(t);
    resume(t, 0); /* continues the step in flight (clone, fork...) */
}

/* A SIGTRAP that is ours (a breakpoint, a first-visit int3, a completed
 * step, a JIT step, a signal frame while stepping): handled and resumed,
 * true; false: the program's own, to deliver. */
static bool on_sigtrap(struct thread *t, pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    ptrace(PTRACE_GETSIGINFO, pid, NULL, &si);
    if (si.si_code == TRAP_TRACE && t->popf_stepped) {
        /* the POPF stepped: the kernel's claim on TF is gone (trapflag.c) */
        t->popf_stepped = false;
        if (t->sp && whole_step_reset(t->sp->id, pid))
            n_popf_reset++;
    }
    if (si.si_code != SI_KERNEL && whole_jit_active(pid) && jit_stop(t)) {
        resume(t, 0);
        return true;
    }
    if (si.si_code == SI_KERNEL) { /* int3: one of our breakpoints? */
        struct user_regs_struct r;
        get_regs(pid, &r);
        struct bp *b = find_bp(t->sp, r.rip - 1);
        if (b) {
            r.rip -= 1;
            run_site(t, b, &r);
            resume(t, 0);
            return true;
        }
        int w = whole_trap(t->sp->id, pid, r.rip - 1, t->stepping);
        if (w) {
            if (w == 1) {
                r.rip -= 1; /* first visit: the original byte is back */
                set_regs(pid, &r);
            }
            resume(t, 0);
            return true;
        }
    } else if ((si.si_code == TRAP_TRACE || si.si_code == TRAP_BRKPT) && t->pending) {
        /* The step completed: a step over `syscall` reports TRAP_BRKPT (the
         * kernel's syscall-exit step report), others TRAP_TRACE. */
        step_completed(t);
        resume(t, 0);
        return true;
    } else if (si.si_code == SI_USER && t->pending && probed_at(t, t->pending_rip)) {
        /* The step ran an instruction under a kernel uprobe: the kernel
         * took the int3, ran the probed instruction out of line (in the
         * [uprobes] page) and reports the step with a SIGTRAP of its own
         * (send_sig, SI_USER) instead of a step trap.  Delivered, it killed
         * the program (exit 133). */
        n_uprobe_steps++;
        step_completed(t);
        resume(t, 0);
        return true;
    } else if (si.si_code == SIGTRAP && t->pending && t->sig_injected) {
        /* The step delivered a signal: the kernel built the handler's frame
         * and stops at the handler's first instruction (ptrace_notify from
         * signal delivery, si_code SIGTRAP).  The interrupted instruction
         * has not run; it runs (and is counted) after the handler returns. */
        t->pending = false;
        resume(t, 0);
        return true;
    } else if (si.si_code == TRAP_TRACE) {
        resume(t, 0); /* a stray step trap after the region ended */
        return true;
    }
    return false;
}

/* A SIGSEGV under CPUID faulting: when it is a CPUID, answer it from the
 * profile and resume (true); false: the program's own fault. */
static bool on_cpuid_fault(struct thread *t, pid_t pid)
{
    struct user_regs_struct r;
    get_regs(pid, &r);
    uint8_t code[2];
    if (read_mem(pid, r.rip, code, 2) != 2 || code[0] != 0x0f || code[1] != 0xa2)
        return false;
    /* if it was a step in flight, it completes here */
    if (t->pending && t->pending_rip == r.rip) {
        t->pending = false;
        if (t->stepping)
            commit(t, r.rip);
    }
    emulate_cpuid(pid, &r);
    resume(t, 0);
    return true;
}

/* A SIGILL the program gets: where and what (the output's `sigill` line). */
static void note_sigill(struct thread *t, pid_t pid)
{
    struct user_regs_struct r;
    get_regs(pid, &r);
    const struct rec *code = rec_at(t, r.rip);
    last_sigill.have = true;
    last_sigill.space = t->sp->id;
    last_sigill.addr = r.rip;
    last_sigill.len = code->len;
    memcpy(last_sigill.bytes, code->bytes, code->len);
}

static void debug_signal(const struct thread *t, pid_t pid, int sig)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    ptrace(PTRACE_GETSIGINFO, pid, NULL, &si);
    struct user_regs_struct r;
    get_regs(pid, &r);
    fprintf(stderr, "vc-tracer: tid %d signal %d code %d at rip %llx (stepping %d)\n", (int)pid,
            sig, si.si_code, r.rip, t->stepping);
}

/* A signal-delivery stop of a known thread: ours (handled) or the
 * program's (delivered). */
static void on_signal_stop(struct thread *t, pid_t pid, int sig)
{
    if (sig == SIGSTOP && !t->new_stop_seen) {
        t->new_stop_seen = true; /* the automatic stop of a new tracee */
        resume(t, 0);
        return;
    }
    t->new_stop_seen = true;
    if (sig == SIGTRAP && on_sigtrap(t, pid))
        return;
    if (sig == SIGSEGV && whole_enabled && t->sp && jit_enter(t)) {
        resume(t, 0);
        return;
    }
    if (sig == SIGSEGV && t->sp && t->sp->fault && on_cpuid_fault(t, pid))
        return;
    if (getenv("VC_TRACER_DEBUG"))
        debug_signal(t, pid, sig);
    if (sig == SIGILL && t->sp)
        note_sigill(t, pid);
    resume(t, sig); /* any other signal: deliver it */
}

/* Every stop of every tracee until none is left; returns how the traced
 * program (child) ended. */
static struct program_end trace_until_done(pid_t child)
{
    struct program_end end = {0, 0};
    while (nthreads > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, __WALL);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        struct thread *t = find_thread(pid);
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            on_thread_gone(t, pid, st, child, &end);
            continue;
        }
        if (!WIFSTOPPED(st))
            continue;
        if (!t) {
            /* A new clone/fork child whose first stop beat its creator's
             * event: hold it stopped until the event says whether it was
             * created inside a region (and so must be stepped). */
            t = add_thread(pid, NULL);
            t->held = true;
            t->new_stop_seen = true;
            continue;
        }
        int sig = WSTOPSIG(st);
        unsigned event = (unsigned)st >> 16;
        if (t->syscall_rip && !event) /* events: on_ptrace_event */
            syscall_step_done(t);
        if (blocks_active_tid() == pid && block_stop(t, st))
            continue;
        if (event)
            on_ptrace_event(t, pid, event);
        else if (sig == (SIGTRAP | 0x80)) {
            on_syscall_stop(t);
            resume(t, 0);
        } else
            on_signal_stop(t, pid, sig);
    }
    return end;
}

int main(int argc, char **argv)
{
    struct options o = {NULL, NULL};
    int code = 0;
    int prog = parse_args(argc, argv, &o, &code);
    if (prog < 0)
        return code;
    profile_load(o.profile);
    {
        uint32_t max[4], l7[4] = {0};
        profile_answer_cpuid(0, 0, max);
        if (max[0] >= 7)
            profile_answer_cpuid(7, 0, l7);
        tzcnt_model((l7[1] >> 3) & 1); /* CPUID.(7,0):EBX bit 3 */
    }
    pid_t child = spawn_traced(argv + prog);
    if (!attach_at_exec(child, &code)) {
        write_output(o.out, 0, code);
        return code;
    }
    struct program_end end = trace_until_done(child);
    write_output(o.out, end.kind, end.val);
    return end.kind == 0 ? end.val : 128 + end.val;
}
