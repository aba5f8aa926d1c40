"""The QEMU backend: qemu-x86_64 -cpu <Model>,enforce, real SIGILL as the chip
check, and the TCG plugin's instruction mix of the SSC-marked region.

Needs qemu-x86_64 and the built probe; each test skips with the reason if not.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sdematrix.backends.base import Backend, ProbeCommand, RunResult
from sdematrix.backends.probe import ProbeError, expected_digest, probe_command, probe_path
from sdematrix.backends.qemu.backend import TCG_TESTS, QemuBackend, mix_from_plugin, tcg_tests_for
from sdematrix.errors import MixFileError
from sdematrix.evidence.mix import Selector
from sdematrix.evidence.symbols import Mapping
from sdematrix.qemu_plugin import PluginOutput, build_plugin, parse_last_file, parse_plugin_output
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import Cell, CpuModel
from sdematrix.verdict.cell import judge

ROOT = Path(__file__).resolve().parents[3]
SEED = 1

_BASE = "INTEL8086 INTEL186 INTEL286 INTEL386 INTEL486 CPUID PAUSE MULTIBYTENOP FPU FPU287 FPU387"
_BASE += " TSC CX8 SEP CMOV CLFSH MMX FXSR SSE SSE2 SYSCALL X64 SSE3 CMPXCHG16B MONITOR"
_NHM = " SSSE3 SSE4_1 SSE4_2 POPCNT RDTSCP AES PCLMULQDQ"
_AVX = " AVX XSAVE XSAVEOPT"
_HSW = " F16C RDRAND FSGSBASE AVX2 FMA BMI1 BMI2 MOVBE LZCNT"


def _model(name: str, title: str, qemu: str | None, isa: str, bits: int) -> CpuModel:
    return CpuModel(
        name=name,
        title=title,
        vendor="GenuineIntel",
        sde_chip=name,
        qemu_model=qemu,
        chip_check_exe_only=False,
        cpuid=(),
        xcr0=0x7 if bits >= 256 else 0,
        isa=frozenset(isa.split()),
        max_vector_bits=bits,
    )


def _models() -> dict[str, CpuModel]:
    """wsm/snb/hsw from sde_matrix.yaml when the loader works, else our own."""
    try:
        from sdematrix.spec.matrix_file import load_matrix

        m = load_matrix(ROOT / "sde_matrix.yaml")
        return {k: m.models[k] for k in ("wsm", "snb", "hsw")}
    except Exception:  # noqa: BLE001 - fall back to the definitions below
        return {
            "wsm": _model("wsm", "Westmere", "Westmere", _BASE + _NHM, 128),
            "snb": _model(
                "snb", "Sandy Bridge", "SandyBridge,-x2apic,-tsc-deadline", _BASE + _NHM + _AVX, 256
            ),
            "hsw": _model(
                "hsw",
                "Haswell",
                "Haswell-noTSX,-x2apic,-tsc-deadline,-pcid,-invpcid",
                _BASE + _NHM + _AVX + _HSW,
                256,
            ),
        }


MODELS = _models()


@pytest.fixture(scope="module")
def backend() -> QemuBackend:
    b = QemuBackend()
    why = b.unavailable_reason()
    if why:
        pytest.skip(why)
    try:
        probe_path()
    except ProbeError as e:
        pytest.skip(f"vc-probe not available: {e}")
    return b


def run_cell(
    b: QemuBackend, tmp: Path, cpu: str, mode: str, direction: str, length: int = 64, **kw: object
) -> RunResult:
    cell = Cell(cpu, mode, direction, 128, length)
    cmd = probe_command(cell, SEED, **kw)  # type: ignore[arg-type]
    return b.run(cell, MODELS[cpu], cmd, tmp, timeout=120)


def count(result: RunResult, **sel: str) -> int:
    assert result.mix is not None
    return Selector(**sel).count(result.mix.scoped("vc-probe*"))


# --------------------------------------------------------------- models --


def test_is_a_backend() -> None:
    assert isinstance(QemuBackend(), Backend)


def test_models_it_cannot_run(backend: QemuBackend) -> None:
    none = _model("p4p", "Pentium 4", None, _BASE, 128)
    assert "qemu_model" in (backend.cannot_run(none) or "")
    vaes = _model(
        "adl", "Alder Lake", "Haswell", _BASE + _NHM + _AVX + _HSW + " VAES VPCLMULQDQ", 256
    )
    support = backend.tcg_support()
    if support["vaes256"] != "ok":
        assert "VAES on ymm" in (backend.cannot_run(vaes) or "")
    zmm = _model("skx", "Skylake-SP", "Skylake-Server", _BASE + " AVX512F", 512)
    if support["avx512f"] != "ok":
        why = backend.cannot_run(zmm) or ""
        assert "AVX-512" in why and f"QEMU {backend.version_number()}" in why, why
    bogus = _model("xx", "Nothing", "NoSuchCpu", _BASE, 128)
    assert "NoSuchCpu" in (backend.cannot_run(bogus) or "")
    # enforce: TCG lacks x2apic / tsc-deadline, so the bare model is refused,
    # naming the features.
    bare = _model("snb", "Sandy Bridge", "SandyBridge", _BASE + _NHM + _AVX, 256)
    why = backend.cannot_run(bare) or ""
    assert "x2apic" in why and "tsc-deadline" in why
    for m in MODELS.values():
        assert backend.cannot_run(m) is None, m.name


def test_skip_result_for_unrunnable_model(backend: QemuBackend, tmp_path: Path) -> None:
    vaes = _model("zen3", "Zen 3", "EPYC-Milan", _BASE + _NHM + " VAES", 256)
    if backend.tcg_support()["vaes256"] == "ok":
        pytest.skip(f"{backend.version()} runs ymm VAESENC correctly: nothing to refuse")
    cell = Cell("zen3", "gcm", "encrypt", 128, 16)
    r = backend.run(cell, vaes, probe_command(cell, SEED), tmp_path, 60)
    assert r.status == "skip" and "VAES on ymm" in (r.reason or "")


def test_version_and_tcg_support_are_measured(backend: QemuBackend, tmp_path: Path) -> None:
    """Detected from the installed binary: the version from --version, what
    TCG runs from the probe program under -cpu max (each answer one of the
    three measured outcomes, never a guess)."""
    import re

    out = subprocess.run(
        [backend.qemu_path() or "", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"version {re.escape(backend.version_number() or '?')}\b", out)
    b = QemuBackend(cache=tmp_path)
    support = b.tcg_support()
    assert set(support) == set(TCG_TESTS)
    assert set(support.values()) <= {"ok", "missing", "wrong"}, support
    if (b.version_number() or "").startswith("7.2."):
        # QEMU 7.2's TCG, as documented in the backend: no AVX-512, no
        # VPCLMULQDQ, and ymm VAESENC with a wrong upper lane.
        assert support["avx512f"] == "missing" and support["vpclmulqdq256"] == "missing"
        assert support["vaes256"] == "wrong"
    # the refusal names what is missing and the version it was measured on
    spr_like = _model(
        "spr",
        "Sapphire Rapids",
        "SapphireRapids",
        _BASE + _NHM + _AVX + _HSW + " AVX512F AVX512VL VAES VPCLMULQDQ",
        512,
    )
    if any(support[t] != "ok" for t in tcg_tests_for(spr_like)):
        why = b.cannot_run(spr_like) or ""
        assert f"QEMU {b.version_number()}" in why and "TCG" in why, why
    # cached per binary: a new backend object reads the cache, runs nothing
    store = tmp_path / "qemu-tcg-support.json"
    assert store.is_file()
    again = QemuBackend(cache=tmp_path)
    again._query = None  # type: ignore[assignment,method-assign]  # would raise if run
    assert again.tcg_support() == support


def test_tcg_tests_a_model_needs() -> None:
    assert tcg_tests_for(MODELS["hsw"]) == []
    ymm = _model("adl", "Alder Lake", None, _BASE + " AVX2 VAES VPCLMULQDQ", 256)
    assert tcg_tests_for(ymm) == ["vaes256", "vpclmulqdq256"]
    zmm = _model("spr", "SPR", None, _BASE + " AVX512F VAES VPCLMULQDQ", 512)
    assert tcg_tests_for(zmm) == ["avx512f", "vaes256", "vaes512", "vpclmulqdq256", "vpclmulqdq512"]
    avx10_256 = _model("gnr256", "GNR/256", None, _BASE + " AVX512F VAES", 256)
    assert tcg_tests_for(avx10_256) == ["avx512f", "vaes256"]


# ------------------------------------------------------------ mixes --


@pytest.mark.parametrize("cpu", sorted(MODELS))
@pytest.mark.parametrize(
    ("mode", "direction"),
    [
        ("gcm", "encrypt"),
        ("gcm", "decrypt"),
        ("cfb128", "decrypt"),
        ("cfb8", "encrypt"),
        ("cfb1", "decrypt"),
    ],
)
def test_aesni_cells(
    backend: QemuBackend, tmp_path: Path, cpu: str, mode: str, direction: str
) -> None:
    r = run_cell(backend, tmp_path, cpu, mode, direction, length=100)
    assert r.status == "ok", r.reason
    assert not r.violations
    assert r.probe is not None and r.probe["status"] == "ok"
    assert r.probe["path"] == "aesni"
    assert r.probe["digest"] == expected_digest(Cell(cpu, mode, direction, 128, 100), SEED)
    assert r.mix is not None and r.mix.source == "qemu"
    assert r.mix.meta["regions_started"] == 1 == r.mix.meta["regions_stopped"]
    assert count(r, mnemonic="AESENC", encoding="legacy", width="xmm") > 0
    if mode == "gcm":
        assert count(r, mnemonic="PCLMULQDQ", encoding="legacy") > 0
    assert count(r, mnemonic="VAES*") == 0
    assert count(r, encoding="evex") == 0
    assert count(r, width="ymm") == 0
    # The AES instructions are attributed to the aesni tier's functions.
    aes_funcs = {
        f.name
        for f in r.mix.functions
        if Selector(mnemonic="AES*").count(f.counts) > 0 and f.image.endswith("vc-probe")
    }
    assert any("aesni" in f for f in aes_funcs), aes_funcs
    others = ("vaes", "avx512", "avx10", "generic")
    assert not any(o in f for f in aes_funcs for o in others), aes_funcs


def test_generic_cell_has_no_aes(backend: QemuBackend, tmp_path: Path) -> None:
    r = run_cell(backend, tmp_path, "snb", "gcm", "encrypt", impl="generic")
    assert r.status == "ok" and r.probe is not None and r.probe["path"] == "generic"
    assert r.mix is not None and r.mix.overall.total > 0
    assert count(r, mnemonic="AES*") == 0 and count(r, mnemonic="PCLMULQDQ") == 0


def test_only_the_marked_region_is_counted(backend: QemuBackend, tmp_path: Path) -> None:
    one = run_cell(backend, tmp_path / "1", "wsm", "cfb128", "encrypt", length=160)
    three = run_cell(backend, tmp_path / "3", "wsm", "cfb128", "encrypt", length=160, repeat=3)
    assert one.mix is not None and three.mix is not None
    assert three.mix.meta["regions_started"] == 3
    n1 = count(one, mnemonic="AESENC")
    assert n1 > 0 and count(three, mnemonic="AESENC") == 3 * n1
    # The digest (SHA-256) and argument parsing run outside the marks.
    names = {f.name for f in one.mix.functions}
    assert not any(
        n.startswith(("sha256", "compress", "parse_args", "print_report")) for n in names
    )


# ------------------------------------------------------------- SIGILL --


@pytest.mark.parametrize(
    ("cpu", "tier", "func_prefix", "feature"),
    [
        ("snb", "vaes_avx2", "vc_vaes_avx2", ""),
        ("snb", "avx512", "vc_avx512", "AVX512"),
        ("hsw", "vaes_avx2", "vc_vaes_avx2", ""),
        ("hsw", "avx10_256", "vc_avx10_256", ""),
        ("wsm", "vaes_avx2", "vc_vaes_avx2", ""),
    ],
)
def test_forced_wide_tier_gets_sigill(
    backend: QemuBackend, tmp_path: Path, cpu: str, tier: str, func_prefix: str, feature: str
) -> None:
    r = run_cell(backend, tmp_path, cpu, "gcm", "encrypt", force_tier=tier)
    assert r.status == "ok" and r.exit_code == -4
    assert len(r.violations) == 1
    v = r.violations[0]
    assert "SIGILL" in v.reason and "not in model" in v.reason
    assert feature in v.reason
    assert v.mnemonic and v.mnemonic != "INVALID"
    assert v.address is not None and v.bytes_hex
    assert (v.function or "").startswith(func_prefix), v.describe()
    assert (v.image or "").endswith("vc-probe")
    assert r.probe is None  # the probe died before printing


def test_forced_aesni_tier_runs(backend: QemuBackend, tmp_path: Path) -> None:
    """Control for the SIGILL tests: forcing a tier the model has runs clean."""
    r = run_cell(backend, tmp_path, "snb", "gcm", "encrypt", force_tier="aesni")
    assert r.status == "ok" and not r.violations and r.probe is not None
    assert r.probe["digest"] == expected_digest(Cell("snb", "gcm", "encrypt", 128, 64), SEED)


def test_without_plugin_sigill_still_reported(tmp_path: Path) -> None:
    b = QemuBackend(use_plugin=False)
    if b.unavailable_reason():
        pytest.skip(b.unavailable_reason() or "")
    try:
        probe_path()
    except ProbeError as e:
        pytest.skip(str(e))
    ok = run_cell(b, tmp_path, "snb", "cfb8", "encrypt")
    assert ok.status == "ok" and ok.mix is None and ok.probe is not None
    assert "not used" in ok.artifacts["plugin"]
    bad = run_cell(b, tmp_path, "snb", "gcm", "encrypt", force_tier="vaes_avx2")
    assert bad.status == "ok" and len(bad.violations) == 1
    assert "SIGILL" in bad.violations[0].reason and bad.violations[0].address is None


# ---------------------------------------------------------- the plugin --


def test_plugin_builds_strict_and_is_cached(tmp_path: Path) -> None:
    so = build_plugin(tmp_path)  # -Wall -Wextra -Werror
    assert so.is_file() and so.stat().st_size > 0
    mtime = so.stat().st_mtime_ns
    assert build_plugin(tmp_path) == so and so.stat().st_mtime_ns == mtime


def test_plugin_output_parser(tmp_path: Path) -> None:
    good = tmp_path / "x.qemu.7"
    good.write_text(
        "sdematrix-qemu-mix 1\npid 7\ncode 1000 2000 1500\nregions 2 2\n"
        "i 1010 660f3808c1 5 f\ni 1010 660f3808c1 3 f\ni 1020 90 1 -\n"
        "map 1000 3000 r-xp 0 /bin/x y\nend\n"
    )
    out = parse_plugin_output(good)
    assert out.pid == 7 and (out.starts, out.stops) == (2, 2)
    assert out.counts[(0x1010, bytes.fromhex("660f3808c1"))] == 8
    assert out.symbols == {0x1010: "f"}
    assert out.maps[0].path == "/bin/x y" and out.maps[0].lo == 0x1000
    for bad in (
        "",
        "sdematrix-qemu-mix 1\npid 7\n",
        "nonsense\nend\n",
        "sdematrix-qemu-mix 1\ni zz 90 1 -\nend\n",
    ):
        good.write_text(bad)
        with pytest.raises(MixFileError):
            parse_plugin_output(good)
    short = tmp_path / "x.last"
    short.write_bytes(b"SDMLAST1" + bytes(10))
    with pytest.raises(MixFileError):
        parse_last_file(short)


# ------------------------------------------- the shared chip check on the mix --

# A real program with the probe's SSC marks around one LZCNT, built with gcc.
# On a CPU without LZCNT (ABM) the bytes F3 0F BD execute as BSR (the REP
# prefix is ignored): no SIGILL, a different answer.  QEMU does exactly that
# under -cpu Westmere, so only the chip check on the executed bytes sees it.
# Arguments: "lzcnt" (marked region with the LZCNT) or "empty" (no marks at
# all); it prints a probe-format JSON report with the instruction's result.
LZCNT_SRC = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long lzcnt_region(unsigned long x) {
    unsigned long r;
    __asm__ volatile("mov $0x111, %%ebx\n\t.byte 0x64, 0x67, 0x90\n\t"
                     "lzcnt %1, %0\n\t"
                     "mov $0x222, %%ebx\n\t.byte 0x64, 0x67, 0x90"
                     : "=r"(r) : "r"(x) : "rbx", "cc");
    return r;
}

int main(int argc, char **argv) {
    volatile unsigned long x = 0x10;
    unsigned long r = 0;
    if (argc > 1 && strcmp(argv[1], "lzcnt") == 0)
        r = lzcnt_region(x);
    printf("{\"probe\": 1, \"status\": \"ok\", \"mode\": \"gcm\", \"dir\": \"encrypt\", "
           "\"key_bits\": 128, \"length\": 16, \"seed\": 1, \"forced\": false, "
           "\"selected\": {}, \"features\": [], \"vendor\": \"GenuineIntel\", "
           "\"family\": 6, \"model\": 44, \"xcr0\": \"0x0\", \"path\": \"generic\", "
           "\"digest\": \"%064lx\", \"result\": %lu}\n", r, r);
    return 0;
}
"""


