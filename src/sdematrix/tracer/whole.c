/*
 * vc-tracer whole-process mode (`--whole`): every distinct instruction that
 * runs in a file-backed image, in every thread and process, is recorded once.
 *
 * Mechanism: first-visit breakpoints.  The profile names, per image, a file
 * of instruction starts (`bounds BINFILE PATH`: little-endian uint32 file
 * offsets, sorted; computed by sdematrix.insn_bounds from the image's
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
 * the profile, the tracer writes the image's path as one line to REQFD at
 * the first executable mapping of it, and reads profile records (`image`,
 * `site`, `bounds`) from RESPFD up to a line `end` (sdematrix.exec_run's
 * server computes them).  So one run covers every image with no second pass.
 *
 * Output lines (written by whole_write): `whole_planted N`, `whole_traps N`,
 * `whole_seen N`, `whole_anon_exec N`, `whole_nobounds PATH`, then one
 * `seen SPACE ADDR HEXBYTES` per distinct instruction.
 */
#include "whole.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static struct wimage *wimgs;
static size_t nwimgs;
static struct wspace *wspaces;
static size_t nwspaces;
static struct wseen *wseen;
static size_t nwseen, capwseen;
static uint64_t n_planted, n_traps, n_anon_exec;
static char **nobounds;
static size_t nnobounds;

/* a small open-addressed set of (space, addr) for code without boundary data
 * that was recorded through whole_note (stepped code, sites) */
static uint64_t *noted;
static size_t capnoted, nnoted;

static FILE *ask_req, *ask_resp;
static uint64_t n_asked;

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
    wimgs = wrealloc(wimgs, (nwimgs + 1) * sizeof *wimgs);
    wimgs[nwimgs++] = im;
    return 0;
}

int whole_set_server(const char *rest)
{
    int w, r;
    if (sscanf(rest, "%d %d", &w, &r) != 2 || w < 0 || r < 0)
        return -1;
    /* the traced program must not inherit the pipe */
    if (fcntl(w, F_SETFD, FD_CLOEXEC) || fcntl(r, F_SETFD, FD_CLOEXEC))
        return -1;
    ask_req = fdopen(w, "w");
    ask_resp = fdopen(r, "r");
    return ask_req && ask_resp ? 0 : -1;
}

int whole_ask(const char *path)
{
    if (!whole_enabled || !ask_req || strchr(path, '\n'))
        return 0;
    if (fprintf(ask_req, "%s\n", path) < 0 || fflush(ask_req))
        goto gone;
    char line[4608];
    while (fgets(line, sizeof line, ask_resp)) {
        size_t n = strlen(line);
        while (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (!strcmp(line, "end")) {
            n_asked++;
            return 1;
        }
        if (n)
            profile_record(line, "image server");
    }
gone: /* the server is gone: no more asking (the images stay unscanned) */
    fprintf(stderr, "vc-tracer: image server closed while asking for %s\n", path);
    fclose(ask_req);
    fclose(ask_resp);
    ask_req = ask_resp = NULL;
    return 0;
}

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
    }
}

static struct wimage *image_named(const char *path)
{
    for (size_t i = 0; i < nwimgs; i++)
        if (!strcmp(wimgs[i].path, path))
            return &wimgs[i];
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

/* Plant int3s on the unseen instruction starts of one mapping. */
static void plant(struct wspace *s, pid_t pid, struct wmap *m)
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

void whole_arm(int space, pid_t pid)
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
        if (path[0] != '/') {
            if (strcmp(path, "[vdso]") && strcmp(path, "[vsyscall]"))
                anon++;
            continue;
        }
        struct wimage *im = image_named(path);
        if (!im) {
            note_nobounds(path);
            continue;
        }
        bool known = false;
        for (size_t i = 0; i < s->nmaps; i++)
            if (s->maps[i].lo == lo && s->maps[i].hi == hi && s->maps[i].off == off &&
                s->maps[i].img == im)
                known = true;
        if (known)
            continue;
        /* a new mapping replaces any stale one overlapping it */
        for (size_t i = 0; i < s->nmaps;)
            if (s->maps[i].lo < hi && lo < s->maps[i].hi)
                s->maps[i] = s->maps[--s->nmaps];
            else
                i++;
        s->maps = wrealloc(s->maps, (s->nmaps + 1) * sizeof *s->maps);
        s->maps[s->nmaps] = (struct wmap){lo, hi, off, im};
        plant(s, pid, &s->maps[s->nmaps]);
        s->nmaps++;
    }
    fclose(f);
    if (anon > n_anon_exec)
        n_anon_exec = anon;
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

int whole_trap(int space, pid_t pid, uint64_t addr)
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
    return 1;
}

static size_t noted_hash(uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17);
}

/* true when (space, addr) was not noted before (and notes it) */
static bool note_once(int space, uint64_t addr)
{
    if ((nnoted + 1) * 2 > capnoted) {
        size_t oldcap = capnoted;
        uint64_t *old = noted;
        capnoted = capnoted ? capnoted * 2 : 1024;
        noted = calloc(capnoted, sizeof *noted);
        if (!noted)
            exit(125);
        for (size_t i = 0; i < oldcap; i++)
            if (old[i]) {
                size_t j = noted_hash(old[i]) & (capnoted - 1);
                while (noted[j])
                    j = (j + 1) & (capnoted - 1);
                noted[j] = old[i];
            }
        free(old);
    }
    uint64_t key = (addr ^ ((uint64_t)(space + 1) << 52)) | 1ull << 63;
    size_t j = noted_hash(key) & (capnoted - 1);
    while (noted[j]) {
        if (noted[j] == key)
            return false;
        j = (j + 1) & (capnoted - 1);
    }
    noted[j] = key;
    nnoted++;
    return true;
}

void whole_note(int space, uint64_t addr, const uint8_t *bytes, size_t len)
{
    if (!whole_enabled || (size_t)space >= nwspaces)
        return;
    struct wspace *s = &wspaces[space];
    struct wmap *m = map_at(s, addr);
    if (m) {
        uint64_t fo = m->off + (addr - m->lo);
        size_t i = lower_bound(m->img, fo);
        if (i < m->img->n && m->img->offs[i] == fo) {
            if (seen_bit(m->img, i))
                return;
            m->img->seen[i / 8] |= (uint8_t)(1u << (i % 8));
            record(space, addr, bytes, len);
            return;
        }
    }
    if (note_once(space, addr))
        record(space, addr, bytes, len);
}

void whole_write(FILE *f)
{
    if (!whole_enabled)
        return;
    fprintf(f, "whole_planted %" PRIu64 "\n", n_planted);
    fprintf(f, "whole_traps %" PRIu64 "\n", n_traps);
    fprintf(f, "whole_seen %zu\n", nwseen);
    fprintf(f, "whole_anon_exec %" PRIu64 "\n", n_anon_exec);
    fprintf(f, "whole_asked %" PRIu64 "\n", n_asked);
    for (size_t i = 0; i < nnobounds; i++)
        fprintf(f, "whole_nobounds %s\n", nobounds[i]);
    for (size_t i = 0; i < nwseen; i++) {
        fprintf(f, "seen %d %" PRIx64 " ", wseen[i].space, wseen[i].addr);
        for (size_t k = 0; k < wseen[i].len; k++)
            fprintf(f, "%02x", wseen[i].bytes[k]);
        fputc('\n', f);
    }
}
