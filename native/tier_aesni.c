/*
 * tier_aesni.c - the `aesni` ISA tier: AES-NI (+ PCLMULQDQ for GCM) on
 * 128-bit xmm registers, legacy SSE encoding only.
 *
 * Target: every CPU with AES-NI.  The ISA is declared once, in
 * dispatch/include/vc_tier_isa.h, in two parts that the dispatcher checks
 * per mode:
 *   VC_ISA_AESNI_BLOCK  "aes" (on SSE2): key expansion, one block, CFB128,
 *                       CFB8, CFB1.  No SSSE3/SSE4.1 here, so a CPU with
 *                       AES-NI but an old SSE level (the hypervisor model
 *                       "qemu64,+aes") runs the CFB modes with AES-NI;
 *   VC_ISA_AESNI_GCM    + "pclmul,ssse3": GHASH and the GCM bulk
 *                       (functions named *gcm* / *ghash*).
 * Neither enables AVX, so the compiler cannot emit a VEX or EVEX encoding
 * here; tests/library/test_tier_isa.py checks every instruction against the lists.
 *
 * Contents
 *   1. AES-128/192/256 key expansion (AESKEYGENASSIST) and a single block.
 *   2. GHASH over GF(2^128): bit-reflected representation, twisted H, the
 *      two-fold reduction, 8-block aggregation with Karatsuba.
 *   3. GCM: CTR keystream for 8 blocks in flight, stitched round by round
 *      with the GHASH of 8 ciphertext blocks.
 *   4. CFB128 (serial encrypt, 8-wide decrypt), CFB8 and CFB1 (serial).
 *
 * Everything here is constant time: AESENC/AESENCLAST/PCLMULQDQ have
 * data-independent timing and no branch or address depends on key, data or
 * keystream.
 */
#include <stdalign.h>
#include <string.h>

#include <immintrin.h>

#include "internal.h"
#include "vc_tier_isa.h"

/* Block part (AES on SSE2) and GCM part, from the one declaration. */
#define VC_AESNI_TARGET __attribute__((target(VC_ISA_TARGET(VC_ISA_AESNI_BLOCK))))
#define VC_AESNI_INLINE \
    static inline __attribute__((always_inline, target(VC_ISA_TARGET(VC_ISA_AESNI_BLOCK))))
#define VC_GCM_TARGET __attribute__((target(VC_ISA_TARGET(VC_ISA_AESNI_GCM))))
#define VC_GCM_INLINE \
    static inline __attribute__((always_inline, target(VC_ISA_TARGET(VC_ISA_AESNI_GCM))))

#define VC_ISA_CHECK_LIST VC_ISA_AESNI_BLOCK
#include "tier_isa_check.h"
#define VC_ISA_CHECK_LIST VC_ISA_AESNI_GCM
#include "tier_isa_check.h"

/* g->table layout (tier-private):
 *   entry 0..7   H^1' .. H^8'  (twisted powers, see section 2)
 *   entry 8..15  for power i: (hi64 ^ lo64) of H^i' in both qwords, the
 *                precomputed Karatsuba middle operand. */
#define GH_POWERS 8
static_assert(VC_GHASH_TABLE_BYTES >= 2 * GH_POWERS * 16, "GHASH table too small for the aesni layout");

/* ===================================================================== 1 ==
 * AES key expansion.
 *
 * FIPS-197 section 5.2, word by word: w[i] = w[i-Nk] ^ temp with
 *   temp = SubWord(RotWord(w[i-1])) ^ Rcon   when i % Nk == 0
 *   temp = SubWord(w[i-1])                   when Nk == 8 and i % Nk == 4
 *   temp = w[i-1]                            otherwise.
 * AESKEYGENASSIST gives both S-box forms at once: for a source whose dword 1
 * is x it returns SubWord(x) in dword 0 and RotWord(SubWord(x)) ^ imm in
 * dword 1.  (SubWord and RotWord commute: the S-box works bytewise.)  Rcon
 * must be an immediate, so we pass 0 and XOR Rcon in ourselves, which lets one
 * loop serve all three key sizes.  A word read from memory as a little-endian
 * uint32 has FIPS byte a0 in bits 0..7; Intel's RotWord is a rotate right by
 * 8 of that dword, i.e. [a0,a1,a2,a3] -> [a1,a2,a3,a0] as FIPS wants, and
 * Rcon lands in byte a0.
 */
VC_AESNI_INLINE __m128i aesni_subword_pair(uint32_t w)
{
    __m128i v = _mm_shuffle_epi32(_mm_cvtsi32_si128((int)w), 0x00);
    return _mm_aeskeygenassist_si128(v, 0x00);
}

