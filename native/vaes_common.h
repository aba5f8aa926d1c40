/*
 * vaes_common.h - the width-generic body of the three wide tiers
 * (avx512 = EVEX zmm, avx10_256 = EVEX ymm, vaes_avx2 = VEX ymm).
 *
 * This file is included once by each of tier_avx512.c, tier_avx10_256.c and
 * tier_vaes_avx2.c after the tier has defined:
 *
 *   VC_TGT         the target("...") string every function here is compiled for,
 *                  VC_ISA_TARGET(<the tier's list in vc_tier_isa.h>)
 *   VC_NAME(x)     per-tier symbol name (vc_avx512_##x ...), so profiles and
 *                  instruction-mix reports name the tier that ran
 *   VC_W           vector width in bytes (64 or 32); VC_L = VC_W / 16 lanes
 *   vc_v           the vector type, and the vector operations used below
 *                  (v_* macros: plain intrinsics, so they inherit the target
 *                  of the function they are expanded in)
 *
 * A "lane" is one 128-bit AES/GHASH block inside a vector.  VAESENC and
 * VPCLMULQDQ on a ymm/zmm register work lane by lane, so the same algorithm
 * runs on 2 or 4 blocks per instruction.
 *
 * ======================================================================
 * GHASH, reflected, as POLYVAL (RFC 8452 appendix A)
 * ======================================================================
 * GCM's field GF(2^128) = GF(2)[x] / (x^128 + x^7 + x^2 + x + 1) numbers the
 * bits of a block "backwards": bit 0 (coefficient of x^0) is the MOST
 * significant bit of byte 0.  Byte-reversing a block (one VPSHUFB) and
 * reading it as a little-endian 128-bit integer gives a value whose integer
 * bit i is the coefficient of x^(127-i): a bit-reflected polynomial.  Rather
 * than fixing the reflection with shifts on every product we use the
 * identity of RFC 8452:
 *
 *   GHASH(H, X1..Xn) = rev(POLYVAL(mulX(rev(H)), rev(X1), ..., rev(Xn)))
 *
 * where rev = byte reversal and POLYVAL works in the field
 * GF(2)[x] / p(x), p(x) = x^128 + x^127 + x^126 + x^121 + 1, with the bits in
 * the natural little-endian order (integer bit i = coefficient of x^i), and
 * with the Montgomery-style product
 *
 *   dot(a, b) = a * b * x^-128  mod p.
 *
 * mulX(v) = v * x = (v << 1), xor 0xC2000000_00000000_00000000_00000001
 * (the low 128 bits of p) when bit 127 was shifted out.  dot() is
 * associative and commutative (dot(dot(a,b),c) = a b c x^-256), so the
 * serial Horner chain S <- dot(S ^ Xi, K1) over n blocks unrolls into a sum
 *
 *   S' = dot(S ^ X1, Kn) ^ dot(X2, Kn-1) ^ ... ^ dot(Xn, K1),
 *   K1 = mulX(rev(H)),  Ki+1 = dot(Ki, K1)
 *
 * and because dot is bilinear the n 256-bit carry-less products can be
 * XOR-summed first and reduced ONCE.
 *
 * Key-power table (g->table), one layout for every wide tier:
 *   bytes    0..511  K32, K31, ..., K1          (entry i = K(32-i))
 *   bytes  512..1023 Karatsuba halves: entry i = (lo ^ hi) of K(32-i) in
 *                    both 64-bit halves
 *   bytes 1024..1087 zero
 * The ymm tiers fill only K16..K1 (they never need more).  A run of n <= 32
 * blocks hashed with one reduction pairs block j (0-based) with K(n-j),
 * and since the powers descend contiguously one unaligned vector load at
 * K(n-j) gives lanes j..j+L-1 their powers K(n-j)..K(n-j-L+1): a batch
 * of 16 (zmm) / 8 (ymm) blocks takes K16..K1 / K8..K1, the first of a pair
 * of main-loop batches K32..K17 / K16..K9, and a short message's AAD, data
 * and length block one contiguous descending run.  Lanes past the last
 * block of a run hold zero data, so the powers they load (past K1: the
 * Karatsuba half, or the zero bytes at the end) do not matter.
 *
 * Karatsuba: with a = a1 x^64 + a0 and b = b1 x^64 + b0 (64-bit halves)
 *   a*b = a1 b1 x^128 + [(a0^a1)(b0^b1) ^ a0 b0 ^ a1 b1] x^64 + a0 b0
 * i.e. three VPCLMULQDQ (lo, hi, "kara") instead of four.  The (b0^b1) half
 * of every key power is precomputed in the table; the data side costs one
 * VPSHUFD + XOR.  The middle term fix-up (kara ^ lo ^ hi) is linear, so it
 * too is done once per batch on the sums.
 *
 * Reduction of a 256-bit T = [T3:T2:T1:T0] (64-bit words) to T x^-128 mod p
 * (Montgomery): p = 1 (mod x^64), so adding T0 * p clears word 0:
 *   T0 * p = T0 x^128 + T0 (x^127 + x^126 + x^121) + T0
 *          = T0 x^128 + clmul(T0, Q) x^64 + T0,   Q = 0xC200000000000000
 * i.e. words (2,1) ^= clmul(T0, Q) and word 2 ^= T0; word 1 gets T1 and
 * the low half of the middle term.  Keeping the products as lo = [T1:T0],
 * mid (the 128-bit middle term, at words 2..1) and hi = [T3:T2]:
 *
 *   mid' = mid ^ swap64(lo) ^ clmul(lo.lo, Q)     word 0 folded into 2..1
 *   hi'  = hi ^ swap64(mid') ^ clmul(mid'.lo, Q)   word 1 folded into 3..2
 *
 *      lo ----+--------- swap64 ----+
 *             +-- clmul Q ----------+-- xor3 --> mid' --+-- swap64 ---+
 *      mid ---------------------------+                 +-- clmul Q --+-- xor3 --> hi'
 *      hi  ----------------------------------------------------------+
 *
 * Two VPCLMULQDQ, two VPSHUFD and two VPTERNLOGD per lane (the middle term
 * is never split into halves), then the lanes are XOR-folded into one.
 *
 * ======================================================================
 * CTR + GHASH interleave
 * ======================================================================
 * One iteration handles B = 4 vectors = 4*VC_L blocks (16 on zmm, 8 on ymm):
 *
 *   counters c..c+B-1 --AES round 1..nr--> keystream ^ in --> out
 *                        |  between the rounds:
 *                        |  3 clmul x 4 vectors of GHASH input, mid fix-up,
 *                        |  2-step reduction, lane fold
 *
 * The AES rounds of the 4 vectors are independent of the GHASH work, so the
 * out-of-order core overlaps VAESENC (latency bound per lane) with
 * VPCLMULQDQ.  What the loop costs on a core where the two share execution
 * ports (Zen 4: each 512-bit VPCLMULQDQ takes about one VAESENC slot) is
 * mostly the count of carry-less multiplies and shuffles per block, so:
 *
 *  - round keys are broadcast once and live in registers (right-aligned,
 *    see VC_KEYS_LOAD); no round loop shuffles the state around;
 *  - two consecutive batches share one reduction and one lane fold: the
 *    first batch's products (powers K(2B)..K(B+1), S folded into its block
 *    0) are left unreduced in the accumulators, the second batch's
 *    (K(B)..K1) are added, and the sum is reduced once.  A batch pairs
 *    only with a following main-loop batch, so a lone one reduces alone;
 *  - counters are stepped in big-endian form (one VPADDD on byte 15) while
 *    no counter of the batch carries out of its low byte, and in LE form
 *    with byte swaps only for the batch that does (1 in 256/B).
 *
 * Decryption hashes the ciphertext it is decrypting (known up front).
 * Encryption cannot: its ciphertext appears only at the end of the
 * iteration, so it hashes an earlier batch's ciphertext, read back from
 * out (which keeps 4 vector registers free).  Not the previous batch:
 * that one's last rounds and stores are still in flight, and its GHASH
 * would wait on them; two batches back the data is settled in L1 and the
 * multiplies can start with the iteration (about 2% faster on Zen 4).  So
 * long messages lag two batches (the first two are encrypted without
 * hashing), and the batches still pending are hashed before the tail.
 *
 *   enc, lag 2:   AES  b0   b1   b2   b3  ...  bn-1 | pending bn-2, bn-1,
 *                 GHASH  -    -   b0   b1  ...  bn-3 | then the tail
 *
 * Counters: the front-end's counter block is byte-reversed once, so the
 * big-endian inc32 field becomes the low 32-bit word of the lane and a
 * VPADDD adds to it (wrapping mod 2^32 with no carry into the rest, exactly
 * inc32); each counter vector is byte-reversed back before AES.  While the
 * low byte of the batch's last counter stays below 256 the big-endian form
 * is stepped directly instead (inc32 then changes byte 15 only).
 */
/* Deliberately no include guard: one inclusion per tier file. */

#include <string.h>

/* Partial loads/stores of the rare tails of gcm_crypt, ghash and CFB128; a
 * tier whose v_load_part is heavy (VEX) supplies out-of-line versions. */
#ifndef v_load_part_cold
#define v_load_part_cold v_load_part
#define v_store_part_cold v_store_part
#endif

#define VC_FN __attribute__((target(VC_TGT)))
#define VC_NOINL __attribute__((noinline, target(VC_TGT)))
#define VC_L (VC_W / 16)
#define VC_B (4 * VC_L)
#define VC_BATCH (VC_B * 16)
/* Every loop over the 4 vectors of a batch is unrolled so the vectors live
 * in registers: a rolled loop keeps x[] in memory and puts a store-forward
 * in every AES round's dependency chain. */
#define VC_UNROLL _Pragma("GCC unroll 4")
/* VC_OPAQUE(n): n's value unchanged, but unknown to the optimiser from here
 * on.  An unrolled loop that leaves at j == n (a message's last vector)
 * after another one that did the same lets GCC's jump threading connect
 * each exit of the first loop to the matching exit of the second, and it
 * copies the code between them once per exit.  Hiding the count between
 * the loops keeps one copy: -460 B of GCM text on vaes_avx2, -356 B on
 * avx512, -178 B on avx10_256, and level speed (in-process A/B on Zen 4,
 * three processes, 16 B-64 KiB both directions: 0.98-1.01). */
#define VC_OPAQUE(n) __asm__("" : "+r"(n))

#define VC_TABLE_MID 512
/* Powers the main loop needs: two batches share one reduction. */
#define VC_POWERS (2 * VC_B)
/* The one-shot short pass (see gcm_oneshot) takes up to VC_SHORT_V vectors
 * of data (a tier with 32 vector registers can hold 8 ymm keystream
 * vectors; the default is one batch), and needs a power for every block of
 * AAD + data + length block: 32 powers once the data can be 16 blocks. */
#ifndef VC_SHORT_V
#define VC_SHORT_V 4
#endif
/* VC_LAST_APART (a tier whose partial loads and stores are long code: VEX):
 * the one-shot pass loads and stores its last vector, the only one that
 * can be partial, once outside its unrolled loops, instead of testing
 * every vector for a partial length.  On vaes_avx2 (with its partial
 * loads and stores split at 16 bytes) this is 1.5 KiB less code and, in
 * in-process A/B on Zen 4, decrypt +12 % at 16 B and +8 % at 240 B,
 * encrypt +4 % at 240 B, for -1 to -4 % encrypt at 32-100 B.  On the EVEX
 * tiers, whose partial operations are one masked instruction, it measured
 * -2 to -5 % at 16-32 B decrypt, so they keep the per-vector test. */
/* VC_PASS_FIN (default 1): the pass's long route lets gcm_crypt finish
 * the tag of an encryption it takes whole (see gcm_crypt's fin).  avx512
 * (no gcm_whole) takes those messages here: +6 to +7 % at 768-2048 B
 * (in-process A/B on Zen 4).  On the VC_DBL tiers gcm_whole takes them
 * first and the route is a fallback that keeps the pass complete by
 * itself; avx10_256 keeps it because its pass without it measured 18 %
 * slower at 384 B encrypt and 2-3 % at 512-1024 B (register allocation of
 * the whole function, not this code), vaes_avx2 leaves it out for its
 * code budget (level from 256 B up, -3 to -6 % at 16-64 B encrypt against
 * keeping it).
 *
 * VC_PASS_FIN 2 (avx512): decryptions too.  gcm_crypt computes E(J0)
 * beside its first batch and ends with the length block, and the pass only
 * compares the tag; before, the pass ran after the loop with its own key
 * loads, E(J0) (a serial chain of AES rounds) and one more product and
 * reduction.  The loop has written the plaintext by then, as on the
 * long route before (and in gcm_whole): a mismatch zeroes the output.
 * In-process A/B on a Sapphire Rapids class Xeon (three processes, 15
 * pairs): AES-256 decrypt +8.0 to +8.4 % at 768 B, +5.1 to +5.7 % at
 * 1024 B, +2.7 to +3.2 % at 2048 B, +1.3 to +1.4 % at 4096 B; AES-128
 * +4.5 to +4.7 %, +4.3 to +4.5 %, +5.0 to +5.3 %, +1.1 to +4.1 %; other
 * points of both directions level (-0.4 to +0.9 %); +64 B.  Not on
 * avx10_256, whose decryptions of this length are gcm_whole's: there the
 * dead branch moved its pass's registers (encrypt -1.4 to -1.5 % at
 * 128 B, -0.5 to -4.7 % at 256 B, three processes).  Not measured on
 * Zen 4, where gcm_whole's decryption through fin measured level on
 * vaes_avx2 and 3-5 % slower on avx10_256 at 384-1024 B (see gcm_whole):
 * an A/B there of VC_PASS_FIN 1 against 2 on avx512 at 768 B-4 KiB
 * decides whether it stays. */