@pytest.fixture(scope="module")
def lzcnt_prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the LZCNT test program and is not installed")
    d = tmp_path_factory.mktemp("lzcnt")
    # named like the probe: the matrix's signatures are judged in scope vc-probe*
    src, exe = d / "lzcnt.c", d / "vc-probe-lzcnt"
    src.write_text(LZCNT_SRC)
    subprocess.run(
        ["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", str(src), "-o", str(exe)],
        check=True,
    )
    return exe


def _run_prog(b: QemuBackend, tmp: Path, cpu: str, argv: list[str]) -> RunResult:
    cell = Cell(cpu, "gcm", "encrypt", 128, 16)
    return b.run(cell, MODELS[cpu], ProbeCommand(tuple(argv)), tmp, timeout=60)


def test_lzcnt_on_westmere_is_a_chip_check_violation(
    backend: QemuBackend, tmp_path: Path, lzcnt_prog: Path
) -> None:
    r = _run_prog(backend, tmp_path, "wsm", [str(lzcnt_prog), "lzcnt"])
    # QEMU ran it without a fault, as BSR: bit index 4, not LZCNT's 59.
    assert r.exit_code == 0 and r.probe is not None and r.probe["result"] == 4, r.reason
    assert r.status == "ok"
    assert r.mix is not None and r.mix.meta["regions_started"] == 1
    # the mix records what Westmere executes (BSR), counted as a legacy form
    assert count_all(r, mnemonic="BSR") == 1 and count_all(r, mnemonic="LZCNT") == 0
    assert dict(r.mix.legacy_forms) == {"LZCNT as BSR": 1}
    assert len(r.violations) == 1, [v.describe() for v in r.violations]
    v = r.violations[0]
    assert v.mnemonic == "LZCNT"
    assert "LZCNT executes as BSR on model wsm" in v.reason
    assert "returns a different result" in v.reason
    # F3 REX.W 0F BD /r: the whole instruction, as it is in the program
    code = bytes.fromhex(v.bytes_hex or "")
    assert code[0] == 0xF3 and code[2:4] == b"\x0f\xbd" and v.address is not None
    assert v.function == "main" or "lzcnt" in (v.function or ""), v.describe()
    assert (v.image or "").endswith("/vc-probe-lzcnt")
    # ... and the verdict fails the cell on it.
    matrix = load_matrix(ROOT / "sde_matrix.yaml")
    out = judge(Cell("wsm", "gcm", "encrypt", 128, 16), MODELS["wsm"], matrix, r, None)
    assert out.status == "fail", out.reasons
    assert any("chip check (wsm)" in x and "LZCNT" in x for x in out.reasons), out.reasons


