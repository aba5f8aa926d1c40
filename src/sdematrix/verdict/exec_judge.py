"""Verdicts, JUnit and results files of ``sdematrix exec`` (one per model).

A model's verdict follows ``sdematrix run``'s conventions
(:mod:`sdematrix.verdict.cell`): ``error`` when the run itself broke (tracer
failure, timeout, a stepped region that hit the step limit, a named function
region never entered: no evidence is never a pass), ``fail`` listing every
broken rule (the program's exit status unless allowed, each chip-check
violation, each expectation), ``skip`` for a model this host cannot present
under ``--allow-skip``, else ``pass``.

Each verdict is also split into checks (:class:`Check`): ``run and chip
check`` (the run itself, its exit status, the whole-process chip check) and
one per expectation that applies to the model.  The JUnit file has one
testsuite per model holding one testcase per check, written by the writer
``sdematrix run`` uses (:class:`sdematrix.results.junit.JUnitDoc`), once: at
``--junit`` when given, ``OUT/junit.xml`` then being a link to it, as for
``run``.  Every file is written by rename.  Reasons carry their kind
(:class:`sdematrix.verdict.reasons.Reason`; results.json ``reason_kinds``).
results.json carries the checks and, per model, which functions executed
which ISA sets beyond the x86-64 baseline (what the HTML and markdown
reports of :mod:`sdematrix.report.exec_html` show).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..backends.base import ExecResult
from ..errors import OutputDirError
from ..evidence.mix import Mix
from ..results.junit import (
    JUnitCase,
    JUnitDoc,
    atomic_write,
    link_file,
    mix_summary,
    mix_summary_text,
)
from ..spec.exec_expect import Expectation, judge_expectations
from ..spec.models import CpuModel
from .cell import Verdict, one_line
from .reasons import Kind, Reason, kinds_of

EXEC_TOOL = "sdematrix exec"

__all__ = [
    "Check",
    "ExecOutcome",
    "judge_exec",
    "write_exec_junit",
    "write_exec_reports",
    "write_exec_results",
]

RUN_CHECK = "run and chip check"


@dataclass
class Check(Verdict):
    """One (model, check) verdict: the run and chip check, or one expectation."""

    name: str
    status: str  # pass | fail | error | skip
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reasons": self.reasons,
            "reason_kinds": kinds_of(self.reasons),
        }


@dataclass
class ExecOutcome(Verdict):
    model: str
    status: str  # pass | fail | error | skip
    reasons: list[str] = field(default_factory=list)
    result: ExecResult | None = None
    checks: list[Check] = field(default_factory=list)

    def all_checks(self) -> list[Check]:
        """The checks; a model that never ran has one, carrying its status."""
        return self.checks or [Check(RUN_CHECK, self.status, list(self.reasons))]


def judge_exec(
    res: ExecResult, model: CpuModel, exps: list[Expectation], allow_exit: set[int]
) -> ExecOutcome:
    out = ExecOutcome(model=model.name, status="pass", result=res)
    broken = None
    if res.error:
        broken = Reason(one_line(res.error), Kind.BACKEND_ERROR)
    elif res.meta.get("truncated"):
        broken = Reason("a stepped region exceeded the step limit", Kind.BACKEND_ERROR)
    elif res.region != "whole" and res.meta.get("regions", 0) == 0:
        broken = Reason(
            f"empty region: {res.region} never entered (no evidence is not a pass)", Kind.MIX
        )
    applicable = [e for e in exps if e.applies_to(model)]
    if broken is not None:
        out.status, out.reasons = "error", [broken]
        out.checks = [Check(RUN_CHECK, "error", [broken])]
        out.checks += [
            Check(e.name, "error", [Reason("not judged: the run broke", Kind.EXPECTATION)])
            for e in applicable
        ]
        return out
    run_reasons: list[str] = []  # Reason each
    code = res.exit_code
    if code is not None and code != 0 and code not in allow_exit:
        run_reasons.append(
            Reason(f"program exit status {code}" + (" (signal)" if code > 128 else ""), Kind.EXIT)
        )
    for v in res.violations:
        run_reasons.append(
            Reason(f"chip check ({model.name}): {one_line(v.describe())}", Kind.CHIP)
        )
    out.checks = [Check(RUN_CHECK, "fail" if run_reasons else "pass", run_reasons)]
    reasons = list(run_reasons)
    for e in applicable:
        broke = judge_expectations(res.mix, model, [e])
        out.checks.append(Check(e.name, "fail" if broke else "pass", broke))
        reasons += broke
    if exps:  # how many of the file's rules judged this model (verdict line, results, JUnit)
        res.meta["expectations_applied"] = len(applicable)
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
    shown = 20
    distinct = r.meta.get("distinct_instructions", 0)
    chip = "chip check clean" if not r.violations else f"chip check: {len(r.violations)} violations"
    line = (
        f"{o.model:<8} {o.status.upper():<5} exit {r.exit_code}  {chip} "
        f"({distinct} distinct instructions, {r.meta.get('traps', 0)} traps, "
        f"{r.duration_s:.1f} s)  region {r.region}"
    )
    if "expectations_applied" in r.meta:
        line += f"  {r.meta['expectations_applied']} of {r.meta['expectations_total']} expectations applied"
    line += _host_lacks_line(r)
    if r.mix is not None and r.mix.legacy_forms:
        kinds = ", ".join(f"{k} {n}" for k, n in r.mix.legacy_forms.most_common())
        line += f"\n    legacy_forms {r.mix.legacy_total}: {kinds}"
    if o.status != "pass":
        line += "\n" + "\n".join(f"    - {x}" for x in o.reasons[:shown])
        if len(o.reasons) > shown:
            line += f"\n    ... {len(o.reasons) - shown} more (all in results.json / JUnit)"
    return line


def _cases(o: ExecOutcome, argv: list[str]) -> list[JUnitCase]:
    """The model's cases: one per check; the first carries the run (its time,
    the program and mix summary, the coverage properties)."""
    r = o.result
    props: dict[str, str] = {}
    if r is not None:
        for k, v in r.meta.items():
            props[f"coverage.{k}"] = " ".join(str(x) for x in v) if isinstance(v, list) else str(v)
        props["exit_code"] = str(r.exit_code)
        props["legacy_forms"] = str(r.mix.legacy_total if r.mix else 0)
    out = []
    for i, check in enumerate(o.all_checks()):
        first = i == 0
        out.append(
            JUnitCase(
                suite=o.model,
                name=f"{o.model}: {check.name}"[:200],
                classname=f"sdematrix.exec.{o.model}",
                status=check.status,
                message=check.message,
                text="\n".join(check.reasons),
                duration_s=r.duration_s if r and first else 0.0,
                properties=props if first else {},
                stdout=(f"program: {' '.join(argv)}\n" + mix_summary_text(r.mix if r else None))
                if first
                else "",
            )
        )
    return out


def junit_string(outcomes: list[ExecOutcome], argv: list[str]) -> str:
    """The JUnit document (the writer `sdematrix run` uses: :class:`JUnitDoc`)."""
    models = [o.model for o in outcomes]
    doc = JUnitDoc(
        models,
        {m: {"cpu": m} for m in models},
        _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    for o in outcomes:
        for i, case in enumerate(_cases(o, argv)):
            doc.add_case(case, i)
    return doc.text()


def write_exec_junit(path: Path, outcomes: list[ExecOutcome], argv: list[str]) -> None:
    try:
        atomic_write(path, junit_string(outcomes, argv))
    except OSError as e:
        raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def _violation_json(o: ExecOutcome) -> list[dict[str, Any]]:
    if o.result is None:
        return []
    return [
        {
            "reason": v.reason,
            "address": v.address,
            "function": v.function,
            "image": v.image,
            "mnemonic": v.mnemonic,
            "bytes_hex": v.bytes_hex,
        }
        for v in o.result.violations
    ]


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


def write_exec_results(
    out: Path,
    outcomes: list[ExecOutcome],
    argv: list[str],
    exps: list[Any] | None = None,
    junit_path: Path | None = None,
) -> None:
    """OUT/<model>/{stdout,stderr,mix.json}, OUT/results.json, OUT/junit.xml
    (written once, at `junit_path` when given -- ``--junit`` -- and linked
    as OUT/junit.xml), each file by rename."""
    try:
        rows = []
        for o in outcomes:
            d = out / o.model
            d.mkdir(parents=True, exist_ok=True)
            r = o.result
            if r is not None:
                atomic_write(d / "stdout", r.stdout)
                atomic_write(d / "stderr", r.stderr)
                if r.mix is not None:
                    # one line: json's C encoder (indent= takes the pure-Python
                    # one, seconds for a whole-process mix)
                    atomic_write(d / "mix.json", json.dumps(r.mix.to_json()) + "\n")
            rows.append(
                {
                    "model": o.model,
                    "status": o.status,
                    "reasons": o.reasons,
                    "reason_kinds": kinds_of(o.reasons),
                    "exit_code": r.exit_code if r else None,
                    "region": r.region if r else None,
                    "meta": r.meta if r else {},
                    "violations": _violation_json(o),
                    "mix_summary": mix_summary(r.mix if r else None),
                    "checks": [c.to_json() for c in o.all_checks()],
                    "isa_by_function": isa_by_function(r.mix if r else None),
                }
            )
        # JUnit first: results.json is what says the run is complete
        junit = junit_path or out / "junit.xml"
        write_exec_junit(junit, outcomes, argv)
        link_file(junit, out / "junit.xml")
        atomic_write(
            out / "results.json",
            json.dumps(results_json(outcomes, argv, exps, rows), indent=1) + "\n",
        )
    except OSError as e:
        raise OutputDirError(f"cannot write results under {out}: {e.strerror or e}") from None


def results_json(
    outcomes: list[ExecOutcome],
    argv: list[str],
    exps: list[Any] | None,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The exec results document (rows: the per-model rows, else built here
    without the file-only parts)."""
    if rows is None:
        rows = [
            {
                "model": o.model,
                "status": o.status,
                "reasons": o.reasons,
                "reason_kinds": kinds_of(o.reasons),
                "exit_code": o.result.exit_code if o.result else None,
                "region": o.result.region if o.result else None,
                "checks": [c.to_json() for c in o.all_checks()],
                "isa_by_function": isa_by_function(o.result.mix if o.result else None),
            }
            for o in outcomes
        ]
    return {
        "tool": {"name": EXEC_TOOL, "version": __version__},
        "argv": argv,
        "expectations": [e.name for e in exps or []],
        "models": rows,
    }


def write_exec_reports(
    outcomes: list[ExecOutcome],
    argv: list[str],
    report_dir: Path | None,
    exps: list[Any] | None = None,
) -> list[Path]:
    """report.html + summary.md into `report_dir` (when given) and the
    markdown onto $GITHUB_STEP_SUMMARY (when set); returns the files written."""
    from ..report.exec_html import render_html, render_markdown, step_summary

    data = results_json(outcomes, argv, exps)
    files: list[Path] = []
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        html, md = report_dir / "report.html", report_dir / "summary.md"
        html.write_text(render_html(data), encoding="utf-8")
        md.write_text(render_markdown(data), encoding="utf-8")
        files += [html, md]
    step_summary(data)
    return files
