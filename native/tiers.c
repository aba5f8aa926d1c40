/*
 * tiers.c - the path -> tier table.
 *
 * Its own unit, so that every user of the table (select.c's "is this
 * operation built?", the mode front-ends' key set-up, the probe) reaches it
 * through the one external symbol vc_tier_get.
 */
#include "internal.h"

static const vc_tier *const tiers[VC_PATH_COUNT] = {
    [VC_PATH_GENERIC] = &vc_tier_generic,
    [VC_PATH_AESNI] = &vc_tier_aesni,
    [VC_PATH_VAES_AVX2] = &vc_tier_vaes_avx2,
    [VC_PATH_AVX10_256] = &vc_tier_avx10_256,
    [VC_PATH_AVX512] = &vc_tier_avx512,
};

const vc_tier *vc_tier_get(vc_path p)
{
    return (unsigned)p < VC_PATH_COUNT ? tiers[p] : NULL;
}
