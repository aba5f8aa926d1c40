/*
 * select.c - the library's path selection: which paths this library has
 * code for (from the tier tables), handed to the pure policy of
 * dispatch/policy.c together with the CPU's features.
 *
 * The calls go one way only: native/ calls dispatch/, never the reverse.
 */
#include "internal.h"

/* The operations a (mode, direction) calls on its tier.  A placeholder tier
 * (NULL members) therefore never gets selected or forced. */
int vc_path_implemented(vc_mode m, vc_dir d, vc_path p)
{
    const vc_tier *t = vc_tier_get(p);
    int enc = d == VC_DIR_ENCRYPT;
    if (!t || (unsigned)d >= VC_DIR_COUNT || !t->setkey)
        return 0;
    switch (m) {
    case VC_MODE_GCM:
        return t->encrypt_block && t->ghash_init && t->ghash &&
               (enc ? t->gcm_enc != NULL : t->gcm_dec != NULL);
    case VC_MODE_CFB128: /* encrypt_block: partial segments */
        return t->encrypt_block && (enc ? t->cfb128_enc != NULL : t->cfb128_dec != NULL);
    case VC_MODE_CFB8:
        return enc ? t->cfb8_enc != NULL : t->cfb8_dec != NULL;
    case VC_MODE_CFB1:
        return enc ? t->cfb1_enc != NULL : t->cfb1_dec != NULL;
    default:
        return 0;
    }
}

/* The policy's `built` argument: 1u << p for every path p implemented for
 * (m, d). */
static uint32_t built_paths(vc_mode m, vc_dir d)
{
    uint32_t built = 0;
    for (int p = 0; p < VC_PATH_COUNT; p++)
        if (vc_path_implemented(m, d, (vc_path)p))
            built |= 1u << (unsigned)p;
    return built;
}

vc_path vc_select_with(const vc_cpu_features *f, vc_mode m, vc_dir d)
{
    return vc_policy_select(f, m, d, built_paths(m, d));
}

vc_path vc_select(vc_mode m, vc_dir d)
{
    return vc_select_with(vc_cpu_features_get(), m, d);
}

int vc_available(vc_mode m, vc_dir d, int out[VC_PATH_COUNT])
{
    return vc_policy_available(vc_cpu_features_get(), m, d, built_paths(m, d), out);
}

int vc_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, char *buf, int buflen)
{
    return vc_policy_explain(f, m, d, built_paths(m, d), buf, buflen);
}
