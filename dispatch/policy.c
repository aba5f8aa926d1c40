/*
 * policy.c - features -> path, per (mode, direction).
 *
 * The whole rule lives here, in three pieces the matrix checks:
 *   vc_path_supported  can this CPU + OS run the path's instructions?  (Its
 *                      feature lists are the tiers' own declarations in
 *                      vc_tier_isa.h, not a copy.)
 *   vc_path_eligible   may the mode take the path at all?
 *   preference[][]     in which order are paths tried, per (mode, direction)?
 * plus two vetoes in vc_policy_select (prefer-ymm parts, AVX10 without 512).
 *
 * The policy is pure: every answer is a function of its arguments.  Which
 * paths the linking library has code for is one of them (`built`, a mask of
 * 1u << vc_path for one (mode, direction)); native/select.c computes it from
 * the tier tables and is the only caller.  Nothing here refers to native/.
 */
#include <stdio.h>
#include <string.h>

#include "vc_dispatch.h"
#include "vc_tier_isa.h"

#define HAS(f, x) VC_HAS(f, x)
#define PBIT(p) (1u << (unsigned)(p))

static const char *const path_names[VC_PATH_COUNT] = {
    "generic", "aesni", "vaes_avx2", "avx10_256", "avx512",
};
static const char *const mode_names[VC_MODE_COUNT] = {"gcm", "cfb128", "cfb8", "cfb1"};
static const char *const dir_names[VC_DIR_COUNT] = {"encrypt", "decrypt"};

const char *vc_path_name(vc_path p)
{
    return (unsigned)p < VC_PATH_COUNT ? path_names[p] : "?";
}
const char *vc_mode_name(vc_mode m)
{
    return (unsigned)m < VC_MODE_COUNT ? mode_names[m] : "?";
}
const char *vc_dir_name(vc_dir d)
{
    return (unsigned)d < VC_DIR_COUNT ? dir_names[d] : "?";
}

static int index_of(const char *const *names, int n, const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}
int vc_path_from_name(const char *name)
{
    return index_of(path_names, VC_PATH_COUNT, name);
}
int vc_mode_from_name(const char *name)
{
    return index_of(mode_names, VC_MODE_COUNT, name);
}

/* ------------------------------------------------------ the preference -- */

#define END (-1)
#define WIDE_FIRST {VC_PATH_AVX512, VC_PATH_AVX10_256, VC_PATH_VAES_AVX2, \
                    VC_PATH_AESNI, VC_PATH_GENERIC, END}

/* preference[mode][dir]: tried in order, first acceptable wins.
 *
 * CFB128 encryption is one serial chain (C_i = P_i ^ E(C_{i-1})): a wider
 * register cannot start block i+1 before block i is done, so the wide tiers
 * only pay off if their single-block latency beats AES-NI's.  Until the
 * measurement says so they are not in the list (they remain forceable).
 * CFB128 decryption is parallel (every E(C_{i-1}) is known up front). */
static const int preference[VC_MODE_COUNT][VC_DIR_COUNT][VC_PATH_COUNT + 1] = {
    [VC_MODE_GCM] = {WIDE_FIRST, WIDE_FIRST},
    [VC_MODE_CFB128] = {
        /* Becomes WIDE_FIRST when wide CFB128 encryption measures faster
         * than aesni (see above). */
        [VC_DIR_ENCRYPT] = {VC_PATH_AESNI, VC_PATH_GENERIC, END},
        [VC_DIR_DECRYPT] = WIDE_FIRST,
    },
    /* Eligibility (below) removes the VAES paths; listing only what may run
     * keeps the table honest. */
    [VC_MODE_CFB8] = {{VC_PATH_AESNI, VC_PATH_GENERIC, END},
                      {VC_PATH_AESNI, VC_PATH_GENERIC, END}},
    [VC_MODE_CFB1] = {{VC_PATH_AESNI, VC_PATH_GENERIC, END},
                      {VC_PATH_AESNI, VC_PATH_GENERIC, END}},
};

/* ----------------------------------------------------------- supported -- */

/* What each path's machine code needs, from the one declaration per tier
 * (vc_tier_isa.h): the tier files compile with target strings made from the
 * same lists.  aesni has two: its block part (key expansion, one block, the
 * CFB modes) needs AES-NI alone; GCM adds PCLMULQDQ and SSSE3. */
static const uint32_t need_by_path[VC_PATH_COUNT] = {
    [VC_PATH_GENERIC] = VC_ISA_MASK(VC_ISA_GENERIC),
    [VC_PATH_AESNI] = VC_ISA_MASK(VC_ISA_AESNI_GCM),
    [VC_PATH_VAES_AVX2] = VC_ISA_MASK(VC_ISA_VAES_AVX2),
    [VC_PATH_AVX10_256] = VC_ISA_MASK(VC_ISA_AVX10_256),
    [VC_PATH_AVX512] = VC_ISA_MASK(VC_ISA_AVX512),
};
#define AESNI_BLOCK_NEEDS VC_ISA_MASK(VC_ISA_AESNI_BLOCK)
_Static_assert((AESNI_BLOCK_NEEDS & ~VC_ISA_MASK(VC_ISA_AESNI_GCM)) == 0,
               "aesni GCM runs the block part too: its list must include it");

/* The features the path's code needs for the mode (the mode matters for
 * aesni only). */
static uint32_t path_needs(vc_mode mode, vc_path p)
{
    if ((unsigned)p >= VC_PATH_COUNT)
        return ~0u;
    if (p == VC_PATH_AESNI && mode != VC_MODE_GCM)
        return AESNI_BLOCK_NEEDS;
    return need_by_path[p];
}

