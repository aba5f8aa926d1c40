/*
 * vc-tracer whole-process mode (`--whole`): every distinct instruction that
 * runs in a file-backed image, in every thread and process, is recorded once.
 *
 * Mechanism: first-visit breakpoints.  The profile names, per image, a file
 * of instruction starts (`bounds BINFILE PATH`: little-endian uint32 file
 * offsets, sorted; computed by sdematrix.evidence.insn_bounds from the image's
 * .eh_frame function ranges and sized function symbols, decoded by linear
 * sweep inside each range only, so data between functions never gets an
 * int3).  When an image is mapped executable in a process (exec, ld.so,
 * dlopen), every start not yet seen anywhere gets an int3; the mapping is
 * read and written back whole through /proc/PID/mem (one pread + one pwrite
 * per mapping, not one POKE per byte).  A hit restores the original byte for
 * good, records (address, bytes) and re-runs the instruction: each
 * instruction traps once per process at most, and only once is recorded.
 *
 * Consequences the caller must know:
 *  - code that reads its own instruction bytes sees 0xCC at instruction
 *    starts not executed yet (checksumming its own text would differ);
 *  - a byte that is 0xCC in the file is never planted;
 *  - code outside the ranges (no FDE, no sized symbol), anonymous executable
 *    memory (JIT) and code rewritten in place are not seen; the output counts
 *    the anonymous executable mappings met so the report can say so;
 *  - a jump into the middle of a swept instruction runs that suffix unseen
 *    (the swept instruction is what is recorded, if it ever runs).
 * The CPUID / XGETBV / mark sites keep their own breakpoints (tracer.c):
 * their bytes differ from the file when planting here, so they are skipped,
 * and tracer.c reports their execution with whole_note().
 *
 * Images the profile does not list (dlopen'd modules, the programs a child
 * execs) are asked for while the program waits: with `ask REQFD RESPFD` in
 * the profile, the tracer (profile.c: profile_ask) writes the image's path
 * as one line to REQFD at the first executable mapping of it, and reads
 * profile records (`image`, `site`, `bounds`) from RESPFD up to a line `end`
 * (sdematrix.pipeline.exec_run's server computes them).  So one run covers every image with no second pass.
 *
 * Output lines (written by whole_write): `whole_planted N`, `whole_traps N`,
 * `whole_seen N`, `whole_anon_exec N`, `whole_nobounds PATH`, one
 * `probed SPACE ADDR FILEOFFSET HEXBYTES PATH` per instruction start under a
 * kernel uprobe that no stop saw run (see note_probed), then one
 * `seen SPACE ADDR HEXBYTES` per distinct instruction.
 */
#include "whole.h"

#include "profile.h"
#include "trapflag.h"
#include "tzcnt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

bool whole_enabled;

struct wimage {           /* one image file with boundary data */
    char *path;
    int fd;               /* the image file: original bytes */
    uint32_t *offs;       /* sorted instruction-start file offsets */
    size_t n;
    uint8_t *seen;        /* bitmap over offs: recorded already */
};

struct wmap {             /* an executable mapping of an image in one space */
    uint64_t lo, hi, off;
    struct wimage *img;
};

struct wspace {
    pid_t tgid;
    int memfd;
    struct wmap *maps;
    size_t nmaps;
    bool used;
};

struct wseen {            /* one recorded instruction */
    int space;
    uint64_t addr;
    uint8_t bytes[15];
    uint8_t len;
};

/* one allocation per image: mappings point at them while the image server
 * adds more (a realloc'd array would leave those pointers dangling) */
static struct wimage **wimgs;
static size_t nwimgs;
static struct wspace *wspaces;
static size_t nwspaces;
static struct wseen *wseen;
static size_t nwseen, capwseen;
static uint64_t n_planted, n_traps, n_anon_exec;
static char **nobounds;
static size_t nnobounds;

/* An open-addressed set of the (space, address, bytes) recorded through
 * whole_note for code without boundary data (stepped code, sites, JIT code).
 * The bytes are part of the key: a JIT that writes new code at an address it
 * ran before (a reused code-cache slot, a patched call) gets the new
 * instruction recorded too.  The bytes are the window read at the address
 * (up to 15), so a change in the bytes after a short instruction records it
 * again; the reader cuts each record to its instruction and keeps one per
 * (space, address, instruction) (evidence/exec_check.py). */
struct wnote {
    uint64_t addr;
    int32_t space1;       /* space + 1; 0: empty slot */
    uint8_t len;
    uint8_t bytes[15];
};
static struct wnote *noted;
static size_t capnoted, nnoted;


static void *wrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fputs("vc-tracer: out of memory\n", stderr);
        exit(125);
    }
    return q;
}

int whole_load_bounds(const char *rest)
{
    char bin[4096];
    int pos = 0;
    if (sscanf(rest, "%4095s %n", bin, &pos) != 1 || !pos)
        return -1;
    const char *path = rest + pos;
    FILE *f = fopen(bin, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size % 4) {
        fclose(f);
        return -1;
    }
    struct wimage im = {.path = strdup(path), .fd = open(path, O_RDONLY | O_CLOEXEC)};
    im.n = (size_t)st.st_size / 4;
    im.offs = wrealloc(NULL, im.n * 4);
    if (im.n && fread(im.offs, 4, im.n, f) != im.n) {
        fclose(f);
        return -1;
    }
    fclose(f);
    im.seen = calloc((im.n + 7) / 8 + 1, 1);
    if (!im.seen || im.fd < 0)
        return -1;
    struct wimage *one = wrealloc(NULL, sizeof *one);
    *one = im;
    wimgs = wrealloc(wimgs, (nwimgs + 1) * sizeof *wimgs);
    wimgs[nwimgs++] = one;
    return 0;
}

