/*
 * cpuid.c - CPUID/XGETBV -> vc_cpu_features, once per process, and the
 * VAESCRYPT_CPU_MASK override.
 *
 * The live probe and the synthetic decoder (vc_features_from_cpuid, used to
 * explain a CPU model's profile) share one decoder, so a model profile and the
 * real CPU can never be read by two different rules.
 */
#define _POSIX_C_SOURCE 200809L
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vc_dispatch.h"

#define BIT(n) (1u << (n))
#define FBIT(f) (1u << (unsigned)(f))

static const char *const feature_names[VC_F_COUNT] = {
    [VC_F_AES] = "aes",           [VC_F_PCLMULQDQ] = "pclmulqdq",
    [VC_F_SSE41] = "sse41",       [VC_F_AVX] = "avx",
    [VC_F_AVX2] = "avx2",         [VC_F_BMI2] = "bmi2",
    [VC_F_AVX512F] = "avx512f",   [VC_F_AVX512VL] = "avx512vl",
    [VC_F_AVX512BW] = "avx512bw", [VC_F_AVX512DQ] = "avx512dq",
    [VC_F_VAES] = "vaes",         [VC_F_VPCLMULQDQ] = "vpclmulqdq",
    [VC_F_AVX10] = "avx10",       [VC_F_AVX10_256] = "avx10_256",
    [VC_F_AVX10_512] = "avx10_512", [VC_F_OS_YMM] = "os_ymm",
    [VC_F_OS_EVEX] = "os_evex",   [VC_F_PREFER_YMM] = "prefer_ymm",
    [VC_F_SSE3] = "sse3",         [VC_F_SSSE3] = "ssse3",
    [VC_F_SSE42] = "sse42",       [VC_F_POPCNT] = "popcnt",
    [VC_F_XSAVE] = "xsave",
};

const char *vc_feature_name(vc_feature f)
{
    if ((unsigned)f >= VC_F_COUNT)
        return "?";
    return feature_names[f];
}

/* Intel family-6 models whose 512-bit frequency licence (or split 512-bit
 * ports) makes zmm code a net loss in mixed workloads: Skylake-SP/Cascade
 * Lake (0x55), Ice Lake server (0x6A, 0x6C), Ice Lake client (0x7D, 0x7E),
 * Tiger Lake (0x8C, 0x8D) and Ice Lake NNPI (0x9D). */
static const uint32_t prefer_ymm_models[] = {0x55, 0x6A, 0x6C, 0x7D, 0x7E, 0x9D, 0x8C, 0x8D};

static const vc_cpuid_leaf *find_leaf(const vc_cpuid_leaf *leaves, int n, uint32_t leaf,
                                      uint32_t subleaf)
{
    for (int i = 0; i < n; i++)
        if (leaves[i].leaf == leaf && leaves[i].subleaf == subleaf)
            return &leaves[i];
    return NULL;
}