#ifndef VC_PASS_FIN
#define VC_PASS_FIN 1
#endif
/* VC_PASS_RM (default 0): the pass runs the keystream of a message of at
 * least VC_RM_MIN of its 8 vectors round by round (every vector's round i
 * before any vector's round i + 1) instead of vector by vector, and a
 * decryption hashes its first group's whole vectors between those rounds.
 * Written vector by vector, the code holds 8 chains of 14 dependent
 * VAESENCs one after the other: the scheduler fills with one chain's
 * waiting rounds, fewer chains run at once than the AES unit could take,
 * and the GHASH multiplies after them in program order wait for them.
 * Round by round, 8 independent VAESENCs issue per round (two per cycle,
 * four cycles: the round latency), and the multiplies fill the gaps.
 * Below VC_RM_MIN vectors the pass keeps the vector-by-vector code: a
 * round-major run over all 8 vectors spends the AES unit on keystream
 * nobody uses (16 B decrypt -13 to -31 %), and testing the vector count
 * in every round cost 2-8 % at 16-64 B.  In-process A/B on Zen 4
 * (AES-256, three processes, median of alternated pairs) on avx10_256:
 * +10 % encrypt and +12 % decrypt at 256 B, +6 / +10 % at 224 B, +4 / +3 %
 * at 192 B, level at 16-160 B and above 256 B (VC_RM_MIN 6; with 5, 160 B
 * encrypt measured -4 %).
 *
 * VC_RM_HASH 0 (vaes_avx2): round by round without the multiplies between
 * the rounds.  With 16 registers, 8 of them the vectors, the multiplies
 * there measured no better than after the rounds (+5 % decrypt at 256 B
 * either way) and their ~770 B do not fit the tier's code budget.
 * vaes_avx2 against vector by vector (same A/B): +5 % encrypt and +3 %
 * decrypt at 256 B, -4 / -5 % at 192 B (two of the 8 vectors unused;
 * VC_RM_MIN 7 there measured +5 % encrypt, -4 % decrypt), +12 to +16 %
 * encrypt at 16-64 B (register allocation of the whole function: that
 * code did not change), level elsewhere.
 *
 * A two-group tier (avx512: 8 zmm vectors, two hash groups of 4) hashes
 * both groups' whole vectors between the rounds, group 1's into their own
 * accumulators (a1, see the pass), which take [S0 | len] once group 0 is
 * reduced.  Group 1 was first hashed after the rounds, its products
 * chained behind S0; against that (in-process A/B, Sapphire Rapids class,
 * AES-256, three processes, 9 pairs): encryption, whose hash loop takes
 * group 1 the same way, +2.1 to +6.3 % at 300-512 B (400 B -0.7 to +1 %),
 * decryption -1.1 to +2.1 % (level); a1 alone, group 1 still hashed after
 * the rounds, measured decryption -0.6 to -2.7 %.  +424 B of GCM text.
 * VC_RM_ENC 0 keeps encryption vector by vector there: round by round it
 * measured -9 to -10 % at 400-448 B on Zen 4.
 *
 * VC_RM_ENC 2 (avx10_256) leaves an encryption's order to the key's
 * round_major, which vc_gcm_key_new sets on AMD only: the A/B above was
 * Zen 4's, and on a Sapphire Rapids class Xeon the same round-major
 * encryption is what cost avx10_256 13.9 % at 192 B, 8.6 % at 224 B and
 * 4.5 % at 256 B (433fa7d against its parent).  An encryption cannot hash
 * a vector before its AES ends.  Vector by vector, the first vectors end
 * early and their multiplies run beside the later vectors' rounds; round
 * by round, every vector ends at once and all the multiplies come after.
 * Which wins depends on the core, and we have measured one core of each
 * vendor.  In-process A/B on the Sapphire Rapids class host (AES-256,
 * three processes, 15 pairs) against round by round for every vendor:
 * vector by vector there measured +22.5 to +23.5 % at 192 B, +16.6 to
 * +18.3 % at 224 B, +12.6 to +12.9 % at 256 B and +8.5 to +8.7 % at 480 B
 * (a 224 B tail) encrypt (AES-128, one process: +6.4 to +19.4 %);
 * decryption at 16-160 B -0 to -1.9 % and avx512's 16 B decrypt
 * (avx10_256's pass) -2 %, every other point of the three paths -1.0 to
 * +1.8 % (avx10_256 160 B encrypt +1.3 to +1.8 %).  The AMD order, timed on the same host under the
 * zen4 profile (`sdematrix exec --cpu zen4 -- python -m vaescrypt.bench_ab
 * ...`), measured -0.5 to -2.2 % at 192-480 B encrypt: the encrypt branch
 * now also compiles all 8 vectors vector by vector (+354 B). */
#ifndef VC_PASS_RM
#define VC_PASS_RM 0
#endif
#ifndef VC_RM_MIN
#define VC_RM_MIN 6
#endif
#ifndef VC_RM_HASH
#define VC_RM_HASH 1
#endif
#ifndef VC_RM_ENC
#define VC_RM_ENC 1
#endif
#ifndef VC_LAST_APART
#define VC_LAST_APART 0
#endif
#define VC_SHORT_BYTES (VC_SHORT_V * VC_W)
#define VC_TABLE_POWERS (VC_SHORT_V * VC_L >= 16 ? 32 : VC_POWERS)
/* The whole one-pass route takes up to VC_OS_V vectors: one hash group of
 * VC_SHORT_V, or two (a tier with registers for twice the keystream; the
 * groups are chained by Horner's rule, see gcm_oneshot). */
#ifndef VC_OS_V
#define VC_OS_V VC_SHORT_V
#endif
static_assert(VC_OS_V == VC_SHORT_V || VC_OS_V == 2 * VC_SHORT_V, "one or two hash groups");
#define VC_OS_BYTES (VC_OS_V * VC_W)
#define VC_STR_(x) #x
#define VC_XSTR_(x) VC_STR_(x)
#define VC_UNROLL_SHORT _Pragma(VC_XSTR_(GCC unroll VC_OS_V))
/* Table entry of power Ki, 1 <= i <= 32 (see the key-power table above).
 * Entries of consecutive powers descend in memory, so a vector at
 * VC_ENTRY(t, i + VC_L - 1) holds K(i + VC_L - 1), ..., K(i) in lanes
 * 0..VC_L-1, and one at VC_ENTRY(t, n) the powers a batch of n takes. */
#define VC_ENTRY(table, i) ((table) + (32 - (i)) * 16)
/* A vector load at K1 (or at Kn, n < L) runs up to L-1 entries past K1. */
static_assert(2 * VC_TABLE_MID + 48 <= VC_GHASH_TABLE_BYTES, "GHASH power table does not fit");

/* Per-lane byte reversal (block <-> reflected GHASH / LE counter form). */
#define v_bswap_mask() v_bcast(vc_bswap_bytes)
static const uint8_t vc_bswap_bytes[16] = {15, 14, 13, 12, 11, 10, 9, 8,
                                           7,  6,  5,  4,  3,  2,  1, 0};
/* Low 64 bits of p(x) above x^64 (see Reduction above), in every qword. */
static const uint8_t vc_q_bytes[16] = {0, 0, 0, 0, 0, 0, 0, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0xc2};
/* 1 in the low 32-bit word of every lane: inc32 in LE counter form. */
#define v_ctr_one() v_bcast(vc_one_bytes)
static const uint8_t vc_one_bytes[16] = {1};
/* mulX's conditional xor: p(x) without the x^128 term. */
static const uint8_t vc_p_bytes[16] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xc2};

/* ---------------------------------------------------------------- GHASH -- */

/* Per-lane T x^-128 mod p for the 256-bit lane products lo + mid x^64 +
 * hi x^128 (mid is the true middle term; see Reduction above). */
static inline VC_FN vc_v VC_NAME(reduce_q)(vc_v lo, vc_v mid, vc_v hi, vc_v q)
{
    mid = v_xor3(mid, v_swap64(lo), v_clmul(lo, q, 0x00));
    return v_xor3(hi, v_swap64(mid), v_clmul(mid, q, 0x00));
}

/* q = vc_q_bytes in every lane: GCC builds it from an immediate (2-4
 * instructions: movabs, vmovq, vpunpcklqdq, vinserti128 on the VEX tier)
 * where it is used. */
static inline VC_FN vc_v VC_NAME(reduce)(vc_v lo, vc_v mid, vc_v hi)
{
    return VC_NAME(reduce_q)(lo, mid, hi, v_bcast(vc_q_bytes));
}

/* q for a loop's reductions, loaded from memory: the empty asm hides the
 * constant from GCC, so that a loop short of registers reloads it (one
 * load, or a memory operand) instead of rebuilding it at every step.  In
 * gcm_crypt's main loop only, in-process A/B (Sapphire Rapids class,
 * AES-256, three processes, 9 pairs): vaes_avx2 +1.1 to +1.5 % at 4-64 KiB
 * both directions, 512 B encrypt -0.5 to -1.4 %, 1420 B encrypt -0.1 to
 * -1.5 %; avx10_256 decrypt +0.6 to +0.7 % at 4-64 KiB; avx512 level.
 * Used in every reduction, it cost vaes_avx2's pass 1.2 to 2.9 % at
 * 16-64 B. */
static inline VC_FN vc_v VC_NAME(q_mem)(void)
{
    const uint8_t *qp = vc_q_bytes;
    __asm__("" : "+r"(qp));
    return v_bcast(qp);
}

/* One batch: S <- sum over blocks j < n of dot(d_j (+S on block 0), K(n-j)).
 * d[] holds byte-reversed blocks, lanes past n are zero (their products are
 * zero; the key loads stay inside the table, see its zero tail).  S is
 * a vector with only lane 0 set.  Split in two (mul: products summed into
 * an accumulator, finish: fix-up, reduction, lane fold) so the CTR loop can
 * put AES rounds between them and sum two batches before one reduction. */
typedef struct {
    vc_v lo, kara, hi;
} VC_NAME(acc);

/* VC_ACC_PIN(acc): an empty asm that takes and gives back the three
 * accumulators in vector registers, so each product is XORed into them
 * where it is made.  Without it GCC's reassociation turns the running
 * sums of a main-loop step into one XOR tree at the end of the step, and
 * all 24 products of the 8-vector step (12 of the 4-vector one) stay live
 * until then: with 8 keystream vectors and the round keys that no longer
 * fits the register file, and vaes_avx2's step stored and reloaded 16 of
 * them, avx10_256's 12 and avx512's 8.  Used by mulp and mul2, in the
 * main loop's interleaved steps (see VC_MUL_EVEN) and encryption's
 * pending pair; the one-shot pass keeps plain mul (pinned there it
 * measured -2 to -6 % at 16-384 B).  In-process
 * A/B on a Sapphire Rapids class Xeon (AES-256, three processes): vaes_avx2
 * +4 % at 512 B to +12-15 % at 4-64 KiB, avx10_256 +1 to +4.5 % from
 * 512 B, avx512 +2.5 to +6.6 % from 768 B, both directions; shorter
 * messages level.  "+x" on VEX (xmm0-15), "+v" on EVEX tiers. */
#ifndef VC_ACC_PIN
#define VC_ACC_PIN(acc) ((void)0)
#endif

/* The three Karatsuba products of d and the powers k (their halves' sums
 * in km), not yet summed. */
static inline VC_FN VC_NAME(acc) VC_NAME(prod_k)(vc_v d, vc_v k, vc_v km)
{
    const vc_v dm = v_xor(d, v_swap64(d));
    const VC_NAME(acc) p = {v_clmul(d, k, 0x00), v_clmul(dm, km, 0x00), v_clmul(d, k, 0x11)};
    return p;
}

/* The same with the powers at kp in the table. */
static inline VC_FN VC_NAME(acc) VC_NAME(prod)(vc_v d, const uint8_t *kp)
{
    return VC_NAME(prod_k)(d, v_loadu(kp), v_loadu(kp + VC_TABLE_MID));
}

/* The products of [s | len] and [K(n) at kn | K1]: s (lane 0 only) and
 * the length block (multiplication form) in one vector, when the length
 * block is the last of the run that s starts (see the one-shot pass). */
static inline VC_FN VC_NAME(acc) VC_NAME(prod_len)(vc_v s, __m128i len, const uint8_t *kn,
                                                   const vc_ghash_key *g)
{
    const uint8_t *k1 = VC_ENTRY(g->table, 1);
    const __m128i k1v = _mm_loadu_si128((const __m128i *)(const void *)k1);
    const __m128i k1m = _mm_loadu_si128((const __m128i *)(const void *)(k1 + VC_TABLE_MID));
    return VC_NAME(prod_k)(v_lane1_ins(s, len), v_lane1_ins(v_lane0_load(kn), k1v),
                           v_lane1_ins(v_lane0_load(kn + VC_TABLE_MID), k1m));
}

/* Products p summed into a. */
static inline VC_FN void VC_NAME(acc_add)(VC_NAME(acc) *a, const VC_NAME(acc) p)
{
    a->lo = v_xor(a->lo, p.lo);
    a->hi = v_xor(a->hi, p.hi);
    a->kara = v_xor(a->kara, p.kara);
}

/* prod summed into a (first: a starts as the products). */
static inline VC_FN void VC_NAME(mul)(VC_NAME(acc) *a, vc_v d, const uint8_t *kp, int first)
{
    const VC_NAME(acc) p = VC_NAME(prod)(d, kp);
    if (first)
        *a = p;
    else
        VC_NAME(acc_add)(a, p);
}

/* mul, then the accumulators pinned (see VC_ACC_PIN): the main loop's. */
static inline VC_FN void VC_NAME(mulp)(VC_NAME(acc) *a, vc_v d, const uint8_t *kp, int first)
{
    VC_NAME(mul)(a, d, kp, first);
    VC_ACC_PIN(*a);
}

/* The products of d and those held in *h (prod of the previous vector)
 * summed into a with one three-way XOR each, then pinned. */
static inline VC_FN void VC_NAME(mul2)(VC_NAME(acc) *a, const VC_NAME(acc) *h, vc_v d,
                                        const uint8_t *kp, int first)
{
    const VC_NAME(acc) q = VC_NAME(prod)(d, kp);
    if (first) {
        a->lo = v_xor(h->lo, q.lo);
        a->hi = v_xor(h->hi, q.hi);
        a->kara = v_xor(h->kara, q.kara);
    } else {
        a->lo = v_xor3(a->lo, h->lo, q.lo);
        a->hi = v_xor3(a->hi, h->hi, q.hi);
        a->kara = v_xor3(a->kara, h->kara, q.kara);
    }
    VC_ACC_PIN(*a);
}

/* The main loop's products two vectors at a time (VC_ACC_PAIRS, the EVEX
 * tiers, whose v_xor3 is one VPTERNLOGD): the even vector's products are
 * held (VC_MUL_EVEN) and summed with the odd one's (VC_MUL_ODD), three
 * XOR uops per two vectors instead of six.  first: the pair starts the
 * sum (the even vector's first flag; ignored by VC_MUL_ODD without pairs).
 * Why it helps is our reading, not a measurement (no PMU on the VM): on
 * Intel a 512-bit operation issues only on ports 0 and 5 and VAESENC zmm
 * on port 0 alone (Intel's port maps), so an XOR put on port 0 can take
 * an AES slot; but removing other uops of the step (the Karatsuba data
 * shuffle, the byte swaps) measured level.  In-process A/B on a Sapphire
 * Rapids class Xeon (AES-256, three processes): avx512 +3 to +6.5 % from
 * 1 KiB, avx10_256 +2 to +4 % from 1 KiB (-1.8 % at 512 B decrypt),
 * shorter messages level.  vaes_avx2's v_xor3 is two VPXORs: nothing to save there, and
 * the held products would cost it registers it does not have. */
#ifndef VC_ACC_PAIRS
#define VC_ACC_PAIRS 0
#endif
#if VC_ACC_PAIRS
#define VC_MUL_EVEN(d, kp, first) (held = VC_NAME(prod)((d), (kp)))
#define VC_MUL_ODD(d, kp, first) VC_NAME(mul2)(&a, &held, (d), (kp), (first))
#else
#define VC_MUL_EVEN(d, kp, first) VC_NAME(mulp)(&a, (d), (kp), (first))
#define VC_MUL_ODD(d, kp, first) VC_NAME(mulp)(&a, (d), (kp), 0)
#endif

static inline VC_FN vc_v VC_NAME(finish_q)(const VC_NAME(acc) *a, vc_v q)
{
    const vc_v mid = v_xor3(a->kara, a->lo, a->hi); /* Karatsuba fix-up */
    return v_hxor(VC_NAME(reduce_q)(a->lo, mid, a->hi, q));
}

static inline VC_FN vc_v VC_NAME(finish)(const VC_NAME(acc) *a)
{
    return VC_NAME(finish_q)(a, v_bcast(vc_q_bytes));
}

/* d (lane 0 only) times K1, added to a: the length block's product.
 * prod_k's three products, written out in this order: through prod_k
 * (the data shuffle first) GCC allocated vaes_avx2's one-shot pass
 * differently and it grew by 200 B. */
static inline VC_FN void VC_NAME(mul_k1)(VC_NAME(acc) *a, vc_v d, const vc_ghash_key *g)
{
    const vc_v k1 = v_lane0_load(VC_ENTRY(g->table, 1));
    const vc_v k1m = v_lane0_load(VC_ENTRY(g->table, 1) + VC_TABLE_MID);
    a->lo = v_xor(a->lo, v_clmul(d, k1, 0x00));
    a->hi = v_xor(a->hi, v_clmul(d, k1, 0x11));
    a->kara = v_xor(a->kara, v_clmul(v_xor(d, v_swap64(d)), k1m, 0x00));
}

/* Out of line (one copy serves every call site); the vectors are passed
 * by value, in registers, not through a stack array. */
static VC_NOINL vc_v VC_NAME(batch4)(const vc_ghash_key *g, vc_v S, vc_v d0, vc_v d1, vc_v d2,
                                     vc_v d3, size_t n)
{
    const vc_v d[4] = {d0, d1, d2, d3};
    const uint8_t *kp = VC_ENTRY(g->table, (int)n);
    VC_NAME(acc) a;
    /* Vectors holding no block are skipped, not multiplied as zeros: a
     * short batch (AAD, the length block, a tail) is latency bound and its
     * chain starts only when the last product is out. */
    VC_NAME(mul)(&a, v_xor(d[0], S), kp, 1);
    if (n > VC_L)
        VC_NAME(mul)(&a, d[1], kp + VC_W, 0);
    if (n > 2 * VC_L)
        VC_NAME(mul)(&a, d[2], kp + 2 * VC_W, 0);
    if (n > 3 * VC_L)
        VC_NAME(mul)(&a, d[3], kp + 3 * VC_W, 0);
    if (n == 1) { /* lanes 1.. hold zero products: no lane fold needed */
        const vc_v mid = v_xor3(a.kara, a.lo, a.hi);
        return VC_NAME(reduce)(a.lo, mid, a.hi);
    }
    return VC_NAME(finish)(&a);
}

/* dot(a, b) lane by lane, schoolbook (four products): key set-up only. */
static inline VC_FN vc_v VC_NAME(dot)(vc_v a, vc_v b)
{
    const vc_v mid = v_xor(v_clmul(a, b, 0x01), v_clmul(a, b, 0x10));
    return VC_NAME(reduce)(v_clmul(a, b, 0x00), mid, v_clmul(a, b, 0x11));
}


/* Fills the table with K1..K(VC_TABLE_POWERS) and their Karatsuba halves.
 *
 * A serial chain Ki = dot(Ki-1, K1) would be 31 dependent multiplies for the
 * zmm table (each a multiply plus a two-step reduction: the latency chain is
 * what key set-up costs).  Instead only K1..K(L) (L = lanes per vector) are
 * made one by one; then a whole vector of L consecutive powers times K(L)
 * broadcast gives the next L:
 *
 *   [K(L) .. K1]  x K(L) -> [K(2L) .. K(L+1)]  x K(L) -> [K(3L) .. K(2L+1)] ...
 *
 * 3 + 7 dependent steps for zmm (32 powers) instead of 31; 1 + 15 for ymm. */
static VC_FN void VC_NAME(ghash_init)(vc_ghash_key *g)
{
    /* K1 = mulX(rev(H)): shift the 128-bit lane left by one; the carry out
     * of bit 127 selects (without a branch) the xor with p's low bits.
     * Lanes above 0 stay zero throughout the serial part. */
    const vc_v h = v_shuf8(v_lane0_load(g->h), v_bswap_mask());
    const vc_v sh = v_xor(v_slli64(h, 1), v_bslli8(v_srli64(h, 63)));
    const vc_v carry = v_srai32(v_shufd(h, 0xff), 31);
    const vc_v k1 = v_xor(sh, v_and(carry, v_bcast(vc_p_bytes)));
    vc_v k = k1;
    for (int i = 1; i <= VC_L; i++) {
        if (i > 1)
            k = VC_NAME(dot)(k, k1);
        v_lane0_store(VC_ENTRY(g->table, i), k);
    }
    /* Entries K(L)..K1 are adjacent: one load gathers them into lanes. */
    vc_v p = v_loadu(VC_ENTRY(g->table, VC_L));
    v_storeu(VC_ENTRY(g->table, VC_L) + VC_TABLE_MID, v_xor(p, v_swap64(p)));
    const vc_v kl = v_bcast(VC_ENTRY(g->table, VC_L));
    for (int i = VC_L + 1; i <= VC_TABLE_POWERS; i += VC_L) {
        p = VC_NAME(dot)(p, kl);
        uint8_t *e = VC_ENTRY(g->table, i + VC_L - 1);
        v_storeu(e, p);
        v_storeu(e + VC_TABLE_MID, v_xor(p, v_swap64(p)));
    }
}

#define VC_BATCH4(g, S, d, n) VC_NAME(batch4)((g), (S), (d)[0], (d)[1], (d)[2], (d)[3], (n))

/* Loads the r (<= VC_BATCH) bytes at p into d[0..3], zero filled. */
static inline VC_FN void VC_NAME(load_tail)(vc_v d[4], const uint8_t *p, size_t r)
{
    VC_UNROLL
    for (size_t j = 0; j < 4; j++) {
        const size_t off = j * VC_W;
        d[j] = off >= r ? v_zero() : r - off >= VC_W ? v_loadu(p + off) : v_load_part_cold(p + off, r - off);
    }
}

/* S (reflected, lane 0) after hashing len bytes of in, the last partial
 * block zero-padded. */
static inline VC_FN vc_v VC_NAME(ghash_s)(const vc_ghash_key *g, vc_v S, const uint8_t *in,
                                          size_t len)
{
    const vc_v bs = v_bswap_mask();
    vc_v d[4];
    for (; len >= VC_BATCH; len -= VC_BATCH, in += VC_BATCH) {
        VC_UNROLL
        for (int j = 0; j < 4; j++)
            d[j] = v_shuf8(v_loadu(in + j * VC_W), bs);
        S = VC_BATCH4(g, S, d, VC_B);
    }
    if (len) {
        VC_NAME(load_tail)(d, in, len);
        VC_UNROLL
        for (int j = 0; j < 4; j++)
            d[j] = v_shuf8(d[j], bs);
        S = VC_BATCH4(g, S, d, (len + 15) / 16);
    }
    return S;
}

/* Out of line: gcm_whole calls it too (one copy of the AAD hash). */
static VC_NOINL void VC_NAME(ghash)(const vc_ghash_key *g, uint8_t X[16], const uint8_t *in,
                                    size_t len)
{
    const vc_v bs = v_bswap_mask();
    vc_v S = VC_NAME(ghash_s)(g, v_shuf8(v_lane0_load(X), bs), in, len);
    v_lane0_store(X, v_shuf8(S, bs));
}

/* X = GHASH of a one-shot message's AAD (1 byte or more, X zero on entry).
 * One block (TLS, ESP, the common AAD) is A H inline, instead of the
 * general hash's calls: +4 to +5 % at 384-512 B decrypt on both ymm tiers,
 * +4 % at 512 B encrypt on vaes_avx2 (gcm_whole, Zen 4). */
static inline VC_FN void VC_NAME(aad_hash)(const vc_ghash_key *g, uint8_t X[16],
                                           const uint8_t *aad, size_t aad_len)
{
    if (aad_len > 16) {
        VC_NAME(ghash)(g, X, aad, aad_len);
        return;
    }
    const vc_v bs = v_bswap_mask();
    VC_NAME(acc) a0 = {v_zero(), v_zero(), v_zero()};
    VC_NAME(mul_k1)(&a0, v_shuf8(v_load_part(aad, aad_len), bs), g);
    v_lane0_store(X, v_shuf8(VC_NAME(finish)(&a0), bs));
}

/* ---------------------------------------------------------------- AES -- */

/* E(J0) with the round keys straight from the schedule (memory operands
 * of the xmm VAESENC), for code that holds no broadcast keys.  Unrolled: a
 * loop over the rounds added 3 instructions per round to a serial chain. */
static inline VC_FN __m128i VC_NAME(ej0_sched)(const vc_aes_key *k, __m128i j0)
{
    const unsigned nr = k->rounds;
#define VC_RK(i) _mm_load_si128((const __m128i *)(const void *)k->rk[i])
    __m128i e = _mm_xor_si128(j0, VC_RK(0));
    if (nr > 10) {
        e = _mm_aesenc_si128(e, VC_RK(1));
        e = _mm_aesenc_si128(e, VC_RK(2));
        if (nr > 12) {
            e = _mm_aesenc_si128(e, VC_RK(3));
            e = _mm_aesenc_si128(e, VC_RK(4));
        }
    }
#undef VC_RK
    const uint8_t *kq = k->rk[nr - 9];
#define VC_KQ(i) _mm_load_si128((const __m128i *)(const void *)(kq + 16 * (i)))
    e = _mm_aesenc_si128(e, VC_KQ(0));
    e = _mm_aesenc_si128(e, VC_KQ(1));
    e = _mm_aesenc_si128(e, VC_KQ(2));
    e = _mm_aesenc_si128(e, VC_KQ(3));
    e = _mm_aesenc_si128(e, VC_KQ(4));
    e = _mm_aesenc_si128(e, VC_KQ(5));
    e = _mm_aesenc_si128(e, VC_KQ(6));
    e = _mm_aesenc_si128(e, VC_KQ(7));
    e = _mm_aesenc_si128(e, VC_KQ(8));
    return _mm_aesenclast_si128(e, VC_KQ(9));
#undef VC_KQ
}