static void whole_jit_fork(int from, int to);
static void whole_jit_write(FILE *f);
static bool jit_take(int space, pid_t pid, uint64_t lo, uint64_t hi, const char *perms);

static struct wspace *wsp(int space)
{
    if ((size_t)space >= nwspaces) {
        size_t n = (size_t)space + 1;
        wspaces = wrealloc(wspaces, n * sizeof *wspaces);
        memset(wspaces + nwspaces, 0, (n - nwspaces) * sizeof *wspaces);
        for (size_t i = nwspaces; i < n; i++)
            wspaces[i].memfd = -1;
        nwspaces = n;
    }
    return &wspaces[space];
}

static int memfd_of(struct wspace *s, pid_t pid)
{
    if (s->memfd < 0) {
        char p[64];
        snprintf(p, sizeof p, "/proc/%d/mem", (int)pid);
        s->memfd = open(p, O_RDWR | O_CLOEXEC);
    }
    return s->memfd;
}

void whole_new_space(int space, pid_t tgid, int copy_from)
{
    struct wspace *s = wsp(space);
    if (s->memfd >= 0)
        close(s->memfd);
    free(s->maps);
    s->maps = NULL;
    s->nmaps = 0;
    s->memfd = -1;
    s->tgid = tgid;
    s->used = true;
    if (copy_from >= 0 && (size_t)copy_from < nwspaces) {
        /* a forked process: same memory image, same int3s still in place */
        struct wspace *c = &wspaces[copy_from];
        s = wsp(space); /* wsp may have moved the array */
        c = &wspaces[copy_from];
        if (c->nmaps) {
            s->maps = wrealloc(NULL, c->nmaps * sizeof *s->maps);
            memcpy(s->maps, c->maps, c->nmaps * sizeof *s->maps);
            s->nmaps = c->nmaps;
        }
        whole_jit_fork(copy_from, space);
    }
}

static struct wimage *image_named(const char *path)
{
    for (size_t i = 0; i < nwimgs; i++)
        if (!strcmp(wimgs[i]->path, path))
            return wimgs[i];
    return NULL;
}

static void note_nobounds(const char *path)
{
    for (size_t i = 0; i < nnobounds; i++)
        if (!strcmp(nobounds[i], path))
            return;
    nobounds = wrealloc(nobounds, (nnobounds + 1) * sizeof *nobounds);
    nobounds[nnobounds++] = strdup(path);
}

static bool seen_bit(const struct wimage *im, size_t i)
{
    return im->seen[i / 8] & (1u << (i % 8));
}