VC_AESNI_TARGET
void vc_aesni_setkey(vc_aes_key *k, const uint8_t *key, unsigned key_bits)
{
    const unsigned nk = key_bits / 32;          /* 4, 6, 8 */
    const unsigned nr = nk + 6;                 /* 10, 12, 14 */
    const unsigned nwords = 4 * (nr + 1);       /* 44, 52, 60 */
    uint32_t w[60];
    uint32_t rcon = 0x01;

    assert(key_bits == 128 || key_bits == 192 || key_bits == 256);
    memcpy(w, key, 4 * nk);
    for (unsigned i = nk; i < nwords; i++) {
        uint32_t t = w[i - 1];
        if (i % nk == 0) {
            /* dword 1 via PSHUFD + MOVD (SSE2; PEXTRD would need SSE4.1) */
            t = (uint32_t)_mm_cvtsi128_si32(_mm_shuffle_epi32(aesni_subword_pair(t), 0x55)) ^ rcon;
            /* xtime on the public round constant: 01 02 04 .. 80 1b 36 */
            rcon = ((rcon << 1) ^ ((rcon >> 7) * 0x1b)) & 0xff;
        } else if (nk == 8 && i % nk == 4) {
            t = (uint32_t)_mm_cvtsi128_si32(aesni_subword_pair(t));
        }
        w[i] = w[i - nk] ^ t;
    }
    memset(k->rk, 0, sizeof k->rk);
    memcpy(k->rk, w, 4 * nwords);
    k->rounds = nr;
    k->key_bits = key_bits;
    vc_secure_zero(w, sizeof w);
    /* k->bs (the generic tier's bitsliced schedule) is left alone: a key is
     * only ever used by the tier that expanded it, and building the bitsliced
     * form costs more than the whole AES-NI expansion. */
}

VC_AESNI_INLINE __m128i aesni_encrypt(const vc_aes_key *k, __m128i x)
{
    const __m128i *rk = (const __m128i *)k->rk;
    const unsigned nr = k->rounds;
    x = _mm_xor_si128(x, rk[0]);
    for (unsigned r = 1; r < nr; r++)
        x = _mm_aesenc_si128(x, rk[r]);
    return _mm_aesenclast_si128(x, rk[nr]);
}

VC_AESNI_TARGET
void vc_aesni_encrypt_block(const vc_aes_key *k, const uint8_t in[16], uint8_t out[16])
{
    __m128i x = aesni_encrypt(k, _mm_loadu_si128((const __m128i *)in));
    _mm_storeu_si128((__m128i *)out, x);
}

/* Round keys held in named locals, so that after always_inline
 * specialisation on a constant round count the compiler keeps them in
 * registers across a serial loop (CFB encrypt, CFB8, CFB1).  With 16 xmm
 * registers AES-256 may spill one key; the reload is off the critical path. */
#define AESNI_RK_LOCALS(k, nr)                                                   \
    const __m128i *rkp_ = (const __m128i *)(k)->rk;                              \
    const __m128i k0 = rkp_[0], k1 = rkp_[1], k2 = rkp_[2], k3 = rkp_[3];        \
    const __m128i k4 = rkp_[4], k5 = rkp_[5], k6 = rkp_[6], k7 = rkp_[7];        \
    const __m128i k8 = rkp_[8], k9 = rkp_[9];                                    \
    const __m128i k10 = (nr) > 10 ? rkp_[10] : k0, k11 = (nr) > 10 ? rkp_[11] : k0; \
    const __m128i k12 = (nr) > 12 ? rkp_[12] : k0, k13 = (nr) > 12 ? rkp_[13] : k0; \
    const __m128i kl = rkp_[nr]

#define AESNI_RK_ENCRYPT(x, nr)                                                  \
    do {                                                                         \
        x = _mm_xor_si128(x, k0);                                                \
        x = _mm_aesenc_si128(x, k1);                                             \
        x = _mm_aesenc_si128(x, k2);                                             \
        x = _mm_aesenc_si128(x, k3);                                             \
        x = _mm_aesenc_si128(x, k4);                                             \
        x = _mm_aesenc_si128(x, k5);                                             \
        x = _mm_aesenc_si128(x, k6);                                             \
        x = _mm_aesenc_si128(x, k7);                                             \
        x = _mm_aesenc_si128(x, k8);                                             \
        x = _mm_aesenc_si128(x, k9);                                             \
        if ((nr) > 10) {                                                         \
            x = _mm_aesenc_si128(x, k10);                                        \
            x = _mm_aesenc_si128(x, k11);                                        \
        }                                                                        \
        if ((nr) > 12) {                                                         \
            x = _mm_aesenc_si128(x, k12);                                        \
            x = _mm_aesenc_si128(x, k13);                                        \
        }                                                                        \
        x = _mm_aesenclast_si128(x, kl);                                         \
    } while (0)

/* Call FN(k, NR, args...) with NR a compile-time constant for the key. */
#define AESNI_BY_ROUNDS(fn, k, ...)                                              \
    do {                                                                         \
        if ((k)->rounds == 10)                                                   \
            fn(k, 10, __VA_ARGS__);                                              \
        else if ((k)->rounds == 12)                                              \
            fn(k, 12, __VA_ARGS__);                                              \
        else                                                                     \
            fn(k, 14, __VA_ARGS__);                                              \
    } while (0)

