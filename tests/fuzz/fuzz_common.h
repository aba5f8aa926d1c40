/*
 * fuzz_common.h - what the libFuzzer harnesses (vc_fuzz_gcm.c, vc_fuzz_cfb.c)
 * share: reading parameters from an input, sizes drawn so that every tail is
 * hit, exactly-sized output buffers, mismatch reports, the path lists and the
 * harness's own execution-rate line.
 *
 * Every harness compares every code path the CPU can run (generic included)
 * with OpenSSL's libcrypto, computed once per input: an independent
 * implementation, so the generic path is checked against something other
 * than itself.
 */
#ifndef VC_FUZZ_COMMON_H
#define VC_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vaescrypt.h"

/* Which harness is running, for messages ("vc_fuzz_gcm: ..."). */
static const char *fz_name;
static const char *const fz_mode_names[] = {"gcm", "cfb128", "cfb8", "cfb1"};

/* ------------------------------------------------------------ reading -- */

/* Parameters come from the input's head; a short input reads as zeros, so
 * every input is usable. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fz_reader;

static uint8_t fz_u8(fz_reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

/*
 * A length in units (bytes, or bits for CFB1) that libFuzzer can steer with
 * three bytes and that hits every tail: b2 % unit is the partial block; the
 * whole-block count is b0 % 8 for 7 of 8 values of b0 (the one-block and
 * tail code) and otherwise b1 % (max_blocks + 1), any count up to max_blocks
 * (the wide tiers' 4/8/16/32-block loops and their remainders).  The mean
 * is ~8 blocks instead of max_blocks/2: the long messages are as reachable
 * (one value of b0 in 8) but cost the run less.  The data itself is not the
 * input's tail (see fz_fill), so long messages cost no long inputs.
 */
static size_t fz_len(fz_reader *r, size_t unit, size_t max_blocks)
{
    const uint8_t b0 = fz_u8(r), b1 = fz_u8(r), b2 = fz_u8(r);
    const size_t blocks = b0 < 224 ? b0 % 8u : b1 % (max_blocks + 1);
    return blocks * unit + b2 % unit;
}

/* n bytes: the rest of the input first, then a xorshift64 stream seeded
 * from the input (deterministic: a saved crash reproduces). */
static void fz_fill(fz_reader *r, uint8_t *dst, size_t n, uint64_t seed)
{
    size_t i = 0;
    for (; i < n && r->n; i++)
        dst[i] = fz_u8(r);
    uint64_t x = seed | 1;
    for (; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        dst[i] = (uint8_t)(x >> 32);
    }
}

static uint64_t fz_seed(const uint8_t *d, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ d[i]) * 0x100000001b3ull;
    return h;
}

/* ----------------------------------------------------------- failures -- */

static void fz_fail(const char *what, int mode, int path, int dir, int st, size_t len)
{
    fprintf(stderr, "%s: MISMATCH %s: mode=%s path=%s dir=%s status=%d (%s) len=%zu\n", fz_name,
            what, fz_mode_names[mode], path < 0 ? "openssl" : vc_path_name((vc_path)path),
            dir ? "decrypt" : "encrypt", st, vc_status_message(st), len);
    abort();
}

static void fz_same(const char *what, int mode, int path, int dir, const uint8_t *got,
                    const uint8_t *want, size_t n)
{
    if (n && memcmp(got, want, n) != 0) {
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        fprintf(stderr, "%s: first difference at byte %zu of %zu: %02x != %02x\n", fz_name, i, n,
                got[i], want[i]);
        fz_fail(what, mode, path, dir, 0, n);
    }
}

static void fz_ok(int st, const char *what, int mode, int path, int dir, size_t len)
{
    if (st != VC_OK)
        fz_fail(what, mode, path, dir, st, len);
}

/* ------------------------------------------------------------ buffers -- */

/* n bytes at offset off in a malloc'd block that ends exactly at p + n:
 * one byte more is in ASan's redzone.  Never malloc(0). */
typedef struct {
    uint8_t *base, *p;
} fz_buf;

