/*
 * ctcheck.c - a dudect-style timing-leakage test of the generic (portable,
 * constant-time) tier.  Not part of the library; built and run by
 * `python -m vaescrypt.ctcheck`.
 *
 * Method (Reparaz, Balasch, Verbauwhede, "dude, is my code constant time?"):
 * time one operation many times on inputs drawn from two classes, class 0 a
 * single fixed secret, class 1 fresh random secrets, the class of each
 * measurement chosen at random so drift in the machine hits both equally.
 * If the running time does not depend on the secret, the two timing
 * distributions are the same, and Welch's t statistic stays small.  Timing
 * distributions have long right tails (interrupts, cache misses from the
 * rest of the system), so t is also computed on the measurements below
 * several percentiles of the pooled distribution; the report is the largest
 * |t| over those crops.  |t| > 10 is strong evidence of a leak; dudect's
 * usual threshold for "no evidence" is |t| < 4.5.
 *
 * usage: ctcheck [measurements-per-test] [seed]
 * output: one JSON line per test.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#include "internal.h"

static uint64_t rng_state;
static uint64_t rng(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng();
}

/* rdtsc fenced on both sides so the timed code cannot drift out of the
 * window through out-of-order execution. */
static inline uint64_t ticks(void) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

typedef struct {
    double n, mean, m2; /* Welford's running mean / sum of squares */
} acc;
static void acc_push(acc *a, double x) {
    a->n += 1;
    double d = x - a->mean;
    a->mean += d / a->n;
    a->m2 += d * (x - a->mean);
}
static double welch_t(const acc *a, const acc *b) {
    if (a->n < 2 || b->n < 2) return 0;
    double va = a->m2 / (a->n - 1), vb = b->m2 / (b->n - 1);
    double den = sqrt(va / a->n + vb / b->n);
    return den > 0 ? (a->mean - b->mean) / den : 0;
}
static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* Max |t| over the uncropped set and crops at these percentiles. */
static double max_abs_t(const uint64_t *t, const uint8_t *cls, size_t n, double *t_raw) {
    static const double pct[] = {1.0, 0.99, 0.95, 0.90, 0.75, 0.5};
    uint64_t *sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, t, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    double worst = 0;
    for (size_t p = 0; p < sizeof pct / sizeof pct[0]; p++) {
        uint64_t cut = sorted[(size_t)((double)(n - 1) * pct[p])];
        acc a[2] = {{0, 0, 0}, {0, 0, 0}};
        for (size_t i = 0; i < n; i++)
            if (t[i] <= cut) acc_push(&a[cls[i]], (double)t[i]);
        double tv = welch_t(&a[0], &a[1]);
        if (p == 0) *t_raw = tv;
        if (fabs(tv) > worst) worst = fabs(tv);
    }
    free(sorted);
    return worst;
}

typedef void (*op_fn)(const uint8_t *secret, uint8_t *scratch);

static const vc_tier *G;
static vc_aes_key fixed_key;
static vc_ghash_key gkey;

static void op_block(const uint8_t *secret, uint8_t *scratch) {
    /* secret = plaintext block under a fixed key */
    G->encrypt_block(&fixed_key, secret, scratch);
}
static void op_setkey(const uint8_t *secret, uint8_t *scratch) {
    vc_aes_key k;
    G->setkey(&k, secret, 256);
    scratch[0] ^= k.rk[14][0];
}
static void op_ghash(const uint8_t *secret, uint8_t *scratch) {
    uint8_t X[16] = {0};
    G->ghash(&gkey, X, secret, 64);
    scratch[0] ^= X[0];
}
static void op_gcm(const uint8_t *secret, uint8_t *scratch) {
    uint8_t ctr[16] = {0}, X[16] = {0};
    ctr[15] = 2;
    G->gcm_enc(&fixed_key, &gkey, ctr, X, secret, scratch, 64);
}

/* Positive control: an early-exit comparison against the fixed secret, the
 * classic non-constant-time tag check.  Class 0 (the fixed secret) compares
 * all 64 bytes, class 1 (random) stops at the first; the test must flag it,
 * or the measurement cannot see leaks at all. */
static uint8_t control_ref[64];
static void op_leaky_compare(const uint8_t *secret, uint8_t *scratch) {
    volatile int eq = 1;
    for (size_t i = 0; i < 64; i++) {
        if (secret[i] != control_ref[i]) {
            eq = 0;
            break;
        }
    }
    scratch[0] ^= (uint8_t)eq;
}

static void run(const char *name, op_fn op, size_t secret_len, size_t n) {
    uint8_t *secrets = malloc(n * secret_len), *cls = malloc(n);
    uint64_t *t = malloc(n * sizeof *t);
    uint8_t fixed[64], scratch[64] = {0};
    fill(fixed, sizeof fixed);
    memcpy(control_ref, fixed, sizeof fixed);
    for (size_t i = 0; i < n; i++) {
        cls[i] = (uint8_t)(rng() & 1);
        if (cls[i] == 0)
            memcpy(secrets + i * secret_len, fixed, secret_len);
        else
            fill(secrets + i * secret_len, secret_len);
    }
    for (size_t i = 0; i < n / 10; i++) op(secrets, scratch); /* warm up */
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = ticks();
        op(secrets + i * secret_len, scratch);
        t[i] = ticks() - t0;
    }
    double t_raw = 0, t_max = max_abs_t(t, cls, n, &t_raw);
    printf("{\"test\": \"%s\", \"measurements\": %zu, \"t_uncropped\": %.3f, "
           "\"max_abs_t\": %.3f, \"verdict\": \"%s\"}\n",
           name, n, t_raw, t_max,
           t_max < 4.5 ? "no evidence of leakage" : (t_max < 10 ? "inconclusive" : "LEAK"));
    fflush(stdout);
    free(secrets);
    free(cls);
    free(t);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    G = vc_tier_get(VC_PATH_GENERIC);
    if (!G || !G->setkey || !G->ghash || !G->gcm_enc) {
        fprintf(stderr, "ctcheck: generic tier incomplete\n");
        return 2;
    }
    uint8_t key[32];
    fill(key, sizeof key);
    G->setkey(&fixed_key, key, 256);
    G->encrypt_block(&fixed_key, (const uint8_t[16]){0}, gkey.h);
    G->ghash_init(&gkey);
    run("aes256_encrypt_block(plaintext)", op_block, 16, n);
    run("aes256_setkey(key)", op_setkey, 32, n);
    run("ghash_64B(data)", op_ghash, 64, n);
    run("gcm_enc_64B(plaintext)", op_gcm, 64, n);
    run("CONTROL early-exit compare (must leak)", op_leaky_compare, 64, n);
    return 0;
}
