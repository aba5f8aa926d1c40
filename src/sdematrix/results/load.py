"""Read a run's results directory (see :mod:`sdematrix.results.junit`) into typed objects.

What the report builders need, and nothing they must re-parse:

* :class:`RunResults` -- ``results.json``'s run metadata, the models, the
  backends, and one :class:`CellResult` per cell (cells that were not run
  because the run was interrupted become ``status == "not_run"``);
* each :class:`CellResult` carries its outcome, its ``cells/<cell>.json``
  detail (chip-check violations, run status, output tails) and its
  ``mix/<cell>.mix.json`` :class:`~sdematrix.evidence.mix.Mix`, both loaded lazily;
* :func:`group_cells` folds the workloads (key sizes / lengths) of one
  (cpu, mode, direction) into a :class:`CellGroup` with the worst status --
  one heat-map square.

Tolerance: a missing or unreadable detail or mix file is not fatal; the cell
gets ``None`` and :attr:`RunResults.warnings` says why (one line each).  A
directory that is not a results directory at all -- missing, no
``results.json`` and no ``cells/*.json``, JSON of another schema -- raises
:class:`ResultsDirError` with one line (exit code 2 in the CLI).  When
``results.json`` is missing but ``cells/*.json`` exist (a run killed before it
wrote its summary) the cells are rebuilt from those files, with a warning.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OutputDirError, SdeMatrixError
from ..evidence.mix import Mix, MixCounts
from ..inputs import MAX_JSON_BYTES, JsonProblem, decode_json, load_json, read_text_input
from ..spec.models import DIRECTIONS, MODES
from ..verdict.cell import Outcome
from .outcome_json import (
    SCHEMA_PREFIX,
    as_int,
    cell_of_name,
    is_exec_document,
    opt_str,
    outcome_from_json,
)

__all__ = [
    "STATUS_ORDER",
    "CellGroup",
    "CellResult",
    "ModelInfo",
    "ResultsDirError",
    "RunResults",
    "Violation",
    "group_cells",
    "is_exec_results",
    "load_exec_results",
    "load_results",
    "worst_status",
]


# Worst first: the status a heat-map square shows when its workloads disagree.
# fail (the product is wrong) outranks error (the harness broke); a cell that
# was not run or skipped proves nothing, so it outranks pass.
STATUS_ORDER = ("fail", "error", "not_run", "skip", "pass")


class ResultsDirError(SdeMatrixError):
    """The directory is not a readable sdematrix results directory."""


def worst_status(statuses: Iterable[str]) -> str:
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    items = list(statuses)
    if not items:
        return "not_run"
    return min(items, key=lambda s: rank.get(s, 0))


@dataclass(frozen=True)
class Violation:
    reason: str
    address: str | None
    function: str | None
    image: str | None
    mnemonic: str | None
    bytes_hex: str | None


@dataclass
class ModelInfo:
    name: str
    title: str
    backend: str | None
    skip_reason: str | None


@dataclass
class CellResult(Outcome):
    """One cell's outcome as results.json has it (read through the schema
    that writes it: :mod:`sdematrix.results.outcome_json`) plus (lazily) its detail
    file and its mix."""

    name: str = ""  # the cell's name as the file gives it
    mix_summary: dict[str, Any] | None = None
    cell_file: Path | None = None
    mix_file: Path | None = None
    _detail: dict[str, Any] | None = field(default=None, repr=False)
    _detail_loaded: bool = field(default=False, repr=False)
    _mix: Mix | None = field(default=None, repr=False)
    _mix_loaded: bool = field(default=False, repr=False)
    _warnings: list[str] = field(default_factory=list, repr=False)

    @property
    def cpu(self) -> str:
        return self.cell.cpu

    @property
    def mode(self) -> str:
        return self.cell.mode

    @property
    def direction(self) -> str:
        return self.cell.direction

    @property
    def key_bits(self) -> int | None:
        return self.cell.key_bits

    @property
    def length(self) -> int | None:
        return self.cell.length

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cpu, self.mode, self.direction)

    @property
    def workload(self) -> str:
        """``"256-bit key, 512 B"`` (what distinguishes cells of one group)."""
        kb = f"{self.key_bits}-bit key" if self.key_bits is not None else "key ?"
        ln = f"{self.length} B" if self.length is not None else "? B"
        return f"{kb}, {ln}"

    # Lazy pieces ---------------------------------------------------------
    @property
    def detail(self) -> dict[str, Any] | None:
        """``cells/<cell>.json`` as a dict, or None (missing / unreadable)."""
        if not self._detail_loaded:
            self._detail_loaded = True
            if self.cell_file is not None:
                data = _read_json(self.cell_file, self._warnings, what="cell file")
                if isinstance(data, dict):
                    self._detail = data
                elif data is not None:
                    self._warnings.append(f"{self.cell_file}: not a JSON object; ignored")
        return self._detail

    @property
    def mix(self) -> Mix | None:
        if not self._mix_loaded:
            self._mix_loaded = True
            if self.mix_file is not None:
                data = _read_json(self.mix_file, self._warnings, what="mix file")
                if isinstance(data, dict):
                    try:
                        self._mix = Mix.from_json(data)
                    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
                        self._warnings.append(
                            f"{self.mix_file}: not a normalised mix ({type(e).__name__}); ignored"
                        )
        return self._mix

    @property
    def overall(self) -> MixCounts | None:
        """The overall mix counts, from the mix file or else the summary."""
        if self.mix is not None:
            return self.mix.overall
        s = self.mix_summary
        if not s:
            return None
        mc = MixCounts(total=as_int(s.get("total", 0)) or 0)
        mc.isa_set.update(_int_map(s.get("top_isa_sets")))
        return mc

    @property
    def total_instructions(self) -> int | None:
        if self.mix is not None:
            return self.mix.overall.total
        if self.mix_summary and "total" in self.mix_summary:
            return as_int(self.mix_summary["total"])
        return None

    @property
    def by_width(self) -> dict[str, int] | None:
        if self.mix is not None:
            return dict(self.mix.overall.width)
        if self.mix_summary and isinstance(self.mix_summary.get("by_width"), dict):
            return _int_map(self.mix_summary["by_width"])
        return None

    @property
    def by_isa_set(self) -> dict[str, int] | None:
        if self.mix is not None:
            return dict(self.mix.overall.isa_set)
        if self.mix_summary and isinstance(self.mix_summary.get("top_isa_sets"), dict):
            return _int_map(self.mix_summary["top_isa_sets"])
        return None

    @property
    def run(self) -> dict[str, Any] | None:
        d = self.detail
        run = d.get("run") if d else None
        return run if isinstance(run, dict) else None

    @property
    def violations(self) -> list[Violation]:
        run = self.run
        out: list[Violation] = []
        for v in _as_list((run or {}).get("violations")):
            if not isinstance(v, dict):
                continue
            out.append(
                Violation(
                    reason=str(v.get("reason", "")),
                    address=opt_str(v.get("address")),
                    function=opt_str(v.get("function")),
                    image=opt_str(v.get("image")),
                    mnemonic=opt_str(v.get("mnemonic")),
                    bytes_hex=opt_str(v.get("bytes_hex")),
                )
            )
        return out


@dataclass
class CellGroup:
    """All workloads of one (cpu, mode, direction): one heat-map square."""

    cpu: str
    mode: str
    direction: str
    cells: list[CellResult]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cpu, self.mode, self.direction)

    @property
    def name(self) -> str:
        return f"{self.cpu}.{self.mode}.{self.direction}"

    @property
    def status(self) -> str:
        return worst_status(c.status for c in self.cells)

    @property
    def paths(self) -> list[str]:
        """Distinct chosen paths, in cell order (cells with no path left out)."""
        return list(dict.fromkeys(c.path for c in self.cells if c.path))

    @property
    def path(self) -> str | None:
        """The chosen path; ``"mixed"`` when the workloads took different ones."""
        p = self.paths
        if not p:
            return None
        return p[0] if len(p) == 1 else "mixed"

    @property
    def expected_path(self) -> str | None:
        e = list(dict.fromkeys(c.expected_path for c in self.cells if c.expected_path))
        if not e:
            return None
        return e[0] if len(e) == 1 else "mixed"

    def count(self, status: str) -> int:
        return sum(1 for c in self.cells if c.status == status)


@dataclass
class RunResults:
    directory: Path
    meta: dict[str, Any]  # results.json minus cells / models / backends / host
    host: dict[str, Any]
    backends: dict[str, dict[str, Any]]
    models: dict[str, ModelInfo]
    cells: list[CellResult]
    warnings: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Counted from the cells (so a hand-edited or rebuilt dir stays consistent)."""
        out = {s: 0 for s in ("pass", "fail", "error", "skip", "not_run")}
        for c in self.cells:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    @property
    def cpus(self) -> list[str]:
        """Models in results order (models table first, then any other cell cpu)."""
        return list(dict.fromkeys([*self.models, *(c.cpu for c in self.cells)]))

    @property
    def columns(self) -> list[tuple[str, str]]:
        """(mode, direction) columns present, in the canonical mode/direction order."""
        present = {(c.mode, c.direction) for c in self.cells}
        modes = [m for m in MODES if any(p[0] == m for p in present)]
        modes += sorted({p[0] for p in present} - set(modes))
        out: list[tuple[str, str]] = []
        for m in modes:
            dirs = [d for d in DIRECTIONS if (m, d) in present]
            dirs += sorted({d for mm, d in present if mm == m} - set(dirs))
            out.extend((m, d) for d in dirs)
        return out

    def groups(self) -> dict[tuple[str, str, str], CellGroup]:
        return group_cells(self.cells)

    def cell(self, name: str) -> CellResult | None:
        for c in self.cells:
            if c.name == name:
                return c
        return None

    def all_warnings(self) -> list[str]:
        """Run-level warnings plus those raised by lazily loaded cell files so far."""
        out = list(self.warnings)
        for c in self.cells:
            out.extend(c._warnings)
        return out

    @property
    def started_at(self) -> str | None:
        return opt_str(self.meta.get("started_at"))

    @property
    def duration_s(self) -> float | None:
        v = self.meta.get("duration_s")
        return float(v) if isinstance(v, int | float) else None


