/*
 * fault_ignore_xcr0.c - TEST ONLY, mutation fault "the dispatcher must
 * follow XCR0".
 *
 * Linked with --wrap for each policy entry point below
 * (tests/doubles/fault_builds.py): the policy is asked as if the OS always
 * saved ymm and zmm state.  The feature set the probe reports is untouched.
 */
#include "fault_marker.h"
#include "internal.h"

VC_FAULT_MARKER("IGNORE_XCR0");

#define DECLARE(ret, name, ...)                                                \
    ret __real_##name(__VA_ARGS__);                                            \
    ret __wrap_##name(__VA_ARGS__)
DECLARE(int, vc_path_supported, const vc_cpu_features *f, vc_path p);
DECLARE(int, vc_path_supported_for, const vc_cpu_features *f, vc_mode m, vc_path p);
DECLARE(vc_path, vc_policy_select, const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built);
DECLARE(int, vc_policy_available, const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
        int out[VC_PATH_COUNT]);
DECLARE(int, vc_policy_explain, const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
        char *buf, int buflen);

static const vc_cpu_features *os_saves_all(const vc_cpu_features *f, vc_cpu_features *copy)
{
    *copy = *f;
    copy->bits |= (1u << VC_F_OS_YMM) | (1u << VC_F_OS_EVEX);
    return copy;
}

int __wrap_vc_path_supported(const vc_cpu_features *f, vc_path p)
{
    vc_cpu_features c;
    return __real_vc_path_supported(os_saves_all(f, &c), p);
}

int __wrap_vc_path_supported_for(const vc_cpu_features *f, vc_mode m, vc_path p)
{
    vc_cpu_features c;
    return __real_vc_path_supported_for(os_saves_all(f, &c), m, p);
}

vc_path __wrap_vc_policy_select(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built)
{
    vc_cpu_features c;
    return __real_vc_policy_select(os_saves_all(f, &c), m, d, built);
}

int __wrap_vc_policy_available(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
                               int out[VC_PATH_COUNT])
{
    vc_cpu_features c;
    return __real_vc_policy_available(os_saves_all(f, &c), m, d, built, out);
}

int __wrap_vc_policy_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, uint32_t built,
                             char *buf, int buflen)
{
    vc_cpu_features c;
    return __real_vc_policy_explain(os_saves_all(f, &c), m, d, built, buf, buflen);
}
