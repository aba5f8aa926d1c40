"""Judge one cell: did the expected path run, correctly, on the model's ISA only?

:func:`judge` turns a backend's :class:`~sdematrix.backends.base.RunResult` into
an :class:`Outcome`:

* ``skip``  -- the backend could not run the model here (reason given);
* ``error`` -- the run itself broke: crash, timeout, no probe JSON, unreadable mix,
  an empty region (no instruction counted: no evidence is never a pass), or a
  cell the user named that no backend can run (the reason plus the last output lines);
* ``fail``  -- the run completed but broke a rule; *every* broken rule is listed,
  one line each:
    - probe status not ``ok``;
    - chosen path != expected path (from the probe's ``path``);
    - the CPU the probe's dispatcher detected (features, vendor, family/model,
      XCR0) != what the model's CPUID profile decodes to (``cpuid:`` lines,
      :mod:`sdematrix.evidence.cpuid_seen`);
    - each selector the expected path's signature requires for this cell (keys
      ``*``, ``<mode>`` and ``<mode>.<direction>``) that counts 0 in the signature's scope of the mix;
    - each selector the signature forbids that counts > 0, naming the top
      offending instructions and the functions that executed them;
    - each chip-check violation (address, function, image, bytes);
    - output digest != the host's reference digest;
* ``pass`` -- none of the above.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

from ..backends.base import RunResult
from ..evidence.cpuid_seen import cpuid_differences
from ..evidence.mix import Mix, MixCounts, Selector, format_form, top_offenders
from ..evidence.sde_mix import forbid_coverage_problem
from ..spec.matrix_file import required_selectors
from ..spec.models import Cell, CpuModel, Matrix, PathSignature
from .reasons import Kind, Reason

__all__ = ["Outcome", "OutcomeStatus", "Verdict", "judge", "one_line"]

OutcomeStatus = Literal["pass", "fail", "error", "skip"]


class Verdict:
    """What every verdict -- a `run` cell's :class:`Outcome`, an `exec`
    model's outcome and each of its checks -- has: a status and the reasons
    for it (:class:`~sdematrix.verdict.reasons.Reason` each, as the judge wrote
    them), and the one-line message JUnit and the summaries show."""

    status: str
    reasons: list[str]

    @property
    def message(self) -> str:
        """One line: the first reason (+ how many more)."""
        if not self.reasons:
            return self.status
        more = f" (+{len(self.reasons) - 1} more)" if len(self.reasons) > 1 else ""
        return self.reasons[0] + more


@dataclass
class Outcome(Verdict):
    cell: Cell
    status: OutcomeStatus
    reasons: list[str] = field(default_factory=list)  # Reason each, as judge() writes them
    path: str | None = None  # the path the probe reports it used
    expected_path: str | None = None
    backend: str | None = None
    backend_version: str | None = None
    duration_s: float = 0.0
    digest: str | None = None
    expected_digest: str | None = None
    output_tail: str = ""  # last output lines, for errors


def _last_output(result: RunResult, n: int = 12) -> str:
    parts = []
    if result.stderr_tail.strip():
        parts.append("stderr:\n" + "\n".join(result.stderr_tail.splitlines()[-n:]))
    if result.stdout_tail.strip():
        parts.append("stdout:\n" + "\n".join(result.stdout_tail.splitlines()[-n:]))
    return "\n".join(parts)


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _forbidden_detail(mix: Mix, sel: Selector, scope: str) -> str:
    """Which instructions (and functions) make a forbidden selector match."""
    rows = top_offenders(mix, sel, scope=scope, limit=3) if sel.is_form() else []
    if rows:
        return "; ".join(
            f"{format_form(form)} x{n} in {fn} ({img.rsplit('/', 1)[-1]})"
            for fn, img, form, n in rows
        )
    counts = mix.scoped(scope)
    if sel.is_form():
        forms = sel.matching_forms(counts).most_common(3)
        return "; ".join(f"{format_form(f)} x{n}" for f, n in forms) + " (function unknown)"
    for attr in ("isa_set", "isa_ext", "category"):
        pat = getattr(sel, attr)
        if pat is not None:
            table = getattr(counts, attr)
            hits = sorted(
                ((k, n) for k, n in table.items() if fnmatch.fnmatchcase(k, pat) and n),
                key=lambda kv: -kv[1],
            )[:3]
            return "; ".join(f"{attr} {k} x{n}" for k, n in hits)
    return ""


def _empty_region(result: RunResult, matrix: Matrix, expected: str) -> str | None:
    """Why the run's mix is no evidence (None when it has counts where the
    expected path's signature looks)."""
    mix = result.mix
    if mix is None:
        return None
    if mix.overall.total == 0:
        return (
            f"empty region: the {result.backend} backend counted no instruction between the "
            "SSC marks (marks not seen, or nothing traced)"
        )
    sig = matrix.signatures.get(expected)
    if sig is not None and sig.scope != "all" and mix.scoped(sig.scope).total == 0:
        return (
            f"empty region: {mix.overall.total} instructions counted, none in scope "
            f"{sig.scope} where path {expected}'s signature is judged"
        )
    return None


