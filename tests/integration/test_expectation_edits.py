"""Edited expectations make the real matrix fail loudly (ptrace backend, real
probe): exit 1, and a message naming the cell, the expected and actual path
and the instructions seen."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX as SHIPPED
from doubles.sdematrix_cli import ptrace_skip_reason, run_cli

from sdematrix.spec.matrix_file import load_matrix

# spr needs this host to run its avx512 cells: skip, not fail, where it can't.
_WHY = ptrace_skip_reason(SHIPPED, ["spr"])
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))


def _run(matrix: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    p = run_cli(
        "run",
        "--matrix",
        str(matrix),
        "--cpu",
        "spr",
        "--backend",
        "ptrace",
        "--jobs",
        "2",
        "--out",
        str(out),
        timeout=600,
    )
    results = (
        json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    )
    return p, results


def _failed(results: dict) -> dict[str, list[str]]:
    return {c["cell"]: c["reasons"] for c in results["cells"] if c["status"] == "fail"}


def test_expecting_avx512_for_cfb8_on_spr(tmp_path: Path) -> None:
    text = SHIPPED.read_text()
    assert "  overrides:\n" in text
    edited = tmp_path / "m.yaml"
    edited.write_text(
        text.replace(
            "  overrides:\n",
            "  overrides:\n    spr.cfb8.encrypt: avx512\n    spr.cfb8.decrypt: avx512\n",
        )
    )
    p, results = _run(edited, tmp_path / "out")
    assert p.returncode == 1, p.stderr
    failed = _failed(results)
    assert sorted(failed) == ["spr.cfb8.decrypt.128.16", "spr.cfb8.encrypt.128.16"]
    for cell, reasons in failed.items():
        text = "\n".join(reasons)
        assert "path: expected avx512, got aesni" in text, text
        # the avx512 signature's requirements are named as not executed
        assert "required by path avx512 but not executed" in text, text
        # and what ran instead, by function
        assert "seen instead" in text and "AESENC(legacy,xmm)" in text, text
        assert cell in p.stdout + p.stderr
    assert "expected avx512, got aesni" in p.stdout + p.stderr


def test_zmm_requirement_added_to_aesni(tmp_path: Path) -> None:
    text = SHIPPED.read_text()
    line = '      "*": [{mnemonic: AESENC, encoding: legacy}]\n'
    assert line in text
    edited = tmp_path / "m.yaml"
    edited.write_text(
        text.replace(line, '      "*": [{mnemonic: AESENC, encoding: legacy}, {width: zmm}]\n')
    )
    p, results = _run(edited, tmp_path / "out")
    assert p.returncode == 1, p.stderr
    failed = _failed(results)
    # exactly the spr cells whose expected path is aesni (the serial ones)
    m = load_matrix(edited)
    aesni_cells = {
        c.name for c in m.cells(["spr"]) if m.expected[(c.cpu, c.mode, c.direction)] == "aesni"
    }
    assert set(failed) == aesni_cells, failed
    assert {c.split(".")[1] for c in failed} == {"cfb128", "cfb8", "cfb1"}
    for reasons in failed.values():
        joined = "\n".join(reasons)
        assert "required by path aesni but not executed in scope vc-probe*: {width=zmm}" in joined