static fz_buf fz_buf_new(size_t n, unsigned off)
{
    fz_buf b;
    b.base = malloc(n + off ? n + off : 1);
    if (!b.base)
        abort();
    b.p = b.base + off;
    return b;
}

static void fz_buf_free(fz_buf *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

/* -------------------------------------------------------------- paths -- */

typedef struct {
    int n;
    int path[VC_PATH_COUNT];
} fz_paths;

/* The paths vc_available() lists for (mode, dir), which must include
 * generic; printed once so that a run's log shows what was covered. */
static fz_paths fz_paths_for(int mode, int dir)
{
    fz_paths ps;
    ps.n = vc_available((vc_mode)mode, (vc_dir)dir, ps.path);
    if (ps.n < 1 || ps.n > VC_PATH_COUNT)
        fz_fail("vc_available", mode, VC_PATH_GENERIC, dir, ps.n, 0);
    int has_generic = 0;
    for (int i = 0; i < ps.n; i++)
        has_generic |= ps.path[i] == VC_PATH_GENERIC;
    if (!has_generic)
        fz_fail("generic path not available", mode, VC_PATH_GENERIC, dir, ps.n, 0);
    fprintf(stderr, "%s: paths %s %s:", fz_name, fz_mode_names[mode], dir ? "decrypt" : "encrypt");
    for (int i = 0; i < ps.n; i++)
        fprintf(stderr, " %s", vc_path_name((vc_path)ps.path[i]));
    fputc('\n', stderr);
    return ps;
}

/* ---------------------------------------------------------- the rate -- */

/*
 * The harness's own count: executions, wall and CPU seconds since
 * initialisation, printed when the process exits (libFuzzer ends every run
 * with exit()).  exec/s per CPU second is what this host can do when it is
 * not shared; the wall rate is what this run got.
 */
static double fz_secs(clockid_t c, const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static unsigned long long fz_execs;
static struct timespec fz_wall0, fz_cpu0;
/* CPU time spent inside LLVMFuzzerTestOneInput (thread clock, a vDSO call
 * at entry and exit): the checks themselves, without libFuzzer's mutation
 * and coverage bookkeeping. */
static double fz_inside;
static struct timespec fz_t_in;

static void fz_enter(void)
{
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &fz_t_in);
}

static void fz_leave(void)
{
    fz_inside += fz_secs(CLOCK_THREAD_CPUTIME_ID, &fz_t_in);
    fz_execs++;
}

static void fz_report(void)
{
    const double wall = fz_secs(CLOCK_MONOTONIC, &fz_wall0);
    const double cpu = fz_secs(CLOCK_PROCESS_CPUTIME_ID, &fz_cpu0);
    fprintf(stderr,
            "%s: rate: %llu executions in %.2f s wall, %.2f s CPU: %.0f exec/s wall, "
            "%.0f exec/s per CPU second\n",
            fz_name, fz_execs, wall, cpu, wall > 0 ? (double)fz_execs / wall : 0.0,
            cpu > 0 ? (double)fz_execs / cpu : 0.0);
    fprintf(stderr,
            "%s: inside the harness: %.2f s CPU, %.0f exec/s per CPU second "
            "(the rest of the CPU time is libFuzzer's own work)\n",
            fz_name, fz_inside, fz_inside > 0 ? (double)fz_execs / fz_inside : 0.0);
}

static void fz_start(const char *name)
{
    fz_name = name;
    clock_gettime(CLOCK_MONOTONIC, &fz_wall0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &fz_cpu0);
    atexit(fz_report);
}

/*
 * ASan defaults for the harnesses (ASAN_OPTIONS still overrides them).  Every
 * input allocates a few keys and streams of 1-4 KiB; with the default 256 MiB
 * quarantine the freed blocks cycle through fresh pages, and page faults took
 * ~10 % of the run (perf).  A 16 MiB quarantine still holds the last ~4,000
 * freed objects -- a use after free within an input is caught as before --
 * and 8 frames of allocation stack are enough to name the culprit.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16:malloc_context_size=8";
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