/* first index of offs >= v */
static size_t lower_bound(const struct wimage *im, uint64_t v)
{
    size_t lo = 0, hi = im->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (im->offs[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether file offset `off` of `path` is one of the profile's sites (CPUID
 * / XGETBV / mark / function), where tracer.c's own int3 may be. */
static bool is_site(const struct site *sites, size_t nsites, const char *path, uint64_t off)
{
    for (size_t k = 0; k < nsites; k++)
        if (sites[k].off == off && !strcmp(sites[k].path, path))
            return true;
    return false;
}

/* Instruction starts that held an int3 neither the file nor the tracer put
 * there when their mapping was planted: a kernel uprobe's.  The kernel
 * handles that int3 itself and runs the probed instruction out of line (in
 * the [uprobes] page), so no stop of ours ever sees it run; whole_write
 * lists those still unseen at the end (`probed`), and the report checks them
 * against the model from the file's bytes. */
struct wprobed {
    int space;
    uint64_t addr;
    struct wimage *img;
    size_t idx;           /* in img->offs */
};
static struct wprobed *wprobed;
static size_t nwprobed;

static void note_probed(const struct wspace *s, uint64_t addr, struct wimage *im, size_t i)
{
    int space = (int)(s - wspaces);
    for (size_t k = 0; k < nwprobed; k++)
        if (wprobed[k].space == space && wprobed[k].addr == addr)
            return;
    wprobed = wrealloc(wprobed, (nwprobed + 1) * sizeof *wprobed);
    wprobed[nwprobed++] = (struct wprobed){space, addr, im, i};
}

/* Plant int3s on the unseen instruction starts of one mapping.  `fresh`:
 * no int3 of ours can be in it yet (its memory is as mapped from the file),
 * so an int3 the file does not hold, away from the profile's `sites`, is a
 * uprobe's. */
static void plant(struct wspace *s, pid_t pid, struct wmap *m, bool fresh,
                  const struct site *sites, size_t nsites)
{
    struct wimage *im = m->img;
    size_t len = (size_t)(m->hi - m->lo);
    size_t first = lower_bound(im, m->off), last = lower_bound(im, m->off + len);
    if (first == last)
        return;
    int fd = memfd_of(s, pid);
    if (fd < 0)
        return;
    uint8_t *mem = malloc(len), *file = malloc(len);
    if (!mem || !file) {
        free(mem);
        free(file);
        return;
    }
    ssize_t got = pread(fd, mem, len, (off_t)m->lo);
    ssize_t fgot = pread(im->fd, file, len, (off_t)m->off);
    if (got <= 0 || fgot <= 0) {
        free(mem);
        free(file);
        return;
    }
    size_t have = (size_t)(got < fgot ? got : fgot);
    size_t lo_dirty = SIZE_MAX, hi_dirty = 0;
    for (size_t i = first; i < last; i++) {
        size_t rel = im->offs[i] - m->off;
        if (rel >= have || seen_bit(im, i))
            continue;
        if (fresh && mem[rel] == 0xcc && file[rel] != 0xcc &&
            !is_site(sites, nsites, im->path, im->offs[i]))
            note_probed(s, m->lo + rel, im, i);
        /* the mapping must hold the file's byte (a site's int3, a relocated
         * or rewritten byte: leave it alone); a file 0xCC is never ours */
        if (mem[rel] != file[rel] || file[rel] == 0xcc)
            continue;
        mem[rel] = 0xcc;
        n_planted++;
        if (rel < lo_dirty)
            lo_dirty = rel;
        hi_dirty = rel + 1;
    }
    if (hi_dirty > lo_dirty) {
        /* whole pages between the first and last change, in one write */
        size_t a = lo_dirty & ~(size_t)4095, b = (hi_dirty + 4095) & ~(size_t)4095;
        if (b > have)
            b = have;
        if (pwrite(fd, mem + a, b - a, (off_t)(m->lo + a)) != (ssize_t)(b - a))
            fprintf(stderr, "vc-tracer: cannot plant in %s: %s\n", im->path, strerror(errno));
    }
    free(mem);
    free(file);
}

/* Cut [lo, hi) out of the space's image mappings; true when any overlapped. */
static bool wmaps_cut(struct wspace *s, uint64_t lo, uint64_t hi)
{
    bool any = false;
    for (size_t i = 0; i < s->nmaps;) {
        struct wmap m = s->maps[i];
        if (m.hi <= lo || hi <= m.lo) {
            i++;
            continue;
        }
        any = true;
        s->maps[i] = s->maps[--s->nmaps]; /* order does not matter */
        struct wmap parts[2];
        size_t n = 0;
        if (m.lo < lo)
            parts[n++] = (struct wmap){m.lo, lo, m.off, m.img};
        if (hi < m.hi)
            parts[n++] = (struct wmap){hi, m.hi, m.off + (hi - m.lo), m.img};
        if (n) {
            s->maps = wrealloc(s->maps, (s->nmaps + n) * sizeof *s->maps);
            memcpy(s->maps + s->nmaps, parts, n * sizeof *parts);
            s->nmaps += n;
        }
    }
    return any;
}

void whole_arm(int space, pid_t pid, const struct site *sites, size_t nsites)
{
    struct wspace *s = wsp(space);
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    char line[4608];
    uint64_t anon = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8];
        int pos = 0;
        size_t n = strlen(line);
        while (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &lo, &hi, perms, &off, &pos) < 4)
            continue;
        if (perms[2] != 'x')
            continue;
        const char *path = pos ? line + pos : "";
        /* executable memory without instruction starts (anonymous, memfd,
         * a file the server has no starts for): a JIT region from now on,
         * stepped when it runs; uncovered only if that fails */
        struct wimage *im = NULL;
        if (path[0] != '/') {
            /* the kernel's own code; [uprobes] holds the copies of probed
             * instructions that the kernel runs out of line (uprobe_steps in
             * tracer.c): taking PROT_EXEC from it, which kernels without
             * sealed system mappings allow, breaks the probes */
            if (!strcmp(path, "[vdso]") || !strcmp(path, "[vsyscall]") ||
                !strcmp(path, "[uprobes]"))
                continue;
        } else if ((im = image_named(path)) == NULL) {
            note_nobounds(path);
        }
        if (!im || !im->n) {
            if (!jit_take(space, pid, lo, hi, perms))
                anon++;
            continue;
        }
        bool known = false;
        for (size_t i = 0; i < s->nmaps; i++)
            if (s->maps[i].lo == lo && s->maps[i].hi == hi && s->maps[i].off == off &&
                s->maps[i].img == im)
                known = true;
        if (known)
            continue;
        /* a new line replaces the parts of older ones it overlaps: the
         * same memory seen again (an mprotect split or joined its line;
         * memory that was replaced left the mappings in whole_unmapped),
         * with int3s planted already.  Only memory never planted is fresh
         * from the file. */
        bool fresh = !wmaps_cut(s, lo, hi);
        s->maps = wrealloc(s->maps, (s->nmaps + 1) * sizeof *s->maps);
        s->maps[s->nmaps] = (struct wmap){lo, hi, off, im};
        plant(s, pid, &s->maps[s->nmaps], fresh, sites, nsites);
        s->nmaps++;
    }
    fclose(f);
    if (anon > n_anon_exec)
        n_anon_exec = anon;
}

/* [lo, hi) no longer holds what the mappings recorded there held (munmap,
 * an mmap placed there, mremap): drop those parts.  A stale mapping would
 * name later code there by the unloaded image's bytes: JIT code written
 * where a dlclose'd library's text was, at one of its instruction starts
 * already seen, was taken for that instruction and never recorded. */
void whole_unmapped(int space, uint64_t lo, uint64_t hi)
{
    if ((size_t)space >= nwspaces || hi <= lo)
        return;
    wmaps_cut(&wspaces[space], lo, hi);
}


static struct wmap *map_at(struct wspace *s, uint64_t addr)
{
    for (size_t i = 0; i < s->nmaps; i++)
        if (s->maps[i].lo <= addr && addr < s->maps[i].hi)
            return &s->maps[i];
    return NULL;
}