void vc_features_from_cpuid(vc_cpu_features *out, const vc_cpuid_leaf *leaves, int n,
                            uint64_t xcr0)
{
    static const vc_cpuid_leaf zero = {0, 0, 0, 0, 0, 0};
    const vc_cpuid_leaf *l0 = find_leaf(leaves, n, 0, 0);
    const vc_cpuid_leaf *l1 = find_leaf(leaves, n, 1, 0);
    const vc_cpuid_leaf *l70 = find_leaf(leaves, n, 7, 0);
    const vc_cpuid_leaf *l71 = find_leaf(leaves, n, 7, 1);
    const vc_cpuid_leaf *l24 = find_leaf(leaves, n, 0x24, 0);
    uint32_t b = 0;

    memset(out, 0, sizeof *out);
    if (!l0) l0 = &zero;
    if (!l1) l1 = &zero;
    if (!l70) l70 = &zero;
    if (!l71) l71 = &zero;
    if (!l24) l24 = &zero;

    /* Leaf 0: vendor string is EBX, EDX, ECX in that order. */
    memcpy(out->vendor + 0, &l0->ebx, 4);
    memcpy(out->vendor + 4, &l0->edx, 4);
    memcpy(out->vendor + 8, &l0->ecx, 4);
    out->vendor[12] = '\0';

    /* Leaf 1 EAX: stepping[3:0] model[7:4] family[11:8] extmodel[19:16]
     * extfamily[27:20].  Extended family is added only for family 0xF;
     * extended model is prepended for families 6 and 0xF (SDM vol. 2A). */
    uint32_t sig = l1->eax;
    uint32_t family = (sig >> 8) & 0xF;
    uint32_t model = (sig >> 4) & 0xF;
    if (family == 0xF)
        family += (sig >> 20) & 0xFF;
    if (family == 0x6 || family >= 0xF)
        model |= ((sig >> 16) & 0xF) << 4;
    out->family = family;
    out->model = model;
    out->stepping = sig & 0xF;

    if (l1->ecx & BIT(0))  b |= FBIT(VC_F_SSE3);
    if (l1->ecx & BIT(9))  b |= FBIT(VC_F_SSSE3);
    if (l1->ecx & BIT(20)) b |= FBIT(VC_F_SSE42);
    if (l1->ecx & BIT(23)) b |= FBIT(VC_F_POPCNT);
    if (l1->ecx & BIT(26)) b |= FBIT(VC_F_XSAVE);
    if (l1->ecx & BIT(25)) b |= FBIT(VC_F_AES);
    if (l1->ecx & BIT(1))  b |= FBIT(VC_F_PCLMULQDQ);
    if (l1->ecx & BIT(19)) b |= FBIT(VC_F_SSE41);
    if (l1->ecx & BIT(28)) b |= FBIT(VC_F_AVX);

    if (l70->ebx & BIT(5))  b |= FBIT(VC_F_AVX2);
    if (l70->ebx & BIT(8))  b |= FBIT(VC_F_BMI2);
    if (l70->ebx & BIT(16)) b |= FBIT(VC_F_AVX512F);
    if (l70->ebx & BIT(17)) b |= FBIT(VC_F_AVX512DQ);
    if (l70->ebx & BIT(30)) b |= FBIT(VC_F_AVX512BW);
    if (l70->ebx & BIT(31)) b |= FBIT(VC_F_AVX512VL);
    if (l70->ecx & BIT(9))  b |= FBIT(VC_F_VAES);
    if (l70->ecx & BIT(10)) b |= FBIT(VC_F_VPCLMULQDQ);

    /* Leaf 0x24 is defined only when CPUID.(7,1):EDX[19] says AVX10 exists. */
    if (l71->edx & BIT(19)) {
        b |= FBIT(VC_F_AVX10);
        out->avx10_version = (uint8_t)(l24->ebx & 0xFF);
        if (l24->ebx & BIT(17)) b |= FBIT(VC_F_AVX10_256);
        if (l24->ebx & BIT(18)) b |= FBIT(VC_F_AVX10_512);
    }

    /* XCR0 is meaningful only when the OS set CR4.OSXSAVE (leaf 1 ECX[27]).
     * bit 1 SSE, bit 2 AVX (upper ymm), bits 5..7 opmask / ZMM_Hi256 /
     * Hi16_ZMM: every EVEX instruction, even a ymm one, needs all of them. */
    out->xcr0 = (l1->ecx & BIT(27)) ? xcr0 : 0;
    if ((out->xcr0 & 0x06) == 0x06) b |= FBIT(VC_F_OS_YMM);
    if ((out->xcr0 & 0xE6) == 0xE6) b |= FBIT(VC_F_OS_EVEX);

    if (strcmp(out->vendor, "GenuineIntel") == 0 && family == 6) {
        for (size_t i = 0; i < sizeof prefer_ymm_models / sizeof prefer_ymm_models[0]; i++)
            if (model == prefer_ymm_models[i])
                b |= FBIT(VC_F_PREFER_YMM);
    }

    out->bits = b;
    out->detected_bits = b;
}

/* ------------------------------------------------------------ live probe -- */

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    /* XGETBV with ECX=0 (XCR0).  Only called when OSXSAVE is set, otherwise
     * the instruction faults (#UD). */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int probe_live(vc_cpuid_leaf leaves[5], uint64_t *xcr0)
{
    int n = 0;
    uint32_t a, b, c, d;
    uint32_t max = __get_cpuid_max(0, NULL);

    *xcr0 = 0;
    __cpuid_count(0, 0, a, b, c, d);
    leaves[n++] = (vc_cpuid_leaf){0, 0, a, b, c, d};
    if (max >= 1) {
        __cpuid_count(1, 0, a, b, c, d);
        leaves[n++] = (vc_cpuid_leaf){1, 0, a, b, c, d};
        if (c & BIT(27))
            *xcr0 = read_xcr0();
    }
    if (max >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        leaves[n++] = (vc_cpuid_leaf){7, 0, a, b, c, d};
        if (a >= 1) { /* 7.0 EAX = highest subleaf of leaf 7 */
            __cpuid_count(7, 1, a, b, c, d);
            leaves[n++] = (vc_cpuid_leaf){7, 1, a, b, c, d};
        }
    }
    if (max >= 0x24) {
        __cpuid_count(0x24, 0, a, b, c, d);
        leaves[n++] = (vc_cpuid_leaf){0x24, 0, a, b, c, d};
    }
    return n;
}

/* ------------------------------------------------------------------ mask -- */

/* What a feature needs for dispatch purposes.  When a mask removes a feature
 * every feature that builds on it goes too, so "-avx" cannot leave a VAES
 * path standing on a CPU that "lost" AVX.  (AVX-512 code compiled with
 * target("avx512f") may contain VEX AVX2 instructions, hence AVX512F->AVX2.) */
