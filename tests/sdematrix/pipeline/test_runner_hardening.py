"""The runner against a probe that misbehaves (tests/doubles/bad-probe, traced by
the ptrace backend like any program): every crash, hang, output flood or
missing report becomes an `error` cell within --timeout that shows the last
output lines, the other cells still run, and SIGINT / SIGTERM end every child
process, write results + JUnit for the cells done so far and exit 130.

The double is installed as <tmp>/<unique marker>/vc-probe, so each process it
becomes or starts (and each vc-tracer, whose command line names the program)
carries the marker: a /proc scan for it after the run finds anything left
behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from doubles.sdematrix_cli import (
    BAD_PROBE,
    SHIPPED_MATRIX,
    alive,
    cli_argv,
    cli_env,
    processes_with,
    ptrace_skip_reason,
    read_cells,
    read_junit,
    run_cli,
)

from sdematrix.spec.matrix_file import load_matrix

CPU = "hsw"
TIMEOUT = 5.0


@pytest.fixture
def bad_probe(tmp_path: Path) -> tuple[Path, str]:
    why = ptrace_skip_reason(SHIPPED_MATRIX, [CPU])
    if why is not None:
        pytest.skip(why)
    marker = f"sdmx-hardening-{uuid.uuid4().hex[:12]}"
    probe = tmp_path / marker / "vc-probe"
    probe.parent.mkdir()
    shutil.copy(BAD_PROBE, probe)
    probe.chmod(0o755)
    return probe, marker


def _wait_gone(marker: str, within: float = 5.0) -> list[tuple[int, str]]:
    """Processes still carrying `marker` after `within` seconds (empty: none)."""
    deadline = time.monotonic() + within
    left = processes_with(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_with(marker)
    return left


# What each behaviour must look like: (cell mode.dir, behaviour, reason check).
PLAN = {
    "gcm.encrypt": "segv",
    "gcm.decrypt": "abort",
    "cfb128.encrypt": "hang",
    "cfb128.decrypt": "flood",
    "cfb8.encrypt": "nojson",
    "cfb8.decrypt": "garbage",
    "cfb1.decrypt": "orphan",
    # cfb1.encrypt: no entry -> "report": a well-formed report, judged normally
}


def _no_report(behaviour: str, key: str, how: str) -> str:
    return (
        f"probe printed no JSON report (first line: 'bad-probe {behaviour} {key}: stdout line 1') "
        f"({how}) bad-probe {behaviour} {key}: last words on stderr"
    )


def test_misbehaving_probe_makes_error_cells_and_the_run_goes_on(
    bad_probe: tuple[Path, str], tmp_path: Path
) -> None:
    probe, marker = bad_probe
    out = tmp_path / "out"
    junit = tmp_path / "junit.xml"
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    r = run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--backend",
        "ptrace",
        "--cpu",
        CPU,
        "--jobs",
        "2",
        "--timeout",
        f"{TIMEOUT:g}",
        "--out",
        str(out),
        "--junit",
        str(junit),
        env=cli_env(
            SDEMATRIX_PROBE=str(probe),
            BAD_PROBE_PLAN=",".join(f"{k}={v}" for k, v in PLAN.items()),
            BAD_PROBE_PIDS=str(pids),
        ),
        timeout=120,
    )
    wall = time.monotonic() - t0
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    # the hanging cell costs one --timeout, not the run
    assert wall < TIMEOUT + 40, wall

    cells = read_cells(out)
    doc = cells.pop("")
    names = [c.name for c in load_matrix(SHIPPED_MATRIX).cells([CPU])]
    assert sorted(cells) == sorted(names) and doc["not_run"] == []
    assert doc["interrupted"] is False
    cases = read_junit(junit)
    assert set(cases) == set(names)

    expected_reason = {
        "segv": lambda key: _no_report("segv", key, f"killed by signal {int(signal.SIGSEGV)}"),
        "abort": lambda key: _no_report("abort", key, f"killed by signal {int(signal.SIGABRT)}"),
        "nojson": lambda key: _no_report("nojson", key, "exit 0"),
        "garbage": lambda key: _no_report("garbage", key, "exit 3"),
        "hang": lambda key: f"timed out after {TIMEOUT:g} s",
        "flood": lambda key: "probe output flood (killed)",
    }
    for name, c in cells.items():
        key = f"{c['mode']}.{c['direction']}"
        behaviour = PLAN.get(key, "report")
        case = cases[name]
        assert case.status == c["status"], name
        if behaviour == "report":
            # a report with no marked region behind it: no evidence, an error
            # (never judged as if the path had run)
            assert c["status"] == "error", (name, c["reasons"])
            assert c["reasons"][0].startswith("empty region: "), c["reasons"]
            continue
        assert c["status"] == "error", (name, c["status"], c["reasons"])
        if behaviour == "orphan":
            # vc-tracer ends the trace when the probe exits and kills what it
            # left behind, so this is an exit-time "no report" error (a
            # tracer without that rule would end by the timeout)
            assert c["reasons"][0] in (
                f"timed out after {TIMEOUT:g} s",
                _no_report("orphan", key, "exit 0"),
            ), c["reasons"]
        else:
            assert c["reasons"] == [expected_reason[behaviour](key)], name
        assert case.message == c["reasons"][0]
        # the last output lines, in results.json and in the JUnit error text
        tail = c["output_tail"]
        assert f"bad-probe {behaviour} {key}: last words on stderr" in tail, (name, tail)
        if behaviour == "flood":
            last = tail.splitlines()[-1]
            assert last == f"bad-probe flood {key}: flood from {probe}", last
        else:
            assert f"bad-probe {behaviour} {key}: stdout line 3" in tail
        if behaviour == "garbage":  # the half report is the last line
            assert tail.splitlines()[-1].startswith('{"probe": 1, "status": "ok", "mode"')
        assert tail in case.text
        if behaviour == "hang":
            assert TIMEOUT - 0.5 <= c["duration_s"] <= TIMEOUT + 5, c["duration_s"]
        assert c["duration_s"] <= TIMEOUT + 5, (name, c["duration_s"])
    # every blocking process of the hanging and the orphaning cells (some in
    # their own session) is gone
    # (the orphaning cell's helper may be killed by the tracer, which ends the
    # trace when the probe exits, before it records its pid)
    assert len(pids.read_text().split()) in (3, 3 + 1)
    assert _wait_gone(marker) == []
    assert not [p for p in map(int, pids.read_text().split()) if alive(p)]


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["SIGINT", "SIGTERM", "SIGINT-to-group"],
)
def test_signal_ends_every_child_and_writes_the_finished_cells(
    bad_probe: tuple[Path, str], tmp_path: Path, sig: signal.Signals, to_group: bool
) -> None:
    """Longest cells start first (gcm 512 B): they end at once without a
    report; the next two (cfb128) hang with helpers that ignore SIGTERM/SIGINT,
    one in its own session.  The signal arrives while they hang."""
    probe, marker = bad_probe
    out = tmp_path / f"out-{marker}"
    junit = tmp_path / "partial.xml"
    pids = tmp_path / "pids"
    proc = subprocess.Popen(
        cli_argv(
            "run",
            "--matrix",
            str(SHIPPED_MATRIX),
            "--backend",
            "ptrace",
            "--cpu",
            CPU,
            "--jobs",
            "2",
            "--timeout",
            "600",
            "--out",
            str(out),
            "--junit",
            str(junit),
        ),
        env=cli_env(
            SDEMATRIX_PROBE=str(probe),
            BAD_PROBE_PLAN="gcm=nojson,*=hang",
            BAD_PROBE_PIDS=str(pids),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=to_group,
    )
    try:
        deadline = time.monotonic() + 60
        # two hanging cells, each with its three blocking processes
        while time.monotonic() < deadline and proc.poll() is None:
            if pids.exists() and len(pids.read_text().split()) >= 6:
                break
            time.sleep(0.1)
        else:
            proc.kill()
            pytest.fail(f"the hanging cells never started: {proc.communicate()[1]}")
        assert len(processes_with(marker)) >= 2 + 6  # 2 tracers + the blocked shells
        if to_group:
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does
        else:
            proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        "sdematrix: error: interrupted; results for finished cells written"
    )
    assert "not run (interrupted)" in stdout
    assert _wait_gone(marker) == [], "processes survived the interrupt"
    assert not [p for p in map(int, pids.read_text().split()) if alive(p)]

    cells = read_cells(out)
    doc = cells.pop("")
    assert doc["interrupted"] is True
    finished = set(cells)
    assert finished and all(n.split(".")[1] == "gcm" for n in finished), finished
    assert all(c["status"] == "error" for c in cells.values())
    all_cells = {c.name for c in load_matrix(SHIPPED_MATRIX).cells([CPU])}
    not_run = set(doc["not_run"])
    assert doc["counts"]["not_run"] == len(not_run) and not_run == all_cells - finished
    # the cells that were hanging when the signal came were killed: not results
    assert {f"{CPU}.cfb128.encrypt.256.300", f"{CPU}.cfb128.decrypt.256.300"} <= not_run
    for path in (junit, out / "junit.xml"):
        cases = read_junit(path)
        assert set(cases) == finished, path
        assert all(c.status == "error" for c in cases.values())
