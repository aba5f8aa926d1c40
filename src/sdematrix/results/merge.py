"""Merging per-CPU outputs into one: JUnit files (`sdematrix merge-junit`)
and results directories (`sdematrix merge-results`), as the Docker runner
and the CI publish job do after one run per CPU."""

from __future__ import annotations

import contextlib
import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MatrixFileError, OutputDirError
from ..inputs import MAX_XML_BYTES, check_xml, load_json, read_input
from .outcome_json import SCHEMA


def junit_suites(path: Path) -> list[ET.Element]:
    """The <testsuite> elements of one JUnit file.  Read through the bounded
    loader (a regular file of bounded size; no DOCTYPE, so no entity can
    expand; nesting bounded, so neither ElementTree's parser nor its
    recursive writer meets a pathological tree); every problem one line."""
    try:
        data = read_input(path, what="JUnit file", limit=MAX_XML_BYTES, error=MatrixFileError)
        check_xml(data, path, MatrixFileError)
        root = ET.fromstring(data)
    except MatrixFileError as exc:
        why = str(exc).removeprefix(f"{path}")
        raise MatrixFileError(f"merge-junit: {path} is not readable JUnit XML{why}") from None
    except ET.ParseError as exc:  # pragma: no cover - check_xml parsed it already
        raise MatrixFileError(f"merge-junit: {path} is not readable JUnit XML: {exc}") from None
    if root.tag == "testsuite":
        suites = [root]
    elif root.tag == "testsuites":
        suites = list(root.iter("testsuite"))
    else:
        raise MatrixFileError(
            f"merge-junit: {path}: root element <{_shown(root.tag)}> is not JUnit"
        )
    for s in suites:  # the counts merge_junit sums: checked here, with the file
        for k in _COUNTS:
            if _count(s.get(k)) is None:
                raise MatrixFileError(
                    f'merge-junit: {path}: <testsuite {k}="{_shown(s.get(k))}"> is not a count'
                )
    return suites


_COUNTS = ("tests", "failures", "errors", "skipped")


def _shown(v: object) -> str:
    t = str(v)[:40]
    return t if t.isprintable() else ascii(t)[1:-1]


def _count(v: str | None) -> int | None:
    """A JUnit count attribute: absent/empty is 0, else at most 12 digits."""
    if v is None or v.strip() == "":
        return 0
    v = v.strip()
    if not v.isascii() or not v.isdigit() or len(v) > 12:
        return None
    return int(v)


def _seconds(v: str | None) -> float:
    """A JUnit time attribute; anything that is not a finite number is 0."""
    try:
        f = float(v or 0) if len(v or "") <= 64 else 0.0
    except ValueError:
        return 0.0
    return f if math.isfinite(f) and f >= 0 else 0.0


def _write_atomically(dest: Path, write: Callable[[Path], None], what: str) -> None:
    """write(tmp) then rename onto `dest`: a failure (a full disk, an
    unwritable place) leaves no half-written file, and is one line, exit 2."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, dest)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputDirError(f"{what}: cannot write {dest}: {e.strerror or e}") from None


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
            totals[k] += _count(s.get(k)) or 0
        time_s += _seconds(s.get("time"))
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{time_s:.3f}")
    tree = ET.ElementTree(root)
    _write_atomically(
        dest, lambda tmp: tree.write(tmp, encoding="utf-8", xml_declaration=True), "merge-junit"
    )


def _read_results(d: Path) -> dict[str, Any]:
    f = d / "results.json"
    try:
        data = load_json(f, what="results.json", error=OutputDirError)
    except OutputDirError as exc:
        why = str(exc).removeprefix(f"{f}: ").removeprefix("cannot read results.json: ")
        raise OutputDirError(f"merge-results: cannot read {f}: {why}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise OutputDirError(f"merge-results: {f} is not an {SCHEMA} file")
    return data


def merge_results(dirs: list[Path], dest: Path) -> dict[str, Any]:
    """One results directory over several (one per CPU from containers or CI
    jobs): `dest`/results.json holds every cell, model and backend, and the
    cells' file references point into the source directories (relative to
    `dest`), so `sdematrix report DEST` covers them all.  Returns the data."""
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"merge-results: cannot create {dest}: {e.strerror or e}") from None
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
        for cell in _list(data.get("cells")):
            if isinstance(cell, dict):
                files = cell.get("files")
                if isinstance(files, dict):
                    cell = {
                        **cell,
                        "files": {
                            k: str(rel / v) if isinstance(v, str) else v for k, v in files.items()
                        },
                    }
                cells.append(cell)
        models.update(_dict(data.get("models")))
        for name, b in _dict(data.get("backends")).items():
            # a backend counts as available when it was in any of the runs
            if name not in backends or (isinstance(b, dict) and b.get("available")):
                backends[name] = b
        not_run += [n for n in _list(data.get("not_run")) if isinstance(n, str)]
        for k, v in _dict(data.get("counts")).items():
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
        duration_s=round(sum(_seconds(str(r.get("duration_s") or 0)) for _, r in runs), 3),
        merged_from=[str(d) for d, _ in runs],
    )
    if starts:
        merged["started_at"] = starts[0]
    if ends:
        merged["finished_at"] = ends[-1]
    text = json.dumps(merged, indent=1) + "\n"
    _write_atomically(
        dest / "results.json", lambda tmp: tmp.write_text(text, encoding="utf-8"), "merge-results"
    )
    return merged


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []
