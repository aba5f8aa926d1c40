"""Every instruction of every tier function stays within the ISA its tier
declares (dispatch/include/vc_tier_isa.h), read back from the machine code
that ships: the built extension vaescrypt._native and the probe vc-probe.

The declaration is what the dispatcher checks before it runs a tier (issue 13:
the aesni tier was compiled for SSE4.1 but chosen for CFB on any CPU with
AES-NI, and died with SIGILL under ``qemu-x86_64 -cpu qemu64,+aes``).  This
test reads the header itself, so the lists it checks are the lists the
dispatcher and the target() attributes use, not a copy.

Functions are mapped to tiers by their translation unit (the STT_FILE symbol
that precedes a file's local symbols) and, for global symbols, by their
``vc_<tier>_`` name prefix.  Inside tier_aesni.c, functions named *gcm* or
*ghash* belong to the GCM list, all others to the block list.  Nothing is
missed: every function symbol of a tier's object file, compiled alone with the
project's flags, must be found in the shipped binary under that tier, and each
tier's function table members must be there.  Functions outside the tier files
must be plain x86-64 (the dispatcher's CPUID/XGETBV probe and the benchmark's
roof loop excepted, with the reason below).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from sdematrix.evidence.decode import BASELINE_FEATURES, Insn, decode_many

vaescrypt_native = pytest.importorskip("vaescrypt._native")
from vaescrypt import _buildinfo as bi

HEADER = bi.REPO_ROOT / "dispatch" / "include" / "vc_tier_isa.h"
PROBE = bi.REPO_ROOT / "src" / "sdematrix" / "_bin" / "vc-probe"

# vc_feature name (VC_F_<name>) -> iced CpuidFeature names it covers.
ICED = {
    "AES": {"AES"},
    "PCLMULQDQ": {"PCLMULQDQ"},
    "SSE3": {"SSE3"},
    "SSSE3": {"SSSE3"},
    "SSE41": {"SSE4_1"},
    "SSE42": {"SSE4_2"},
    "POPCNT": {"POPCNT"},
    "XSAVE": {"XSAVE"},
    "AVX": {"AVX"},
    "AVX2": {"AVX2"},
    "BMI2": {"BMI2"},
    "AVX512F": {"AVX512F"},
    "AVX512VL": {"AVX512VL"},
    "AVX512BW": {"AVX512BW"},
    "AVX512DQ": {"AVX512DQ"},
    "VAES": {"VAES"},
    "VPCLMULQDQ": {"VPCLMULQDQ"},
}
STATE = {"OS_YMM", "OS_EVEX"}
# x86-64 baseline, plus ENDBR64 (CET_IBT): a hint NOP on CPUs without CET,
# emitted everywhere by toolchains built with -fcf-protection.
ALWAYS = BASELINE_FEATURES | {"CET_IBT"}

# Translation unit -> tier; global-name prefix -> tier.
TIER_FILES = {
    "tier_generic.c": "generic",
    "generic_aes.c": "generic",
    "generic_ghash.c": "generic",
    "tier_aesni.c": "aesni",
    "tier_vaes_avx2.c": "vaes_avx2",
    "tier_avx10_256.c": "avx10_256",
    "tier_avx512.c": "avx512",
}
TIER_PREFIXES = {
    "vc_generic_": "generic",
    "vc_aesni_": "aesni",
    "vc_vaes_avx2_": "vaes_avx2",
    "vc_avx10_256_": "avx10_256",
    "vc_avx512_": "avx512",
}
# Tier -> the declaration lists in vc_tier_isa.h.
LISTS = {
    "generic": "VC_ISA_GENERIC",
    "vaes_avx2": "VC_ISA_VAES_AVX2",
    "avx10_256": "VC_ISA_AVX10_256",
    "avx512": "VC_ISA_AVX512",
}
# Function-table members every tier must show (the wide tiers' noinline
# helpers too): proof that the mapping found the tier's code.
TABLE = {
    "generic": {
        "vc_generic_setkey",
        "vc_generic_encrypt_block",
        "vc_generic_ghash_init",
        "vc_generic_ghash",
        "vc_generic_aes4",
    },
    "aesni": {
        "vc_aesni_setkey",
        "vc_aesni_encrypt_block",
        "aesni_ghash_init",
        "aesni_ghash",
        "aesni_gcm_enc",
        "aesni_gcm_dec",
        "aesni_cfb128_enc",
        "aesni_cfb128_dec",
        "aesni_cfb8_enc",
        "aesni_cfb8_dec",
        "aesni_cfb1_enc",
        "aesni_cfb1_dec",
    },
    **{
        t: {
            f"vc_{t}_{n}"
            for n in (
                "ghash_init",
                "ghash",
                "gcm_enc",
                "gcm_dec",
                "gcm_crypt",
                "cfb128_enc",
                "cfb128_dec",
            )
        }
        for t in ("vaes_avx2", "avx10_256", "avx512")
    },
}
# Outside the tiers: these may use more than the baseline, and why.
NON_TIER_ALLOWED = {
    # XGETBV reads XCR0, executed only when CPUID says OSXSAVE (dispatch/cpuid.c)
    "cpuid.c": {"XSAVE"},
}
# (The benchmark's AVX-512 loops live in the separate vaescrypt._bench
# extension, not in _native or vc-probe: nothing here is exempt.)


# ------------------------------------------------------ the declaration --


def _macros(text: str) -> dict[str, str]:
    """name -> body of every function-like VC_ISA_* macro (continuations joined)."""
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    out = {}
    for m in re.finditer(r"^#define\s+(VC_ISA_[A-Z0-9_]+)\(X, S\)(.*)$", text, flags=re.MULTILINE):
        out[m.group(1)] = m.group(2)
    return out


def _expand(macros: dict[str, str], name: str) -> set[str]:
    body = macros[name]
    feats = set(re.findall(r"\bX\(\s*([A-Z0-9_]+)\s*,", body))
    feats |= set(re.findall(r"\bS\(\s*([A-Z0-9_]+)\s*\)", body))
    for sub in re.findall(r"\b(VC_ISA_[A-Z0-9_]+)\(X, S\)", body):
        feats |= _expand(macros, sub)
    return feats


@pytest.fixture(scope="module")
def declared() -> dict[str, set[str]]:
    """List name -> vc feature names, read from the header the build used."""
    assert HEADER.is_file(), f"{HEADER}: the per-tier ISA declaration is missing"
    macros = _macros(HEADER.read_text())
    got = {name: _expand(macros, name) for name in macros}
    for name in (*LISTS.values(), "VC_ISA_AESNI_BLOCK", "VC_ISA_AESNI_GCM"):
        assert name in got, f"{HEADER} declares no {name}(X, S)"
    unknown = {f for feats in got.values() for f in feats} - set(ICED) - STATE
    assert not unknown, f"features the test cannot map to iced names: {sorted(unknown)}"
    return got


def test_declaration_parses(declared: dict[str, set[str]]) -> None:
    """The parser sees what the header says (a few anchors, not a copy)."""
    assert declared["VC_ISA_GENERIC"] == set()
    assert declared["VC_ISA_AESNI_BLOCK"] == {"AES"}
    assert {"AES", "PCLMULQDQ", "SSSE3"} <= declared["VC_ISA_AESNI_GCM"]
    assert declared["VC_ISA_AESNI_BLOCK"] <= declared["VC_ISA_AESNI_GCM"]
    assert {"AVX2", "VAES", "VPCLMULQDQ", "OS_YMM", "AES"} <= declared["VC_ISA_VAES_AVX2"]
    assert {"AVX512F", "AVX512VL", "AVX512BW", "OS_EVEX"} <= declared["VC_ISA_AVX512"]


# ------------------------------------------------------ the machine code --


@dataclass(frozen=True)
class Func:
    name: str
    unit: str | None  # translation unit of a local symbol, None for a global
    insns: tuple[Insn, ...]


def _functions(path: Path) -> Iterator[Func]:
    """Every sized FUNC symbol in an executable section, decoded."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        assert symtab is not None, f"{path} has no symbol table"
        unit: str | None = None
        for sym in symtab.iter_symbols():
            kind = sym["st_info"]["type"]
            if kind == "STT_FILE":
                unit = Path(sym.name).name
                continue
            if (
                kind != "STT_FUNC"
                or sym["st_size"] == 0
                or sym["st_shndx"] in ("SHN_UNDEF", "SHN_ABS")
            ):
                continue
            sec = elf.get_section(sym["st_shndx"])
            if not sec["sh_flags"] & 0x4:  # SHF_EXECINSTR
                continue
            # relocatable objects: st_value is section-relative
            base = 0 if elf["e_type"] == "ET_REL" else sec["sh_addr"]
            lo = sym["st_value"] - base
            code = sec.data()[lo : lo + sym["st_size"]]
            local = sym["st_info"]["bind"] == "STB_LOCAL"
            yield Func(sym.name, unit if local else None, tuple(decode_many(code, sym["st_value"])))


def tier_of(fn: Func) -> str | None:
    if fn.unit is not None:
        return TIER_FILES.get(fn.unit)
    for prefix, tier in TIER_PREFIXES.items():
        if fn.name.startswith(prefix):
            return tier
    return None


def list_of(tier: str, name: str) -> str:
    if tier == "aesni":
        return "VC_ISA_AESNI_GCM" if ("gcm" in name or "ghash" in name) else "VC_ISA_AESNI_BLOCK"
    return LISTS[tier]


def violations(insns: tuple[Insn, ...], feats: set[str]) -> list[str]:
    """Why each instruction is outside feats (+ baseline), one line each."""
    allowed = set(ALWAYS)
    for f in feats - STATE:
        allowed |= ICED[f]
    out = []
    for i in insns:
        if i.mnemonic == "INVALID":
            out.append(f"undecodable at {i.address:#x}")
            continue
        missing = [f for f in i.features if f not in allowed]
        if missing:
            out.append(f"{i.text}  needs {'+'.join(missing)}")
        elif i.width in ("ymm", "zmm") and "OS_YMM" not in feats:
            out.append(f"{i.text}  uses {i.width} without OS_YMM declared")
        elif (i.encoding == "evex" or i.width == "zmm") and "OS_EVEX" not in feats:
            out.append(f"{i.text}  is EVEX/zmm without OS_EVEX declared")
    return out


