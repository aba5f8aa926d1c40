/*
 * tier_avx512.c - VAES + VPCLMULQDQ on EVEX zmm: 4 blocks per instruction,
 * 16 blocks per GCM / CFB128-decrypt iteration.
 *
 * The algorithms (reflected GHASH as POLYVAL, Karatsuba, Montgomery
 * reduction, the CTR/GHASH interleave, the CFB chains) live in
 * vaes_common.h; this file supplies the zmm vector operations.  Tails use
 * AVX512BW byte-masked loads and stores: masked-off bytes are never
 * accessed, so nothing outside [in, in+len) / [out, out+len) is touched.
 * The GHASH key-power table is the one layout shared with the ymm tiers.
 */
#include <immintrin.h>

#include "internal.h"
#include "vc_tier_isa.h"

#define VC_ISA_CHECK_LIST VC_ISA_AVX512
#include "tier_isa_check.h"

#define VC_TGT VC_ISA_TARGET(VC_ISA_AVX512)
#define VC_NAME(x) vc_avx512_##x
#define VC_W 64
typedef __m512i vc_v;

#define v_loadu(p) _mm512_loadu_si512((const void *)(p))
#define v_storeu(p, v) _mm512_storeu_si512((void *)(p), (v))
#define v_bcast(p) _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define v_zero() _mm512_setzero_si512()
#define v_xor(a, b) _mm512_xor_si512((a), (b))
#define v_xor3(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0x96)
/* Products summed two vectors at a time: see VC_ACC_PAIRS. */
#define VC_ACC_PAIRS 1
/* The accumulators in registers: see VC_ACC_PIN. */
#define VC_ACC_PIN(acc) __asm__("" : "+v"((acc).lo), "+v"((acc).hi), "+v"((acc).kara))
#define v_and(a, b) _mm512_and_si512((a), (b))
#define v_aesenc(a, k) _mm512_aesenc_epi128((a), (k))
#define v_aesenclast(a, k) _mm512_aesenclast_epi128((a), (k))
#define v_clmul(a, b, i) _mm512_clmulepi64_epi128((a), (b), (i))
#define v_shuf8(a, m) _mm512_shuffle_epi8((a), (m))
#define v_shufd(a, i) _mm512_shuffle_epi32((a), (_MM_PERM_ENUM)(i))
#define v_swap64(a) v_shufd((a), 0x4e)
#define v_bslli8(a) _mm512_bslli_epi128((a), 8)
#define v_bsrli8(a) _mm512_bsrli_epi128((a), 8)
#define v_slli64(a, n) _mm512_slli_epi64((a), (n))
#define v_srli64(a, n) _mm512_srli_epi64((a), (n))
#define v_srai32(a, n) _mm512_srai_epi32((a), (n))
#define v_slli32(a, n) _mm512_slli_epi32((a), (n))
#define v_add32(a, b) _mm512_add_epi32((a), (b))
#define v_ctr_lanes() _mm512_set_epi32(0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0)
#define v_ctr_step() _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4)
#define v_bcast_x(x) _mm512_broadcast_i32x4(x)
#define v_lo128(v) _mm512_castsi512_si128(v)
#define v_lane0_x(x) _mm512_zextsi128_si512(x)
#define v_lane0_load(p) _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(p)))
/* v with its lane 1 replaced by the 128-bit x */
#define v_lane1_ins(v, x) _mm512_inserti32x4((v), (x), 1)
#define v_lane0_store(p, v) _mm_storeu_si128((__m128i *)(void *)(p), _mm512_castsi512_si128(v))
/* n in 1..64 bytes */
#define vc_bmask(n) ((n) >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n)) - 1))
#define v_load_part(p, n) _mm512_maskz_loadu_epi8(vc_bmask(n), (const void *)(p))
#define v_store_part(p, v, n) _mm512_mask_storeu_epi8((void *)(p), vc_bmask(n), (v))
#define v_keep(v, n) _mm512_maskz_mov_epi8(vc_bmask(n), (v))
/* Byte-masked xmm loads, stores and compares (AVX-512BW/VL): the tag is
 * written and checked from its register (see VC_TAG_IN_REGS). */