static const struct {
    vc_feature f;
    uint32_t needs;
} feature_deps[] = {
    /* The SSE ladder, and what GCC's "avx" switches on with it (every AVX
     * tier's target string therefore lets the compiler use all of these). */
    {VC_F_SSSE3, FBIT(VC_F_SSE3)},
    {VC_F_SSE41, FBIT(VC_F_SSSE3)},
    {VC_F_SSE42, FBIT(VC_F_SSE41)},
    {VC_F_AVX, FBIT(VC_F_SSE42) | FBIT(VC_F_POPCNT) | FBIT(VC_F_XSAVE)},
    {VC_F_AVX2, FBIT(VC_F_AVX)},
    {VC_F_AVX512F, FBIT(VC_F_AVX2)},
    {VC_F_AVX512VL, FBIT(VC_F_AVX512F)},
    {VC_F_AVX512BW, FBIT(VC_F_AVX512F)},
    {VC_F_AVX512DQ, FBIT(VC_F_AVX512F)},
    {VC_F_VAES, FBIT(VC_F_AVX) | FBIT(VC_F_AES)},
    {VC_F_VPCLMULQDQ, FBIT(VC_F_AVX) | FBIT(VC_F_PCLMULQDQ)},
    {VC_F_AVX10, FBIT(VC_F_AVX2)},
    {VC_F_AVX10_256, FBIT(VC_F_AVX10)},
    {VC_F_AVX10_512, FBIT(VC_F_AVX10)},
    {VC_F_OS_EVEX, FBIT(VC_F_OS_YMM)},
};

/* Remove from bits every feature that (transitively) builds on one in gone. */
static uint32_t drop_dependants(uint32_t bits, uint32_t gone)
{
    int changed = 1;
    while (changed) {
        changed = 0;
        for (size_t i = 0; i < sizeof feature_deps / sizeof feature_deps[0]; i++) {
            uint32_t fb = FBIT(feature_deps[i].f);
            if ((bits & fb) && (feature_deps[i].needs & gone)) {
                bits &= ~fb;
                gone |= fb;
                changed = 1;
            }
        }
    }
    return bits;
}

static int feature_from_name(const char *s, size_t len)
{
    for (int f = 0; f < VC_F_COUNT; f++)
        if (strlen(feature_names[f]) == len && strncmp(feature_names[f], s, len) == 0)
            return f;
    return -1;
}

static char mask_error[256];

/* Parse "-a,+b,-c" (spaces around items allowed).  Returns 0 and sets *bits,
 * or -1 with mask_error set. */
static int apply_mask(const char *mask, uint32_t detected, uint32_t *bits)
{
    uint32_t out = detected;
    uint32_t removed = 0;
    const char *p = mask;

    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0') {
        *bits = detected;
        return 0;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        if (len < 2 || (p[0] != '-' && p[0] != '+')) {
            snprintf(mask_error, sizeof mask_error,
                     "VAESCRYPT_CPU_MASK: malformed item '%.*s' (expected -name or +name, "
                     "comma separated)", (int)(len > 40 ? 40 : len), p);
            return -1;
        }
        int f = feature_from_name(p + 1, len - 1);
        if (f < 0) {
            snprintf(mask_error, sizeof mask_error,
                     "VAESCRYPT_CPU_MASK: unknown feature '%.*s' (known: aes, pclmulqdq, "
                     "sse3, ssse3, sse41, sse42, popcnt, xsave, avx, avx2, bmi2, "
                     "avx512f/vl/bw/dq, vaes, vpclmulqdq, avx10, avx10_256, avx10_512, "
                     "os_ymm, os_evex, prefer_ymm)",
                     (int)(len - 1 > 40 ? 40 : len - 1), p + 1);
            return -1;
        }
        if (p[0] == '-') {
            out &= ~FBIT(f);
            removed |= FBIT(f);
        } else {
            if (!(detected & FBIT(f))) {
                snprintf(mask_error, sizeof mask_error,
                         "VAESCRYPT_CPU_MASK: '+%s' names a feature this CPU does not have "
                         "(a mask can only remove features or re-assert detected ones)",
                         feature_names[f]);
                return -1;
            }
            out |= FBIT(f);
            removed &= ~FBIT(f);
        }
        if (!end)
            break;
        p = end + 1;
    }
    /* Dependants of what was removed go too; everything else stays exactly
     * as detected (a profile that is odd to begin with is not "repaired"). */
    *bits = drop_dependants(out, removed);
    return 0;
}

static vc_cpu_features live;
static const char *live_error;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void probe_once(void)
{
    vc_cpuid_leaf leaves[5];
    uint64_t xcr0;
    int n = probe_live(leaves, &xcr0);
    vc_features_from_cpuid(&live, leaves, n, xcr0);

    const char *mask = getenv("VAESCRYPT_CPU_MASK");
    if (mask) {
        uint32_t bits;
        if (apply_mask(mask, live.detected_bits, &bits) == 0)
            live.bits = bits;
        else
            live_error = mask_error;
    }
}

const vc_cpu_features *vc_cpu_features_get(void)
{
    pthread_once(&live_once, probe_once);
    return &live;
}

const char *vc_dispatch_error(void)
{
    pthread_once(&live_once, probe_once);
    return live_error;
}
