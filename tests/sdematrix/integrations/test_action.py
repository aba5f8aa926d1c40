"""The composite action (action.yml) and its script ci/action.sh, run here
on the outside example project examples/tiny_lib (a C library with an AVX2
and a scalar path and its own CPUID + XGETBV dispatcher):

* action.yml validates against GitHub's action schema, has the documented
  inputs, installs the package, runs ci/action.sh with them and uploads the
  report;
* the script validates tiny_lib with its expect file: exit 0, one JUnit case
  per (model, check), report.html + summary.md, the step summary;
* a dispatcher without its XCR0 check fails on spr_xcr0_sse (exit 1, named);
* without a program it runs the built-in matrix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ACTION = ROOT / "action.yml"
SCRIPT = ROOT / "ci" / "action.sh"
TINY = ROOT / "examples" / "tiny_lib"
CPUS = "nhm,snb,hsw,icl,spr,zen3,spr_xcr0_sse"


def _ptrace_missing() -> str | None:
    from sdematrix.backends.ptrace.backend import PtraceBackend

    return PtraceBackend().unavailable_reason()


needs_ptrace = pytest.mark.skipif(
    _ptrace_missing() is not None, reason=f"ptrace backend: {_ptrace_missing()}"
)


def _run(argv: list[str], timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def _build(tmp: Path, patch: tuple[str, str] | None = None) -> Path:
    src = tmp / "tiny_lib"
    shutil.copytree(TINY, src, ignore=shutil.ignore_patterns("*.so", "tiny_demo"))
    if patch is not None:
        text = (src / "tiny.c").read_text()
        assert patch[0] in text
        (src / "tiny.c").write_text(text.replace(*patch))
    p = _run(["make", "-s", "-C", str(src)])
    assert p.returncode == 0, p.stderr
    return src


def _action(tmp: Path, **inputs: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(tmp / "summary.md")}
    env.update({f"SDEMATRIX_{k.upper()}": v for k, v in inputs.items()})
    return _run(["bash", str(SCRIPT)], env=env, cwd=tmp)


def test_action_metadata() -> None:
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema not installed (it is in the [test] extra)"
    ok = _run([exe, "--builtin-schema", "vendor.github-actions", str(ACTION)])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    meta = yaml.safe_load(ACTION.read_text())
    assert {"cpus", "backend", "program", "expect", "junit", "report"} <= set(meta["inputs"])
    steps = meta["runs"]["steps"]
    assert meta["runs"]["using"] == "composite"
    runs = [s.get("run", "") for s in steps]
    assert any('pip install "$GITHUB_ACTION_PATH"' in r for r in runs)
    (script_step,) = [s for s in steps if "ci/action.sh" in s.get("run", "")]
    # every input the script reads is passed from the input of that name
    for name in ("program", "cpus", "backend", "expect", "models", "junit", "report", "args"):
        assert script_step["env"][f"SDEMATRIX_{name.upper()}"] == f"${{{{ inputs.{name} }}}}"
        assert f"SDEMATRIX_{name.upper()}" in SCRIPT.read_text()
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "${{ inputs.report }}" in upload["with"]["path"]


def test_readme_documents_the_action() -> None:
    text = (ROOT / "README.md").read_text()
    block = text.split("uses: OWNER/vaescrypt@", 1)
    assert len(block) == 2, "README has no example of the action"
    example = yaml.safe_load(
        block[0].rsplit("```yaml", 1)[1] + "uses: OWNER/vaescrypt@" + block[1].split("```", 1)[0]
    )
    steps = example["jobs"]["cpu-paths"]["steps"]
    used = next(s for s in steps if str(s.get("uses", "")).startswith("OWNER/vaescrypt@"))
    assert set(used["with"]) <= set(yaml.safe_load(ACTION.read_text())["inputs"])


@needs_ptrace
def test_action_validates_the_example_project(tmp_path: Path) -> None:
    src = _build(tmp_path)
    p = _action(
        tmp_path,
        program=f"{src}/tiny_demo",
        expect=f"{src}/expect.yaml",
        cpus=CPUS,
        backend="ptrace",
        args="--jobs 2",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every model passed" in p.stdout
    root = ET.parse(tmp_path / "sdematrix-junit.xml").getroot()
    cases = [c.get("name") for c in root.iter("testcase")]
    # per model: the run and chip check + each expectation that applies
    assert cases.count("spr_xcr0_sse: run and chip check") == 1
    assert "hsw: AVX2 path on models with AVX2" in cases
    assert "nhm: scalar path without AVX2" in cases and "snb: scalar path without AVX2" in cases
    assert "spr_xcr0_sse: scalar path without AVX2" in cases  # XCR0-aware lacks:
    assert "spr_xcr0_sse: AVX2 path on models with AVX2" not in cases
    assert len(cases) == 7 + 7  # 7 models, one expectation applies to each
    assert root.get("failures") == "0" and root.get("errors") == "0"
    html = (tmp_path / "sdematrix-report" / "report.html").read_text()
    assert "tiny_sum_avx2" in html and "AVX2" in html
    summary = (tmp_path / "summary.md").read_text()
    assert "7 passed, 0 failed" in summary and "| spr_xcr0_sse | pass |" in summary


@needs_ptrace
def test_action_catches_a_dispatcher_without_the_xcr0_check(tmp_path: Path) -> None:
    src = _build(tmp_path, ("if ((lo & 6u) != 6u)\n        return 0;", "(void)lo;"))
    p = _action(
        tmp_path,
        program=f"{src}/tiny_demo",
        expect=f"{src}/expect.yaml",
        cpus="hsw,spr_xcr0_sse",
        backend="ptrace",
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "::error title=sdematrix::some model failed" in p.stdout
    root = ET.parse(tmp_path / "sdematrix-junit.xml").getroot()
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    # both the expectation (spr_xcr0_sse lacks usable AVX2: XCR0 has no YMM
    # state) and the chip check (AVX with XCR0 lacking YMM state)
    assert failed == ["spr_xcr0_sse: run and chip check", "spr_xcr0_sse: scalar path without AVX2"]
    chip = next(c for c in root.iter("testcase") if c.get("name") == failed[0])
    assert "chip check (spr_xcr0_sse)" in (chip.find("failure").text or "")
    summary = (tmp_path / "summary.md").read_text()
    assert "forbidden but executed" in summary and "tiny_sum_avx2" in summary


@needs_ptrace
def test_action_runs_the_builtin_matrix(tmp_path: Path) -> None:
    p = _action(tmp_path, cpus="hsw", backend="ptrace")
    assert p.returncode == 0, p.stdout + p.stderr
    root = ET.parse(tmp_path / "sdematrix-junit.xml").getroot()
    assert int(root.get("tests", "0")) > 0 and root.get("failures") == "0"
    assert (tmp_path / "sdematrix-report" / "report.html").is_file()
    bad = _action(tmp_path, expect="x.yaml")
    assert bad.returncode == 2 and "expect and models need a program" in bad.stdout
