/*
 * vc_dispatch_hooks.h - the dispatcher's interface to the library that links
 * it (not installed; the public API is vc_dispatch.h).
 *
 * The policy (dispatch/policy.c) knows which paths a CPU can run and which a
 * mode may take, but not which tiers the library was built with.  A library
 * that links dispatch/ may define vc_path_implemented(); policy.c refers to it
 * weakly, so dispatch/ still links on its own (every path then counts as
 * implemented).  native/front.c provides the definition.
 */
#ifndef VC_DISPATCH_HOOKS_H
#define VC_DISPATCH_HOOKS_H

#include "vc_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vc_path_supported for one mode: the aesni path needs PCLMULQDQ and SSSE3
 * for GCM only; CFB modes need AES alone (see vc_tier_isa.h). */
int vc_path_supported_for(const vc_cpu_features *f, vc_mode m, vc_path p);

/* Provided by the library (weak reference from policy.c):
 * 1 when the linked library has every operation (mode, dir) needs on path p. */
int vc_path_implemented(vc_mode m, vc_dir d, vc_path p);

#ifdef __cplusplus
}
#endif
#endif
