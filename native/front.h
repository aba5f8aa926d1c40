/*
 * front.h - what the mode front-ends (gcm.c, cfb.c) share with front.c:
 * path resolution and aligned allocation.  Not installed.
 */
#ifndef VC_FRONT_H
#define VC_FRONT_H

#include <stdatomic.h>

#include "internal.h"
#include "vaescrypt.h"

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
 * Object kinds.  Every object the library hands out (a GCM or CFB key, a GCM
 * or CFB stream) starts with a 32-bit tag naming its kind, and every entry
 * point checks the tag of what it is given before reading anything else:
 * a CFB key passed where a GCM key is expected (a C caller's cast, or a
 * binding that confused two objects) is refused with VC_ERR_OBJECT instead of
 * being read with the wrong layout, which would run past the end of the
 * smaller object.  The tag is the first member, so reading it stays inside
 * any of the four objects (all are at least 64 bytes).  vc_front_free zeroes
 * the whole object, tag included: a freed object's tag reads as no kind
 * while the memory is still mapped, which catches the common use-after-free
 * (not every one: the allocator may hand the block out again).
 * The values are arbitrary but distinct and far from small integers or
 * typical pointer bits ("vcGK", "vcCK", "vcGS", "vcCS" in ASCII).
 */
#define VC_MAGIC_GCM_KEY 0x7663474bu
#define VC_MAGIC_CFB_KEY 0x7663434bu
#define VC_MAGIC_GCM_STREAM 0x76634753u
#define VC_MAGIC_CFB_STREAM 0x76634353u

/* 1 if o (non-NULL) carries the tag magic.  Read through a uint32_t at the
 * object's start: every library object begins with `uint32_t magic`. */
static inline int vc_kind_is(const void *o, uint32_t magic)
{
    return o != NULL && *(const uint32_t *)o == magic;
}

/*
 * One caller at a time per stream.  A stream is mutable state (partial-block
 * index, counter, GHASH accumulator) that its update runs through without
 * locks; the Python binding releases the GIL around the call, so two threads
 * holding one stream object can be inside it at once.  Every stream entry
 * point takes this flag first (one compare-and-swap, `lock cmpxchg` on x86, a
 * few ns uncontended) and returns VC_ERR_STATE if another call holds it:
 * concurrent use is refused, never waited for (as cryptography refuses it),
 * so a caller that really shares a stream must serialize its own calls.
 * acquire/release order the stream's plain fields between two callers that
 * take turns on different threads.
 *
 * fork().  The flag holds 0 (free) or 2g+1, where g is the process's fork
 * generation when the call entered: vc_fork_generation() is 0 in a process
 * that never forked and goes up by one in every child (a pthread_atfork child
 * handler).  A child is a copy of one thread of its parent: a flag that was
 * set by another thread when the parent forked stays set in the child, but
 * no thread of the child will ever clear it.  So a call that finds the flag
 * held with an older generation knows the holder is gone, and that the call
 * it was making stopped halfway through the stream's state (counter,
 * accumulator, partial block written in part): continuing would give a wrong
 * tag or ciphertext, or reuse keystream.  Such a stream answers
 * VC_ERR_FORKED from then on, instead of a VC_ERR_STATE ("in use by another
 * thread") that would never end and would name a thread that does not
 * exist.  Streams that were idle at the fork are complete and work in the
 * child as in the parent.
 */
typedef _Atomic unsigned long vc_busy;

/* Registers the atfork handler once; call before the first vc_busy_enter of
 * a stream (the stream constructors do). */
void vc_fork_watch(void);
unsigned long vc_fork_generation(void);

static inline void vc_busy_init(vc_busy *b)
{
    atomic_init(b, 0ul);
}

/* VC_OK: entered.  VC_ERR_STATE: another thread of this process is inside.
 * VC_ERR_FORKED: a thread of an ancestor process was inside at fork(). */
static inline int vc_busy_enter(vc_busy *b)
{
    const unsigned long mine = 2 * vc_fork_generation() + 1;
    unsigned long seen = 0;
    if (atomic_compare_exchange_strong_explicit(b, &seen, mine, memory_order_acquire,
                                                memory_order_relaxed))
        return VC_OK;
    return seen == mine ? VC_ERR_STATE : VC_ERR_FORKED;
}
static inline void vc_busy_leave(vc_busy *b)
{
    atomic_store_explicit(b, 0ul, memory_order_release);
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
