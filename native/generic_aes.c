/*
 * generic_aes.c - bitsliced, constant-time AES encryption (forward cipher
 * only) for the generic tier, and the key schedule.
 *
 * No table is indexed by a secret and no branch depends on one: the S-box is
 * a Boolean circuit, ShiftRows/MixColumns are fixed shifts and masks.
 *
 * State layout
 * ------------
 * Four blocks are processed at once in eight 64-bit words q[0..7]: q[j]
 * holds bit j (j = 0 is the least significant bit) of each of the 64 bytes.
 * Byte s[r][c] (row r, column c; FIPS-197 puts input byte r + 4c there) of
 * block b sits at bit
 *
 *        pos(r, c, b) = 16*r + 4*c + b
 *
 *   bit  63 ......... 48 47 ......... 32 31 ......... 16 15 .......... 0
 *       |    row 3     |    row 2     |    row 1     |    row 0      |
 *       each row: | c3: b3 b2 b1 b0 | c2: ... | c1: ... | c0: b3 b2 b1 b0 |
 *
 * so a row is a 16-bit field and the two linear layers become
 *   ShiftRows    s'[r][c] = s[r][c+r]: rotate the 16-bit field of row r
 *                right by 4r bits (whole columns of 4 blocks move together);
 *   MixColumns   needs s[r+1][c] next to s[r][c]: rotate the whole word right
 *                by 16 bits (row r+1 lands on row r, row 0 wraps to row 3).
 *
 * S-box circuit
 * -------------
 * SubBytes is inversion in GF(2^8) = GF(2)[x]/(x^8+x^4+x^3+x+1) followed by
 * the affine map A(v) ^ 0x63.  Inversion is computed in the isomorphic tower
 *     GF(2^4) = GF(2)[z]/(z^4+z+1),
 *     GF(2^8) = GF(2^4)[y]/(y^2+y+lambda),  lambda = z^3 (0x8),
 * where an element is a1*y + a0 and
 *     (a1*y + a0)^-1 = (a1*e)*y + (a0+a1)*e,  e = (a0^2 + a0*a1 + lambda*a1^2)^-1
 * (check: multiply out with y^2 = y + lambda; both sides give 1, and a = 0
 * gives d = 0 -> e = 0 -> 0, the AES convention).  The isomorphism sends x to
 * beta = 0x20 (a1 = z, a0 = 0), a root of the AES polynomial in the tower, so
 * the basis change is the GF(2)-matrix M whose column i is beta^i:
 *     M columns (tower bytes a1<<4|a0): 01 20 46 4c 3c d5 34 e5
 * and the output map is A * M^-1 (columns 1f b2 ab 36 52 3e 65 60) with the
 * constant 0x63 applied as NOTs on planes 0, 1, 5, 6.  Inversion in GF(2^4)
 * uses the algebraic normal form of each output bit.  The linear maps were
 * reduced with a greedy common-pair XOR search; the whole circuit is 168
 * AND/XOR gates plus 4 NOTs and was checked against the S-box on all 256
 * inputs before being written out here.
 */
#include <string.h>

#include "generic_internal.h"

/* ------------------------------------------------------------- S-box -- */