static void record(int space, uint64_t addr, const uint8_t *bytes, size_t len)
{
    if (nwseen == capwseen)
        wseen = wrealloc(wseen, (capwseen = capwseen * 2 + 4096) * sizeof *wseen);
    struct wseen *w = &wseen[nwseen++];
    w->space = space;
    w->addr = addr;
    w->len = (uint8_t)(len > 15 ? 15 : len);
    memcpy(w->bytes, bytes, w->len);
}

/* The original bytes at addr (from the image file when it is in a mapping
 * with boundary data); returns how many were filled, 0 when not in one. */
static size_t file_bytes(struct wspace *s, uint64_t addr, uint8_t *buf, size_t n)
{
    struct wmap *m = map_at(s, addr);
    if (!m)
        return 0;
    if (addr + n > m->hi)
        n = (size_t)(m->hi - addr);
    ssize_t r = pread(m->img->fd, buf, n, (off_t)(m->off + (addr - m->lo)));
    return r > 0 ? (size_t)r : 0;
}

size_t whole_fix_bytes(int space, uint64_t addr, uint8_t *buf, size_t n)
{
    if (!whole_enabled || (size_t)space >= nwspaces)
        return 0;
    return file_bytes(&wspaces[space], addr, buf, n);
}

int whole_trap(int space, pid_t pid, uint64_t addr, bool stepping)
{
    if (!whole_enabled || (size_t)space >= nwspaces)
        return 0;
    struct wspace *s = &wspaces[space];
    struct wmap *m = map_at(s, addr);
    if (!m)
        return 0;
    struct wimage *im = m->img;
    uint64_t fo = m->off + (addr - m->lo);
    size_t i = lower_bound(im, fo);
    if (i >= im->n || im->offs[i] != fo)
        return 0;
    uint8_t orig[15];
    size_t n = file_bytes(s, addr, orig, sizeof orig);
    if (n == 0 || orig[0] == 0xcc)
        return 0; /* a genuine int3 of the program */
    int fd = memfd_of(s, pid);
    uint8_t cur;
    if (fd < 0 || pread(fd, &cur, 1, (off_t)addr) != 1)
        return 0;
    if (cur == 0xcc) {
        if (pwrite(fd, orig, 1, (off_t)addr) != 1)
            return 0;
        n_traps++;
    }
    /* else: another thread hit the same int3 and restored it first */
    if (!seen_bit(im, i)) {
        im->seen[i / 8] |= (uint8_t)(1u << (i % 8));
        record(space, addr, orig, n);
    }
    if (!stepping) { /* a stepping thread's step looks at it (tracer.c resume) */
        if (tzcnt_note(pid, space, addr, orig, n)) /* first visit: its source now */
            return 2;
    }
    return 1;
}

/* FNV-1a over the address, the space and the bytes */
static size_t noted_hash(const struct wnote *w)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < 8; k++)
        h = (h ^ ((w->addr >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    h = (h ^ (uint64_t)(uint32_t)w->space1) * 0x100000001b3ull;
    for (size_t k = 0; k < w->len; k++)
        h = (h ^ w->bytes[k]) * 0x100000001b3ull;
    return (size_t)(h ^ (h >> 29));
}

static bool note_same(const struct wnote *a, const struct wnote *b)
{
    return a->addr == b->addr && a->space1 == b->space1 && a->len == b->len &&
           !memcmp(a->bytes, b->bytes, a->len);
}

static void note_put(struct wnote *table, size_t cap, const struct wnote *w)
{
    size_t j = noted_hash(w) & (cap - 1);
    while (table[j].space1)
        j = (j + 1) & (cap - 1);
    table[j] = *w;
}

/* true when (space, addr, bytes) was not noted before (and notes it) */
static bool note_once(int space, uint64_t addr, const uint8_t *bytes, size_t len)
{
    if ((nnoted + 1) * 2 > capnoted) {
        size_t oldcap = capnoted;
        struct wnote *old = noted;
        capnoted = capnoted ? capnoted * 2 : 1024;
        noted = calloc(capnoted, sizeof *noted);
        if (!noted)
            exit(125);
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].space1)
                note_put(noted, capnoted, &old[i]);
        free(old);
    }
    struct wnote w = {.addr = addr, .space1 = space + 1, .len = (uint8_t)(len > 15 ? 15 : len)};
    memcpy(w.bytes, bytes, w.len);
    size_t j = noted_hash(&w) & (capnoted - 1);
    while (noted[j].space1) {
        if (note_same(&noted[j], &w))
            return false;
        j = (j + 1) & (capnoted - 1);
    }
    noted[j] = w;
    nnoted++;
    return true;
}

bool whole_note(int space, uint64_t addr, const uint8_t *bytes, size_t len)
{
    if (!whole_enabled || (size_t)space >= nwspaces)
        return false;
    struct wspace *s = &wspaces[space];
    struct wmap *m = map_at(s, addr);
    if (m) {
        uint64_t fo = m->off + (addr - m->lo);
        size_t i = lower_bound(m->img, fo);
        if (i < m->img->n && m->img->offs[i] == fo) {
            if (seen_bit(m->img, i))
                return false;
            m->img->seen[i / 8] |= (uint8_t)(1u << (i % 8));
            record(space, addr, bytes, len);
            return true;
        }
    }
    if (!note_once(space, addr, bytes, len))
        return false;
    record(space, addr, bytes, len);
    return true;
}

