"""`sdematrix docker run`: the matrix in containers, one container per CPU model.

Uses the Docker SDK for Python against whatever engine DOCKER_HOST (or the
default socket) names.  Builds the project image from the Dockerfile when it
is missing (or when asked), starts up to `jobs` containers at once, each
running ``sdematrix run --cpu <cpu>`` with the output directory bind-mounted,
then merges the per-CPU JUnit files into one.  Every container it starts
carries the label ``sdematrix.run=<id>`` and is removed on the way out,
including on Ctrl-C, SIGTERM and per-container timeouts.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import EXIT_FAILED, EXIT_INTERRUPTED, BackendUnavailableError, OutputDirError

LABEL = "sdematrix.run"
DEFAULT_IMAGE = "sdematrix:latest"
# What the backends inside need: ptrace (our tracer, SDE's Pin) and the
# arch_prctl(ARCH_SET_CPUID) call, which some seccomp profiles refuse.
CONTAINER_SECURITY: dict[str, Any] = {
    "cap_add": ["SYS_PTRACE"],
    "security_opt": ["seccomp=unconfined"],
}


@dataclass
class ContainerResult:
    cpu: str
    exit_code: int
    duration_s: float
    log_tail: str
    timed_out: bool = False


def connect() -> Any:
    """A Docker client, or BackendUnavailableError (exit 2) with one line."""
    try:
        import docker  # the Docker SDK for Python
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise BackendUnavailableError(f"docker SDK not installed: {exc}") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and socket errors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BackendUnavailableError(f"no Docker engine reachable: {first}") from None
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
    """Build `image` from `context`/Dockerfile unless it exists (or rebuild)."""
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
    log(f"building image {image} from {context} (base {base_image or 'default'})")
    t0 = time.monotonic()
    try:
        client.images.build(path=str(context), tag=image, buildargs=buildargs, rm=True)
    except docker.errors.BuildError as exc:
        tail = " | ".join(
            str(c.get("stream", "")).strip() for c in list(exc.build_log)[-5:] if c.get("stream")
        )
        raise BackendUnavailableError(f"docker build failed: {exc.msg}: {tail}") from None
    log(f"built {image} in {time.monotonic() - t0:.1f}s")


def remove_labelled(client: Any, run_id: str) -> int:
    """Kill and remove every container of this run; returns how many."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={run_id}"}):
        try:
            c.remove(force=True)
            n += 1
        except Exception:  # already gone
            pass
    return n


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def merge_junit(files: list[Path], dest: Path) -> None:
    """Concatenate the <testsuite> elements of several JUnit files."""
    root = ET.Element("testsuites")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for f in files:
        try:
            tree = ET.parse(f)
        except (OSError, ET.ParseError):
            continue
        r = tree.getroot()
        suites = [r] if r.tag == "testsuite" else list(r.iter("testsuite"))
        for s in suites:
            root.append(s)
            for k in totals:
                totals[k] += int(s.get(k, "0") or 0)
    for k, v in totals.items():
        root.set(k, str(v))
    dest.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(dest, encoding="utf-8", xml_declaration=True)


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
    timeout: float = 600.0,
    extra_args: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> int:
    """Run the matrix for `cpus` in containers.  Returns the process exit code."""
    client = connect()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(f"output directory {out} not writable: {exc.strerror}") from None
    ensure_image(client, image, context, rebuild=rebuild, base_image=base_image, log=log)
    run_id = uuid.uuid4().hex[:12]
    results: list[ContainerResult] = []

    def one(cpu: str) -> ContainerResult:
        sub = out / cpu
        sub.mkdir(parents=True, exist_ok=True)
        os.chmod(sub, 0o777)  # the image runs as an unprivileged user
        cmd = ["run", "--cpu", cpu, "--backend", backend, "--jobs", "1",
               "--out", f"/out/{cpu}", "--junit", f"/out/{cpu}/junit.xml",
               *(extra_args or [])]
        t0 = time.monotonic()
        c = client.containers.run(
            image,
            command=cmd,
            detach=True,
            labels={LABEL: run_id, "sdematrix.cpu": cpu},
            volumes={str(out.resolve()): {"bind": "/out", "mode": "rw"}},
            **CONTAINER_SECURITY,
        )
        timed_out = False
        try:
            status = c.wait(timeout=timeout)
            code = int(status.get("StatusCode", 1))
        except Exception:  # requests' ReadTimeout on wait()
            timed_out = True
            code = EXIT_FAILED
        logs = c.logs(tail=20).decode("utf-8", "replace")
        try:
            c.remove(force=True)
        except Exception:
            pass
        return ContainerResult(cpu, code, time.monotonic() - t0, logs, timed_out)

    with _sigterm_as_interrupt():
        try:
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                futures = {pool.submit(one, cpu): cpu for cpu in cpus}
                for fut in as_completed(futures):
                    r = fut.result()
                    results.append(r)
                    state = "timeout" if r.timed_out else f"exit {r.exit_code}"
                    log(f"[{len(results)}/{len(cpus)}] {r.cpu}: {state} ({r.duration_s:.1f}s)")
                    if r.exit_code not in (0, 1) or r.timed_out:
                        for line in r.log_tail.strip().splitlines()[-5:]:
                            log(f"    {r.cpu}| {line}")
        except KeyboardInterrupt:
            n = remove_labelled(client, run_id)
            log(f"interrupted: removed {n} container(s)")
            merge_junit(sorted(out.glob("*/junit.xml")), out / "junit.xml")
            return EXIT_INTERRUPTED
        finally:
            remove_labelled(client, run_id)
    merge_junit([out / r.cpu / "junit.xml" for r in sorted(results, key=lambda r: r.cpu)],
                out / "junit.xml")
    worst = 0
    for r in results:
        code = EXIT_FAILED if r.timed_out else r.exit_code
        worst = max(worst, code if code in (0, 1, 2) else EXIT_FAILED)
    return worst
