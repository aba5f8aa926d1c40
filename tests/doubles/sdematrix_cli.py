"""Helpers for tests that drive ``sdematrix`` as a real subprocess: a clean
environment, the run's results.json / JUnit read back per cell, the one-line
error contract, whether the ptrace backend can run given models here, and a
/proc scan for processes left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sdematrix.backends.ptrace.backend import PtraceBackend

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MATRIX = ROOT / "sde_matrix.yaml"
BAD_PROBE = Path(__file__).resolve().parent / "bad-probe"

# Variables of other doubles / the caller's shell that must not leak into a run.
_DROP_PREFIXES = ("SDE_", "FAKE_PROBE", "BAD_PROBE", "SDEMATRIX_PROBE", "SDEMATRIX_DEBUG")


def cli_env(*, hide_sde: bool = False, **extra: str) -> dict[str, str]:
    """The caller's environment without other doubles' variables; with
    hide_sde, no directory holding an sde64 stays on PATH either."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    if hide_sde:
        env["PATH"] = os.pathsep.join(
            p
            for p in env.get("PATH", "").split(os.pathsep)
            if p and not (Path(p) / "sde64").exists()
        )
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "sdematrix", *args]


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args),
        check=False,
        capture_output=True,
        text=True,
        env=env or cli_env(),
        cwd=cwd,
        timeout=timeout,
    )


def assert_one_line_error(r: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Exit `code`, exactly one stderr line ``sdematrix: error: ...`` holding
    every needle, no traceback; returns that line."""
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("sdematrix: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# --------------------------------------------------------------- results --


@dataclass(frozen=True)
class JunitCase:
    status: str  # pass | fail | error | skip
    message: str
    text: str


def read_models(out: Path) -> dict[str, dict[str, Any]]:
    """An exec --out directory's results.json: each model's result by name."""
    return {m["model"]: m for m in json.loads((out / "results.json").read_text())["models"]}


def read_cells(out: Path) -> dict[str, dict[str, Any]]:
    """results.json's cells by name (plus the whole document under "")."""
    doc = json.loads((out / "results.json").read_text())
    cells = {c["cell"]: c for c in doc["cells"]}
    assert "" not in cells
    cells[""] = doc
    return cells


def read_junit(path: Path) -> dict[str, JunitCase]:
    cases: dict[str, JunitCase] = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        status, message, text = "pass", "", ""
        for tag, st in (("failure", "fail"), ("error", "error"), ("skipped", "skip")):
            el = tc.find(tag)
            if el is not None:
                status, message, text = st, el.get("message", ""), el.text or ""
                break
        cases[tc.get("name", "")] = JunitCase(status, message, text)
    return cases


# ------------------------------------------------------------ the host --


def fault_mode_skip_reason() -> str | None:
    """Why this host cannot run the tracer's "fault" CPUID mode, or None."""
    from sdematrix.backends.ptrace.backend import cpuid_faulting_available

    why = cpuid_faulting_available()
    return None if why is True else f"host has no CPUID faulting ({why})"


def _host_limit(reason: str) -> str:
    """`reason` (a backend's unavailable_reason) when it is a host limit
    (Kind.HOST_LIMIT: the kernel forbids ptrace, not x86-64 Linux, no CPUID
    faulting), to skip with; a test failure when the backend is broken (a
    bug, not a host limit).  Read from the reason's kind, as every consumer
    of sdematrix's reasons does, never from its text."""
    from sdematrix.verdict.reasons import Kind, Reason

    if isinstance(reason, Reason) and reason.kind is Kind.HOST_LIMIT:
        return str(reason)
    pytest.fail(f"ptrace backend broken: {reason}")


def usable_ptrace(b: PtraceBackend) -> PtraceBackend:
    """`b` if its self-test passed; a skip for a host limit, a failure for a
    broken tracer (see _host_limit)."""
    reason = b.unavailable_reason()
    if reason is not None:
        pytest.skip(_host_limit(reason))
    return b


def ptrace_skip_reason(matrix: Path, models: list[str]) -> str | None:
    """Why the ptrace backend cannot run `models` of `matrix` on this host
    (None: it can); a test failure when the tracer is broken (see
    _host_limit)."""
    from sdematrix.backends.ptrace.backend import PtraceBackend
    from sdematrix.spec.matrix_file import load_matrix

    backend = PtraceBackend()
    why = backend.unavailable_reason()
    if why is not None:
        return f"ptrace backend unavailable: {_host_limit(why)}"
    m = load_matrix(matrix)
    for name in models:
        why = backend.cannot_run(m.models[name])
        if why is not None:
            return why
    return None


def skip_unless_ptrace_runs(matrix: Path, models: list[str], mode: str) -> None:
    """Skip unless the ptrace backend can present `models` of `matrix` here in
    CPUID `mode` ("bp" or "fault"; fault needs the kernel's CPUID faulting);
    a broken tracer fails (see ptrace_skip_reason)."""
    why = ptrace_skip_reason(matrix, models)
    if why is None and mode == "fault":
        why = fault_mode_skip_reason()
    if why is not None:
        pytest.skip(why)


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, exited but not yet reaped,
    does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_with(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose command line contains
    `marker` (zombies have an empty command line and are not listed)."""
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if marker in cmd:
            found.append((int(name), cmd))
    return found
