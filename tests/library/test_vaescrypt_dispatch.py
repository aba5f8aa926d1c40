"""The dispatch rule as an executable test.

1. Synthetic CPUID profiles decoded by the library's own decoder
   (vc_features_from_cpuid) and run through the policy (vc_select_with), checked
   against the rule in /work/shared/DESIGN.md "Dispatcher policy" stated once below.
2. The live dispatcher under VAESCRYPT_CPU_MASK in subprocesses.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys

import pytest

import vaescrypt

# ----------------------------------------------------------- synthetic CPUs --

# (leaf, subleaf, register, bit) of each CPUID feature the decoder reads
CPUID_BITS = {
    "aes": (1, 0, "ecx", 25),
    "pclmulqdq": (1, 0, "ecx", 1),
    "sse3": (1, 0, "ecx", 0),
    "ssse3": (1, 0, "ecx", 9),
    "sse41": (1, 0, "ecx", 19),
    "sse42": (1, 0, "ecx", 20),
    "popcnt": (1, 0, "ecx", 23),
    "xsave": (1, 0, "ecx", 26),
    "avx": (1, 0, "ecx", 28),
    "avx2": (7, 0, "ebx", 5),
    "bmi2": (7, 0, "ebx", 8),
    "avx512f": (7, 0, "ebx", 16),
    "avx512dq": (7, 0, "ebx", 17),
    "avx512bw": (7, 0, "ebx", 30),
    "avx512vl": (7, 0, "ebx", 31),
    "vaes": (7, 0, "ecx", 9),
    "vpclmulqdq": (7, 0, "ecx", 10),
    "avx10": (7, 1, "edx", 19),
}
REG = {"eax": 2, "ebx": 3, "ecx": 4, "edx": 5}
VENDOR = {  # leaf 0 EBX, EDX, ECX
    "GenuineIntel": (0x756E6547, 0x49656E69, 0x6C65746E),
    "AuthenticAMD": (0x68747541, 0x69746E65, 0x444D4163),
}
XCR0 = {"none": 0, "ymm": 0x7, "evex": 0xE7}


def signature(family: int, model: int, stepping: int = 1) -> int:
    """Leaf 1 EAX for a display family/model."""
    base_fam = min(family, 0xF)
    ext_fam = family - 0xF if family >= 0xF else 0
    return stepping | (model & 0xF) << 4 | base_fam << 8 | (model >> 4) << 16 | ext_fam << 20


def profile(
    feats: set[str],
    *,
    os_state: str = "evex",
    vendor: str = "GenuineIntel",
    family: int = 6,
    model: int = 0x8F,
    avx10_vl: tuple[int, ...] = (),
) -> tuple[list[tuple[int, int, int, int, int, int]], int]:
    eb, ed, ec = VENDOR[vendor]
    rows = {
        (0, 0): [0x24, eb, ec, ed],  # max leaf; vendor in EBX, EDX, ECX order
        (1, 0): [signature(family, model), 0, 0, 0],
        (7, 0): [1, 0, 0, 0],
        (7, 1): [0, 0, 0, 0],
        (0x24, 0): [0, 0, 0, 0],
    }
    for f in feats:
        leaf, sub, reg, bit = CPUID_BITS[f]
        rows[(leaf, sub)][REG[reg] - 2] |= 1 << bit
    if os_state != "none":
        rows[(1, 0)][2] |= 1 << 27  # OSXSAVE
    if "avx10" in feats:
        rows[(0x24, 0)][1] = 1 | sum(1 << {128: 16, 256: 17, 512: 18}[v] for v in avx10_vl)
    leaves = [(lf, sl, *regs) for (lf, sl), regs in rows.items()]
    return leaves, XCR0[os_state]


# The rule, stated once for the test (DESIGN.md "Dispatcher policy"); the
# feature lists are the tiers' ISA declarations (dispatch/include/vc_tier_isa.h)
# written out: what GCC may use under each tier's target string.
AESNI_BLOCK = {"aes"}
AESNI_GCM = AESNI_BLOCK | {"pclmulqdq", "sse3", "ssse3"}
# what GCC's "avx" brings along; the wide tiers also run the aesni block part
AVX_BASE = AESNI_BLOCK | {"sse3", "ssse3", "sse41", "sse42", "popcnt", "xsave", "avx"}
VAES_AVX2 = AVX_BASE | {"avx2", "vaes", "vpclmulqdq", "os_ymm"}
EVEX = VAES_AVX2 | {"os_evex"}
FVLBW = {"avx512f", "avx512vl", "avx512bw"}


def rule_supported(f: frozenset[str], path: str, mode: str) -> bool:
    if path == "generic":
        return True
    if path == "aesni":
        return (AESNI_GCM if mode == "gcm" else AESNI_BLOCK) <= f
    if path == "vaes_avx2":
        return VAES_AVX2 <= f
    if path == "avx10_256":
        return EVEX <= f and (FVLBW <= f or {"avx10", "avx10_256"} <= f)
    if path == "avx512":
        return EVEX | FVLBW <= f
    raise AssertionError(path)


def rule_vetoed(f: frozenset[str], path: str) -> bool:
    return path == "avx512" and ("prefer_ymm" in f or ("avx10" in f and "avx10_512" not in f))


def rule_eligible(mode: str, path: str) -> bool:
    return mode in ("gcm", "cfb128") or path in ("aesni", "generic")


WIDE_ORDER = ["avx512", "avx10_256", "vaes_avx2", "aesni", "generic"]


def rule_order(mode: str, direction: str) -> list[str]:
    if mode == "cfb128" and direction == "encrypt":
        # serial chain: wide tiers not preferred (see dispatch/policy.c)
        return ["aesni", "generic"]
    return [p for p in WIDE_ORDER if rule_eligible(mode, p)]


def rule_select(f: frozenset[str], mode: str, direction: str) -> str:
    for p in rule_order(mode, direction):
        if (
            rule_supported(f, p, mode)
            and not rule_vetoed(f, p)
            and vaescrypt.path_implemented(mode, direction, p)
        ):
            return p
    return "generic"


# What CPUs report besides the names in the profiles below: the SSE ladder
# (Nehalem on) and, from Sandy Bridge on, XSAVE.
SSE_LADDER = {"sse3", "ssse3", "sse41", "sse42", "popcnt"}
AVX_LEGACY = SSE_LADDER | {"xsave"}

REAL_CPUS = {
    # name: (features, os, vendor, family, model, avx10 VLs), expected gcm/encrypt
    "westmere": (({"aes", "pclmulqdq", *SSE_LADDER}, "none", "GenuineIntel", 6, 0x2C, ()), "aesni"),
    "haswell": (
        (
            {"aes", "pclmulqdq", *AVX_LEGACY, "avx", "avx2", "bmi2"},
            "ymm",
            "GenuineIntel",
            6,
            0x3C,
            (),
        ),
        "aesni",
    ),
    "alderlake": (
        (
            {"aes", "pclmulqdq", *AVX_LEGACY, "avx", "avx2", "bmi2", "vaes", "vpclmulqdq"},
            "ymm",
            "GenuineIntel",
            6,
            0x97,
            (),
        ),
        "vaes_avx2",
    ),
    "skylake-x": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
            },
            "evex",
            "GenuineIntel",
            6,
            0x55,
            (),
        ),
        "aesni",
    ),
    "icelake-server": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
            },
            "evex",
            "GenuineIntel",
            6,
            0x6A,
            (),
        ),
        "avx10_256",
    ),
    "sapphirerapids": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
            },
            "evex",
            "GenuineIntel",
            6,
            0x8F,
            (),
        ),
        "avx512",
    ),
    "graniterapids": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
                "avx10",
            },
            "evex",
            "GenuineIntel",
            6,
            0xAD,
            (128, 256, 512),
        ),
        "avx512",
    ),
    "gnr256": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
                "avx10",
            },
            "evex",
            "GenuineIntel",
            6,
            0xAD,
            (128, 256),
        ),
        "avx10_256",
    ),
    "zen4": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "bmi2",
                "avx512f",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
            },
            "evex",
            "AuthenticAMD",
            0x19,
            0x11,
            (),
        ),
        "avx512",
    ),
    "zen4-os-without-avx512-state": (
        (
            {
                "aes",
                "pclmulqdq",
                *AVX_LEGACY,
                "avx",
                "avx2",
                "avx512f",
                "avx512bw",
                "avx512vl",
                "vaes",
                "vpclmulqdq",
            },
            "ymm",
            "AuthenticAMD",
            0x19,
            0x11,
            (),
        ),
        "vaes_avx2",
    ),
    "no-aes": (({*SSE_LADDER, "pclmulqdq"}, "none", "GenuineIntel", 6, 0x1A, ()), "generic"),
    # hypervisor models: qemu64 (SSE3, no SSSE3/SSE4.1) with AES-NI added
    "qemu64+aes": (({"sse3", "aes"}, "none", "AuthenticAMD", 0xF, 0x6B, ()), "generic"),
    "qemu64+aes+pclmul": (
        ({"sse3", "aes", "pclmulqdq"}, "none", "AuthenticAMD", 0xF, 0x6B, ()),
        "generic",
    ),
    "qemu64+aes+pclmul+ssse3": (
        ({"sse3", "ssse3", "aes", "pclmulqdq"}, "none", "AuthenticAMD", 0xF, 0x6B, ()),
        "aesni",
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_CPUS))
def test_real_cpu_profiles(name: str) -> None:
    (feats, os_state, vendor, fam, model, vl), expected = REAL_CPUS[name]
    leaves, xcr0 = profile(
        set(feats), os_state=os_state, vendor=vendor, family=fam, model=model, avx10_vl=vl
    )
    info = vaescrypt.features_from_cpuid(leaves, xcr0)
    assert info.vendor == vendor and (info.family, info.model) == (fam, model)
    sel = vaescrypt.select_for_cpuid(leaves, xcr0)
    assert sel[("gcm", "encrypt")] == rule_select(info.features, "gcm", "encrypt")
    if vaescrypt.path_implemented("gcm", "encrypt", expected):
        assert sel[("gcm", "encrypt")] == expected, vaescrypt.explain_for_cpuid(
            leaves, xcr0, "gcm", "encrypt"
        )
    for mode in ("cfb8", "cfb1"):
        for d in ("encrypt", "decrypt"):
            assert sel[(mode, d)] in ("aesni", "generic")


@pytest.mark.parametrize("name", ["qemu64+aes", "qemu64+aes+pclmul"])
def test_aes_without_ssse3(name: str) -> None:
    """AES-NI without SSSE3/SSE4.1 (issue 13): the CFB modes keep the aesni
    block part (AES on SSE2), GCM needs SSSE3 (PSHUFB) and falls to generic."""
    (feats, os_state, vendor, fam, model, _vl), _ = REAL_CPUS[name]
    leaves, xcr0 = profile(set(feats), os_state=os_state, vendor=vendor, family=fam, model=model)
    sel = vaescrypt.select_for_cpuid(leaves, xcr0)
    for (mode, d), path in sel.items():
        want = "generic" if mode == "gcm" else "aesni"
        if not vaescrypt.path_implemented(mode, d, want):
            want = "generic"
        assert path == want, (mode, d, vaescrypt.explain_for_cpuid(leaves, xcr0, mode, d))
    explained = vaescrypt.explain_for_cpuid(leaves, xcr0, "gcm", "encrypt")
    assert "aesni: missing" in explained and "ssse3" in explained, explained


def test_decoder_fields() -> None:
    leaves, xcr0 = profile({"aes", "avx10"}, avx10_vl=(256,), family=6, model=0x6C)
    info = vaescrypt.features_from_cpuid(leaves, xcr0)
    assert info.features == {"aes", "avx10", "avx10_256", "os_ymm", "os_evex", "prefer_ymm"}
    assert info.avx10_version == 1 and info.xcr0 == 0xE7
    # XCR0 is ignored without OSXSAVE; leaf 0x24 ignored without the AVX10 bit
    leaves, _ = profile({"aes"}, os_state="none")
    assert vaescrypt.features_from_cpuid(leaves, 0xE7).features == {"aes"}
    leaves, xcr0 = profile({"aes"})
    leaves = [(lf, sl, a, (0x7 << 16) if lf == 0x24 else b, c, d) for lf, sl, a, b, c, d in leaves]
    assert "avx10_512" not in vaescrypt.features_from_cpuid(leaves, xcr0).features
    # family 0xF + extended family (AMD Zen 4: 0x19), extended model folded in
    leaves, xcr0 = profile(set(), vendor="AuthenticAMD", family=0x19, model=0x61)
    info = vaescrypt.features_from_cpuid(leaves, xcr0)
    assert (info.family, info.model) == (0x19, 0x61) and "prefer_ymm" not in info.features
    # prefer-ymm is Intel family 6 only
    leaves, xcr0 = profile(set(), vendor="AuthenticAMD", family=6, model=0x55)
    assert "prefer_ymm" not in vaescrypt.features_from_cpuid(leaves, xcr0).features


def test_policy_over_feature_combinations() -> None:
    """Random feature sets (every decoded bit independent) against the stated rule."""
    r = random.Random(7)
    names = sorted(CPUID_BITS)
    prefer_models = [0x55, 0x6A, 0x6C, 0x7D, 0x7E, 0x9D, 0x8C, 0x8D]
    for _ in range(3000):
        feats = {n for n in names if r.random() < (0.95 if n in AVX_LEGACY else 0.75)}
        vl = tuple(v for v in (128, 256, 512) if r.random() < 0.6)
        model = r.choice([*prefer_models, 0x8F, 0xAD, 0x97])
        os_state = r.choice(["none", "ymm", "evex", "evex"])
        leaves, xcr0 = profile(feats, os_state=os_state, model=model, avx10_vl=vl)
        info = vaescrypt.features_from_cpuid(leaves, xcr0)
        sel = vaescrypt.select_for_cpuid(leaves, xcr0)
        for (mode, d), got in sel.items():
            assert got == rule_select(info.features, mode, d), (
                sorted(info.features),
                mode,
                d,
                vaescrypt.explain_for_cpuid(leaves, xcr0, mode, d),
            )


def test_cfb8_cfb1_never_wide_exhaustive() -> None:
    """Every combination of the features a wide path needs: CFB8/CFB1 stay xmm."""
    wide = ["avx2", "avx512f", "avx512vl", "avx512bw", "vaes", "vpclmulqdq", "avx10"]
    base = {"aes", "pclmulqdq", "avx", *AVX_LEGACY}
    for combo in itertools.product([False, True], repeat=len(wide)):
        feats = base | {f for f, on in zip(wide, combo) if on}
        leaves, xcr0 = profile(feats, avx10_vl=(128, 256, 512))
        sel = vaescrypt.select_for_cpuid(leaves, xcr0)
        for mode in ("cfb8", "cfb1"):
            for d in ("encrypt", "decrypt"):
                assert sel[(mode, d)] in ("aesni", "generic")


# ------------------------------------------------------ live, masked CPUs --

PROBE = """
import json, vaescrypt
out = {"features": sorted(vaescrypt.cpu_features()),
       "selected": {f"{m}/{d}": vaescrypt.selected(m, d)
                    for m in vaescrypt.MODES for d in vaescrypt.DIRECTIONS}}
