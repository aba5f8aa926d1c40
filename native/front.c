/*
 * front.c - path resolution for the mode front-ends (through select.c),
 * aligned allocation, fork watching, status messages and the version string.
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

/* The build passes src/sdematrix/_version.py's __version__
 * (src/vaescrypt/_buildinfo.py: version_define). */
#ifndef VC_VERSION
#error "VC_VERSION is not defined: build with src/vaescrypt/_buildinfo.py's flags"
#endif
const char *vc_version(void)
{
    return VC_VERSION;
}
