"""HTML and markdown reports of ``sdematrix exec`` results.

Both read the exec results document (:func:`sdematrix.results.outcome_json.exec_results_json`,
also OUT/results.json of ``exec --out``, read by :func:`sdematrix.results.load.load_exec_results`), so ``exec --report DIR`` and
``sdematrix report OUT`` give the same pages:

* a grid model x check (``run and chip check`` and each expectation): pass,
  FAIL, ERROR, skip, or ``n/a`` where an expectation does not apply to the
  model;
* failures first, every reason in full;
* per model, which functions executed which ISA sets beyond the x86-64
  baseline (``isa_by_function``).
"""

from __future__ import annotations

import html
import os
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results.outcome_json import exec_results_json
from ..spec.dispatch_env import Override

if TYPE_CHECKING:
    from ..verdict.exec_judge import ExecOutcome

__all__ = ["render_html", "render_markdown", "step_summary", "write_exec_reports"]

_SYMBOL = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skip": "skip"}


def _check_names(data: dict[str, Any]) -> list[str]:
    """The run check, then the expectations in file order, then any other."""
    seen = [c["name"] for row in data["models"] for c in row.get("checks") or []]
    names = [n for n in dict.fromkeys(seen) if n == "run and chip check"]
    for n in [*(data.get("expectations") or []), *seen]:
        if n not in names:
            names.append(n)
    return names


def _cell(row: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in row.get("checks") or [] if c["name"] == name), None)


def _counts(data: dict[str, Any]) -> dict[str, int]:
    out = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for row in data["models"]:
        out[row["status"]] = out.get(row["status"], 0) + 1
    return out


def _headline(data: dict[str, Any]) -> str:
    c = _counts(data)
    return (
        f"sdematrix exec `{' '.join(data.get('argv') or [])}`: {len(data['models'])} "
        f"models: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, "
        f"{c['skip']} skipped"
    )


def _failing(data: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    rows = []
    for row in data["models"]:
        for c in row.get("checks") or [
            {"name": "run", "status": row["status"], "reasons": row.get("reasons", [])}
        ]:
            if c["status"] in ("fail", "error"):
                rows.append((row["model"], c["name"], list(c.get("reasons") or [])))
    return rows


def _override_lines(data: dict[str, Any]) -> list[str]:
    """The environment's CPU-dispatch overrides (results.json's
    ``dispatch_overrides``), one line each: the reason a violation may have
    outside the program's dispatcher."""
    return [
        Override(*(str(o.get(f.name, "")) for f in fields(Override))).note()
        for o in data.get("dispatch_overrides") or []
        if isinstance(o, dict)  # a results file read back is input like any other
    ]


def render_markdown(data: dict[str, Any]) -> str:
    names = _check_names(data)
    lines = [f"### {_headline(data)}", ""]
    lines += [f"> {line}" for line in _override_lines(data)]
    if data.get("dispatch_overrides"):
        lines.append("")
    lines.append("| model | " + " | ".join(n.replace("|", "\\|") for n in names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for row in data["models"]:
        cells = []
        for n in names:
            c = _cell(row, n)
            cells.append("n/a" if c is None else _SYMBOL.get(c["status"], c["status"]))
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    fails = _failing(data)
    if fails:
        lines += ["", "#### Failures", ""]
        for model, name, reasons in fails:
            lines.append(f"- **{model}: {name}**")
            lines += [f"  - {r}" for r in reasons]
    lines += ["", "#### Functions and the ISA sets they executed (beyond x86-64 baseline)", ""]
    for row in data["models"]:
        funcs = row.get("isa_by_function") or []
        text = "; ".join(
            f"{f['function']} ({f['image']}): {', '.join(f['isa_sets'])}" for f in funcs[:8]
        )
        more = f"; ... {len(funcs) - 8} more" if len(funcs) > 8 else ""
        lines.append(f"- {row['model']}: {text or 'none'}{more}")
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:1400px}
.card{overflow-x:auto;border:1px solid #ccc;border-radius:6px;padding:.5em;margin:1em 0}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
th.m,td.m{position:sticky;left:0;background:#fff}
.pass{background:#d8f5d8}.fail{background:#f8c8c8}.error{background:#f3b37a}
.skip,.na{background:#eee;color:#666}
"""


def render_html(data: dict[str, Any]) -> str:
    esc = html.escape
    names = _check_names(data)
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(_headline(data))}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(_headline(data))}</h1>",
    ]
    out += [f"<p class='note'>{esc(line)}</p>" for line in _override_lines(data)]
    fails = _failing(data)
    if fails:
        out.append("<div class='card' id='failures'><h2>Failures</h2><ul>")
        for model, name, reasons in fails:
            items = "".join(f"<li>{esc(r)}</li>" for r in reasons)
            out.append(f"<li><b>{esc(model)}: {esc(name)}</b><ul>{items}</ul></li>")
        out.append("</ul></div>")
    out.append("<div class='card'><h2>Model x check</h2><table><tr><th class='m'>model</th>")
    out += [f"<th>{esc(n)}</th>" for n in names]
    out.append("</tr>")
    for row in data["models"]:
        out.append(f"<tr><td class='m'>{esc(row['model'])}</td>")
        for n in names:
            c = _cell(row, n)
            if c is None:
                out.append("<td class='na'>n/a</td>")
            else:
                tip = esc(" | ".join(c.get("reasons") or []))
                out.append(
                    f"<td class='{esc(c['status'])}' title='{tip}'>"
                    f"{_SYMBOL.get(c['status'], esc(c['status']))}</td>"
                )
        out.append("</tr>")
    out.append("</table></div>")
    out.append("<div class='card'><h2>Functions and the ISA sets they executed</h2>")
    for row in data["models"]:
        funcs = row.get("isa_by_function") or []
        out.append(
            f"<details><summary>{esc(row['model'])}: {len(funcs)} functions beyond "
            "the x86-64 baseline</summary><table><tr><th>function</th><th>image</th>"
            "<th>ISA sets (instructions)</th></tr>"
        )
        for f in funcs:
            sets = ", ".join(f"{esc(k)} {v}" for k, v in f["isa_sets"].items())
            out.append(
                f"<tr><td>{esc(f['function'])}</td><td>{esc(f['image'])}</td><td>{sets}</td></tr>"
            )
        out.append("</table></details>")
    out.append("</div></body></html>\n")
    return "".join(out)


def step_summary(data: dict[str, Any]) -> Path | None:
    """Append the markdown to $GITHUB_STEP_SUMMARY when it is set."""
    dest = os.environ.get("GITHUB_STEP_SUMMARY")
    if not dest:
        return None
    with open(dest, "a", encoding="utf-8") as fh:
        fh.write(render_markdown(data))
    return Path(dest)


def write_exec_reports(
    outcomes: list[ExecOutcome],
    argv: list[str],
    report_dir: Path | None,
    exps: list[Any] | None = None,
) -> list[Path]:
    """report.html + summary.md into `report_dir` (when given) and the
    markdown onto $GITHUB_STEP_SUMMARY (when set); returns the files written."""
    data = exec_results_json(outcomes, argv, exps, full=False)
    files: list[Path] = []
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        html, md = report_dir / "report.html", report_dir / "summary.md"
        html.write_text(render_html(data), encoding="utf-8")
        md.write_text(render_markdown(data), encoding="utf-8")
        files += [html, md]
    step_summary(data)
    return files
