/* See tiny.h.  No global -m flags: the AVX2 function alone is compiled for
 * AVX2 (a target attribute), so the library loads and runs on any x86-64. */
#include "tiny.h"

#include <cpuid.h>
#include <immintrin.h>

static uint32_t tiny_sum_scalar(const uint32_t *v, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return s;
}

/* Eight 32-bit lanes at a time (VPADDD ymm), then a horizontal add; the
 * tail of fewer than eight elements is summed by the scalar loop.  Addition
 * modulo 2^32 is associative, so the lane order does not change the sum. */
__attribute__((target("avx2"))) static uint32_t tiny_sum_avx2(const uint32_t *v, size_t n)
{
    __m256i acc = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_epi32(acc, _mm256_loadu_si256((const __m256i *)(v + i)));
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e)); /* lanes 2,3 onto 0,1 */
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1)); /* lane 1 onto 0 */
    uint32_t s = (uint32_t)_mm_cvtsi128_si32(x);
    return s + tiny_sum_scalar(v + i, n - i);
}

/* AVX2 is usable when the CPU has it (CPUID.7.0:EBX bit 5) AND the OS saves
 * the YMM registers on context switches: CPUID.1:ECX says the OS enabled
 * XSAVE (OSXSAVE, bit 27) and the CPU has AVX (bit 28), and XCR0 (read with
 * XGETBV) has both the SSE (bit 1) and AVX (bit 2) state enabled.  Without the
 * XCR0 check a kernel that does not enable YMM state would see SIGILL. */
static int avx2_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (!(c & (1u << 27)) || !(c & (1u << 28)))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 6u) != 6u)
        return 0;
    if (__get_cpuid_max(0, 0) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 5)) != 0;
}

typedef uint32_t (*sum_fn)(const uint32_t *, size_t);

static sum_fn chosen;

static sum_fn choose(void)
{
    if (!chosen)
        chosen = avx2_usable() ? tiny_sum_avx2 : tiny_sum_scalar;
    return chosen;
}

uint32_t tiny_sum(const uint32_t *v, size_t n)
{
    return choose()(v, n);
}

const char *tiny_path(void)
{
    return choose() == tiny_sum_avx2 ? "avx2" : "scalar";
}
