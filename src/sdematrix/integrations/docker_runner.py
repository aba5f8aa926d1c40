"""`sdematrix docker run`: the matrix in containers, one container per CPU model.

Uses the Docker SDK for Python against whatever engine DOCKER_HOST (or the
default socket) names.  Builds the project image from the Dockerfile when it
is missing (or when asked), starts up to `jobs` containers at once, each
running ``sdematrix run --cpu <cpu>`` with the output directory bind-mounted
at /out, then merges the per-CPU JUnit files into one (a CPU whose container
left no JUnit file gets a one-case error suite, so nothing vanishes).

Every container it starts carries the label ``sdematrix.run=<id>`` and is
removed on the way out, including on Ctrl-C, SIGTERM and per-container
timeouts.  Interruption is handled in this order::

    signal -> stop event set -> queued CPUs cancelled
           -> every labelled container force-removed (their wait() returns)
           -> workers joined (one that was inside containers.run sees the
              stop event and removes its own container)
           -> labelled containers removed once more -> exit 130
"""

from __future__ import annotations

import os
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cli import signals
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    BackendUnavailableError,
    MatrixFileError,
    OutputDirError,
)
from ..results.merge import error_suite, junit_suites, merge_junit, merge_results
from ..spec.choices import DEFAULT_TIMEOUT

LABEL = "sdematrix.run"
DEFAULT_IMAGE = "sdematrix:latest"
SDE_IN_IMAGE = "/opt/sde/sde64"
MATRIX_IN_OUT = ".sdematrix-matrix.yaml"  # copy of the host's matrix, under /out
#: Seconds a container may take beyond its cells' timeouts: starting the
#: container and the interpreter, writing its results.
CONTAINER_STARTUP_S = 120.0
#: Where ``--sde-path`` (a host SDE kit) is mounted, read-only, in each container.
SDE_MOUNT = "/opt/sde-host"

# What the containers need, measured on Docker 20.10 / kernel 6.x with the
# default seccomp profile (see docs/DOCKER.md):
#  * ptrace backend: nothing.  vc-tracer ptraces its own child, which the
#    default profile allows (kernel >= 4.8) without CAP_SYS_PTRACE, and
#    arch_prctl(ARCH_SET_CPUID) passes the profile (the kernel answers).
#  * qemu backend: nothing (plain user-mode emulation).
#  * sde backend (Pin): not measurable here (no SDE kit reachable).  Pin
#    injects itself into the application with ptrace and may call syscalls the
#    default profile filters (it refuses e.g. personality(ADDR_NO_RANDOMIZE),
#    measured); SDE containers keep the options Pin is usually run with.
SDE_SECURITY: dict[str, Any] = {"cap_add": ["SYS_PTRACE"], "security_opt": ["seccomp=unconfined"]}


@dataclass
class ContainerResult:
    cpu: str
    exit_code: int
    duration_s: float
    log_tail: str
    timed_out: bool = False


def _engine_errors() -> tuple[type[BaseException], ...]:
    """What talking to the engine can raise: the SDK's errors, the HTTP
    layer's (timeouts, refused connections) and plain socket errors."""
    import docker
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


def connect() -> Any:
    """A Docker client, or BackendUnavailableError (exit 2) with one line."""
    try:
        import docker  # the Docker SDK for Python
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise BackendUnavailableError(f"docker SDK not installed: {exc}") from None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except _engine_errors() as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise BackendUnavailableError(
            f"no Docker engine reachable at {where}: {text[:200]}"
        ) from None
    return client


