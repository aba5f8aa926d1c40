"""Four more dispatchers nobody here wrote: the AES-GCM of Debian 12's
libgcrypt 1.10.1, nettle 3.8.1, GnuTLS 3.7.9 and libsodium 1.0.18
(examples/distro_gcm).

Under `sdematrix exec`, in each CPUID mode the host has, on nine models (no
SSSE3, SSSE3 without AES-NI, AES-NI without AVX, AVX, AVX2, VAES on Intel
server, hybrid client and AMD parts, and a VAES part whose XCR0 has no YMM
state):

* each library's own report of what it detected is what the model's CPUID
  and XCR0 give by that library's rule, written out below from its source
  (a presentation slip, a leaf or bit or XGETBV answered wrongly, shows here
  as a flag that differs);
* its instruction mix follows from that (gcm_libs.expect.yaml: AES-NI,
  SSSE3, VAES or none, no VEX where AVX is unusable), the chip check is
  clean, and every ciphertext and tag equals `cryptography`'s;
* GnuTLS's answer to AES-128-GCM with a 32-byte key depends on the CPU:
  its accelerated ciphers (SSSE3, AES-NI) run AES-256-GCM, its generic one
  (a CPU without either: p4p here) rejects the key;
* a caller that ignores libsodium's ``crypto_aead_aes256gcm_is_available()``
  runs AES-NI on nhm: the chip check and the expectations name libsodium.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    cli_env,
    read_models,
    run_cli,
    skip_unless_ptrace_runs,
)

from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import CpuModel

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "examples" / "distro_gcm"
SCRIPT = EXAMPLE / "gcm_libs.py"
EXPECT = EXAMPLE / "gcm_libs.expect.yaml"
MODELS = ["p4p", "nhm", "wsm", "snb", "hsw", "icl", "adl", "zen4", "spr_xcr0_sse"]
# variables that make these libraries skip their CPUID dispatch (a host may
# set them): the tests ask what each dispatcher chooses, so none is inherited
OVERRIDES = ("NETTLE_FAT_OVERRIDE", "GNUTLS_CPUID_OVERRIDE", "GNUTLS_DEBUG_LEVEL")
GCRYPT_DENY = Path("/etc/gcrypt/hwf.deny")  # libgcrypt's own switch-off list (src/hwfeatures.c)


def _bit(v: int, n: int) -> bool:
    return bool(v >> n & 1)


def _cpuid(model: CpuModel, leaf: int) -> tuple[int, int, int, int]:
    """Subleaf 0 of a basic leaf as the tracer answers it (tracer/profile.c):
    above the max basic leaf an Intel CPU gives the highest basic leaf, an
    AMD CPU zeros; an unlisted leaf below it is zeros."""
    top = model.leaf(0)
    assert top is not None
    if leaf > top.eax:
        if model.vendor != "GenuineIntel":
            return (0, 0, 0, 0)
        leaf = top.eax
    lf = model.leaf(leaf)
    return (lf.eax, lf.ebx, lf.ecx, lf.edx) if lf else (0, 0, 0, 0)


def _family_model(eax: int) -> tuple[int, int]:
    family = (eax >> 8 & 0xF) + (eax >> 20 & 0xFF)
    return family, (eax >> 4 & 0xF) + (eax >> 12 & 0xF0)


# libgcrypt 1.10.1 src/hwf-x86.c: Intel family 6 models with fast SHLD, and
# the Haswell models whose VPGATHER it avoids (it avoids it on every
# non-Intel CPU too)
GCRYPT_FAST_SHLD = {0x2A, 0x2D, 0x3A, 0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x4F, 0x56, 0x47, 0x4E,
                    0x5E, 0x8E, 0x9E, 0x55, 0x66}  # fmt: skip
GCRYPT_SLOW_VPGATHER = {0x3C, 0x3F, 0x45, 0x46}


def gcrypt_hwflist(model: CpuModel) -> set[str]:
    """libgcrypt 1.10.1's x86 hwflist for the model (src/hwf-x86.c,
    detect_x86_gnuc): leaf 1 ECX/EDX bits; AVX and AVX2 only with OSXSAVE
    and XCR0's SSE and YMM state; leaf 7 only when the max leaf is >= 7 and
    SSE3 is set; VAES + VPCLMULQDQ from CPUID alone (rijndael.c then also
    asks for AVX2 before taking its VAES code)."""
    intel = model.vendor == "GenuineIntel"
    eax1, _, ecx1, edx1 = _cpuid(model, 1)
    family, mdl = _family_model(eax1)
    os_ymm = _bit(ecx1, 27) and model.xcr0 & 0x6 == 0x6
    have = {
        "intel-cpu": intel,
        "intel-fast-shld": intel and family == 6 and mdl in GCRYPT_FAST_SHLD,
        "intel-pclmul": _bit(ecx1, 1),
        "intel-ssse3": _bit(ecx1, 9),
        "intel-sse4.1": _bit(ecx1, 19),
        "intel-aesni": _bit(ecx1, 25),
        "intel-avx": _bit(ecx1, 28) and os_ymm,
        "intel-rdrand": _bit(ecx1, 30),
        "intel-rdtsc": _bit(edx1, 4),
    }
    if model.leaf(0).eax >= 7 and _bit(ecx1, 0):  # type: ignore[union-attr]
        _, ebx7, ecx7, _ = _cpuid(model, 7)
        avoid_vpgather = not intel or (family == 6 and mdl in GCRYPT_SLOW_VPGATHER)
        have["intel-bmi2"] = _bit(ebx7, 8)
        have["intel-avx2"] = _bit(ebx7, 5) and os_ymm
        have["intel-fast-vpgather"] = have["intel-avx2"] and not avoid_vpgather
        have["intel-shaext"] = _bit(ebx7, 29)
        have["intel-vaes-vpclmul"] = _bit(ecx7, 9) and _bit(ecx7, 10)
    return {k for k, v in have.items() if v} - _gcrypt_denied()


def _gcrypt_denied() -> set[str]:
    """Features the host's /etc/gcrypt/hwf.deny switches off (names separated
    by blanks, colons or commas; '#' starts a comment)."""
    if not GCRYPT_DENY.is_file():
        return set()
    text = "\n".join(ln.split("#", 1)[0] for ln in GCRYPT_DENY.read_text().splitlines())
    return set(re.split(r"[\s:,]+", text)) - {""}


def nettle_features(model: CpuModel) -> str:
    """nettle 3.8.1's fat-x86_64.c line: the vendor from leaf 0, aesni and
    pclmul from leaf 1 ECX, sha_ni from leaf 7 EBX[29] (read without
    checking the max leaf: above it, the tracer's hardware rule applies)."""
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(model.vendor, "other")
    _, _, ecx1, _ = _cpuid(model, 1)
    ebx7 = _cpuid(model, 7)[1]
    flags = [("aesni", _bit(ecx1, 25)), ("sha_ni", _bit(ebx7, 29)), ("pclmul", _bit(ecx1, 1))]
    return "cpu features: vendor:" + vendor + "".join("," + n for n, on in flags if on)


def gnutls_said(model: CpuModel) -> list[str]:
    """GnuTLS 3.7.9's lib/accelerated/x86/x86-common.c (register_x86_intel_crypto):
    nothing unless the vendor is Intel or AMD; leaf 1 ECX and (max leaf >= 7)
    leaf 7 EBX, with AVX cleared unless OSXSAVE and XCR0's SSE and YMM
    state; SSSE3, SHA, AES-NI, then GCM with PCLMULQDQ, its AVX variant
    where AVX and MOVBE."""
    if model.vendor not in ("GenuineIntel", "AuthenticAMD"):
        return []
    _, _, ecx1, _ = _cpuid(model, 1)
    ebx7 = _cpuid(model, 7)[1] if model.leaf(0).eax >= 7 else 0  # type: ignore[union-attr]
    avx = _bit(ecx1, 28) and _bit(ecx1, 27) and model.xcr0 & 0x6 == 0x6
    said = []
    if _bit(ecx1, 9):
        said.append("Intel SSSE3 was detected")
    if _bit(ebx7, 29):
        said.append("Intel SHA was detected")
    if _bit(ecx1, 25):
        said.append("Intel AES accelerator was detected")
        if _bit(ecx1, 1):
            avx_gcm = " (AVX)" if avx and _bit(ecx1, 22) else ""
            said.append(f"Intel GCM accelerator{avx_gcm} was detected")
    return said


def gnutls_mismatch(model: CpuModel) -> str:
    """What GnuTLS does with AES-128-GCM and a 32-byte key: its accelerated
    GCM (SSSE3's, or AES-NI + PCLMULQDQ's) sizes the key by its length
    (aes-gcm-x86-ssse3.c, aes-gcm-x86-pclmul*.c) and runs AES-256; the
    generic nettle cipher checks it (lib/nettle/cipher.c,
    wrap_nettle_cipher_setkey): GNUTLS_E_INVALID_REQUEST, -50."""
    said = gnutls_said(model)
    accelerated = "Intel SSSE3 was detected" in said or any("GCM" in s for s in said)
    return "accepted, ciphered as AES-256" if accelerated else "rejected -50"


def sodium_has(model: CpuModel) -> dict[str, bool]:
    """libsodium 1.0.18's sodium/runtime.c: AVX needs AVX + XSAVE + OSXSAVE
    and XCR0's SSE and YMM state; AVX2 needs AVX and leaf 7 EBX[5]; AVX512F
    needs AVX2, leaf 7 EBX[16] and XCR0's opmask and ZMM state."""
    _, _, ecx1, edx1 = _cpuid(model, 1)
    ebx7 = _cpuid(model, 7)[1]
    avx = _bit(ecx1, 28) and _bit(ecx1, 26) and _bit(ecx1, 27) and model.xcr0 & 0x6 == 0x6
    avx2 = avx and _bit(ebx7, 5)
    return {
        "sse2": _bit(edx1, 26),
        "sse3": _bit(ecx1, 0),
        "ssse3": _bit(ecx1, 9),
        "sse41": _bit(ecx1, 19),
        "avx": avx,
        "avx2": avx2,
        "avx512f": avx2 and _bit(ebx7, 16) and model.xcr0 & 0xE0 == 0xE0,
        "pclmul": _bit(ecx1, 1),
        "aesni": _bit(ecx1, 25),
    }


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gcm_libs", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _reference(n: int) -> str:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as e:  # the test extra installs it: missing is a broken setup
        pytest.fail(f"cryptography not importable ({e}); pip install -e '.[test]'")
    g = _example()
    return AESGCM(g.KEY).encrypt(g.NONCE, g.pattern(n), g.AAD).hex()


def _env() -> dict[str, str]:
    return {k: v for k, v in cli_env().items() if k not in OVERRIDES}


def _isa_sets(out: Path, model: str, image: str) -> dict[str, int]:
    sets: dict[str, int] = {}
    for f in json.loads((out / model / "mix.json").read_text())["functions"]:
        if image in Path(f["image"]).name:
            for s, n in f["by_isa_set"].items():
                sets[s] = sets.get(s, 0) + n
    return sets


def test_oracles_read_the_profiles_the_way_the_libraries_do() -> None:
    """The rules above, on profiles whose answers are known from the parts:
    a Haswell has AVX2 but slow VPGATHER and no VAES; Ice Lake has VAES;
    an XCR0 without YMM state hides AVX/AVX2 from both libraries but not
    libgcrypt's CPUID-only VAES flag; Zen 4 is not an Intel CPU."""
    models = load_matrix(SHIPPED_MATRIX).models
    hsw, icl = gcrypt_hwflist(models["hsw"]), gcrypt_hwflist(models["icl"])
    assert {"intel-avx2", "intel-fast-shld"} <= hsw and "intel-fast-vpgather" not in hsw
    assert "intel-vaes-vpclmul" not in hsw and "intel-vaes-vpclmul" in icl
    sse = gcrypt_hwflist(models["spr_xcr0_sse"])
    assert "intel-vaes-vpclmul" in sse and not {"intel-avx", "intel-avx2"} & sse
    assert not sodium_has(models["spr_xcr0_sse"])["avx"] and sodium_has(models["spr"])["avx512f"]
    assert "intel-cpu" not in gcrypt_hwflist(models["zen4"])
    assert nettle_features(models["zen4"]) == "cpu features: vendor:amd,aesni,sha_ni,pclmul"
    assert nettle_features(models["nhm"]) == "cpu features: vendor:intel"
    assert gnutls_said(models["snb"])[-1] == "Intel GCM accelerator was detected"  # no MOVBE
    assert gnutls_said(models["hsw"])[-1] == "Intel GCM accelerator (AVX) was detected"
    assert gnutls_said(models["spr_xcr0_sse"])[-1] == "Intel GCM accelerator was detected"
    assert gnutls_mismatch(models["p4p"]) == "rejected -50"
    assert gnutls_mismatch(models["nhm"]).startswith("accepted")  # SSSE3 AES-GCM


@pytest.mark.parametrize("mode", ["fault", "bp"])
def test_distro_gcm_libraries_follow_the_model(mode: str, tmp_path: Path) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, MODELS, mode)
    n = 4096  # long enough for libgcrypt's bulk (VAES) CTR
    out = tmp_path / "out"
    p = run_cli(
        "exec", "--cpuid-mode", mode, "--cpu", ",".join(MODELS), "--jobs", "2",
        "--expect", str(EXPECT), "--out", str(out),
        "--", sys.executable, "-I", str(SCRIPT), str(n),
        env=_env(),
        timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    res = read_models(out)
    ref = _reference(n)
    models = load_matrix(SHIPPED_MATRIX).models
    for m in MODELS:
        model = models[m]
        assert res[m]["status"] == "pass" and res[m]["violations"] == [], (m, res[m]["reasons"])
        assert res[m]["meta"]["expectations_applied"] >= 3, (m, res[m]["meta"])
        r = json.loads((out / m / "stdout").read_text())
        # each dispatcher's own report, against its rule on the model's CPUID
        hwf, said = gcrypt_hwflist(model), gnutls_said(model)
        assert set(r["gcrypt"]["hwflist"]) == hwf, m
        assert r["nettle"]["said"][1] == nettle_features(model), (m, r["nettle"]["said"])
        has = sodium_has(model)
        assert r["sodium"]["has"] == has, m
        available = has["aesni"] and has["pclmul"]
        assert r["sodium"]["aes256gcm_available"] is available, m
        # known answers: every library that ran GCM agrees with cryptography
        assert r["gcrypt"]["ct"] == ref and r["nettle"]["ct"] == ref, m
        assert r["sodium"]["ct"] == (ref if available else None), m
        assert r["gnutls"]["said"] == said, (m, r["gnutls"]["said"])
        assert r["gnutls"]["ct"] == ref, m
        assert r["gnutls"]["aes128_with_32_byte_key"] == gnutls_mismatch(model), m
        # the path each one took, beyond what the expectations require
        gcrypt = _isa_sets(out, m, "libgcrypt")
        vaes = {"intel-vaes-vpclmul", "intel-avx2"} <= hwf
        assert (gcrypt.get("VAES", 0) > 0) is vaes, (m, gcrypt)
        assert (gcrypt.get("AES", 0) > 0) is has["aesni"], (m, gcrypt)
        if not has["aesni"]:  # SSSE3 vector-permutation AES, or tables
            assert (gcrypt.get("SSSE3", 0) > 0) is has["ssse3"], (m, gcrypt)
        # the expectations that name a path apply exactly where the oracles
        # say the library takes it
        applied = {c["name"] for c in res[m]["checks"]}
        assert any(a.startswith("libgcrypt's VAES CTR") for a in applied) is vaes, (m, applied)
        avx_gcm = "Intel GCM accelerator (AVX) was detected" in said
        assert any(a.startswith("GnuTLS's AVX GCM") for a in applied) is avx_gcm, (m, applied)
        assert any(a.startswith("no AES-NI or VAES") for a in applied) is not has["aesni"], m


def test_ignoring_libsodium_availability_is_caught_on_nhm(tmp_path: Path) -> None:
    """libsodium's AES-GCM is AES-NI code behind an availability check the
    caller must make; a caller that skips it executes AES-NI on a CPU
    without it (a real Nehalem dies of SIGILL).  Both verdicts name it."""
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["nhm"], "bp")
    out = tmp_path / "out"
    p = run_cli(
        "exec", "--cpu", "nhm", "--expect", str(EXPECT), "--out", str(out),
        "--", sys.executable, "-I", str(SCRIPT), "1024", "--ignore-availability",
        env=_env(),
        timeout=600,
    )  # fmt: skip
    assert p.returncode == 1, p.stderr[-3000:]
    nhm = read_models(out)["nhm"]
    assert nhm["status"] == "fail" and nhm["exit_code"] == 0, nhm["reasons"]
    first = nhm["violations"][0]
    assert Path(first["image"]).name.startswith("libsodium.so"), first
    assert first["reason"].endswith("AES not in model nhm; ISA set AES"), first
    judged = [r for r in nhm["reasons"] if not r.startswith("chip check")]
    for name, isa_set in (
        ("no AES-NI or VAES anywhere in the process on a model without AES-NI", "AES"),
        ("no carry-less multiply anywhere on a model without PCLMULQDQ", "PCLMULQDQ"),
    ):
        pattern = (
            rf"{name}: forbidden but executed \d+x: \{{isa_set={isa_set}\}} -- .*\(libsodium\.so"
        )
        assert any(re.match(pattern, r) for r in judged), judged