def group_cells(cells: Iterable[CellResult]) -> dict[tuple[str, str, str], CellGroup]:
    out: dict[tuple[str, str, str], CellGroup] = {}
    for c in cells:
        g = out.get(c.key)
        if g is None:
            out[c.key] = g = CellGroup(c.cpu, c.mode, c.direction, [])
        g.cells.append(c)
    return out


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def _read_json(path: Path, warnings: list[str], *, what: str) -> Any:
    """A cell or mix file, or None with one warning: missing, not a regular
    file (a FIFO is never opened blocking), too large, not UTF-8, not JSON
    or out of bounds (see :mod:`sdematrix.inputs`)."""
    if not _exists(path):
        warnings.append(f"{what} {path} is missing")
        return None
    try:
        text = read_text_input(path, what=what, limit=MAX_JSON_BYTES, error=ResultsDirError)
    except ResultsDirError as e:
        warnings.append(f"{what} {path} is unreadable: {str(e).removeprefix(f'{path}: ')}")
        return None
    try:
        return decode_json(text)
    except JsonProblem as e:
        warnings.append(f"{what} {path} is not valid JSON ({e})")
        return None


def _exists(path: Path) -> bool:
    """Whether `path` names anything (a dangling symlink too); False also for
    a name the kernel refuses (ENAMETOOLONG, EACCES on the way)."""
    try:
        os.lstat(path)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return False
    return True