static void sub_bytes(uint64_t q[8])
{
    const uint64_t x0 = q[0], x1 = q[1], x2 = q[2], x3 = q[3];
    const uint64_t x4 = q[4], x5 = q[5], x6 = q[6], x7 = q[7];
    /* (1) basis change GF(2^8) -> GF((2^4)^2): u = M x, u = a1*y + a0 */
    const uint64_t t0 = x5 ^ x7;
    const uint64_t t1 = x4 ^ x6;
    const uint64_t t2 = t0 ^ x2;
    const uint64_t t3 = t2 ^ x3;
    const uint64_t t4 = t0 ^ x0;
    const uint64_t t5 = t1 ^ t3;
    const uint64_t t6 = x3 ^ x4;
    const uint64_t t7 = t1 ^ x5;
    const uint64_t t8 = t1 ^ x1;
    const uint64_t t9 = t8 ^ x7;
    /* (2) d = a0^2 + a0*a1 + lambda*a1^2 (squares and lambda* are linear) */
    const uint64_t t10 = t0 ^ t3;
    const uint64_t t11 = t10 ^ t9;
    const uint64_t t12 = t10 ^ t7;
    const uint64_t t13 = t4 ^ t5;
    const uint64_t t14 = t6 ^ x2;
    const uint64_t t15 = t4 & t7;
    const uint64_t t16 = t4 & t9;
    const uint64_t t17 = t4 & t3;
    const uint64_t t18 = t4 & t0;
    const uint64_t t19 = x2 & t7;
    const uint64_t t20 = x2 & t9;
    const uint64_t t21 = x2 & t3;
    const uint64_t t22 = x2 & t0;
    const uint64_t t23 = t5 & t7;
    const uint64_t t24 = t5 & t9;
    const uint64_t t25 = t5 & t3;
    const uint64_t t26 = t5 & t0;
    const uint64_t t27 = t6 & t7;
    const uint64_t t28 = t6 & t9;
    const uint64_t t29 = t6 & t3;
    const uint64_t t30 = t6 & t0;
    const uint64_t t31 = t16 ^ t19;
    const uint64_t t32 = t17 ^ t20;
    const uint64_t t33 = t32 ^ t23;
    const uint64_t t34 = t18 ^ t21;
    const uint64_t t35 = t34 ^ t24;
    const uint64_t t36 = t35 ^ t27;
    const uint64_t t37 = t22 ^ t25;
    const uint64_t t38 = t37 ^ t28;
    const uint64_t t39 = t26 ^ t29;
    const uint64_t t40 = t15 ^ t38;
    const uint64_t t41 = t38 ^ t39;
    const uint64_t t42 = t31 ^ t41;
    const uint64_t t43 = t39 ^ t30;
    const uint64_t t44 = t33 ^ t43;
    const uint64_t t45 = t36 ^ t30;
    const uint64_t t46 = t13 ^ t3;
    const uint64_t t47 = t46 ^ t40;
    const uint64_t t48 = t5 ^ t11;
    const uint64_t t49 = t48 ^ t42;
    const uint64_t t50 = t14 ^ t9;
    const uint64_t t51 = t50 ^ t44;
    const uint64_t t52 = t6 ^ t12;
    const uint64_t t53 = t52 ^ t45;
    /* (3) e = d^-1 in GF(2^4), from the algebraic normal form of inversion */
    const uint64_t t54 = t47 & t51;
    const uint64_t t55 = t49 & t51;
    const uint64_t t56 = t47 & t49;
    const uint64_t t57 = t56 & t51;
    const uint64_t t58 = t55 & t53;
    const uint64_t t59 = t47 ^ t49;
    const uint64_t t60 = t59 ^ t51;
    const uint64_t t61 = t60 ^ t54;
    const uint64_t t62 = t61 ^ t55;
    const uint64_t t63 = t62 ^ t57;
    const uint64_t t64 = t63 ^ t53;
    const uint64_t t65 = t64 ^ t58;
    const uint64_t t66 = t49 & t53;
    const uint64_t t67 = t56 & t53;
    const uint64_t t68 = t56 ^ t54;
    const uint64_t t69 = t68 ^ t55;
    const uint64_t t70 = t69 ^ t53;
    const uint64_t t71 = t70 ^ t66;
    const uint64_t t72 = t71 ^ t67;
    const uint64_t t73 = t47 & t53;
    const uint64_t t74 = t54 & t53;
    const uint64_t t75 = t56 ^ t51;
    const uint64_t t76 = t75 ^ t54;
    const uint64_t t77 = t76 ^ t53;
    const uint64_t t78 = t77 ^ t73;
    const uint64_t t79 = t78 ^ t74;
    const uint64_t t80 = t51 & t53;
    const uint64_t t81 = t49 ^ t51;
    const uint64_t t82 = t81 ^ t53;
    const uint64_t t83 = t82 ^ t73;
    const uint64_t t84 = t83 ^ t66;
    const uint64_t t85 = t84 ^ t80;
    const uint64_t t86 = t85 ^ t58;
    /* (4) a^-1 = (e*a1)*y + e*(a0+a1) */
    const uint64_t t87 = t4 ^ t7;
    const uint64_t t88 = x2 ^ t9;
    const uint64_t t89 = t5 ^ t3;
    const uint64_t t90 = t6 ^ t0;
    const uint64_t t91 = t65 & t7;
    const uint64_t t92 = t65 & t9;
    const uint64_t t93 = t65 & t3;
    const uint64_t t94 = t65 & t0;
    const uint64_t t95 = t72 & t7;
    const uint64_t t96 = t72 & t9;
    const uint64_t t97 = t72 & t3;
    const uint64_t t98 = t72 & t0;
    const uint64_t t99 = t79 & t7;
    const uint64_t t100 = t79 & t9;
    const uint64_t t101 = t79 & t3;
    const uint64_t t102 = t79 & t0;
    const uint64_t t103 = t86 & t7;
    const uint64_t t104 = t86 & t9;
    const uint64_t t105 = t86 & t3;
    const uint64_t t106 = t86 & t0;
    const uint64_t t107 = t92 ^ t95;
    const uint64_t t108 = t93 ^ t96;
    const uint64_t t109 = t108 ^ t99;
    const uint64_t t110 = t94 ^ t97;
    const uint64_t t111 = t110 ^ t100;
    const uint64_t t112 = t111 ^ t103;
    const uint64_t t113 = t98 ^ t101;
    const uint64_t t114 = t113 ^ t104;
    const uint64_t t115 = t102 ^ t105;
    const uint64_t t116 = t91 ^ t114;
    const uint64_t t117 = t114 ^ t115;
    const uint64_t t118 = t107 ^ t117;
    const uint64_t t119 = t115 ^ t106;
    const uint64_t t120 = t109 ^ t119;
    const uint64_t t121 = t112 ^ t106;
    const uint64_t t122 = t65 & t87;
    const uint64_t t123 = t65 & t88;
    const uint64_t t124 = t65 & t89;
    const uint64_t t125 = t65 & t90;
    const uint64_t t126 = t72 & t87;
    const uint64_t t127 = t72 & t88;
    const uint64_t t128 = t72 & t89;
    const uint64_t t129 = t72 & t90;
    const uint64_t t130 = t79 & t87;
    const uint64_t t131 = t79 & t88;
    const uint64_t t132 = t79 & t89;
    const uint64_t t133 = t79 & t90;
    const uint64_t t134 = t86 & t87;
    const uint64_t t135 = t86 & t88;
    const uint64_t t136 = t86 & t89;
    const uint64_t t137 = t86 & t90;
    const uint64_t t138 = t123 ^ t126;
    const uint64_t t139 = t124 ^ t127;
    const uint64_t t140 = t139 ^ t130;
    const uint64_t t141 = t125 ^ t128;
    const uint64_t t142 = t141 ^ t131;
    const uint64_t t143 = t142 ^ t134;
    const uint64_t t144 = t129 ^ t132;
    const uint64_t t145 = t144 ^ t135;
    const uint64_t t146 = t133 ^ t136;
    const uint64_t t147 = t122 ^ t145;
    const uint64_t t148 = t145 ^ t146;
    const uint64_t t149 = t138 ^ t148;
    const uint64_t t150 = t146 ^ t137;
    const uint64_t t151 = t140 ^ t150;
    const uint64_t t152 = t143 ^ t137;
    /* (5) back to the AES basis folded with the affine matrix: A M^-1 */
    const uint64_t t153 = t118 ^ t147;
    const uint64_t t154 = t149 ^ t151;
    const uint64_t t155 = t152 ^ t153;
    const uint64_t t156 = t116 ^ t155;
    const uint64_t t157 = t120 ^ t121;
    const uint64_t t158 = t120 ^ t147;
    const uint64_t t159 = t158 ^ t151;
    const uint64_t t160 = t154 ^ t156;
    const uint64_t t161 = t120 ^ t155;
    const uint64_t t162 = t151 ^ t153;
    const uint64_t t163 = t149 ^ t156;
    const uint64_t t164 = t118 ^ t152;
    const uint64_t t165 = t164 ^ t154;
    const uint64_t t166 = t165 ^ t157;
    const uint64_t t167 = t116 ^ t157;
    q[0] = ~t159;
    q[1] = ~t160;
    q[2] = t161;
    q[3] = t162;
    q[4] = t163;
    q[5] = ~t166;
    q[6] = ~t167;
    q[7] = t154;
}

