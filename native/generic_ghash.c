/*
 * generic_ghash.c - constant-time GHASH in portable C for the generic tier.
 *
 * Field and bit order
 * -------------------
 * GCM works in GF(2^128) = GF(2)[x]/(x^128 + x^7 + x^2 + x + 1) with a
 * reflected bit order: the most significant bit of byte 0 is the coefficient
 * of x^0 and the least significant bit of byte 15 that of x^127.  Loading a
 * block big-endian into a 128-bit number A (hi = bytes 0..7, lo = 8..15)
 * therefore puts x^i at bit 127 - i.  We keep that representation and never
 * reverse bits per block.
 *
 * Product of reflected operands
 * -----------------------------
 * An integer carry-less product of A (x^i at bit 127-i) and H (x^j at bit
 * 127-j) puts x^(i+j) at bit 254-(i+j).  Shifted left by one, the 256-bit
 * result R has x^k at bit 255-k: its high 128 bits are the reflected form of
 * the degree 0..127 part, its low 128 bits carry x^128..x^255.
 *
 * 128x128 -> 256 uses Karatsuba on 64-bit halves:
 *     A*H = Ah*Hh * 2^128 + ((Ah^Al)*(Hh^Hl) ^ Ah*Hh ^ Al*Hl) * 2^64 + Al*Hl
 *
 * Constant-time 64x64 carry-less multiply ("multiplies with holes")
 * -----------------------------------------------------------------
 * Table-driven or bit-by-bit conditional multiplies leak through memory or
 * branches; integer multiplication on x86-64 takes constant time, but it
 * produces carries.  Split each operand into four interleaved parts
 *     x_a = x & (0x1111...1 << a),   a = 0..3
 * so set bits are 4 apart.  The integer product x_a * y_b only has terms at
 * positions p = i + j with i = a, j = b (mod 4): all terms of one product sit
 * on one residue class mod 4, with three empty "holes" between them.  The
 * count of terms at p is at most 16 (x_a has 16 bits), and 16 is reached
 * only when every i of x_a pairs with a valid j, i.e. p >= 60.  Below that
 * the count fits in 4 bits, so its carries land only in the holes p+1..p+3
 * and never reach the next term position p+4 (nothing accumulates); at
 * p >= 60 the spill to p+4 falls off the 64-bit word.  Hence bit p of the
 * integer product (mod 2^64) is exactly the parity of the terms.  XOR the four products of each residue class and mask
 * away the holes:
 *     z_0 = x0y0 ^ x1y3 ^ x2y2 ^ x3y1   (residue 0)    ... and so on,
 * giving the low 64 bits of the carry-less product.
 * The high 64 bits come from bit reversal: with rev() reversing 64 bits,
 * clmul(rev x, rev y) has at bit m the coefficient that clmul(x, y) has at
 * 126 - m, so   hi(x*y) = rev(lo(rev x * rev y)) >> 1.
 *
 * Reduction
 * ---------
 * In the 256-bit R (words R3 R2 R1 R0, R3 most significant) bit b stands for
 * x^(255-b).  For b < 128, x^(255-b) = x^(127-b) * (1 + x + x^2 + x^7), and
 * multiplying by x^t moves a bit from position b+128 down to b+128-t.  So a
 * low word W folds in as  W<<128 ^ W<<127 ^ W<<126 ^ W<<121 (256-bit
 * shifts), i.e. into the word two above:  W ^ W>>1 ^ W>>2 ^ W>>7, and the
 * bits that cross a word boundary into the word one above:
 * W<<63 ^ W<<62 ^ W<<57.  Fold R0 first (it spills into R1, still below
 * x^128 in the reflected sense), then R1.  (R3, R2) is the result.
 */
#include <string.h>

#include "generic_internal.h"

static inline uint64_t clmul_lo(uint64_t x, uint64_t y)
{
    const uint64_t m0 = 0x1111111111111111ULL, m1 = m0 << 1, m2 = m0 << 2, m3 = m0 << 3;
    const uint64_t x0 = x & m0, x1 = x & m1, x2 = x & m2, x3 = x & m3;
    const uint64_t y0 = y & m0, y1 = y & m1, y2 = y & m2, y3 = y & m3;
    const uint64_t z0 = (x0 * y0) ^ (x1 * y3) ^ (x2 * y2) ^ (x3 * y1);
    const uint64_t z1 = (x0 * y1) ^ (x1 * y0) ^ (x2 * y3) ^ (x3 * y2);
    const uint64_t z2 = (x0 * y2) ^ (x1 * y1) ^ (x2 * y0) ^ (x3 * y3);
    const uint64_t z3 = (x0 * y3) ^ (x1 * y2) ^ (x2 * y1) ^ (x3 * y0);
    return (z0 & m0) | (z1 & m1) | (z2 & m2) | (z3 & m3);
}