void whole_write(FILE *f, uint64_t asked)
{
    if (!whole_enabled)
        return;
    fprintf(f, "whole_planted %" PRIu64 "\n", n_planted);
    fprintf(f, "whole_traps %" PRIu64 "\n", n_traps);
    fprintf(f, "whole_seen %zu\n", nwseen);
    fprintf(f, "whole_anon_exec %" PRIu64 "\n", n_anon_exec);
    fprintf(f, "whole_asked %" PRIu64 "\n", asked);
    whole_jit_write(f);
    for (size_t i = 0; i < nnobounds; i++)
        fprintf(f, "whole_nobounds %s\n", nobounds[i]);
    for (size_t i = 0; i < nwprobed; i++) {
        const struct wprobed *p = &wprobed[i];
        if (seen_bit(p->img, p->idx)) /* stepped in a region after all */
            continue;
        uint8_t code[15];
        ssize_t n = pread(p->img->fd, code, sizeof code, (off_t)p->img->offs[p->idx]);
        if (n <= 0)
            continue;
        fprintf(f, "probed %d %" PRIx64 " %" PRIx32 " ", p->space, p->addr, p->img->offs[p->idx]);
        for (ssize_t k = 0; k < n; k++)
            fprintf(f, "%02x", code[k]);
        fprintf(f, " %s\n", p->img->path);
    }
    for (size_t i = 0; i < nwseen; i++) {
        fprintf(f, "seen %d %" PRIx64 " ", wseen[i].space, wseen[i].addr);
        for (size_t k = 0; k < wseen[i].len; k++)
            fprintf(f, "%02x", wseen[i].bytes[k]);
        fputc('\n', f);
    }
}

/* ---- JIT: anonymous executable memory ------------------------------------
 *
 * Code in anonymous executable memory has no file and no instruction
 * boundaries to plant on, so it is single-stepped, and each instruction is
 * recorded the first time it runs (whole_note).  To know when a thread
 * enters such code, the memory is kept not executable while no thread steps
 * in it:
 *  - at the entry of mmap(MAP_ANONYMOUS, PROT_EXEC) and of mprotect(PROT_EXEC)
 *    on anonymous memory, PROT_EXEC is taken out of the argument (PROT_READ
 *    put in: on x86 an executable page is readable) and the range is noted as
 *    a JIT region with the protection the program asked for;
 *  - a thread that jumps into it faults (SIGSEGV, RIP in the region): the
 *    program's protection is put back (an mprotect injected into the stopped
 *    thread, run by a `syscall` instruction the process executed before, so
 *    no code is patched), the signal is dropped, and the thread single-steps
 *    while RIP stays in a JIT region;
 *  - when it leaves (returns into an image), PROT_EXEC is taken away again.
 * munmap, a new mmap over the range, and mprotect without PROT_EXEC end or
 * trim a region.  Every entry costs two injected syscalls and every
 * instruction run in JIT code is stepped: exact, at stepping speed.
 * pkey_mprotect is handled as mprotect (the same first three arguments; the
 * key is left as the program gives it), and mremap moves or grows a region
 * with its pages: the new range is a JIT region too (its pages keep the
 * closed protection, so the program would otherwise fault there and die).
 * A syscall a thread single-steps (in JIT code, in a marked/function region)
 * has no syscall stops: tracer.c calls whole_sys_enter / whole_sys_exit
 * around the step instead.
 * Not seen: JIT code run by another thread while one thread steps in the same
 * region (it is executable meanwhile).  Each step reads the bytes at RIP and
 * whole_note keys them with the address, so code written where other code
 * ran before (a reused code-cache slot, a patched instruction) is recorded
 * too. */

#define W_PROT_READ 0x1
#define W_PROT_EXEC 0x4
#define W_MAP_ANON 0x20

struct jreg {             /* a JIT region of one space */
    int space;
    bool live;
    bool enabled;         /* executable now (a thread steps in it) */
    bool unchecked;       /* left executable after converging (--jit-converge) */
    int users;            /* threads stepping in it */
    uint64_t lo, hi;
    uint64_t prot;        /* what the program asked for */
};

struct jthr {             /* a thread: its syscall in progress, its stepping */
    pid_t tid;
    int space;
    int reg;              /* region it steps in, -1: none */
    uint64_t repeats;     /* steps in a row that recorded nothing new */
    uint64_t nr, a0, a1, a2, a3;
    bool strip;           /* PROT_EXEC was taken out of this syscall */
};

static struct jreg *jregs;
static size_t njregs;
static struct jthr *jthrs;
static size_t njthrs;
static uint64_t *gadget;  /* per space: address of a `syscall` the process ran */
static size_t ngadget;
static uint64_t n_jit_regions, n_jit_entries, n_jit_steps, n_jit_fail, n_jit_unchecked;
static uint64_t jit_converge; /* 0: step JIT code for as long as it runs */

void whole_jit_set_converge(uint64_t n)
{
    jit_converge = n;
}

static struct jthr *jthr_of(pid_t tid, bool make)
{
    for (size_t i = 0; i < njthrs; i++)
        if (jthrs[i].tid == tid)
            return &jthrs[i];
    if (!make)
        return NULL;
    jthrs = wrealloc(jthrs, (njthrs + 1) * sizeof *jthrs);
    jthrs[njthrs] = (struct jthr){.tid = tid, .reg = -1, .nr = (uint64_t)-1};
    return &jthrs[njthrs++];
}

