/* One kernel per x86-64 micro-architecture level, each written so that
 * gcc -O2 at that level must use the level's instructions in it:
 *   popcounts:  __builtin_popcountll -> POPCNT (x86-64-v2)
 *   scale_add:  32-bit multiply-add over arrays -> vectorised with AVX2
 *               VPMULLD ymm (x86-64-v3; v2 has only the xmm SSE4.1 form)
 *   to_double:  int64 -> double conversion, vectorised -> VCVTQQ2PD, which
 *               exists only in AVX-512 DQ (x86-64-v4); below v4 gcc converts
 *               one element at a time with CVTSI2SD.
 * main prints integers only (no printf of a double: glibc's own code). */
#include <stdint.h>
#include <stdio.h>

#define N 4096
static uint64_t u[N];
static int32_t x[N], y[N];
static int64_t q[N];
static double d[N];

__attribute__((noipa)) static void fill(uint64_t seed)
{
    for (int i = 0; i < N; i++) { /* 64-bit LCG (Knuth's MMIX constants): serial */
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        u[i] = seed;
        x[i] = (int32_t)(seed >> 33);
        y[i] = (int32_t)(seed >> 13);
        q[i] = (int64_t)(seed >> 11) - (INT64_C(1) << 52);
    }
}

__attribute__((noipa)) static uint64_t popcounts(const uint64_t *v, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += (uint64_t)__builtin_popcountll(v[i]);
    return s;
}

__attribute__((noipa)) static void scale_add(int32_t *restrict o, const int32_t *restrict p,
                                                 int n, int32_t k)
{
    for (int i = 0; i < n; i++)
        o[i] = (int32_t)((uint32_t)o[i] * (uint32_t)k + (uint32_t)p[i]);
}

__attribute__((noipa)) static void to_double(double *restrict o, const int64_t *restrict p, int n)
{
    for (int i = 0; i < n; i++)
        o[i] = (double)p[i];
}

int main(void)
{
    fill(42);
    uint64_t pc = popcounts(u, N);
    scale_add(x, y, N, 7);
    to_double(d, q, N);
    int64_t sx = 0, sd = 0;
    for (int i = 0; i < N; i++) {
        sx += x[i];
        sd += (int64_t)(d[i] / 1024.0);
    }
    printf("%llu %lld %lld\n", (unsigned long long)pc, (long long)sx, (long long)sd);
    return 0;
}
