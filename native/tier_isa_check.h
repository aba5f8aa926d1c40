/*
 * tier_isa_check.h - compile-time proof that a tier's target string lets GCC
 * use nothing the tier's declaration (dispatch/include/vc_tier_isa.h) leaves
 * out.
 *
 * Why: target("avx2") also switches on SSE4.2, POPCNT, XSAVE ...; if the
 * dispatcher only checked the names written in the list, the compiler could
 * still emit an instruction of an extension nobody checks.  So, with
 * VC_ISA_CHECK_LIST defined to a tier's list, this header compiles an empty
 * region under exactly that target (GCC then predefines __SSE4_2__, __POPCNT__
 * ... for everything enabled, implied ones included) and asserts that every
 * extension GCC reports is in the list's feature mask, and that none is
 * enabled that the dispatcher has no feature bit for at all.
 *
 * No include guard: included once per list.  GCC only (clang has no
 * "#pragma GCC target"); the instruction-level test covers any compiler.
 */
#ifndef VC_ISA_CHECK_LIST
#error "define VC_ISA_CHECK_LIST to a tier's ISA list before including tier_isa_check.h"
#endif

#if defined(__GNUC__) && !defined(__clang__)

#ifndef VC_ISA_PRAGMA
#define VC_ISA_PRAGMA_(x) _Pragma(#x)
#define VC_ISA_PRAGMA(x) VC_ISA_PRAGMA_(x)
#define VC_ISA_CHECK_NEED(list, f, macro)                                      \
    _Static_assert(VC_ISA_MASK(list) & (1u << VC_F_##f),                       \
                   "the target string enables " macro " but the tier's ISA list lacks it")
#endif

#pragma GCC push_options
VC_ISA_PRAGMA(GCC target(VC_ISA_TARGET(VC_ISA_CHECK_LIST)))

#ifdef __SSE3__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, SSE3, "__SSE3__");
#endif
#ifdef __SSSE3__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, SSSE3, "__SSSE3__");
#endif
#ifdef __SSE4_1__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, SSE41, "__SSE4_1__");
#endif
#ifdef __SSE4_2__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, SSE42, "__SSE4_2__");
#endif
#ifdef __CRC32__ /* CRC32 is an SSE4.2 instruction */
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, SSE42, "__CRC32__");
#endif
#ifdef __POPCNT__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, POPCNT, "__POPCNT__");
#endif
#ifdef __XSAVE__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, XSAVE, "__XSAVE__");
#endif
#ifdef __AES__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AES, "__AES__");
#endif
#ifdef __PCLMUL__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, PCLMULQDQ, "__PCLMUL__");
#endif
#ifdef __AVX__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX, "__AVX__");
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, OS_YMM, "__AVX__ (ymm state)");
#endif
#ifdef __AVX2__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX2, "__AVX2__");
#endif
#ifdef __BMI2__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, BMI2, "__BMI2__");
#endif
#ifdef __VAES__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, VAES, "__VAES__");
#endif
#ifdef __VPCLMULQDQ__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, VPCLMULQDQ, "__VPCLMULQDQ__");
#endif
#ifdef __AVX512F__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX512F, "__AVX512F__");
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, OS_EVEX, "__AVX512F__ (opmask/zmm state)");
#endif
#ifdef __AVX512VL__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX512VL, "__AVX512VL__");
#endif
#ifdef __AVX512BW__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX512BW, "__AVX512BW__");
#endif
#ifdef __AVX512DQ__
VC_ISA_CHECK_NEED(VC_ISA_CHECK_LIST, AVX512DQ, "__AVX512DQ__");
#endif

/* Extensions the dispatcher has no feature bit for: a tier may not enable
 * them at all (add a vc_feature first). */
#if defined(__FMA__) || defined(__F16C__) || defined(__BMI__) || defined(__LZCNT__) ||         \
    defined(__GFNI__) || defined(__SHA__) || defined(__ADX__) || defined(__MOVBE__) ||          \
    defined(__AVX512CD__) || defined(__AVX512VBMI__) || defined(__AVX512VBMI2__) ||             \
    defined(__AVX512VNNI__) || defined(__AVX512BITALG__) || defined(__AVX512VPOPCNTDQ__) ||     \
    defined(__AVX512IFMA__) || defined(__AVXVNNI__) || defined(__XSAVEOPT__) ||                 \
    defined(__XSAVEC__) || defined(__XSAVES__)
#error "a tier's target string enables an extension the dispatcher cannot check"
#endif

#pragma GCC pop_options

#endif /* GCC */

#undef VC_ISA_CHECK_LIST
