/*
 * vc_tier_isa.h - the ISA each tier's machine code may use, declared ONCE.
 *
 * Both sides of the contract derive from the lists below:
 *   native/tier_*.c   compile their functions with
 *                     __attribute__((target(VC_ISA_TARGET(LIST)))), so the
 *                     compiler may use exactly these extensions;
 *   dispatch/policy.c calls a path runnable when the CPU has every feature of
 *                     VC_ISA_MASK(LIST) (vc_path_supported / _for).
 * tests/library/test_tier_isa.py decodes every instruction of every tier function in
 * the built library and probe and checks its CPUID features against the same
 * lists (it reads this file), and each tier file checks at compile time that
 * the target string enables nothing GCC could use that the list leaves out
 * (native/tier_isa_check.h).
 *
 * A list is an X-macro LIST(X, S):
 *   X(FEATURE, "gcc-token")  an instruction-set extension: VC_F_FEATURE must be
 *                            present, and "gcc-token" goes into target("...");
 *   S(FEATURE)               register state the OS must have enabled (XCR0):
 *                            checked by the dispatcher, no compiler token.
 * Everything builds on the x86-64 baseline (SSE2), which every target string
 * starts with and no CPU lacks.
 *
 * A list must be closed under what GCC switches on by implication: "avx2"
 * also enables SSE3 .. SSE4.2, POPCNT and XSAVE (so they are listed), while
 * "vaes" does not enable "aes" nor "vpclmulqdq" "pclmul".
 *
 * This header knows features (vc_dispatch.h) and nothing of native/.
 */
#ifndef VC_TIER_ISA_H
#define VC_TIER_ISA_H

#include "vc_dispatch.h"

/* generic: portable C, the baseline alone. */
#define VC_ISA_GENERIC(X, S)

/* aesni, block part: key expansion, one block, CFB128/CFB8/CFB1.  AES-NI on
 * SSE2 registers; no SSSE3/SSE4.1 (the byte feedback of CFB8 and the word
 * extract of the key schedule use SSE2 shifts), so a hypervisor CPU such as
 * "qemu64,+aes" runs it. */
#define VC_ISA_AESNI_BLOCK(X, S) X(AES, "aes")

/* aesni, GCM part: GHASH with PCLMULQDQ, and PSHUFB (SSSE3; GCC's "ssse3"
 * brings SSE3 along) byte-reverses blocks and counters.  Nothing here needs
 * SSE4.1.  Every CPU with PCLMULQDQ has SSSE3 (Westmere, Bulldozer,
 * Silvermont on); a hypervisor model may still hide it, hence the check. */
#define VC_ISA_AESNI_GCM(X, S)                                                 \
    VC_ISA_AESNI_BLOCK(X, S)                                                   \
    X(PCLMULQDQ, "pclmul")                                                     \
    X(SSE3, "sse3")                                                            \
    X(SSSE3, "ssse3")

/* What "avx" brings along in GCC (and every AVX CPU has). */
#define VC_ISA_AVX_BASE(X, S)                                                  \
    X(SSE3, "sse3")                                                            \
    X(SSSE3, "ssse3")                                                          \
    X(SSE41, "sse4.1")                                                         \
    X(SSE42, "sse4.2")                                                         \
    X(POPCNT, "popcnt")                                                        \
    X(XSAVE, "xsave")                                                          \
    X(AVX, "avx")

/* The wide tiers share the aesni key expansion and single block
 * (vc_aesni_setkey / vc_aesni_encrypt_block), hence AES in their lists. */
#define VC_ISA_VAES_AVX2(X, S)                                                 \
    VC_ISA_AESNI_BLOCK(X, S)                                                   \
    VC_ISA_AVX_BASE(X, S)                                                      \
    X(AVX2, "avx2")                                                            \
    X(VAES, "vaes")                                                            \
    X(VPCLMULQDQ, "vpclmulqdq")                                                \
    S(OS_YMM)

#define VC_ISA_EVEX(X, S)                                                      \
    VC_ISA_AESNI_BLOCK(X, S)                                                   \
    VC_ISA_AVX_BASE(X, S)                                                      \
    X(AVX2, "avx2")                                                            \
    X(AVX512F, "avx512f")                                                      \
    X(AVX512VL, "avx512vl")                                                    \
    X(AVX512BW, "avx512bw")                                                    \
    X(VAES, "vaes")                                                            \
    X(VPCLMULQDQ, "vpclmulqdq")                                                \
    S(OS_YMM)                                                                  \
    S(OS_EVEX)

/* avx10_256 uses the EVEX list on ymm only: an AVX10/256 CPU (CPUID AVX10 with
 * the 256-bit vector length) runs it whether or not it reports the AVX-512
 * bits those instructions carry, so AVX10_256 stands in for these three. */
#define VC_ISA_AVX10_256(X, S) VC_ISA_EVEX(X, S)
#define VC_ISA_AVX10_STANDS_IN                                                 \
    ((1u << VC_F_AVX512F) | (1u << VC_F_AVX512VL) | (1u << VC_F_AVX512BW))

#define VC_ISA_AVX512(X, S) VC_ISA_EVEX(X, S)

/* ---------------------------------------------------------- derivations -- */

#define VC_ISA_BIT_(f, tok) | (1u << VC_F_##f)
#define VC_ISA_SBIT_(f) | (1u << VC_F_##f)
#define VC_ISA_TOK_(f, tok) "," tok
#define VC_ISA_NOTOK_(f)

/* Bitmask over vc_feature: what the CPU + OS must have. */
#define VC_ISA_MASK(list) (0u list(VC_ISA_BIT_, VC_ISA_SBIT_))
/* The GCC target string, e.g. "sse2,aes" (a string literal). */
#define VC_ISA_TARGET(list) "sse2" list(VC_ISA_TOK_, VC_ISA_NOTOK_)

#endif