def test_lzcnt_on_haswell_is_clean(backend: QemuBackend, tmp_path: Path, lzcnt_prog: Path) -> None:
    """Control: the same program on a model with LZCNT, the real instruction."""
    r = _run_prog(backend, tmp_path, "hsw", [str(lzcnt_prog), "lzcnt"])
    assert r.status == "ok" and r.probe is not None and r.probe["result"] == 59, r.reason
    assert not r.violations
    assert count_all(r, mnemonic="LZCNT") == 1


def test_empty_region_is_an_error_with_total_zero(
    backend: QemuBackend, tmp_path: Path, lzcnt_prog: Path
) -> None:
    r = _run_prog(backend, tmp_path, "wsm", [str(lzcnt_prog), "empty"])
    assert r.status == "error" and "empty" in (r.reason or ""), r.reason
    assert r.probe is not None and r.probe["status"] == "ok"
    # The mix is there and honest: nothing was counted.
    assert r.mix is not None
    assert r.mix.meta["regions_started"] == 0
    assert r.mix.overall.total == 0 and r.mix.scoped("lzcnt*").total == 0


def count_all(result: RunResult, **sel: str) -> int:
    assert result.mix is not None
    return Selector(**sel).count(result.mix.overall)


def test_page_crossing_instruction_is_completed_from_the_file(tmp_path: Path) -> None:
    """QEMU 7.2 gives a plugin only the first page's bytes of an instruction
    that crosses a page: the mix re-reads it from the mapped file (an AESENC
    whose record holds only 66 0f must count as AESENC, not INVALID)."""
    img = tmp_path / "img"
    aesenc = bytes.fromhex("660f38dcc1")  # aesenc xmm0, xmm1
    img.write_bytes(b"\x90" * 0x1FFE + aesenc + b"\xc3" * 0x1000)
    base = 0x400000
    run = PluginOutput(
        pid=1,
        counts={(base + 0x1FFE, aesenc[:2]): 7, (base + 0x2003, b"\xc3"): 7},
        maps=[
            Mapping(base, base + 0x2000, "r-xp", 0, str(img)),
            Mapping(base + 0x2000, base + 0x3000, "r-xp", 0x2000, str(img)),
        ],
    )
    mix, violations = mix_from_plugin([run], model=MODELS["wsm"])
    assert mix.overall.mnemonic == {"AESENC": 7, "RET": 7}
    assert not violations
    # Bytes the file does not agree with are left as QEMU gave them.
    bad = PluginOutput(pid=1, counts={(base + 0x1FFE, b"\x0f"): 1}, maps=run.maps)
    mix, violations = mix_from_plugin([bad], model=MODELS["wsm"])
    assert mix.overall.mnemonic == {"INVALID": 1}
    assert [v.reason for v in violations] == ["undecodable instruction"]
