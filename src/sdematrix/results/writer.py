"""Write a run's results directory while its cells run (format: :mod:`sdematrix.results.junit`).

:class:`ResultsWriter` is handed each cell as it finishes (from the runner's
main thread) and:

* writes ``cells/<cell>.json`` and ``mix/<cell>.mix.json`` at once, each to a
  temporary name renamed into place (a reader never sees half a file);
* serialises the cell's JUnit ``<testcase>`` once and keeps it
  (:class:`~sdematrix.results.junit.JUnitDoc`);
* rewrites ``results.json`` and the JUnit file, again by rename, at most every
  `flush_interval` seconds and once more at the end -- so a run stopped at
  any moment (a signal, a crash, a full disk) leaves well-formed files for
  the cells that had finished, and the last cell costs one small flush, not
  a pass over every cell;
* keeps the backend's scratch files (``work/<cell>.*``: SDE's raw mix, the
  tracer's trace) only for cells that did not pass, unless `keep_work`: a
  passing cell's verdict and normalised mix are all the report and ``diff``
  read;
* stores a passing cell's mix with only its :data:`KEEP_FUNCTIONS` busiest
  functions (the report shows the top ten; the overall, per-image and
  per-thread counts are complete); ``meta.functions_executed`` and
  ``meta.functions_omitted`` say how many there were.  A failing cell's mix
  is stored whole.

The JUnit file is written once, at its one path (``--junit`` or
``<out>/junit.xml``); when ``--junit`` names another place, ``<out>/junit.xml``
is a hard link to it (a copy only across file systems).

While the run is in progress ``results.json`` says ``"in_progress": true``
and lists the cells not finished yet under ``not_run``.

``sdematrix exec``'s directory is written here too, once its models have run
(:func:`write_exec_results`), through the same last step (:func:`publish`:
the JUnit file, its link, then ``results.json``) and the same writers of the
documents (:class:`~sdematrix.results.junit.JUnitDoc`,
:mod:`sdematrix.results.outcome_json`, which owns both results.json
schemas).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OutputDirError
from ..evidence.mix import Mix
from ..pipeline.run import CellRecord, RunReport
from .junit import (
    JUnitDoc,
    atomic_write,
    exec_junit_doc,
    host_info,
    junit_doc,
    link_file,
    mix_summary,
    prepare_out_dir,
)
from .outcome_json import exec_results_json, outcome_to_json, run_results_json, violations_json

if TYPE_CHECKING:
    from ..verdict.exec_judge import ExecOutcome

__all__ = [
    "KEEP_FUNCTIONS",
    "ResultsWriter",
    "publish",
    "slim_mix_json",
    "write_exec_junit",
    "write_exec_results",
    "write_results",
]

KEEP_FUNCTIONS = 24


def slim_mix_json(mix: Mix, keep: int = KEEP_FUNCTIONS) -> dict[str, Any]:
    """``mix.to_json()`` with only the `keep` busiest functions that ran."""
    d = mix.to_json()
    funcs = d.get("functions") or []
    executed = [f for f in funcs if int(f.get("total", 0) or 0) > 0]
    d["functions"] = executed[:keep]
    meta = dict(d.get("meta") or {})
    meta["functions_executed"] = len(executed)
    meta["functions_omitted"] = len(funcs) - len(d["functions"])
    d["meta"] = meta
    return d


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def publish(out: Path, junit_path: Path, junit_text: str, results: str) -> None:
    """The end of every write of a results directory, `sdematrix run`'s
    flushes and `sdematrix exec`'s: the JUnit file at its one path, linked as
    ``<out>/junit.xml`` (every time: never an older run's), then
    ``results.json`` -- last, as it is what says the run is complete.  Each
    file by rename."""
    try:
        atomic_write(junit_path, junit_text)
        link_file(junit_path, out / "junit.xml")
        atomic_write(out / "results.json", results)
    except OSError as e:
        raise OutputDirError(f"cannot write results under {out}: {e.strerror or e}") from None


class ResultsWriter:
    def __init__(
        self,
        out: Path,
        report: RunReport,
        *,
        junit_path: Path | None = None,
        keep_work: bool = False,
        flush_interval: float = 0.5,
    ) -> None:
        self.out = out
        self.report = report
        self.junit_path = junit_path or out / "junit.xml"
        self.keep_work = keep_work
        self.flush_interval = flush_interval
        self.doc: JUnitDoc = junit_doc(report)
        self._order = {c.name: i for i, c in enumerate(report.cells)}
        self._cells: dict[int, dict[str, Any]] = {}
        self._counts = {s: 0 for s in ("pass", "fail", "error", "skip")}
        self._host = host_info()
        self._last_flush = 0.0
        self._dirty = False
        self.work = Path(report.workdir) if report.workdir else out / "work"

    # -- phases ----------------------------------------------------------
    def begin(self) -> None:
        """The directory, an in-progress results.json and an empty JUnit file."""
        prepare_out_dir(self.out)
        self.flush(final=False)

    def add(self, rec: CellRecord) -> None:
        """One finished cell: its files now, the summaries on the next flush."""
        name = rec.cell.name
        mix = rec.result.mix if rec.result else None
        summary = mix_summary(mix)
        files: dict[str, str | None] = {"cell": f"cells/{name}.json", "mix": None}
        bad = rec.outcome.status in ("fail", "error")
        try:
            if mix is not None:
                data = mix.to_json() if bad else slim_mix_json(mix)
                atomic_write(self.out / "mix" / f"{name}.mix.json", _dumps(data))
                files["mix"] = f"mix/{name}.mix.json"
            run = _run_json(rec)
            if run is not None and not bad and not self.keep_work:
                removed = self._drop_work(name)
                if removed:
                    run["work_removed"] = removed
                    run["artifacts"] = {
                        k: v for k, v in run["artifacts"].items() if not _in(v, self.work)
                    }
            atomic_write(
                self.out / "cells" / f"{name}.json",
                _dumps(
                    {
                        "outcome": outcome_to_json(rec.outcome),
                        "probe": rec.result.probe if rec.result else None,
                        "run": run,
                        "mix_summary": summary,
                    }
                ),
            )
        except OSError as e:
            raise OutputDirError(
                f"cannot write results under {self.out}: {e.strerror or e}"
            ) from None
        i = self._order.get(name, len(self._order))
        self._cells[i] = {**outcome_to_json(rec.outcome), "mix_summary": summary, "files": files}
        self._counts[rec.outcome.status] = self._counts.get(rec.outcome.status, 0) + 1
        self.doc.add(rec, i)
        self._dirty = True
        self.maybe_flush()

    def maybe_flush(self) -> None:
        if self._dirty and time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush(final=False)

    def finish(self) -> None:
        """The final results.json and JUnit file (the report's end state)."""
        self.flush(final=True)

    # -- writing ---------------------------------------------------------
    def _drop_work(self, name: str) -> int:
        n = 0
        if not self.work.is_dir():
            return 0
        for p in self.work.glob(f"{name}.*"):
            with contextlib.suppress(OSError):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                n += 1
        return n

    def results_json(self, *, final: bool) -> dict[str, Any]:
        return run_results_json(
            self.report,
            [self._cells[i] for i in sorted(self._cells)],
            self._counts,
            self._host,
            final=final,
        )

    def flush(self, *, final: bool) -> None:
        publish(self.out, self.junit_path, self.doc.text(), _dumps(self.results_json(final=final)))
        self._last_flush = time.monotonic()
        self._dirty = False


def _in(value: Any, root: Path) -> bool:
    try:
        return Path(str(value)).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return False


def _run_json(rec: CellRecord) -> dict[str, Any] | None:
    r = rec.result
    if r is None:
        return None
    return {
        "backend": r.backend,
        "status": r.status,
        "exit_code": r.exit_code,
        "reason": r.reason,
        "duration_s": round(r.duration_s, 6),
        "backend_version": r.backend_version,
        "violations": violations_json(r.violations),
        "artifacts": dict(r.artifacts),
        "stdout_tail": r.stdout_tail,
        "stderr_tail": r.stderr_tail,
        "probe_argv": list(rec.probe_argv),
    }


def write_results(
    out: Path,
    report: RunReport,
    *,
    junit_name: str = "junit.xml",
    keep_work: bool = True,
) -> None:
    """Write results.json, cells/*.json, mix/*.mix.json and junit.xml under
    `out` for a finished `report` in one go (``sdematrix run`` writes them
    as the cells finish: :class:`ResultsWriter`)."""
    w = ResultsWriter(
        out, report, junit_path=out / junit_name, keep_work=keep_work, flush_interval=float("inf")
    )
    w.begin()
    for rec in report.records:
        w.add(rec)
    w.finish()


# ---- sdematrix exec --------------------------------------------------------------


def write_exec_junit(path: Path, outcomes: list[ExecOutcome], argv: list[str]) -> None:
    """Only the JUnit file of an exec run (``--junit`` without ``--out``)."""
    try:
        atomic_write(path, exec_junit_doc(outcomes, argv).text())
    except OSError as e:
        raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def write_exec_results(
    out: Path,
    outcomes: list[ExecOutcome],
    argv: list[str],
    exps: list[Any] | None = None,
    junit_path: Path | None = None,
) -> None:
    """An ``sdematrix exec --out`` directory, once the models have run:
    ``OUT/<model>/{stdout,stderr,mix.json}``, then, as for a run
    (:func:`publish`), the JUnit file (at `junit_path` -- ``--junit`` -- when
    given, linked as ``OUT/junit.xml``) and ``OUT/results.json``
    (:func:`sdematrix.results.outcome_json.exec_results_json`); each file by
    rename."""
    try:
        for o in outcomes:
            d = out / o.model
            d.mkdir(parents=True, exist_ok=True)
            r = o.result
            if r is None:
                continue
            atomic_write(d / "stdout", r.stdout)
            atomic_write(d / "stderr", r.stderr)
            if r.mix is not None:
                # one line: json's C encoder (indent= takes the pure-Python
                # one, seconds for a whole-process mix)
                atomic_write(d / "mix.json", json.dumps(r.mix.to_json()) + "\n")
    except OSError as e:
        raise OutputDirError(f"cannot write results under {out}: {e.strerror or e}") from None
    doc = exec_results_json(outcomes, argv, exps)
    publish(
        out,
        junit_path or out / "junit.xml",
        exec_junit_doc(outcomes, argv).text(),
        json.dumps(doc, indent=1) + "\n",
    )
