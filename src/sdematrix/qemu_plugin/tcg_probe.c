/*
 * tcg_probe.c - what does this QEMU's TCG really execute?
 *
 * Run as `qemu-x86_64 -cpu max tcg_probe <test>`; one test per run:
 *
 *   exit 0     the instruction ran and its result is right
 *   exit 1     it ran but computed a wrong result
 *   SIGILL     TCG does not implement it (or -cpu max does not offer it)
 *   exit 2     bad usage
 *
 * A wide instruction is right when every 128-bit lane equals what the legacy
 * 128-bit instruction gives on that lane's inputs: VAESENC ymm/zmm is AESENC
 * per lane, VPCLMULQDQ ymm/zmm is PCLMULQDQ per lane (Intel SDM, VAESENC and
 * VPCLMULQDQ).  The lanes get different inputs, so a TCG that reuses one
 * lane's data for another (QEMU 7.2's ymm VAESENC/VAESDEC) is caught.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Inputs differ per lane and per byte; volatile so nothing is folded. */
static volatile uint8_t src_a[64], src_b[64];

static void fill(void) {
    for (int i = 0; i < 64; i++) {
        src_a[i] = (uint8_t)(i * 37 + 11);
        src_b[i] = (uint8_t)(i * 91 + 5);
    }
}

__attribute__((target("aes,sse4.1"))) static void ref_aesenc(const uint8_t *a, const uint8_t *b,
                                                             uint8_t *out, int lanes) {
    for (int l = 0; l < lanes; l++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(a + 16 * l));
        __m128i k = _mm_loadu_si128((const __m128i *)(b + 16 * l));
        _mm_storeu_si128((__m128i *)(out + 16 * l), _mm_aesenc_si128(x, k));
    }
}

__attribute__((target("pclmul,sse4.1"))) static void ref_clmul(const uint8_t *a, const uint8_t *b,
                                                               uint8_t *out, int lanes) {
    for (int l = 0; l < lanes; l++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(a + 16 * l));
        __m128i y = _mm_loadu_si128((const __m128i *)(b + 16 * l));
        _mm_storeu_si128((__m128i *)(out + 16 * l), _mm_clmulepi64_si128(x, y, 0x01));
    }
}

__attribute__((target("avx2,vaes"))) static void vaes256(const uint8_t *a, const uint8_t *b,
                                                         uint8_t *out) {
    __m256i x = _mm256_loadu_si256((const __m256i *)a);
    __m256i k = _mm256_loadu_si256((const __m256i *)b);
    _mm256_storeu_si256((__m256i *)out, _mm256_aesenc_epi128(x, k));
}

__attribute__((target("avx2,vpclmulqdq"))) static void clmul256(const uint8_t *a, const uint8_t *b,
                                                                uint8_t *out) {
    __m256i x = _mm256_loadu_si256((const __m256i *)a);
    __m256i y = _mm256_loadu_si256((const __m256i *)b);
    _mm256_storeu_si256((__m256i *)out, _mm256_clmulepi64_epi128(x, y, 0x01));
}

__attribute__((target("avx512f"))) static void ternlog512(const uint8_t *a, const uint8_t *b,
                                                           uint8_t *out) {
    /* all-ones from a three-input truth table 0xff: every bit of zmm set */
    (void)a;
    (void)b;
    __m512i z = _mm512_setzero_si512();
    _mm512_storeu_si512(out, _mm512_ternarylogic_epi32(z, z, z, 0xff));
}

__attribute__((target("avx512f,vaes"))) static void vaes512(const uint8_t *a, const uint8_t *b,
                                                            uint8_t *out) {
    __m512i x = _mm512_loadu_si512(a);
    __m512i k = _mm512_loadu_si512(b);
    _mm512_storeu_si512(out, _mm512_aesenc_epi128(x, k));
}

__attribute__((target("avx512f,vpclmulqdq"))) static void clmul512(const uint8_t *a,
                                                                   const uint8_t *b, uint8_t *out) {
    __m512i x = _mm512_loadu_si512(a);
    __m512i y = _mm512_loadu_si512(b);
    _mm512_storeu_si512(out, _mm512_clmulepi64_epi128(x, y, 0x01));
}

typedef void (*wide_fn)(const uint8_t *, const uint8_t *, uint8_t *);
typedef void (*ref_fn)(const uint8_t *, const uint8_t *, uint8_t *, int);

/* test name, the wide instruction, its per-lane reference (NULL: all-ones
 * expected) and the number of 128-bit lanes compared */
static const struct {
    const char *name;
    wide_fn run;
    ref_fn ref;
    int lanes;
} tests[] = {
    {"avx512f", ternlog512, NULL, 4},
    {"vaes256", vaes256, ref_aesenc, 2},
    {"vpclmulqdq256", clmul256, ref_clmul, 2},
    {"vaes512", vaes512, ref_aesenc, 4},
    {"vpclmulqdq512", clmul512, ref_clmul, 4},
};

int main(int argc, char **argv) {
    uint8_t a[64], b[64], got[64], want[64];
    if (argc != 2)
        return 2;
    fill();
    for (int i = 0; i < 64; i++) {
        a[i] = src_a[i];
        b[i] = src_b[i];
    }
    memset(got, 0, sizeof got);
    memset(want, 0xff, sizeof want);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(argv[1], tests[i].name) != 0)
            continue;
        tests[i].run(a, b, got);
        if (tests[i].ref)
            tests[i].ref(a, b, want, tests[i].lanes);
        if (memcmp(got, want, 16 * (size_t)tests[i].lanes) != 0) {
            printf("wrong\n");
            return 1;
        }
        printf("ok\n");
        return 0;
    }
    return 2;
}
