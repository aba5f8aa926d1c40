"""results.json, both kinds: written and read here, one schema.

``sdematrix run``'s document (:func:`run_results_json`) and its cells, and
``sdematrix exec``'s document (:func:`exec_results_json`) and its models;
:mod:`sdematrix.results.writer` writes them, :mod:`sdematrix.results.load`
reads them back.

:func:`outcome_to_json` is what the results writer puts (into ``results.json``'s ``cells`` and ``cells/<cell>.json``'s
``outcome``); :func:`outcome_from_json` reads it back into the fields of an
:class:`~sdematrix.verdict.cell.Outcome` (the report loader's
:class:`~sdematrix.results.load.CellResult` is one).  Reading is lenient, as a
report of a damaged directory must be: a missing or mistyped value gets its
field's default, a cell name with unparseable parts keeps what it can.

``reason_kinds`` (one :class:`~sdematrix.verdict.reasons.Kind` value per reason) is
absent in files written before reasons had kinds: see
:func:`sdematrix.verdict.reasons.reasons_from_json`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..backends.base import Violation
from ..evidence.mix import Mix
from ..inputs import bounded_int
from ..spec.dispatch_env import dispatch_overrides
from ..spec.models import Cell
from ..verdict.reasons import kinds_of, reasons_from_json
from .junit import mix_summary

if TYPE_CHECKING:
    from ..pipeline.run import RunReport
    from ..verdict.cell import Outcome
    from ..verdict.exec_judge import ExecOutcome

__all__ = [
    "EXEC_TOOL",
    "SCHEMA",
    "SCHEMA_PREFIX",
    "as_float",
    "as_int",
    "exec_model_json",
    "exec_results_json",
    "is_exec_document",
    "isa_by_function",
    "opt_str",
    "outcome_from_json",
    "outcome_to_json",
    "run_results_json",
    "violations_json",
]

SCHEMA_PREFIX = "sdematrix-results/"
SCHEMA = f"{SCHEMA_PREFIX}1"


def outcome_to_json(o: Outcome) -> dict[str, Any]:
    c = o.cell
    return {
        "cell": c.name,
        "cpu": c.cpu,
        "mode": c.mode,
        "direction": c.direction,
        "key_bits": c.key_bits,
        "length": c.length,
        "status": o.status,
        "reasons": list(o.reasons),
        "reason_kinds": kinds_of(o.reasons),
        "path": o.path,
        "expected_path": o.expected_path,
        "backend": o.backend,
        "backend_version": o.backend_version,
        "duration_s": round(o.duration_s, 6),
        "digest": o.digest,
        "expected_digest": o.expected_digest,
        "output_tail": o.output_tail,
    }


def opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def as_int(v: Any) -> int | None:
    """An int from a JSON value, None for anything else (bounded: a bool, a
    float out of range, a 5,000-digit string are all None)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        try:
            return bounded_int(v)
        except ValueError:
            return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def as_float(v: Any) -> float:
    """A finite float from a JSON value, else 0.0."""
    if isinstance(v, str) and len(v) > 64:
        return 0.0
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return f if math.isfinite(f) else 0.0


def _split_name(name: str) -> tuple[str, str, str, int | None, int | None]:
    parts = name.split(".")
    cpu = parts[0] if parts else name
    mode = parts[1] if len(parts) > 1 else "?"
    direction = parts[2] if len(parts) > 2 else "?"
    kb = as_int(parts[3]) if len(parts) > 3 else None
    ln = as_int(parts[4]) if len(parts) > 4 else None
    return cpu, mode, direction, kb, ln


def cell_of_name(name: str) -> Cell:
    """The cell a name ``cpu.mode.direction.key_bits.length`` names (a part
    that is missing or not a number: ``?`` / None)."""
    cpu, mode, direction, kb, ln = _split_name(name)
    return Cell(cpu, mode, direction, kb, ln)  # type: ignore[arg-type]


