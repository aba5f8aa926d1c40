"""Verdicts, JUnit and results files of ``sdematrix exec`` (one per model).

A model's verdict follows ``sdematrix run``'s conventions
(:mod:`sdematrix.verdict`): ``error`` when the run itself broke (tracer
failure, timeout, a stepped region that hit the step limit, a named function
region never entered: no evidence is never a pass), ``fail`` listing every
broken rule (the program's exit status unless allowed, each chip-check
violation, each expectation), else ``pass``.  The JUnit file has one
testsuite per model holding one testcase, its properties and stdout shaped as
``sdematrix run`` writes them (:mod:`sdematrix.junit`).
"""

from __future__ import annotations

import json
import os
import socket
import xml.dom.minidom
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite

from . import __version__
from .errors import OutputDirError
from .exec_expect import Expectation, applied, judge_expectations
from .exec_run import ExecResult
from .junit import mix_summary, mix_summary_text
from .models import CpuModel
from .verdict import Outcome, _one_line

__all__ = ["ExecOutcome", "judge_exec", "write_exec_junit", "write_exec_results"]


@dataclass
class ExecOutcome:
    model: str
    status: str  # pass | fail | error
    reasons: list[str] = field(default_factory=list)
    result: ExecResult | None = None

    message = Outcome.message  # the first reason (+ how many more), as `sdematrix run`


def judge_exec(
    res: ExecResult, model: CpuModel, exps: list[Expectation], allow_exit: set[int]
) -> ExecOutcome:
    out = ExecOutcome(model=model.name, status="pass", result=res)
    if res.error:
        out.status, out.reasons = "error", [_one_line(res.error)]
        return out
    if res.meta.get("truncated"):
        out.status, out.reasons = "error", ["a stepped region exceeded the step limit"]
        return out
    if res.region != "whole" and res.meta.get("regions", 0) == 0:
        out.status = "error"
        out.reasons = [f"empty region: {res.region} never entered (no evidence is not a pass)"]
        return out
    reasons: list[str] = []
    code = res.exit_code
    if code is not None and code != 0 and code not in allow_exit:
        reasons.append(f"program exit status {code}" + (" (signal)" if code > 128 else ""))
    for v in res.violations:
        reasons.append(f"chip check ({model.name}): {_one_line(v.describe())}")
    reasons += judge_expectations(res.mix, model, exps)
    if exps:  # how many of the file's rules judged this model (verdict line, results, JUnit)
        res.meta["expectations_applied"] = len(applied(model, exps))
        res.meta["expectations_total"] = len(exps)
    if reasons:
        out.status, out.reasons = "fail", reasons
    return out


def _host_lacks_line(r: ExecResult | None) -> str:
    lacks = r.meta.get("host_lacks") if r is not None else None
    if not lacks:
        return ""
    return f"\n    host cannot execute (model advertises it): {', '.join(lacks)}"


def summary_line(o: ExecOutcome) -> str:
    r = o.result
    if r is None or r.error:
        return f"{o.model:<8} {o.status.upper():<5} {o.message}" + _host_lacks_line(r)
    distinct = r.meta.get("distinct_instructions", 0)
    chip = "chip check clean" if not r.violations else f"chip check: {len(r.violations)} violations"
    line = (f"{o.model:<8} {o.status.upper():<5} exit {r.exit_code}  {chip} "
            f"({distinct} distinct instructions, {r.meta.get('traps', 0)} traps, "
            f"{r.duration_s:.1f} s)  region {r.region}")  # fmt: skip
    if "expectations_applied" in r.meta:
        line += f"  {r.meta['expectations_applied']} of {r.meta['expectations_total']} expectations applied"
    line += _host_lacks_line(r)
    if r.mix is not None and r.mix.legacy_forms:
        kinds = ", ".join(f"{k} {n}" for k, n in r.mix.legacy_forms.most_common())
        line += f"\n    legacy_forms {r.mix.legacy_total}: {kinds}"
    if o.status != "pass":
        line += "\n" + "\n".join(f"    - {x}" for x in o.reasons[:20])
    return line


