"""What the user names must run: `--cpu`/`--backend` cells no backend can run
here are errors (exit 1) unless `--allow-skip`; the pytest plugin's
`--sde-cpu` likewise unless `--sde-allow-skip`; bad option values are one-line
usage errors; `sdematrix doctor` says what this host can run.

The unrunnable cells are real: QEMU's TCG cannot run a Sapphire Rapids model
(no AVX-512; measured from the installed binary by the qemu backend), so the
test asks the qemu backend for spr, and expects the reason the backend gives.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    assert_one_line_error,
    cli_env,
    read_junit,
    run_cli,
)

from sdematrix.backends.qemu.backend import QemuBackend
from sdematrix.spec.matrix_file import load_matrix

MATRIX = load_matrix(SHIPPED_MATRIX)


def _qemu_spr_reason() -> str:
    b = QemuBackend()
    why = b.unavailable_reason()
    if why is not None:
        pytest.skip(f"qemu backend not usable on this host: {why}")
    reason = b.cannot_run(MATRIX.models["spr"])
    assert reason is not None, "this QEMU claims to run Sapphire Rapids: pick another model"
    return reason


def test_named_cpu_the_backend_cannot_run_is_an_error(tmp_path: Path) -> None:
    reason = _qemu_spr_reason()
    junit = tmp_path / "j.xml"
    r = run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--backend",
        "qemu",
        "--cpu",
        "spr",
        "--out",
        str(tmp_path / "out"),
        "--junit",
        str(junit),
        env=cli_env(hide_sde=True),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    n = len(MATRIX.cells(["spr"]))
    assert f"0 passed, 0 failed, {n} errors, 0 skipped" in r.stdout
    # one summary line per reason, naming count, model and reason
    assert f"could not run here (error): {n} cells of spr: {reason}" in r.stdout
    cases = read_junit(junit)
    assert len(cases) == n
    for name, case in cases.items():
        assert name.startswith("spr.")
        assert case.status == "error" and case.message.startswith("cannot run here: "), case


def test_allow_skip_makes_it_a_listed_skip(tmp_path: Path) -> None:
    reason = _qemu_spr_reason()
    out = tmp_path / "out"
    r = run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--backend",
        "qemu",
        "--cpu",
        "spr",
        "--allow-skip",
        "--out",
        str(out),
        "--report",
        str(out),
        env=cli_env(hide_sde=True),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(MATRIX.cells(["spr"]))
    assert f"0 passed, 0 failed, 0 errors, {n} skipped" in r.stdout
    assert f"could not run here (skipped): {n} cells of spr: {reason}" in r.stdout
    md = (out / "summary.md").read_text()
    assert f"**Could not run here ({n} cells)**" in md
    assert f"{n} cells (spr): " in md


def test_allow_skip_with_nothing_to_allow_is_a_usage_error(tmp_path: Path) -> None:
    r = run_cli(
        "run", "--matrix", str(SHIPPED_MATRIX), "--allow-skip", "--out", str(tmp_path / "o")
    )
    assert_one_line_error(r, 2, "--allow-skip has nothing to allow without --cpu or --backend")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("cmd", [["run"], ["docker", "run"]])
def test_unknown_cpuid_mode_is_a_usage_error(tmp_path: Path, cmd: list[str]) -> None:
    r = run_cli(*cmd, "--cpuid-mode", "sometimes", "--out", str(tmp_path / "o"))
    assert_one_line_error(r, 2, "--cpuid-mode", "sometimes")


def test_doctor_reports_backends_and_cpuid_mode() -> None:
    r = run_cli("doctor", "--matrix", str(SHIPPED_MATRIX), "--json", env=cli_env(hide_sde=True))
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(r.stdout)
    names = [b["name"] for b in d["backends"]]
    assert names == ["sde", "ptrace", "qemu"]
    sde = d["backends"][0]
    assert not sde["usable"] and sde["host_limit"] and "SDE not installed" in sde["reason"]
    assert set(d["cpuid_modes"]) == {"fault", "bp"}
    pt = d["backends"][1]
    if pt["usable"]:
        assert d["cpuid_mode"] in ("fault", "bp")
        assert d["cpuid_modes"][d["cpuid_mode"]] is None
    assert set(d["models"]) == set(MATRIX.models)
    assert d["runnable_models"] == sum(1 for m in d["models"].values() if m["backend"])
    assert r.returncode == (0 if d["runnable_models"] else 1)
    text = run_cli("doctor", "--matrix", str(SHIPPED_MATRIX), env=cli_env(hide_sde=True))
    assert "ptrace --cpuid-mode auto uses: " in text.stdout
    assert f"models runnable here: {d['runnable_models']} of {len(MATRIX.models)}" in text.stdout


def _pytest_plugin(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            f"--sde-matrix={SHIPPED_MATRIX}",
            "--sde-cpu=spr",
            "--sde-backend=qemu",
            *extra,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=cli_env(hide_sde=True),
    )


def test_pytest_plugin_named_cpu_that_cannot_run_fails(tmp_path: Path) -> None:
    reason = _qemu_spr_reason()
    p = _pytest_plugin(tmp_path)
    n = len(MATRIX.cells(["spr"])) * 4  # four checks per cell
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{n} failed" in p.stdout and "skipped" not in p.stdout.splitlines()[-1]
    assert f"cannot run here: {reason}" in p.stdout


def test_pytest_plugin_allow_skip_skips_with_the_reason(tmp_path: Path) -> None:
    reason = _qemu_spr_reason()
    p = _pytest_plugin(tmp_path, "--sde-allow-skip")
    n = len(MATRIX.cells(["spr"])) * 4
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{n} skipped" in p.stdout
    assert reason[:60] in p.stdout