/* VC_KEYS_AT_USE (default 0; vaes_avx2): GCM's main loop (gcm_crypt), the
 * pass and CFB128 decryption broadcast each round key from the schedule
 * where a round uses it (key_at: one load per round of the 8-vector step,
 * of the pass's round-major code and of CFB's 4-vector rounds, one per
 * round and vector of the pass's vector-by-vector code) and GCM computes
 * E(J0) with ej0_sched, instead of broadcasting all 15 keys at their start
 * (VC_KEYS_LOAD).  With 16 ymm registers, 8 of them keystream,
 * GCC stored 11 of those broadcasts to the stack and reloaded them in every
 * round anyway: 11 stores per call, and 9 reloads for E(J0) alone.  The
 * names are macros (VC_KEYS_LOAD's at-use form) so that the round macros serve
 * both forms; a value used by several vectors is loaded once into a local
 * (VC_R, VC_R8, the step's last round, the pass's klv).  In-process A/B
 * (Sapphire Rapids class, AES-256, three processes, 9 pairs), the pass:
 * +7.8 to +8.3 % at 16 B, +2.9 to +6 % at 64 B, +2 to +5.6 % at 128-200 B,
 * +0.5 to +1.7 % at 256 B, +5.6 to +5.8 % at 300 B encrypt (its 44-byte
 * tail); then gcm_crypt: +1 to +4.4 % at 300-4096 B both directions, level
 * at 16-64 KiB (-0.5 to +0.6 %), 261 B less code.  (An earlier try in
 * gcm_crypt with plain intrinsic broadcasts, which the compiler may merge
 * and move, measured -2.3 to -4 % at 1300 B decrypt; this form +1.4 to
 * +2.6 % there.)  CFB128 decryption (same A/B, 15 pairs): +0.9 to +5.1 %
 * at 16-32 B, -0.7 to -1.3 % at 64 B, level at 128 B, +1.2 to +3.3 % at
 * 256-1024 B, level from 4 KiB.
 * The EVEX tiers hold every key in their 32 registers and keep
 * VC_KEYS_LOAD (E(J0) from the schedule there measured -2 to -9 % at
 * 16-256 B). */
#ifndef VC_KEYS_AT_USE
#define VC_KEYS_AT_USE 0
#endif
#if VC_KEYS_AT_USE
/* A round key broadcast from the schedule where it is used: the asm is
 * volatile so that the compiler neither merges these loads into one value
 * held (and spilled) across the pass nor moves them to its start.  "x":
 * the VEX tier's registers. */
static inline VC_FN vc_v VC_NAME(key_at)(const uint8_t *p)
{
    vc_v r;
    __asm__ volatile("vbroadcasti128 %1, %0" : "=x"(r) : "m"(*(const uint8_t(*)[16])p));
    return r;
}
#endif

/* The round keys of GCM's main loop and CFB128 decryption, broadcast once and kept in
 * registers, "right-aligned" so that the last nine VAESENC rounds and the
 * VAESENCLAST use the same registers for every key size:
 *
 *   AES-128  k0 |                 m0 .. m8 | kl     (rk[1..9], rk[10])
 *   AES-192  k0 | e0 e1           m0 .. m8 | kl     (rk[3..11], rk[12])
 *   AES-256  k0 | e0 e1 e2 e3     m0 .. m8 | kl     (rk[5..13], rk[14])
 *
 * e0..e3 = rk[1..4] are the extra leading rounds of the longer keys (a
 * predictable branch on nr).  With constant indices everywhere the
 * compiler keeps every key in its own register: no round reloads a key and
 * no loop over rounds shuffles the state between registers.  m0..kl are
 * read at constant offsets from one pointer, rk[nr - 9]: written as
 * rk[nr - i], GCC computed each address from nr again (two instructions
 * per key, in every function that loads the keys).  In-process A/B
 * (Sapphire Rapids class, AES-256, three processes, 9 pairs): +2.5 to
 * +5.2 % at 16-64 B on every wide path, avx512 +2 to +3.5 % at 256 B and
 * +2 to +3.1 % at 512 B decrypt, vaes_avx2 +1.8 to +2.6 % at 1420 B
 * decrypt; vaes_avx2 256 B encrypt -1.0 % and avx512 512 B encrypt -0.6
 * to -0.9 %; 95-185 B less GCM text per tier. */
#if VC_KEYS_AT_USE
/* The same names as loads at each use (see VC_KEYS_AT_USE): VC_KEYS_LOAD
 * only keeps the schedule's two base pointers; the names are undefined at
 * the end of this file, so that the tier's own code does not see them. */
#define VC_KEYS_LOAD(k)                                                                            \
    const vc_aes_key *const ks_ = (k);                                                             \
    const uint8_t *const km_ = ks_->rk[nr - 9]
#define k0 VC_NAME(key_at)(ks_->rk[0])
#define e0 VC_NAME(key_at)(ks_->rk[1])
#define e1 VC_NAME(key_at)(ks_->rk[2])
#define e2 VC_NAME(key_at)(ks_->rk[3])
#define e3 VC_NAME(key_at)(ks_->rk[4])
#define m0 VC_NAME(key_at)(km_)
#define m1 VC_NAME(key_at)(km_ + 16)
#define m2 VC_NAME(key_at)(km_ + 32)
#define m3 VC_NAME(key_at)(km_ + 48)
#define m4 VC_NAME(key_at)(km_ + 64)
#define m5 VC_NAME(key_at)(km_ + 80)
#define m6 VC_NAME(key_at)(km_ + 96)
#define m7 VC_NAME(key_at)(km_ + 112)
#define m8 VC_NAME(key_at)(km_ + 128)
#define kl VC_NAME(key_at)(km_ + 144)
#else
#define VC_KEYS_LOAD(k)                                                                            \
    const vc_v k0 = v_bcast((k)->rk[0]), e0 = v_bcast((k)->rk[1]), e1 = v_bcast((k)->rk[2]),       \
               e2 = v_bcast((k)->rk[3]), e3 = v_bcast((k)->rk[4]);                                 \
    const uint8_t *const km_ = (k)->rk[nr - 9];                                                    \
    const vc_v m0 = v_bcast(km_), m1 = v_bcast(km_ + 16), m2 = v_bcast(km_ + 32),                  \
               m3 = v_bcast(km_ + 48), m4 = v_bcast(km_ + 64), m5 = v_bcast(km_ + 80),             \
               m6 = v_bcast(km_ + 96), m7 = v_bcast(km_ + 112), m8 = v_bcast(km_ + 128),           \
               kl = v_bcast(km_ + 144)
#endif

/* One AES round on the 4 state vectors. */
#define VC_R(kr)                                                                                   \
    do {                                                                                           \
        const vc_v kv_ = (kr);                                                                     \
        x[0] = v_aesenc(x[0], kv_);                                                                \
        x[1] = v_aesenc(x[1], kv_);                                                                \
        x[2] = v_aesenc(x[2], kv_);                                                                \
        x[3] = v_aesenc(x[3], kv_);                                                                \
    } while (0)

