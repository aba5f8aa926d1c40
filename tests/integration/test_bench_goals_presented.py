"""A bench run under a presented CPU is not a verdict on that CPU.

`sdematrix exec --cpu zen4 -- python -m vaescrypt.bench --json` runs the
bench on this host's cores while the dispatcher reads Zen 4 from CPUID.
Issue 23's goals are judged only on Zen 4 (vaescrypt.bench_goals), so the
machine a run records must say that its reading was presented: here the
real presentation, in each CPUID mode the host has, is recorded as Zen 4
(the presentation works) and not judged (the tracer is seen)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    cli_env,
    run_cli,
    skip_unless_ptrace_runs,
)

from vaescrypt.bench_goals import Machine, _kernel_cpu

CODE = (
    "import json; from vaescrypt.bench_goals import this_machine; "
    "print('machine=' + json.dumps(this_machine().as_json()))"
)


@pytest.mark.parametrize("mode", ["bp", "fault"])
def test_a_presented_zen4_is_recorded_and_not_judged(mode: str) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["zen4"], mode)
    r = run_cli(
        "exec", "--cpu", "zen4", "--cpuid-mode", mode, "--", sys.executable, "-c", CODE,
        env=cli_env(),
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-800:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("machine="))
    m = Machine.from_json(json.loads(line.removeprefix("machine=")))
    assert m is not None and m.is_zen4, line
    # the kernel's reading is this host's, whatever the process was shown
    host = _kernel_cpu(Path("/proc/cpuinfo").read_text())
    assert (m.kernel_vendor, m.kernel_family, m.kernel_model) == host, line
    assert m.tracer_pid, line
    assert not m.judged and m.not_real is not None and "traced" in m.not_real
