"""Merging per-CPU outputs into one: JUnit files (`sdematrix merge-junit`)
and results directories (`sdematrix merge-results`), as the Docker runner
and the CI publish job do after one run per CPU."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .errors import MatrixFileError, OutputDirError
from .junit import SCHEMA


def junit_suites(path: Path) -> list[ET.Element]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise MatrixFileError(f"merge-junit: {path} is not readable JUnit XML: {why}") from None
    if root.tag == "testsuite":
        return [root]
    if root.tag == "testsuites":
        return list(root.iter("testsuite"))
    raise MatrixFileError(f"merge-junit: {path}: root element <{root.tag}> is not JUnit")


def error_suite(name: str, message: str) -> ET.Element:
    """A one-case JUnit suite saying that `name` produced no results."""
    s = ET.Element("testsuite", name=name, tests="1", failures="0", errors="1", skipped="0")
    case = ET.SubElement(s, "testcase", classname=name, name="container")
    err = ET.SubElement(case, "error", message=message, type="ContainerError")
    err.text = message
    return s


def merge_junit(
    files: list[Path], dest: Path, extra_suites: list[ET.Element] | None = None
) -> None:
    """Concatenate the <testsuite> elements of several JUnit files (plus
    `extra_suites`) under one <testsuites> with summed counts.  A file that is
    not JUnit XML is an error (MatrixFileError), not silently dropped."""
    root = ET.Element("testsuites")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    time_s = 0.0
    suites = [s for f in files for s in junit_suites(f)] + list(extra_suites or [])
    for s in suites:
        root.append(s)
        for k in totals:
            totals[k] += int(s.get(k, "0") or 0)
        try:
            time_s += float(s.get("time", "0") or 0)
        except ValueError:
            pass
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{time_s:.3f}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(dest, encoding="utf-8", xml_declaration=True)


def _read_results(d: Path) -> dict[str, Any]:
    f = d / "results.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise OutputDirError(f"merge-results: cannot read {f}: {why}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise OutputDirError(f"merge-results: {f} is not an {SCHEMA} file")
    return data


def merge_results(dirs: list[Path], dest: Path) -> dict[str, Any]:
    """One results directory over several (one per CPU from containers or CI
    jobs): `dest`/results.json holds every cell, model and backend, and the
    cells' file references point into the source directories (relative to
    `dest`), so `sdematrix report DEST` covers them all.  Returns the data."""
    dest.mkdir(parents=True, exist_ok=True)
    runs = [(d, _read_results(d)) for d in dirs]
    if not runs:
        raise OutputDirError("merge-results: no results directories given")
    merged: dict[str, Any] = {k: v for k, v in runs[0][1].items() if k != "cells"}
    cells: list[dict[str, Any]] = []
    models: dict[str, Any] = {}
    backends: dict[str, Any] = {}
    not_run: list[str] = []
    counts: dict[str, int] = {}
    for d, data in runs:
        rel = Path(os.path.relpath(d.resolve(), dest.resolve()))
        for cell in data.get("cells") or []:
            if isinstance(cell, dict):
                files = cell.get("files")
                if isinstance(files, dict):
                    cell = {**cell, "files": {k: str(rel / v) if isinstance(v, str) else v
                                              for k, v in files.items()}}  # fmt: skip
                cells.append(cell)
        models.update(data.get("models") or {})
        for name, b in (data.get("backends") or {}).items():
            # a backend counts as available when it was in any of the runs
            if name not in backends or (isinstance(b, dict) and b.get("available")):
                backends[name] = b
        not_run += [n for n in data.get("not_run") or [] if isinstance(n, str)]
        for k, v in (data.get("counts") or {}).items():
            counts[k] = counts.get(k, 0) + (v if isinstance(v, int) else 0)
    starts = sorted(str(r.get("started_at")) for _, r in runs if r.get("started_at"))
    ends = sorted(str(r.get("finished_at")) for _, r in runs if r.get("finished_at"))
    merged.update(
        cells=cells,
        models=models,
        backends=backends,
        not_run=not_run,
        counts=counts,
        interrupted=any(bool(r.get("interrupted")) for _, r in runs),
        duration_s=round(sum(float(r.get("duration_s") or 0) for _, r in runs), 3),
        merged_from=[str(d) for d, _ in runs],
    )
    if starts:
        merged["started_at"] = starts[0]
    if ends:
        merged["finished_at"] = ends[-1]
    (dest / "results.json").write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
    return merged
