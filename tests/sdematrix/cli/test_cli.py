"""The sdematrix CLI as a real subprocess: exit codes, one-line errors, a run with
the SDE double, and Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from doubles.fake_matrix import FAKE_PROBE, SDE_DOUBLE
from doubles.sdematrix_cli import assert_one_line_error, cli_env, run_cli

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "sde_matrix.yaml"
FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "data" / "sde" / "sde-9.24.0-mix-out.txt"
needs_matrix = pytest.mark.skipif(not MATRIX.exists(), reason="sde_matrix.yaml not present")


def clean_env(**extra: str) -> dict[str, str]:
    return cli_env(hide_sde=True, **extra)


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env or clean_env(), cwd=cwd, timeout=timeout)


def test_bad_yaml(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("models: [unclosed\n  - x: {\n")
    assert_one_line_error(
        cli("run", "--matrix", str(bad), "--out", str(tmp_path / "o")), 2, "m.yaml"
    )
    assert_one_line_error(cli("list-cpus", "--matrix", str(bad)), 2)


def test_missing_matrix_file(tmp_path):
    assert_one_line_error(cli("explain", "spr", "--matrix", str(tmp_path / "nope.yaml")), 2)


@needs_matrix
def test_unknown_cpu(tmp_path):
    r = cli("run", "--matrix", str(MATRIX), "--cpu", "spr,pentium9", "--out", str(tmp_path / "o"))
    assert_one_line_error(r, 2, "pentium9")


@needs_matrix
def test_backend_sde_without_sde(tmp_path):
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "spr",
        "--backend",
        "sde",
        "--out",
        str(tmp_path / "o"),
    )
    assert_one_line_error(r, 2, "backend 'sde' is not available", "Intel SDE not installed")
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "spr",
        "--sde-path",
        str(tmp_path / "none"),
        "--out",
        str(tmp_path / "o"),
    )
    assert_one_line_error(r, 2, "--sde-path")


@needs_matrix
def test_unwritable_out_dir(tmp_path):
    f = tmp_path / "afile"
    f.write_text("")
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "spr",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        str(f / "out"),
    )
    assert_one_line_error(r, 2, "not writable")


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("run", "--jobs", "0"),
        ("run", "--timeout", "abc"),
        ("frobnicate",),
        ("run", "--backend", "bochs"),
    ],
)
def test_bad_arguments(args):
    assert_one_line_error(cli(*args), 2)


def test_mix_command(tmp_path):
    # the whole normalised mix is --json; the default is a summary (issue 22)
    r = cli("mix", str(FIXTURE), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["source"] == "sde" and d["overall"]["total"] == 187998768
    assert d["overall"]["by_isa_ext"]["AVX2"] == 1090
    summary = cli("mix", str(FIXTURE))
    assert summary.returncode == 0 and "187,998,768 instructions executed" in summary.stdout
    cut = tmp_path / "cut.mix"
    cut.write_text("\n".join(FIXTURE.read_text().splitlines()[:13000]) + "\n")
    assert_one_line_error(cli("mix", str(cut)), 2, "cut.mix:", "truncated")


@pytest.fixture
def run_env(tmp_path):
    """Env for runs with the SDE double and the fake probe, installed under the
    name vc-probe (the matrix's signatures are scoped to image vc-probe*)."""
    probe = tmp_path / "bin" / "vc-probe"
    probe.parent.mkdir()
    shutil.copy(FAKE_PROBE, probe)

    def make(**extra: str) -> dict[str, str]:
        return clean_env(SDEMATRIX_PROBE=str(probe), FAKE_PROBE_PATH="aesni", **extra)

    return make


@needs_matrix
def test_run_with_double_all_pass(tmp_path, run_env):
    out = tmp_path / "out"
    junit = tmp_path / "j" / "report.xml"
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "wsm,hsw",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        str(out),
        "--junit",
        str(junit),
        "--jobs",
        "2",
        env=run_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "wsm" in r.stdout and "hsw" in r.stdout and " 0 failed" in r.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["counts"]["fail"] == 0 and res["counts"]["pass"] > 0
    root = ET.parse(junit).getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["wsm", "hsw"]
    assert (out / "junit.xml").exists()


@needs_matrix
def test_run_with_double_failures_exit_1(tmp_path, run_env):
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "spr",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        str(tmp_path / "o"),
        env=run_env(),
    )
    assert r.returncode == 1, r.stderr
    assert "path: expected avx512, got aesni" in r.stderr  # progress lines name the reason
    assert "failed" in r.stdout


@needs_matrix
def test_run_errors_exit_1_and_run_goes_on(tmp_path, run_env):
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "hsw",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        str(tmp_path / "o"),
        env=run_env(SDE_DOUBLE_TRUNCATE="1"),
    )
    assert r.returncode == 1
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res["counts"]["error"] == len(res["cells"]) > 1
    assert all("bad mix file" in c["reasons"][0] for c in res["cells"])