static int jreg_at(int space, uint64_t addr)
{
    for (size_t i = 0; i < njregs; i++)
        if (jregs[i].live && jregs[i].space == space && jregs[i].lo <= addr &&
            addr < jregs[i].hi)
            return (int)i;
    return -1;
}

/* a new (closed) JIT region, counted in whole_jit_regions */
static void jreg_add(int space, uint64_t lo, uint64_t hi, uint64_t prot)
{
    jregs = wrealloc(jregs, (njregs + 1) * sizeof *jregs);
    jregs[njregs++] = (struct jreg){space, true, false, false, 0, lo, hi, prot};
    n_jit_regions++;
}

/* a region's protection while it is closed: not executable, readable (an
 * executable x86 page is readable anyway) */
static uint64_t closed_prot(uint64_t prot)
{
    return (prot & ~(uint64_t)W_PROT_EXEC) | W_PROT_READ;
}

/* [lo, hi) of `space` is no longer a JIT region (unmapped, remapped, made
 * non-executable by the program): trim or end the regions overlapping it. */
static void jreg_remove(int space, uint64_t lo, uint64_t hi)
{
    size_t n = njregs;
    for (size_t i = 0; i < n; i++) {
        struct jreg *r = &jregs[i];
        if (!r->live || r->space != space || r->hi <= lo || hi <= r->lo)
            continue;
        if (r->lo < lo && hi < r->hi) { /* a hole in the middle: split */
            struct jreg tail = *r;
            tail.lo = hi;
            tail.users = 0;
            r->hi = lo;
            jregs = wrealloc(jregs, (njregs + 1) * sizeof *jregs);
            jregs[njregs++] = tail;
            continue;
        }
        if (lo <= r->lo && r->hi <= hi)
            r->live = false;
        else if (lo <= r->lo)
            r->lo = hi;
        else
            r->hi = lo;
    }
}

/* Is [lo, lo+len) anonymous memory in pid (no file behind any part)? */
static bool anonymous_range(pid_t pid, uint64_t lo, uint64_t len)
{
    char p[64], line[4608];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    bool anon = true, any = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        int pos = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &a, &b, &pos) < 2)
            continue;
        if (b <= lo || lo + len <= a)
            continue;
        any = true;
        if (pos && line[pos] == '/')
            anon = false;
    }
    fclose(f);
    return any && anon;
}

void whole_sys_enter(int space, pid_t tid, uint64_t nr, const uint64_t *args, uint64_t ip)
{
    if (space < 0)
        return;
    /* in every mode: whole_step_reset borrows it in stepped regions too.
     * Not the kernel's uprobe trampolines' `syscall` (uretprobe, uprobe):
     * their [uprobes] page cannot be read, so an injection through it
     * failed and a JIT region right after a probed function's return
     * stayed closed (the program died of SIGSEGV). */
    if (ip >= 2 && nr != NR_URETPROBE && nr != NR_UPROBE && jreg_at(space, ip - 2) < 0) {
        if ((size_t)space >= ngadget) {
            gadget = wrealloc(gadget, ((size_t)space + 1) * sizeof *gadget);
            memset(gadget + ngadget, 0, ((size_t)space + 1 - ngadget) * sizeof *gadget);
            ngadget = (size_t)space + 1;
        }
        gadget[space] = ip - 2; /* `syscall` is 0F 05: just executed */
    }
    if (!whole_enabled)
        return;
    struct jthr *j = jthr_of(tid, true);
    j->space = space;
    j->nr = nr;
    j->a0 = args[0];
    j->a1 = args[1];
    j->a2 = args[2];
    j->a3 = args[3];
    j->strip = false;
    bool exec = may_map_code(nr) && (args[2] & W_PROT_EXEC);
    if (!exec)
        return;
    if (nr == NR_MMAP ? !(args[3] & W_MAP_ANON) : !anonymous_range(tid, args[0], args[1]))
        return;
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, tid, NULL, &r))
        return;
    r.rdx = closed_prot(args[2]);
    if (ptrace(PTRACE_SETREGS, tid, NULL, &r) == 0)
        j->strip = true;
}

void whole_sys_cancel(pid_t tid)
{
    struct jthr *j = jthr_of(tid, false);
    if (!j || j->nr == (uint64_t)-1)
        return;
    struct user_regs_struct r;
    if (j->strip && ptrace(PTRACE_GETREGS, tid, NULL, &r) == 0) {
        r.rdx = j->a2;
        ptrace(PTRACE_SETREGS, tid, NULL, &r);
    }
    j->nr = (uint64_t)-1;
    j->strip = false;
}

static bool inject_mprotect(int space, pid_t tid, uint64_t lo, uint64_t len, uint64_t prot);

/* mremap(old, old_len, new_len, flags) returned new: a JIT region at old
 * moved (or grew in place) with its pages, so [new, new + new_len) is one
 * too, with the region's protection; the old range stays one only with
 * MREMAP_DONTUNMAP.  A region open at the time (a thread stepping in it)
 * moved executable: the new range is closed like any other. */