def outcome_from_json(d: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~sdematrix.verdict.cell.Outcome` fields of `d` (as
    :func:`outcome_to_json` wrote it), ``cell`` included, and ``name``: the
    cell's name as the file gives it."""
    name = str(d.get("cell") or "")
    cpu, mode, direction, kb, ln = _split_name(name)
    cpu = str(d.get("cpu") or cpu)
    mode = str(d.get("mode") or mode)
    direction = str(d.get("direction") or direction)
    if not name:
        name = f"{cpu}.{mode}.{direction}.{d.get('key_bits')}.{d.get('length')}"
    status = str(d.get("status") or "error")
    reasons = d.get("reasons") or []
    texts = [str(r) for r in reasons] if isinstance(reasons, list) else [str(reasons)]
    kinds = d.get("reason_kinds")
    cell = Cell(
        cpu,
        mode,
        direction,
        as_int(d.get("key_bits", kb)),  # type: ignore[arg-type]
        as_int(d.get("length", ln)),
    )  # type: ignore[arg-type]
    return {
        "name": name,
        "cell": cell,
        "status": status,
        "reasons": reasons_from_json(texts, kinds if isinstance(kinds, list) else None, status),
        "path": opt_str(d.get("path")),
        "expected_path": opt_str(d.get("expected_path")),
        "backend": opt_str(d.get("backend")),
        "backend_version": opt_str(d.get("backend_version")),
        "duration_s": as_float(d.get("duration_s")),
        "digest": opt_str(d.get("digest")),
        "expected_digest": opt_str(d.get("expected_digest")),
        "output_tail": str(d.get("output_tail") or ""),
    }


def violations_json(violations: Iterable[Violation]) -> list[dict[str, Any]]:
    """Chip-check violations as results.json lists them (a run cell's
    ``run.violations``, an exec model's ``violations``)."""
    return [
        {
            "reason": v.reason,
            "address": v.address,
            "function": v.function,
            "image": v.image,
            "mnemonic": v.mnemonic,
            "bytes_hex": v.bytes_hex,
        }
        for v in violations
    ]


def run_results_json(
    r: RunReport,
    cells: list[dict[str, Any]],
    counts: dict[str, int],
    host: dict[str, Any],
    *,
    final: bool,
) -> dict[str, Any]:
    """``sdematrix run``'s results.json (the layout: :mod:`sdematrix.results.junit`):
    `cells` the finished cells' entries (:func:`outcome_to_json` plus
    ``mix_summary`` and ``files``) in matrix order, `counts` theirs; before
    the end (not `final`) it is in progress and lists the cells not run yet."""
    models = {
        cpu: {
            "title": r.matrix.models[cpu].title if cpu in r.matrix.models else cpu,
            **r.model_backends.get(cpu, {"backend": None, "skip_reason": None}),
        }
        for cpu in dict.fromkeys(c.cpu for c in r.cells)
    }
    done = {c["cell"] for c in cells}
    not_run = [c.name for c in r.cells if c.name not in done]
    return {
        "schema": SCHEMA,
        "tool": {"name": "sdematrix", "version": __version__},
        "matrix": str(r.matrix.source),
        "seed": r.seed,
        "jobs": r.jobs,
        "timeout_s": r.timeout_s,
        "started_at": r.started_at,
        "finished_at": r.finished_at if final else None,
        "duration_s": round(r.duration_s, 3),
        "interrupted": r.interrupted if final else False,
        "in_progress": not final,
        "host": host,
        "backend_requested": r.backend_requested,
        "backends": r.backends,
        "models": models,
        "counts": {**counts, "not_run": len(not_run)},
        "cells": cells,
        "not_run": not_run,
    }


# ---- sdematrix exec: one row per model -------------------------------------------

#: ``tool.name`` of an exec results document (what tells it from a run's).
EXEC_TOOL = "sdematrix exec"

#: ISA sets every x86-64 CPU has (XED's names): not worth listing per function.
_BASELINE = re.compile(
    r"^(I86|I186|I286\w*|I386|I486\w*|PENTIUM\w*|PPRO\w*|P6|CMOV|FAT_NOP|LONGMODE|X87|"
    r"SSE|SSE2|SSE2MMX|SSEMXCSR|SSE_PREFETCH|MMX|FXSAVE\w*|CLFSH|CMPXCHG8B|PAUSE|LAHF|"
    r"BASE|RDTSCP?|CPUID|SYSCALL\w*|PREFETCH_NOP)$"
)


def isa_by_function(mix: Mix | None, limit: int = 40) -> list[dict[str, Any]]:
    """The functions that executed ISA sets beyond the x86-64 baseline, most
    executed instructions first: ``{image, function, isa_sets: {set: n}}``."""
    if mix is None:
        return []
    rows = []
    for fm in mix.functions:
        sets = {k: int(v) for k, v in fm.counts.isa_set.most_common() if not _BASELINE.match(k)}
        if sets:
            rows.append(
                {
                    "image": fm.image.rsplit("/", 1)[-1],
                    "function": fm.name,
                    "isa_sets": sets,
                    "total": fm.counts.total,
                }
            )
    rows.sort(key=lambda r: (-sum(r["isa_sets"].values()), r["function"]))
    return rows[:limit]


def exec_model_json(o: ExecOutcome, *, full: bool = True) -> dict[str, Any]:
    """One model's row of the exec results document; `full`: with what only
    OUT/results.json carries (``meta``, ``violations``, ``mix_summary``)."""
    r = o.result
    row: dict[str, Any] = {
        "model": o.model,
        "status": o.status,
        "reasons": o.reasons,
        "reason_kinds": kinds_of(o.reasons),
        "exit_code": r.exit_code if r else None,
        "region": r.region if r else None,
    }
    if full:
        row["meta"] = r.meta if r else {}
        row["violations"] = violations_json(r.violations if r else ())
        row["mix_summary"] = mix_summary(r.mix if r else None)
    row["checks"] = [c.to_json() for c in o.all_checks()]
    row["isa_by_function"] = isa_by_function(r.mix if r else None)
    return row


def exec_results_json(
    outcomes: list[ExecOutcome],
    argv: list[str],
    exps: list[Any] | None,
    *,
    full: bool = True,
) -> dict[str, Any]:
    """The exec results document (OUT/results.json when `full`; without the
    file-only parts of each row it is what the reports render)."""
    return {
        "tool": {"name": EXEC_TOOL, "version": __version__},
        "argv": argv,
        "expectations": [e.name for e in exps or []],
        # the run's environment (the program inherits it): what overrides a
        # library's CPU dispatch (sdematrix.spec.dispatch_env)
        "dispatch_overrides": [o.to_json() for o in dispatch_overrides(os.environ)],
        "models": [exec_model_json(o, full=full) for o in outcomes],
    }


def is_exec_document(data: Any) -> bool:
    """True for a document :func:`exec_results_json` wrote."""
    tool = data.get("tool") if isinstance(data, dict) else None
    return isinstance(tool, dict) and tool.get("name") == EXEC_TOOL