/* ===================================================================== 2 ==
 * GHASH.
 *
 * Field: GF(2^128) = GF(2)[x] / P(x),  P(x) = x^128 + x^7 + x^2 + x + 1.
 * SP 800-38D maps block bytes b0..b15 to a polynomial with bit 7 (the MSB)
 * of b0 as the coefficient of x^0 and bit 0 of b15 as that of x^127.
 *
 * Bit reflection.  Byte-reversing the block (PSHUFB) and reading it as a
 * little-endian 128-bit integer gives
 *         R(A) = sum a_i * 2^(127-i)      (coefficient of x^i at bit 127-i).
 * PCLMULQDQ multiplies integers as polynomials in a formal variable y
 * (bit n <-> y^n).  For reflected operands
 *         clmul(R(A), R(B)) = sum a_i b_j 2^(254-i-j) = R256(A*B*x),
 * where R256(C) = sum c_k 2^(255-k) is the 256-bit reflection: the product
 * comes out reflected but one power of x too high (the well-known "shift by
 * one").  Instead of shifting every product we fold the x^-1 into H once:
 *         H' = H * x^-1 mod P       ("twisted H")
 *   so    clmul(R(X), R(H')) = R256(X * H' * x),   X*H'*x == X*H (mod P).
 * In the reflected domain multiplying by x^-1 is a left shift by one; if the
 * constant term h0 (bit 127 of R(H)) was set, P is added first, which after
 * the shift contributes x^127 + x^6 + x + 1, i.e. the constant
 * 0xC2000000_00000000_00000000_00000001:
 *         R(H') = (R(H) << 1) ^ (h0 ? 0xC2..01 : 0).
 * The same identity gives the powers: mul(H^i', H') = R(H^i x^-1 H x^-1 x)
 * = R(H^(i+1) x^-1) = H^(i+1)', so all table entries are twisted alike.
 *
 * Reduction.  A 256-bit product T = [T3:T2:T1:T0] (64-bit words) holds the
 * coefficients of x^0..x^127 in its high half (already in R() form) and those
 * of x^128..x^255 in its low half.  Read in y (y^n <-> x^(255-n)), reducing
 * means clearing the low 128 bits of T by adding multiples of the reflected
 * modulus
 *         p(y) = y^128 P(1/y) = 1 + y^121 + y^126 + y^127 + y^128
 *              = 1 + y^64 * c(y) + y^128,   c = y^57+y^62+y^63 = 0xC2000000_00000000.
 * (Adding m(y)*p(y) with deg m < 128 adds x^127 m(1/x) P(x): a multiple of P.)
 * Adding T0*p clears T0, adds clmul(T0,c) at bit 64 and T0 at bit 128.  On the
 * pair [T1:T0] that is one "fold":
 *         fold(v) = swap64(v) ^ clmul(v.lo, c)
 *   -> [T0 ^ A.hi : T1 ^ A.lo] where A = clmul(T0, c): the low qword is the
 *      new word at bit 64, the high qword is what must join T2.
 * A second fold clears that word the same way, and
 *         X = [T3:T2] ^ fold(fold([T1:T0])).
 *
 * Aggregation.  Over 8 blocks C0..C7 Horner's rule unrolls to
 *         X' = (X^C0) H^8 ^ C1 H^7 ^ ... ^ C7 H^1,
 * eight independent products summed unreduced (the reduction is linear), then
 * one reduction.  Each product uses Karatsuba: with a = [a1:a0], h = [h1:h0]
 *         a*h = a1h1 * 2^128 ^ ((a1^a0)(h1^h0) ^ a1h1 ^ a0h0) * 2^64 ^ a0h0,
 * three PCLMULQDQ instead of four, (h1^h0) precomputed in the table; the
 * lo/mid/hi sums are combined once per batch.
 */

VC_GCM_INLINE __m128i aesni_bswap128(__m128i v)
{
    const __m128i rev = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm_shuffle_epi8(v, rev);
}

VC_GCM_INLINE __m128i gh_reduce(__m128i lo, __m128i hi)
{
    const __m128i c = _mm_set_epi64x(0, (long long)0xC200000000000000ULL);
    __m128i t = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4e), _mm_clmulepi64_si128(lo, c, 0x00));
    t = _mm_xor_si128(_mm_shuffle_epi32(t, 0x4e), _mm_clmulepi64_si128(t, c, 0x00));
    return _mm_xor_si128(t, hi);
}

/* Karatsuba lo/mid/hi sums -> 256-bit [hi:lo] -> reduced element. */
VC_GCM_INLINE __m128i gh_finish(__m128i lo, __m128i mid, __m128i hi)
{
    mid = _mm_xor_si128(mid, _mm_xor_si128(lo, hi));
    lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    return gh_reduce(lo, hi);
}

