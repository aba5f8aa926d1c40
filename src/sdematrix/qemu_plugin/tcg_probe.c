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

__attribute__((target("avx512f"))) static void ternlog512(uint8_t *out) {
    /* all-ones from a three-input truth table 0xff: every bit of zmm set */
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
    const char *t = argv[1];
    size_t n;
    if (strcmp(t, "avx512f") == 0) {
        ternlog512(got);
        n = 64;
    } else if (strcmp(t, "vaes256") == 0) {
        vaes256(a, b, got);
        ref_aesenc(a, b, want, 2);
        n = 32;
    } else if (strcmp(t, "vpclmulqdq256") == 0) {
        clmul256(a, b, got);
        ref_clmul(a, b, want, 2);
        n = 32;
    } else if (strcmp(t, "vaes512") == 0) {
        vaes512(a, b, got);
        ref_aesenc(a, b, want, 4);
        n = 64;
    } else if (strcmp(t, "vpclmulqdq512") == 0) {
        clmul512(a, b, got);
        ref_clmul(a, b, want, 4);
        n = 64;
    } else {
        return 2;
    }
    if (memcmp(got, want, n) != 0) {
        printf("wrong\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
