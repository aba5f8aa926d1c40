"""The heat-map as GitHub-flavoured markdown, for a CI job's step summary.

Same grid as the HTML report -- CPU models as rows, (mode, direction) as
columns, workloads of one square folded into the worst status -- with
symbols instead of colours: ✅ pass, ❌ fail, ⚠️ error, ⏭ skip, ⏸ not run; the
chosen path in each square and "expected X" where it differs.  Under it the
counts, every failure / error reason (the first on the cell's line, the others
nested under it, up to :data:`MAX_REASONS`, then "N more") and one
line per skipped model.

GitHub caps a step summary at 1 MiB; this stays far below: reasons are
clipped to :data:`MAX_REASON` characters, at most :data:`MAX_PROBLEMS` cells
are listed, and the whole text is held under :data:`BUDGET` bytes (list items
beyond it are replaced by a count).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import OutputDirError
from ..results.load import CellGroup, CellResult, RunResults, load_results
from ..verdict.reasons import cannot_run_why

__all__ = ["BUDGET", "SYMBOLS", "emit_step_summary", "render_markdown", "write_markdown"]

SYMBOLS: dict[str, str] = {
    "pass": "✅",
    "fail": "❌",
    "error": "⚠️",
    "skip": "⏭",
    "not_run": "⏸",
}
STATUS_WORD = {
    "pass": "pass",
    "fail": "fail",
    "error": "error",
    "skip": "skip",
    "not_run": "not run",
}
MAX_REASON = 240  # characters of one reason (a reason is one line): only stops a flood
MAX_PROBLEMS = 40
MAX_REASONS = 20  # reasons listed per failed cell, then "N more"
BUDGET = 60 * 1024  # bytes; GitHub's limit is 1 MiB per step
TABLE_BUDGET = BUDGET // 2  # the heat-map table's share, then "N more models"


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def _md(text: str) -> str:
    """Make free text safe inside a table cell / list item: one line (a
    newline would end the row), ``|`` escaped, no HTML, control characters
    shown as ``\\xNN``."""
    text = " ".join(str(text).split())
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("`", "'")
    )


def _clip(text: str, n: int = MAX_REASON) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _square(g: CellGroup) -> str:
    status = g.status
    sym = SYMBOLS.get(status, "?")
    path = g.path
    exp = g.expected_path
    if path:
        text = f"{sym} {' / '.join(g.paths)}"
        if exp and exp != path:
            text += f" (expected {exp})"
    elif status in ("skip", "not_run"):
        text = f"{sym} {'skip' if status == 'skip' else 'not run'}"
    else:
        text = f"{sym} {status}" + (f" (expected {exp})" if exp else "")
    n = len(g.cells)
    k = g.count(status)
    if n > 1 and k != n:
        text += f" ({k} of {n} {STATUS_WORD.get(status, status)})"
    return _md(text)


def _table(res: RunResults) -> list[str]:
    groups = res.groups()
    cols = res.columns
    short = {"encrypt": "enc", "decrypt": "dec"}
    head = "| CPU | " + " | ".join(f"{m} {short.get(d, d)}" for m, d in cols) + " |"
    sep = "|---|" + "---|" * len(cols)
    lines = [head, sep]
    present = {k[0] for k in groups}
    rows = [cpu for cpu in res.cpus if cpu in present]
    used = len(head) + len(sep)
    for i, cpu in enumerate(rows):
        row = [f"**{_md(cpu)}**"]
        for mode, d in cols:
            g = groups.get((cpu, mode, d))
            row.append(_square(g) if g else "")
        line = "| " + " | ".join(row) + " |"
        used += len(line.encode()) + 1
        if used > TABLE_BUDGET:
            lines += ["", f"… and {len(rows) - i} more models (see the HTML report)"]
            break
        lines.append(line)
    return lines


def _problem_lines(res: RunResults) -> list[str]:
    bad = [c for c in res.cells if c.status in ("fail", "error")]
    bad.sort(key=lambda c: (0 if c.status == "fail" else 1, c.name))
    out: list[str] = []
    for c in bad:
        first = c.reasons[0] if c.reasons else c.status
        more = f" (+{len(c.reasons) - 1} more)" if len(c.reasons) > 1 else ""
        item = [f"- {SYMBOLS[c.status]} {_code(c.name)}: {_md(_clip(first))}{more}"]
        # the further reasons, nested under the cell (one item: kept or cut whole)
        item += [f"  - {_md(_clip(r))}" for r in c.reasons[1:MAX_REASONS]]
        if len(c.reasons) > MAX_REASONS:
            item.append(f"  - … and {len(c.reasons) - MAX_REASONS} more reasons")
        out.append("\n".join(item))
    return out


def _code(text: str) -> str:
    """`text` as an inline code span that no backtick in it can end early."""
    t = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", " ".join(str(text).split()))
    t = t.replace("|", "\\|")
    fence = "``" if "`" in t else "`"
    return f"{fence} {t} {fence}" if fence == "``" else f"`{t}`"


def _unrunnable(res: RunResults) -> dict[tuple[str, str], list[CellResult]]:
    """The cells that could not run here, by (status, reason): the skips of a
    default run, the "cannot run here" errors of a run that named its CPUs or
    backend (reasons of kind cannot-run-here, :func:`~sdematrix.verdict.reasons.cannot_run_why`, as the CLI summary
    groups them), and cells an interrupt left unrun."""
    groups: dict[tuple[str, str], list[CellResult]] = {}
    for c in res.cells:
        if c.status == "not_run":
            why: str | None = (c.reasons[0] if c.reasons else "") or c.status
        else:
            why = cannot_run_why(c.status, c.reasons)
        if why is not None:
            groups.setdefault((c.status, why), []).append(c)
    return groups


def _skip_lines(groups: dict[tuple[str, str], list[CellResult]]) -> list[str]:
    """One line per reason a cell could not run here."""
    out: list[str] = []
    for (kind, why), cs in groups.items():
        cpus = ", ".join(dict.fromkeys(c.cpu for c in cs))
        n = len(cs)
        out.append(
            f"- {SYMBOLS[kind]} {n} cell{'s' if n != 1 else ''} ({_md(cpus)}): {_md(_clip(why))}"
        )
    return out


def _fit(lines: list[str], budget: int, what: str, limit: int) -> list[str]:
    """Keep list items while they fit `budget` bytes and `limit` items."""
    kept: list[str] = []
    used = 0
    for line in lines:
        size = len(line.encode()) + 1
        if len(kept) >= limit or used + size > budget:
            break
        kept.append(line)
        used += size
    if len(kept) < len(lines):
        kept.append(f"- … and {len(lines) - len(kept)} more {what} (see the HTML report)")
    return kept


def render_markdown(res: RunResults) -> str:
    c = res.counts
    bad = c.get("fail", 0) + c.get("error", 0)
    verdict = "❌ **failures**" if c.get("fail", 0) else ("⚠️ **errors**" if bad else "✅ **ok**")
    counts = " · ".join(
        f"{SYMBOLS[s]} {c.get(s, 0)} {s.replace('_', ' ')}"
        for s in ("pass", "fail", "error", "skip", "not_run")
        if c.get(s, 0) or s in ("pass", "fail", "error")
    )
    lines = [f"### sdematrix matrix: {verdict}", "", counts, ""]
    backends = []
    for name, b in res.backends.items():
        if isinstance(b, dict) and b.get("available"):
            backends.append(f"{name} ({b.get('version') or '?'})")
    host = res.host.get("cpu_model_name")
    info = []
    if backends:
        info.append("backend " + ", ".join(backends))
    if host:
        info.append(f"host {host}")
    if res.duration_s is not None:
        info.append(f"{res.duration_s:.1f} s")
    if res.meta.get("interrupted"):
        info.append("**interrupted**")
    if info:
        lines += [
            "<sub>" + _md(" · ".join(info)).replace("**interrupted**", "interrupted") + "</sub>",
            "",
        ]
    lines += _table(res)
    lines.append("")
    head = "\n".join(lines)
    remaining = BUDGET - len(head.encode()) - 512
    problems = _problem_lines(res)
    unrunnable = _unrunnable(res)
    skips = _skip_lines(unrunnable)
    tail: list[str] = []
    if problems:
        tail += ["", f"**Failures and errors ({len(problems)})**", ""]
        tail += _fit(problems, max(1024, remaining * 3 // 4), "failures", MAX_PROBLEMS)
    if skips:
        used = len("\n".join(tail).encode())
        n = sum(len(cs) for cs in unrunnable.values())
        tail += ["", f"**Could not run here ({n} cell{'s' if n != 1 else ''})**", ""]
        tail += _fit(skips, max(512, remaining - used), "reasons", MAX_PROBLEMS)
    warnings = res.all_warnings()
    if warnings:
        first = _md(_clip(warnings[0]))
        tail += ["", f"<sub>{len(warnings)} report warning(s); first: {first}</sub>"]
    return head + "\n".join(tail) + "\n"


def write_markdown(results_dir: str | Path | RunResults) -> str:
    """The markdown summary of `results_dir` (raises ResultsDirError, one line)."""
    if isinstance(results_dir, RunResults):
        return render_markdown(results_dir)
    return render_markdown(load_results(results_dir))


def emit_step_summary(results_dir: str | Path | RunResults) -> Path | None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` when set; return that path
    (None when the variable is unset or empty)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    text = write_markdown(results_dir)
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as e:
        raise OutputDirError(
            f"cannot append to GITHUB_STEP_SUMMARY {path}: {e.strerror or e}"
        ) from None
    return path
