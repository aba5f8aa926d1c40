/*
 * tier_vaes_avx2.c - VAES + VPCLMULQDQ on ymm, VEX encoding only (no EVEX,
 * no zmm, no ymm16+, no opmasks): for CPUs with VAES but without AVX-512
 * (Zen 3, Alder Lake ...).  2 blocks per instruction, 16 per GCM iteration.
 * The 3-way XOR is two VPXORs; partial loads/stores are VPMASKMOVD on the
 * whole dwords plus up to 3 single bytes, since VEX has no byte-masked
 * loads/stores and nothing outside the caller's buffers may be touched.
 * Algorithms: see vaes_common.h.
 */
#include <immintrin.h>
#include "internal.h"
#include "vc_tier_isa.h"

#define VC_ISA_CHECK_LIST VC_ISA_VAES_AVX2
#include "tier_isa_check.h"

#define VC_TGT VC_ISA_TARGET(VC_ISA_VAES_AVX2)
#define VC_NAME(x) vc_vaes_avx2_##x
#include "vaes_ymm.h"

#define v_xor3(a, b, c) v_xor(v_xor((a), (b)), (c))
/* The accumulators in registers: see VC_ACC_PIN. */
#define VC_ACC_PIN(acc) __asm__("" : "+x"((acc).lo), "+x"((acc).hi), "+x"((acc).kara))

/* Partial loads and stores of n in 1..31 bytes without touching anything
 * outside [p, p+n).  A whole first 16 bytes (n >= 16) is one plain xmm
 * load or store; the rest, m = 1..15 bytes of one xmm half, is VPMASKMOVD
 * on its m/4 whole dwords (masked-off elements are neither read nor
 * written, and cannot fault) and the 0..3 bytes after them one by one.
 * (A single-block message, AAD or tail is the common partial vector: for
 * it no mask is built at all.)  n is a public length, so the branches on
 * it leak nothing. */
static inline __attribute__((target(VC_TGT))) __m128i vc_load_part128(const uint8_t *p, size_t m)
{
    const size_t nd = m >> 2, nb = m & 3;
    const __m128i idx = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i nv = _mm_set1_epi32((int)nd);
    __m128i v = _mm_maskload_epi32((const int *)(const void *)p, _mm_cmpgt_epi32(nv, idx));
    if (nb) {
        const uint8_t *q = p + 4 * nd;
        uint32_t t = q[0];
        if (nb > 1)
            t |= (uint32_t)q[1] << 8;
        if (nb > 2)
            t |= (uint32_t)q[2] << 16;
        v = _mm_or_si128(v, _mm_and_si128(_mm_cmpeq_epi32(nv, idx), _mm_set1_epi32((int)t)));
    }
    return v;
}

static inline __attribute__((target(VC_TGT))) void vc_store_part128(uint8_t *p, __m128i v, size_t m)
{
    const size_t nd = m >> 2, nb = m & 3;
    const __m128i nv = _mm_set1_epi32((int)nd);
    _mm_maskstore_epi32((int *)(void *)p, _mm_cmpgt_epi32(nv, _mm_setr_epi32(0, 1, 2, 3)), v);
    if (nb) {
        uint8_t *q = p + 4 * nd;
        /* dword nd of v into lane 0 (VPERMILPS with a variable index) */
        const uint32_t t = (uint32_t)_mm_cvtsi128_si32(
            _mm_castps_si128(_mm_permutevar_ps(_mm_castsi128_ps(v), nv)));
        q[0] = (uint8_t)t;
        if (nb > 1)
            q[1] = (uint8_t)(t >> 8);
        if (nb > 2)
            q[2] = (uint8_t)(t >> 16);
    }
}

static inline __attribute__((target(VC_TGT))) __m256i v_load_part(const uint8_t *p, size_t n)
{
    if (n < 16)
        return _mm256_zextsi128_si256(vc_load_part128(p, n));
    const __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i hi = n > 16 ? vc_load_part128(p + 16, n - 16) : _mm_setzero_si128();
    return _mm256_set_m128i(hi, lo);
}

static inline __attribute__((target(VC_TGT))) void v_store_part(uint8_t *p, __m256i v, size_t n)
{
    if (n < 16) {
        vc_store_part128(p, _mm256_castsi256_si128(v), n);
        return;
    }
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_castsi256_si128(v));
    if (n > 16)
        vc_store_part128(p + 16, _mm256_extracti128_si256(v, 1), n - 16);
}

/* Out of line for the main loop's rare tails (gcm_crypt, ghash, CFB128):
 * inlined there they change the register allocation of the whole loop. */
#define v_load_part_cold v_load_part_cold
#define v_store_part_cold v_store_part_cold
static __attribute__((noinline, target(VC_TGT))) __m256i v_load_part_cold(const uint8_t *p, size_t n)
{
    return v_load_part(p, n);
}
static __attribute__((noinline, target(VC_TGT))) void v_store_part_cold(uint8_t *p, __m256i v, size_t n)
{
    v_store_part(p, v, n);
}

/* Zero bytes n..31: compare the byte index with n (all values < 128, so
 * the signed byte compare is exact). */
