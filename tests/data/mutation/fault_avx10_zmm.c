/*
 * fault_avx10_zmm.c - TEST ONLY, mutation fault "avx10_256 must never touch
 * zmm".
 *
 * Linked with -Wl,--wrap=vc_tier_get (tests/doubles/fault_builds.py): the
 * avx10_256 tier's GCM entry points run one harmless zmm instruction, once
 * per call, and then the real ones.
 */
#include <pthread.h>

#include "fault_marker.h"
#include "internal.h"
#include "vc_tier_isa.h"

VC_FAULT_MARKER("AVX10_ZMM");

const vc_tier *__real_vc_tier_get(vc_path p);
const vc_tier *__wrap_vc_tier_get(vc_path p);

#define AVX10_TGT VC_ISA_TARGET(VC_ISA_AVX10_256)

static const vc_tier *real_tier;
static vc_tier zmm_tier;
static pthread_once_t tier_once = PTHREAD_ONCE_INIT;

/* The name keeps the tier's prefix: the instruction is the tier's. */
static __attribute__((noinline, target(AVX10_TGT))) void vc_avx10_256_fault_zmm(void)
{
    __asm__ volatile("vpxorq %%zmm31, %%zmm31, %%zmm31" ::: "xmm31");
}

static void vc_avx10_256_fault_gcm_enc(const vc_aes_key *k, const vc_ghash_key *g,
                                       uint8_t ctr[16], uint8_t X[16], const uint8_t *in,
                                       uint8_t *out, size_t len)
{
    vc_avx10_256_fault_zmm();
    real_tier->gcm_enc(k, g, ctr, X, in, out, len);
}

static void vc_avx10_256_fault_gcm_dec(const vc_aes_key *k, const vc_ghash_key *g,
                                       uint8_t ctr[16], uint8_t X[16], const uint8_t *in,
                                       uint8_t *out, size_t len)
{
    vc_avx10_256_fault_zmm();
    real_tier->gcm_dec(k, g, ctr, X, in, out, len);
}

static int vc_avx10_256_fault_gcm_oneshot(const vc_gcm_dir *d, const uint8_t iv[12],
                                          size_t iv_len, const uint8_t *aad, size_t aad_len,
                                          const uint8_t *in, uint8_t *out, size_t len,
                                          uint8_t *tag, size_t tag_len)
{
    vc_avx10_256_fault_zmm();
    return real_tier->gcm_oneshot(d, iv, iv_len, aad, aad_len, in, out, len, tag, tag_len);
}

static int vc_avx10_256_fault_gcm_whole(const vc_gcm_dir *d, const uint8_t iv[12],
                                        size_t iv_len, const uint8_t *aad, size_t aad_len,
                                        const uint8_t *in, uint8_t *out, size_t len,
                                        uint8_t *tag, size_t tag_len)
{
    vc_avx10_256_fault_zmm();
    return real_tier->gcm_whole(d, iv, iv_len, aad, aad_len, in, out, len, tag, tag_len);
}

static void make_tier(void)
{
    real_tier = __real_vc_tier_get(VC_PATH_AVX10_256);
    zmm_tier = *real_tier;
    if (zmm_tier.gcm_enc)
        zmm_tier.gcm_enc = vc_avx10_256_fault_gcm_enc;
    if (zmm_tier.gcm_dec)
        zmm_tier.gcm_dec = vc_avx10_256_fault_gcm_dec;
    if (zmm_tier.gcm_oneshot)
        zmm_tier.gcm_oneshot = vc_avx10_256_fault_gcm_oneshot;
    if (zmm_tier.gcm_whole) /* the one-shot route of long messages */
        zmm_tier.gcm_whole = vc_avx10_256_fault_gcm_whole;
}

const vc_tier *__wrap_vc_tier_get(vc_path p)
{
    (void)pthread_once(&tier_once, make_tier);
    return p == VC_PATH_AVX10_256 ? &zmm_tier : __real_vc_tier_get(p);
}
