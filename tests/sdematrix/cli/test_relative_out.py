"""`--out` given as a relative path (as README's main command does) works with
every local backend: backends run tracers/emulators in other working
directories, so the paths they receive must not depend on the cwd."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX, ptrace_skip_reason, run_cli

_PTRACE_WHY = ptrace_skip_reason(SHIPPED_MATRIX, ["snb"])


@pytest.mark.parametrize(
    ("backend", "cpu"),
    [
        pytest.param(
            "ptrace",
            "snb",
            marks=pytest.mark.skipif(_PTRACE_WHY is not None, reason=str(_PTRACE_WHY)),
        ),
        pytest.param(
            "qemu",
            "wsm",
            marks=pytest.mark.skipif(
                shutil.which("qemu-x86_64") is None, reason="qemu-x86_64 not installed"
            ),
        ),
    ],
)
def test_relative_out_dir(tmp_path: Path, backend: str, cpu: str) -> None:
    p = run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--cpu",
        cpu,
        "--backend",
        backend,
        "--jobs",
        "2",
        "--out",
        "rel/results",
        "--junit",
        "rel/results/junit.xml",
        "--report",
        "rel/report",
        cwd=tmp_path,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "rel/results/results.json").read_text())
    assert doc["counts"]["pass"] == 10 and doc["counts"]["error"] == 0
    assert (tmp_path / "rel/results/junit.xml").is_file()
    assert (tmp_path / "rel/report/report.html").is_file()
