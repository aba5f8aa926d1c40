"""Inline SVG bar charts for the HTML report, generated here by hand.

Why hand-written SVG rather than matplotlib:

* no dependency: the report builder runs wherever ``sdematrix`` runs (CI
  images, the offline Docker image) without pulling ~40 MB of plotting stack;
* crisp at any zoom and tiny (a few hundred bytes per chart), inline in the
  one HTML file, so the report stays self-contained with no fetches;
* testable through the DOM: every bar is an element carrying ``data-label``
  and ``data-value``, so a test (or a headless browser) can check the numbers a
  chart shows instead of comparing pixels;
* deterministic output (no fonts or renderer versions in the loop), so two
  reports of the same results are byte-identical.

The charts are horizontal bar charts (labels on the left read well for ISA-set
names such as ``AVX512_VAES_512``) on a linear scale from 0: the point of the
report is to show which instructions dominate and which are absent, and a log
scale would make 3 ``zmm`` instructions look like 3000.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape

__all__ = [
    "ENCODING_COLOURS",
    "hbar_chart",
    "isa_colour",
    "isa_set_chart",
    "stacked_hbar_chart",
    "width_encoding_chart",
]

FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px"
# One small style sheet per chart instead of a style attribute on every text
# (that was ~90 bytes a label, most of a report's size): the chart still
# renders alone, and the same rules repeated inline in a page do not conflict.
_STYLE = (
    f"<style>svg.chart text{{{FONT};fill:#37474f}}svg.chart .v{{fill:#546e7a}}"
    "svg.chart .b{font-weight:600}svg.chart .n{fill:#78909c}</style>"
)

ENCODING_COLOURS: dict[str, str] = {
    "legacy": "#90a4ae",
    "vex": "#26a69a",
    "evex": "#7e57c2",
    "other": "#d7ccc8",
}

# ISA-set families, checked in order (first match wins): the crypto sets are
# what a path is proven by, so they get the accent colour.
ISA_FAMILIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("crypto", ("AES", "PCLMUL", "GFNI", "SHA", "SM3", "SM4"), "#f9a825"),
    ("avx512/avx10", ("AVX512", "AVX10", "EVEX"), "#7e57c2"),
    ("avx/avx2", ("AVX", "FMA", "F16C"), "#26a69a"),
    ("sse", ("SSE", "SSSE", "MMX"), "#42a5f5"),
)
ISA_OTHER_COLOUR = "#b0bec5"


def isa_family(name: str) -> str:
    up = name.upper()
    for fam, needles, _c in ISA_FAMILIES:
        if any(n in up for n in needles):
            return fam
    return "base"


def isa_colour(name: str) -> str:
    fam = isa_family(name)
    for f, _n, c in ISA_FAMILIES:
        if f == fam:
            return c
    return ISA_OTHER_COLOUR


def _fmt(n: int) -> str:
    return f"{n:,}"


def _clip(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


def _svg_open(width: int, height: int, kind: str, title: str) -> str:
    return (
        f'<svg class="chart" data-chart="{escape(kind)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">'
        f'{_STYLE}<text x="0" y="12" class="b">{escape(title)}</text>'
    )


def hbar_chart(
    rows: Sequence[tuple[str, int]],
    *,
    title: str,
    kind: str,
    colour: str | Callable[[str], str] = "#607d8b",
    max_rows: int = 12,
    width: int = 470,
    label_w: int = 152,
    bar_h: int = 14,
    gap: int = 4,
    total: int | None = None,
) -> str:
    """Bars largest first; rows past `max_rows` fold into one "other (N)" bar.

    `total` (default: the sum of the rows) is what the percentages refer to.
    """
    items = sorted(((str(k), int(v)) for k, v in rows if int(v) > 0), key=lambda r: (-r[1], r[0]))
    if len(items) > max_rows:
        rest = items[max_rows - 1 :]
        items = items[: max_rows - 1] + [(f"other ({len(rest)})", sum(v for _k, v in rest))]
    denom = total if total else sum(v for _k, v in items)
    top = 20
    value_w = 92
    plot_w = width - label_w - value_w
    height = top + max(1, len(items)) * (bar_h + gap) + 2
    out = [_svg_open(width, height, kind, title)]
    if not items:
        out.append(f'<text x="0" y="{top + bar_h - 3}" class="n">no data</text>')
    vmax = max((v for _k, v in items), default=1) or 1
    for i, (label, value) in enumerate(items):
        y = top + i * (bar_h + gap)
        w = max(1.0, plot_w * value / vmax)
        fill = colour(label) if callable(colour) else colour
        pct = f" ({100.0 * value / denom:.1f}%)" if denom else ""
        tip = f"{label}: {_fmt(value)}{pct}"
        out.append(
            f'<text x="{label_w - 6}" y="{y + bar_h - 3}" text-anchor="end" '
            f">{escape(_clip(label, 22))}</text>"
            f'<rect class="bar" data-label="{escape(label)}" data-value="{value}" '
            f'x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" fill="{fill}">'
            f"<title>{escape(tip)}</title></rect>"
            f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}" '
            f'class="v">{escape(_fmt(value) + pct)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def stacked_hbar_chart(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    *,
    title: str,
    kind: str,
    segments: Sequence[str],
    colours: Mapping[str, str],
    width: int = 440,
    label_w: int = 56,
    bar_h: int = 18,
    gap: int = 6,
) -> str:
    """One bar per row (kept even when 0: an absent width is information),
    split into `segments` in the given order; a legend underneath."""
    top = 20
    value_w = 76
    plot_w = width - label_w - value_w
    totals = [sum(int(seg.get(s, 0)) for s in segments) for _r, seg in rows]
    vmax = max(totals, default=0) or 1
    legend_y = top + len(rows) * (bar_h + gap) + 12
    height = legend_y + 6
    out = [_svg_open(width, height, kind, title)]
    for i, ((label, seg), tot) in enumerate(zip(rows, totals, strict=True)):
        y = top + i * (bar_h + gap)
        out.append(
            f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end" '
            f'class="b">{escape(label)}</text>'
        )
        if tot == 0:
            out.append(
                f'<rect class="bar-empty" x="{label_w}" y="{y}" width="{plot_w}" '
                f'height="{bar_h}" fill="none" stroke="#cfd8dc" stroke-dasharray="3 3"/>'
            )
        x = float(label_w)
        for s in segments:
            v = int(seg.get(s, 0))
            if v <= 0:
                continue
            w = max(1.0, plot_w * v / vmax)
            out.append(
                f'<rect class="bar" data-label="{escape(label)}" data-segment="{escape(s)}" '
                f'data-value="{v}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{colours.get(s, "#9e9e9e")}"><title>{escape(f"{label} {s}: {_fmt(v)}")}'
                "</title></rect>"
            )
            x += w
        out.append(
            f'<text x="{x + 4:.1f}" y="{y + bar_h - 5}" class="v">{escape(_fmt(tot))}</text>'
        )
    lx = float(label_w)
    for s in segments:
        out.append(
            f'<rect x="{lx:.0f}" y="{legend_y - 9}" width="10" height="10" rx="2" '
            f'fill="{colours.get(s, "#9e9e9e")}"/>'
            f'<text x="{lx + 14:.0f}" y="{legend_y}" class="v">{escape(s)}</text>'
        )
        lx += 14 + 7 * len(s) + 16
    out.append("</svg>")
    return "".join(out)


def isa_set_chart(isa_sets: Mapping[str, int], *, total: int | None = None) -> str:
    return hbar_chart(
        list(isa_sets.items()),
        title="instructions by ISA set",
        kind="isa-set",
        colour=isa_colour,
        total=total,
    )


def width_encoding_chart(forms: Mapping[tuple[str, str, str], int]) -> str:
    """xmm / ymm / zmm bars, each split by encoding (legacy / VEX / EVEX):
    ymm-VEX vs ymm-EVEX is what tells vaes_avx2 from avx10_256."""
    table: dict[str, dict[str, int]] = {w: {} for w in ("xmm", "ymm", "zmm")}
    scalar = 0
    for (_m, enc, width), n in forms.items():
        if width in table:
            table[width][enc] = table[width].get(enc, 0) + int(n)
        else:
            scalar += int(n)
    return stacked_hbar_chart(
        [(w, table[w]) for w in ("xmm", "ymm", "zmm")],
        title=f"vector instructions by width / encoding (scalar: {_fmt(scalar)})",
        kind="width-encoding",
        segments=("legacy", "vex", "evex", "other"),
        colours=ENCODING_COLOURS,
    )