/* Whitening and the extra rounds of AES-192/256 (see VC_KEYS_LOAD). */
#define VC_R_HEAD()                                                                                \
    do {                                                                                           \
        const vc_v k0_ = k0;                                                                       \
        VC_UNROLL for (int j_ = 0; j_ < 4; j_++) x[j_] = v_xor(x[j_], k0_);                        \
        if (nr > 10) {                                                                             \
            VC_R(e0);                                                                              \
            VC_R(e1);                                                                              \
            if (nr > 12) {                                                                         \
                VC_R(e2);                                                                          \
                VC_R(e3);                                                                          \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* VC_DBL (the two ymm tiers): the interleaved main loop runs 8 vectors (two
 * batches, 16 blocks) per step instead of 4.  A ymm VAESENC issues two
 * per cycle on current cores with a latency of 3-4 cycles, so 4
 * independent vectors leave the AES unit partly idle while each batch's
 * 14-round chain runs; 8 vectors cover more of the latency.  The step's 16
 * GHASH blocks take powers K16..K1 and one reduction, so the single-batch
 * interleaved step and its pairing are not needed (a lone remaining batch
 * goes through the plain path).  Measured (in-process A/B, AES-256): on
 * Intel Sapphire Rapids class vaes_avx2 +4 to +8 % at 512 B-64 KiB, both
 * directions; on Zen 4, once the step was straight-line code (see
 * VC_DBL_STEP), avx10_256 +4 to +7 % at 512 B-64 KiB (zmm, 32 blocks per
 * step, measured -5 to +5 % and does not fit the code budget: avx512
 * keeps the 4-vector step).
 *
 * The step's products are Karatsuba's three per vector (see Karatsuba
 * above), not schoolbook's four.  On Zen 4 a VPCLMULQDQ issues once per
 * two cycles at every width while a ymm VAESENC issues twice per cycle
 * (vaescrypt.bench's issue rates: 1.8 x 10^9 VPCLMULQDQ/s at xmm, ymm and
 * zmm; 7.3 x 10^9 ymm VAESENC/s), so on ymm the multiplies cost about as
 * much issue time per block as the 14 AES rounds and the fourth product
 * is not free.  In-process A/B on Zen 4 (AES-256, 60 alternated pairs,
 * median ratio): Karatsuba +1 to +4 % at 1420 B-64 KiB both directions,
 * level at <= 512 B.  (On Sapphire Rapids class schoolbook measured 3-5 %
 * faster for decryption; these tiers run on Zen 3/4 and Intel parts,
 * where Karatsuba is the documented choice for VAES without AVX-512.) */
#ifdef VC_DBL
#define VC_DBL_ON 1
#define VC_UNROLL8 _Pragma("GCC unroll 8")
#define VC_R8(kr)                                                                                  \
    do {                                                                                           \
        const vc_v kv_ = (kr);                                                                     \
        VC_UNROLL8 for (int j_ = 0; j_ < 8; j_++) x[j_] = v_aesenc(x[j_], kv_);                    \
    } while (0)
static_assert(2 * VC_B <= 32, "the double step needs 2B powers in the table");

#else
#define VC_DBL_ON 0
#endif

/* All rounds of the 4 vectors but the last, no GHASH interleaved. */
#define VC_R_ALL()                                                                                 \
    do {                                                                                           \
        VC_R_HEAD();                                                                               \
        VC_R(m0);                                                                                  \
        VC_R(m1);                                                                                  \
        VC_R(m2);                                                                                  \
        VC_R(m3);                                                                                  \
        VC_R(m4);                                                                                  \
        VC_R(m5);                                                                                  \
        VC_R(m6);                                                                                  \
        VC_R(m7);                                                                                  \
        VC_R(m8);                                                                                  \
    } while (0)

#ifdef VC_DBL
/* One VC_DBL step on x[0..7] (the counters already in x): whitening, the
 * rounds, and the 16 blocks at hp hashed into S, one vector's products
 * after each of the rounds m0..m7 and the reduction after m8.  Written as
 * straight-line code: when the GHASH work was guarded by a run-time flag
 * (the same step without hashing for encryption's first one), GCC merged
 * the guarded blocks into one run of 24 multiplies between two rounds, and
 * this spread measured +10 % at 4-64 KiB on Zen 4 (in-process A/B, AES-256,
 * both directions), +2-3 % more than two vectors after each of m0..m3. */
#define VC_DBL_STEP()                                                                              \
    do {                                                                                           \
        const vc_v k0_ = k0;                                                                       \
        VC_UNROLL8 for (int j = 0; j < 8; j++) x[j] = v_xor(x[j], k0_);                            \
        if (nr > 10) {                                                                             \
            VC_R8(e0);                                                                             \
            VC_R8(e1);                                                                             \
            if (nr > 12) {                                                                         \
                VC_R8(e2);                                                                         \
                VC_R8(e3);                                                                         \
            }                                                                                      \
        }                                                                                          \
        /* The 8 products (powers K16..K1, S folded into block 0) are                              \
         * summed unreduced and reduced once. */                                                   \
        VC_R8(m0);                                                                                 \
        VC_MUL_EVEN(v_xor(v_shuf8(v_loadu(hp), bs), S), kp2, 1);                                   \
        VC_R8(m1);                                                                                 \
        VC_MUL_ODD(v_shuf8(v_loadu(hp + 1 * VC_W), bs), kp2 + 1 * VC_W, 1);                        \
        VC_R8(m2);                                                                                 \
        VC_MUL_EVEN(v_shuf8(v_loadu(hp + 2 * VC_W), bs), kp2 + 2 * VC_W, 0);                       \
        VC_R8(m3);                                                                                 \
        VC_MUL_ODD(v_shuf8(v_loadu(hp + 3 * VC_W), bs), kp2 + 3 * VC_W, 0);                        \
        VC_R8(m4);                                                                                 \
        VC_MUL_EVEN(v_shuf8(v_loadu(hp + 4 * VC_W), bs), kp, 0);                                   \
        VC_R8(m5);                                                                                 \
        VC_MUL_ODD(v_shuf8(v_loadu(hp + 5 * VC_W), bs), kp + 1 * VC_W, 0);                         \
        VC_R8(m6);                                                                                 \
        VC_MUL_EVEN(v_shuf8(v_loadu(hp + 6 * VC_W), bs), kp + 2 * VC_W, 0);                        \
        VC_R8(m7);                                                                                 \
        VC_MUL_ODD(v_shuf8(v_loadu(hp + 7 * VC_W), bs), kp + 3 * VC_W, 0);                         \
        VC_R8(m8);                                                                                 \
        S = VC_NAME(finish_q)(&a, qm);                                                             \
        const vc_v kl_ = kl;                                                                       \
        VC_UNROLL8                                                                                 \
        for (int j = 0; j < 8; j++)                                                                \
            v_storeu(op + j * VC_W, v_aesenclast(x[j], v_xor(kl_, v_loadu(ip + j * VC_W))));       \
    } while (0)

/* The VC_DBL step without GHASH (encryption's first one, with nothing
 * written yet to hash): a rolled round loop, broadcasting each round key
 * from the schedule, keeps this once-per-message step small. */
#define VC_DBL_PLAIN()                                                                             \
    do {                                                                                           \
        const vc_v k0_ = k0;                                                                       \
        VC_UNROLL8 for (int j = 0; j < 8; j++) x[j] = v_xor(x[j], k0_);                            \
        _Pragma("GCC unroll 1") for (unsigned i_ = 1; i_ < nr; i_++)                               \
        {                                                                                          \
            const vc_v kr_ = v_bcast(k->rk[i_]);                                                   \
            VC_R8(kr_);                                                                            \
        }                                                                                          \
        const vc_v kl_ = kl;                                                                       \
        VC_UNROLL8                                                                                 \
        for (int j = 0; j < 8; j++)                                                                \
            v_storeu(op + j * VC_W, v_aesenclast(x[j], v_xor(kl_, v_loadu(ip + j * VC_W))));       \
    } while (0)

#endif

/* Every round but the last of one vector, keys from VC_KEYS_LOAD. */
#define VC_AES_NOLAST(v)                                                                           \
    do {                                                                                           \
        v = v_xor(v, k0);                                                                          \
        if (nr > 10) {                                                                             \
            v = v_aesenc(v, e0);                                                                   \
            v = v_aesenc(v, e1);                                                                   \
            if (nr > 12) {                                                                         \
                v = v_aesenc(v, e2);                                                               \
                v = v_aesenc(v, e3);                                                               \
            }                                                                                      \
        }                                                                                          \
        v = v_aesenc(v, m0);                                                                       \
        v = v_aesenc(v, m1);                                                                       \
        v = v_aesenc(v, m2);                                                                       \
        v = v_aesenc(v, m3);                                                                       \
        v = v_aesenc(v, m4);                                                                       \
        v = v_aesenc(v, m5);                                                                       \
        v = v_aesenc(v, m6);                                                                       \
        v = v_aesenc(v, m7);                                                                       \
        v = v_aesenc(v, m8);                                                                       \
    } while (0)

/* x_aesenc / x_aesenclast: one xmm AES round, for E(J0) from the keys'
 * lane 0.  GCC (12) emits the intrinsics in their VEX (AES-NI) form, which
 * addresses xmm0-15 only, so on the EVEX tiers, whose keys live anywhere
 * in xmm0-31, it copied each key into a low register first (11 moves per
 * E(J0) on avx512).  VC_X_AES_EVEX (the EVEX tiers): the EVEX form (VAES +
 * AVX512VL), written as asm ("v": any of the 32 registers).  In-process
 * A/B (Sapphire Rapids class, AES-256, three processes, 9 pairs): avx512
 * +2 to +3.5 % at 16 B, -0.9 to +4.4 % at 64 B, +0.9 to +1.7 % at 256 B;
 * avx10_256 +1.1 to +1.7 % at 16 B, +1.4 to +3.4 % at 64 B, +0.3 to +1.1 %
 * at 256 B; level from 512 B; 111 / 104 B less GCM text. */
#ifdef VC_X_AES_EVEX
static inline VC_FN __m128i x_aesenc(__m128i b, __m128i k)
{
    __asm__("vaesenc %2, %1, %0" : "=v"(b) : "v"(b), "v"(k));
    return b;
}
static inline VC_FN __m128i x_aesenclast(__m128i b, __m128i k)
{
    __asm__("vaesenclast %2, %1, %0" : "=v"(b) : "v"(b), "v"(k));
    return b;
}
#else
#define x_aesenc(b, k) _mm_aesenc_si128((b), (k))
#define x_aesenclast(b, k) _mm_aesenclast_si128((b), (k))
#endif

/* The same on the xmm lane 0 of the keys: E(J0).  With VC_KEYS_AT_USE,
 * from the schedule (ej0_sched). */
#if VC_KEYS_AT_USE
#define VC_AES_XMM(b) ((b) = VC_NAME(ej0_sched)(ks_, (b)))
#else
#define VC_AES_XMM(b)                                                                              \
    do {                                                                                           \
        b = _mm_xor_si128(b, v_lo128(k0));                                                         \
        if (nr > 10) {                                                                             \
            b = x_aesenc(b, v_lo128(e0));                                                          \
            b = x_aesenc(b, v_lo128(e1));                                                          \
            if (nr > 12) {                                                                         \
                b = x_aesenc(b, v_lo128(e2));                                                      \
                b = x_aesenc(b, v_lo128(e3));                                                      \
            }                                                                                      \
        }                                                                                          \
        b = x_aesenc(b, v_lo128(m0));                                                              \
        b = x_aesenc(b, v_lo128(m1));                                                              \
        b = x_aesenc(b, v_lo128(m2));                                                              \
        b = x_aesenc(b, v_lo128(m3));                                                              \
        b = x_aesenc(b, v_lo128(m4));                                                              \
        b = x_aesenc(b, v_lo128(m5));                                                              \
        b = x_aesenc(b, v_lo128(m6));                                                              \
        b = x_aesenc(b, v_lo128(m7));                                                              \
        b = x_aesenc(b, v_lo128(m8));                                                              \
        b = x_aesenclast(b, v_lo128(kl));                                                          \
    } while (0)
#endif

/* ---------------------------------------------------------------- GCM -- */

/*
 * CTR + GHASH over len bytes; returns the new GHASH state X (block order).
 *
 * fin (NULL, or 32 bytes: J0 | the length block; the one-shot long route
 * when the loop takes a whole message): the loop also finishes the tag and
 * returns it, E(J0) ^ GHASH.  E(J0) is computed first, beside the loop's
 * AES (after the loop it was a 14-round latency chain at the end of the
 * message), and left in fin[0..15]; the length block is multiplied in after
 * the loop, with no store and reload of X between.  Both go through
 * memory, not registers held across the loop: two more live vectors there
 * cost the VEX tier (16 registers) spills in its main loop, 1.5-2 % at
 * 4-64 KiB decrypt on Zen 4, even for calls without fin.  (Hashing the
 * length block with the last step's blocks, powers K17..K2, saved the
 * multiply but slowed every step the same way.)
 */

/* The LE counters of a batch (lanes: first, first+1, ...) from lane 0 of
 * its BE counters (see gcm_crypt). */
static inline VC_FN vc_v VC_NAME(ctr_lane0)(vc_v cbe, vc_v bs)
{
    return v_add32(v_shuf8(v_bcast_x(v_lo128(cbe)), bs), v_ctr_lanes());
}

static VC_NOINL __m128i VC_NAME(gcm_crypt)(const vc_aes_key *k, const vc_ghash_key *g,
                                           uint8_t ctr[16], const uint8_t X[16], const uint8_t *in,
                                           uint8_t *out, size_t len, int enc, uint8_t *fin)
{
    const unsigned nr = k->rounds;
    VC_KEYS_LOAD(k);
    if (fin) {
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)fin);
        VC_AES_XMM(e);
        _mm_storeu_si128((__m128i *)(void *)fin, e);
    }
    const vc_v bs = v_bswap_mask();
    const vc_v qm = VC_NAME(q_mem)(); /* the main loop's reductions: see q_mem */
    const vc_v step = v_ctr_step();                /* +VC_L blocks, LE form */
    const vc_v step_be = v_shuf8(step, bs);        /* the same, BE form */
    const uint8_t *kp = VC_ENTRY(g->table, VC_B);      /* K16..K1 (ymm: K8..K1) */
    const uint8_t *kp2 = VC_ENTRY(g->table, 2 * VC_B); /* K32..K17 (K16..K9) */
    VC_NAME(acc) a = {v_zero(), v_zero(), v_zero()};
#if VC_ACC_PAIRS
    VC_NAME(acc) held; /* see VC_ACC_PAIRS */
#endif
    int half = 0; /* a holds the unreduced products of one batch */
    vc_v S = v_shuf8(v_lane0_load(X), bs);
    /* The BE form is stepped by adding to byte 15 without a carry, so
     * after a batch that a wrapping one follows, cbe no longer equals
     * bswap(c) in its lanes above 0: the LE form c is the exact one.  c
     * is not stepped beside cbe: the slow path rebuilds it from lane 0 of
     * cbe, which is always exact (its low byte is n8 < 256).  One vector
     * add and one register fewer live across the loop: in-process A/B on a
     * Sapphire Rapids class Xeon (three processes, 9 pairs): avx10_256
     * +0.2 to +1.6 % at 512 B-64 KiB (512 B encrypt -0.5 to -0.6 %),
     * vaes_avx2 decrypt +2.9 to +4.5 % at 1420-4096 B and +0.2 to +0.5 % at
     * 16-64 KiB, encrypt +2.6 to +3.5 % at 4096 B, level at 16-64 KiB,
     * 512 B encrypt -0.8 to -0.9 %; avx512 (which first kept stepping c, for
     * want of code budget) level: -2.1 to +2.8 % at 512 B-64 KiB, +24 B. */
    vc_v c = v_add32(v_shuf8(v_bcast(ctr), bs), v_ctr_lanes()); /* LE counters */
    vc_v cbe = v_shuf8(c, bs);                                  /* BE counters */
    uint8_t n8 = ctr[15]; /* low byte of the first counter of the next batch */
    size_t np = 0; /* enc: batches written but not hashed, just before op */
    vc_v x[VC_DBL_ON ? 8 : 4];
    size_t done = 0;

    for (;;) {
        const uint8_t *ip = in + done;
        uint8_t *op = out + done;
        const size_t r = len - done;
#ifdef VC_DBL
        /* VC_DBL: two batches (8 vectors, 16 blocks) per step, see
         * VC_DBL.  Encryption's first step is plain (nothing written yet
         * to hash); afterwards it hashes the previous step's output (the
         * two batches just before op), decryption this step's input. */
        if (r >= 2 * VC_BATCH && (!enc || np == 0 || np == 2)) {
            const int hash = !enc || np == 2;
            const uint8_t *hp = enc ? op - 2 * VC_BATCH : ip;
            if (n8 < 256 - 2 * VC_B) {
                VC_UNROLL8 for (int j = 0; j < 8; j++) {
                    x[j] = cbe;
                    cbe = v_add32(cbe, step_be);
                }
            } else {
                c = VC_NAME(ctr_lane0)(cbe, bs);
                VC_UNROLL8 for (int j = 0; j < 8; j++) {
                    x[j] = v_shuf8(c, bs);
                    c = v_add32(c, step);
                }
                cbe = v_shuf8(c, bs);
            }
            n8 = (uint8_t)(n8 + 2 * VC_B);
            if (hash)
                VC_DBL_STEP();
            else
                VC_DBL_PLAIN();
            if (enc)
                np = 2;
            done += 2 * VC_BATCH;
            continue;
        }
#endif
        /* Counters for B blocks.  While the low byte of every counter of
         * the batch stays below 256, inc32 touches only byte 15 and the
         * BE counters can be stepped directly; otherwise (once per 256
         * blocks) step the LE form and byte-swap it. */
        if (n8 < 256 - VC_B) {
            VC_UNROLL for (int j = 0; j < 4; j++) {
                x[j] = cbe;
                cbe = v_add32(cbe, step_be);
            }
        } else {
            c = VC_NAME(ctr_lane0)(cbe, bs);
            VC_UNROLL for (int j = 0; j < 4; j++) {
                x[j] = v_shuf8(c, bs);
                c = v_add32(c, step);
            }
            cbe = v_shuf8(c, bs);
        }
        n8 = (uint8_t)(n8 + VC_B);

        /* Main loop: B blocks of CTR, and B blocks of GHASH between the
         * rounds.  Decryption hashes this batch's input (all read before
         * the stores, so in == out is fine); encryption an earlier batch's
         * output: np batches back, np = 2 once two batches have been
         * written plain, or 1 if the message is too short to be worth a
         * second plain batch (see CTR + GHASH interleave above). */
        if (!VC_DBL_ON && r >= VC_BATCH && (!enc || np == 2 || (np == 1 && r < 3 * VC_BATCH))) {
            const uint8_t *hp = enc ? op - np * VC_BATCH : ip;
            /* Pair this batch with the next one iff that is a main-loop
             * batch too (B more blocks after this one). */
            const int pair = !half && r >= 2 * VC_BATCH;
            const uint8_t *kq = pair ? kp2 : kp;
            VC_R_HEAD();
            VC_R(m0);
            VC_MUL_EVEN(v_xor(v_shuf8(v_loadu(hp), bs), S), kq, 0);
            VC_R(m1);
            VC_MUL_ODD(v_shuf8(v_loadu(hp + VC_W), bs), kq + VC_W, 0);
            VC_R(m2);
            VC_MUL_EVEN(v_shuf8(v_loadu(hp + 2 * VC_W), bs), kq + 2 * VC_W, 0);
            VC_R(m3);
            VC_MUL_ODD(v_shuf8(v_loadu(hp + 3 * VC_W), bs), kq + 3 * VC_W, 0);
            VC_R(m4);
            if (pair) { /* S is in a now; the next batch adds to a */
                S = v_zero();
                half = 1;
            } else {
                S = VC_NAME(finish_q)(&a, qm);
                a.lo = a.hi = a.kara = v_zero();
                half = 0;
            }
            VC_R(m5);
            VC_R(m6);
            VC_R(m7);
            VC_R(m8);
            VC_UNROLL
            for (int j = 0; j < 4; j++)
                /* AESENCLAST ends with "^ round key": fold the input in. */
                v_storeu(op + j * VC_W, v_aesenclast(x[j], v_xor(kl, v_loadu(ip + j * VC_W))));
            done += VC_BATCH;
            continue;
        }

        if (np == 2 && r < (VC_DBL_ON ? 2 : 1) * VC_BATCH) {
            /* enc: the two pending batches as a pair, one reduction (a is
             * empty here: the last main-loop batch did not pair). */
            VC_UNROLL
            for (int j = 0; j < 4; j++) {
                const vc_v h = v_shuf8(v_loadu(op - 2 * VC_BATCH + j * VC_W), bs);
                VC_NAME(mulp)(&a, j ? h : v_xor(h, S), kp2 + j * VC_W, j == 0);
            }
            VC_UNROLL
            for (int j = 0; j < 4; j++)
                VC_NAME(mulp)(&a, v_shuf8(v_loadu(op - VC_BATCH + j * VC_W), bs), kp + j * VC_W, 0);
            S = VC_NAME(finish)(&a);
            np = 0;
        }
        for (; np && r < VC_BATCH; np--) { /* enc: hash them before the tail */
            vc_v h[4];
            VC_UNROLL
            for (int j = 0; j < 4; j++)
                h[j] = v_shuf8(v_loadu(op - np * VC_BATCH + j * VC_W), bs);
            S = VC_BATCH4(g, S, h, VC_B);
        }
        if (!r)
            break;

        /* A batch with no GHASH to interleave: encryption's first one or
         * two batches, or the tail (< B blocks, the last may be partial
         * and is hashed zero-padded). */
        size_t n = r < VC_BATCH ? r : VC_BATCH;
        VC_OPAQUE(n); /* see VC_OPAQUE: the tail's unrolled loops */
        vc_v d[4];
#if VC_DBL_ON
        /* A tail of one vector (the ymm tiers' whole-message decryption
         * ends in one when its length is 1..32 past a batch): that
         * vector's rounds only, not four vectors'.  In-process A/B
         * (three processes, 11 pairs): decrypt 1300 / 1420 B +1.8 to
         * +3.9 % on vaes_avx2 and +1.6 to +1.7 % on avx10_256, but
         * vaes_avx2 decrypt -0.6 to -0.8 % at 16-64 KiB (its main loop's
         * stack frame and spills moved) and 600 B -0.8 to -1.5 % encrypt
         * (avx10_256 decrypt -2.5 % in one run); avx512 does not take it
         * (its one-shot tails are the pass's, and its code budget is
         * spent).  The same rounds out of line, keys from the schedule,
         * kept the frame but measured 0 to -0.9 % at 16-64 KiB on both ymm
         * tiers and lost avx10_256's gain. */
        if (n <= VC_W)
            VC_AES_NOLAST(x[0]);
        else
#endif
            VC_R_ALL();
        VC_NAME(load_tail)(d, ip, n);
        const vc_v klv = kl; /* one load (VC_KEYS_AT_USE) */
        VC_UNROLL
        for (size_t j = 0; j < 4; j++) {
            const size_t off = j * VC_W;
            if (off >= n)
                break;
            const vc_v o = v_xor(v_aesenclast(x[j], klv), d[j]);
            if (n - off >= VC_W) {
                v_storeu(op + off, o);
                if (enc)
                    d[j] = o;
            } else {
                v_store_part_cold(op + off, o, n - off);
                if (enc) /* keystream past the message must not be hashed */
                    d[j] = v_keep(o, n - off);
            }
        }
        done += n;
        if (enc && n == VC_BATCH) { /* hashed by a later iteration */
            np++;
            continue;
        }
        VC_UNROLL
        for (int j = 0; j < 4; j++)
            d[j] = v_shuf8(d[j], bs);
        S = VC_BATCH4(g, S, d, (n + 15) / 16);
        if (n < VC_BATCH)
            break;
    }
    /* Next counter: inc32 by the number of blocks used (wraps mod 2^32). */
    const uint32_t nb = (uint32_t)((len + 15) / 16);
    const uint32_t c32 = ((uint32_t)ctr[12] << 24 | (uint32_t)ctr[13] << 16 |
                          (uint32_t)ctr[14] << 8 | ctr[15]) + nb;
    ctr[12] = (uint8_t)(c32 >> 24);
    ctr[13] = (uint8_t)(c32 >> 16);
    ctr[14] = (uint8_t)(c32 >> 8);
    ctr[15] = (uint8_t)c32;
    if (!fin)
        return v_lo128(v_shuf8(S, bs));
    /* S = (S ^ length block) K1, reduced; the tag is E(J0) ^ rev(S). */
    VC_NAME(acc) af = {v_zero(), v_zero(), v_zero()};
    VC_NAME(mul_k1)(&af, v_xor(S, v_lane0_load(fin + 16)), g);
    S = VC_NAME(finish)(&af);
    return _mm_xor_si128(v_lo128(v_shuf8(S, bs)), _mm_loadu_si128((const __m128i *)(const void *)fin));
}

static VC_FN void VC_NAME(gcm_enc)(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                                   uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len)
{
    _mm_storeu_si128((__m128i *)(void *)X, VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, len, 1, NULL));
}

