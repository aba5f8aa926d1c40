/*
 * tier_generic.c - the `generic` ISA tier: portable, constant-time C11.
 *
 * Building blocks (see generic_aes.c and generic_ghash.c for the math):
 *   vc_generic_aes4   bitsliced AES on four blocks at once,
 *   vc_generic_ghash  GHASH with masked integer multiplies.
 * This file holds the mode loops.  Every loop batches four blocks into one
 * bitsliced call where the mode allows it (GCM's CTR, CFB128 decryption);
 * the serial chains (CFB encryption, CFB8, CFB1) pay for a 4-block call per
 * step, since the next AES input depends on the previous output.
 *
 * Aliasing: in == out is allowed everywhere, so every loop reads what it
 * needs from `in` (into a local copy when the value is needed after the
 * write) before writing `out`.  No loop touches a byte outside
 * [in, in+len) / [out, out+len).
 */
#include <string.h>

#include "generic_internal.h"

/* ----------------------------------------------------------------- GCM -- */

/* Fill n <= 4 counter blocks ctr, ctr+1, ... into buf (inc32: only the last
 * four bytes count, big endian, modulo 2^32) and advance ctr past them. */
static void gcm_counters(uint8_t ctr[16], uint8_t buf[VC_GENERIC_BATCH], unsigned n)
{
    const uint32_t c = (uint32_t)ctr[12] << 24 | (uint32_t)ctr[13] << 16 |
                       (uint32_t)ctr[14] << 8 | (uint32_t)ctr[15];
    for (unsigned i = 0; i < VC_GENERIC_LANES; i++) {
        const uint32_t v = c + (i < n ? i : 0); /* unused lanes: don't care */
        memcpy(buf + 16 * i, ctr, 12);
        buf[16 * i + 12] = (uint8_t)(v >> 24);
        buf[16 * i + 13] = (uint8_t)(v >> 16);
        buf[16 * i + 14] = (uint8_t)(v >> 8);
        buf[16 * i + 15] = (uint8_t)v;
    }
    const uint32_t next = c + n;
    ctr[12] = (uint8_t)(next >> 24);
    ctr[13] = (uint8_t)(next >> 16);
    ctr[14] = (uint8_t)(next >> 8);
    ctr[15] = (uint8_t)next;
}

/* GHASH of the last len < 64 bytes: whole blocks, then the partial one
 * zero-padded. */
static void ghash_tail(const vc_ghash_key *g, uint8_t X[16], const uint8_t *c, size_t len)
{
    const size_t whole = len & ~(size_t)15;
    vc_generic_ghash(g, X, c, whole);
    if (len > whole) {
        uint8_t pad[16] = {0};
        memcpy(pad, c + whole, len - whole);
        vc_generic_ghash(g, X, pad, 16);
        vc_generic_wipe(pad, sizeof pad);
    }
}

/*
 * GCM bulk: 64 bytes per step.
 *
 *   ctr  ctr+1  ctr+2  ctr+3      one bitsliced call
 *    |     |      |      |
 *   AES   AES    AES    AES
 *    |     |      |      |
 *  P0 ^  P1 ^   P2 ^   P3 ^   ->  C0 C1 C2 C3  ->  X = (((X^C0)H^C1)H^C2)H^C3)H
 *
 * Decryption hashes C from `in` before the XOR overwrites it (in == out).
 */
static void gcm_crypt(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                      uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len, int enc)
{
    uint8_t ks[VC_GENERIC_BATCH];
    for (; len >= VC_GENERIC_BATCH; len -= VC_GENERIC_BATCH, in += VC_GENERIC_BATCH,
                                    out += VC_GENERIC_BATCH) {
        gcm_counters(ctr, ks, VC_GENERIC_LANES);
        vc_generic_aes4(k, ks);
        if (!enc)
            vc_generic_ghash(g, X, in, VC_GENERIC_BATCH);
        for (size_t i = 0; i < VC_GENERIC_BATCH; i++)
            out[i] = (uint8_t)(in[i] ^ ks[i]);
        if (enc)
            vc_generic_ghash(g, X, out, VC_GENERIC_BATCH);
    }
    if (len) {
        /* Final 1..63 bytes: one more call for ceil(len/16) counters. */
        gcm_counters(ctr, ks, (unsigned)((len + 15) / 16));
        vc_generic_aes4(k, ks);
        if (!enc)
            ghash_tail(g, X, in, len);
        for (size_t i = 0; i < len; i++)
            out[i] = (uint8_t)(in[i] ^ ks[i]);
        if (enc)
            ghash_tail(g, X, out, len);
    }
    vc_generic_wipe(ks, sizeof ks);
}

static void gen_gcm_enc(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                        uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len)
{
    gcm_crypt(k, g, ctr, X, in, out, len, 1);
}

static void gen_gcm_dec(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                        uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len)
{
    gcm_crypt(k, g, ctr, X, in, out, len, 0);
}

/* -------------------------------------------------------------- CFB128 -- */

/*
 * Encryption is a serial chain: each AES input is the previous ciphertext.
 *
 *   IV -> AES -> (+) -> C0 -> AES -> (+) -> C1 -> ...
 *                 ^                  ^
 *                P0                 P1
 */
