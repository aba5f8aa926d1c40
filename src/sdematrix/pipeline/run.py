"""Run the cells of a matrix: threads, one subprocess per cell, verdicts.

:func:`run_cells` is the one runner the CLI and the pytest plugin sit on:

* ``jobs`` worker threads (``concurrent.futures``); each cell asks the
  :class:`~sdematrix.backends.registry.BackendSelector` for its model's backend,
  builds the probe command, runs it (the backend owns the subprocess and its
  per-cell timeout) and judges the result with :func:`sdematrix.verdict.cell.judge`.
* Anything that goes wrong inside one cell -- a backend exception, a probe that
  cannot be built, a crash, hang or output flood -- becomes an ``error`` outcome
  for that cell; the run goes on.
* SIGINT / SIGTERM (installed only when called from the main thread): stop
  launching cells, SIGKILL every process group of every process this run
  started (found by walking ``/proc`` for our descendants, so it covers every
  backend), and return the report of the cells that had finished, with
  ``interrupted=True``; the caller writes JUnit and exits 130.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ..backends.base import ProbeCommand, RunResult
from ..backends.registry import BackendSelector
from ..errors import SdeMatrixError
from ..spec.models import Cell, CpuModel, Matrix
from ..verdict.cell import Outcome, judge
from ..verdict.reasons import CANNOT_RUN, cannot_run_why
from .progress import Progress

__all__ = ["CellRecord", "RunReport", "kill_descendants", "run_cells"]

ProbeFn = Callable[[Cell, int], ProbeCommand]
DigestFn = Callable[[Cell, int], str]
RecordFn = Callable[["CellRecord"], None]


@dataclass
class CellRecord:
    cell: Cell
    outcome: Outcome
    result: RunResult | None
    probe_argv: tuple[str, ...] = ()


@dataclass
class RunReport:
    matrix: Matrix
    cells: list[Cell]  # every cell asked for, in order
    records: list[CellRecord] = field(default_factory=list)  # in cell order
    not_run: list[Cell] = field(default_factory=list)
    interrupted: bool = False
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    seed: int = 1
    jobs: int = 1
    timeout_s: float = 0.0
    backend_requested: str = "auto"
    strict: bool = False  # cells no backend can run are errors, not skips
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    model_backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    workdir: str | None = None

    def count(self, status: str) -> int:
        return sum(1 for r in self.records if r.outcome.status == status)

    @property
    def ok(self) -> bool:
        return not any(r.outcome.status in ("fail", "error") for r in self.records)

    def unrunnable(self) -> list[tuple[str, list[str], int]]:
        """Cells no backend could run here, grouped by reason, in first-seen
        order: (reason, models, cells).  Skipped cells of a default run and
        the errors of a strict one alike."""
        groups: dict[str, tuple[list[str], list[int]]] = {}
        for r in self.records:
            why = cannot_run_why(r.outcome.status, r.outcome.reasons)
            if why is None:
                continue
            cpus, n = groups.setdefault(why, ([], [0]))
            if r.cell.cpu not in cpus:
                cpus.append(r.cell.cpu)
            n[0] += 1
        return [(why, cpus, n[0]) for why, (cpus, n) in groups.items()]


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------
# Killing what we started
# --------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) for every process we can see."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..." -- comm may contain spaces/parens
        rest = data[data.rfind(b")") + 2 :].split()
        try:
            table[int(name)] = (int(rest[1]), int(rest[2]))
        except (IndexError, ValueError):
            continue
    return table


def kill_descendants(root: int | None = None, sig: int = signal.SIGKILL) -> int:
    """SIGKILL every descendant of `root` (default: this process): whole process
    groups for children that have their own group, single processes otherwise.
    Returns how many processes were found."""
    root = os.getpid() if root is None else root
    own_pgid = os.getpgid(0)
    found = 0
    for _ in range(3):  # again, for anything forked while we were killing
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _pg) in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = list(children.get(root, []))
        desc: list[int] = []
        while stack:
            p = stack.pop()
            desc.append(p)
            stack.extend(children.get(p, []))
        if not desc:
            break
        found += len(desc)
        groups = {table[p][1] for p in desc if table[p][1] not in (own_pgid, 0)}
        for g in groups:
            try:
                os.killpg(g, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in desc:
            if table[p][1] == own_pgid:
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.05)
    return found


# --------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------


def _error_result(backend: str, reason: str) -> RunResult:
    return RunResult(backend=backend, status="error", reason=reason)


def _default_probe_fns() -> tuple[ProbeFn, DigestFn]:
    from ..backends import probe as probe_mod

    def make(cell: Cell, seed: int) -> ProbeCommand:
        return probe_mod.probe_command(cell, seed)

    def digest(cell: Cell, seed: int) -> str:
        return probe_mod.expected_digest(cell, seed)

    return make, digest


def _run_one(
    cell: Cell,
    model: CpuModel,
    matrix: Matrix,
    selector: BackendSelector,
    workdir: Path,
    timeout: float,
    seed: int,
    make_probe: ProbeFn,
    expected_digest: DigestFn,
    strict: bool = False,
) -> CellRecord:
    choice = selector.choose(model)
    if choice.backend is None:
        # What the user named must run: under `strict` (the CLI's --cpu or
        # --backend without --allow-skip) a cell no backend can run is an
        # error, so the run cannot end green without having run it.
        if strict:
            res = RunResult(
                backend=selector.requested,
                status="error",
                reason=f"{CANNOT_RUN}{choice.skip_reason}",
                cannot_run=True,
            )
        else:
            res = RunResult(backend=selector.requested, status="skip", reason=choice.skip_reason)
        return CellRecord(cell, judge(cell, model, matrix, res, None), res)
    backend = choice.backend
    try:
        probe = make_probe(cell, seed)
    except (SdeMatrixError, OSError, ValueError) as e:
        res = _error_result(backend.name, f"cannot build the probe command: {e}")
        return CellRecord(cell, judge(cell, model, matrix, res, None), res)
    try:
        digest: str | None = expected_digest(cell, seed)
    except Exception as e:  # noqa: BLE001 - a reference failure is this cell's error
        res = _error_result(
            backend.name, f"cannot compute the reference digest: {type(e).__name__}: {e}"
        )
        return CellRecord(cell, judge(cell, model, matrix, res, None), res, probe.argv)
    try:
        res = backend.run(cell, model, probe, workdir, timeout)
    except Exception as e:  # noqa: BLE001 - one broken cell must not stop the run
        res = _error_result(backend.name, f"backend {backend.name} raised {type(e).__name__}: {e}")
    if res.backend_version is None:
        try:
            res.backend_version = backend.version()
        except Exception as e:  # noqa: BLE001 - a version is nice to have, never fatal
            res.artifacts["version_error"] = f"{type(e).__name__}: {e}"
    return CellRecord(cell, judge(cell, model, matrix, res, digest), res, probe.argv)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

# Rough relative cost per byte by mode, only for ordering (the generic path
# weighs 40x on top, in _cost_estimate).
_MODE_WEIGHT = {"cfb1": 64.0, "cfb8": 8.0, "cfb128": 1.0, "gcm": 1.0}


def _cost_estimate(matrix: Matrix, cell: Cell) -> float:
    path = matrix.expected.get((cell.cpu, cell.mode, cell.direction), "")
    per_byte = 40.0 if path == "generic" else 1.0
    return per_byte * _MODE_WEIGHT.get(cell.mode, 1.0) * cell.length + 5_000.0


def _longest_first(matrix: Matrix, cells: list[Cell]) -> list[int]:
    """The order to start the cells in: longest first (LPT scheduling).  Under a
    tracer the cost of a cell is its executed-instruction count, dominated by
    the generic path and the serial CFB modes; results are still reported in
    cell order."""
    return sorted(range(len(cells)), key=lambda i: -_cost_estimate(matrix, cells[i]))


def _new_report(
    matrix: Matrix,
    cells: list[Cell],
    selector: BackendSelector,
    *,
    workdir: Path,
    jobs: int,
    timeout: float,
    seed: int,
    strict: bool,
) -> RunReport:
    """The report's metadata, known before any cell runs: the settings, each
    backend's availability and version, and the backend each model gets."""
    report = RunReport(
        matrix=matrix,
        cells=list(cells),
        seed=seed,
        jobs=jobs,
        timeout_s=timeout,
        backend_requested=selector.requested,
        strict=strict,
        started_at=_now(),
        workdir=str(workdir),
    )
    for name, b in selector.backends.items():
        why = selector.unavailable.get(name)
        report.backends[name] = {
            "available": why is None,
            "reason": why,
            "version": None if why else b.version(),
        }
    for cpu in dict.fromkeys(c.cpu for c in cells):
        ch = selector.choose(matrix.models[cpu])
        report.model_backends[cpu] = {
            "backend": ch.backend.name if ch.backend else None,
            "skip_reason": ch.skip_reason,
        }
    return report