@needs_matrix
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_kills_children_and_writes_junit(tmp_path, run_env, sig):
    pidfile = tmp_path / "pids"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sdematrix",
            "run",
            "--matrix",
            str(MATRIX),
            "--cpu",
            "hsw",
            "--backend",
            "sde",
            "--sde-path",
            str(SDE_DOUBLE),
            "--out",
            str(out),
            "--jobs",
            "2",
            "--timeout",
            "600",
        ],
        env=run_env(SDE_DOUBLE_HANG=str(pidfile)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if pidfile.exists() and len(pidfile.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the double never started")
    proc.send_signal(sig)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("sdematrix: error: interrupted")
    pids = [int(p) for line in pidfile.read_text().splitlines() for p in line.split()]
    time.sleep(0.3)
    for p in pids:
        try:
            os.kill(p, 0)
            alive = Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[0] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"process {p} survived the interrupt"
    res = json.loads((out / "results.json").read_text())
    assert res["interrupted"] is True and res["counts"]["not_run"] > 0
    ET.parse(out / "junit.xml")


def test_progress_plain_and_tty():
    import io

    from sdematrix.pipeline.progress import Progress
    from sdematrix.spec.models import Cell
    from sdematrix.verdict.cell import Outcome

    cell = Cell("spr", "gcm", "encrypt", 128, 64)
    fail = Outcome(
        cell,
        "fail",
        ["path: expected avx512, got aesni", "x"],
        path="aesni",
        expected_path="avx512",
        backend="sde",
        duration_s=1.25,
    )
    plain = io.StringIO()
    p = Progress(2, plain, tty=False)
    p.start(cell)
    p.finish(fail)
    p.close()
    assert plain.getvalue() == (
        "[1/2] FAIL  spr.gcm.encrypt.128.64 (sde, aesni, 1.2s): "
        "path: expected avx512, got aesni (+1 more)\n"
        "      x\n"  # every further reason of a failure, indented (issue 22)
    )
    live = io.StringIO()
    p = Progress(2, live, tty=True)
    p.start(cell)
    assert live.getvalue().startswith(
        "\r[0/2] pass 0 fail 0 error 0 skip 0 | spr.gcm.encrypt.128.64"
    )
    p.finish(Outcome(cell, "pass", backend="sde", path="avx512"))
    p.close()
    assert "\r[1/2] pass 1 fail 0" in live.getvalue() and live.getvalue().endswith("\n")


# ------------------------------------------------- signals while loading --


# A matrix file on a stalled file system: the loader's read blocks until a
# signal.  (A FIFO given as the matrix no longer blocks -- it is refused at
# once, exit 2, see tests/hardening/test_hostile_inputs.py -- so the stall is a FIFO
# the wrapped reader opens just before it reads the real, regular file.)
_STALLED_CLI = """
import os, sys
import sdematrix.inputs as inputs
stall, real = sys.argv[1], inputs.read_input
def stalled(path, **kw):
    os.read(os.open(stall, os.O_RDONLY), 1)  # blocked in read(), as on a hung NFS
    return real(path, **kw)
inputs.read_input = stalled
from sdematrix.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _fifo_matrix(tmp_path: Path) -> Path:
    fifo = tmp_path / "stall"
    os.mkfifo(fifo)
    return fifo


def _wait_for_reader(fifo: Path, proc: subprocess.Popen[str], within: float = 60) -> int:
    """Open `fifo`'s write end once `proc` has opened it for reading (a
    non-blocking open fails with ENXIO until then).  The write end stays open
    and silent: the reader is then blocked in read(), in the middle of
    loading the matrix file."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("the CLI never opened the matrix file")


@pytest.mark.parametrize(
    "command",
    [("run", "--cpu", "spr", "--backend", "sde"), ("list-cpus",), ("explain", "spr")],
    ids=["run", "list-cpus", "explain"],
)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_loading_the_matrix_is_an_interrupt(tmp_path, command, sig):
    """A signal that lands while the matrix file is read ends the command like
    one during the run: exit 130, one line, no traceback, nothing written."""
    fifo = _fifo_matrix(tmp_path)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_bytes(MATRIX.read_bytes())
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _STALLED_CLI,
            str(fifo),
            *command,
            "--matrix",
            str(matrix),
            *(("--out", str(out)) if command[0] == "run" else ()),
        ],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wfd = _wait_for_reader(fifo, proc)
    try:
        time.sleep(0.2)  # well inside read(): nothing will ever be written
        assert proc.poll() is None
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        os.close(wfd)
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sdematrix: error: interrupted"), stderr
    assert stdout == ""
    assert not out.exists()