static inline uint64_t rev64(uint64_t x)
{
    x = ((x >> 1) & 0x5555555555555555ULL) | ((x & 0x5555555555555555ULL) << 1);
    x = ((x >> 2) & 0x3333333333333333ULL) | ((x & 0x3333333333333333ULL) << 2);
    x = ((x >> 4) & 0x0f0f0f0f0f0f0f0fULL) | ((x & 0x0f0f0f0f0f0f0f0fULL) << 4);
    x = ((x >> 8) & 0x00ff00ff00ff00ffULL) | ((x & 0x00ff00ff00ff00ffULL) << 8);
    x = ((x >> 16) & 0x0000ffff0000ffffULL) | ((x & 0x0000ffff0000ffffULL) << 16);
    return (x >> 32) | (x << 32);
}

/* Our private layout of vc_ghash_key.table: H's halves, their Karatsuba sum,
 * and the bit reversals of all three (so that per block only the data needs
 * reversing).  Copied in and out with memcpy: the table is a byte array. */
typedef struct gen_hkey {
    uint64_t h[3];  /* Hh, Hl, Hh ^ Hl     */
    uint64_t hr[3]; /* rev() of the same   */
} gen_hkey;

_Static_assert(sizeof(gen_hkey) <= VC_GHASH_TABLE_BYTES, "generic GHASH table fits");

void vc_generic_ghash_init(vc_ghash_key *g)
{
    gen_hkey t;
    t.h[0] = vc_generic_load64_be(g->h);
    t.h[1] = vc_generic_load64_be(g->h + 8);
    t.h[2] = t.h[0] ^ t.h[1];
    for (int i = 0; i < 3; i++)
        t.hr[i] = rev64(t.h[i]);
    memcpy(g->table, &t, sizeof t);
    vc_generic_wipe(&t, sizeof t);
}

/* (yh, yl) <- (yh, yl) * H in the reflected representation. */
static inline void gf128_mul(uint64_t *yh, uint64_t *yl, const gen_hkey *hk)
{
    const uint64_t a[3] = {*yh, *yl, *yh ^ *yl};
    uint64_t lo[3], hi[3];
    const uint64_t r0 = rev64(a[0]), r1 = rev64(a[1]);
    const uint64_t rr[3] = {r0, r1, r0 ^ r1};
    for (int i = 0; i < 3; i++) {
        lo[i] = clmul_lo(a[i], hk->h[i]);
        hi[i] = rev64(clmul_lo(rr[i], hk->hr[i])) >> 1;
    }
    /* Karatsuba recombination: middle = (Ah^Al)(Hh^Hl) ^ AhHh ^ AlHl. */
    const uint64_t mlo = lo[2] ^ lo[0] ^ lo[1];
    const uint64_t mhi = hi[2] ^ hi[0] ^ hi[1];
    uint64_t r3 = hi[0], r2 = lo[0] ^ mhi, r1w = hi[1] ^ mlo, r0w = lo[1];

    /* Align to the reflected 256-bit form (x^k at bit 255-k). */
    r3 = (r3 << 1) | (r2 >> 63);
    r2 = (r2 << 1) | (r1w >> 63);
    r1w = (r1w << 1) | (r0w >> 63);
    r0w <<= 1;

    /* Fold R0, then R1, with x^128 = x^7 + x^2 + x + 1. */
    r2 ^= r0w ^ (r0w >> 1) ^ (r0w >> 2) ^ (r0w >> 7);
    r1w ^= (r0w << 63) ^ (r0w << 62) ^ (r0w << 57);
    r3 ^= r1w ^ (r1w >> 1) ^ (r1w >> 2) ^ (r1w >> 7);
    r2 ^= (r1w << 63) ^ (r1w << 62) ^ (r1w << 57);

    *yh = r3;
    *yl = r2;
}

void vc_generic_ghash(const vc_ghash_key *g, uint8_t X[16], const uint8_t *in, size_t len)
{
    gen_hkey hk;
    memcpy(&hk, g->table, sizeof hk);
    uint64_t yh = vc_generic_load64_be(X), yl = vc_generic_load64_be(X + 8);
    for (; len >= 16; len -= 16, in += 16) {
        yh ^= vc_generic_load64_be(in);
        yl ^= vc_generic_load64_be(in + 8);
        gf128_mul(&yh, &yl, &hk);
    }
    vc_generic_store64_be(X, yh);
    vc_generic_store64_be(X + 8, yl);
    vc_generic_wipe(&hk, sizeof hk);
}
