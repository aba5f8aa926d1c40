"""Issue 22, part 3 and the smaller items: exec on par with run, one set of
options for run / exec / docker run / the pytest plugin, and the small CLI
fixes (explain's reasons and suggestions, mix's summary, report
--step-summary without $GITHUB_STEP_SUMMARY, plugin node IDs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdematrix.cli import options
from sdematrix.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
MIX_FIXTURE = (
    Path(__file__).resolve().parents[3] / "tests" / "data" / "sde" / "sde-9.24.0-mix-out.txt"
)
LOCAL_MIX = ROOT / "tests" / "data"


def _ptrace_missing() -> str | None:
    from sdematrix.backends.ptrace.backend import PtraceBackend

    return PtraceBackend().unavailable_reason()


needs_ptrace = pytest.mark.skipif(
    _ptrace_missing() is not None, reason=f"ptrace backend: {_ptrace_missing()}"
)


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdematrix", *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def _actions(command: list[str]) -> dict[str, Any]:
    parser = build_parser()
    sub = parser
    for name in command:
        sub = next(a for a in sub._actions if a.dest in ("command", "docker_command")).choices[name]
    return {a.option_strings[0]: a for a in sub._actions if a.option_strings}


# ------------------------------------------------------------ one options --


def test_run_exec_docker_and_pytest_share_flags_defaults_and_help() -> None:
    cmds = {"run": ["run"], "exec": ["exec"], "docker": ["docker", "run"]}
    acts = {k: _actions(v) for k, v in cmds.items()}
    for opt in options.OPTIONS:
        for where in ("run", "exec", "docker"):
            if where not in opt.where:
                continue
            a = acts[where][opt.flag]
            assert a.default == opt.kwargs["default"], (where, opt.flag)
            assert a.help == opt.kwargs["help"], (where, opt.flag)
    assert (
        acts["run"]["--timeout"].default
        == acts["exec"]["--timeout"].default
        == acts["docker"]["--timeout"].default
        == options.DEFAULT_TIMEOUT
    )
    # backend choices written once: exec lacks only qemu
    assert tuple(acts["run"]["--backend"].choices) == options.BACKEND_CHOICES
    assert tuple(acts["docker"]["--backend"].choices) == options.BACKEND_CHOICES
    assert tuple(acts["exec"]["--backend"].choices) == ("auto", "sde", "ptrace")
    # the plugin: same defaults and help under --sde-*
    from _pytest.config.argparsing import Parser

    from sdematrix.integrations.pytest_plugin import pytest_addoption

    parser = Parser(_ispytest=True)
    pytest_addoption(parser)
    group = parser.getgroup("sdematrix")
    by_name = {o.names()[0]: o for o in group.options}
    for opt in options.OPTIONS:
        if "pytest" in opt.where:
            o = by_name[options.pytest_flag(opt)]
            assert o.attrs()["default"] == opt.kwargs["default"], opt.flag
            assert o.attrs()["help"] == opt.kwargs["help"], opt.flag
    assert {
        "--sde-cpu",
        "--sde-backend",
        "--sde-path",
        "--sde-timeout",
        "--sde-cpuid-mode",
        "--sde-allow-skip",
        "--sde-matrix",
    } <= set(by_name)


def test_exec_offers_no_qemu() -> None:
    p = cli("exec", "--backend", "qemu", "--cpu", "hsw", "--", "true")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "invalid choice: 'qemu'" in p.stderr
    assert "qemu" not in cli("exec", "--help").stdout.split("--backend", 1)[1].split("\n")[0]


def test_print_command_without_sde(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SDE_PATH"}
    env["PATH"] = "/usr/bin:/bin"
    p = cli(
        "exec", "--backend", "sde", "--print-command", "--cpu", "hsw,spr", "--", "true", env=env
    )
    assert p.returncode == 0, p.stderr
    # (a note line first for each dispatch override this host's environment sets)
    lines = [x for x in p.stderr.strip().splitlines() if not x.startswith("sdematrix exec: note: ")]
    assert "Intel SDE not installed" in lines[0] and "printing the commands" in lines[0]
    assert lines[1].startswith("sdematrix exec: hsw: sde64 -hsw -mix")
    assert lines[2].startswith("sdematrix exec: spr: sde64 -spr ") and lines[2].endswith("-- true")
    # without --print-command a missing SDE is still an error (exit 2, one line)
    q = cli("exec", "--backend", "sde", "--cpu", "hsw", "--", "true", env=env)
    assert q.returncode == 2 and "Intel SDE not installed" in q.stderr
    # --sde-path is taken (and checked) by exec
    r = cli(
        "exec",
        "--backend",
        "sde",
        "--sde-path",
        str(tmp_path / "nope"),
        "--cpu",
        "hsw",
        "--",
        "true",
        env=env,
    )
    assert r.returncode == 2 and "from --sde-path" in r.stderr


EXPECT = """\
expectations:
  - name: plain integer code runs
    require: [{isa_set: I86}]
  - name: no AVX-512 without it
    lacks: [AVX512F]
    forbid: [{isa_set: "AVX512*"}]
