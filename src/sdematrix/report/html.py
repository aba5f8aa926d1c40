"""The self-contained HTML report of one results directory.

One file, no fetches: CSS inline, charts inline SVG (:mod:`.charts`), no
JavaScript, no web fonts -- it opens from a CI artifact, an e-mail or a
``file://`` URL and renders the same offline.

Layout, top to bottom:

1. header: run time, duration, tool version, the status counts;
2. the heat-map -- CPU models as rows, (mode, direction) as columns; each
   square shows the chosen path (background colour, see the legend), the status
   (symbol + border: green pass, red fail, orange error, hatched skip), and
   "exp. X" plus a corner flag in X's colour when the expected path differs.
   Several workloads (key sizes / lengths) of one (cpu, mode, direction) are
   folded into one square with the worst status.  Each square links to its
   detail section.  DOM hooks for tests and scrapers::

       <td class="hm-cell" data-cell="spr.gcm.encrypt" data-path="avx512"
           data-expected="avx512" data-status="pass" data-workloads="2">

3. problems: every failed / errored cell with its first reason, skips grouped
   per model;
4. run metadata: host, backends (emulator / tracer versions), models and the
   backend each used, durations;
5. one detail section per square (``id="cell-<cpu>.<mode>.<direction>"``):
   per workload the reasons, chip-check violations, the ISA-set and
   width/encoding charts, the top functions and the per-image split.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from html import escape
from pathlib import Path

from .._version import __version__
from ..evidence.mix import Mix
from ..results.load import CellGroup, CellResult, RunResults, load_results
from ..spec.models import PATHS
from .charts import (
    ENCODING_COLOURS,
    ISA_FAMILIES,
    ISA_OTHER_COLOUR,
    isa_set_chart,
    width_encoding_chart,
)

__all__ = ["PATH_COLOURS", "STATUS_SYMBOLS", "anchor", "iter_html", "render_html", "write_html"]

PATH_COLOURS: dict[str, str] = {
    "generic": "#cfd8dc",
    "aesni": "#90caf9",
    "vaes_avx2": "#80cbc4",
    "avx10_256": "#ffcc80",
    "avx512": "#ce93d8",
    "mixed": "#fff59d",
}
_EXTRA_COLOURS = ("#f48fb1", "#a5d6a7", "#bcaaa4", "#b39ddb", "#e6ee9c")
NO_PATH_COLOUR = "#eceff1"

STATUS_SYMBOLS: dict[str, str] = {
    "pass": "\u2714",  # heavy check mark
    "fail": "\u2718",  # heavy ballot x
    "error": "\u26a0",  # warning sign
    "skip": "\u2298",  # circled slash (DejaVu has it; U+23ED often renders as tofu)
    "not_run": "\u25cc",  # dotted circle
}
STATUS_LABEL = {
    "pass": "pass",
    "fail": "FAIL",
    "error": "ERROR",
    "skip": "skip",
    "not_run": "not run",
}

MODE_DIR_SHORT = {"encrypt": "enc", "decrypt": "dec"}
MAX_REASON = 2000  # characters of one reason (a reason is one line; this only stops a flood)
MAX_REASONS = 50  # reasons listed per cell, then "N more"
MAX_PROBLEMS = 500  # cells in the failure list, then "N more"
MAX_WORKLOADS = 40  # workloads detailed per heat-map square, then "N more"
MAX_TAIL = 4000
TOP_FUNCTIONS = 10
# The report's size is bounded by these, whatever the number of cells: full
# details (charts, top functions) while DETAIL_BUDGET bytes last, failures
# first; then one compact line per workload while COMPACT_BUDGET lasts; the
# rest is counted ("N more").
DETAIL_BUDGET = 1_200_000
MAX_FULL_WORKLOADS = 60  # and at most this many workloads in full (each reads its mix file)
COMPACT_BUDGET = 400_000
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def path_colour(path: str | None) -> str:
    if not path:
        return NO_PATH_COLOUR
    if path in PATH_COLOURS:
        return PATH_COLOURS[path]
    # a path this report does not know yet: a stable colour from its name
    return _EXTRA_COLOURS[sum(path.encode()) % len(_EXTRA_COLOURS)]


def anchor(name: str) -> str:
    return "cell-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _e(x: object) -> str:
    """HTML-escaped text; control characters (which HTML forbids in text and
    attributes) shown as ``\\xNN`` / ``\\uNNNN``."""
    s = "" if x is None else str(x)
    s = _CONTROL.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        s,
    )
    return escape(s)


def _clip(s: str, n: int) -> str:
    s = " ".join(s.split()) if "\n" not in s else s
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 90:
        return f"{x / 60:.1f} min"
    return f"{x:.1f} s" if x >= 1 else f"{x * 1000:.0f} ms"


def _base(image: str | None) -> str:
    return (image or "").rsplit("/", 1)[-1]


# --------------------------------------------------------------------------
# CSS
# --------------------------------------------------------------------------

_CSS = """
:root { --fg:#263238; --muted:#607d8b; --line:#dfe5e8; --bg:#f5f7f8; --card:#fff;
  --pass:#2e7d32; --fail:#c62828; --error:#ef6c00; --skip:#90a4ae; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1360px; margin: 0 auto; padding: 20px 24px 60px; }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 17px; margin: 0 0 12px; }
h3 { font-size: 15px; margin: 0; }
h4 { font-size: 13px; margin: 14px 0 6px; color:#37474f; }
a { color:#1565c0; text-decoration:none; }
a:hover { text-decoration:underline; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
  monospace; font-size: 12px; }
.sub { color: var(--muted); }
.card { background: var(--card); border:1px solid var(--line); border-radius: 8px;
  padding: 16px 18px; margin: 16px 0; }
header.card { display:flex; justify-content:space-between; align-items:center; gap:16px;
  flex-wrap:wrap; }
.chips { display:flex; gap:8px; flex-wrap:wrap; }
.chip { border-radius: 999px; padding: 4px 12px; font-weight:600; font-size:13px;
  border:1px solid var(--line); background:#fafafa; }
.chip b { font-size: 16px; margin-right: 4px; }
.chip.pass { color:var(--pass); border-color:#a5d6a7; background:#f1f8e9; }
.chip.fail { color:var(--fail); border-color:#ef9a9a; background:#ffebee; }
.chip.error { color:var(--error); border-color:#ffcc80; background:#fff3e0; }
.chip.skip, .chip.not_run { color:#546e7a; }
.verdict { font-size: 15px; font-weight: 700; padding: 6px 14px; border-radius: 6px; }
.verdict.ok { background:#e8f5e9; color:var(--pass); }
.verdict.bad { background:#ffebee; color:var(--fail); }
.legend { display:flex; flex-wrap:wrap; gap:6px 18px; align-items:center; margin: 0 0 12px;
  color:#455a64; font-size: 12.5px; }
.legend .sw { display:inline-block; width:14px; height:14px; border-radius:3px;
  vertical-align:-2px; margin-right:5px; border:1px solid rgba(0,0,0,.12); }
.legend .grp { font-weight:600; color:var(--muted); margin-right: -8px; }
.hm-scroll { overflow-x: auto; max-width: 100%; }
table.heatmap { border-collapse: separate; border-spacing: 4px; }
table.heatmap th { font-weight:600; color:#455a64; font-size:12.5px; }
table.heatmap thead th { text-align:center; padding: 2px 4px; }
table.heatmap thead tr.modes th { border-bottom: 2px solid var(--line); }
th.hm-row { text-align:left; padding: 4px 10px 4px 0; white-space:nowrap; position: sticky;
  left: 0; z-index: 1; background: var(--card); max-width: 190px; overflow: hidden;
  text-overflow: ellipsis; }
table.heatmap thead th:first-child { position: sticky; left: 0; z-index: 2;
  background: var(--card); }
th.hm-row .cpu { font-size: 14px; color: var(--fg); }
th.hm-row .title { display:block; font-weight:400; color:var(--muted); font-size:11.5px;
  overflow: hidden; text-overflow: ellipsis; }
td.hm-cell { width: 112px; min-width: 112px; height: 54px; border-radius: 6px; padding: 0;
  position: relative; box-shadow: inset 0 0 0 1px rgba(0,0,0,.10); }
td.hm-cell a { display:block; height:100%; padding: 5px 7px; color: var(--fg);
  text-decoration:none; }
td.hm-cell a:hover { background: rgba(255,255,255,.35); }
td.hm-cell .sym { position:absolute; right:6px; top:3px; font-size: 15px; font-weight:700; }
td.hm-cell .path { display:block; font-weight:700; font-size: 13px; margin-top: 2px;
  padding-right: 16px; }
td.hm-cell .exp { display:block; font-size: 11px; color:#b71c1c; font-weight:600; }
td.hm-cell .expn { display:block; font-size: 11px; color:#607d8b; }
td.hm-cell .n { display:block; font-size: 10.5px; color:#546e7a; }
td.hm-cell.st-pass .sym { color: var(--pass); }
td.hm-cell.st-fail { box-shadow: inset 0 0 0 3px var(--fail); }
td.hm-cell.st-fail .sym { color: var(--fail); }
td.hm-cell.st-error { box-shadow: inset 0 0 0 3px var(--error); }
td.hm-cell.st-error .sym { color: var(--error); }
td.hm-cell.st-skip, td.hm-cell.st-not_run { box-shadow: inset 0 0 0 1px #cfd8dc; }
td.hm-cell.st-skip .path, td.hm-cell.st-not_run .path { color:#78909c; font-weight:600; }
td.hm-cell.st-skip .sym, td.hm-cell.st-not_run .sym { color:#90a4ae; }
td.hm-empty { width:112px; border-radius:6px; background:
  repeating-linear-gradient(45deg,#fafafa 0 6px,#f0f0f0 6px 12px); }
ul.problems { margin: 0; padding-left: 0; list-style: none; }
ul.problems li { padding: 5px 0; border-bottom: 1px solid #f0f3f4; }
ul.problems .st { display:inline-block; min-width: 62px; font-weight:700; }
.st-fail-t { color: var(--fail); } .st-error-t { color: var(--error); }
.st-pass-t { color: var(--pass); } .st-skip-t, .st-not_run-t { color: #78909c; }
.grid2 { display:grid; grid-template-columns: 1fr 1fr; gap: 18px; }
table.kv { border-collapse: collapse; }
table.kv th { text-align:left; color:var(--muted); font-weight:600; padding: 2px 14px 2px 0;
  vertical-align: top; white-space: nowrap; }
table.kv td { padding: 2px 0; }
table.list { border-collapse: collapse; width: 100%; font-size: 13px; }
table.list th { text-align:left; color:var(--muted); font-weight:600; border-bottom: 1px solid
  var(--line); padding: 4px 8px 4px 0; white-space: nowrap; }
table.list td { border-bottom: 1px solid #f0f3f4; padding: 4px 8px 4px 0; vertical-align: top; }
table.list td.tally { white-space: nowrap; }
table.list td.num, table.list th.num { text-align: right; font-variant-numeric: tabular-nums; }
.pathtag { display:inline-block; padding: 0 7px; border-radius: 4px; font-weight:600;
  font-size: 12px; border: 1px solid rgba(0,0,0,.1); }
section.detail { scroll-margin-top: 12px; padding: 8px 18px; margin: 8px 0; }
section.detail > details > summary { cursor: pointer; list-style-position: outside;
  margin-left: 14px; }
section.detail > details > summary > .head { display:inline-flex; width: calc(100% - 8px); }
section.detail > details[open] > summary { margin-bottom: 6px; }
ul.problems ul.more { margin: 2px 0 0 70px; padding-left: 16px; }
ul.problems ul.more li { border: 0; padding: 1px 0; }
table.compact td, table.compact th { padding: 2px 10px 2px 0; }
section.detail:target { box-shadow: 0 0 0 3px #64b5f6; }
section.detail .head { display:flex; align-items:center; gap: 12px; flex-wrap: wrap; }
section.detail .head .top { margin-left:auto; font-size: 12px; }
.badge { font-weight: 700; font-size: 12px; padding: 2px 8px; border-radius: 4px; color:#fff; }
.badge.pass { background: var(--pass); } .badge.fail { background: var(--fail); }
.badge.error { background: var(--error); }
.badge.skip, .badge.not_run { background: var(--skip); }
.workload { border-top: 1px solid var(--line); margin-top: 12px; padding-top: 4px; }
.facts { display:flex; flex-wrap:wrap; gap: 4px 22px; margin: 4px 0 8px; }
.facts .k { color: var(--muted); font-weight: 600; margin-right: 2px; }
.tables { display:grid; grid-template-columns: 3fr 2fr; gap: 24px; align-items: start; }
.charts { display:flex; flex-wrap: wrap; gap: 10px 28px; margin: 6px 0; }
ul.reasons { margin: 4px 0; padding-left: 20px; }
ul.reasons li { margin: 2px 0; }
.bar-cell { position: relative; min-width: 120px; }
.bar-cell span { display:block; height: 9px; background: #90a4ae; border-radius: 2px; }
pre.tail { background:#263238; color:#eceff1; padding: 10px; border-radius: 6px; overflow:auto;
  max-height: 260px; }
.warn { color:#8d6e63; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""


# --------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------


def _path_tag(path: str | None) -> str:
    if not path:
        return '<span class="sub">-</span>'
    return f'<span class="pathtag" style="background:{path_colour(path)}">{_e(path)}</span>'


def _status_text(status: str) -> str:
    sym = STATUS_SYMBOLS.get(status, "?")
    return f'<span class="st-{_e(status)}-t">{sym} {_e(STATUS_LABEL.get(status, status))}</span>'


def _header(res: RunResults) -> str:
    counts = res.counts
    tool = res.meta.get("tool") if isinstance(res.meta.get("tool"), dict) else {}
    bad = counts.get("fail", 0) + counts.get("error", 0)
    verdict = (
        '<span class="verdict bad">' + f"{bad} cell{'s' if bad != 1 else ''} failed or errored"
        "</span>"
        if bad
        else '<span class="verdict ok">no failures</span>'
    )
    sub = [
        f"started {_e(res.started_at or '?')}",
        f"duration {_fmt_s(res.duration_s)}",
        f"{len(res.cells)} cells",
        f"backend requested: {_e(res.meta.get('backend_requested', '?'))}",
        f"{_e(tool.get('name', 'sdematrix'))} {_e(tool.get('version', ''))}",
    ]
    if res.meta.get("interrupted"):
        sub.append('<b class="st-error-t">run interrupted</b>')
    if res.meta.get("in_progress"):
        sub.append('<b class="st-error-t">run still in progress (or killed): partial results</b>')
    chips = "".join(
        f'<span class="chip {s}"><b>{counts.get(s, 0)}</b>{_e(STATUS_LABEL[s])}</span>'
        for s in ("pass", "fail", "error", "skip", "not_run")
        if counts.get(s, 0) or s in ("pass", "fail", "error")
    )
    return (
        '<header class="card"><div><h1>sdematrix: which AES path ran on which CPU</h1>'
        f'<div class="sub">{" &middot; ".join(sub)}</div></div>'
        f'<div class="chips">{verdict}{chips}</div></header>'
    )


def _legend(paths: Iterable[str]) -> str:
    items = ['<span class="grp">path</span>']
    for p in paths:
        items.append(
            f'<span><span class="sw" style="background:{path_colour(p)}"></span>{_e(p)}</span>'
        )
    items.append(
        f'<span><span class="sw" style="background:{NO_PATH_COLOUR}"></span>none reported</span>'
    )
    items.append('<span class="grp">status</span>')
    items.append(
        f'<span class="st-pass-t">{STATUS_SYMBOLS["pass"]}</span> pass'
        f' &nbsp;<span class="st-fail-t">{STATUS_SYMBOLS["fail"]}</span> fail (red border)'
        f' &nbsp;<span class="st-error-t">{STATUS_SYMBOLS["error"]}</span> error (orange border)'
        f' &nbsp;<span class="st-skip-t">{STATUS_SYMBOLS["skip"]}</span> skip'
    )
    items.append(
        '<span class="sub">corner flag + <b style="color:#b71c1c">exp. X</b> = expected path X '
        "differs; several workloads show the worst status</span>"
    )
    return '<div class="legend">' + "".join(items) + "</div>"


def _hm_cell(g: CellGroup) -> str:
    status = g.status
    path = g.path
    exp = g.expected_path
    # workloads that took different paths: colour by the worst workload's path
    worst = next((c.path for c in g.cells if c.status == status and c.path), path)
    bg = path_colour(worst if path == "mixed" else path)
    style = f"background:{bg}"
    differs = bool(path and exp and path != exp)
    if differs:
        style = (
            f"background:linear-gradient(135deg,{path_colour(exp)} 0 13px,transparent 13px),{bg}"
        )
    elif status == "skip" or status == "not_run":
        style = (
            f"background:repeating-linear-gradient(45deg,{NO_PATH_COLOUR} 0 7px,#f7f9fa 7px 14px)"
        )
    # no path reported (skip / error / not run): say so, and which path was expected
    shown = " + ".join(g.paths) or STATUS_LABEL.get(status, status)
    note = f"exp. {exp}" if not path and exp else ""
    n = len(g.cells)
    counts = ""
    if n > 1:
        bad = n - g.count("pass")
        worst_n = g.count(status)
        counts = (
            f"{worst_n} of {n} {STATUS_LABEL.get(status, status).lower()}"
            if bad and worst_n != n
            else f"{n} workloads"
        )
    tip = "; ".join(
        f"{c.workload}: {c.status}{' ' + c.path if c.path else ''}"
        + (f" - {_clip(c.reasons[0], 120)}" if c.reasons and c.status != "pass" else "")
        for c in g.cells
    )
    return (
        f'<td class="hm-cell st-{_e(status)}" data-cell="{_e(g.name)}" '
        f'data-path="{_e(path or "")}" data-paths="{_e(" ".join(g.paths))}" '
        f'data-expected="{_e(exp or "")}" '
        f'data-status="{_e(status)}" data-workloads="{n}" style="{style}" '
        f'title="{_e(g.name)}: {_e(tip)}">'
        f'<a href="#{anchor(g.name)}"><span class="sym">{STATUS_SYMBOLS.get(status, "?")}</span>'
        f'<span class="path">{_e(shown)}</span>'
        + (f'<span class="exp">exp. {_e(exp)}</span>' if differs else "")
        + (f'<span class="expn">{_e(note)}</span>' if note else "")
        + (f'<span class="n">{_e(counts)}</span>' if counts else "")
        + "</a></td>"
    )


def _heatmap(res: RunResults, groups: dict[tuple[str, str, str], CellGroup] | None = None) -> str:
    groups = res.groups() if groups is None else groups
    cols = res.columns
    modes = list(dict.fromkeys(m for m, _d in cols))
    head1 = (
        '<tr class="modes"><th rowspan="2">CPU model</th>'
        + "".join(
            f'<th colspan="{sum(1 for mm, _ in cols if mm == m)}">{_e(m)}</th>' for m in modes
        )
        + "</tr>"
    )
    head2 = "<tr>" + "".join(f"<th>{_e(MODE_DIR_SHORT.get(d, d))}</th>" for _m, d in cols) + "</tr>"
    rows = []
    present = {k[0] for k in groups}
    for cpu in res.cpus:
        if cpu not in present:
            continue
        m = res.models.get(cpu)
        title = m.title if m else ""
        tds = []
        for mode, d in cols:
            g = groups.get((cpu, mode, d))
            tds.append(_hm_cell(g) if g else '<td class="hm-empty" title="not in this run"></td>')
        rows.append(
            f'<tr><th class="hm-row" data-cpu="{_e(cpu)}" title="{_e(title)}">'
            f'<span class="cpu">{_e(cpu)}</span>'
            f'<span class="title">{_e(title)}</span></th>{"".join(tds)}</tr>'
        )
    seen_paths = {p for g in groups.values() for p in g.paths}
    seen_paths |= {g.expected_path for g in groups.values() if g.expected_path}
    legend_paths = [p for p in PATHS if p in seen_paths] + sorted(seen_paths - set(PATHS))
    return (
        '<section class="card" id="heatmap"><h2>Path heat-map</h2>'
        + _legend(legend_paths)
        + f'<div class="hm-scroll"><table class="heatmap"><thead>{head1}{head2}</thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _more(n: int, what: str) -> str:
    return f'<li class="sub">&hellip; and {n} more {_e(what)}</li>'


def _problems(res: RunResults) -> str:
    bad = [c for c in res.cells if c.status in ("fail", "error")]
    bad.sort(key=lambda c: (0 if c.status == "fail" else 1, c.name))
    items = []
    for c in bad[:MAX_PROBLEMS]:
        first = c.reasons[0] if c.reasons else c.status
        rest = c.reasons[1:MAX_REASONS]
        more = "".join(f"<li>{_e(_clip(r, MAX_REASON))}</li>" for r in rest)
        if len(c.reasons) > MAX_REASONS:
            more += _more(len(c.reasons) - MAX_REASONS, "reasons (see the cell's detail)")
        items.append(
            f'<li><span class="st">{_status_text(c.status)}</span> '
            f'<a class="mono" href="#{anchor(c.name)}">{_e(c.name)}</a> &mdash; '
            f"{_e(_clip(first, MAX_REASON))}"
            + (f'<ul class="more">{more}</ul>' if more else "")
            + "</li>"
        )
    if len(bad) > MAX_PROBLEMS:
        items.append(_more(len(bad) - MAX_PROBLEMS, "failed or errored cells (see results.json)"))
    skips: dict[str, list[CellResult]] = {}
    for c in res.cells:
        if c.status in ("skip", "not_run"):
            skips.setdefault(c.cpu, []).append(c)
    for cpu, cs in skips.items():
        reasons = list(dict.fromkeys(c.reasons[0] if c.reasons else c.status for c in cs))
        kinds = sorted({c.status for c in cs})
        label = " / ".join(STATUS_LABEL.get(k, k) for k in kinds)
        shown = "; ".join(reasons[:5]) + (
            f"; and {len(reasons) - 5} more" if len(reasons) > 5 else ""
        )
        items.append(
            f'<li><span class="st">{_status_text(kinds[0])}</span> <b>{_e(cpu)}</b>: '
            f"{len(cs)} cell{'s' if len(cs) != 1 else ''} {_e(label)} &mdash; "
            f"{_e(_clip(shown, MAX_REASON))}</li>"
        )
    if not items:
        body = '<p class="st-pass-t">Every cell passed.</p>'
    else:
        body = f'<ul class="problems">{"".join(items)}</ul>'
    return (
        f'<section class="card" id="problems"><h2>Failures, errors and skips</h2>{body}</section>'
    )


def _metadata(res: RunResults) -> str:
    h = res.host
    fam = h.get("family")
    mod = h.get("model")
    cpu = h.get("cpu_model_name") or "?"
    if isinstance(fam, int) and isinstance(mod, int):
        cpu += f" (family {fam:#x}, model {mod:#x})"
    host_rows = [
        ("host", h.get("hostname")),
        ("CPU", f"{h.get('vendor') or '?'} {cpu}"),
        ("flags", " ".join(h.get("flags") or []) or None),
        ("kernel", h.get("kernel")),
        ("python", h.get("python")),
        ("matrix", res.meta.get("matrix")),
        (
            "seed / jobs / timeout",
            f"{res.meta.get('seed', '?')} / {res.meta.get('jobs', '?')} / {res.meta.get('timeout_s', '?')} s",
        ),
        (
            "started / finished",
            f"{res.meta.get('started_at', '?')} / {res.meta.get('finished_at', '?')}",
        ),
        ("run duration", _fmt_s(res.duration_s)),
        ("cell time (sum)", _fmt_s(sum(c.duration_s for c in res.cells))),
    ]
    host = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v if v is not None else '-')}</td></tr>" for k, v in host_rows
    )
    brows = "".join(
        f"<tr><td><b>{_e(name)}</b></td><td>{'yes' if b.get('available') else 'no'}</td>"
        f'<td class="mono">{_e(b.get("version") or "-")}</td><td>{_e(b.get("reason") or "")}</td></tr>'
        for name, b in res.backends.items()
        if isinstance(b, dict)
    )
    backends = (
        '<table class="list"><tr><th>backend</th><th>available</th><th>version</th>'
        f"<th>reason</th></tr>{brows}</table>"
        if brows
        else '<p class="sub">no backend information</p>'
    )
    groups_by_cpu: dict[str, list[CellResult]] = {}
    for c in res.cells:
        groups_by_cpu.setdefault(c.cpu, []).append(c)
    mrows = []
    for cpu_name in res.cpus:
        cs = groups_by_cpu.get(cpu_name, [])
        m = res.models.get(cpu_name)
        backend = (m.backend if m else None) or next((c.backend for c in cs if c.backend), None)
        versions = sorted({c.backend_version for c in cs if c.backend_version})
        tally = " ".join(
            f'<span class="st-{s}-t">{STATUS_SYMBOLS[s]}{n}</span>'
            for s in ("pass", "fail", "error", "skip", "not_run")
            if (n := sum(1 for c in cs if c.status == s))
        )
        mrows.append(
            f"<tr><td><b>{_e(cpu_name)}</b></td><td>{_e(m.title if m else '')}</td>"
            f'<td>{_e(backend or "-")}</td><td class="mono">{_e(", ".join(versions) or "-")}</td>'
            f'<td class="tally">{tally}</td><td class="num">{_fmt_s(sum(c.duration_s for c in cs))}</td>'
            f"<td>{_e(m.skip_reason if m and m.skip_reason else '')}</td></tr>"
        )
    models = (
        '<table class="list"><tr><th>model</th><th>title</th><th>backend</th>'
        '<th>backend version</th><th>cells</th><th class="num">time</th><th>skip reason</th></tr>'
        + "".join(mrows)
        + "</table>"
    )
    slow = sorted((c for c in res.cells if c.duration_s > 0), key=lambda c: -c.duration_s)[:5]
    slow_html = ", ".join(
        f'<a class="mono" href="#{anchor(c.name)}">{_e(c.name)}</a> {_fmt_s(c.duration_s)}'
        for c in slow
    )
    return (
        '<section class="card" id="run"><h2>Run</h2><div class="grid2">'
        f'<div><table class="kv">{host}</table></div>'
        f"<div><h4>Backends</h4>{backends}"
        + (f"<h4>Slowest cells</h4><p>{slow_html}</p>" if slow_html else "")
        + f"</div></div><h4>Models</h4>{models}</section>"
    )


def _violations(c: CellResult) -> str:
    vs = c.violations
    if not vs:
        return ""
    rows = "".join(
        f'<tr><td>{_e(v.mnemonic or "-")}</td><td class="mono">{_e(v.address or "-")}</td>'
        f'<td class="mono">{_e(v.function or "-")}</td><td>{_e(_base(v.image) or "-")}</td>'
        f'<td class="mono">{_e(v.bytes_hex or "-")}</td><td>{_e(_clip(v.reason, 200))}</td></tr>'
        for v in vs[:50]
    )
    more = f'<p class="sub">... and {len(vs) - 50} more</p>' if len(vs) > 50 else ""
    return (
        f'<h4 class="st-fail-t">Chip-check violations ({len(vs)})</h4><table class="list">'
        "<tr><th>mnemonic</th><th>address</th><th>function</th><th>image</th><th>bytes</th>"
        f"<th>reason</th></tr>{rows}</table>{more}"
    )


def _functions(mix: Mix) -> str:
    fs = sorted(mix.functions, key=lambda f: -f.counts.total)[:TOP_FUNCTIONS]
    if not fs:
        return ""
    top = fs[0].counts.total or 1
    executed = sum(1 for f in mix.functions if f.counts.total > 0)
    # a passing cell's stored mix keeps only its busiest functions: the count is in meta
    kept = mix.meta.get("functions_executed")
    if isinstance(kept, int) and kept > executed:
        executed = kept
    rows = []
    for f in fs:
        w = f.counts.width
        e = f.counts.encoding
        rows.append(
            f'<tr><td class="mono">{_e(f.name)}</td><td>{_e(_base(f.image))}</td>'
            f'<td class="num">{f.counts.total:,}</td>'
            f'<td class="bar-cell"><span style="width:{100.0 * f.counts.total / top:.1f}%"></span></td>'
            + "".join(f'<td class="num">{w.get(x, 0):,}</td>' for x in ("xmm", "ymm", "zmm"))
            + "".join(f'<td class="num">{e.get(x, 0):,}</td>' for x in ("vex", "evex"))
            + "</tr>"
        )
    return (
        f"<h4>Top functions by instructions executed (of {executed} that ran)</h4>"
        '<table class="list"><tr><th>function</th><th>image</th><th class="num">instructions</th>'
        '<th></th><th class="num">xmm</th><th class="num">ymm</th><th class="num">zmm</th>'
        '<th class="num">VEX</th><th class="num">EVEX</th></tr>' + "".join(rows) + "</table>"
    )


def _images(mix: Mix) -> str:
    if len(mix.images) < 2:
        return ""
    rows = []
    for img, mc in sorted(mix.images.items(), key=lambda kv: -kv[1].total):
        w = mc.width
        e = mc.encoding
        rows.append(
            f'<tr><td title="{_e(img)}">{_e(_base(img))}</td><td class="num">{mc.total:,}</td>'
            + "".join(f'<td class="num">{w.get(x, 0):,}</td>' for x in ("xmm", "ymm", "zmm"))
            + "".join(f'<td class="num">{e.get(x, 0):,}</td>' for x in ("vex", "evex"))
            + "</tr>"
        )
    return (
        '<h4>Per image</h4><table class="list"><tr><th>image</th><th class="num">instructions'
        '</th><th class="num">xmm</th><th class="num">ymm</th><th class="num">zmm</th>'
        '<th class="num">VEX</th><th class="num">EVEX</th></tr>' + "".join(rows) + "</table>"
    )


def _workload(c: CellResult) -> str:
    parts = [
        f'<div class="workload" id="{anchor(c.name)}" data-cell-full="{_e(c.name)}">',
        (
            f'<h4>{_status_text(c.status)} &nbsp;<span class="mono">{_e(c.name)}</span> '
            f'<span class="sub">{_e(c.workload)}</span></h4>'
        ),
    ]
    facts = [
        ("path", _path_tag(c.path)),
        ("expected", _path_tag(c.expected_path)),
        (
            "backend",
            _e(f"{c.backend or '-'}" + (f" ({c.backend_version})" if c.backend_version else "")),
        ),
        ("duration", _fmt_s(c.duration_s)),
    ]
    total = c.total_instructions
    if total is not None:
        facts.append(("instructions", f"{total:,}"))
    if c.digest and c.expected_digest:
        same = c.digest == c.expected_digest
        facts.append(
            (
                "output",
                "matches host reference"
                if same
                else '<b class="st-fail-t">differs from host reference</b>',
            )
        )
    parts.append(
        '<div class="facts">'
        + "".join(f'<span><span class="k">{k}</span> {v}</span>' for k, v in facts)
        + "</div>"
    )
    if c.reasons and c.status != "pass":
        parts.append(
            '<ul class="reasons">'
            + "".join(f"<li>{_e(_clip(r, MAX_REASON))}</li>" for r in c.reasons[:MAX_REASONS])
            + (
                _more(len(c.reasons) - MAX_REASONS, "reasons (cells/*.json has them all)")
                if len(c.reasons) > MAX_REASONS
                else ""
            )
            + "</ul>"
        )
    if c.status in ("fail", "error"):
        parts.append(_violations(c))  # a cell that passed has none: no detail file read
    mix = c.mix
    if mix is not None and mix.legacy_forms:
        # encodings the model ran as an older instruction (TZCNT as BSF)
        kinds = ", ".join(f"{_e(k)} {n}" for k, n in mix.legacy_forms.most_common())
        parts.append(f'<p class="legacy">legacy_forms {mix.legacy_total}: {kinds}</p>')
    if mix is not None:
        o = mix.overall
        parts.append(
            '<div class="charts">'
            + isa_set_chart(dict(o.isa_set), total=o.total)
            + width_encoding_chart(dict(o.forms))
            + "</div>"
        )
        parts.append(
            f'<div class="tables"><div>{_functions(mix)}</div><div>{_images(mix)}</div></div>'
        )
    elif c.by_isa_set:
        parts.append(
            '<div class="charts">'
            + isa_set_chart(c.by_isa_set, total=c.total_instructions)
            + '</div><p class="sub">(top ISA sets from the summary; the mix file is missing)</p>'
        )
    tail = c.output_tail
    if c.status in ("fail", "error") and tail:
        if len(tail) > MAX_TAIL:
            tail = "\u2026" + tail[-MAX_TAIL:]
        parts.append(
            f'<details><summary>last output lines</summary><pre class="tail">'
            f"{_e(tail)}</pre></details>"
        )
    parts.append("</div>")
    return "".join(parts)


def _compact(c: CellResult) -> str:
    """One table row for a workload past the full-detail budget."""
    # from the summary in results.json: a compact row never reads a mix file
    summ = c.mix_summary or {}
    total = summ.get("total") if isinstance(summ.get("total"), int) else None
    sets = summ.get("top_isa_sets") if isinstance(summ.get("top_isa_sets"), dict) else {}
    top = ", ".join(f"{k} {v}" for k, v in list(sets.items())[:4])
    first = c.reasons[0] if c.reasons and c.status != "pass" else ""
    return (
        f'<tr id="{anchor(c.name)}"><td>{_status_text(c.status)}</td>'
        f'<td class="mono">{_e(c.name)}</td><td>{_path_tag(c.path)}</td>'
        f'<td class="num">{"-" if total is None else f"{total:,}"}</td>'
        f"<td>{_e(top or '-')}</td><td>{_e(_clip(first, MAX_REASON))}</td></tr>"
    )


def _release(c: CellResult) -> None:
    """Forget a cell's loaded mix once its detail is rendered: the report's
    memory is bounded by what it writes, not by the run's size."""
    if hasattr(c, "_mix_loaded"):
        c._mix = None
        c._mix_loaded = False


def _detail(res: RunResults, g: CellGroup, full: bool = True) -> str:
    m = res.models.get(g.cpu)
    status = g.status
    head = (
        f'<div class="head"><span class="badge {_e(status)}">{_e(STATUS_LABEL.get(status, status))}'
        f'</span><h3 class="mono">{_e(g.name)}</h3><span class="sub">{_e(m.title if m else "")}'
        f"</span> {_path_tag(g.path)}"
        + (
            f' <span class="sub">expected</span> {_path_tag(g.expected_path)}'
            if g.expected_path and g.expected_path != g.path
            else ""
        )
        + '<a class="top" href="#heatmap">&uarr; heat-map</a></div>'
    )
    cells = g.cells[:MAX_WORKLOADS]
    more = (
        f'<p class="sub">&hellip; and {len(g.cells) - MAX_WORKLOADS} more workloads '
        "(see results.json)</p>"
        if len(g.cells) > MAX_WORKLOADS
        else ""
    )
    if status in ("skip", "not_run") and all(c.status == status for c in g.cells):
        reasons = list(dict.fromkeys(c.reasons[0] for c in g.cells if c.reasons))
        ids = "".join(f'<span id="{anchor(c.name)}"></span>' for c in cells)
        body = (
            f'<p class="sub">{ids}{len(g.cells)} workload{"s" if len(g.cells) != 1 else ""} '
            f"({_e(', '.join(c.workload for c in cells))}"
            f"{', ...' if len(g.cells) > len(cells) else ''}) {_e(STATUS_LABEL[status])}: "
            f"{_e(_clip('; '.join(reasons[:5]), MAX_REASON))}</p>"
        )
    elif full:
        parts = []
        for c in cells:
            parts.append(_workload(c))
            _release(c)
        body = "".join(parts) + more
    else:
        body = (
            '<table class="list compact"><tr><th>status</th><th>cell</th><th>path</th>'
            '<th class="num">instructions</th><th>top ISA sets</th><th>reason</th></tr>'
            + "".join(_compact(c) for c in cells)
            + "</table>"
            + more
        )
    return (
        f'<section class="card detail st-{_e(status)}" id="{anchor(g.name)}" '
        f'data-cell="{_e(g.name)}"><details><summary>{head}</summary>{body}</details></section>'
    )


def _isa_legend() -> str:
    fams = [(f, c) for f, _n, c in ISA_FAMILIES] + [("base / other", ISA_OTHER_COLOUR)]
    enc = list(ENCODING_COLOURS.items())
    sw = '<span><span class="sw" style="background:{c}"></span>{n}</span>'
    return (
        '<div class="legend"><span class="grp">ISA-set bars</span>'
        + "".join(sw.format(c=c, n=_e(n)) for n, c in fams)
        + '<span class="grp">encoding</span>'
        + "".join(sw.format(c=c, n=_e(n)) for n, c in enc)
        + "</div>"
    )


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


_RANK = {"fail": 0, "error": 1}


def _details(res: RunResults, groups: dict[tuple[str, str, str], CellGroup]) -> Iterator[str]:
    """The detail sections: failures first, then matrix order; full while
    :data:`DETAIL_BUDGET` lasts, compact while :data:`COMPACT_BUDGET` lasts,
    then a count of what is left."""
    order = {cpu: i for i, cpu in enumerate(res.cpus)}
    col_order = {col: i for i, col in enumerate(res.columns)}
    ordered = sorted(
        groups.values(),
        key=lambda g: (
            _RANK.get(g.status, 2),
            order.get(g.cpu, 1 << 30),
            col_order.get((g.mode, g.direction), 1 << 30),
        ),
    )
    full_left, compact_left = DETAIL_BUDGET, COMPACT_BUDGET
    workloads_left = MAX_FULL_WORKLOADS
    for i, g in enumerate(ordered):
        if full_left > 0 and workloads_left > 0:
            text = _detail(res, g, full=True)
            full_left -= len(text)
            workloads_left -= min(len(g.cells), MAX_WORKLOADS)
        elif compact_left > 0:
            text = _detail(res, g, full=False)
            compact_left -= len(text)
        else:
            rest = ordered[i:]
            n = sum(len(x.cells) for x in rest)
            yield (
                f'<p class="card sub" id="details-more">&hellip; and {len(rest)} more '
                f"heat-map squares ({n} cells) not detailed here, to keep this report small: "
                "their records are in results.json and cells/*.json.</p>"
            )
            return
        yield text


def iter_html(res: RunResults) -> Iterator[str]:
    """The report, piece by piece (see :func:`write_html`)."""
    groups = res.groups()
    counts = res.counts
    title = (
        f"sdematrix report: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
        f"{counts.get('error', 0)} error, {counts.get('skip', 0)} skip"
    )
    yield (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="sdematrix {_e(__version__)}">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>"
    )
    yield _header(res)
    yield _problems(res)
    yield _heatmap(res, groups)
    yield (
        '<h2 id="details" style="margin-top:28px">Cell details '
        '<span class="sub" style="font-size:13px;font-weight:400">(failures first; '
        "click a square to open it)</span></h2>"
    )
    yield _isa_legend()
    yield from _details(res, groups)
    yield _metadata(res)
    warnings = res.all_warnings()
    if warnings:
        yield (
            '<section class="card"><h2>Report warnings</h2><ul class="warn">'
            + "".join(f"<li>{_e(w)}</li>" for w in warnings[:MAX_PROBLEMS])
            + (
                _more(len(warnings) - MAX_PROBLEMS, "warnings")
                if len(warnings) > MAX_PROBLEMS
                else ""
            )
            + "</ul></section>"
        )
    yield (
        f'<footer>Generated from <span class="mono">{_e(res.directory)}</span> by '
        f"sdematrix.report {_e(__version__)} (self-contained: no scripts, no external "
        "resources).</footer></main></body></html>\n"
    )


def render_html(res: RunResults) -> str:
    return "".join(iter_html(res))


def write_html(results_dir: str | Path | RunResults, dest: str | Path) -> Path:
    """Render `results_dir` to one self-contained HTML file at `dest`; return its path.

    Raises :class:`~sdematrix.results.load.ResultsDirError` (one line) when
    `results_dir` is not a results directory and
    :class:`~sdematrix.errors.OutputDirError` when `dest` cannot be written."""
    from ..errors import OutputDirError

    res = results_dir if isinstance(results_dir, RunResults) else load_results(results_dir)
    out = Path(dest)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(iter_html(res))
        os.replace(tmp, out)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputDirError(f"cannot write HTML report {out}: {e.strerror or e}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return out