/* Which features the path is missing, as a bitmask over vc_feature (0 =
 * runnable). */
static uint32_t path_missing_for(const vc_cpu_features *f, vc_mode mode, vc_path p)
{
    uint32_t have = f->bits;
    /* An AVX10/256 CPU runs the EVEX ymm code without reporting AVX-512. */
    if (p == VC_PATH_AVX10_256 && HAS(f, VC_F_AVX10) && HAS(f, VC_F_AVX10_256))
        have |= VC_ISA_AVX10_STANDS_IN;
    return path_needs(mode, p) & ~have;
}

/* Mode-independent: everything the path runs for any mode (aesni: GCM's
 * list, a superset of the block part's). */
static uint32_t path_missing(const vc_cpu_features *f, vc_path p)
{
    return path_missing_for(f, VC_MODE_GCM, p);
}

int vc_path_supported(const vc_cpu_features *f, vc_path p)
{
    return path_missing(f, p) == 0;
}

int vc_path_supported_for(const vc_cpu_features *f, vc_mode m, vc_path p)
{
    return path_missing_for(f, m, p) == 0;
}

/* ------------------------------------------------------------ eligible -- */

int vc_path_eligible(vc_mode m, vc_dir d, vc_path p)
{
    if ((unsigned)m >= VC_MODE_COUNT || (unsigned)d >= VC_DIR_COUNT ||
        (unsigned)p >= VC_PATH_COUNT)
        return 0;
    /* CFB8 and CFB1 are byte/bit serial: one AES block per output byte or
     * bit with a dependency on the previous one.  Only the xmm paths. */
    if (m == VC_MODE_CFB8 || m == VC_MODE_CFB1)
        return p == VC_PATH_AESNI || p == VC_PATH_GENERIC;
    return 1;
}

/* ------------------------------------------------------------- vetoes --- */

/* Why the policy declines a path this CPU could run (NULL: it does not). */
static const char *veto(const vc_cpu_features *f, vc_path p)
{
    if (p != VC_PATH_AVX512)
        return NULL;
    if (HAS(f, VC_F_PREFER_YMM))
        return "prefer-ymm model";
    if (HAS(f, VC_F_AVX10) && !HAS(f, VC_F_AVX10_512))
        return "AVX10 without 512-bit vectors";
    return NULL;
}

static int valid(vc_mode m, vc_dir d)
{
    return (unsigned)m < VC_MODE_COUNT && (unsigned)d < VC_DIR_COUNT;
}

vc_path vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built)
{
    if (!valid(m, d))
        return VC_PATH_GENERIC;
    for (const int *p = preference[m][d]; *p != END; p++) {
        vc_path path = (vc_path)*p;
        if (vc_path_eligible(m, d, path) && path_missing_for(f, m, path) == 0 &&
            !veto(f, path) && (built & PBIT(path)))
            return path;
    }
    return VC_PATH_GENERIC;
}

int vc_policy_available(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
                        int out[VC_PATH_COUNT])
{
    int n = 0;
    if (!valid(m, d))
        return 0;
    for (const int *p = preference[m][d]; *p != END; p++) {
        vc_path path = (vc_path)*p;
        if (vc_path_eligible(m, d, path) && path_missing_for(f, m, path) == 0 &&
            (built & PBIT(path)))
            out[n++] = path;
    }
    return n;
}

/* Append to buf at *pos, never overflowing; keeps counting for the total. */
static void put(char *buf, int buflen, int *pos, const char *s)
{
    size_t len = strlen(s);
    if (buf && *pos < buflen - 1) {
        size_t room = (size_t)(buflen - 1 - *pos);
        size_t n = len < room ? len : room;
        memcpy(buf + *pos, s, n);
        buf[*pos + (int)n] = '\0';
    }
    *pos += (int)len;
}

int vc_policy_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built, char *buf,
                      int buflen)
{
    int pos = 0;
    char tmp[160];
    if (buf && buflen > 0)
        buf[0] = '\0';
    if (!valid(m, d)) {
        put(buf, buflen, &pos, "invalid mode or direction");
        return pos;
    }
    vc_path chosen = vc_policy_select(f, m, d, built);
    snprintf(tmp, sizeof tmp, "%s/%s -> %s", vc_mode_name(m), vc_dir_name(d),
             vc_path_name(chosen));
    put(buf, buflen, &pos, tmp);
    int first = 1;
    for (const int *p = preference[m][d]; *p != END && *p != (int)chosen; p++) {
        vc_path path = (vc_path)*p;
        uint32_t miss = path_missing_for(f, m, path);
        put(buf, buflen, &pos, first ? " (skipped " : "; ");
        first = 0;
        put(buf, buflen, &pos, vc_path_name(path));
        put(buf, buflen, &pos, ": ");
        if (!vc_path_eligible(m, d, path)) {
            put(buf, buflen, &pos, "not eligible for the mode");
        } else if (miss) {
            put(buf, buflen, &pos, "missing");
            for (int x = 0; x < VC_F_COUNT; x++)
                if (miss & (1u << x)) {
                    put(buf, buflen, &pos, " ");
                    put(buf, buflen, &pos, vc_feature_name((vc_feature)x));
                }
        } else if (veto(f, path)) {
            put(buf, buflen, &pos, veto(f, path));
        } else {
            put(buf, buflen, &pos, "not built into this library");
        }
    }
    if (!first)
        put(buf, buflen, &pos, ")");
    return pos;
}