/* ------------------------------------------------------ linear layers -- */

static void shift_rows(uint64_t q[8])
{
    for (int j = 0; j < 8; j++) {
        const uint64_t x = q[j];
        q[j] = (x & 0x000000000000ffffULL)                          /* row 0 */
             | ((x >> 4) & 0x000000000fff0000ULL) | ((x << 12) & 0x00000000f0000000ULL) /* row 1 */
             | ((x >> 8) & 0x000000ff00000000ULL) | ((x << 8) & 0x0000ff0000000000ULL)  /* row 2 */
             | ((x >> 12) & 0x000f000000000000ULL) | ((x << 4) & 0xfff0000000000000ULL); /* row 3 */
    }
}

static inline uint64_t rotr64(uint64_t x, unsigned n)
{
    return (x >> n) | (x << (64 - n));
}

/*
 * MixColumns, per column with a_r = s[r][c]:
 *     s'_r = 2*a_r + 3*a_{r+1} + a_{r+2} + a_{r+3}
 *          = 2*(a_r + a_{r+1}) + a_{r+1} + (a_{r+2} + a_{r+3})
 * With t = rotr(x, 16) (t holds a_{r+1} at row r) and u = x ^ t
 * (a_r + a_{r+1}), the last bracket is rotr(u, 32), so
 *     s' = xtime(u) ^ t ^ rotr(u, 32).
 * xtime (multiply by x modulo x^8+x^4+x^3+x+1) moves plane j to j+1 and
 * feeds plane 7 back into planes 0, 1, 3, 4.
 */
