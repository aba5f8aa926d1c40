"""Write a run's results: JUnit XML and a results directory.

JUnit (built with the ``junit-xml`` package; per-testcase ``<properties>`` are
added to its tree since the package only supports suite properties):

* one ``<testsuite name="<cpu>">`` per CPU model, suite properties ``cpu``,
  ``title``, ``backend``, ``sdematrix_version`` (the writing tool's version);
* one ``<testcase name="<cpu>.<mode>.<direction>.<key_bits>.<length>"
  classname="sdematrix.<cpu>">`` per cell that ran, with properties ``cpu``,
  ``mode``, ``direction``, ``key_bits``, ``length``, ``backend``,
  ``backend_version``, ``path`` (chosen), ``expected_path``;
* ``<failure>`` / ``<error>`` / ``<skipped>`` with the first reason as message
  and all reasons (one per line, then the last output lines) as text;
* ``<system-out>``: the mix summary (total, by width, by encoding, top ISA sets).

Results directory ``<out>/`` (input for the HTML report builder):

``results.json``
    ``schema`` ("sdematrix-results/1"); ``tool`` {name, version}; ``matrix``
    (path of the YAML); ``seed``; ``jobs``; ``timeout_s``; ``started_at`` /
    ``finished_at`` (ISO 8601 UTC); ``duration_s``; ``interrupted``;
    ``host`` {hostname, kernel, python, cpu_model_name, vendor, family, model,
    flags (vector/crypto subset of /proc/cpuinfo)}; ``backend_requested``;
    ``backends`` {name: {available, reason, version}}; ``models`` {cpu: {title,
    backend (chosen for that model or null), skip_reason}}; ``counts`` {pass,
    fail, error, skip, not_run}; ``cells``: one entry per cell that ran = the
    outcome (``cell, cpu, mode, direction, key_bits, length, status, reasons,
    path, expected_path, backend, backend_version, duration_s, digest,
    expected_digest, output_tail``) + ``mix_summary`` (or null) + ``files``
    {cell, mix}; ``not_run``: names of cells not run (interrupted).
``cells/<cell>.json``
    {``outcome``: as above, ``probe``: the probe's JSON report or null,
    ``run``: {backend, status, exit_code, reason, duration_s, backend_version,
    violations [{reason, address, function, image, mnemonic, bytes_hex}],
    artifacts {name: path}, stdout_tail, stderr_tail, probe_argv},
    ``mix_summary``}.
``mix/<cell>.mix.json``
    the normalised :class:`~sdematrix.mix.Mix` (``Mix.to_json``), when the
    backend produced one.
``junit.xml``
    the JUnit file above.
``work/``
    backend scratch (e.g. SDE's raw ``.mix`` files).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import xml.dom.minidom
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite

from ._version import __version__
from .errors import OutputDirError
from .mix import Mix
from .runner import CellRecord, RunReport

__all__ = [
    "host_info",
    "junit_xml_string",
    "mix_summary",
    "mix_summary_text",
    "prepare_out_dir",
    "write_junit",
    "write_results",
]

SCHEMA = "sdematrix-results/1"
_FLAGS_OF_INTEREST = (
    "aes", "pclmulqdq", "avx", "avx2", "bmi2", "avx512f", "avx512vl", "avx512bw",
    "avx512dq", "vaes", "vpclmulqdq", "avx10", "cpuid_fault", "gfni",
)  # fmt: skip


def prepare_out_dir(out: Path) -> None:
    """Create <out>, cells/, mix/, work/ and prove they are writable (else OutputDirError)."""
    try:
        for sub in ("", "cells", "mix", "work"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("ok\n")
        probe.unlink()
    except OSError as e:
        raise OutputDirError(f"output directory {out} is not writable: {e.strerror or e}") from None


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return info
    first = text.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    info["cpu_model_name"] = fields.get("model name")
    info["vendor"] = fields.get("vendor_id")
    for key, name in (("cpu family", "family"), ("model", "model")):
        try:
            info[name] = int(fields.get(key, ""))
        except ValueError:
            info[name] = None
    flags = set(fields.get("flags", "").split())
    info["flags"] = [f for f in _FLAGS_OF_INTEREST if f in flags]
    return info


def mix_summary(mix: Mix | None) -> dict[str, Any] | None:
    if mix is None:
        return None
    o = mix.overall
    return {
        "total": o.total,
        "by_width": dict(o.width.most_common()),
        "by_encoding": dict(o.encoding.most_common()),
        "top_isa_sets": dict(o.isa_set.most_common(8)),
        "source": mix.source,
        # encodings the model ran as an older instruction (TZCNT as BSF)
        "legacy_forms": mix.legacy_total,
        "legacy_forms_by_kind": dict(mix.legacy_forms.most_common()),
    }


def mix_summary_text(mix: Mix | None) -> str:
    s = mix_summary(mix)
    if s is None:
        return ""

    def fmt(d: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"

    return (
        f"mix ({s['source']}): total {s['total']}\n"
        f"  by width:    {fmt(s['by_width'])}\n"
        f"  by encoding: {fmt(s['by_encoding'])}\n"
        f"  top ISA sets: {fmt(s['top_isa_sets'])}\n"
        f"  legacy forms: {s['legacy_forms']} ({fmt(s['legacy_forms_by_kind'])})\n"
    )


# --------------------------------------------------------------------------
# JUnit
# --------------------------------------------------------------------------


def _case_properties(rec: CellRecord) -> dict[str, str]:
    o = rec.outcome
    c = rec.cell
    return {
        "cpu": c.cpu,
        "mode": c.mode,
        "direction": c.direction,
        "key_bits": str(c.key_bits),
        "length": str(c.length),
        "backend": o.backend or "",
        "backend_version": o.backend_version or "",
        "path": o.path or "",
        "expected_path": o.expected_path or "",
        "legacy_forms": str(_legacy_total(rec)),
        **_coverage_properties(rec),
    }


def _legacy_total(rec: CellRecord) -> int:
    """Executions the model ran as an older instruction (TZCNT as BSF)."""
    mix = rec.result.mix if rec.result else None
    return mix.legacy_total if mix is not None else 0


# Mix metadata that says how much the verdict saw (ptrace: the tracer's
# counts; sde: how much of the image the function blocks cover; qemu: the
# plugin's counts), recorded per testcase as coverage.<key>.
COVERAGE_KEYS = (
    "cpuid_mode", "cpuid_answered", "xgetbv_emulated", "steps", "regions",
    "distinct_addresses", "threads_stepped", "images", "truncated", "function_coverage",
)  # fmt: skip


def _coverage_properties(rec: CellRecord) -> dict[str, str]:
    mix = rec.result.mix if rec.result else None
    if mix is None:
        return {}
    props = {"coverage.instructions": str(mix.overall.total)}
    for k in COVERAGE_KEYS:
        v = mix.meta.get(k)
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = " ".join(str(x) for x in v)
        props[f"coverage.{k}"] = str(v)
    return props


def _testcase(rec: CellRecord) -> TestCase:
    o = rec.outcome
    c = rec.cell
    tc = TestCase(
        name=c.name,
        classname=f"sdematrix.{c.cpu}",
        elapsed_sec=o.duration_s,
        stdout=mix_summary_text(rec.result.mix if rec.result else None) or None,
    )
    text = "\n".join(o.reasons)
    if o.output_tail:
        text += "\n\n" + o.output_tail
    if o.status == "fail":
        tc.add_failure_info(message=o.message, output=text, failure_type="sdematrix.fail")
    elif o.status == "error":
        tc.add_error_info(message=o.message, output=text, error_type="sdematrix.error")
    elif o.status == "skip":
        tc.add_skipped_info(message=o.message, output=text if len(o.reasons) > 1 else None)
    return tc


def junit_xml_string(report: RunReport) -> str:
    by_cpu: dict[str, list[CellRecord]] = {}
    for cpu in dict.fromkeys(c.cpu for c in report.cells):
        by_cpu[cpu] = []
    for rec in report.records:
        by_cpu.setdefault(rec.cell.cpu, []).append(rec)
    root = ET.Element("testsuites")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    elapsed = 0.0
    for cpu, recs in by_cpu.items():
        model = report.matrix.models.get(cpu)
        mb = report.model_backends.get(cpu, {})
        suite = TestSuite(
            name=cpu,
            test_cases=[_testcase(r) for r in recs],
            hostname=socket.gethostname(),
            timestamp=report.started_at,
            properties={
                "cpu": cpu,
                "title": model.title if model else cpu,
                "backend": mb.get("backend") or "",
                "sdematrix_version": __version__,
            },
        )
        el = suite.build_xml_doc()
        cases = el.findall("testcase")
        for case_el, rec in zip(cases, recs, strict=True):
            props = ET.Element("properties")
            for k, v in _case_properties(rec).items():
                ET.SubElement(props, "property", {"name": k, "value": v})
            case_el.insert(0, props)
        for k in totals:
            totals[k] += int(el.get(k, "0"))
        elapsed += float(el.get("time", "0"))
        root.append(el)
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{elapsed:.3f}")
    root.set("name", "sdematrix")
    raw = ET.tostring(root, encoding="unicode")
    return xml.dom.minidom.parseString(raw).toprettyxml(indent="  ")


def write_junit(path: Path, report: RunReport) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(junit_xml_string(report), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


# --------------------------------------------------------------------------
# Results directory
# --------------------------------------------------------------------------


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
        "violations": [
            {
                "reason": v.reason,
                "address": v.address,
                "function": v.function,
                "image": v.image,
                "mnemonic": v.mnemonic,
                "bytes_hex": v.bytes_hex,
            }
            for v in r.violations
        ],
        "artifacts": dict(r.artifacts),
        "stdout_tail": r.stdout_tail,
        "stderr_tail": r.stderr_tail,
        "probe_argv": list(rec.probe_argv),
    }


def _dump(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_results(out: Path, report: RunReport, *, junit_name: str = "junit.xml") -> None:
    """Write results.json, cells/*.json, mix/*.mix.json and junit.xml under `out`."""
    prepare_out_dir(out)
    cells_json: list[dict[str, Any]] = []
    try:
        for rec in report.records:
            name = rec.cell.name
            mix = rec.result.mix if rec.result else None
            summary = mix_summary(mix)
            files: dict[str, str | None] = {"cell": f"cells/{name}.json", "mix": None}
            if mix is not None:
                mix.save(out / "mix" / f"{name}.mix.json")
                files["mix"] = f"mix/{name}.mix.json"
            _dump(
                out / "cells" / f"{name}.json",
                {
                    "outcome": rec.outcome.to_json(),
                    "probe": rec.result.probe if rec.result else None,
                    "run": _run_json(rec),
                    "mix_summary": summary,
                },
            )
            cells_json.append({**rec.outcome.to_json(), "mix_summary": summary, "files": files})
        models = {
            cpu: {
                "title": report.matrix.models[cpu].title if cpu in report.matrix.models else cpu,
                **report.model_backends.get(cpu, {"backend": None, "skip_reason": None}),
            }
            for cpu in dict.fromkeys(c.cpu for c in report.cells)
        }
        results = {
            "schema": SCHEMA,
            "tool": {"name": "sdematrix", "version": __version__},
            "matrix": str(report.matrix.source),
            "seed": report.seed,
            "jobs": report.jobs,
            "timeout_s": report.timeout_s,
            "started_at": report.started_at,
            "finished_at": report.finished_at,
            "duration_s": round(report.duration_s, 3),
            "interrupted": report.interrupted,
            "host": host_info(),
            "backend_requested": report.backend_requested,
            "backends": report.backends,
            "models": models,
            "counts": {
                **{s: report.count(s) for s in ("pass", "fail", "error", "skip")},
                "not_run": len(report.not_run),
            },
            "cells": cells_json,
            "not_run": [c.name for c in report.not_run],
        }
        _dump(out / "results.json", results)
    except OSError as e:
        raise OutputDirError(f"cannot write results under {out}: {e.strerror or e}") from None
    write_junit(out / junit_name, report)