static VC_FN void VC_NAME(gcm_dec)(const vc_aes_key *k, const vc_ghash_key *g, uint8_t ctr[16],
                                   uint8_t X[16], const uint8_t *in, uint8_t *out, size_t len)
{
    _mm_storeu_si128((__m128i *)(void *)X, VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, len, 0, NULL));
}

/* ----------------------------------------------------- one-shot GCM -- */

/*
 * A whole message with a 12-byte IV in one call (vc_tier.gcm_oneshot).
 *
 * Messages of up to VC_OS_V vectors of data are one straight pass:
 *
 *   hashed run  [ A_1 .. A_a | C_1 .. C_d | len ]     N = a + d + 1 blocks
 *   powers        K(N) ..     K(N-a) ..     K1        (one contiguous run)
 *   S = sum of the products, reduced once; T = E(J0) ^ rev(S)
 *
 * AES runs on ceil(len / VC_W) vectors only (a 64-byte message is one zmm
 * vector, not a 16-block batch), all in flight at once, and E(J0) is an
 * xmm chain beside them, independent of everything until the tag.  Tails
 * are masked loads and stores straight from and to the caller's buffers.
 *
 * The power table holds VC_TABLE_POWERS powers, so one reduction covers at
 * most one group of VC_SHORT_V vectors (plus AAD and the length block).  A
 * tier with registers for twice that keystream (VC_OS_V = 2 VC_SHORT_V)
 * hashes a second group by Horner's rule:
 *
 *   S0 = reduce( sum over group 0's run of X_i K(n0 - i + 1) )
 *   S  = reduce( S0 K(n1) + sum over group 1's run of X_i K(n1 - i + 1) )
 *
 * (the serial GHASH chain S <- (S ^ X) H unrolled: a run of n blocks
 * multiplies what came before by H^n).  Group 1's products do not wait for
 * S0; only the one product S0 K(n1) and the last reduction follow it.  AAD
 * too long to share group 0's run is hashed alone first and enters group 0
 * the same way.
 *
 * Decryption hashes the ciphertext while its keystream is computed (the
 * two are independent), checks the tag, and only then XORs and stores: no
 * plaintext is written before the tag verifies, and nothing is copied.
 *
 * Longer messages: the AAD is hashed first, the whole batches go through
 * gcm_crypt (the interleaved main loop), and the last (< one batch) chunk
 * is the pass above with the running S multiplied in at K(N) and no AAD
 * run; an encryption the loop takes whole (no chunk left) has the loop
 * finish the tag too.  Decryption then writes plaintext before the tag is known, as the
 * streaming path does, and zeroes all of out if it does not verify.
 */

/* J0 = IV || 0^31 || 1 from a 12-byte IV, built from scalar loads (nothing
 * past iv[11]). */
static inline VC_FN __m128i VC_NAME(j0)(const uint8_t iv[12])
{
    uint64_t iv_lo;
    uint32_t iv_hi;
    memcpy(&iv_lo, iv, 8);
    memcpy(&iv_hi, iv + 8, 4);
    return _mm_insert_epi32(_mm_insert_epi32(_mm_cvtsi64_si128((long long)iv_lo), (int)iv_hi, 2),
                            0x01000000, 3);
}

/* The length block [len(A)]_64 || [len(C)]_64, in product byte order. */
static inline VC_FN __m128i VC_NAME(len_block)(size_t aad_len, size_t len)
{
    return _mm_set_epi64x((long long)((uint64_t)aad_len * 8), (long long)((uint64_t)len * 8));
}

/* The tag t (an xmm register) to the caller: v_tag_store writes its first n
 * bytes to tag, v_tag_eq compares them with the n bytes at tag in constant
 * time (1 iff equal).  A tier with byte-masked xmm operations
 * (VC_TAG_IN_REGS: AVX-512BW/VL) does both in registers: the masked load
 * and store touch exactly n bytes, and the compare checks every byte and
 * tests the whole mask once (no early exit).  No call either: a call
 * clobbers every vector register, so decryption's keystream, kept across
 * the check, would be spilled and reloaded around it (20-30 % of a 16-256
 * byte decrypt on Zen 4), and memcpy's call costs encryption too.  The VEX
 * tier stores a 16-byte tag with one unaligned store and a shorter one
 * through a stack copy and memcpy (inline masked code there cost its
 * encrypt path ~9 % at 16 bytes: register allocation of the whole
 * function; the one store, against memcpy for every length, measured +7 %
 * at 16-64 bytes and +1.5 % at 512 on Zen 4).  It checks the tag in
 * registers with its own v_tag_eq (VPMASKMOVD + VPTEST, tier_vaes_avx2.c):
 * +26-28 % decrypt at 16-64 bytes, +13-16 % at 256, for -3 % encrypt at 16
 * bytes (Sapphire Rapids class). */
#ifdef VC_TAG_IN_REGS
#define vc_tmask(n) ((__mmask16)((1u << (n)) - 1))
#define v_tag_store(tag, t, n) _mm_mask_storeu_epi8((void *)(tag), vc_tmask(n), (t))
#define v_tag_eq(t, tag, n)                                                                        \
    (_mm_mask_cmpeq_epi8_mask(vc_tmask(n), (t), _mm_maskz_loadu_epi8(vc_tmask(n), (tag))) ==       \
     vc_tmask(n))
#else
static inline VC_FN void VC_NAME(tag_store)(uint8_t *tag, __m128i t, size_t n)
{
    if (n == 16) {
        _mm_storeu_si128((__m128i *)(void *)tag, t);
        return;
    }
    alignas(16) uint8_t full[16];
    _mm_store_si128((__m128i *)(void *)full, t);
    memcpy(tag, full, n);
    vc_secure_zero(full, sizeof full);
}
#define v_tag_store(tag, t, n) VC_NAME(tag_store)((tag), (t), (n))
#ifndef v_tag_eq /* a tier may supply an in-register check */
static inline VC_FN int VC_NAME(tag_eq)(__m128i t, const uint8_t *tag, size_t n)
{
    alignas(16) uint8_t full[16];
    _mm_store_si128((__m128i *)(void *)full, t);
    const int ok = vc_ct_memeq(full, tag, n);
    vc_secure_zero(full, sizeof full);
    return ok;
}
#define v_tag_eq(t, tag, n) VC_NAME(tag_eq)((t), (tag), (n))
#endif
#endif

/* A decryption's last step once its plaintext is written: the tag t checked
 * against the caller's (v_tag_eq), and on a mismatch the output zeroed, so
 * that a failed check releases no plaintext.  Used where the loop wrote the
 * plaintext before the tag was known (the long route's fin and
 * gcm_whole); the pass checks before it writes. */
static inline __attribute__((always_inline)) VC_FN int
VC_NAME(tag_check_written)(__m128i t, const uint8_t *tag, size_t tag_len, uint8_t *out, size_t len)
{
    if (!v_tag_eq(t, tag, tag_len)) {
        vc_secure_zero(out, len);
        return VC_ERR_AUTH;
    }
    return VC_OK;
}

/* Whether AAD and data share group 0's power run (else the AAD is hashed
 * alone first).  For len <= VC_SHORT_BYTES the front-end applies the same
 * rule (vc_tier.short_powers = VC_TABLE_POWERS) to choose the one-group
 * instance, which has no AAD-alone route. */