"""


@needs_ptrace
def test_exec_jobs_report_and_one_case_per_expectation(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPECT)
    out, rep = tmp_path / "out", tmp_path / "rep"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")}
    p = cli(
        "exec",
        "--cpu",
        "nhm,hsw,spr",
        "--jobs",
        "2",
        "--expect",
        str(exp),
        "--out",
        str(out),
        "--junit",
        str(tmp_path / "j.xml"),
        "--report",
        str(rep),
        "--",
        "/bin/true",
        env=env,
    )
    assert p.returncode == 0, p.stderr
    cases = [c.get("name") for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")]
    assert sorted(cases) == sorted(
        [
            "nhm: run and chip check",
            "nhm: plain integer code runs",
            "nhm: no AVX-512 without it",
            "hsw: run and chip check",
            "hsw: plain integer code runs",
            "hsw: no AVX-512 without it",
            "spr: run and chip check",
            "spr: plain integer code runs",
        ]
    )
    md = (rep / "summary.md").read_text()
    assert "3 models: 3 passed" in md
    assert "| spr | pass | pass | n/a |" in md  # spr has AVX-512: the rule does not apply
    assert "Functions and the ISA sets they executed" in md
    assert (rep / "report.html").read_text().startswith("<!doctype html>")
    assert "3 passed" in (tmp_path / "step.md").read_text()
    # `sdematrix report` reads an exec results directory
    r = cli("report", str(out), "--markdown", str(tmp_path / "again.md"))
    assert r.returncode == 0, r.stderr
    assert (out / "report.html").is_file()
    assert (tmp_path / "again.md").read_text().splitlines()[2:] == md.splitlines()[2:]


@needs_ptrace
def test_exec_allow_skip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host without AVX-512 cannot present spr: an error (exit 1) unless
    --allow-skip, which skips it with the backend's reason."""
    from sdematrix.backends.ptrace import backend as ptrace

    real = ptrace.host_features()
    monkeypatch.setattr(
        ptrace, "host_features", lambda: frozenset(f for f in real if not f.startswith("AVX512"))
    )
    j = tmp_path / "j.xml"
    assert main(["exec", "--cpu", "hsw,spr", "--junit", str(j), "--", "/bin/true"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"spr +ERROR +cannot run here \(ptrace\): host CPU lacks AVX512", err), err
    assert (
        main(["exec", "--cpu", "hsw,spr", "--allow-skip", "--junit", str(j), "--", "/bin/true"])
        == 0
    )
    err = capsys.readouterr().err
    assert re.search(r"spr +SKIP +cannot run here \(ptrace\): host CPU lacks AVX512", err), err
    root = ET.parse(j).getroot()
    assert root.get("skipped") == "1" and root.get("failures") == "0"


@needs_ptrace
def test_exec_models_only_file(tmp_path: Path) -> None:
    full = yaml.safe_load((ROOT / "sde_matrix.yaml").read_text())
    mine = dict(full["models"]["hsw"], title="my Haswell-like part")
    f = tmp_path / "models.yaml"
    f.write_text(yaml.safe_dump({"models": {"myhsw": mine}}))
    p = cli("exec", "--models", str(f), "--cpu", "myhsw", "--", "/bin/true")
    assert p.returncode == 0, p.stderr
    assert re.search(r"myhsw +PASS", p.stderr)
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  x:\n    titel: typo\n")
    q = cli("exec", "--models", str(bad), "--cpu", "x", "--", "/bin/true")
    assert q.returncode == 2 and len(q.stderr.strip().splitlines()) == 1, q.stderr
    assert f"{bad}:3" in q.stderr and "titel" in q.stderr
    # a whole matrix file is not a models-only file
    r = cli("exec", "--models", str(ROOT / "sde_matrix.yaml"), "--cpu", "hsw", "--", "true")
    assert r.returncode == 2 and "unknown key" in r.stderr


# ------------------------------------------------------------- smaller ----


def test_explain_gives_the_real_reason_and_suggests_names() -> None:
    p = cli("explain", "icl", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    cfb8 = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("cfb8/encrypt"))
    assert "cfb8/encrypt -> aesni: VAES" in cfb8 and "not eligible for serial modes" in cfb8
    cfb128 = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("cfb128/encrypt"))
    assert "needs the previous ciphertext" in cfb128
    q = cli("explain", "ICL", cwd=ROOT)
    assert q.returncode == 2 and "did you mean 'icl'?" in q.stderr
    assert len(q.stderr.strip().splitlines()) == 1


