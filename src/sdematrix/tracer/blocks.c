/*
 * Block stepping for vc-tracer: run the straight-line code of a marked region
 * natively instead of one single step per instruction.
 *
 * The profile lists, per image, its straight-line blocks (found by decoding
 * the image, see backends/ptrace/profile.py):
 *   blocks PATH            the image the following `b` records belong to
 *   b FILEOFFSET LENGTHS   a block: its first instruction's file offset and
 *                          one hex digit per instruction length (1..f), the
 *                          last instruction E included
 * Inside a block only E can transfer control, trap, or need the tracer
 * (CPUID, XGETBV, mark, syscall, rep string...).  A thread that is about to
 * execute any instruction I of a block therefore executes I..E-1 in order
 * and then E.  tracer.c plants a temporary int3 on E, lets the thread run,
 * and at the int3 counts I..E-1 once each and single-steps E as usual; any
 * other stop on the way (a signal) counts exactly the instructions before
 * the stop's RIP.  This file holds the tables, the address lookup and the
 * one block in flight; the policy (when to use a block, how to count) is in
 * tracer.c's "block stepping" section.
 *
 * Only one block is ever in flight: tracer.c uses blocks only while a single
 * thread is traced (a temporary int3 is visible to every thread sharing the
 * memory).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>

#include "blocks.h"

struct blk_image {
    char *path;
    size_t n, cap;
    uint64_t *start;  /* file offset of each block's first instruction, ascending */
    uint32_t *first;  /* index into lens of each block's first length */
    uint32_t *count;  /* instructions in each block (E included) */
    uint8_t *lens;
    size_t nlens, caplens;
    uint64_t extent_end; /* end offset of the last block (for ordering checks) */
};

struct blk_map {      /* an executable mapping of a block image in one space */
    int space;
    uint64_t lo, hi, off;
    struct blk_image *img;
};

static struct blk_image *bimages;
static size_t nbimages;
static struct blk_map *bmaps;
static size_t nbmaps;

/* the block in flight */
static struct {
    pid_t tid;          /* 0: none */
    uint64_t entry;     /* the first instruction this run executes */
    uint64_t end;       /* E: the int3 (ours or an armed site's) stops the run there */
    const uint8_t *lens;/* lengths from `entry` on */
    bool planted;
    long word;          /* the 8 bytes at E before our int3 */
} run;

static uint64_t n_entered, n_block_insns, n_interrupted;

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (!q) {
        fputs("vc-tracer: out of memory\n", stderr);
        exit(125);
    }
    *cap = c;
    return q;
}

/* One profile line: 1 consumed, 0 not a block record, -1 malformed. */
int blocks_profile_line(const char *line)
{
    if (!strncmp(line, "blocks ", 7)) {
        if (!line[7])
            return -1;
        size_t cap = nbimages;
        bimages = grow(bimages, &cap, nbimages + 1, sizeof *bimages);
        struct blk_image *im = &bimages[nbimages++];
        memset(im, 0, sizeof *im);
        im->path = strdup(line + 7);
        return im->path ? 1 : -1;
    }
    if (strncmp(line, "b ", 2))
        return 0;
    if (!nbimages)
        return -1;
    struct blk_image *im = &bimages[nbimages - 1];
    char *endp;
    errno = 0;
    uint64_t off = strtoull(line + 2, &endp, 16);
    if (errno || endp == line + 2 || *endp != ' ')
        return -1;
    const char *l = endp + 1;
    size_t k = strlen(l);
    if (k < 2 || k > 0xffffff)
        return -1;
    /* blocks ascend and do not overlap: the lookup's binary search needs it */
    if (im->n && off < im->extent_end)
        return -1;
    uint64_t size = 0;
    im->lens = grow(im->lens, &im->caplens, im->nlens + k, 1);
    for (size_t i = 0; i < k; i++) {
        int c = l[i];
        int v = c >= '1' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        im->lens[im->nlens + i] = (uint8_t)v;
        size += (uint64_t)v;
    }
    size_t cap = im->cap;
    im->start = grow(im->start, &cap, im->n + 1, sizeof *im->start);
    cap = im->cap;
    im->first = grow(im->first, &cap, im->n + 1, sizeof *im->first);
    cap = im->cap;
    im->count = grow(im->count, &cap, im->n + 1, sizeof *im->count);
    im->cap = cap;
    im->start[im->n] = off;
    im->first[im->n] = (uint32_t)im->nlens;
    im->count[im->n] = (uint32_t)k;
    im->n++;
    im->nlens += k;
    im->extent_end = off + size;
    return 1;
}

/* An executable mapping seen by arm_space: remember it if its file has
 * blocks.  A new mapping replaces any older one it overlaps (munmap + mmap). */
