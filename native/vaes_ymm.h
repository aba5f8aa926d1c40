/*
 * vaes_ymm.h - ymm vector operations common to the two 256-bit tiers
 * (tier_avx10_256.c: EVEX, tier_vaes_avx2.c: VEX).  Each tier adds the
 * operations whose encoding differs (3-way XOR, partial loads/stores, the
 * lane shift) and then includes vaes_common.h.
 */
#ifndef VC_VAES_YMM_H
#define VC_VAES_YMM_H

#define VC_W 32
typedef __m256i vc_v;

#define v_loadu(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define v_storeu(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define v_bcast(p) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define v_zero() _mm256_setzero_si256()
#define v_xor(a, b) _mm256_xor_si256((a), (b))
#define v_and(a, b) _mm256_and_si256((a), (b))
#define v_aesenc(a, k) _mm256_aesenc_epi128((a), (k))
#define v_aesenclast(a, k) _mm256_aesenclast_epi128((a), (k))
#define v_clmul(a, b, i) _mm256_clmulepi64_epi128((a), (b), (i))
#define v_shuf8(a, m) _mm256_shuffle_epi8((a), (m))
#define v_shufd(a, i) _mm256_shuffle_epi32((a), (i))
#define v_swap64(a) v_shufd((a), 0x4e)
#define v_bslli8(a) _mm256_bslli_epi128((a), 8)
#define v_bsrli8(a) _mm256_bsrli_epi128((a), 8)
#define v_slli64(a, n) _mm256_slli_epi64((a), (n))
#define v_srli64(a, n) _mm256_srli_epi64((a), (n))
#define v_srai32(a, n) _mm256_srai_epi32((a), (n))
#define v_slli32(a, n) _mm256_slli_epi32((a), (n))
#define v_add32(a, b) _mm256_add_epi32((a), (b))
#define v_ctr_lanes() _mm256_set_epi32(0, 0, 0, 1, 0, 0, 0, 0)
#define v_ctr_step() _mm256_set_epi32(0, 0, 0, 2, 0, 0, 0, 2)
#define v_bcast_x(x) _mm256_broadcastsi128_si256(x)
#define v_lo128(v) _mm256_castsi256_si128(v)
#define v_lane0_x(x) _mm256_zextsi128_si256(x)
#define v_lane0_load(p) _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p)))
/* v with its lane 1 replaced by the 128-bit x */
#define v_lane1_ins(v, x) _mm256_inserti128_si256((v), (x), 1)
#define v_lane0_store(p, v) _mm_storeu_si128((__m128i *)(void *)(p), _mm256_castsi256_si128(v))
/* Sum of the two lanes into lane 0, upper lane zero. */
#define v_hxor(v)                                                                                  \
    _mm256_zextsi128_si256(                                                                        \
        _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256((v), 1)))

#endif