def _backend_broke(out: Outcome, result: RunResult) -> Outcome:
    """A run the backend skipped, or one that crashed or timed out."""
    if result.status == "skip":
        out.status = "skip"
        out.reasons = [Reason(one_line(result.reason or "skipped"), Kind.CANNOT_RUN)]
        return out
    out.status = "error"
    default = "timed out" if result.status == "timeout" else "run failed"
    text = one_line(result.reason or default)
    # a cell the user named that no backend can run (the runner says so)
    out.reasons = [Reason(text, Kind.CANNOT_RUN if result.cannot_run else Kind.BACKEND_ERROR)]
    out.output_tail = _last_output(result)
    return out


def _no_expected_path(out: Outcome, cell: Cell) -> Outcome:
    out.status = "error"
    out.reasons = [
        Reason(
            f"the matrix states no expected path for ({cell.cpu}, {cell.mode}, {cell.direction})",
            Kind.MATRIX,
        )
    ]
    return out


def _no_evidence(result: RunResult, matrix: Matrix, expected: str) -> Reason | None:
    """Why a completed run gives nothing to judge: no probe JSON (and no chip-check
    violation that stopped it), or an empty region."""
    if result.probe is None and not result.violations:
        code = result.exit_code
        return Reason(f"no probe JSON in the output (exit code {code})", Kind.BACKEND_ERROR)
    empty = _empty_region(result, matrix, expected)
    if empty is not None:
        # No evidence is not a pass: a region whose marks were never seen (or
        # a backend that counted nothing) would satisfy every forbid and the
        # generic path's empty signature.
        return Reason(empty, Kind.MIX)
    return None


def _probe_reasons(
    result: RunResult, model: CpuModel, path: str | None, expected: str
) -> list[str]:
    """Rule 1: the probe's status, the path it chose, the CPU its dispatcher saw."""
    if result.probe is None:
        return [
            Reason(
                "the probe did not finish (stopped by the chip check), so no path/digest",
                Kind.ANSWER,
            )
        ]
    probe = result.probe
    reasons: list[str] = []
    status = probe.get("status")
    if status != "ok":
        msg = probe.get("message")
        reasons.append(
            Reason(
                f"probe status {status!r}" + (f": {one_line(str(msg), 200)}" if msg else ""),
                Kind.ANSWER,
            )
        )
    if path != expected:
        reasons.append(Reason(f"path: expected {expected}, got {path}", Kind.DISPATCH))
    reasons.extend(Reason(d, Kind.DISPATCH) for d in cpuid_differences(probe, model))
    return reasons


def _required_reasons(
    cell: Cell, sig: PathSignature, counts: MixCounts, expected: str, where: str
) -> list[str]:
    """Each selector the signature requires for this cell that counts 0."""
    return [
        Reason(
            f"required by path {expected} but not executed{where}: {sel.describe()}",
            Kind.MIX,
        )
        for sel in required_selectors(sig, cell.mode, cell.direction)
        if sel.count(counts) == 0
    ]


def _forbidden_reasons(
    mix: Mix, sig: PathSignature, counts: MixCounts, expected: str, where: str
) -> list[str]:
    """Each selector the signature forbids that counts > 0, with what matched it."""
    reasons: list[str] = []
    for sel in sig.forbid:
        n = sel.count(counts)
        if n > 0:
            detail = _forbidden_detail(mix, sel, sig.scope)
            reasons.append(
                Reason(
                    f"forbidden for path {expected} but executed {n}x{where}: {sel.describe()}"
                    + (f" -- {detail}" if detail else ""),
                    Kind.MIX,
                )
            )
    return reasons


