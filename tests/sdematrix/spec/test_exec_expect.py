"""``sdematrix exec --expect`` fails closed: unknown names are exit 2 with a
suggestion, each verdict line says how many expectations applied, a require
whose scope matched nothing fails saying so, ``has:`` follows the model's
XCR0, and ``explain MODEL --features`` lists the names a file may use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdematrix.backends.ptrace.backend import PtraceBackend
from sdematrix.errors import MatrixFileError
from sdematrix.spec.exec_expect import load_expectations
from sdematrix.spec.matrix_arg import load_matrix_arg

ROOT = Path(__file__).resolve().parent.parent.parent.parent

_ptrace_why = PtraceBackend().unavailable_reason()
needs_ptrace = pytest.mark.skipif(
    _ptrace_why is not None, reason=f"ptrace backend unavailable here: {_ptrace_why}"
)


def sdematrix(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "sdematrix", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


# (the file's entry, the message's tail): each typo names its line and a fix
TYPOS = [
    (
        "    has: [AES, avx2]\n    require: [{isa_set: AVX2}]\n",
        "has: unknown feature 'avx2'; did you mean AVX2?",
    ),
    (
        "    models: [haswell]\n    require: [{isa_set: AVX2}]\n",
        "models: unknown model 'haswell'; did you mean hsw?",
    ),
    ("    forbid: [{isa_set: AVX-2}]\n", "forbid: unknown isa set 'AVX-2'; did you mean AVX2?"),
    (
        "    lacks: [AVX512]\n    forbid: [{isa_set: 'AVX512*'}]\n",
        "lacks: unknown feature 'AVX512'; did you mean",
    ),
    (
        "    forbid: [{isa_set: 'VAES*'}, {isa_set: 'vaes*'}]\n",
        "forbid: isa set pattern 'vaes*' matches no isa set; did you mean VAES?",
    ),
    ("    require: [{isa_ext: AVX512}]\n", "require: unknown isa ext 'AVX512'; did you mean"),
    (
        "    require: [{mnemonic: vaesnec}]\n",
        "require: unknown mnemonic 'VAESNEC'; did you mean VAESENC",
    ),
    ("    require: [{width: ymm0}]\n", "require: unknown width 'ymm0'; did you mean"),
    (
        "    models: ['sky*']\n    require: [{isa_set: AVX2}]\n",
        "models: model pattern 'sky*' matches no model; did you mean skl or skx?",
    ),
    ("    forbid: [{category: AVX2}]\n", "forbid: category selectors match only SDE mixes"),
]


@pytest.mark.parametrize("entry,needle", TYPOS, ids=[t[1].split(";")[0] for t in TYPOS])
def test_unknown_names_are_exit_2_with_a_suggestion(
    tmp_path: Path, entry: str, needle: str
) -> None:
    f = tmp_path / "expect.yaml"
    f.write_text(
        "expectations:\n  - name: fine\n    forbid: [{isa_set: AVX2}]\n  - name: typo\n" + entry
    )
    p = sdematrix("exec", "--cpu", "hsw", "--expect", str(f), "--", "true")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    key = needle.split(":")[0]
    want_line = 1 + next(
        i
        for i, ln in enumerate(f.read_text().splitlines())
        if ln.startswith(f"    {key}:") and i >= 3
    )
    assert f"{f}:{want_line}: expectations[1].{needle}" in lines[0], lines[0]


def test_good_names_and_globs_load(tmp_path: Path) -> None:
    """The spellings the docs and tests use load (glob over models, ISA
    sets, XED-style names a mix holds)."""
    matrix = load_matrix_arg(None)
    f = tmp_path / "good.yaml"
    f.write_text(
        "expectations:\n"
        "  - has: [AES, AVX512F]\n    lacks: [AVX512_FP16]\n    models: ['*', 'spr*', hsw]\n"
        "    scope: {image: 'libcrypto*', function: 'aesni_*'}\n"
        "    require: [{isa_set: AES}, {isa_set: 'AVX512_VAES_*'}, {mnemonic: vaesenc},\n"
        "              {encoding: evex, width: zmm}, {isa_ext: AVX512EVEX}, {isa_set: LONGMODE}]\n"
        "    forbid: [{isa_set: 'VAES*'}, {isa_set: SSE42}, {isa_set: AVX2GATHER}]\n"
    )
    exps = load_expectations(f, matrix)
    assert len(exps) == 1 and len(exps[0].require) == 6


def test_unknown_model_needs_the_matrix_only(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text("expectations:\n  - models: [haswell]\n    forbid: [{isa_set: AVX2}]\n")
    assert load_expectations(f)  # no matrix given: models are not checked
    with pytest.raises(MatrixFileError, match=r"e.yaml:2: .*unknown model 'haswell'"):
        load_expectations(f, load_matrix_arg(None))


def test_has_follows_xcr0(tmp_path: Path) -> None:
    """spr_xcr0_sse lists AVX2 in CPUID but its OS state lacks YMM: it does
    not "have" AVX2 for expectations, and it "lacks" it."""
    matrix = load_matrix_arg(None)
    f = tmp_path / "e.yaml"
    f.write_text(
        "expectations:\n"
        "  - {has: [AVX2], require: [{isa_set: AVX2}]}\n"
        "  - {lacks: [AVX2], forbid: [{isa_set: 'AVX*'}]}\n"
        "  - {has: [AES, SSE4_2], require: [{isa_set: AES}]}\n"
    )
    has_avx2, lacks_avx2, aes = load_expectations(f, matrix)
    m = matrix.models
    assert has_avx2.applies_to(m["spr"]) and not has_avx2.applies_to(m["spr_xcr0_sse"])
    assert lacks_avx2.applies_to(m["spr_xcr0_sse"]) and not lacks_avx2.applies_to(m["spr"])
    assert aes.applies_to(m["spr_xcr0_sse"])  # AES-NI's legacy form needs no XSAVE state
    # spr_xcr0_ymm: YMM state but no opmask/ZMM: AVX2 yes, AVX-512 no
    f.write_text("expectations:\n  - {has: [AVX512F], require: [{isa_set: 'AVX512*'}]}\n")
    (avx512,) = load_expectations(f, matrix)
    assert has_avx2.applies_to(m["spr_xcr0_ymm"]) and not avx512.applies_to(m["spr_xcr0_ymm"])
    assert avx512.applies_to(m["spr"])


def test_explain_features_lists_the_names() -> None:
    p = sdematrix("explain", "hsw,nhm,spr_xcr0_sse", "--features")
    assert p.returncode == 0, p.stderr
    per_model = {b.split(":", 1)[0]: b for b in _split(p.stdout)}
    assert list(per_model) == ["hsw", "nhm", "spr_xcr0_sse"]
    feats = {k: _field(v, "features (has/lacks)") for k, v in per_model.items()}
    sets = {k: _field(v, "ISA sets it can execute (isa_set)") for k, v in per_model.items()}
    assert "AVX2" in feats["hsw"] and "BMI1" in feats["hsw"] and "AVX2" not in feats["nhm"]
    assert "AVX2" in sets["hsw"] and "AVX2" not in sets["nhm"] and "SSE42" in sets["nhm"]
    assert "AVX2" not in feats["spr_xcr0_sse"] and "AVX2" not in sets["spr_xcr0_sse"]
    assert "AVX2" in _field(
        per_model["spr_xcr0_sse"], "in CPUID but off in XCR0 (not 'has' for expectations)"
    )
    assert "AES" in sets["spr_xcr0_sse"] and "AVXAES" not in sets["spr_xcr0_sse"]


def _split(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        if not line.startswith(" "):
            out.append("")
        out[-1] += line + "\n"
    return out


def _field(block: str, label: str) -> set[str]:
    line = next(ln for ln in block.splitlines() if ln.strip().startswith(label + ":"))
    return set(line.split(":", 1)[1].split())


@needs_ptrace
@pytest.mark.skipif(shutil.which("grep") is None, reason="grep not installed")
def test_verdict_counts_applied_and_empty_scope_fails(tmp_path: Path) -> None:
    """glibc's string functions follow the model's XCR0 (AVX2 on hsw, SSE on
    spr_xcr0_sse): `has: [AVX2]` applies to hsw only and passes; each
    verdict line says how many expectations applied; a require whose scope
    matches no function fails saying so (not a silent pass)."""
    f = tmp_path / "e.yaml"
    f.write_text(
        "expectations:\n"
        "  - name: AVX2 string functions where AVX2 is usable\n"
        "    has: [AVX2]\n    scope: {image: 'libc.so*'}\n    require: [{isa_set: AVX2}]\n"
        "  - name: no VEX code without YMM state\n"
        "    lacks: [AVX]\n    scope: {image: 'libc.so*'}\n"
        "    forbid: [{isa_set: 'AVX*'}, {encoding: vex}, {encoding: evex}]\n"
        "  - name: libc ran\n    scope: {image: 'libc.so*'}\n    require: [{isa_set: SSE2}]\n"
    )
    data = tmp_path / "words"
    data.write_text("".join(f"line {i} root{i % 7}\n" for i in range(2000)))
    out = tmp_path / "out"
    p = sdematrix(
        "exec",
        "--cpu",
        "hsw,spr_xcr0_sse",
        "--expect",
        str(f),
        "--out",
        str(out),
        "--",
        "grep",
        "-c",
        "root3",
        str(data),
    )
    assert p.returncode == 0, p.stderr
    lines = {ln.split()[2]: ln for ln in p.stderr.splitlines() if ln.startswith("sdematrix exec:")}
    assert "2 of 3 expectations applied" in lines["hsw"], lines
    assert "2 of 3 expectations applied" in lines["spr_xcr0_sse"], lines
    rows = {m["model"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert rows["hsw"]["meta"]["expectations_applied"] == 2
    assert 'name="coverage.expectations_applied" value="2"' in (out / "junit.xml").read_text()

    f.write_text(
        "expectations:\n"
        "  - name: typo'd function scope\n"
        "    scope: {image: 'libc.so*', function: '__strlen_avx3*'}\n"
        "    require: [{isa_set: AVX2}]\n"
    )
    p = sdematrix("exec", "--cpu", "hsw", "--expect", str(f), "--", "grep", "-c", "x", str(data))
    assert p.returncode == 1, p.stderr
    assert (
        "typo'd function scope: required {isa_set=AVX2} in image libc.so*, function "
        "__strlen_avx3*, but the scope matched nothing" in p.stderr
    ), p.stderr
    assert "1 of 1 expectations applied" in p.stderr
