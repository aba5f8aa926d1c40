/*
 * front.c - path -> tier table, "is this operation built?", path resolution
 * for the mode front-ends, status messages and the version string.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"

/* ------------------------------------------------- fork generation -- */

/* 0 in a process that never forked; +1 in each child (see vc_busy in
 * front.h).  Written only by the atfork child handler, which runs in the
 * child's one thread before fork() returns there; read relaxed: a thread the
 * child starts later is ordered after it by pthread_create. */
static _Atomic unsigned long fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add_explicit(&fork_generation, 1ul, memory_order_relaxed);
}

static void fork_register(void)
{
    /* If registration fails (ENOMEM) a child after a fork mid-call reports
     * VC_ERR_STATE as before: no worse than without the handler. */
    (void)pthread_atfork(NULL, NULL, on_fork_child);
}

void vc_fork_watch(void)
{
    (void)pthread_once(&fork_once, fork_register);
}

unsigned long vc_fork_generation(void)
{
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

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

int vc_front_resolve(vc_mode m, vc_dir d, int impl, vc_path *path)
{
    if (vc_dispatch_error())
        return VC_ERR_CPU_MASK;
    if (impl == VC_PATH_AUTO) {
        vc_path p = vc_select(m, d);
        if (!vc_path_implemented(m, d, p))
            return VC_ERR_UNSUPPORTED;
        *path = p;
        return VC_OK;
    }
    if (impl < 0 || impl >= VC_PATH_COUNT)
        return VC_ERR_ARGUMENT;
    if (!vc_path_supported_for(vc_cpu_features_get(), m, (vc_path)impl))
        return VC_ERR_UNSUPPORTED;
    if (!vc_path_eligible(m, d, (vc_path)impl) || !vc_path_implemented(m, d, (vc_path)impl))
        return VC_ERR_INELIGIBLE;
    *path = (vc_path)impl;
    return VC_OK;
}

void *vc_front_alloc(size_t size)
{
    size_t rounded = (size + VC_ALIGN - 1) & ~(size_t)(VC_ALIGN - 1);
    void *p = aligned_alloc(VC_ALIGN, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

void vc_front_free(void *p, size_t size)
{
    if (!p)
        return;
    vc_secure_zero(p, size);
    free(p);
}

const char *vc_status_message(int status)
{
    switch (status) {
    case VC_OK: return "success";
    case VC_ERR_KEY_LENGTH: return "AES key must be 16, 24 or 32 bytes";
    case VC_ERR_IV_LENGTH: return "IV length invalid (GCM: 1 byte to 2^61-1 bytes; CFB: 16 bytes)";
    case VC_ERR_TAG_LENGTH: return "GCM tag length must be 4, 8 or 12..16 bytes";
    case VC_ERR_UNSUPPORTED: return "code path not supported by this CPU";
    case VC_ERR_INELIGIBLE: return "code path not available for this mode";
    case VC_ERR_AUTH: return "authentication tag mismatch";
    case VC_ERR_DATA_LENGTH: return "data or AAD longer than SP 800-38D allows";
    case VC_ERR_STATE: return "streaming call out of order, or the stream is in use by another thread";
    case VC_ERR_NOMEM: return "out of memory";
    case VC_ERR_ARGUMENT: return "invalid argument";
    case VC_ERR_CPU_MASK: return "VAESCRYPT_CPU_MASK is invalid";
    case VC_ERR_OVERLAP:
        return "input and output buffers overlap partially (only exact in-place is allowed)";
    case VC_ERR_OBJECT:
        return "object of the wrong kind (e.g. a CFB key where a GCM key belongs), or freed";
    case VC_ERR_FORKED:
        return "stream was inside a call in another thread when the process forked: "
               "its state is incomplete in this process (start a new stream)";
    default: return "unknown status";
    }
}

const char *vc_version(void)
{
    return "0.1.0";
}
