/*
 * tier_avx10_256.c - VAES + VPCLMULQDQ, EVEX-encoded, on ymm ONLY: 2 blocks
 * per instruction, 16 blocks per GCM and 8 per CFB128-decrypt iteration.
 * Runs on AVX512VL CPUs and on AVX10/256 CPUs that have no 512-bit vectors
 * at all, so no zmm register may ever be touched (checked with objdump by
 * the test suite).  What makes it EVEX (and not the vaes_avx2 tier):
 *   - VPTERNLOGD for every 3-way XOR of the GHASH sums,
 *   - opmask (k-register) byte-masked loads/stores for the tails, which never
 *     touch bytes outside the caller's buffers,
 *   - VALIGNQ for the CFB128-decrypt lane shift,
 *   - the compiler may also use ymm16..31 (32 vector registers).
 * prefer-vector-width=256 keeps the compiler's own code generation off zmm.
 * Algorithms: see vaes_common.h.
 */
#include <immintrin.h>

#include "internal.h"
#include "vc_tier_isa.h"

#define VC_ISA_CHECK_LIST VC_ISA_AVX10_256
#include "tier_isa_check.h"

/* The ISA from its one declaration, plus (GCC) a tuning flag, not an ISA.
 * clang rejects prefer-vector-width inside target("...") and would drop the
 * whole attribute: a clang build passes -mprefer-vector-width=256 instead
 * (tests/fuzz/build_fuzzer.py does). */
#if defined(__clang__)
#define VC_TGT VC_ISA_TARGET(VC_ISA_AVX10_256)
#else
#define VC_TGT VC_ISA_TARGET(VC_ISA_AVX10_256) ",prefer-vector-width=256"
#endif
#define VC_NAME(x) vc_avx10_256_##x
#include "vaes_ymm.h"

#define v_xor3(a, b, c) _mm256_ternarylogic_epi32((a), (b), (c), 0x96)
/* Products summed two vectors at a time: see VC_ACC_PAIRS. */
#define VC_ACC_PAIRS 1
/* The accumulators in registers: see VC_ACC_PIN. */
#define VC_ACC_PIN(acc) __asm__("" : "+v"((acc).lo), "+v"((acc).hi), "+v"((acc).kara))
/* n in 1..32 bytes */
#define vc_bmask(n) ((n) >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << (n)) - 1))
#define v_load_part(p, n) _mm256_maskz_loadu_epi8(vc_bmask(n), (const void *)(p))
#define v_store_part(p, v, n) _mm256_mask_storeu_epi8((void *)(p), vc_bmask(n), (v))
#define v_keep(v, n) _mm256_maskz_mov_epi8(vc_bmask(n), (v))
/* Byte-masked xmm loads, stores and compares (AVX-512BW/VL): the tag is
 * written and checked from its register (see VC_TAG_IN_REGS). */
#define VC_TAG_IN_REGS 1
/* [prev.lane1, cur.lane0]: VALIGNQ by 2 qwords */
#define v_shift_in(cur, prev) _mm256_alignr_epi64((cur), (prev), 2)

/* 32 vector registers hold 8 keystream vectors beside the round keys: the
 * one-shot short pass covers 256 bytes, as on zmm. */
#define VC_SHORT_V 8
/* The main loop runs two batches (8 ymm vectors) per step: see VC_DBL. */
#define VC_DBL 1
/* The pass runs 6-8 vector messages round by round: see VC_PASS_RM.
 * Encryption only on AMD (the key's round_major, VC_RM_ENC 2): see there. */
#define VC_PASS_RM 1
#define VC_RM_ENC 2

/* E(J0)'s xmm rounds in their EVEX form: see x_aesenc. */
#define VC_X_AES_EVEX 1

#include "vaes_common.h"

const vc_tier vc_tier_avx10_256 = {
    .path = VC_PATH_AVX10_256,
    .setkey = vc_aesni_setkey,
    .encrypt_block = vc_aesni_encrypt_block,
    .ghash_init = vc_avx10_256_ghash_init,
    .ghash = vc_avx10_256_ghash,
    .gcm_enc = vc_avx10_256_gcm_enc,
    .gcm_dec = vc_avx10_256_gcm_dec,
    .gcm_oneshot = vc_avx10_256_gcm_oneshot,
    .gcm_whole = vc_avx10_256_gcm_whole,
    .whole_min = VC_OS_BYTES,
    .whole_step = {VC_WHOLE_STEP_ENC, 1}, /* encrypt, decrypt: see gcm_whole */
    .cfb128_enc = vc_avx10_256_cfb128_enc,
    .cfb128_dec = vc_avx10_256_cfb128_dec,
    .cfb8_enc = NULL, /* CFB8/CFB1 never take a VAES path */
    .cfb8_dec = NULL,
    .cfb1_enc = NULL,
    .cfb1_dec = NULL,
};