def _as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _int_map(v: Any) -> dict[str, int]:
    """{str: int} from a JSON object, entries that are not counts dropped."""
    out: dict[str, int] = {}
    for k, n in _as_dict(v).items():
        i = as_int(n)
        if i is not None:
            out[str(k)] = i
    return out


def _cell_from_json(d: dict[str, Any], root: Path, files: dict[str, Any] | None) -> CellResult:
    fields = outcome_from_json(d)
    name = fields["name"]
    files = files or {}
    cell_rel = files.get("cell") if isinstance(files.get("cell"), str) else f"cells/{name}.json"
    mix_rel = files.get("mix") if isinstance(files.get("mix"), str) else None
    if mix_rel is None and "files" not in d:
        guess = root / "mix" / f"{name}.mix.json"
        mix_rel = str(guess.relative_to(root)) if _exists(guess) else None
    summary = d.get("mix_summary")
    return CellResult(
        **fields,
        mix_summary=summary if isinstance(summary, dict) else None,
        cell_file=root / str(cell_rel),
        mix_file=(root / str(mix_rel)) if mix_rel else None,
    )


def _not_run_cell(name: str) -> CellResult:
    return CellResult(
        cell=cell_of_name(name),
        name=name,
        status="not_run",  # type: ignore[arg-type]
        reasons=["not run: the run was interrupted first"],
    )


def _rebuild_from_cells(root: Path, warnings: list[str]) -> list[CellResult]:
    cells: list[CellResult] = []
    for f in sorted((root / "cells").glob("*.json")):
        data = _read_json(f, warnings, what="cell file")
        if not isinstance(data, dict) or not isinstance(data.get("outcome"), dict):
            warnings.append(f"cell file {f} has no outcome; ignored")
            continue
        d = dict(data["outcome"])
        d["mix_summary"] = data.get("mix_summary")
        cell = _cell_from_json(d, root, None)
        cell.cell_file = f
        cells.append(cell)
    return cells


def _results_root(directory: str | Path) -> Path:
    root = Path(directory)
    try:
        os.stat(root)
    except FileNotFoundError:
        raise ResultsDirError(f"results directory {root} does not exist") from None
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        raise ResultsDirError(f"cannot read results directory {root}: {why}") from None
    if not root.is_dir():
        raise ResultsDirError(f"{root} is not a directory (expected an sdematrix results dir)")
    return root