def _binaries() -> list[Path]:
    return [Path(vaescrypt_native.__file__), PROBE]


@pytest.fixture(scope="module", params=["extension", "probe"])
def binary(request: pytest.FixtureRequest) -> tuple[str, list[Func]]:
    path = _binaries()[0 if request.param == "extension" else 1]
    if not path.is_file():
        pytest.fail(f"{path} is not built (python3 setup.py build_ext --inplace)")
    return request.param, list(_functions(path))


def test_every_tier_instruction_within_declared_isa(
    binary: tuple[str, list[Func]], declared: dict[str, set[str]]
) -> None:
    which, funcs = binary
    bad: list[str] = []
    count: dict[str, int] = {}
    insns: dict[str, int] = {}
    for fn in funcs:
        tier = tier_of(fn)
        if tier is None:
            continue
        lst = list_of(tier, fn.name)
        count[tier] = count.get(tier, 0) + 1
        insns[tier] = insns.get(tier, 0) + len(fn.insns)
        bad += [f"{tier} {lst} {fn.name}: {v}" for v in violations(fn.insns, declared[lst])]
    assert set(count) == set(TIER_FILES.values()), (which, count)
    assert not bad, f"{which}: {len(bad)} instructions outside their tier's declaration:\n" + (
        "\n".join(bad[:40])
    )
    print(which, "functions per tier", count, "instructions", insns)


def test_tier_tables_found(binary: tuple[str, list[Func]]) -> None:
    which, funcs = binary
    by_tier: dict[str, set[str]] = {}
    for fn in funcs:
        tier = tier_of(fn)
        if tier is not None:
            # a GCC clone (f.constprop.0, f.isra.0, f.part.0) is f's code
            by_tier.setdefault(tier, set()).add(fn.name.split(".")[0])
    for tier, names in TABLE.items():
        missing = names - by_tier.get(tier, set())
        assert not missing, f"{which}: {tier} functions not found under the tier: {sorted(missing)}"


