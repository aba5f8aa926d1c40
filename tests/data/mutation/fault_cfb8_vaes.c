/*
 * fault_cfb8_vaes.c - TEST ONLY, mutation fault "CFB8 must never run VAES".
 *
 * Linked with -Wl,--wrap=vc_tier_get,--wrap=vc_policy_select
 * (tests/doubles/fault_builds.py):
 *   - the avx512 and vaes_avx2 tiers gain a CFB8 whose block cipher is a
 *     1-lane VAESENC chain (zmm / ymm): correct output, so a CFB8 call
 *     mis-routed to one of them shows VAES in the instruction mix;
 *   - CFB8 is selected from GCM's wide-first list, with no eligibility rule,
 *     so on a VAES CPU it lands on whichever of those tiers the CPU may run
 *     (avx10_256 has no CFB8 and is passed over, being not built for it).
 */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "fault_marker.h"
#include "internal.h"
#include "vc_tier_isa.h"

VC_FAULT_MARKER("CFB8_VAES");

const vc_tier *__real_vc_tier_get(vc_path p);
const vc_tier *__wrap_vc_tier_get(vc_path p);
vc_path __real_vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built);
vc_path __wrap_vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built);

/* The CFB8 shift register around one keystream byte ks (in == out allowed). */
static inline void cfb8_byte(uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t i,
                             uint8_t ks, int enc)
{
    const uint8_t b = in[i]; /* read first: in may be out */
    const uint8_t o = (uint8_t)(b ^ ks);
    out[i] = o;
    memmove(iv, iv + 1, 15);
    iv[15] = enc ? o : b; /* the ciphertext byte is fed back */
}

/* noinline: the tracer names the VAES instructions by these symbols. */
static __attribute__((noinline, target(VC_ISA_TARGET(VC_ISA_AVX512)))) void
vc_avx512_cfb8(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len,
               int enc)
{
#define ZMM_KEY(r) _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)k->rk[r]))
    for (size_t i = 0; i < len; i++) {
        __m512i s = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)iv));
        s = _mm512_xor_si512(s, ZMM_KEY(0));
        for (unsigned r = 1; r < k->rounds; r++)
            s = _mm512_aesenc_epi128(s, ZMM_KEY(r));
        s = _mm512_aesenclast_epi128(s, ZMM_KEY(k->rounds));
        cfb8_byte(iv, in, out, i, (uint8_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(s)), enc);
    }
#undef ZMM_KEY
}

static __attribute__((noinline, target(VC_ISA_TARGET(VC_ISA_VAES_AVX2)))) void
vc_vaes_avx2_cfb8(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out,
                  size_t len, int enc)
{
#define YMM_KEY(r) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)k->rk[r]))
    for (size_t i = 0; i < len; i++) {
        __m256i s = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)iv));
        s = _mm256_xor_si256(s, YMM_KEY(0));
        for (unsigned r = 1; r < k->rounds; r++)
            s = _mm256_aesenc_epi128(s, YMM_KEY(r));
        s = _mm256_aesenclast_epi128(s, YMM_KEY(k->rounds));
        cfb8_byte(iv, in, out, i, (uint8_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(s)), enc);
    }
#undef YMM_KEY
}

static void vc_avx512_cfb8_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                               uint8_t *out, size_t len)
{
    vc_avx512_cfb8(k, iv, in, out, len, 1);
}
static void vc_avx512_cfb8_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                               uint8_t *out, size_t len)
{
    vc_avx512_cfb8(k, iv, in, out, len, 0);
}
static void vc_vaes_avx2_cfb8_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                  uint8_t *out, size_t len)
{
    vc_vaes_avx2_cfb8(k, iv, in, out, len, 1);
}
static void vc_vaes_avx2_cfb8_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                  uint8_t *out, size_t len)
{
    vc_vaes_avx2_cfb8(k, iv, in, out, len, 0);
}

static vc_tier zmm_tier, ymm_tier;
static pthread_once_t tiers_once = PTHREAD_ONCE_INIT;

static void make_tiers(void)
{
    zmm_tier = *__real_vc_tier_get(VC_PATH_AVX512);
    zmm_tier.cfb8_enc = vc_avx512_cfb8_enc;
    zmm_tier.cfb8_dec = vc_avx512_cfb8_dec;
    ymm_tier = *__real_vc_tier_get(VC_PATH_VAES_AVX2);
    ymm_tier.cfb8_enc = vc_vaes_avx2_cfb8_enc;
    ymm_tier.cfb8_dec = vc_vaes_avx2_cfb8_dec;
}

const vc_tier *__wrap_vc_tier_get(vc_path p)
{
    (void)pthread_once(&tiers_once, make_tiers);
    if (p == VC_PATH_AVX512 && zmm_tier.setkey)
        return &zmm_tier;
    if (p == VC_PATH_VAES_AVX2 && ymm_tier.setkey)
        return &ymm_tier;
    return __real_vc_tier_get(p);
}

static int is_vaes(vc_path p)
{
    return p == VC_PATH_AVX512 || p == VC_PATH_AVX10_256 || p == VC_PATH_VAES_AVX2;
}

/* CFB8: a VAES path if GCM's list (wide first, every path eligible) finds
 * one built for CFB8, else the true rule (aesni or generic). */
vc_path __wrap_vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built)
{
    if (m == VC_MODE_CFB8) {
        vc_path wide = __real_vc_policy_select(f, VC_MODE_GCM, d, built);
        if (is_vaes(wide))
            return wide;
    }
    return __real_vc_policy_select(f, m, d, built);
}
