"""Verdicts of ``sdematrix exec`` (one per model).

A model's verdict follows ``sdematrix run``'s conventions
(:mod:`sdematrix.verdict.cell`): ``error`` when the run itself broke (tracer
failure, timeout, a stepped region that hit the step limit, a named function
region never entered: no evidence is never a pass), ``fail`` listing every
broken rule (the program's exit status unless allowed, each chip-check
violation, each expectation), ``skip`` for a model this host cannot present
under ``--allow-skip``, else ``pass``.

Each verdict is also split into checks (:class:`Check`): ``run and chip
check`` (the run itself, its exit status, the whole-process chip check) and
one per expectation that applies to the model.  Reasons carry their kind
(:class:`sdematrix.verdict.reasons.Reason`).  The files are written by
:mod:`sdematrix.results` (results.json: :mod:`sdematrix.results.outcome_json`,
through :mod:`sdematrix.results.writer`; JUnit: one testsuite per model, one
testcase per check, by :class:`sdematrix.results.junit.JUnitDoc`, the writer
``sdematrix run`` uses) and the reports by :mod:`sdematrix.report.exec_html`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backends.base import ExecResult
from ..spec.exec_expect import Expectation, judge_expectations
from ..spec.models import CpuModel
from .cell import Verdict, one_line
from .reasons import Kind, Reason, kinds_of

__all__ = ["RUN_CHECK", "Check", "ExecOutcome", "judge_exec", "summary_line"]

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
        entries = [x for x in res.meta.get("sites_probed", []) if x.startswith("func ")]
        why = (
            f"; the host kernel probes its entry (a uprobe's int3 at {entries[0][5:]}), where"
            " the tracer's own breakpoint would go: remove the uprobe or pick a caller"
            if entries
            else ""
        )
        broken = Reason(
            f"empty region: {res.region} never entered (no evidence is not a pass){why}", Kind.MIX
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


def _uprobed_line(meta: dict[str, Any], model: str) -> str:
    """What the chip check could not see: instructions under kernel uprobes
    (exec_run._probed_check), and whether the model has them all."""
    outside = meta.get("uprobed_outside_model", [])
    line = (
        f"\n    kernel uprobes: {meta['uprobed']} probed instruction(s) the kernel runs out"
        " of line, unseen by the chip check; "
    )
    if not outside:
        return line + f"all of them are in {model}"
    return (
        line
        + f"NOT PROVEN, {len(outside)} not in {model}: "
        + "; ".join(one_line(x) for x in outside[:5])
    )


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
    if r.meta.get("jit_unchecked"):
        line += (
            f"  JIT: {r.meta['jit_unchecked']} region(s) ran on unchecked after"
            " converging (--jit-converge)"
        )
    if "expectations_applied" in r.meta:
        line += f"  {r.meta['expectations_applied']} of {r.meta['expectations_total']} expectations applied"
    line += _host_lacks_line(r)
    if r.mix is not None and r.mix.legacy_forms:
        kinds = ", ".join(f"{k} {n}" for k, n in r.mix.legacy_forms.most_common())
        line += f"\n    legacy_forms {r.mix.legacy_total}: {kinds}"
    if r.meta.get("tzcnt_zero_as_bsf"):
        at = r.meta.get("tzcnt_zero_as_bsf_at", [])
        more = f" and {len(at) - 5} more" if len(at) > 5 else ""
        line += (
            f"\n    TZCNT of zero run as BSF, as {o.model} does (destination kept):"
            f" {r.meta['tzcnt_zero_as_bsf']} execution(s) at {', '.join(at[:5])}{more}"
        )
    if r.meta.get("uprobed"):
        line += _uprobed_line(r.meta, o.model)
    if r.meta.get("sites_probed"):
        line += "\n    kernel uprobes on sites the tracer cannot break on: " + ", ".join(
            r.meta["sites_probed"][:5]
        )
    if o.status != "pass":
        line += "\n" + "\n".join(f"    - {x}" for x in o.reasons[:shown])
        if len(o.reasons) > shown:
            line += f"\n    ... {len(o.reasons) - shown} more (all in results.json / JUnit)"
    return line