/* One reflected block a times table power hp (with Karatsuba half hk),
 * accumulated into lo/mid/hi. */
#define GH_ACC(a, hp, hk, lo, mid, hi)                                            \
    do {                                                                         \
        const __m128i gacc_a_ = (a);                                             \
        const __m128i gacc_m_ = _mm_xor_si128(gacc_a_, _mm_shuffle_epi32(gacc_a_, 0x4e)); \
        lo = _mm_xor_si128(lo, _mm_clmulepi64_si128(gacc_a_, (hp), 0x00));       \
        hi = _mm_xor_si128(hi, _mm_clmulepi64_si128(gacc_a_, (hp), 0x11));       \
        mid = _mm_xor_si128(mid, _mm_clmulepi64_si128(gacc_m_, (hk), 0x00));     \
    } while (0)

/* Full product of two reflected elements, reduced: R(A*B*x mod P). */
VC_GCM_INLINE __m128i gh_mul(__m128i a, __m128i b)
{
    __m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
    __m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
    __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
    lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    return gh_reduce(lo, hi);
}

VC_GCM_TARGET
static void aesni_ghash_init(vc_ghash_key *g)
{
    __m128i *tab = (__m128i *)g->table;
    const __m128i h = aesni_bswap128(_mm_load_si128((const __m128i *)g->h));
    /* all-ones when h0 (bit 127 of R(H)) is set: sign of dword 3, broadcast */
    const __m128i carry = _mm_shuffle_epi32(_mm_srai_epi32(h, 31), 0xff);
    const __m128i shl1 = _mm_or_si128(_mm_slli_epi64(h, 1), _mm_slli_si128(_mm_srli_epi64(h, 63), 8));
    const __m128i twist = _mm_set_epi64x((long long)0xC200000000000000ULL, 1);
    const __m128i h1 = _mm_xor_si128(shl1, _mm_and_si128(carry, twist));

    memset(g->table, 0, sizeof g->table);
    tab[0] = h1;
    for (int i = 1; i < GH_POWERS; i++)
        tab[i] = gh_mul(tab[i - 1], h1);
    for (int i = 0; i < GH_POWERS; i++)
        tab[GH_POWERS + i] = _mm_xor_si128(tab[i], _mm_shuffle_epi32(tab[i], 0x4e));
}

/* X <- GHASH of n (1..8) blocks at p, aggregated: (X^B0)H^n ^ ... ^ B(n-1)H^1.
 * X and the result are reflected. */
VC_GCM_INLINE __m128i gh_blocks(const __m128i *tab, __m128i X, const uint8_t *p, unsigned n)
{
    __m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
    for (unsigned i = 0; i < n; i++) {
        __m128i a = aesni_bswap128(_mm_loadu_si128((const __m128i *)(p + 16 * i)));
        if (i == 0)
            a = _mm_xor_si128(a, X);
        GH_ACC(a, tab[n - 1 - i], tab[GH_POWERS + n - 1 - i], lo, mid, hi);
    }
    return gh_finish(lo, mid, hi);
}

VC_GCM_TARGET
static void aesni_ghash(const vc_ghash_key *g, uint8_t Xb[16], const uint8_t *in, size_t len)
{
    const __m128i *tab = (const __m128i *)g->table;
    __m128i X = aesni_bswap128(_mm_loadu_si128((const __m128i *)Xb));
    size_t nb = len / 16;
    for (; nb >= 8; nb -= 8, in += 128)
        X = gh_blocks(tab, X, in, 8);
    if (nb)
        X = gh_blocks(tab, X, in, (unsigned)nb);
    _mm_storeu_si128((__m128i *)Xb, aesni_bswap128(X));
}

/* ===================================================================== 3 ==
 * GCM bulk.
 *
 * Counter: the counter block is kept byte-reversed, so its last four bytes
 * (the big-endian inc32 field) are dword 0 as a native integer; PADDD on
 * dword 0 is exactly inc32 mod 2^32 with no carry into the nonce part.  Each
 * block is PSHUFB'd back to standard order before AES.
 *
 * One batch (8 blocks, 128 bytes), stitched round by round:
 *
 *   ctr+0..7 --^rk0--> r1 --> r2 --> ... --> r8 --> r9 --> [r10..r13] --> last --^in--> out
 *                      |      |              |      |
 *   hash blocks:       C0*H^8 C1*H^7 ...     C7*H^1 reduce (Karatsuba fixup + 2 folds)
 *                      (C0 ^= X first)
 *
 * The eight AES chains are independent, and the PCLMULQDQ work sits between
 * their rounds, so the two kinds of instruction are in flight together; on
 * cores where AES and PCLMUL use different ports they overlap, elsewhere the
 * interleave at least hides the AESENC latency.
 *
 * Decryption hashes this batch's ciphertext (its input, read before the
 * plaintext is stored, so in == out is safe).  Encryption hashes the
 * previous batch's ciphertext (already stored in out) while encrypting the
 * current one, and the last batch after the loop.
 */

