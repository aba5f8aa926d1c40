/*
 * front.h - what the mode front-ends (gcm.c, cfb.c) share with front.c:
 * path resolution and aligned allocation.  Not installed.
 */
#ifndef VC_FRONT_H
#define VC_FRONT_H

#include <stdatomic.h>

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

/*
 * One caller at a time per stream.  A stream is mutable state (partial-block
 * index, counter, GHASH accumulator) that its update runs through without
 * locks; the Python binding releases the GIL around the call, so two threads
 * holding one stream object can be inside it at once.  Every stream entry
 * point takes this flag first (one atomic exchange, `lock xchg` on x86, a
 * few ns uncontended) and returns VC_ERR_STATE if another call holds it:
 * concurrent use is refused, never waited for (as cryptography refuses it),
 * so a caller that really shares a stream must serialize its own calls.
 * acquire/release order the stream's plain fields between two callers that
 * take turns on different threads.
 */
typedef atomic_flag vc_busy;

static inline int vc_busy_enter(vc_busy *b)
{
    return !atomic_flag_test_and_set_explicit(b, memory_order_acquire);
}
static inline void vc_busy_leave(vc_busy *b)
{
    atomic_flag_clear_explicit(b, memory_order_release);
}

/*
 * 1 when the n bytes at in and at out share some bytes without being the
 * same range.  Exact in-place (in == out) is fine: every engine reads a
 * block before it writes it.  A partial overlap is not: the tiers read many
 * blocks ahead and write behind (and GHASH reads ciphertext the CTR pass has
 * already overwritten), so the result would be wrong.  OpenSSL's EVP refuses
 * the same.  Compared as integers: relational operators on pointers into
 * different objects are undefined in C.
 */
static inline int vc_overlap_partial(const void *in, const void *out, size_t n)
{
    const uintptr_t a = (uintptr_t)in, b = (uintptr_t)out;
    return a != b && (a < b ? b - a < n : a - b < n);
}

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