#define VC_TAG_IN_REGS 1
/* [prev.lane3, cur.lane0, cur.lane1, cur.lane2]: VALIGNQ by 6 qwords */
#define v_shift_in(cur, prev) _mm512_alignr_epi64((cur), (prev), 6)

/* Sum of the four lanes into lane 0, upper lanes zero. */
static inline __attribute__((target(VC_TGT))) __m512i v_hxor(__m512i v)
{
    const __m256i a = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm512_zextsi128_si512(
        _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
}

/* 32 vector registers hold 8 keystream vectors beside the round keys: the
 * one-shot pass covers 512 bytes as two hash groups of 4 (see gcm_oneshot;
 * messages one group holds take a one-group instance). */
#define VC_OS_V 8
/* Decryption of 7-8 vectors (385-512 B) runs round by round: see
 * VC_PASS_RM.  In-process A/B, AES-256, median of alternated pairs over
 * three processes: decrypt 512 B +4.8 % and 1420 B +3.8 % on Zen 4, 512 B
 * +2.4 to +4.6 % on a Sapphire Rapids class Xeon; encryption (kept vector
 * by vector, VC_RM_ENC 0) and the other sizes level. */
/* The long route's loop finishes the tag of decryptions too: see
 * VC_PASS_FIN. */
#define VC_PASS_FIN 2
#define VC_PASS_RM 1
#define VC_RM_MIN 7
#define VC_RM_ENC 0
/* E(J0)'s xmm rounds in their EVEX form: see x_aesenc. */
#define VC_X_AES_EVEX 1

#include "vaes_common.h"

const vc_tier vc_tier_avx512 = {
    .path = VC_PATH_AVX512,
    .setkey = vc_aesni_setkey,
    .encrypt_block = vc_aesni_encrypt_block,
    .ghash_init = vc_avx512_ghash_init,
    .ghash = vc_avx512_ghash,
    .gcm_enc = vc_avx512_gcm_enc,
    .gcm_dec = vc_avx512_gcm_dec,
    .gcm_oneshot = vc_avx512_gcm_oneshot,
    /* A message of one ymm vector goes to the avx10_256 pass (same key
     * schedule, same power table layout, the same ISA list): one block's
     * AES is a latency chain, and a 512-bit VAESENC on Zen 4 (two 256-bit
     * halves) is slower per round than a 256-bit one.  In-process A/B on
     * Zen 4: +9 to +11 % at 16 B and +5 to +9 % at 32 B, both directions,
     * for -2 to -3 % at 48-128 B encrypt (the extra test; routing up to
     * 64 B measured level at 48-64 B encrypt, -3 % decrypt). */
    .tiny = &vc_tier_avx10_256,
    .tiny_max = 32,
    /* Messages one hash group holds: the one-group instance. */
    .gcm_oneshot_short = vc_avx512_gcm_oneshot_short,
    .short_max = VC_SHORT_BYTES,
    .short_powers = VC_TABLE_POWERS,
    /* No gcm_whole: its ~800 bytes do not fit this tier's 16 KiB GCM code
     * budget (two-group pass), and the sizes it speeds up (1-4 KiB
     * decrypt, +2 to +9 %) already beat their targets here. */
    .gcm_whole = NULL,
    .whole_min = SIZE_MAX,
    .cfb128_enc = vc_avx512_cfb128_enc,
    .cfb128_dec = vc_avx512_cfb128_dec,
    .cfb8_enc = NULL, /* CFB8/CFB1 never take a VAES path */
    .cfb8_dec = NULL,
    .cfb1_enc = NULL,
    .cfb1_dec = NULL,
};
