"""The pytest plugin, run as a user would: a pytest subprocess with --sde-cpu."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from doubles.sdematrix_cli import ptrace_skip_reason

from sdematrix.integrations.pytest_plugin import SHIPPED_TESTS

ROOT = Path(__file__).resolve().parents[3]


def _pytest(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


def test_without_option_the_plugin_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    p = _pytest("-q", "test_x.py", cwd=tmp_path)
    assert p.returncode == 0 and re.search(r"(?<!\d)1 passed", p.stdout), p.stdout + p.stderr
    # the plugin is loaded (its option exists), it just collects nothing of its own
    assert "--sde-cpu" in _pytest("--help", cwd=tmp_path).stdout
    p = _pytest("--co", "-q", "test_x.py", cwd=tmp_path)
    assert p.stdout.splitlines()[0] == "test_x.py::test_x" and "1 test collected" in p.stdout


def test_unknown_cpu_is_a_usage_error_listing_names(tmp_path: Path) -> None:
    p = _pytest(
        "-q", f"--sde-matrix={ROOT / 'sde_matrix.yaml'}", "--sde-cpu=spr,nosuchcpu", cwd=tmp_path
    )
    assert p.returncode == 4, p.stdout + p.stderr  # pytest's usage-error exit code
    err = p.stderr
    assert "nosuchcpu" in err and "spr" in err and "snb" in err
    assert "Traceback" not in err


def test_broken_probe_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-probe"
    env = {**os.environ, "SDEMATRIX_PROBE": str(missing)}
    p = _pytest(
        "-q", f"--sde-matrix={ROOT / 'sde_matrix.yaml'}", "--sde-cpu=snb", cwd=tmp_path, env=env
    )
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"--sde-cpu: SDEMATRIX_PROBE={missing}: no such file" in p.stderr
    assert "Traceback" not in p.stderr


_SNB_SPR_WHY = ptrace_skip_reason(ROOT / "sde_matrix.yaml", ["snb", "spr"])


# The real reason, so the conftest hook can tell a host limit from a broken tracer.
@pytest.mark.skipif(_SNB_SPR_WHY is not None, reason=str(_SNB_SPR_WHY))
def test_sde_cpu_runs_the_shipped_checks_with_junit_properties(tmp_path: Path) -> None:
    junit = tmp_path / "sde.xml"
    p = _pytest(
        "-q",
        f"--sde-matrix={ROOT / 'sde_matrix.yaml'}",
        "--sde-cpu=snb,spr",
        "--sde-backend=ptrace",
        "-k",
        "gcm and encrypt",
        f"--junitxml={junit}",
        str(SHIPPED_TESTS),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    cases = list(ET.parse(junit).iter("testcase"))
    # 2 CPUs x 2 gcm encrypt workloads x 4 checks
    assert len(cases) == 2 * 2 * 4
    seen = set()
    for c in cases:
        props = {q.get("name"): q.get("value") for q in c.iter("property")}
        assert {"cpu", "backend", "path", "expected_path", "check"} <= set(props)
        assert props["backend"] == "ptrace"
        assert props["path"] == props["expected_path"]
        seen.add((props["cpu"], props["path"], props["check"]))
    assert {("snb", "aesni"), ("spr", "avx512")} == {(c, p) for c, p, _ in seen}
    assert {k for _, _, k in seen} == {"dispatch", "mix", "chip", "answer"}


_WSM_WHY = ptrace_skip_reason(ROOT / "sde_matrix.yaml", ["wsm"])


@pytest.mark.skipif(_WSM_WHY is not None, reason=str(_WSM_WHY))
@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["header", "quiet"])
def test_a_masked_shell_does_not_change_the_cells(tmp_path: Path, quiet: list[str]) -> None:
    """VAESCRYPT_CPU_MASK=-aes in pytest's environment: the probe does not
    inherit it (wsm still takes aesni), and the session header says so --
    under -q, which hides the header, the end of the report does."""
    env = {**os.environ, "VAESCRYPT_CPU_MASK": "-aes"}
    p = _pytest(
        *quiet,
        f"--sde-matrix={ROOT / 'sde_matrix.yaml'}",
        "--sde-cpu=wsm",
        "--sde-backend=ptrace",
        "-k",
        "gcm and encrypt",
        str(SHIPPED_TESTS),
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert re.search(r"(?<!\d)8 passed", p.stdout), p.stdout[-2000:]
    said = "sdematrix: VAESCRYPT_CPU_MASK=-aes in the environment is not passed to the probe"
    assert p.stdout.count(said) == 1, p.stdout[-2000:]
    # before the tests' progress with the header, after it under -q
    assert (p.stdout.index(said) > p.stdout.index("[100%]")) == bool(quiet), p.stdout[-2000:]