static void mix_columns(uint64_t q[8])
{
    uint64_t t[8], u[8];
    for (int j = 0; j < 8; j++) {
        t[j] = rotr64(q[j], 16);
        u[j] = q[j] ^ t[j];
    }
    const uint64_t hi = u[7];
    const uint64_t xt[8] = {hi, u[0] ^ hi, u[1], u[2] ^ hi, u[3] ^ hi, u[4], u[5], u[6]};
    for (int j = 0; j < 8; j++)
        q[j] = xt[j] ^ t[j] ^ rotr64(u[j], 32);
}

static inline void add_round_key(uint64_t q[8], const uint64_t *rk)
{
    for (int j = 0; j < 8; j++)
        q[j] ^= rk[j];
}

/* ------------------------------------------------------ (un)packing -- */

/* Exchange the bits of a selected by mask<<n with the bits of b selected by
 * mask. */
#define SWAPMOVE(a, b, mask, n)                        \
    do {                                               \
        const uint64_t sm_t = (((a) >> (n)) ^ (b)) & (mask); \
        (b) ^= sm_t;                                   \
        (a) ^= sm_t << (n);                            \
    } while (0)

/*
 * Transpose the 8x8 bit matrix in every byte lane of w[0..7]: afterwards
 * bit i of lane L of w[j] is what bit j of lane L of w[i] was.  Three rounds
 * of swapping off-diagonal sub-blocks (sizes 1, 2, 4).  It is an involution.
 */