def ensure_image(
    client: Any,
    image: str,
    context: Path,
    *,
    rebuild: bool = False,
    base_image: str | None = None,
    log: Callable[[str], None] = print,
) -> None:
    """Build `image` from `context`/Dockerfile unless it exists (or rebuild).

    Streams the builder's "Step n/m" lines to `log`; a failed build is a
    one-line BackendUnavailableError carrying the builder's last message."""
    import docker

    if not rebuild:
        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            pass
    if not (context / "Dockerfile").is_file():
        raise BackendUnavailableError(f"image {image} missing and no Dockerfile in {context}")
    buildargs = {"BASE_IMAGE": base_image} if base_image else {}
    log(f"building image {image} from {context} (base {base_image or 'debian:bookworm-slim'})")
    t0 = time.monotonic()
    last = ""  # the build's latest output line, for the error message
    try:
        for chunk in client.api.build(
            path=str(context), tag=image, buildargs=buildargs, rm=True, forcerm=True, decode=True
        ):
            if "error" in chunk:
                msg = " ".join(str(chunk["error"]).split())
                raise BackendUnavailableError(
                    f"docker build of {image} failed: {msg[:300]}"
                    + (f" (after: {last[:200]})" if last else "")
                )
            line = str(chunk.get("stream", "")).strip()
            if line:
                last = line
                if line.startswith("Step "):
                    log(f"  {line[:120]}")
    except docker.errors.APIError as exc:
        raise BackendUnavailableError(f"docker build of {image} failed: {exc.explanation or exc}")
    log(f"built {image} in {time.monotonic() - t0:.1f}s")


def image_has_sde(client: Any, image: str, run_id: str) -> bool:
    """Whether `image` carries SDE at /opt/sde/sde64 (looked at in a created,
    never started, labelled container)."""
    import docker

    c = client.containers.create(image, command=["--version"], labels={LABEL: run_id})
    try:
        c.get_archive(SDE_IN_IMAGE)
        return True
    except docker.errors.NotFound:
        return False
    finally:
        c.remove(force=True)


def host_sde_mount(sde_path: str) -> tuple[Path, str]:
    """(the host directory to mount, the sde64 path inside the container) for
    ``--sde-path``, found as ``sdematrix run`` finds it (an sde64 or a kit
    directory); a path that names no sde64 is a usage error."""
    from ..backends.sde.backend import SdeBackend

    exe = SdeBackend(sde_path=sde_path, environ={}).executable()
    if exe is None:
        raise BackendUnavailableError(f"--sde-path {sde_path}: no sde64 there")
    exe = exe.resolve()
    return exe.parent, f"{SDE_MOUNT}/{exe.name}"


def container_security(backend: str, has_sde: bool) -> dict[str, Any]:
    """Capabilities and security options for one container: only what the
    backend that will run inside needs (auto -> SDE's when the image has it)."""
    if backend == "sde" or (backend == "auto" and has_sde):
        return dict(SDE_SECURITY)
    return {}  # ptrace and qemu need nothing beyond Docker's defaults


def remove_labelled(client: Any, run_id: str) -> int:
    """Kill and remove every container of this run; returns how many."""
    n = 0
    errors = _engine_errors()
    try:
        found = client.containers.list(
            all=True, filters={"label": f"{LABEL}={run_id}"}, sparse=True, ignore_removed=True
        )
    except errors:  # engine gone: nothing more we can do
        return 0
    for c in found:
        try:
            c.remove(force=True)
        except errors:  # removed meanwhile (by its worker thread)
            continue
        n += 1
    return n