static bool jreg_remapped(int space, pid_t tid, const struct jthr *j, uint64_t new_lo)
{
    uint64_t old_len = page_up(j->a1), new_len = page_up(j->a2);
    int k = jreg_at(space, j->a0);
    bool moved = k >= 0;
    uint64_t prot = moved ? jregs[k].prot : 0;
    bool open = moved && jregs[k].enabled;
    if (!(j->a3 & W_MREMAP_DONTUNMAP))
        jreg_remove(space, j->a0, j->a0 + old_len);
    jreg_remove(space, new_lo, new_lo + new_len);
    if (!moved)
        return false;
    if (open)
        inject_mprotect(space, tid, new_lo, new_len, closed_prot(prot));
    jreg_add(space, new_lo, new_lo + new_len, prot);
    return true;
}

bool whole_sys_exit(int space, pid_t tid, int64_t rval, bool is_error)
{
    if (!whole_enabled || space < 0)
        return false;
    struct jthr *j = jthr_of(tid, false);
    if (!j || j->nr == (uint64_t)-1)
        return false;
    uint64_t nr = j->nr;
    j->nr = (uint64_t)-1;
    if (is_error || (nr != NR_MMAP && nr != NR_MPROTECT && nr != NR_MUNMAP && nr != NR_MREMAP &&
                     nr != NR_PKEY_MPROTECT))
        return false;
    if (nr == NR_MREMAP)
        return jreg_remapped(space, tid, j, (uint64_t)rval);
    uint64_t lo = nr == NR_MMAP ? (uint64_t)rval : j->a0;
    uint64_t len = page_up(j->a1);
    jreg_remove(space, lo, lo + len);
    if (j->strip) {
        jreg_add(space, lo, lo + len, j->a2);
    }
    return false;
}

/* Run syscall nr(a0, a1, a2) in the stopped thread: RIP set to the
 * process's known `syscall` instruction, registers put back afterwards; its
 * return value in *ret.  `step`: one single step runs it; else the thread
 * runs to the syscall's entry and exit stops (PTRACE_SYSCALL), which also
 * clears the kernel's single-step state (whole_step_reset).  A signal that
 * arrives meanwhile is queued again for the thread. */
static bool inject_syscall(int space, pid_t tid, uint64_t nr, uint64_t a0, uint64_t a1,
                           uint64_t a2, bool step, uint64_t *ret)
{
    if ((size_t)space >= ngadget || !gadget[space])
        return false;
    struct wspace *s = wsp(space);
    int fd = memfd_of(s, tid);
    uint8_t code[2];
    if (fd < 0 || pread(fd, code, 2, (off_t)gadget[space]) != 2 || code[0] != 0x0f ||
        code[1] != 0x05)
        return false;
    struct user_regs_struct saved, r;
    if (ptrace(PTRACE_GETREGS, tid, NULL, &saved))
        return false;
    r = saved;
    r.rip = gadget[space];
    r.rax = nr;
    r.orig_rax = (unsigned long long)-1;
    r.rdi = a0;
    r.rsi = a1;
    r.rdx = a2;
    if (ptrace(PTRACE_SETREGS, tid, NULL, &r))
        return false;
    bool ok = false;
    int syscall_stops = 0;
    for (int tries = 0; tries < 8; tries++) {
        if (ptrace(step ? PTRACE_SINGLESTEP : PTRACE_SYSCALL, tid, NULL, NULL))
            break;
        int st;
        pid_t w;
        while ((w = waitpid(tid, &st, __WALL)) < 0 && errno == EINTR)
            ;
        if (w != tid || !WIFSTOPPED(st))
            return false; /* the thread is gone */
        if (ptrace(PTRACE_GETREGS, tid, NULL, &r))
            break;
        if (!step && WSTOPSIG(st) == (SIGTRAP | 0x80)) {
            if (++syscall_stops < 2) /* entry; then exit */
                continue;
            ok = true;
            *ret = r.rax;
            break;
        }
        if (step && r.rip == gadget[space] + 2) {
            ok = true;
            *ret = r.rax;
            break;
        }
        if (WSTOPSIG(st) != SIGTRAP) /* a signal before the syscall: later */
            syscall(SYS_tgkill, (int)s->tgid, (int)tid, WSTOPSIG(st));
    }
    ptrace(PTRACE_SETREGS, tid, NULL, &saved);
    return ok;
}

static bool inject_mprotect(int space, pid_t tid, uint64_t lo, uint64_t len, uint64_t prot)
{
    uint64_t ret = 1;
    return inject_syscall(space, tid, 10, lo, len, prot, true, &ret) && ret == 0;
}

bool whole_step_reset(int space, pid_t tid)
{
    uint64_t ret;
    if (space < 0)
        return false;
    return inject_syscall(space, tid, 39 /* getpid */, 0, 0, 0, false, &ret);
}

/* An executable mapping [lo, hi) with permissions `perms` found in the maps
 * (whole_arm) that has no instruction starts: make it a closed JIT region.
 * True when it is one (or is open for a thread stepping in it). */
static bool jit_take(int space, pid_t pid, uint64_t lo, uint64_t hi, const char *perms)
{
    for (size_t i = 0; i < njregs; i++)
        if (jregs[i].live && jregs[i].space == space && jregs[i].enabled &&
            jregs[i].lo < hi && lo < jregs[i].hi)
            return true;
    uint64_t prot = (perms[0] == 'r' ? W_PROT_READ : 0) | (perms[1] == 'w' ? 0x2 : 0) | W_PROT_EXEC;
    if (!inject_mprotect(space, pid, lo, hi - lo, closed_prot(prot)))
        return false;
    jreg_remove(space, lo, hi);
    jreg_add(space, lo, hi, prot);
    return true;
}