static void transpose8(uint64_t w[8])
{
    for (int i = 0; i < 8; i += 2)
        SWAPMOVE(w[i], w[i + 1], 0x5555555555555555ULL, 1);
    for (int i = 0; i < 8; i += 4) {
        SWAPMOVE(w[i], w[i + 2], 0x3333333333333333ULL, 2);
        SWAPMOVE(w[i + 1], w[i + 3], 0x3333333333333333ULL, 2);
    }
    for (int i = 0; i < 4; i++)
        SWAPMOVE(w[i], w[i + 4], 0x0f0f0f0f0f0f0f0fULL, 4);
}

/* Bytes 0..3 of x -> byte lanes 0, 2, 4, 6. */
static inline uint64_t spread(uint64_t x)
{
    x &= 0xffffffffULL;
    x = (x | x << 16) & 0x0000ffff0000ffffULL;
    x = (x | x << 8) & 0x00ff00ff00ff00ffULL;
    return x;
}

/* Inverse of spread: byte lanes 0, 2, 4, 6 -> bytes 0..3. */
static inline uint64_t squeeze(uint64_t x)
{
    x &= 0x00ff00ff00ff00ffULL;
    x = (x | x >> 8) & 0x0000ffff0000ffffULL;
    x = (x | x >> 16) & 0x00000000ffffffffULL;
    return x;
}

/*
 * After transpose8, bit i of lane L of input word w[i] ends at bit 8L + i of
 * plane q[j].  We want byte (r, c, b) at 16r + 4c + b, i.e.
 *     i = 4*(c & 1) + b,   L = 2r + (c >> 1).
 * A block loaded little-endian as lo = bytes 0..7 (columns 0, 1) and
 * hi = bytes 8..15 (columns 2, 3) gives
 *     w[b]     = lanes 2r <- column 0 (lo bytes 0..3), 2r+1 <- column 2 (hi bytes 0..3)
 *     w[4 + b] = lanes 2r <- column 1 (lo bytes 4..7), 2r+1 <- column 3 (hi bytes 4..7)
 */
static void pack4(uint64_t q[8], const uint8_t in[VC_GENERIC_BATCH])
{
    for (int b = 0; b < VC_GENERIC_LANES; b++) {
        const uint64_t lo = vc_generic_load64_le(in + 16 * b);
        const uint64_t hi = vc_generic_load64_le(in + 16 * b + 8);
        q[b] = spread(lo) | spread(hi) << 8;
        q[4 + b] = spread(lo >> 32) | spread(hi >> 32) << 8;
    }
    transpose8(q);
}

static void unpack4(uint8_t out[VC_GENERIC_BATCH], const uint64_t q[8])
{
    uint64_t w[8];
    memcpy(w, q, sizeof w);
    transpose8(w);
    for (int b = 0; b < VC_GENERIC_LANES; b++) {
        const uint64_t lo = squeeze(w[b]) | squeeze(w[4 + b]) << 32;
        const uint64_t hi = squeeze(w[b] >> 8) | squeeze(w[4 + b] >> 8) << 32;
        vc_generic_store64_le(out + 16 * b, lo);
        vc_generic_store64_le(out + 16 * b + 8, hi);
    }
    vc_generic_wipe64(w, 8);
}

/* ------------------------------------------------------------ cipher -- */

void vc_generic_aes4(const vc_aes_key *k, uint8_t buf[VC_GENERIC_BATCH])
{
    uint64_t q[8];
    const uint64_t *rk = k->bs;
    pack4(q, buf);
    add_round_key(q, rk);
    for (unsigned r = 1; r < k->rounds; r++) {
        sub_bytes(q);
        shift_rows(q);
        mix_columns(q);
        add_round_key(q, rk + 8 * r);
    }
    sub_bytes(q);
    shift_rows(q);
    add_round_key(q, rk + 8 * k->rounds);
    unpack4(buf, q);
    vc_generic_wipe64(q, 8);
}