def test_sigterm_handler_is_restored_after_main():
    """main() in-process (as the tests and the pytest plugin call it) leaves
    the caller's signal handlers as they were."""
    from sdematrix.cli.main import main

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert main(["list-cpus", "--matrix", "/nonexistent/m.yaml"]) == 2
    assert {s: signal.getsignal(s) for s in before} == before


# ------------------------------------------------------ broken probe path --


def _probe_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (SDEMATRIX_PROBE value, the reason the error must give)."""
    plain = tmp_path / "plain" / "vc-probe"
    plain.parent.mkdir()
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    folder = tmp_path / "folder" / "vc-probe"
    folder.mkdir(parents=True)
    dangling = tmp_path / "dangling" / "vc-probe"
    dangling.parent.mkdir()
    dangling.symlink_to(tmp_path / "gone")
    return {
        "missing": (str(tmp_path / "nope" / "vc-probe"), "no such file"),
        "directory": (str(folder), "is a directory"),
        "not-executable": (str(plain), "not executable (mode 0644)"),
        "dangling-symlink": (str(dangling), "dangling symbolic link"),
    }


@needs_matrix
@pytest.mark.parametrize("case", ["missing", "directory", "not-executable", "dangling-symlink"])
def test_broken_probe_env_is_refused_up_front(tmp_path, case):
    value, why = _probe_cases(tmp_path)[case]
    out = tmp_path / "out"
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "wsm,hsw",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        str(out),
        env=clean_env(SDEMATRIX_PROBE=value),
    )
    assert_one_line_error(r, 2, f"SDEMATRIX_PROBE={value}: {why}")
    assert r.stdout == ""
    assert not out.exists()  # refused before anything was created or run


@needs_matrix
def test_relative_probe_env_runs_from_other_directories(tmp_path, run_env):
    """A relative $SDEMATRIX_PROBE names a file relative to where sdematrix was
    started, not to the directories backends run the probe in."""
    r = cli(
        "run",
        "--matrix",
        str(MATRIX),
        "--cpu",
        "wsm",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        "--out",
        "out",
        cwd=tmp_path,
        env={**run_env(), "SDEMATRIX_PROBE": os.path.join("bin", "vc-probe")},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["counts"]["error"] == 0 and res["counts"]["pass"] > 0


# --------------------------------------------------------------- list-cpus --


def _table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of an aligned text table, split on the header's column starts."""
    lines = text.rstrip("\n").splitlines()
    head = lines[0]
    starts = [i for i, ch in enumerate(head) if ch != " " and (i == 0 or head[i - 1] == " ")]
    bounds = [*starts[1:], None]

    def split(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, bounds, strict=True)]

    return split(head), [split(ln) for ln in lines[1:]]


@needs_matrix
def test_list_cpus_table_has_no_empty_expectation_columns():
    from sdematrix.spec.matrix_file import load_matrix
    from sdematrix.spec.models import DIRECTIONS, MODES

    matrix = load_matrix(MATRIX)
    r = cli("list-cpus", "--matrix", str(MATRIX))
    assert r.returncode == 0, r.stderr
    head, rows = _table_rows(r.stdout)
    assert [row[0] for row in rows] == list(matrix.models)
    path_cols = {c: i for i, c in enumerate(head) if c.split("/", 1)[0] in MODES}
    # cfb128 is split by the classes (encrypt serial, decrypt parallel); the
    # other modes expect one path for both directions on every model
    assert list(path_cols) == ["gcm", "cfb128/enc", "cfb128/dec", "cfb8", "cfb1"]
    for row in rows:
        cpu = row[0]
        for col, i in path_cols.items():
            mode, _, d = col.partition("/")
            dirs = [x for x in DIRECTIONS if x.startswith(d)] if d else list(DIRECTIONS)
            assert {matrix.expected[(cpu, mode, x)] for x in dirs} == {row[i]}, (cpu, col)


def test_list_cpus_rows_one_column_per_mode_when_nothing_splits():
    from doubles.fake_matrix import make_matrix

    from sdematrix.cli import explain

    matrix = make_matrix()
    rows = explain.list_cpus(matrix)
    assert all(list(r)[-4:] == ["gcm", "cfb128", "cfb8", "cfb1"] for r in rows)
    spr = next(r for r in rows if r["cpu"] == "spr")
    assert (spr["gcm"], spr["cfb128"], spr["cfb8"]) == ("avx512", "avx512", "aesni")
    # one model splitting a mode splits that mode's column for every model
    matrix.expected[("hsw", "cfb8", "decrypt")] = "generic"
    rows = explain.list_cpus(matrix)
    assert all(list(r)[-5:] == ["gcm", "cfb128", "cfb8/enc", "cfb8/dec", "cfb1"] for r in rows)
    hsw = next(r for r in rows if r["cpu"] == "hsw")
    assert (hsw["cfb8/enc"], hsw["cfb8/dec"]) == ("aesni", "generic")