static void jreg_release(struct jthr *j)
{
    if (j->reg < 0)
        return;
    struct jreg *r = &jregs[j->reg];
    j->reg = -1;
    if (--r->users > 0 || !r->live || !r->enabled || r->unchecked)
        return;
    if (inject_mprotect(r->space, j->tid, r->lo, r->hi - r->lo, closed_prot(r->prot)))
        r->enabled = false;
    else
        n_jit_fail++;
}

bool whole_jit_active(pid_t tid)
{
    if (!njthrs)
        return false;
    struct jthr *j = jthr_of(tid, false);
    return j && j->reg >= 0;
}

int whole_jit_enter(int space, pid_t tid, uint64_t rip, bool fetch)
{
    if (!whole_enabled || space < 0)
        return 0;
    int k = jreg_at(space, rip);
    /* An open region: the program's own fault (a load from address 0, a
     * poll page), to deliver -- unless it is an instruction fetch fault.
     * That one was taken while the region was closed and another thread
     * opened it before this stop was handled (threads stop in any order):
     * the thread joins the others stepping there. */
    if (k < 0 || (jregs[k].enabled && !fetch))
        return 0;
    struct jthr *j = jthr_of(tid, true);
    j->space = space;
    if (j->reg >= 0)
        jreg_release(j);
    if (!jregs[k].enabled &&
        !inject_mprotect(space, tid, jregs[k].lo, jregs[k].hi - jregs[k].lo, jregs[k].prot)) {
        n_jit_fail++;
        return 0;
    }
    jregs[k].enabled = true;
    jregs[k].users++;
    j->reg = k;
    j->repeats = 0;
    n_jit_entries++;
    return 1;
}

int whole_jit_visit(int space, pid_t tid, uint64_t rip, bool record)
{
    struct jthr *j = jthr_of(tid, false);
    if (!j || j->reg < 0)
        return 0;
    int k = jreg_at(space, rip);
    if (k < 0 || !jregs[k].enabled) {
        /* left JIT code (or into a region still closed: it faults and enters) */
        jreg_release(j);
        return 0;
    }
    if (k != j->reg) {
        jreg_release(j);
        j->reg = k;
        jregs[k].users++;
    }
    if (!record)
        return 1;
    uint8_t code[15];
    int fd = memfd_of(wsp(space), tid);
    ssize_t n = fd < 0 ? -1 : pread(fd, code, sizeof code, (off_t)rip);
    if (n <= 0 && fd >= 0) {
        size_t to_page = 4096 - (rip & 4095);
        n = pread(fd, code, to_page < sizeof code ? to_page : sizeof code, (off_t)rip);
    }
    n_jit_steps++;
    if (n > 0) {
        j->repeats = whole_note(space, rip, code, (size_t)n) ? 0 : j->repeats + 1;
        if (tzcnt_note(tid, space, rip, code, (size_t)n))
            return 6;
    }
    if (n >= 2 && code[0] == 0x0f && code[1] == 0xa2)
        return 2;
    if (n >= 3 && code[0] == 0x0f && code[1] == 0x01 && code[2] == 0xd0)
        return 3;
    uint8_t op;
    unsigned width;
    if (n > 0 && flags_insn_form(code, (size_t)n, &op, &width))
        return op == OP_PUSHF ? 4 : 5;
    if (n >= 2 && code[0] == 0x0f && code[1] == 0x05)
        return 7;
    /* --jit-converge: this thread has met only recorded instructions for N
     * steps (a loop that has shown its body): it runs on natively and the
     * region stays open, unchecked, until the program maps or protects it
     * again (whole_sys_exit then ends it and a new closed region starts).
     * The instruction at RIP is recorded (a CPUID, XGETBV, PUSHF or POPF
     * returned above: the caller handles it and visits the next one). */
    if (jit_converge && n > 0 && j->repeats >= jit_converge) {
        if (!jregs[k].unchecked) {
            jregs[k].unchecked = true;
            n_jit_unchecked++;
        }
        jregs[k].users--;
        j->reg = -1;
        j->repeats = 0;
        return 0;
    }
    return 1;
}

/* a forked process: the same JIT regions (same protections) */
static void whole_jit_fork(int from, int to)
{
    size_t n = njregs;
    for (size_t i = 0; i < n; i++)
        if (jregs[i].live && jregs[i].space == from) {
            struct jreg r = jregs[i];
            r.space = to;
            r.users = 0;
            jregs = wrealloc(jregs, (njregs + 1) * sizeof *jregs);
            jregs[njregs++] = r;
        }
    if ((size_t)from < ngadget && gadget[from]) {
        if ((size_t)to >= ngadget) {
            gadget = wrealloc(gadget, ((size_t)to + 1) * sizeof *gadget);
            memset(gadget + ngadget, 0, ((size_t)to + 1 - ngadget) * sizeof *gadget);
            ngadget = (size_t)to + 1;
        }
        gadget[to] = gadget[from];
    }
}

static void whole_jit_write(FILE *f)
{
    fprintf(f, "whole_jit_regions %" PRIu64 "\n", n_jit_regions);
    fprintf(f, "whole_jit_entries %" PRIu64 "\n", n_jit_entries);
    fprintf(f, "whole_jit_steps %" PRIu64 "\n", n_jit_steps);
    fprintf(f, "whole_jit_failed %" PRIu64 "\n", n_jit_fail);
    fprintf(f, "whole_jit_unchecked %" PRIu64 "\n", n_jit_unchecked);
}