#define AES_ROUND8(rkv)                                                          \
    do {                                                                         \
        const __m128i r_ = (rkv);                                                \
        b0 = _mm_aesenc_si128(b0, r_);                                           \
        b1 = _mm_aesenc_si128(b1, r_);                                           \
        b2 = _mm_aesenc_si128(b2, r_);                                           \
        b3 = _mm_aesenc_si128(b3, r_);                                           \
        b4 = _mm_aesenc_si128(b4, r_);                                           \
        b5 = _mm_aesenc_si128(b5, r_);                                           \
        b6 = _mm_aesenc_si128(b6, r_);                                           \
        b7 = _mm_aesenc_si128(b7, r_);                                           \
    } while (0)

/* Hash step j of the batch: block j of hsrc times H^(8-j). */
#define GH_STEP(j)                                                               \
    do {                                                                         \
        if (do_hash) {                                                           \
            __m128i hb_ = aesni_bswap128(_mm_loadu_si128((const __m128i *)(hsrc + 16 * (j)))); \
            if ((j) == 0)                                                        \
                hb_ = _mm_xor_si128(hb_, *X);                                    \
            GH_ACC(hb_, tab[7 - (j)], tab[GH_POWERS + 7 - (j)], lo, mid, hi);     \
        }                                                                        \
    } while (0)

/* 8 CTR blocks in -> out, optionally hashing the 128 bytes at hsrc into *X.
 * *ctr is the byte-reversed counter; advanced by 8. */
VC_GCM_INLINE void gcm_batch8(const vc_aes_key *k, const __m128i *tab, __m128i *ctr, __m128i *X,
                                const int do_hash, const uint8_t *hsrc, const uint8_t *in, uint8_t *out)
{
    const __m128i *rk = (const __m128i *)k->rk;
    const unsigned nr = k->rounds;
    const __m128i c = *ctr, k0 = rk[0];
    __m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
    __m128i b0 = _mm_xor_si128(aesni_bswap128(c), k0);
    __m128i b1 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 1))), k0);
    __m128i b2 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 2))), k0);
    __m128i b3 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 3))), k0);
    __m128i b4 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 4))), k0);
    __m128i b5 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 5))), k0);
    __m128i b6 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 6))), k0);
    __m128i b7 = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 7))), k0);
    *ctr = _mm_add_epi32(c, _mm_set_epi32(0, 0, 0, 8));

    AES_ROUND8(rk[1]);
    GH_STEP(0);
    AES_ROUND8(rk[2]);
    GH_STEP(1);
    AES_ROUND8(rk[3]);
    GH_STEP(2);
    AES_ROUND8(rk[4]);
    GH_STEP(3);
    AES_ROUND8(rk[5]);
    GH_STEP(4);
    AES_ROUND8(rk[6]);
    GH_STEP(5);
    AES_ROUND8(rk[7]);
    GH_STEP(6);
    AES_ROUND8(rk[8]);
    GH_STEP(7);
    AES_ROUND8(rk[9]);
    if (do_hash)
        *X = gh_finish(lo, mid, hi);
    if (nr > 10) {
        AES_ROUND8(rk[10]);
        AES_ROUND8(rk[11]);
    }
    if (nr > 12) {
        AES_ROUND8(rk[12]);
        AES_ROUND8(rk[13]);
    }
    {
        const __m128i kl = rk[nr];
        const __m128i *ip = (const __m128i *)in;
        __m128i *op = (__m128i *)out;
        b0 = _mm_xor_si128(_mm_aesenclast_si128(b0, kl), _mm_loadu_si128(ip + 0));
        b1 = _mm_xor_si128(_mm_aesenclast_si128(b1, kl), _mm_loadu_si128(ip + 1));
        b2 = _mm_xor_si128(_mm_aesenclast_si128(b2, kl), _mm_loadu_si128(ip + 2));
        b3 = _mm_xor_si128(_mm_aesenclast_si128(b3, kl), _mm_loadu_si128(ip + 3));
        b4 = _mm_xor_si128(_mm_aesenclast_si128(b4, kl), _mm_loadu_si128(ip + 4));
        b5 = _mm_xor_si128(_mm_aesenclast_si128(b5, kl), _mm_loadu_si128(ip + 5));
        b6 = _mm_xor_si128(_mm_aesenclast_si128(b6, kl), _mm_loadu_si128(ip + 6));
        b7 = _mm_xor_si128(_mm_aesenclast_si128(b7, kl), _mm_loadu_si128(ip + 7));
        _mm_storeu_si128(op + 0, b0);
        _mm_storeu_si128(op + 1, b1);
        _mm_storeu_si128(op + 2, b2);
        _mm_storeu_si128(op + 3, b3);
        _mm_storeu_si128(op + 4, b4);
        _mm_storeu_si128(op + 5, b5);
        _mm_storeu_si128(op + 6, b6);
        _mm_storeu_si128(op + 7, b7);
    }
}

