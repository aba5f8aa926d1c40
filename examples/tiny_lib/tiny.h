/* tiny: a one-function library with two implementations of the same sum
 * (AVX2 and scalar) and its own CPUID + XGETBV dispatcher.  It stands for
 * any outside project that wants sdematrix to prove, per CPU model, which
 * path its dispatcher took. */
#ifndef TINY_H
#define TINY_H

#include <stddef.h>
#include <stdint.h>

/* The sum of v[0..n) modulo 2^32, on the best path this CPU and OS allow. */
uint32_t tiny_sum(const uint32_t *v, size_t n);

/* "avx2" or "scalar": the path tiny_sum uses here. */
const char *tiny_path(void);

#endif