def _testcase(o: ExecOutcome, argv: list[str]) -> TestCase:
    r = o.result
    tc = TestCase(
        name=f"{o.model}: {' '.join(argv)}"[:200],
        classname=f"sdematrix.exec.{o.model}",
        elapsed_sec=r.duration_s if r else 0.0,
        stdout=mix_summary_text(r.mix if r else None) or None,
    )
    text = "\n".join(o.reasons)
    if o.status == "fail":
        tc.add_failure_info(message=o.message, output=text, failure_type="sdematrix.fail")
    elif o.status == "error":
        tc.add_error_info(message=o.message, output=text, error_type="sdematrix.error")
    return tc


def junit_string(outcomes: list[ExecOutcome], argv: list[str]) -> str:
    root = ET.Element("testsuites", {"name": "sdematrix"})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for o in outcomes:
        suite = TestSuite(name=o.model, test_cases=[_testcase(o, argv)],
                          hostname=socket.gethostname(),
                          properties={"cpu": o.model, "sdematrix_version": __version__})  # fmt: skip
        el = suite.build_xml_doc()
        case_el = el.find("testcase")
        if case_el is not None and o.result is not None:
            props = ET.Element("properties")
            for k, v in o.result.meta.items():
                if isinstance(v, list):
                    v = " ".join(str(x) for x in v)
                ET.SubElement(props, "property", {"name": f"coverage.{k}", "value": str(v)})
            ET.SubElement(props, "property", {"name": "exit_code", "value": str(o.result.exit_code)})
            mix = o.result.mix
            ET.SubElement(props, "property", {"name": "legacy_forms",
                          "value": str(mix.legacy_total if mix else 0)})  # fmt: skip
            case_el.insert(0, props)
        for k in totals:
            totals[k] += int(el.get(k, "0"))
        root.append(el)
    for k, v in totals.items():
        root.set(k, str(v))
    return xml.dom.minidom.parseString(ET.tostring(root, encoding="unicode")).toprettyxml(indent="  ")


def write_exec_junit(path: Path, outcomes: list[ExecOutcome], argv: list[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(junit_string(outcomes, argv), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def _violation_json(o: ExecOutcome) -> list[dict[str, Any]]:
    if o.result is None:
        return []
    return [
        {"reason": v.reason, "address": v.address, "function": v.function, "image": v.image,
         "mnemonic": v.mnemonic, "bytes_hex": v.bytes_hex}
        for v in o.result.violations
    ]


def write_exec_results(out: Path, outcomes: list[ExecOutcome], argv: list[str]) -> None:
    """OUT/<model>/{stdout,stderr,mix.json}, OUT/results.json, OUT/junit.xml."""
    try:
        rows = []
        for o in outcomes:
            d = out / o.model
            d.mkdir(parents=True, exist_ok=True)
            r = o.result
            if r is not None:
                (d / "stdout").write_bytes(r.stdout)
                (d / "stderr").write_bytes(r.stderr)
                if r.mix is not None:
                    # one line: json's C encoder (indent= takes the pure-Python
                    # one, seconds for a whole-process mix)
                    (d / "mix.json").write_text(json.dumps(r.mix.to_json()) + "\n")
            rows.append({
                "model": o.model, "status": o.status, "reasons": o.reasons,
                "exit_code": r.exit_code if r else None,
                "region": r.region if r else None,
                "meta": r.meta if r else {},
                "violations": _violation_json(o),
                "mix_summary": mix_summary(r.mix if r else None),
            })  # fmt: skip
        (out / "results.json").write_text(
            json.dumps({"tool": {"name": "sdematrix exec", "version": __version__},
                        "argv": argv, "models": rows}, indent=1) + "\n"
        )
    except OSError as e:
        raise OutputDirError(f"cannot write results under {out}: {e.strerror or e}") from None
    write_exec_junit(out / "junit.xml", outcomes, argv)