class _Matrix:
    """Runs the containers of one `sdematrix docker run`."""

    def __init__(
        self,
        client: Any,
        image: str,
        out: Path,
        run_id: str,
        *,
        backend: str,
        timeout: float,
        security: dict[str, Any],
        cmd_tail: list[str],
        log: Callable[[str], None],
        mounts: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.client = client
        self.image = image
        self.out = out
        self.run_id = run_id
        self.backend = backend
        self.timeout = timeout
        self.security = security
        self.cmd_tail = cmd_tail
        self.mounts = dict(mounts or {})  # host path -> {bind, mode}, besides /out
        self.log = log
        self.stop = threading.Event()
        self.errors = _engine_errors()
        # Files written inside belong to the caller: run as the caller's
        # uid/gid unless that is root (then the image's unprivileged user,
        # with the per-CPU directory opened up for it).
        self.uid = os.getuid()
        self.user = f"{self.uid}:{os.getgid()}" if self.uid != 0 else None

    def one(self, cpu: str) -> ContainerResult:
        if self.stop.is_set():
            return ContainerResult(cpu, EXIT_INTERRUPTED, 0.0, "not started (interrupted)")
        sub = self.out / cpu
        sub.mkdir(parents=True, exist_ok=True)
        if self.user is None:
            os.chmod(sub, 0o777)  # the image's user (uid 1000) writes here
        cmd = [
            "run",
            "--cpu",
            cpu,
            "--backend",
            self.backend,
            "--jobs",
            "1",
            "--out",
            f"/out/{cpu}",
            "--junit",
            f"/out/{cpu}/junit.xml",
            *self.cmd_tail,
        ]
        extra: dict[str, Any] = dict(self.security)
        if self.user is not None:
            extra["user"] = self.user
            extra["environment"] = {"HOME": "/tmp"}
        t0 = time.monotonic()
        c = self.client.containers.run(
            self.image,
            command=cmd,
            detach=True,
            labels={LABEL: self.run_id, "sdematrix.cpu": cpu},
            volumes={str(self.out.resolve()): {"bind": "/out", "mode": "rw"}, **self.mounts},
            **extra,
        )
        try:
            if self.stop.is_set():  # interrupted while the container was being created
                return ContainerResult(cpu, EXIT_INTERRUPTED, 0.0, "interrupted")
            timed_out = False
            try:
                status = c.wait(timeout=self.timeout)
                code = int(status.get("StatusCode", EXIT_FAILED))
            except self.errors:  # requests' ReadTimeout, or the container was removed
                timed_out = not self.stop.is_set()
                code = EXIT_FAILED if timed_out else EXIT_INTERRUPTED
            try:
                logs = c.logs(tail=20).decode("utf-8", "replace")
            except self.errors:
                logs = ""
            return ContainerResult(cpu, code, time.monotonic() - t0, logs, timed_out)
        finally:
            with suppress(*self.errors):  # already removed by the interrupt path
                c.remove(force=True)


def run_in_docker(
    cpus: list[str],
    *,
    out: Path,
    jobs: int = 2,
    image: str = DEFAULT_IMAGE,
    context: Path = Path("."),
    rebuild: bool = False,
    base_image: str | None = None,
    backend: str = "auto",
    timeout: float = DEFAULT_TIMEOUT,
    cells_per_cpu: int = 1,
    extra_args: list[str] | None = None,
    matrix_file: Path | None = None,
    sde_path: str | None = None,
    log: Callable[[str], None] = print,
) -> int:
    """Run the matrix for `cpus` in containers.  Returns the process exit code:
    0 all passed, 1 some cell or container failed, 2 usage, 130 interrupted.

    `timeout` is per cell, as for ``sdematrix run`` (the containers get it);
    a container, which runs one model's `cells_per_cpu` cells, may take that
    many times it plus :data:`CONTAINER_STARTUP_S`.

    `matrix_file` (the CLI passes the one it read the CPU list from) is
    copied into `out` and handed to every container, so the containers judge
    against the same matrix; None leaves them the image's packaged copy.

    `sde_path` (``--sde-path``: an sde64 or SDE kit directory on this host,
    as for ``sdematrix run``) is mounted read-only into every container and
    used there instead of the image's SDE."""
    mounts: dict[str, dict[str, str]] = {}
    sde_tail: list[str] = []
    if sde_path is not None:  # checked before anything starts
        kit, inside = host_sde_mount(sde_path)
        mounts[str(kit)] = {"bind": SDE_MOUNT, "mode": "ro"}
        sde_tail = ["--sde-path", inside]
    with signals.sigterm_as_interrupt():
        client = connect()
        try:
            out.mkdir(parents=True, exist_ok=True)
            probe = out / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise OutputDirError(f"output directory {out} not writable: {exc.strerror}") from None
        tail = [*(extra_args or []), *sde_tail]
        if matrix_file is not None:  # None: the image's packaged copy
            try:
                (out / MATRIX_IN_OUT).write_bytes(Path(matrix_file).read_bytes())
            except OSError as exc:
                raise MatrixFileError(
                    f"cannot copy matrix file {matrix_file}: {exc.strerror}"
                ) from None
            tail += ["--matrix", f"/out/{MATRIX_IN_OUT}"]
        ensure_image(client, image, context, rebuild=rebuild, base_image=base_image, log=log)
        run_id = uuid.uuid4().hex[:12]
        has_sde = backend in ("auto", "sde") and (
            sde_path is not None or image_has_sde(client, image, run_id)
        )
        if backend == "sde" and not has_sde:
            raise BackendUnavailableError(f"--backend sde: image {image} has no {SDE_IN_IMAGE}")
        runner = _Matrix(
            client,
            image,
            out,
            run_id,
            backend=backend,
            timeout=timeout * max(1, cells_per_cpu) + CONTAINER_STARTUP_S,
            security=container_security(backend, has_sde),
            cmd_tail=tail,
            mounts=mounts,
            log=log,
        )
        return _run_all(runner, cpus, max(1, jobs))


def _run_all(runner: _Matrix, cpus: list[str], jobs: int) -> int:
    results: dict[str, ContainerResult] = {}
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="sdematrix-docker")
    try:
        pending: set[Future[ContainerResult]] = {pool.submit(runner.one, cpu) for cpu in cpus}
        while pending:
            # A short poll, not a blocking as_completed(): the main thread must
            # stay responsive to signals.
            done, pending = wait(pending, timeout=0.5, return_when="FIRST_COMPLETED")
            for fut in done:
                r = fut.result()
                results[r.cpu] = r
                state = "timeout" if r.timed_out else f"exit {r.exit_code}"
                runner.log(f"[{len(results)}/{len(cpus)}] {r.cpu}: {state} ({r.duration_s:.1f}s)")
                if r.exit_code not in (0, 1) or r.timed_out:
                    for line in r.log_tail.strip().splitlines()[-5:]:
                        runner.log(f"    {r.cpu}| {line}")
    except KeyboardInterrupt:
        with signals.ignored():
            runner.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            n = remove_labelled(runner.client, runner.run_id)
            pool.shutdown(wait=True)  # workers return quickly: their containers are gone
            n += remove_labelled(runner.client, runner.run_id)
            runner.log(f"interrupted: removed {n} running container(s) of run {runner.run_id}")
            _merge(runner.out, cpus, results, interrupted=True, log=runner.log)
        return EXIT_INTERRUPTED
    finally:
        pool.shutdown(wait=True)
        remove_labelled(runner.client, runner.run_id)
    _merge(runner.out, cpus, results, interrupted=False, log=runner.log)
    worst = 0
    for r in results.values():
        code = EXIT_FAILED if r.timed_out else r.exit_code
        worst = max(worst, code if code in (0, EXIT_FAILED, EXIT_USAGE) else EXIT_FAILED)
    return worst


def _merge(
    out: Path,
    cpus: list[str],
    results: dict[str, ContainerResult],
    *,
    interrupted: bool,
    log: Callable[[str], None],
) -> None:
    """out/junit.xml from the per-CPU files; a CPU with no (readable) file gets
    an error suite unless the run was interrupted before it finished."""
    suites: list[ET.Element] = []
    for cpu in cpus:
        f = out / cpu / "junit.xml"
        r = results.get(cpu)
        parsed = None
        if f.is_file():
            with suppress(MatrixFileError):
                parsed = junit_suites(f)
        if parsed is not None:
            suites += parsed
        elif r is not None and not interrupted:
            why = "timed out" if r.timed_out else f"exited {r.exit_code} without a JUnit file"
            tail = " | ".join(r.log_tail.strip().splitlines()[-3:])
            suites.append(error_suite(cpu, f"container for {cpu} {why}: {tail}"[:1000]))
    merge_junit([], out / "junit.xml", suites)
    done = [out / cpu for cpu in cpus if (out / cpu / "results.json").is_file()]
    if done:
        try:
            merge_results(done, out)
        except OutputDirError as exc:  # a container died mid-write
            log(f"warning: {exc}")