def _install_signal_handlers(
    stop: threading.Event, progress: Progress | None, handle_signals: bool
) -> dict[int, Any]:
    """SIGINT/SIGTERM stop the run and kill the children (only from the main
    thread); returns the handlers they replaced, for :func:`_restore_signal_handlers`."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if not stop.is_set():
            stop.set()
            if progress is not None:
                progress.note(
                    f"sdematrix: {signal.Signals(signum).name}: stopping, killing child processes"
                )
        kill_descendants()

    old_handlers: dict[int, Any] = {}
    if handle_signals and threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            old_handlers[s] = signal.signal(s, on_signal)
    return old_handlers


def _restore_signal_handlers(old_handlers: dict[int, Any]) -> None:
    for s, h in old_handlers.items():
        signal.signal(s, h)


def _cell_task(
    i: int,
    cell: Cell,
    *,
    run_one: Callable[[Cell], CellRecord],
    stop: threading.Event,
    progress: Progress | None,
) -> tuple[int, CellRecord | None]:
    """One cell on a pool thread: (its index, its record, or None when the run
    was stopped before it started or while it ran)."""
    if stop.is_set():
        return i, None
    if progress is not None:
        progress.start(cell)
    rec = run_one(cell)
    if stop.is_set():
        # finished only because we killed it: not a result
        if progress is not None:
            progress.drop(cell)
        return i, None
    if progress is not None:
        progress.finish(rec.outcome)
    return i, rec


def _run_hook(hook: Callable[..., None], *args: Any) -> BaseException | None:
    """Call a hook; the exception it raised (to be re-raised later), if any."""
    try:
        hook(*args)
    except BaseException as e:  # noqa: BLE001 - re-raised by run_cells
        return e
    return None


def _collect(
    pending: set[cf.Future[tuple[int, CellRecord | None]]],
    done: dict[int, CellRecord],
    stop: threading.Event,
    on_record: RecordFn | None,
    on_idle: Callable[[], None] | None,
) -> BaseException | None:
    """Wait for the cells, filing each record in `done` and calling the hooks
    (in this thread) as they come; stop at the first hook exception, which is
    returned.  Once stopped, every wait kills the children still running."""
    hook_error: BaseException | None = None
    while pending:
        finished, pending = cf.wait(pending, timeout=0.2)
        for f in finished:
            i, rec = f.result()
            if rec is not None:
                done[i] = rec
                if on_record is not None and hook_error is None:
                    hook_error = _run_hook(on_record, rec)
                    if hook_error is not None:
                        stop.set()
        if on_idle is not None and hook_error is None and not stop.is_set():
            hook_error = _run_hook(on_idle)
            if hook_error is not None:
                stop.set()
        if stop.is_set():
            kill_descendants()
    return hook_error


def run_cells(
    matrix: Matrix,
    cells: list[Cell],
    selector: BackendSelector,
    *,
    workdir: Path,
    jobs: int = 1,
    timeout: float = 300.0,
    seed: int | None = None,
    make_probe: ProbeFn | None = None,
    expected_digest: DigestFn | None = None,
    progress: Progress | None = None,
    handle_signals: bool = True,
    strict: bool = False,
    on_start: Callable[[RunReport], None] | None = None,
    on_record: RecordFn | None = None,
    on_idle: Callable[[], None] | None = None,
) -> RunReport:
    """Run `cells` and judge them; see the module docstring.  With `strict`, a
    cell that no backend can run here is an error instead of a skip.

    Hooks, all called in the calling thread (so they need no locking):
    `on_start(report)` once the report's metadata is known, before any cell;
    `on_record(record)` as each cell finishes; `on_idle()` every ~0.2 s while
    cells run.  An exception from a hook stops the run the way a signal does
    (no new cells, the children killed) and is then raised to the caller."""
    seed = matrix.seed if seed is None else seed
    if make_probe is None or expected_digest is None:
        d_make, d_digest = _default_probe_fns()
        make_probe = make_probe or d_make
        expected_digest = expected_digest or d_digest
    # absolute: backends hand these paths to processes running in other cwds
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    report = _new_report(
        matrix,
        cells,
        selector,
        workdir=workdir,
        jobs=jobs,
        timeout=timeout,
        seed=seed,
        strict=strict,
    )
    if on_start is not None:
        on_start(report)
    stop = threading.Event()
    t0 = time.monotonic()
    hook_error: BaseException | None = None
    old_handlers = _install_signal_handlers(stop, progress, handle_signals)

    probe_fn, digest_fn = make_probe, expected_digest  # set above; named for the closure

    def run_one(cell: Cell) -> CellRecord:
        model = matrix.models[cell.cpu]
        return _run_one(
            cell, model, matrix, selector, workdir, timeout, seed, probe_fn, digest_fn, strict
        )

    task = functools.partial(_cell_task, run_one=run_one, stop=stop, progress=progress)
    done: dict[int, CellRecord] = {}
    pool = cf.ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="sdematrix-cell")
    try:
        pending = {pool.submit(task, i, cells[i]) for i in _longest_first(matrix, cells)}
        hook_error = _collect(pending, done, stop, on_record, on_idle)
    finally:
        pool.shutdown(wait=True, cancel_futures=stop.is_set())
        _restore_signal_handlers(old_handlers)
        if progress is not None:
            progress.close()

    report.records = [done[i] for i in sorted(done)]
    report.not_run = [c for i, c in enumerate(cells) if i not in done]
    report.interrupted = stop.is_set()
    report.finished_at = _now()
    report.duration_s = time.monotonic() - t0
    if hook_error is not None:
        raise hook_error
    return report