/* The last len (< 128) bytes of a call: n = ceil(len/16) counter blocks
 * side by side, through a stack buffer so that nothing outside in/out is
 * touched; a partial final block is hashed zero-padded. */
VC_GCM_TARGET
static void aesni_gcm_tail(const vc_aes_key *k, const __m128i *tab, __m128i *ctr, __m128i *X,
                     const uint8_t *in, uint8_t *out, size_t len, int enc)
{
    const __m128i *rk = (const __m128i *)k->rk;
    const unsigned nr = k->rounds;
    const unsigned n = (unsigned)((len + 15) / 16);
    alignas(16) uint8_t buf[128];
    __m128i b[8];

    memcpy(buf, in, len);
    memset(buf + len, 0, 16 * n - len);
    if (!enc)
        *X = gh_blocks(tab, *X, buf, n);
    for (unsigned i = 0; i < n; i++)
        b[i] = _mm_xor_si128(aesni_bswap128(_mm_add_epi32(*ctr, _mm_set_epi32(0, 0, 0, (int)i))), rk[0]);
    for (unsigned r = 1; r < nr; r++)
        for (unsigned i = 0; i < n; i++)
            b[i] = _mm_aesenc_si128(b[i], rk[r]);
    for (unsigned i = 0; i < n; i++) {
        __m128i *bp = (__m128i *)(buf + 16 * i);
        _mm_store_si128(bp, _mm_xor_si128(_mm_load_si128(bp), _mm_aesenclast_si128(b[i], rk[nr])));
    }
    memcpy(out, buf, len);
    if (enc) {
        memset(buf + len, 0, 16 * n - len);
        *X = gh_blocks(tab, *X, buf, n);
    }
    *ctr = _mm_add_epi32(*ctr, _mm_set_epi32(0, 0, 0, (int)n));
    vc_secure_zero(buf, sizeof buf);
    vc_secure_zero(b, sizeof b);
}

VC_GCM_TARGET
static void aesni_gcm_enc(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctrb[16], uint8_t Xb[16],
                          const uint8_t *in, uint8_t *out, size_t len)
{
    const __m128i *tab = (const __m128i *)g->table;
    __m128i ctr = aesni_bswap128(_mm_loadu_si128((const __m128i *)ctrb));
    __m128i X = aesni_bswap128(_mm_loadu_si128((const __m128i *)Xb));
    size_t p = 0;

    if (len >= 128) {
        gcm_batch8(k, tab, &ctr, &X, 0, NULL, in, out);
        for (p = 128; len - p >= 128; p += 128)
            gcm_batch8(k, tab, &ctr, &X, 1, out + p - 128, in + p, out + p);
        X = gh_blocks(tab, X, out + p - 128, 8);
    }
    if (p < len)
        aesni_gcm_tail(k, tab, &ctr, &X, in + p, out + p, len - p, 1);
    _mm_storeu_si128((__m128i *)ctrb, aesni_bswap128(ctr));
    _mm_storeu_si128((__m128i *)Xb, aesni_bswap128(X));
}

VC_GCM_TARGET
static void aesni_gcm_dec(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctrb[16], uint8_t Xb[16],
                          const uint8_t *in, uint8_t *out, size_t len)
{
    const __m128i *tab = (const __m128i *)g->table;
    __m128i ctr = aesni_bswap128(_mm_loadu_si128((const __m128i *)ctrb));
    __m128i X = aesni_bswap128(_mm_loadu_si128((const __m128i *)Xb));
    size_t p = 0;

    for (; len - p >= 128; p += 128)
        gcm_batch8(k, tab, &ctr, &X, 1, in + p, in + p, out + p);
    if (p < len)
        aesni_gcm_tail(k, tab, &ctr, &X, in + p, out + p, len - p, 0);
    _mm_storeu_si128((__m128i *)ctrb, aesni_bswap128(ctr));
    _mm_storeu_si128((__m128i *)Xb, aesni_bswap128(X));
}

/* ===================================================================== 4 ==
 * CFB128.
 *
 * Encrypt: each AES input is the previous ciphertext, so the chain is
 * strictly serial; the round keys stay in registers.
 *
 *     IV --> AES --(+)--> C0 --> AES --(+)--> C1 --> ...
 *                   ^                  ^
 *                   P0                 P1
 *
 * Decrypt: every AES input (IV, C0, C1, ...) is known up front, so 8 blocks
 * run in parallel; only the XOR needs block i's own ciphertext.
 *
 *     IV    C0    C1   ...  C6          (inputs loaded before any store,
 *     |     |     |         |            so in == out is safe)
 *    AES   AES   AES  ...  AES
 *     |     |     |         |
 *    (+)C0 (+)C1 (+)C2 ... (+)C7  -->  P0 .. P7, next IV = C7
 */

