/*
 * fault_marker.c - makes a mutation-test ("fault") build recognisable.
 *
 * The VC_FAULT_* switches (dispatch/policy.c, native/tier_*.c) exist only in
 * the test suite's separate builds of the probe (tests/test_mutation.py); a
 * normal build defines none of them.  Whether a compiled library is one or
 * the other cannot be read from its code reliably (a fault is a changed
 * table entry or one extra instruction), so a fault build also exports this
 * marker: an object `vc_fault_build` whose bytes spell out the faults.
 * tests/test_production_build.py checks that the shipped extension has no
 * such symbol and no "VC_FAULT" bytes at all.  In a normal build this file
 * compiles to nothing.
 */
#include "internal.h"

#ifdef VC_FAULT_BUILD
#ifdef VC_FAULT_CFB8_VAES
#define VC_FM_CFB8 " CFB8_VAES"
#else
#define VC_FM_CFB8 ""
#endif
#ifdef VC_FAULT_AVX10_ZMM
#define VC_FM_ZMM " AVX10_ZMM"
#else
#define VC_FM_ZMM ""
#endif
#ifdef VC_FAULT_IGNORE_XCR0
#define VC_FM_XCR0 " IGNORE_XCR0"
#else
#define VC_FM_XCR0 ""
#endif
/* Not static and used-attributed: it must survive into the symbol table. */
extern const char vc_fault_build[];
__attribute__((used)) const char vc_fault_build[] =
    "VC_FAULT_BUILD:" VC_FM_CFB8 VC_FM_ZMM VC_FM_XCR0;
#endif
