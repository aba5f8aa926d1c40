/*
 * tier_vaes_avx2.c - VAES + VPCLMULQDQ on ymm, VEX encoding only (no EVEX,
 * no zmm, no ymm16+, no opmasks): for CPUs with VAES but without AVX-512
 * (Zen 3, Alder Lake ...).  2 blocks per instruction, 8 per iteration.
 * The 3-way XOR is two VPXORs; partial loads/stores go through a 32-byte
 * stack buffer (wiped after use) since VEX has no byte-masked stores and
 * nothing outside the caller's buffers may be read or written.
 * Algorithms: see vaes_common.h.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "vc_tier_isa.h"

#define VC_ISA_CHECK_LIST VC_ISA_VAES_AVX2
#include "tier_isa_check.h"

#define VC_TGT VC_ISA_TARGET(VC_ISA_VAES_AVX2)
#define VC_NAME(x) vc_vaes_avx2_##x
#include "vaes_ymm.h"

#define v_xor3(a, b, c) v_xor(v_xor((a), (b)), (c))

/* n in 1..32 bytes; the copy bounds every access to [p, p+n). */
/* Out of line: the tails are cold and are unrolled 4x at several sites. */
static __attribute__((noinline, target(VC_TGT))) __m256i v_load_part(const uint8_t *p, size_t n)
{
    alignas(32) uint8_t buf[32] = {0};
    memcpy(buf, p, n);
    const __m256i v = v_loadu(buf);
    vc_secure_zero(buf, sizeof buf);
    return v;
}

static __attribute__((noinline, target(VC_TGT))) void v_store_part(uint8_t *p, __m256i v, size_t n)
{
    alignas(32) uint8_t buf[32];
    v_storeu(buf, v);
    memcpy(p, buf, n);
    vc_secure_zero(buf, sizeof buf);
}

/* Zero bytes n..31: compare the byte index with n (all values < 128, so
 * the signed byte compare is exact). */
static inline __attribute__((target(VC_TGT))) __m256i v_keep(__m256i v, size_t n)
{
    const __m256i idx = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                         17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    return _mm256_and_si256(v, _mm256_cmpgt_epi8(_mm256_set1_epi8((char)n), idx));
}

/* [prev.lane1, cur.lane0] */
#define v_shift_in(cur, prev) _mm256_permute2x128_si256((prev), (cur), 0x21)

#include "vaes_common.h"

#ifdef VC_FAULT_CFB8_VAES
/* FAULT BUILD ONLY (mutation test "CFB8 must never run VAES"): a correct
 * CFB8 whose block cipher is a 1-lane ymm VAESENC chain, so a CFB8 call
 * mis-routed to this tier shows VAES in the instruction mix. */
static VC_FN void vc_vaes_avx2_cfb8(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                    uint8_t *out, size_t len, int enc)
{
    for (size_t i = 0; i < len; i++) {
        __m256i s = _mm256_xor_si256(v_lane0_load(iv), v_bcast(k->rk[0]));
        for (unsigned r = 1; r < k->rounds; r++)
            s = _mm256_aesenc_epi128(s, v_bcast(k->rk[r]));
        s = _mm256_aesenclast_epi128(s, v_bcast(k->rk[k->rounds]));
        const uint8_t b = in[i]; /* read first: in == out allowed */
        const uint8_t o = (uint8_t)(b ^ (uint8_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(s)));
        out[i] = o;
        const uint8_t c = enc ? o : b; /* the ciphertext byte is fed back */
        memmove(iv, iv + 1, 15);
        iv[15] = c;
    }
}
static VC_FN void vc_vaes_avx2_cfb8_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                        uint8_t *out, size_t len)
{
    vc_vaes_avx2_cfb8(k, iv, in, out, len, 1);
}
static VC_FN void vc_vaes_avx2_cfb8_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                        uint8_t *out, size_t len)
{
    vc_vaes_avx2_cfb8(k, iv, in, out, len, 0);
}
#define VC_CFB8_ENC vc_vaes_avx2_cfb8_enc
#define VC_CFB8_DEC vc_vaes_avx2_cfb8_dec
#else
#define VC_CFB8_ENC NULL /* CFB8/CFB1 never take a VAES path */
#define VC_CFB8_DEC NULL
#endif

const vc_tier vc_tier_vaes_avx2 = {
    .path = VC_PATH_VAES_AVX2,
    .setkey = vc_aesni_setkey,
    .encrypt_block = vc_aesni_encrypt_block,
    .ghash_init = vc_vaes_avx2_ghash_init,
    .ghash = vc_vaes_avx2_ghash,
    .gcm_enc = vc_vaes_avx2_gcm_enc,
    .gcm_dec = vc_vaes_avx2_gcm_dec,
    .gcm_two_calls = 1,
    .cfb128_enc = vc_vaes_avx2_cfb128_enc,
    .cfb128_dec = vc_vaes_avx2_cfb128_dec,
    .cfb8_enc = VC_CFB8_ENC,
    .cfb8_dec = VC_CFB8_DEC,
    .cfb1_enc = NULL,
    .cfb1_dec = NULL,
};