VC_AESNI_INLINE void cfb128_enc_nr(const vc_aes_key *k, const unsigned nr, uint8_t iv[16],
                                   const uint8_t *in, uint8_t *out, size_t len)
{
    AESNI_RK_LOCALS(k, nr);
    __m128i x = _mm_loadu_si128((const __m128i *)iv);
    for (size_t i = 0; i < len; i += 16) {
        AESNI_RK_ENCRYPT(x, nr);
        x = _mm_xor_si128(x, _mm_loadu_si128((const __m128i *)(in + i)));
        _mm_storeu_si128((__m128i *)(out + i), x);
    }
    _mm_storeu_si128((__m128i *)iv, x);
}

VC_AESNI_TARGET
static void aesni_cfb128_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len)
{
    AESNI_BY_ROUNDS(cfb128_enc_nr, k, iv, in, out, len);
}

VC_AESNI_TARGET
static void aesni_cfb128_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len)
{
    const __m128i *rk = (const __m128i *)k->rk;
    const unsigned nr = k->rounds;
    __m128i prev = _mm_loadu_si128((const __m128i *)iv);
    size_t p = 0;

    for (; len - p >= 128; p += 128) {
        const __m128i *ip = (const __m128i *)(in + p);
        __m128i *op = (__m128i *)(out + p);
        const __m128i c0 = _mm_loadu_si128(ip + 0), c1 = _mm_loadu_si128(ip + 1);
        const __m128i c2 = _mm_loadu_si128(ip + 2), c3 = _mm_loadu_si128(ip + 3);
        const __m128i c4 = _mm_loadu_si128(ip + 4), c5 = _mm_loadu_si128(ip + 5);
        const __m128i c6 = _mm_loadu_si128(ip + 6), c7 = _mm_loadu_si128(ip + 7);
        const __m128i k0 = rk[0];
        __m128i b0 = _mm_xor_si128(prev, k0), b1 = _mm_xor_si128(c0, k0);
        __m128i b2 = _mm_xor_si128(c1, k0), b3 = _mm_xor_si128(c2, k0);
        __m128i b4 = _mm_xor_si128(c3, k0), b5 = _mm_xor_si128(c4, k0);
        __m128i b6 = _mm_xor_si128(c5, k0), b7 = _mm_xor_si128(c6, k0);
        for (unsigned r = 1; r < nr; r++)
            AES_ROUND8(rk[r]);
        {
            const __m128i kl = rk[nr];
            _mm_storeu_si128(op + 0, _mm_xor_si128(_mm_aesenclast_si128(b0, kl), c0));
            _mm_storeu_si128(op + 1, _mm_xor_si128(_mm_aesenclast_si128(b1, kl), c1));
            _mm_storeu_si128(op + 2, _mm_xor_si128(_mm_aesenclast_si128(b2, kl), c2));
            _mm_storeu_si128(op + 3, _mm_xor_si128(_mm_aesenclast_si128(b3, kl), c3));
            _mm_storeu_si128(op + 4, _mm_xor_si128(_mm_aesenclast_si128(b4, kl), c4));
            _mm_storeu_si128(op + 5, _mm_xor_si128(_mm_aesenclast_si128(b5, kl), c5));
            _mm_storeu_si128(op + 6, _mm_xor_si128(_mm_aesenclast_si128(b6, kl), c6));
            _mm_storeu_si128(op + 7, _mm_xor_si128(_mm_aesenclast_si128(b7, kl), c7));
        }
        prev = c7;
    }
    /* Fewer than 8 blocks left: still independent of each other, so the
     * core overlaps them even one call at a time. */
    for (; p < len; p += 16) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(in + p));
        _mm_storeu_si128((__m128i *)(out + p), _mm_xor_si128(aesni_encrypt(k, prev), c));
        prev = c;
    }
    _mm_storeu_si128((__m128i *)iv, prev);
}

/* CFB8 (SP 800-38A, s = 8): a 16-byte shift register, one AES per byte.
 *
 *     reg = IV;  for each byte:  o = AES(reg)[0];  c = p ^ o;
 *                                reg = reg[1..15] || c     (decrypt: || c the input)
 *
 * In an xmm register loaded from memory byte 0 is the lowest, so dropping
 * reg[0] is a byte shift right and the new byte goes in at lane 15. */