def _seen_instead(
    mix: Mix, sig: PathSignature, expected: str, where: str, wrong_path: bool
) -> list[str]:
    """When the path is wrong or its signature unmet, say what ran instead:
    the top vector/crypto instructions in the signature's scope, by function,
    filed under the check that failed (path: dispatch; signature: mix) and
    prefixed with that cause."""
    seen = top_offenders(mix, Selector(width="[xyz]mm"), sig.scope, limit=5)
    if not seen:
        return []
    cause = "path" if wrong_path else f"required by path {expected}"
    return [
        Reason(
            f"{cause}: seen instead (top vector/crypto instructions{where}): "
            + "; ".join(f"{format_form(form)} x{n} in {fn}" for fn, _img, form, n in seen),
            Kind.DISPATCH if wrong_path else Kind.MIX,
        )
    ]


def _signature_reasons(
    cell: Cell, matrix: Matrix, result: RunResult, expected: str, path: str | None
) -> tuple[list[str], str | None]:
    """Rule 2: the expected path's signature against the mix -- required, then
    forbidden, then what ran instead.  Also returns why a forbid count cannot be
    decided (None when it can)."""
    sig = matrix.signatures.get(expected)
    mix = result.mix
    if sig is None:
        return [Reason(f"the matrix has no signature for path {expected}", Kind.MIX)], None
    if mix is None:
        if result.probe is None:
            return [], None
        return [Reason("no instruction mix to check the path signature against", Kind.MIX)], None
    counts = mix.scoped(sig.scope)
    where = "" if sig.scope == "all" else f" in scope {sig.scope}"
    # SDE lists only its top functions: a forbid count of 0 in an image
    # scope is no evidence when forbidden instructions ran unlisted.
    undecidable = forbid_coverage_problem(mix, sig.scope, sig.forbid)
    missing = _required_reasons(cell, sig, counts, expected, where)
    reasons = [*missing, *_forbidden_reasons(mix, sig, counts, expected, where)]
    wrong_path = path != expected
    if wrong_path or missing:
        reasons.extend(_seen_instead(mix, sig, expected, where, wrong_path))
    return reasons, undecidable


def _chip_reasons(result: RunResult, model: CpuModel) -> list[str]:
    """Rule 3: each chip-check violation."""
    return [
        Reason(f"chip check ({model.name}): {one_line(v.describe(), 300)}", Kind.CHIP)
        for v in result.violations
    ]


def _digest_reasons(
    result: RunResult, digest: str | None, expected_digest: str | None
) -> list[str]:
    """Rule 4: the output digest against the host's reference (when the probe
    finished with status ok)."""
    digest_checked = result.probe is not None and result.probe.get("status") == "ok"
    if digest_checked and expected_digest is not None and digest != expected_digest:
        return [Reason(f"digest: expected {expected_digest}, got {digest}", Kind.ANSWER)]
    return []


def _apply_rules(
    out: Outcome,
    cell: Cell,
    model: CpuModel,
    matrix: Matrix,
    result: RunResult,
    expected: str,
    expected_digest: str | None,
) -> Outcome:
    """A completed run with evidence: every broken rule, in the order above."""
    reasons = _probe_reasons(result, model, out.path, expected)
    sig_reasons, undecidable = _signature_reasons(cell, matrix, result, expected, out.path)
    reasons.extend(sig_reasons)
    reasons.extend(_chip_reasons(result, model))
    reasons.extend(_digest_reasons(result, out.digest, expected_digest))

    if undecidable is not None:
        out.status = "error"
        out.reasons = [Reason(undecidable, Kind.MIX), *reasons]
        return out
    if reasons:
        out.status = "fail"
        out.reasons = reasons
        if result.violations:
            out.output_tail = _last_output(result)
    return out


def judge(
    cell: Cell,
    model: CpuModel,
    matrix: Matrix,
    result: RunResult,
    expected_digest: str | None,
) -> Outcome:
    """The verdict for one cell (see the module docstring)."""
    expected = matrix.expected.get((cell.cpu, cell.mode, cell.direction))
    out = Outcome(
        cell=cell,
        status="pass",
        expected_path=expected,
        backend=result.backend,
        backend_version=result.backend_version,
        duration_s=result.duration_s,
        expected_digest=expected_digest,
    )
    probe = result.probe or {}
    out.path = probe.get("path") if isinstance(probe.get("path"), str) else None
    out.digest = probe.get("digest") if isinstance(probe.get("digest"), str) else None

    if result.status in ("skip", "error", "timeout"):
        return _backend_broke(out, result)
    if expected is None:
        return _no_expected_path(out, cell)
    no_evidence = _no_evidence(result, matrix, expected)
    if no_evidence is not None:
        out.status = "error"
        out.reasons = [no_evidence]
        out.output_tail = _last_output(result)
        return out
    return _apply_rules(out, cell, model, matrix, result, expected, expected_digest)