static inline VC_FN int VC_NAME(os_fits)(size_t aad_len, size_t len)
{
    return (aad_len + 15) / 16 + (len < VC_SHORT_BYTES ? (len + 15) / 16 : VC_SHORT_V * VC_L) +
               1 <= VC_TABLE_POWERS;
}

/* The pass for up to ov vectors (a constant per instance, VC_SHORT_V or
 * VC_OS_V): with ov = VC_SHORT_V the second group, the AAD-alone hash and
 * the main loop fold away (its callers route those messages elsewhere). */
static inline __attribute__((always_inline)) VC_FN int
VC_NAME(oneshot_core)(const vc_aes_key *k, const vc_ghash_key *g, const uint8_t iv[12],
                      const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out,
                      size_t len, uint8_t *tag, size_t tag_len, int enc, int round_major,
                      const size_t ov)
{
    const unsigned nr = k->rounds;
    const vc_v bs = v_bswap_mask();
    const __m128i j0 = VC_NAME(j0)(iv);
    /* First data counter inc32(J0) in LE form (low word = counter). */
    vc_v c = v_add32(v_add32(v_shuf8(v_bcast_x(j0), bs), v_ctr_lanes()), v_ctr_one());
    const uint8_t *ip = in;
    uint8_t *op = out;
    size_t r = len, arun = aad_len;
    vc_v S = v_zero();
    int have_s = 0;

    const int long_route = ov == VC_OS_V && len > VC_OS_BYTES;
    const __m128i lb128 = VC_NAME(len_block)(aad_len, len);
    if (ov == VC_OS_V && (long_route || !VC_NAME(os_fits)(aad_len, len))) {
        /* The AAD alone first: a long message's, or one too long to share
         * group 0's power run.  One block (TLS, ESP) is multiplied by H
         * here; a longer AAD goes to the tier's out-of-line GHASH.  The
         * general hash inlined here instead cost 158-220 B more of each
         * tier's GCM code budget.  In-process A/B on Zen 4 with 16-byte
         * AAD (three processes): level to +5 % at 16 B-16 KiB on all wide
         * tiers, but vaes_avx2 encrypt 64 B -4 % (register allocation:
         * that message does not take this code).  The call for a longer
         * AAD was not timed: it replaces the inlined loop with a call and
         * one 16-byte store and reload. */
        if (aad_len) {
            alignas(16) uint8_t xa[16] = {0};
            VC_NAME(aad_hash)(g, xa, aad, aad_len);
            S = v_shuf8(v_lane0_load(xa), bs);
        }
        have_s = 1;
        arun = 0;
    }
    if (long_route) {
        /* Long: whole batches through the main loop. */
        alignas(16) uint8_t X[16], ctr[16];
        /* Encryption on a VC_DBL tier: whole main-loop steps only (two
         * batches).  A lone last batch would run its AES and then its GHASH
         * one after the other, while the pass below takes up to
         * VC_OS_BYTES - 1 bytes in flight: +5 to +10 % at 400-2000 B that
         * are not a multiple of 256 (Zen 4, both ymm tiers).  Decryption
         * measured level to -2 % that way and keeps single batches. */
        const size_t step = VC_DBL_ON && enc ? 2 * VC_BATCH : VC_BATCH;
        static_assert(!VC_DBL_ON || 2 * VC_BATCH <= VC_OS_BYTES, "the pass takes a step's tail");
        const size_t full = len - len % step;
        v_lane0_store(X, v_shuf8(S, bs));
        _mm_storeu_si128((__m128i *)(void *)ctr, v_lo128(v_shuf8(c, bs)));
        if (VC_PASS_FIN && (enc || VC_PASS_FIN == 2) && full == len) {
            /* A message the loop takes whole: it finishes the tag (see
             * gcm_crypt's fin).  See VC_PASS_FIN for which tiers. */
            alignas(16) uint8_t fin[32];
            _mm_store_si128((__m128i *)(void *)fin, j0);
            _mm_store_si128((__m128i *)(void *)(fin + 16), lb128);
            const __m128i t = VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, len, enc, fin);
            vc_secure_zero(X, sizeof X);
            vc_secure_zero(fin, sizeof fin);
            if (enc) {
                v_tag_store(tag, t, tag_len);
                return VC_OK;
            }
            return VC_NAME(tag_check_written)(t, tag, tag_len, out, len);
        }
        S = v_shuf8(v_lane0_x(VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, full, enc, NULL)), bs);
        /* The counters advance by the blocks the loop used (inc32: the low
         * word, mod 2^32).  Not read back from ctr: the loop writes its
         * last four bytes one by one, and a 16-byte load of them cannot be
         * forwarded from those stores (it waits for them to retire: about
         * 12 ns of a 512-byte message on Zen 4). */
        c = v_add32(c, v_bcast_x(_mm_cvtsi32_si128((int)(uint32_t)(full / 16))));
        vc_secure_zero(X, sizeof X);
        ip += full;
        op += full;
        r -= full;
    }

    VC_KEYS_LOAD(k);
    __m128i ekj0 = j0;
    VC_AES_XMM(ekj0);
    const vc_v klv = kl; /* every vector's last round: one load (VC_KEYS_AT_USE) */

    /* Group 0: the AAD run and the first (up to) VC_SHORT_V vectors, with
     * the length block if no second group follows. */
    const size_t na = (arun + 15) / 16, nd = (r + 15) / 16;
    const size_t nd0 = nd < VC_SHORT_V * VC_L ? nd : VC_SHORT_V * VC_L;
    const size_t n = na + nd0 + (nd == nd0);
    VC_NAME(acc) a = {v_zero(), v_zero(), v_zero()};
    /* One AAD block (1..16 bytes: TLS, ESP), or the state S of what was
     * hashed before (AAD alone, the long route's main loop), and the
     * length block share one vector, [A_1 | len] or [S | len] times
     * [K(n) | K1], where one group holds the whole run (the length block
     * is then group 0's last, K1): one vector's three multiplies instead
     * of two vectors' six, and no separate product at the end of the run.
     * In-process A/B on a Sapphire Rapids class Xeon (AES-256, 16-byte
     * AAD, three processes), the AAD block: avx512 +6.8 to +13.6 % at
     * 48-256 B, avx10_256 +2.7 to +8.5 % at 16-64 B (-0.1 to +4.3 % at
     * 128-256 B), vaes_avx2 +1.3 to +6.7 % at 16-256 B but -0.3 % at
     * 256 B encrypt; S and group 1's S0 (see there) then avx512 -0.2 to
     * +2.2 % at 300-1420 B (300 B encrypt -1.6 % in one run of three),
     * vaes_avx2 encrypt +0.4 to +2.1 % at 520-1420 B.  The
     * three forms cost 281 B of vaes_avx2's pass (a second masked AAD
     * load), 350 B of avx512's GCM text, 97 B of avx10_256's.
     * arun - 1 is huge for arun = 0 (no AAD, or S instead).  A two-group
     * instance (ov > VC_SHORT_V) holds in one group only what the long
     * route left (its callers send shorter messages to the one-group
     * instance): there only [S | len] is compiled. */
    const int s_only = ov > VC_SHORT_V;
    const int fuse = s_only ? have_s && nd == nd0 : have_s || arun - 1 < 16;
    if (fuse) {
        const vc_v d0 = s_only || have_s ? S : v_shuf8(v_load_part(aad, arun), bs);
        a = VC_NAME(prod_len)(d0, lb128, VC_ENTRY(g->table, (int)n), g);
    } else {
        if (have_s)
            VC_NAME(mul)(&a, S, VC_ENTRY(g->table, (int)n), 0);
        for (size_t off = 0; off < arun; off += VC_W) {
            const size_t m = arun - off;
            const vc_v d = m >= VC_W ? v_loadu(aad + off) : v_load_part(aad + off, m);
            VC_NAME(mul)(&a, v_shuf8(d, bs), VC_ENTRY(g->table, (int)(n - off / 16)), 0);
        }
    }

    /* Keystream for the nv vectors the data needs, all in flight at once. */
    const size_t nv = (r + VC_W - 1) / VC_W;
    const uint8_t *kd = VC_ENTRY(g->table, (int)(n - na));
    const vc_v step = v_ctr_step();
    vc_v x[VC_OS_V];
    /* Group 1's run: its blocks and the length block, after group 0.  Its
     * products go to a1 and are summed with [S0 | len] times [K(n1) | K1]
     * after group 0 is reduced: they do not wait for S0. */
    const size_t n1 = nd - nd0 + 1;
    const uint8_t *kd1 = VC_ENTRY(g->table, (int)n1);
    VC_NAME(acc) a1 = {v_zero(), v_zero(), v_zero()};
    /* Vector j's product (d: its byte-reversed blocks) into its group's
     * accumulator with its group's power: the rounds below and the hash
     * loop after them both hash through this. */
#define VC_HASH_VEC(j, d)                                                                          \
    VC_NAME(mul)((j) < VC_SHORT_V ? &a : &a1, (d),                                                 \
                 (j) < VC_SHORT_V ? kd + (j) * VC_W : kd1 + ((j) - VC_SHORT_V) * VC_W, 0)
    /* nh: the vectors hashed between the rounds (decryption, round-major:
     * see VC_PASS_RM); the hash loop below skips them. */
    size_t nh = 0;
    const int rm = VC_PASS_RM && ov == 8 &&
                   (!enc || VC_RM_ENC == 1 || (VC_RM_ENC == 2 && round_major));
    if (rm && nv >= VC_RM_MIN) {
        const vc_v k0v = k0; /* one load (VC_KEYS_AT_USE) */
        VC_UNROLL_SHORT
        for (size_t j = 0; j < VC_OS_V; j++) {
            x[j] = v_xor(v_shuf8(c, bs), k0v);
            c = v_add32(c, step);
        }
        if (!enc && VC_RM_HASH)
            nh = r / VC_W; /* the whole vectors (nv <= 8) */
        /* One round of all 8 vectors; then, with hj < nh, the product of
         * ciphertext vector hj (known before any AES: decryption). */
#define VC_RM_ROUND(kr, hj)                                                                        \
    do {                                                                                           \
        const vc_v kv_ = (kr); /* one load of an at-use key per round */                           \
        VC_UNROLL_SHORT for (size_t j_ = 0; j_ < VC_OS_V; j_++) x[j_] = v_aesenc(x[j_], kv_);      \
        if ((hj) < nh)                                                                             \
            VC_HASH_VEC((hj), v_shuf8(v_loadu(ip + (hj) * VC_W), bs));                             \
    } while (0)
        if (nr > 10) {
            VC_RM_ROUND(e0, SIZE_MAX);
            VC_RM_ROUND(e1, SIZE_MAX);
            if (nr > 12) {
                VC_RM_ROUND(e2, SIZE_MAX);
                VC_RM_ROUND(e3, SIZE_MAX);
            }
        }
        VC_RM_ROUND(m0, 0);
        VC_RM_ROUND(m1, 1);
        VC_RM_ROUND(m2, 2);
        VC_RM_ROUND(m3, 3);
        VC_RM_ROUND(m4, 4);
        VC_RM_ROUND(m5, 5);
        VC_RM_ROUND(m6, 6);
        VC_RM_ROUND(m7, 7);
        VC_RM_ROUND(m8, SIZE_MAX);
#undef VC_RM_ROUND
    } else {
        VC_UNROLL_SHORT
        for (size_t j = 0; j < VC_OS_V; j++) {
            x[j] = v_zero();
            if (j < (rm && VC_RM_ENC == 1 ? VC_RM_MIN - 1 : ov) && j < nv) {
                x[j] = v_shuf8(c, bs);
                c = v_add32(c, step);
                VC_AES_NOLAST(x[j]);
            }
        }
    }
#if VC_LAST_APART
    /* Only the last vector, jl, can be partial (ml = 1..VC_W bytes).  Its
     * load and store are written once, outside the unrolled loops: one copy
     * of the masked code instead of one per vector (see VC_LAST_APART). */
    const size_t jl = nv - 1, ml = r - jl * VC_W;
    vc_v dl = v_zero(), ol = v_zero();
    if (nv)
        dl = ml == VC_W ? v_loadu(ip + jl * VC_W) : v_load_part(ip + jl * VC_W, ml);
#endif
    size_t nvh = nv; /* the hash loop's count: see VC_OPAQUE */
    VC_OPAQUE(nvh);
    VC_UNROLL_SHORT
    for (size_t j = 0; j < VC_OS_V; j++) {
        if (j >= ov || j >= nvh)
            break;
        if (j < nh) /* hashed between the rounds */
            continue;
#if VC_LAST_APART
        const size_t off = j * VC_W;
        vc_v d = j == jl ? dl : v_loadu(ip + off);
        if (enc) { /* hash what is written */
            d = v_aesenclast(x[j], v_xor(klv, d));
            if (j != jl || ml == VC_W) {
                v_storeu(op + off, d);
            } else {
                ol = d; /* stored after the loop */
                d = v_keep(d, ml); /* keystream past the message is not hashed */
            }
        }
#else
        const size_t off = j * VC_W, m = r - off < VC_W ? r - off : VC_W;
        vc_v d = m == VC_W ? v_loadu(ip + off) : v_load_part(ip + off, m);
        if (enc) { /* hash what is written */
            d = v_aesenclast(x[j], v_xor(klv, d));
            if (m == VC_W) {
                v_storeu(op + off, d);
            } else {
                v_store_part(op + off, d, m);
                d = v_keep(d, m); /* keystream past the message is not hashed */
            }
        }
#endif
        VC_HASH_VEC(j, v_shuf8(d, bs));
    }
