/*
 * generic_internal.h - what the pieces of the generic (portable C) tier share:
 * the bitsliced AES core (generic_aes.c), the constant-time GHASH
 * (generic_ghash.c) and the mode loops (tier_generic.c).  Not installed.
 *
 * Nothing here carries an ISA target attribute: this tier is plain C11 and
 * runs on any x86-64 (or any other 64-bit C11 target).
 */
#ifndef VC_GENERIC_INTERNAL_H
#define VC_GENERIC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The bitsliced core always works on four blocks at once (one 64-bit word
 * per bit plane covers 4 blocks x 16 bytes).  Callers with fewer blocks pass
 * a 64-byte buffer whose unused blocks are don't-care. */
#define VC_GENERIC_LANES 4
#define VC_GENERIC_BATCH (16 * VC_GENERIC_LANES)

/* buf <- AES_K(buf) for the four 16-byte blocks in buf (in place). */
void vc_generic_aes4(const vc_aes_key *k, uint8_t buf[VC_GENERIC_BATCH]);

/* Tier members implemented in generic_aes.c / generic_ghash.c. */
void vc_generic_setkey(vc_aes_key *k, const uint8_t *key, unsigned key_bits);
void vc_generic_encrypt_block(const vc_aes_key *k, const uint8_t in[16], uint8_t out[16]);
void vc_generic_ghash_init(vc_ghash_key *g);
void vc_generic_ghash(const vc_ghash_key *g, uint8_t X[16], const uint8_t *in, size_t len);

/* Wipe secrets from the stack.  The volatile stores cannot be elided as dead
 * even though the buffer is about to go out of scope. */
static inline void vc_generic_wipe(void *p, size_t n)
{
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (n--)
        *v++ = 0;
}

/* Same for arrays of 64-bit words (the bitsliced state): one store per word. */
static inline void vc_generic_wipe64(uint64_t *p, size_t nwords)
{
    volatile uint64_t *v = (volatile uint64_t *)p;
    while (nwords--)
        *v++ = 0;
}

/* Byte-order helpers (portable: compilers turn them into plain loads). */
static inline uint64_t vc_generic_load64_le(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline void vc_generic_store64_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t vc_generic_load64_be(const uint8_t *p)
{
    return (uint64_t)p[7] | (uint64_t)p[6] << 8 | (uint64_t)p[5] << 16 |
           (uint64_t)p[4] << 24 | (uint64_t)p[3] << 32 | (uint64_t)p[2] << 40 |
           (uint64_t)p[1] << 48 | (uint64_t)p[0] << 56;
}

static inline void vc_generic_store64_be(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

#endif