def test_non_tier_code_is_baseline(binary: tuple[str, list[Func]]) -> None:
    """Code outside the tier files is plain x86-64: a tier function that
    escaped the mapping above (an odd name, a new file) fails here."""
    which, funcs = binary
    bad = []
    for fn in funcs:
        if tier_of(fn) is not None:
            continue
        extra = NON_TIER_ALLOWED.get(fn.unit or "", set())
        allowed = {k for k, v in ICED.items() if v & extra}
        bad += [f"{fn.unit or 'global'} {fn.name}: {v}" for v in violations(fn.insns, allowed)]
    assert not bad, f"{which}: non-tier code beyond x86-64:\n" + "\n".join(bad[:40])


@pytest.mark.parametrize("unit", sorted(TIER_FILES))
def test_no_tier_function_missed(unit: str, tmp_path: Path, declared: dict[str, set[str]]) -> None:
    """Compile the tier's file alone with the project's flags: each of its
    function symbols is in the extension under the same tier, and every
    instruction of its whole .text is within the tier's (widest) list."""
    if not bi.have_compiler():
        pytest.fail("no C compiler: cannot rebuild the tier to count its functions")
    src = bi.REPO_ROOT / "native" / unit
    [obj] = bi.compile_objects([src], tmp_path)
    own = [fn for fn in _functions(obj) if fn.unit == unit or fn.unit is None]
    assert own, f"{unit}: no functions"
    tier = TIER_FILES[unit]
    shipped = {fn.name for fn in _functions(Path(vaescrypt_native.__file__)) if tier_of(fn) == tier}
    missing = {fn.name for fn in own} - shipped
    assert not missing, f"{unit}: functions not mapped to {tier} in the extension: {missing}"
    widest = "VC_ISA_AESNI_GCM" if tier == "aesni" else LISTS[tier]
    with obj.open("rb") as f:
        elf = ELFFile(f)
        code = b"".join(
            s.data()
            for s in elf.iter_sections()
            if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 0x4
        )
    bad = violations(tuple(decode_many(code, 0)), declared[widest])
    assert not bad, f"{unit}: " + "\n".join(bad[:20])


# ------------------------------------------ a real CPU with AES, no SSSE3 --

QEMU = shutil.which("qemu-x86_64")


def _probe(args: list[str], cpu: str | None) -> subprocess.CompletedProcess[str]:
    cmd = [str(PROBE), *args]
    if cpu is not None:
        cmd = [QEMU or "qemu-x86_64", "-cpu", cpu, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("mode", ["cfb8", "cfb1", "cfb128", "gcm"])
@pytest.mark.parametrize("direction", ["encrypt", "decrypt"])
def test_qemu64_with_aes_runs(mode: str, direction: str) -> None:
    """qemu64 (SSE3, no SSSE3/SSE4.1) + AES-NI, a real hypervisor model: the
    library must pick a path whose code runs there and give the right output.
    CFB takes aesni (AES on SSE2); GCM, lacking PCLMULQDQ/SSSE3, generic."""
    if QEMU is None:
        pytest.skip("qemu-x86_64 is not installed (apt-get install qemu-user)")
    if not PROBE.is_file():
        pytest.fail(f"{PROBE} is not built")

    args = ["--mode", mode, "--dir", direction, "--key-bits", "256", "--length", "1000"]
    ref = _probe([*args, "--impl", "generic"], None)
    assert ref.returncode == 0, ref.stderr
    got = _probe(args, "qemu64,+aes")
    assert got.returncode == 0, f"exit {got.returncode} under qemu64,+aes: {got.stderr[-400:]}"
    out, want = json.loads(got.stdout), json.loads(ref.stdout)
    assert out["path"] == ("generic" if mode == "gcm" else "aesni"), out["path"]
    assert {"aes", "sse3"} <= set(out["features"]) and "ssse3" not in out["features"]
    assert out["digest"] == want["digest"]