VC_AESNI_INLINE void cfb8_nr(const vc_aes_key *k, const unsigned nr, uint8_t iv[16],
                             const uint8_t *in, uint8_t *out, size_t len, const int enc)
{
    AESNI_RK_LOCALS(k, nr);
    __m128i reg = _mm_loadu_si128((const __m128i *)iv);
    unsigned last = iv[15]; /* the byte at lane 15, kept in a GPR */
    for (size_t i = 0; i < len; i++) {
        __m128i o = reg;
        AESNI_RK_ENCRYPT(o, nr);
        const unsigned ib = in[i];
        const unsigned ob = ib ^ ((unsigned)_mm_cvtsi128_si32(o) & 0xffu);
        const unsigned fb = enc ? ob : ib;
        out[i] = (uint8_t)ob;
        /* After the shift lane 14 holds the old lane 15 (`last`) and lane
         * 15 must take fb: one PINSRW of the word (last | fb << 8) into word
         * 7.  PINSRW is SSE2 (PINSRB would need SSE4.1) and, unlike a
         * MOVD/PSLLDQ/POR sequence, needs no extra xmm register next to the
         * 15 round keys. */
        reg = _mm_insert_epi16(_mm_srli_si128(reg, 1), (int)(last | fb << 8), 7);
        last = fb;
    }
    _mm_storeu_si128((__m128i *)iv, reg);
}

#define CFB8_ENC(k, nr, iv, in, out, len) cfb8_nr(k, nr, iv, in, out, len, 1)
#define CFB8_DEC(k, nr, iv, in, out, len) cfb8_nr(k, nr, iv, in, out, len, 0)

VC_AESNI_TARGET
static void aesni_cfb8_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len)
{
    AESNI_BY_ROUNDS(CFB8_ENC, k, iv, in, out, len);
}

VC_AESNI_TARGET
static void aesni_cfb8_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t len)
{
    AESNI_BY_ROUNDS(CFB8_DEC, k, iv, in, out, len);
}

/* CFB1 (s = 1): as CFB8 with one bit.  The register is a 128-bit big-endian
 * number kept as two uint64 (hi = bytes 0..7); the keystream bit is the MSB
 * of AES(reg)[0]; the register shifts left by one and takes the ciphertext
 * bit at the bottom.  Data bits run MSB first within each byte; an output
 * byte is written once complete (after its input byte was read, so in == out
 * is safe), a final partial byte with its unused low bits zero. */
VC_AESNI_INLINE void cfb1_nr(const vc_aes_key *k, const unsigned nr, uint8_t iv[16],
                             const uint8_t *in, uint8_t *out, size_t nbits, const int enc)
{
    AESNI_RK_LOCALS(k, nr);
    uint64_t hi, lo;
    memcpy(&hi, iv, 8);
    memcpy(&lo, iv + 8, 8);
    hi = __builtin_bswap64(hi);
    lo = __builtin_bswap64(lo);
    for (size_t byte = 0; byte * 8 < nbits; byte++) {
        const unsigned nb = nbits - byte * 8 >= 8 ? 8 : (unsigned)(nbits - byte * 8);
        const unsigned ib = in[byte];
        unsigned ob = 0;
        for (unsigned j = 0; j < nb; j++) {
            __m128i o = _mm_set_epi64x((long long)__builtin_bswap64(lo), (long long)__builtin_bswap64(hi));
            AESNI_RK_ENCRYPT(o, nr);
            const unsigned kbit = ((unsigned)_mm_cvtsi128_si32(o) >> 7) & 1u;
            const unsigned pbit = (ib >> (7 - j)) & 1u;
            const unsigned obit = pbit ^ kbit;
            const unsigned cbit = enc ? obit : pbit;
            ob |= obit << (7 - j);
            hi = (hi << 1) | (lo >> 63);
            lo = (lo << 1) | cbit;
        }
        out[byte] = (uint8_t)ob;
    }
    hi = __builtin_bswap64(hi);
    lo = __builtin_bswap64(lo);
    memcpy(iv, &hi, 8);
    memcpy(iv + 8, &lo, 8);
}

#define CFB1_ENC(k, nr, iv, in, out, n) cfb1_nr(k, nr, iv, in, out, n, 1)
#define CFB1_DEC(k, nr, iv, in, out, n) cfb1_nr(k, nr, iv, in, out, n, 0)

VC_AESNI_TARGET
static void aesni_cfb1_enc(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t nbits)
{
    AESNI_BY_ROUNDS(CFB1_ENC, k, iv, in, out, nbits);
}

VC_AESNI_TARGET
static void aesni_cfb1_dec(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in, uint8_t *out, size_t nbits)
{
    AESNI_BY_ROUNDS(CFB1_DEC, k, iv, in, out, nbits);
}

const vc_tier vc_tier_aesni = {
    .path = VC_PATH_AESNI,
    .setkey = vc_aesni_setkey,
    .encrypt_block = vc_aesni_encrypt_block,
    .ghash_init = aesni_ghash_init,
    .ghash = aesni_ghash,
    .gcm_enc = aesni_gcm_enc,
    .gcm_dec = aesni_gcm_dec,
    .cfb128_enc = aesni_cfb128_enc,
    .cfb128_dec = aesni_cfb128_dec,
    .cfb8_enc = aesni_cfb8_enc,
    .cfb8_dec = aesni_cfb8_dec,
    .cfb1_enc = aesni_cfb1_enc,
    .cfb1_dec = aesni_cfb1_dec,
};
