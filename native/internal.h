/*
 * internal.h - what the mode front-ends (gcm.c, cfb.c) and the ISA tiers
 * (tier_*.c) share.  Not installed.
 *
 * Division of labour:
 *   front-ends  argument checks, SP 800-38D length limits, IV -> J0, AAD,
 *               streaming with partial blocks, tag finish and constant-time
 *               compare, splitting GCM calls at 2^32 counter wrap.
 *   tiers       the bulk work on whole blocks (and, for GCM, the final tail),
 *               in whatever register layout they like internally; at this
 *               interface every block is in the standard byte order.
 */
#ifndef VC_INTERNAL_H
#define VC_INTERNAL_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include "vaescrypt.h"

#define VC_ALIGN 64

/* AES key schedule.  rk[i] is round key i exactly as FIPS-197 lays it out in
 * memory (w[4i..4i+3] as bytes), which is also what AESENC expects. Only the
 * forward cipher exists: GCM and CFB never run the inverse cipher. */
typedef struct vc_aes_key {
    alignas(VC_ALIGN) uint8_t rk[15][16];
    /* The generic tier's bitsliced form of rk, filled only by the generic
     * setkey: a key is used by the tier that expanded it and no other. */
    alignas(VC_ALIGN) uint64_t bs[15 * 8];
    unsigned rounds;   /* 10, 12, 14 */
    unsigned key_bits; /* 128, 192, 256 */
} vc_aes_key;

/* GHASH key material.  h is H = E_K(0^128) in standard byte order; table is
 * tier-private (powers of H, Karatsuba halves ...), laid out by the tier that
 * initialised it.  1 KiB holds the largest layout (the wide tiers' 32
 * powers with their Karatsuba halves), plus 64 zero bytes the wide tiers'
 * vector loads may run into for lanes that hold no block (see
 * vaes_common.h); every byte is zeroed when a key is made and wiped when it
 * is freed, so it is no larger than that. */
#define VC_GHASH_TABLE_BYTES (1024 + 64)
typedef struct vc_ghash_key {
    alignas(VC_ALIGN) uint8_t table[VC_GHASH_TABLE_BYTES];
    alignas(16) uint8_t h[16];
} vc_ghash_key;

/* One direction of a GCM key, as the one-shot calls take it: the AES
 * schedule, that direction's GHASH table, and which direction.  Kept in the
 * key object (filled when it is made), so that a one-shot call takes the
 * public functions' arguments with this in the key's place (see
 * vc_gcm_oneshot_fn). */
typedef struct vc_gcm_dir {
    const vc_aes_key *aes;
    const vc_ghash_key *g;
    int enc; /* 1: encrypt, 0: decrypt */
    /* 1: an encryption of 6-8 vectors may run the pass round by round on a
     * tier that leaves that to the CPU (VC_RM_ENC 2); set from the CPU's
     * vendor when the key is made (see vc_gcm_key_new). */
    int round_major;
} vc_gcm_dir;

/* A whole GCM message with a 12-byte IV in one call: see vc_tier.gcm_oneshot.
 * The arguments sit where vc_gcm_encrypt's and vc_gcm_decrypt's do (iv_len
 * is always 12 here and unused), so the front-end reaches the tier by a
 * jump with the caller's registers and stack arguments as they are. */
typedef int vc_gcm_oneshot_fn(const vc_gcm_dir *d, const uint8_t iv[12], size_t iv_len,
                              const uint8_t *aad, size_t aad_len, const uint8_t *in,
                              uint8_t *out, size_t len, uint8_t *tag, size_t tag_len);

/* One ISA tier.  A NULL member means "not provided by this tier"; the
 * front-end then refuses the path for that mode (see vc_tier_for). */