void vc_generic_encrypt_block(const vc_aes_key *k, const uint8_t in[16], uint8_t out[16])
{
    uint8_t buf[VC_GENERIC_BATCH] = {0};
    memcpy(buf, in, 16);
    vc_generic_aes4(k, buf);
    memcpy(out, buf, 16);
    vc_generic_wipe(buf, sizeof buf);
}

/* ------------------------------------------------------ key schedule -- */

/* Round key r in bitsliced form: the 16 bytes replicated into all four block
 * lanes, so one XOR per plane adds it to four blocks. */
void vc_generic_setkey_bs(vc_aes_key *k)
{
    uint8_t buf[VC_GENERIC_BATCH];
    for (unsigned r = 0; r <= k->rounds; r++) {
        for (int b = 0; b < VC_GENERIC_LANES; b++)
            memcpy(buf + 16 * b, k->rk[r], 16);
        pack4(k->bs + 8 * r, buf);
    }
    vc_generic_wipe(buf, sizeof buf);
}

/* S-box on n <= 64 loose bytes (the key schedule's SubWord), through the same
 * circuit: byte i becomes bit i of every plane. */
static void sub_loose_bytes(uint8_t *p, unsigned n)
{
    uint64_t q[8] = {0};
    for (unsigned i = 0; i < n; i++)
        for (int j = 0; j < 8; j++)
            q[j] |= (uint64_t)((p[i] >> j) & 1u) << i;
    sub_bytes(q);
    for (unsigned i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 8; j++)
            v |= (unsigned)((q[j] >> i) & 1u) << j;
        p[i] = (uint8_t)v;
    }
    vc_generic_wipe64(q, 8);
}

/*
 * FIPS-197 KeyExpansion on bytes: Nk = key_bits/32 words of key, then
 *   w[i] = w[i-Nk] ^ SubWord(RotWord(w[i-1])) ^ Rcon[i/Nk]   if i % Nk == 0
 *   w[i] = w[i-Nk] ^ SubWord(w[i-1])                        if Nk == 8, i % Nk == 4
 *   w[i] = w[i-Nk] ^ w[i-1]                                 otherwise
 * Rcon is public, so plain doubling in GF(2^8) is fine for it.
 */
void vc_generic_setkey(vc_aes_key *k, const uint8_t *key, unsigned key_bits)
{
    const unsigned nk = key_bits / 32;
    const unsigned rounds = nk + 6;
    const unsigned nwords = 4 * (rounds + 1);
    uint8_t w[60][4];
    uint8_t rcon = 1;

    memcpy(w, key, 4 * nk);
    for (unsigned i = nk; i < nwords; i++) {
        uint8_t t[4];
        memcpy(t, w[i - 1], 4);
        if (i % nk == 0) {
            const uint8_t t0 = t[0];
            t[0] = t[1];
            t[1] = t[2];
            t[2] = t[3];
            t[3] = t0;
            sub_loose_bytes(t, 4);
            t[0] ^= rcon;
            rcon = (uint8_t)((rcon << 1) ^ ((rcon >> 7) * 0x1b));
        } else if (nk == 8 && i % nk == 4) {
            sub_loose_bytes(t, 4);
        }
        for (int j = 0; j < 4; j++)
            w[i][j] = (uint8_t)(w[i - nk][j] ^ t[j]);
        vc_generic_wipe(t, sizeof t);
    }
    memcpy(k->rk, w, 4 * nwords);
    k->rounds = rounds;
    k->key_bits = key_bits;
    vc_generic_setkey_bs(k);
    vc_generic_wipe(w, sizeof w);
}
