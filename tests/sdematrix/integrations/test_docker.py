"""`sdematrix docker run` against a real Docker engine, plus its offline parts.

The engine tests build the offline base image (ci/make-base-image.sh), the
wheelhouse (ci/build-wheelhouse.sh) and the project image once per session
(docker's layer cache makes an unchanged rebuild take seconds), then run a
small matrix in containers and interrupt another one with SIGTERM.  They all
share one xdist group so a single worker builds the image.

SDEMATRIX_DOCKER_BASE picks another base image (e.g. debian:bookworm-slim on
machines whose engine reaches a registry); the default is the debootstrapped
sdematrix-base:bookworm.  Without a reachable engine they are skipped.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdematrix.errors import BackendUnavailableError, MatrixFileError
from sdematrix.integrations import docker_runner as dr
from sdematrix.results import merge

ROOT = Path(__file__).resolve().parents[3]
BASE_IMAGE = os.environ.get("SDEMATRIX_DOCKER_BASE", "sdematrix-base:bookworm")
IMAGE = "sdematrix:latest"
SMALL = ["snb", "spr", "gnr256"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sdematrix", *args]


def _run(argv: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def _engine() -> tuple[Any, str | None]:
    try:
        return dr.connect(), None
    except BackendUnavailableError as exc:  # one line: where and why
        return None, str(exc)


# ---------------------------------------------------------------- offline --


def test_no_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent"}
    p = _run(_cli("docker", "run", "--cpu", "snb", "--out", str(tmp_path / "o")), 60, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(
        "sdematrix: error: no Docker engine reachable at unix:///nonexistent"
    )
    assert "Traceback" not in p.stderr


def test_sde_path_is_a_host_kit_mounted_into_the_containers(tmp_path: Path) -> None:
    # --sde-path as for `run`: an sde64 or its kit directory, found the same way
    kit = tmp_path / "kit"
    kit.mkdir()
    exe = kit / "sde64"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert dr.host_sde_mount(str(kit)) == (kit.resolve(), f"{dr.SDE_MOUNT}/sde64")
    assert dr.host_sde_mount(str(exe)) == (kit.resolve(), f"{dr.SDE_MOUNT}/sde64")
    # no sde64 there: one line, exit 2, before any engine is asked
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent"}
    p = _run(
        _cli(
            "docker",
            "run",
            "--cpu",
            "snb",
            "--sde-path",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "o"),
        ),
        60,
        env=env,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [f"sdematrix: error: --sde-path {tmp_path / 'none'}: no sde64 there"], lines


def test_security_options_only_for_sde() -> None:
    # ptrace and qemu were measured to work under the default seccomp profile
    # with no added capability (docs/DOCKER.md); only SDE (Pin) gets them.
    assert dr.container_security("ptrace", has_sde=True) == {}
    assert dr.container_security("qemu", has_sde=True) == {}
    assert dr.container_security("auto", has_sde=False) == {}
    sde = dr.container_security("auto", has_sde=True)
    assert sde == dr.container_security("sde", has_sde=True)
    assert sde["cap_add"] == ["SYS_PTRACE"]


def _suite_xml(name: str, tests: int, failures: int) -> str:
    cases = "".join(f'<testcase classname="x" name="c{i}"/>' for i in range(tests - failures))
    cases += "".join(
        f'<testcase classname="x" name="f{i}"><failure message="m"/></testcase>'
        for i in range(failures)
    )
    return (
        f'<testsuites><testsuite name="{name}" tests="{tests}" failures="{failures}" '
        f'errors="0" skipped="0" time="1.5">{cases}</testsuite></testsuites>'
    )


def test_merge_junit_sums_and_adds_error_suites(tmp_path: Path) -> None:
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    a.write_text(_suite_xml("snb", 3, 1))
    b.write_text(_suite_xml("spr", 2, 0).replace("<testsuites>", "").replace("</testsuites>", ""))
    dest = tmp_path / "m" / "junit.xml"
    merge.merge_junit([a, b], dest, [merge.error_suite("gnr256", "container exited 137")])
    root = ET.parse(dest).getroot()
    assert [s.get("name") for s in root.iter("testsuite")] == ["snb", "spr", "gnr256"]
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "1", "1")
    assert root.get("time") == "3.000"


def test_merge_junit_refuses_non_junit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuite")
    with pytest.raises(MatrixFileError, match="not readable JUnit XML"):
        merge.merge_junit([bad], tmp_path / "out.xml")
    other = tmp_path / "other.xml"
    other.write_text("<html/>")
    with pytest.raises(MatrixFileError, match="not JUnit"):
        merge.merge_junit([other], tmp_path / "out.xml")


# ---------------------------------------------------------------- engine ---

CLIENT, WHY_NOT = _engine()


@pytest.fixture(scope="session")
def _docker_engine() -> None:
    """Skip without an engine -- unless ci/test.sh installed dockerd and set
    SDEMATRIX_REQUIRE_DOCKER=1: there a missing engine is a failure."""
    if CLIENT is None:
        if os.environ.get("SDEMATRIX_REQUIRE_DOCKER") == "1":
            pytest.fail(f"Docker engine required (SDEMATRIX_REQUIRE_DOCKER=1) but {WHY_NOT}")
        pytest.skip(str(WHY_NOT))


engine = pytest.mark.usefixtures("_docker_engine")
docker_group = pytest.mark.xdist_group("docker")


def _labelled() -> list[Any]:
    assert CLIENT is not None
    # sparse: no per-container inspect, which races with containers being removed
    return list(
        CLIENT.containers.list(
            all=True, filters={"label": dr.LABEL}, sparse=True, ignore_removed=True
        )
    )


@pytest.fixture(scope="session")
def project_image(_docker_engine: None) -> Iterator[str]:
    """Base image, wheelhouse and project image, built once per session (and
    under a lock, in case two workers get here anyway)."""
    assert CLIENT is not None
    lock = Path("/tmp/sdematrix-docker-image.lock")
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if BASE_IMAGE == "sdematrix-base:bookworm":
            p = _run(["bash", str(ROOT / "ci/make-base-image.sh"), BASE_IMAGE], 900)
            assert p.returncode == 0, f"ci/make-base-image.sh failed: {p.stderr[-2000:]}"
            p = _run(["bash", str(ROOT / "ci/build-wheelhouse.sh")], 600)
            assert p.returncode == 0, f"ci/build-wheelhouse.sh failed: {p.stderr[-2000:]}"
        steps: list[str] = []
        dr.ensure_image(CLIENT, IMAGE, ROOT, rebuild=True, base_image=BASE_IMAGE, log=steps.append)
        assert steps and steps[-1].startswith(f"built {IMAGE}")
    yield IMAGE


@engine
@docker_group
def test_docker_run_small_matrix(project_image: str, tmp_path: Path) -> None:
    out = tmp_path / "dk"
    t0 = time.monotonic()
    p = _run(
        # the options `run` has, with the same meaning (issue 14's CLI consistency)
        _cli(
            "docker",
            "run",
            "--cpu",
            ",".join(SMALL),
            "--jobs",
            "2",
            "--base-image",
            BASE_IMAGE,
            "--image",
            project_image,
            "--out",
            str(out),
            "--junit",
            str(tmp_path / "j" / "all.xml"),
            "--report",
            str(tmp_path / "rep"),
            "--cpuid-mode",
            "bp",
        ),
        900,
        cwd=ROOT,
    )
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "j" / "all.xml").read_bytes() == (out / "junit.xml").read_bytes()
    assert (tmp_path / "rep" / "report.html").is_file()
    assert (tmp_path / "rep" / "summary.md").is_file()
    assert not _labelled(), "containers left behind"
    root = ET.parse(out / "junit.xml").getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert sorted(suites) == sorted(SMALL)
    for name, s in suites.items():
        assert int(s.get("tests", "0")) > 0, name
        assert s.get("failures") == "0" and s.get("errors") == "0", name
        # every case of a suite is that CPU's, from that container's own file
        assert all(c.get("name", "").startswith(f"{name}.") for c in s.iter("testcase"))
    assert int(root.get("tests", "0")) == sum(int(s.get("tests", "0")) for s in suites.values())
    # the per-CPU results merge into one results dir that the report reads
    r = _run(_cli("report", str(out), "--markdown", "-"), 120)
    assert r.returncode == 0, r.stderr
    for cpu in SMALL:
        assert f"**{cpu}**" in r.stdout
    print(f"docker run {','.join(SMALL)}: {took:.1f}s")


@engine
@docker_group
def test_container_without_results_gets_error_suite(project_image: str, tmp_path: Path) -> None:
    # An option the in-container CLI refuses: the container exits 2 and
    # writes nothing; the merged JUnit must say so rather than drop the CPU.
    out = tmp_path / "bad"
    code = dr.run_in_docker(
        ["snb"],
        out=out,
        jobs=1,
        image=project_image,
        context=ROOT,
        extra_args=["--no-such-option"],
        log=lambda s: None,
    )
    assert code == 2
    assert not _labelled()
    suites = list(ET.parse(out / "junit.xml").getroot().iter("testsuite"))
    assert [s.get("name") for s in suites] == ["snb"]
    assert suites[0].get("errors") == "1"
    err = suites[0].find("testcase/error")
    assert err is not None and "exited 2" in err.get("message", "")


@engine
@docker_group
def test_sigterm_removes_every_container(project_image: str, tmp_path: Path) -> None:
    out = tmp_path / "st"
    proc = subprocess.Popen(
        _cli(
            "docker",
            "run",
            "--cpu",
            "snb,spr,gnr256,wsm",
            "--jobs",
            "2",
            "--image",
            project_image,
            "--out",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not _labelled():
            if proc.poll() is not None:
                pytest.fail(f"finished before any container existed: {proc.communicate()[0]}")
            assert time.monotonic() < deadline, "no labelled container appeared"
            time.sleep(0.1)
        # let both containers get going, so the cleanup has running ones to kill
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, text
    assert "interrupted" in text
    left = _labelled()
    assert not left, f"left behind: {[c.name for c in left]}"


@engine
@docker_group
def test_runtime_image_is_slim_and_needs_no_compiler(project_image: str) -> None:
    """The runtime stage has no C compiler, stays within 400 MB, and the QEMU
    backend still gets its plugin (built in the build stage) when the
    container runs as an arbitrary uid, as `sdematrix docker run` does."""
    assert CLIENT is not None
    size = CLIENT.images.get(project_image).attrs["Size"]
    assert size <= 400 * 10**6, f"{project_image} is {size / 1e6:.0f} MB"
    probe = (
        "for c in cc gcc c99 clang tcc; do command -v $c && exit 3; done; "
        "python -c 'from sdematrix.qemu_plugin import build_plugin; print(build_plugin())'"
    )
    p = _run(
        [
            "docker",
            "run",
            "--rm",
            "--user",
            "4321:4321",
            "-e",
            "HOME=/tmp",
            "--entrypoint",
            "sh",
            project_image,
            "-c",
            probe,
        ],
        120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("/var/cache/xdg/sdematrix/qemu-mix-plugin-"), p.stdout
    # a real qemu-backend run of one model in that container
    r = _run(
        [
            "docker",
            "run",
            "--rm",
            "--user",
            "4321:4321",
            "-e",
            "HOME=/tmp",
            project_image,
            "run",
            "--cpu",
            "snb",
            "--backend",
            "qemu",
            "--jobs",
            "2",
            "--out",
            "/tmp/q",
        ],
        600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "0 failed, 0 errors, 0 skipped" in r.stdout, r.stdout
    print(f"{project_image}: {size / 1e6:.0f} MB")