typedef struct vc_tier {
    vc_path path;
    /* AES key expansion into k (rk, rounds, key_bits, and whatever private
     * form the tier's block function uses). key_bits is 128, 192 or 256. */
    void (*setkey)(vc_aes_key *k, const uint8_t *key, unsigned key_bits);
    /* One block, used for H, E(J0) and streaming partial blocks. */
    void (*encrypt_block)(const vc_aes_key *k, const uint8_t in[16], uint8_t out[16]);

    /* GCM ---------------------------------------------------------------
     * ghash_init: fill g->table from g->h (already set by the front-end).
     * ghash: X <- (X ^ B1)*H ^ B2)*H ... over len bytes, len % 16 == 0.
     * gcm_enc/dec: CTR from ctr (inc32 on the last 4 bytes, big endian,
     *   wrapping mod 2^32 without carry; the front-end guarantees one call
     *   never wraps) over len bytes of in -> out, and GHASH of the
     *   ciphertext into X.  len may be any size; if len % 16 != 0 the call
     *   is the last data call of the message and the partial final block is
     *   hashed zero-padded.  On return ctr holds the next counter block.
     *   in == out is allowed; no read or write outside [in, in+len),
     *   [out, out+len). */
    void (*ghash_init)(vc_ghash_key *g);
    void (*ghash)(const vc_ghash_key *g, uint8_t X[16], const uint8_t *in, size_t len);
    void (*gcm_enc)(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                    uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len);
    void (*gcm_dec)(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                    uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len);
    /* One-shot message with a 12-byte IV (J0 = IV || 0^31 || 1) in one
     * call: AAD, CTR + GHASH over len bytes of in -> out, the length block
     * and E(J0).  The front-end has checked every argument and limit
     * (tag_len is 4, 8 or 12..16; with a 12-byte IV the counter never
     * wraps).  Encryption (d->enc): writes out and tag[0..tag_len),
     * returns VC_OK.  Decryption: returns VC_OK with the plaintext in out
     * iff the first tag_len bytes of the tag match (compared in constant
     * time), else VC_ERR_AUTH with out zeroed.  in == out is allowed.
     * NULL: gcm.c runs the general path. */
    vc_gcm_oneshot_fn *gcm_oneshot;
    /* Optional (NULL: gcm_oneshot takes every length): gcm_oneshot's route
     * for a message the main loop takes whole, called by the front-end in
     * its place (same contract) when len > whole_min and len is a multiple
     * of whole_step[dir] (a power of two); whole_min is tested first (a
     * tier without gcm_whole sets it to SIZE_MAX, or leaves gcm_whole
     * NULL, which is tested next).  Chosen before the call, not
     * inside gcm_oneshot: that function's prologue and register set-up,
     * sized for its short-message pass, then cost these messages nothing. */
    vc_gcm_oneshot_fn *gcm_whole;
    size_t whole_min;
    size_t whole_step[2]; /* by vc_dir: encrypt, decrypt */
    /* Optional (NULL / 0: gcm_oneshot takes these lengths too), tested by
     * the front-end after gcm_whole, and only for a tier with
     * gcm_oneshot_short and len <= short_max (one test for the others):
     * - len <= tiny_max (<= short_max): tiny->gcm_oneshot, another tier's
     *   one-shot on the same key schedule and GHASH table layout (avx512:
     *   avx10_256's, a one-block message being an AES latency chain);
     * - (aad_len + 15) / 16 + (len + 15) / 16 + 1 <= short_powers:
     *   gcm_oneshot_short, an instance of the pass for the messages one
     *   hash group holds (fewer live vectors than gcm_oneshot).  The
     *   tier's own os_fits with its power-table size: a message routed
     *   there must fit (test_vaescrypt_gcm_boundaries walks AAD lengths
     *   on both sides of it).
     * Same contract as gcm_oneshot.  Chosen in the front-end rather than
     * in a routing function of the tier: GCC's sibling calls from one
     * reloaded and re-stored every stack argument, 20-35 instructions per
     * call (measured gain: see one_shot in gcm.c). */
    const struct vc_tier *tiny;
    size_t tiny_max;
    vc_gcm_oneshot_fn *gcm_oneshot_short;
    size_t short_max;
    size_t short_powers;

    /* CFB ---------------------------------------------------------------
     * cfb128: len % 16 == 0, iv updated to the last ciphertext block.
     * cfb8:   len bytes, iv updated (shift register).
     * cfb1:   nbits bits, MSB first, iv updated; out's unused low bits of a
     *         final partial byte are zero. */
    void (*cfb128_enc)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len);
    void (*cfb128_dec)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len);
    void (*cfb8_enc)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len);
    void (*cfb8_dec)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len);
    void (*cfb1_enc)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t nbits);
    void (*cfb1_dec)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t nbits);
} vc_tier;

/* Defined in tier_<name>.c.  A tier compiled on a toolchain that cannot
 * target its ISA would still define the symbol with NULL members. */
extern const vc_tier vc_tier_generic;
extern const vc_tier vc_tier_aesni;
extern const vc_tier vc_tier_vaes_avx2;
extern const vc_tier vc_tier_avx10_256;
extern const vc_tier vc_tier_avx512;

/* AES-NI helpers the wide tiers reuse (tier_aesni.c). */
void vc_aesni_setkey(vc_aes_key *k, const uint8_t *key, unsigned key_bits);
void vc_aesni_encrypt_block(const vc_aes_key *k, const uint8_t in[16], uint8_t out[16]);
/* Generic helpers (tier_generic.c): bitsliced schedule from k->rk. */
void vc_generic_setkey_bs(vc_aes_key *k);

/* Path -> tier table (tiers.c). */
const vc_tier *vc_tier_get(vc_path p);

/* Constant-time helpers (util.c). */
int vc_ct_memeq(const uint8_t *a, const uint8_t *b, size_t n); /* 1 if equal */
/* Zeroing the compiler may not drop: memset does the stores at full width,
 * and the empty asm that takes the pointer with a memory clobber tells the
 * optimiser the bytes may be read afterwards, so the memset is not a dead
 * store it could eliminate.  (A volatile byte loop would do the same at one
 * byte per instruction: thousands of traced steps for a key object.)
 * Inline, so that a constant n becomes a few vector stores instead of a
 * libc call (or a slow-starting REP STOS for a whole struct). */
static inline void vc_secure_zero(void *p, size_t n)
{
    if (n == 0) /* p may be NULL then (an empty buffer) */
        return;
    memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

#endif