static inline __attribute__((target(VC_TGT))) __m256i v_keep(__m256i v, size_t n)
{
    const __m256i idx = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                         17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    return _mm256_and_si256(v, _mm256_cmpgt_epi8(_mm256_set1_epi8((char)n), idx));
}

/* The decrypt tag check in registers, 1 iff the n (1..16, public) bytes at
 * tag equal the first n bytes of t: VPMASKMOVD reads the n/4 whole dwords
 * (masked-off ones are not read), the 0..3 bytes after them are read one
 * by one, and the XOR of the two, masked to n bytes, is tested once with
 * VPTEST (every byte counts, no early exit).  No call: a call clobbers
 * every vector register, and decryption keeps its keystream in registers
 * across this check (no plaintext is written before it). */
static inline __attribute__((always_inline, target(VC_TGT))) int vc_vex_tag_eq(__m128i t,
                                                                                const uint8_t *tag,
                                                                                size_t n)
{
    /* The common length: a plain load, no masks (and no VPMASKMOVD on the
     * way to the decision that lets a decryption write).  In-process A/B
     * (Sapphire Rapids class, AES-256, three processes, 9-15 pairs),
     * decrypt: +1.0 to +1.4 % at 16-256 B, +1.9 % at 300 B, -1.6 to +1.0 %
     * at 512 B, -0.9 to +0.2 % at 768-1420 B; +107 B of GCM text. */
    if (n == 16) {
        const __m128i diff = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)tag), t);
        return _mm_testz_si128(diff, diff);
    }
    const size_t nd = n >> 2, nb = n & 3;
    const __m128i idx = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i nv = _mm_set1_epi32((int)nd);
    __m128i v = _mm_maskload_epi32((const int *)(const void *)tag, _mm_cmpgt_epi32(nv, idx));
    if (nb) {
        const uint8_t *q = tag + 4 * nd;
        uint32_t w = q[0];
        if (nb > 1)
            w |= (uint32_t)q[1] << 8;
        if (nb > 2)
            w |= (uint32_t)q[2] << 16;
        v = _mm_or_si128(v, _mm_and_si128(_mm_cmpeq_epi32(nv, idx), _mm_set1_epi32((int)w)));
    }
    const __m128i keep = _mm_cmpgt_epi8(_mm_set1_epi8((char)n),
                                        _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                      13, 14, 15));
    const __m128i diff = _mm_and_si128(_mm_xor_si128(v, t), keep);
    return _mm_testz_si128(diff, diff);
}
#define v_tag_eq(t, tag, n) vc_vex_tag_eq((t), (tag), (n))

/* [prev.lane1, cur.lane0] */
#define v_shift_in(cur, prev) _mm256_permute2x128_si256((prev), (cur), 0x21)

/* The one-shot short pass covers 256 bytes (8 ymm keystream vectors), as
 * on zmm: 16 registers cannot hold them beside the keys, but a spilled
 * round key is a memory operand of VAESENC (as in the main loop), and this
 * measured 1.4-1.5x faster at 200-256 bytes than a 4-vector pass on Zen 4
 * (5% slower at 64). */
#define VC_SHORT_V 8
/* The main loop runs two batches (8 ymm vectors) per step: see VC_DBL. */
#define VC_DBL 1
/* The one-shot pass handles its one partial vector apart: see VC_LAST_APART. */
#define VC_LAST_APART 1
/* No whole-loop encrypt route in the pass (gcm_whole has it): VC_PASS_FIN. */
#define VC_PASS_FIN 0
/* The pass runs 6-8 vector messages round by round, with the GHASH
 * multiplies after the rounds: see VC_PASS_RM and VC_RM_HASH. */
#define VC_PASS_RM 1
#define VC_RM_HASH 0
/* GCM loads each round key where it is used: see VC_KEYS_AT_USE. */
#define VC_KEYS_AT_USE 1

#include "vaes_common.h"

const vc_tier vc_tier_vaes_avx2 = {
    .path = VC_PATH_VAES_AVX2,
    .setkey = vc_aesni_setkey,
    .encrypt_block = vc_aesni_encrypt_block,
    .ghash_init = vc_vaes_avx2_ghash_init,
    .ghash = vc_vaes_avx2_ghash,
    .gcm_enc = vc_vaes_avx2_gcm_enc,
    .gcm_dec = vc_vaes_avx2_gcm_dec,
    .gcm_oneshot = vc_vaes_avx2_gcm_oneshot,
    .gcm_whole = vc_vaes_avx2_gcm_whole,
    .whole_min = VC_OS_BYTES,
    .whole_step = {VC_WHOLE_STEP_ENC, 1}, /* encrypt, decrypt: see gcm_whole */
    .cfb128_enc = vc_vaes_avx2_cfb128_enc,
    .cfb128_dec = vc_vaes_avx2_cfb128_dec,
    .cfb8_enc = NULL, /* CFB8/CFB1 never take a VAES path */
    .cfb8_dec = NULL,
    .cfb1_enc = NULL,
    .cfb1_dec = NULL,
};