def _without_results_json(root: Path, warnings: list[str]) -> RunResults:
    """A directory whose results.json is missing: its cells rebuilt from
    ``cells/`` (an interrupted write), else not a results directory."""
    results_file = root / "results.json"
    if (root / "cells").is_dir() and any((root / "cells").glob("*.json")):
        warnings.append(f"{results_file} is missing; cells rebuilt from {root / 'cells'}")
        cells = _rebuild_from_cells(root, warnings)
        if not cells:
            raise ResultsDirError(f"{root} has no results.json and no readable cell files")
        return RunResults(root, {}, {}, {}, {}, cells, warnings)
    raise ResultsDirError(
        f"{root} is not an sdematrix results directory (no results.json; "
        "make one with 'sdematrix run --out DIR')"
    )


def _results_document(results_file: Path) -> dict[str, Any]:
    """results.json, checked to be a run's (schema, a cells list)."""
    text = read_text_input(
        results_file, what="results.json", limit=MAX_JSON_BYTES, error=ResultsDirError
    )
    try:
        data = decode_json(text)
    except JsonProblem as e:
        raise ResultsDirError(f"{results_file} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ResultsDirError(f"{results_file} is not a JSON object")
    schema = data.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        shown = repr(schema) if len(repr(schema)) <= 60 else repr(schema)[:57] + "..."
        raise ResultsDirError(f"{results_file} has schema {shown}, expected '{SCHEMA_PREFIX}1'")
    if not isinstance(data.get("cells"), list):
        raise ResultsDirError(f"{results_file} has no 'cells' list")
    return data


def _cells_of(
    data: dict[str, Any], root: Path, results_file: Path, warnings: list[str]
) -> list[CellResult]:
    """The cells that ran, then those ``not_run`` names."""
    cells: list[CellResult] = []
    for i, d in enumerate(data["cells"]):
        if not isinstance(d, dict):
            warnings.append(f"{results_file}: cells[{i}] is not an object; ignored")
            continue
        files = d.get("files") if isinstance(d.get("files"), dict) else None
        cells.append(_cell_from_json(d, root, files))
    seen = {c.name for c in cells}
    for name in _as_list(data.get("not_run")):
        if isinstance(name, str) and name not in seen:
            cells.append(_not_run_cell(name))
    return cells


def _models_of(data: dict[str, Any]) -> dict[str, ModelInfo]:
    models: dict[str, ModelInfo] = {}
    for cpu, m in _as_dict(data.get("models")).items():
        m = m if isinstance(m, dict) else {}
        models[str(cpu)] = ModelInfo(
            name=str(cpu),
            title=str(m.get("title") or cpu),
            backend=opt_str(m.get("backend")),
            skip_reason=opt_str(m.get("skip_reason")),
        )
    return models


def _check_counts(res: RunResults, declared: Any) -> None:
    """A warning when results.json's ``counts`` disagree with its cells."""
    if not isinstance(declared, dict):
        return
    actual = res.counts
    diffs = [
        f"{k} {declared.get(k)} vs {actual.get(k, 0)}"
        for k in ("pass", "fail", "error", "skip")
        if k in declared and as_int(declared.get(k)) != actual.get(k, 0)
    ]
    if diffs:
        res.warnings.append(
            "results.json counts disagree with its cells (" + ", ".join(diffs) + ")"
        )


def load_results(directory: str | Path) -> RunResults:
    """Read `directory`; raise :class:`ResultsDirError` (one line) if it is not one."""
    root = _results_root(directory)
    warnings: list[str] = []
    results_file = root / "results.json"
    if not results_file.is_file():
        return _without_results_json(root, warnings)
    data = _results_document(results_file)
    cells = _cells_of(data, root, results_file, warnings)
    host = data.get("host") if isinstance(data.get("host"), dict) else {}
    backends = data.get("backends") if isinstance(data.get("backends"), dict) else {}
    meta = {k: v for k, v in data.items() if k not in ("cells", "models", "backends", "host")}
    res = RunResults(root, meta, host, backends, _models_of(data), cells, warnings)
    _check_counts(res, data.get("counts"))
    return res


# ---- sdematrix exec ------------------------------------------------------------------


def is_exec_results(results_dir: Path) -> bool:
    """True for an ``exec --out`` directory.  Read through the bounded input
    layer; a file it refuses is not exec's (the run reader then says why)."""
    try:
        data = load_json(results_dir / "results.json", what="the results file")
    except SdeMatrixError:
        return False
    return is_exec_document(data)


def load_exec_results(results_dir: Path) -> dict[str, Any]:
    """An exec results document (:func:`sdematrix.results.outcome_json.exec_results_json`)."""
    f = results_dir / "results.json"
    data = load_json(f, what="the results file", error=OutputDirError)
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise OutputDirError(f"{f} is not an sdematrix exec results file")
    return data
