/*
 * vc_dispatch.h - CPU feature probe and path-selection policy.
 *
 * This header knows CPU features, path names and modes only; it includes
 * nothing from native/.  native/'s mode front-ends map the path chosen here
 * to their own function tables.
 */
#ifndef VC_DISPATCH_H
#define VC_DISPATCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Code paths, worst to best.  The numeric order is not the preference order:
 * preference is per (mode, direction) in dispatch/policy.c. */
typedef enum vc_path {
    VC_PATH_GENERIC = 0,   /* portable constant-time C                         */
    VC_PATH_AESNI = 1,     /* AES-NI (+ PCLMULQDQ, SSSE3 for GCM), legacy SSE   */
    VC_PATH_VAES_AVX2 = 2, /* VAES + VPCLMULQDQ on ymm, VEX only                */
    VC_PATH_AVX10_256 = 3, /* EVEX-encoded, ymm only (AVX10/256, AVX512VL)      */
    VC_PATH_AVX512 = 4,    /* EVEX zmm                                          */
    VC_PATH_COUNT = 5
} vc_path;

#define VC_PATH_AUTO (-1)

typedef enum vc_mode {
    VC_MODE_GCM = 0,
    VC_MODE_CFB128 = 1,
    VC_MODE_CFB8 = 2,
    VC_MODE_CFB1 = 3,
    VC_MODE_COUNT = 4
} vc_mode;

typedef enum vc_dir {
    VC_DIR_ENCRYPT = 0,
    VC_DIR_DECRYPT = 1,
    VC_DIR_COUNT = 2
} vc_dir;

/* Feature bits (vc_cpu_features.bits).  Names (lower case, as accepted by
 * VAESCRYPT_CPU_MASK) are given by vc_feature_name(). */
typedef enum vc_feature {
    VC_F_AES = 0,
    VC_F_PCLMULQDQ,
    VC_F_SSE41,
    VC_F_AVX,
    VC_F_AVX2,
    VC_F_BMI2,
    VC_F_AVX512F,
    VC_F_AVX512VL,
    VC_F_AVX512BW,
    VC_F_AVX512DQ,
    VC_F_VAES,
    VC_F_VPCLMULQDQ,
    VC_F_AVX10,        /* CPUID.(7,1):EDX[19]                                 */
    VC_F_AVX10_256,    /* leaf 0x24 EBX[17]                                   */
    VC_F_AVX10_512,    /* leaf 0x24 EBX[18]                                   */
    VC_F_OS_YMM,       /* XCR0 & 0x06 == 0x06                                 */
    VC_F_OS_EVEX,      /* XCR0 & 0xE6 == 0xE6                                 */
    VC_F_PREFER_YMM,   /* Intel family 6 model in the prefer-ymm list        */
    /* Added with the per-tier ISA declarations (vc_tier_isa.h): what GCC
     * may use under a tier's target string beyond the names above. */
    VC_F_SSE3,         /* CPUID.1:ECX[0]                                     */
    VC_F_SSSE3,        /* CPUID.1:ECX[9]  (PSHUFB)                           */
    VC_F_SSE42,        /* CPUID.1:ECX[20]                                    */
    VC_F_POPCNT,       /* CPUID.1:ECX[23]                                    */
    VC_F_XSAVE,        /* CPUID.1:ECX[26]                                    */
    VC_F_COUNT
} vc_feature;

typedef struct vc_cpu_features {
    uint32_t bits;           /* 1u << vc_feature                              */
    uint32_t detected_bits;  /* before VAESCRYPT_CPU_MASK was applied         */
    uint8_t avx10_version;   /* leaf 0x24 EBX[7:0], 0 when no AVX10           */
    char vendor[13];         /* "GenuineIntel", "AuthenticAMD", ...           */
    uint32_t family, model, stepping;  /* display family/model (ext. folded)  */
    uint64_t xcr0;           /* 0 when OSXSAVE is clear                       */
} vc_cpu_features;

#define VC_HAS(f, feat) ((((f)->bits) >> (feat)) & 1u)

/* Raw CPUID answers, for decoding a CPU model's profile with the very same
 * code that decodes the live CPU (the matrix's `explain` uses this). */
typedef struct vc_cpuid_leaf {
    uint32_t leaf, subleaf, eax, ebx, ecx, edx;
} vc_cpuid_leaf;
/* Decode leaves 0, 1, 7.0, 7.1, 0x24 (+ xcr0) into a feature set.  A leaf
 * missing from the table reads as all zero, as on a CPU whose max leaf is
 * lower.  No mask is applied. */
void vc_features_from_cpuid(vc_cpu_features *out, const vc_cpuid_leaf *leaves,
                            int n, uint64_t xcr0);

/* Probe once (thread safe) and return the feature set with the mask applied. */
const vc_cpu_features *vc_cpu_features_get(void);
/* NULL, or a one-line message when VAESCRYPT_CPU_MASK names an unknown
 * feature or is malformed (the mask is then ignored as a whole). */
const char *vc_dispatch_error(void);

const char *vc_feature_name(vc_feature f);
const char *vc_path_name(vc_path p);
const char *vc_mode_name(vc_mode m);
const char *vc_dir_name(vc_dir d);
/* -1 when unknown */
int vc_path_from_name(const char *name);
int vc_mode_from_name(const char *name);

/* Can this CPU + OS execute the path's instructions at all? */
int vc_path_supported(const vc_cpu_features *f, vc_path p);
/* vc_path_supported for one mode: the aesni path needs PCLMULQDQ and SSSE3
 * for GCM only; CFB modes need AES alone (see vc_tier_isa.h). */
int vc_path_supported_for(const vc_cpu_features *f, vc_mode m, vc_path p);
/* Is the path allowed for the mode (CFB8/CFB1: never a VAES path)? */
int vc_path_eligible(vc_mode m, vc_dir d, vc_path p);

/* The policy, pure: `built` is the mask (1u << vc_path) of the paths the
 * linking library has code for in (m, d); the library computes it (for
 * vaescrypt: native/select.c, which also offers vc_select() & co.).
 *
 * vc_policy_select: the first path of the (mode, direction) preference list
 * that is eligible, supported, built and not vetoed by a preference
 * (prefer-ymm, 512-bit not allowed).  Never fails: generic is always last. */
vc_path vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built);
/* Paths usable for the mode, best first (the preference order, supported,
 * eligible and built).  Returns the count written to out[]. */
int vc_policy_available(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
                        int out[VC_PATH_COUNT]);
/* A one-line explanation of why vc_policy_select picks what it picks. */
int vc_policy_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built, char *buf,
                      int buflen);

#ifdef __cplusplus
}
#endif
#endif
