/*
 * front.h - what the mode front-ends (gcm.c, cfb.c) share with front.c:
 * path resolution and aligned allocation.  Not installed.
 */
#ifndef VC_FRONT_H
#define VC_FRONT_H

#include "internal.h"
#include "vc_dispatch_hooks.h"

/* Resolve impl (VC_PATH_AUTO or a vc_path) for (mode, dir) into *path.
 * VC_OK, VC_ERR_CPU_MASK (bad VAESCRYPT_CPU_MASK), VC_ERR_ARGUMENT (no such
 * path), VC_ERR_UNSUPPORTED (CPU cannot run it; for AUTO: the library has no
 * tier at all for the mode), VC_ERR_INELIGIBLE (mode may not take it, or the
 * tier does not provide the operation). */
int vc_front_resolve(vc_mode m, vc_dir d, int impl, vc_path *path);

/* 64-byte aligned, zero-filled; size rounded up as aligned_alloc requires. */
void *vc_front_alloc(size_t size);
/* Zero then free (NULL allowed). */
void vc_front_free(void *p, size_t size);

static inline uint32_t vc_load_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void vc_store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void vc_store_be64(uint8_t *p, uint64_t v)
{
    vc_store_be32(p, (uint32_t)(v >> 32));
    vc_store_be32(p + 4, (uint32_t)v);
}

#endif
