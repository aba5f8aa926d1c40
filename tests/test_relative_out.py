"""`--out` given as a relative path (as README's main command does) works with
every local backend: backends run tracers/emulators in other working
directories, so the paths they receive must not depend on the cwd."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdematrix.backends.ptrace import PtraceBackend

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("backend", "cpu"),
    [
        pytest.param("ptrace", "snb", marks=pytest.mark.skipif(
            PtraceBackend().unavailable_reason() is not None, reason="ptrace unavailable")),
        pytest.param("qemu", "wsm", marks=pytest.mark.skipif(
            shutil.which("qemu-x86_64") is None, reason="qemu-x86_64 not installed")),
    ],
)  # fmt: skip
def test_relative_out_dir(tmp_path: Path, backend: str, cpu: str) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sdematrix", "run", "--matrix", str(ROOT / "sde_matrix.yaml"),
         "--cpu", cpu, "--backend", backend, "--jobs", "2", "--out", "rel/results",
         "--junit", "rel/results/junit.xml", "--report", "rel/report"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "rel/results/results.json").read_text())
    assert doc["counts"]["pass"] == 10 and doc["counts"]["error"] == 0
    assert (tmp_path / "rel/results/junit.xml").is_file()
    assert (tmp_path / "rel/report/report.html").is_file()
