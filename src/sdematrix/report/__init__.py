"""Reports of a results directory (format: :mod:`sdematrix.results.junit`).

* :func:`write_html` -- one self-contained HTML file: path heat-map, per-cell
  ISA-mix charts, top functions, violations, run metadata;
* :func:`write_markdown` / :func:`emit_step_summary` -- the heat-map as
  GitHub markdown, appended to ``$GITHUB_STEP_SUMMARY`` when set;
* :func:`diff` -> :class:`DiffReport` (:func:`render_text`,
  :attr:`DiffReport.exit_code`) -- what changed between two runs;
* :func:`write_reports` -- what ``sdematrix run --report DIR`` calls once the
  results directory is written.

Bad input raises :class:`ResultsDirError` (an ``SdeMatrixError``, exit code 2,
one-line message); an unwritable destination raises ``OutputDirError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..results.load import ResultsDirError, RunResults, load_results
from .diff import DiffReport, diff, render_text
from .html import write_html
from .markdown import emit_step_summary, render_markdown, write_markdown

__all__ = [
    "DiffReport",
    "ReportFiles",
    "ResultsDirError",
    "RunResults",
    "diff",
    "emit_step_summary",
    "load_results",
    "render_markdown",
    "render_text",
    "write_html",
    "write_markdown",
    "write_reports",
]


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    step_summary: Path | None  # $GITHUB_STEP_SUMMARY when it was appended to


def write_reports(results_dir: str | Path, report_dir: str | Path | None = None) -> ReportFiles:
    """Write ``report.html`` and ``summary.md`` into `report_dir` (default: the
    results directory itself) and append the summary to ``$GITHUB_STEP_SUMMARY``
    when that is set."""
    from ..errors import OutputDirError

    src = Path(results_dir)
    dest = Path(report_dir) if report_dir is not None else src
    res = load_results(src)  # read once for both reports
    html = write_html(res, dest / "report.html")
    md_path = dest / "summary.md"
    text = write_markdown(res)
    try:
        md_path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise OutputDirError(f"cannot write {md_path}: {e.strerror or e}") from None
    return ReportFiles(html=html, markdown=md_path, step_summary=emit_step_summary(res))