def test_mix_prints_a_summary_unless_json() -> None:
    p = cli("mix", str(MIX_FIXTURE))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) < 60 and "instructions executed" in lines[0]
    assert "top ISA sets:" in p.stdout and "(--json for all)" in p.stdout
    j = cli("mix", str(MIX_FIXTURE), "--json")
    assert j.returncode == 0 and len(j.stdout.splitlines()) > 1000
    assert json.loads(j.stdout)["source"] == "sde"


def test_report_step_summary_says_when_unset(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out).mkdir()
    (out / "results.json").write_text(
        json.dumps(
            {
                "tool": {"name": "sdematrix exec", "version": "x"},
                "argv": ["true"],
                "expectations": [],
                "models": [
                    {
                        "model": "hsw",
                        "status": "pass",
                        "checks": [{"name": "run and chip check", "status": "pass", "reasons": []}],
                    }
                ],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    p = cli("report", str(out), "--step-summary", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == [
        "sdematrix: --step-summary: $GITHUB_STEP_SUMMARY is not set (not on GitHub Actions?): "
        + "no step summary written"
    ]


def test_plugin_node_ids_rerun_one_test() -> None:
    from sdematrix.integrations.pytest_plugin import SHIPPED_TESTS, shipped_args

    shipped = str(SHIPPED_TESTS)
    sel = "test_cell[hsw.gcm.encrypt.128.64-chip]"
    assert shipped_args([f"::{sel}"]) == [f"{shipped}::{sel}"]
    assert shipped_args([f"../elsewhere/testing/test_sde_matrix.py::{sel}"]) == [
        f"{shipped}::{sel}"
    ]
    assert shipped_args(["tests"]) == ["tests", shipped]
    assert shipped_args([shipped]) == [shipped]


@needs_ptrace
def test_plugin_rerun_by_printed_node_id(tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--sde-cpu=hsw",
        "--sde-backend=ptrace",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    listed = subprocess.run(
        [*base, "--collect-only", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    ids = [ln for ln in listed.stdout.splitlines() if "-chip]" in ln]
    assert ids, listed.stdout[-2000:] + listed.stderr[-2000:]
    one = subprocess.run(
        [*base, "-q", ids[0]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    assert "1 passed" in one.stdout