void blocks_note_mapping(int space, uint64_t lo, uint64_t hi, uint64_t off, const char *path)
{
    struct blk_image *im = NULL;
    for (size_t i = 0; i < nbimages && !im; i++)
        if (!strcmp(bimages[i].path, path))
            im = &bimages[i];
    size_t w = 0;
    for (size_t i = 0; i < nbmaps; i++) {
        struct blk_map *m = &bmaps[i];
        if (m->space == space && m->lo == lo && m->hi == hi && m->off == off && m->img == im)
            return; /* known */
        if (m->space == space && m->lo < hi && lo < m->hi)
            continue; /* replaced */
        bmaps[w++] = *m;
    }
    nbmaps = w;
    if (!im)
        return;
    size_t cap = nbmaps;
    bmaps = grow(bmaps, &cap, nbmaps + 1, sizeof *bmaps);
    bmaps[nbmaps++] = (struct blk_map){space, lo, hi, off, im};
}

/* If `rip` starts an instruction of a known block in `space`: the address of
 * that block's last instruction E, and in *before the number of instructions
 * from rip up to E (E excluded) and in *lens the lengths of the instructions
 * from rip on.  0 when rip is in no block. */
uint64_t blocks_find(int space, uint64_t rip, size_t *before, const uint8_t **lens)
{
    for (size_t i = 0; i < nbmaps; i++) {
        const struct blk_map *m = &bmaps[i];
        if (m->space != space || rip < m->lo || rip >= m->hi)
            continue;
        const struct blk_image *im = m->img;
        uint64_t fo = rip - m->lo + m->off;
        size_t lo = 0, hi = im->n; /* last block starting at or before fo */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (im->start[mid] <= fo)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (!lo)
            return 0;
        size_t b = lo - 1;
        const uint8_t *l = im->lens + im->first[b];
        uint32_t n = im->count[b];
        uint64_t at = im->start[b];
        uint32_t k = 0;
        while (k < n && at < fo)
            at += l[k++];
        if (k == n || at != fo)
            return 0; /* past the block's end, or not an instruction start */
        uint64_t e = rip;
        for (uint32_t j = k; j + 1 < n; j++)
            e += l[j];
        if (e >= m->hi)
            return 0;
        *before = n - 1 - k;
        *lens = l + k;
        return e;
    }
    return 0;
}

/* Start a run of `tid` from `rip` to the block's E, `end` and `lens` as
 * blocks_find gave them for rip; with `plant`, write the temporary int3 on E
 * (without it, E already holds an armed site's int3).  False when the memory
 * cannot be written or E holds an int3 already. */
bool blocks_begin(pid_t tid, uint64_t rip, uint64_t end, const uint8_t *lens, bool plant)
{
    if (run.tid)
        return false;
    run.planted = false;
    if (plant) {
        errno = 0;
        long w = ptrace(PTRACE_PEEKDATA, tid, (void *)end, NULL);
        /* an int3 already on E that is not ours (a kernel uprobe's: the
         * kernel would take the stop at E for itself, and the thread would
         * run on past the block unseen): single steps instead */
        if (errno || (w & 0xff) == 0xcc)
            return false;
        long p = (long)(((unsigned long)w & ~0xfful) | 0xccu);
        if (ptrace(PTRACE_POKEDATA, tid, (void *)end, (void *)p))
            return false;
        run.word = w;
        run.planted = true;
    }
    run.tid = tid;
    run.entry = rip;
    run.end = end;
    run.lens = lens;
    n_entered++;
    return true;
}

pid_t blocks_active_tid(void)
{
    return run.tid;
}

uint64_t blocks_active_end(void)
{
    return run.end;
}

/* Put E's bytes back (the run's thread is stopped). */
bool blocks_unplant(void)
{
    if (!run.planted)
        return true;
    run.planted = false;
    return ptrace(PTRACE_POKEDATA, run.tid, (void *)run.end, (void *)run.word) == 0;
}

/* The run stopped with RIP = stop: call fn for each instruction it executed
 * (entry .. stop, stop excluded; stop == E when it reached E) and end the
 * run.  False, calling nothing, when stop is not one of the run's
 * instruction starts: the thread left the block, which straight-line code
 * cannot do (the image was not decoded as it runs). */
bool blocks_each_before(uint64_t stop, void (*fn)(void *ctx, uint64_t addr), void *ctx)
{
    size_t k = 0;
    uint64_t at = run.entry;
    while (at < stop && at < run.end)
        at += run.lens[k++];
    if (at != stop)
        return false;
    at = run.entry;
    for (size_t i = 0; i < k; i++) {
        fn(ctx, at);
        at += run.lens[i];
    }
    n_block_insns += k;
    if (stop != run.end)
        n_interrupted++;
    run.tid = 0;
    return true;
}

/* The run's thread is gone (killed): nothing to restore or count. */
void blocks_forget(void)
{
    run.tid = 0;
    run.planted = false;
}

void blocks_write_stats(FILE *f)
{
    fprintf(f, "blocks_entered %" PRIu64 "\n", n_entered);
    fprintf(f, "block_insns %" PRIu64 "\n", n_block_insns);
    fprintf(f, "blocks_interrupted %" PRIu64 "\n", n_interrupted);
}