static void gen_cfb128_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                           uint8_t *out, size_t len)
{
    uint8_t ks[VC_GENERIC_BATCH] = {0};
    for (; len >= 16; len -= 16, in += 16, out += 16) {
        memcpy(ks, iv, 16);
        vc_generic_aes4(k, ks);
        for (int i = 0; i < 16; i++)
            iv[i] = (uint8_t)(in[i] ^ ks[i]);
        memcpy(out, iv, 16);
    }
    vc_generic_wipe(ks, sizeof ks);
}

/*
 * Decryption: every AES input (IV, C0, C1, ...) is known up front, so four
 * blocks go through one bitsliced call.
 *
 *   IV     C0     C1     C2        (C3 becomes the next IV)
 *    |      |      |      |
 *   AES    AES    AES    AES
 *    |      |      |      |
 *  C0 (+) C1 (+) C2 (+) C3 (+)  -> P0 P1 P2 P3
 *
 * The ciphertext is copied first because out may overwrite it.
 */
static void gen_cfb128_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                           uint8_t *out, size_t len)
{
    uint8_t ks[VC_GENERIC_BATCH], ct[VC_GENERIC_BATCH];
    while (len >= 16) {
        const size_t n = len >= VC_GENERIC_BATCH ? VC_GENERIC_LANES : len / 16;
        memset(ks, 0, sizeof ks);
        memcpy(ct, in, 16 * n);
        memcpy(ks, iv, 16);
        memcpy(ks + 16, ct, 16 * (n - 1));
        vc_generic_aes4(k, ks);
        memcpy(iv, ct + 16 * (n - 1), 16);
        for (size_t i = 0; i < 16 * n; i++)
            out[i] = (uint8_t)(ct[i] ^ ks[i]);
        in += 16 * n;
        out += 16 * n;
        len -= 16 * n;
    }
    vc_generic_wipe(ks, sizeof ks);
    vc_generic_wipe(ct, sizeof ct);
}

/* ---------------------------------------------------------------- CFB8 -- */

/*
 * One byte per AES call; the shift register drops its first byte and takes
 * the ciphertext byte:
 *
 *   [ s0 s1 ... s15 ] -> AES -> first byte (+) P -> C
 *   [ s1 ... s15 C ]  (next register)
 */
static void cfb8(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out,
                 size_t len, int enc)
{
    uint8_t ks[VC_GENERIC_BATCH] = {0};
    for (size_t n = 0; n < len; n++) {
        memcpy(ks, iv, 16);
        vc_generic_aes4(k, ks);
        const uint8_t p = in[n];
        const uint8_t o = (uint8_t)(p ^ ks[0]);
        memmove(iv, iv + 1, 15);
        iv[15] = enc ? o : p;
        out[n] = o;
    }
    vc_generic_wipe(ks, sizeof ks);
}

static void gen_cfb8_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                         uint8_t *out, size_t len)
{
    cfb8(k, iv, in, out, len, 1);
}

static void gen_cfb8_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                         uint8_t *out, size_t len)
{
    cfb8(k, iv, in, out, len, 0);
}

/* ---------------------------------------------------------------- CFB1 -- */

/*
 * One bit per AES call, bits taken most significant first; the 128-bit
 * register shifts left by one and takes the ciphertext bit at the bottom.
 * A whole input byte is read before its output byte is written (in == out),
 * and a final partial output byte has its unused low bits zero.
 */
static void cfb1(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out,
                 size_t nbits, int enc)
{
    uint8_t ks[VC_GENERIC_BATCH] = {0};
    for (size_t byte = 0; 8 * byte < nbits; byte++) {
        const size_t left = nbits - 8 * byte;
        const unsigned nb = left >= 8 ? 8u : (unsigned)left;
        const unsigned pin = in[byte];
        unsigned pout = 0;
        for (unsigned t = 0; t < nb; t++) {
            memcpy(ks, iv, 16);
            vc_generic_aes4(k, ks);
            const unsigned p = (pin >> (7 - t)) & 1u;
            const unsigned o = p ^ (unsigned)(ks[0] >> 7);
            const unsigned fb = enc ? o : p;
            pout |= o << (7 - t);
            for (int i = 0; i < 15; i++)
                iv[i] = (uint8_t)(iv[i] << 1 | iv[i + 1] >> 7);
            iv[15] = (uint8_t)(iv[15] << 1 | fb);
        }
        out[byte] = (uint8_t)pout;
    }
    vc_generic_wipe(ks, sizeof ks);
}

static void gen_cfb1_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                         uint8_t *out, size_t nbits)
{
    cfb1(k, iv, in, out, nbits, 1);
}

static void gen_cfb1_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                         uint8_t *out, size_t nbits)
{
    cfb1(k, iv, in, out, nbits, 0);
}

/* ---------------------------------------------------------------- tier -- */

const vc_tier vc_tier_generic = {
    .path = VC_PATH_GENERIC,
    .setkey = vc_generic_setkey,
    .encrypt_block = vc_generic_encrypt_block,
    .ghash_init = vc_generic_ghash_init,
    .ghash = vc_generic_ghash,
    .gcm_enc = gen_gcm_enc,
    .gcm_dec = gen_gcm_dec,
    .cfb128_enc = gen_cfb128_enc,
    .cfb128_dec = gen_cfb128_dec,
    .cfb8_enc = gen_cfb8_enc,
    .cfb8_dec = gen_cfb8_dec,
    .cfb1_enc = gen_cfb1_enc,
    .cfb1_dec = gen_cfb1_dec,
};