#undef VC_HASH_VEC
    if (ov > VC_SHORT_V && nd > nd0) { /* group 1: a1 + [S0 | len] times [K(n1) | K1] */
        S = VC_NAME(finish)(&a);
        a = a1;
        VC_NAME(acc_add)(&a, VC_NAME(prod_len)(S, lb128, kd1, g));
    }
    /* The length block, [len(A)]_64 || [len(C)]_64 reversed, times K1
     * (unless it went with the AAD block, S, or group 1's S0). */
    if (!fuse && (ov == VC_SHORT_V || nd == nd0))
        VC_NAME(mul_k1)(&a, v_lane0_x(lb128), g);
    S = VC_NAME(finish)(&a);
#if VC_LAST_APART
    if (enc && nv && ml < VC_W)
        v_store_part(op + jl * VC_W, ol, ml);
#endif

    const __m128i t = _mm_xor_si128(ekj0, v_lo128(v_shuf8(S, bs))); /* the full tag */
    if (enc) {
        v_tag_store(tag, t, tag_len);
        return VC_OK;
    }
    if (!v_tag_eq(t, tag, tag_len)) {
        vc_secure_zero(out, len); /* the main loop may have written plaintext */
        return VC_ERR_AUTH;
    }
    size_t nvw = nv; /* the write loop's: see VC_OPAQUE */
    VC_OPAQUE(nvw);
    VC_UNROLL_SHORT
    for (size_t j = 0; j < VC_OS_V; j++) {
        if (j >= ov || j >= nvw)
            break;
#if VC_LAST_APART
        const size_t off = j * VC_W;
        if (j != jl || ml == VC_W)
            v_storeu(op + off, v_aesenclast(x[j], v_xor(klv, j != jl ? v_loadu(ip + off) : dl)));
        else
            ol = v_xor(v_aesenclast(x[j], klv), dl);
    }
    if (nv && ml < VC_W)
        v_store_part(op + jl * VC_W, ol, ml);
#else
        /* m: the bytes of a partial vector, read only in its branch (the
         * mask tells the compiler it is below VC_W, so the masked load and
         * store need no whole-vector case).  Computed as min(r - off, VC_W)
         * and tested against VC_W, each vector cost a compare and a
         * conditional move more: avx512 512 B decryption 27 instructions,
         * avx10_256 256 B 26 (gdb stepi).  In-process A/B (Sapphire Rapids
         * class, AES-256, 9-15 pairs, two or three processes): avx10_256
         * decrypt +1.2 to +6 % at 100-256 B, avx512 +0.8 to +4.1 % at
         * 100-512 B; avx512 16 B -1.4 to -1.8 %, 64-256 B -0.5 to -1.9 %
         * (16 B runs avx10_256's pass, whose own 16 B point is level: not
         * this code); vaes_avx2 (VC_LAST_APART) unchanged, level.  The
         * same form in the hash loop above measured -1.5 to -2.9 % at
         * 16-64 B decrypt and was not kept. */
        const size_t off = j * VC_W, m = (r - off) & (VC_W - 1);
        if (r >= off + VC_W)
            v_storeu(op + off, v_aesenclast(x[j], v_xor(klv, v_loadu(ip + off))));
        else
            v_store_part(op + off, v_xor(v_aesenclast(x[j], klv), v_load_part(ip + off, m)), m);
    }
#endif
    return VC_OK;
}

/* An out-of-line instance of the pass for up to ov vectors. */
#define VC_ONESHOT_INSTANCE(name, ov)                                                              \
    static VC_NOINL int VC_NAME(name)(const vc_gcm_dir *d, const uint8_t iv[12], size_t iv_len,    \
                                      const uint8_t *aad, size_t aad_len, const uint8_t *in,       \
                                      uint8_t *out, size_t len, uint8_t *tag, size_t tag_len)      \
    {                                                                                              \
        (void)iv_len;                                                                              \
        return VC_NAME(oneshot_core)(d->aes, d->g, iv, aad, aad_len, in, out, len, tag, tag_len,   \
                                     d->enc, d->round_major, (ov));                                \
    }

#if VC_OS_V > VC_SHORT_V
/* A tier with two groups keeps a one-group instance for the messages one
 * group holds (most short ones): the two-group code's extra live ranges
 * and unrolled vectors cost a 16-64 byte message ~4 ns (Zen 4).  The
 * front-end picks the instance (vc_tier.gcm_oneshot_short, short_max,
 * short_powers; see os_fits), so neither runs the other's prologue. */
VC_ONESHOT_INSTANCE(gcm_oneshot_short, VC_SHORT_V)
#endif
VC_ONESHOT_INSTANCE(gcm_oneshot, VC_OS_V)

/* A long message the main loop takes whole, on the VC_DBL (ymm) tiers
 * (vc_tier.gcm_whole, whole_min = VC_OS_BYTES): every decryption longer
 * than the pass (whole_step 1), and an encryption that is a multiple of
 * VC_WHOLE_STEP_ENC (otherwise its tail of up to 255 bytes is the pass's).
 * The AAD hash, gcm_crypt over all of it (decryption's last < 128 bytes
 * too), the length block and the tag.  Its own function, chosen by the
 * front-end, so that these messages skip the pass's prologue and register
 * set-up (sized for its unrolled vectors).  In-process A/B on Zen 4
 * (AES-256, median of alternated pairs, three processes), decrypt against
 * the pass's long route: vaes_avx2 +5 % at 384 B, +2 % at 512 B;
 * avx10_256 +4 / +3 / +3 % at 384 / 512 / 1024 B; level from 1420 B up
 * (single processes read up to +11 % at 512 B: the two builds' code
 * addresses differ per process).  Lengths that are not a multiple of 128:
 * +1 to +3.5 % on vaes_avx2 at 272-4100 B, avx10_256 +5 % at 272 B and
 * level above.
 *
 * Encryption has the loop finish the tag (gcm_crypt's fin: E(J0) beside
 * its AES): +8 % at 512 B on vaes_avx2 against E(J0) and the last
 * multiply after the loop.  Decryption keeps those after it: with fin it
 * measured level on vaes_avx2 and 3-5 % slower at 384-1024 B on avx10_256
 * (the tag check then waits for an E(J0) that the loop's AES delays). */
#ifdef VC_DBL
#define VC_WHOLE_STEP_ENC (2 * VC_BATCH) /* whole VC_DBL steps */
static VC_NOINL int VC_NAME(gcm_whole)(const vc_gcm_dir *d, const uint8_t iv[12], size_t iv_len,
                                       const uint8_t *aad, size_t aad_len, const uint8_t *in,
                                       uint8_t *out, size_t len, uint8_t *tag, size_t tag_len)
{
    (void)iv_len;
    const vc_aes_key *k = d->aes;
    const vc_ghash_key *g = d->g;
    const int enc = d->enc;
    const vc_v bs = v_bswap_mask();
    const __m128i j0 = VC_NAME(j0)(iv);
    const __m128i lb = VC_NAME(len_block)(aad_len, len);
    alignas(16) uint8_t X[16] = {0}, ctr[16];
    if (aad_len)
        VC_NAME(aad_hash)(g, X, aad, aad_len);
    _mm_store_si128((__m128i *)(void *)ctr, _mm_insert_epi32(j0, 0x02000000, 3)); /* inc32(J0) */
    if (enc) {
        alignas(16) uint8_t fin[32];
        _mm_store_si128((__m128i *)(void *)fin, j0);
        _mm_store_si128((__m128i *)(void *)(fin + 16), lb);
        const __m128i t = VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, len, 1, fin);
        vc_secure_zero(X, sizeof X);
        vc_secure_zero(fin, sizeof fin);
        v_tag_store(tag, t, tag_len);
        return VC_OK;
    }
    vc_v S = v_lane0_x(VC_NAME(gcm_crypt)(k, g, ctr, X, in, out, len, 0, NULL));
    vc_secure_zero(X, sizeof X);
    /* E(J0) beside the last multiply.  In-process A/B against E(J0) from
     * the broadcast keys (Sapphire Rapids class, AES-256, three processes,
     * 9 pairs), decrypt: avx10_256 +1.5 to +3.3 % at 288-1024 B, vaes_avx2
     * +0.8 to +3 % at 288-1024 B, level from 1420 B and for encryption;
     * +115 / +57 B of GCM text. */
    const __m128i e = VC_NAME(ej0_sched)(k, j0);
    VC_NAME(acc) a = {v_zero(), v_zero(), v_zero()};
    VC_NAME(mul_k1)(&a, v_xor(v_shuf8(S, bs), v_lane0_x(lb)), g);
    S = VC_NAME(finish)(&a);
    const __m128i t = _mm_xor_si128(e, v_lo128(v_shuf8(S, bs)));
    return VC_NAME(tag_check_written)(t, tag, tag_len, out, len);
}
#endif

/* ------------------------------------------------------------- CFB128 -- */

/*
 * CFB128 encryption is one serial chain: each AES input is the ciphertext
 * just produced, so no two blocks can be in flight at once.
 *
 *     IV ----+            +----------+            +------ ...
 *            v            |          v            |
 *         [AES_K]         |       [AES_K]         |
 *            |            |          |            |
 *   P1 ---> XOR ---> C1 --+  P2 --> XOR ---> C2 --+
 *
 * Its speed is nr x (VAESENC latency) per block whatever the vector width,
 * so only lane 0 is used; the tier's win is the round keys held in
 * registers (no per-round load).
 */
static VC_FN void VC_NAME(cfb128_enc)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                      uint8_t *out, size_t len)
{
    const unsigned nr = k->rounds;
    vc_v rk[15];
    for (unsigned i = 0; i <= nr; i++)
        rk[i] = v_bcast(k->rk[i]);
    vc_v s = v_lane0_load(iv);
    for (size_t i = 0; i + 16 <= len; i += 16) {
        s = v_xor(s, rk[0]);
        for (unsigned r = 1; r < nr; r++)
            s = v_aesenc(s, rk[r]);
        /* last round key ^ plaintext in one AESENCLAST */
        s = v_aesenclast(s, v_xor(rk[nr], v_lane0_load(in + i)));
        v_lane0_store(out + i, s);
    }
    v_lane0_store(iv, s);
}

/*
 * CFB128 decryption: every AES input is a ciphertext block the caller
 * already gave us, so all blocks are independent:
 *
 *   IV    C1    C2  ...  Cn-1        (AES inputs = ciphertext shifted by one)
 *   |     |     |         |
 * [AES] [AES] [AES] ... [AES]        4 vectors x VC_L lanes per step
 *   |     |     |         |
 *  XOR   XOR   XOR       XOR <-- C1 C2 C3 .. Cn
 *   |     |     |         |
 *   P1    P2    P3        Pn
 *
 * The shifted vector [prev.last, cur.lane0 .. cur.lane(L-2)] is built in
 * registers (v_shift_in) from ciphertext already loaded, never re-read from
 * memory: with in == out the previous blocks are already plaintext.
 */
static VC_FN void VC_NAME(cfb128_dec)(const vc_aes_key *k, uint8_t iv[16], const uint8_t *in,
                                      uint8_t *out, size_t len)
{
    const unsigned nr = k->rounds;
    vc_v last = v_bcast(iv); /* every lane = IV, so the top lane is too */
    len &= ~(size_t)15;
    if (!len)
        return;
    memcpy(iv, in + len - 16, 16); /* read before any write (in == out) */
    VC_KEYS_LOAD(k);
    const vc_v klv = kl; /* every vector's last round: one load (VC_KEYS_AT_USE) */
    for (size_t done = 0; done < len; done += VC_BATCH) {
        const size_t r = len - done;
        vc_v c[4], x[4];
        if (r >= VC_BATCH) {
            /* Spelled out: a loop here is turned into a memcpy by GCC's loop
             * distribution, which it then expands with zmm moves even in
             * the ymm-only tier. */
            c[0] = v_loadu(in + done);
            c[1] = v_loadu(in + done + VC_W);
            c[2] = v_loadu(in + done + 2 * VC_W);
            c[3] = v_loadu(in + done + 3 * VC_W);
        } else
            VC_NAME(load_tail)(c, in + done, r);
        x[0] = v_shift_in(c[0], last);
        x[1] = v_shift_in(c[1], c[0]);
        x[2] = v_shift_in(c[2], c[1]);
        x[3] = v_shift_in(c[3], c[2]);
        last = c[3];
        VC_R_ALL();
        /* AESENCLAST ends with "^ round key": fold the ciphertext in. */
        if (r >= VC_BATCH) {
            VC_UNROLL
            for (int j = 0; j < 4; j++)
                v_storeu(out + done + j * VC_W, v_aesenclast(x[j], v_xor(klv, c[j])));
        } else {
            VC_UNROLL
            for (size_t j = 0; j * VC_W < r; j++)
                v_store_part_cold(out + done + j * VC_W, v_aesenclast(x[j], v_xor(klv, c[j])),
                             r - j * VC_W < VC_W ? r - j * VC_W : VC_W);
        }
    }
}

#if VC_KEYS_AT_USE /* the key names of VC_KEYS_LOAD's at-use form end here */
#undef k0
#undef e0
#undef e1
#undef e2
#undef e3
#undef m0
#undef m1
#undef m2
#undef m3
#undef m4
#undef m5
#undef m6
#undef m7
#undef m8
#undef kl
#endif