print(json.dumps(out))
"""


def run_masked(mask: str | None, code: str = PROBE) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("VAESCRYPT_CPU_MASK", None)
    if mask is not None:
        env["VAESCRYPT_CPU_MASK"] = mask
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def masked(mask: str) -> dict[str, object]:
    proc = run_masked(mask)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


HOST = vaescrypt.cpu_features()


@pytest.mark.skipif("aes" not in HOST, reason="host has no AES-NI")
def test_mask_minus_aes_gives_generic() -> None:
    res = masked("-aes")
    assert "aes" not in res["features"] and "vaes" not in res["features"]
    assert res["selected"]["gcm/encrypt"] == "generic"
    assert res["selected"]["cfb8/decrypt"] == "generic"


@pytest.mark.skipif("avx512f" not in HOST, reason="host has no AVX-512")
def test_mask_minus_avx512f_stops_avx512() -> None:
    res = masked("-avx512f")
    for key, path in res["selected"].items():  # type: ignore[union-attr]
        assert path != "avx512", key
        if "avx10_256" not in HOST:
            assert path != "avx10_256", key
    assert not {"avx512vl", "avx512bw", "avx512dq"} & set(res["features"])  # type: ignore[arg-type]


@pytest.mark.skipif("avx512f" not in HOST, reason="host has no AVX-512")
def test_mask_readd_detected_feature() -> None:
    res = masked(" -avx512f , +avx512f ")
    assert set(res["features"]) == set(HOST)  # type: ignore[arg-type]


MASKS = [
    "",
    "-os_evex",
    "-os_ymm",
    "-avx2",
    "-vaes",
    "-vpclmulqdq",
    "-avx512bw",
    "-pclmulqdq",
    "-sse41",
    "-ssse3",
    "-sse3",
    "-popcnt",
    "-xsave",
    "-avx",
    "-avx512vl,-vaes",
    "-aes,-pclmulqdq",
]


@pytest.mark.parametrize("mask", MASKS)
def test_masks_follow_rule(mask: str) -> None:
    res = masked(mask)
    f = frozenset(res["features"])  # type: ignore[arg-type]
    for key, path in res["selected"].items():  # type: ignore[union-attr]
        mode, d = key.split("/")
        assert path == rule_select(f, mode, d), (mask, key)
        if mode in ("cfb8", "cfb1"):
            assert path in ("aesni", "generic")


@pytest.mark.parametrize(
    ("mask", "fragment"),
    [
        ("-foo", "unknown feature 'foo'"),
        ("avx2", "malformed"),
        ("-avx2,,-aes", "malformed"),
        ("+avx10_512", "does not have") if "avx10_512" not in HOST else ("-", "malformed"),
    ],
)
def test_bad_mask_is_one_line_error(mask: str, fragment: str) -> None:
    code = (
        "import vaescrypt\n"
        "try:\n    vaescrypt.AESGCM(bytes(16))\n"
        "except vaescrypt.CpuMaskError as e:\n    print(e)\n"
        "else:\n    print('no error')\n"
        "try:\n    vaescrypt.selected('gcm', 'encrypt')\n"
        "except ValueError as e:\n    print('again', type(e).__name__)\n"
    )
    proc = run_masked(mask, code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and fragment in lines[0] and "VAESCRYPT_CPU_MASK" in lines[0]
    assert lines[1] == "again CpuMaskError"


@pytest.mark.skipif("aes" not in HOST, reason="host has no AES-NI")
def test_cli_cfb8_decrypt_is_aesni() -> None:
    proc = run_masked(None, "import vaescrypt; print(vaescrypt.selected('cfb8','decrypt'))")
    assert proc.returncode == 0, proc.stderr
    want = "aesni" if vaescrypt.path_implemented("cfb8", "decrypt", "aesni") else "generic"
    assert proc.stdout.strip() == want


def test_forcing_rules() -> None:
    for mode, seg in (("cfb8", 8), ("cfb1", 1)):
        for wide in ("vaes_avx2", "avx10_256", "avx512"):
            with pytest.raises(vaescrypt.UnsupportedImplementation):
                vaescrypt.AESCFB(bytes(16), seg, impl=wide)
            assert not vaescrypt.path_eligible(mode, "encrypt", wide)
    for p in vaescrypt.PATHS:
        if not vaescrypt.path_supported(p, "gcm"):
            with pytest.raises(vaescrypt.UnsupportedImplementation):
                vaescrypt.AESGCM(bytes(16), impl=p)
    for mode in vaescrypt.MODES:
        for d in vaescrypt.DIRECTIONS:
            sel = vaescrypt.selected(mode, d)
            avail = vaescrypt.available(mode, d)
            assert not avail or sel in avail
            assert all(vaescrypt.path_usable(mode, d, p) for p in avail)
