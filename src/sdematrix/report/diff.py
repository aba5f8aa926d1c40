"""What changed between two runs' results directories.

Cells are matched by their full name (``cpu.mode.direction.key_bits.length``).
A :class:`DiffReport` lists, per matched cell:

* **status changes**, worst news first: a cell that passed (or was skipped /
  not run, or is new) and now fails or errors is a *new failure*;
* **path moves**: the chosen path differs (both runs reported one);
* **mix changes** beyond a relative `threshold` (default 10 %) *and* an
  absolute floor `min_abs` (default 16 instructions, so 3 -> 5 is not news):
  total instructions, per vector width (none / xmm / ymm / zmm), per encoding
  (legacy / vex / evex); a width or encoding going from 0 to >0 (or back) is
  always reported; ISA sets that appear or disappear (only when both runs
  have full mix files: the summaries hold only the top sets);
* cells **added** / **removed** (an added cell that fails is a new failure).

Exit-code semantics (:attr:`DiffReport.exit_code`): 0 no regressions, 1
regressions (new failures or path moves).  Bad input (a directory that is not
a results directory) raises :class:`~sdematrix.results.load.ResultsDirError`,
exit code 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..results.load import CellResult, RunResults, load_results

__all__ = [
    "DiffReport",
    "MixChange",
    "PathMove",
    "StatusChange",
    "diff",
    "diff_results",
    "render_text",
]

BAD = ("fail", "error")
DEFAULT_THRESHOLD = 0.10
DEFAULT_MIN_ABS = 16


@dataclass(frozen=True)
class StatusChange:
    cell: str
    old: str | None  # None: the cell is new
    new: str
    reason: str | None  # first reason of the new outcome

    @property
    def regression(self) -> bool:
        return self.new in BAD and self.old not in BAD

    @property
    def improvement(self) -> bool:
        return self.old in BAD and self.new not in BAD


@dataclass(frozen=True)
class PathMove:
    cell: str
    old: str
    new: str
    expected: str | None  # the new run's expected path


@dataclass(frozen=True)
class MixChange:
    cell: str
    metric: str  # "total" | "width:ymm" | "encoding:evex" | "isa_set:AVX512_VAES_512"
    old: int
    new: int

    @property
    def kind(self) -> str:
        if self.old == 0 and self.new > 0:
            return "appeared"
        if self.new == 0 and self.old > 0:
            return "disappeared"
        return "grew" if self.new > self.old else "shrank"

    def describe(self) -> str:
        name = self.metric.split(":", 1)[-1]
        if self.metric.startswith("isa_set:"):
            word = "new ISA set" if self.kind == "appeared" else "ISA set gone"
            return f"{word} {name} ({self.old:,} -> {self.new:,})"
        if self.kind in ("appeared", "disappeared"):
            return f"{name} {self.old:,} -> {self.new:,} ({self.kind})"
        pct = 100.0 * (self.new - self.old) / self.old
        return f"{name} {self.old:,} -> {self.new:,} ({pct:+.1f}%)"


@dataclass
class DiffReport:
    old_dir: Path
    new_dir: Path
    threshold: float
    old_cells: int = 0
    new_cells: int = 0
    status_changes: list[StatusChange] = field(default_factory=list)
    path_moves: list[PathMove] = field(default_factory=list)
    mix_changes: list[MixChange] = field(default_factory=list)
    added: list[tuple[str, str, str | None]] = field(default_factory=list)  # name, status, path
    removed: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def new_failures(self) -> list[StatusChange]:
        return [s for s in self.status_changes if s.regression]

    @property
    def regressions(self) -> list[str]:
        """One line per regressed *cell*: new failures (with the path move of
        the same cell, if any, on the same line), then path moves of cells
        that did not newly fail.  So the count is a count of cells."""
        moves = {p.cell: p for p in self.path_moves}
        out = []
        for s in self.new_failures:
            line = f"new {s.new}: {s.cell} ({s.old or 'new cell'} -> {s.new})"
            p = moves.pop(s.cell, None)
            if p is not None:
                line += f"; path moved {p.old} -> {p.new}"
            out.append(line + (f": {s.reason}" if s.reason else ""))
        out += [f"path moved: {p.cell} {p.old} -> {p.new}" for p in moves.values()]
        return out

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    @property
    def changed(self) -> bool:
        return bool(
            self.status_changes or self.path_moves or self.mix_changes or self.added or self.removed
        )


def _rel(old: int, new: int) -> float:
    return abs(new - old) / old if old else float("inf")


def _counter_changes(
    cell: str,
    prefix: str,
    old: dict[str, int],
    new: dict[str, int],
    keys: tuple[str, ...],
    threshold: float,
    min_abs: int,
) -> list[MixChange]:
    out: list[MixChange] = []
    for k in keys:
        a, b = int(old.get(k, 0)), int(new.get(k, 0))
        if a == b:
            continue
        if (a == 0) != (b == 0) or (abs(b - a) >= min_abs and _rel(a, b) > threshold):
            out.append(MixChange(cell, f"{prefix}:{k}", a, b))
    return out


def _mix_changes(o: CellResult, n: CellResult, threshold: float, min_abs: int) -> list[MixChange]:
    out: list[MixChange] = []
    ta, tb = o.total_instructions, n.total_instructions
    if ta is None or tb is None:
        return out
    if ta != tb and abs(tb - ta) >= min_abs and _rel(ta, tb) > threshold:
        out.append(MixChange(o.name, "total", ta, tb))
    wa, wb = o.by_width or {}, n.by_width or {}
    out += _counter_changes(
        o.name, "width", wa, wb, ("none", "xmm", "ymm", "zmm"), threshold, min_abs
    )
    ea = dict(o.mix.overall.encoding) if o.mix else (o.mix_summary or {}).get("by_encoding") or {}
    eb = dict(n.mix.overall.encoding) if n.mix else (n.mix_summary or {}).get("by_encoding") or {}
    out += _counter_changes(
        o.name, "encoding", ea, eb, ("legacy", "vex", "evex", "other"), threshold, min_abs
    )
    if o.mix is not None and n.mix is not None:
        sa, sb = o.mix.overall.isa_set, n.mix.overall.isa_set
        for k in sorted(set(sb) - set(sa)):
            out.append(MixChange(o.name, f"isa_set:{k}", 0, int(sb[k])))
        for k in sorted(set(sa) - set(sb)):
            out.append(MixChange(o.name, f"isa_set:{k}", int(sa[k]), 0))
    return out


def diff_results(
    old: RunResults,
    new: RunResults,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_abs: int = DEFAULT_MIN_ABS,
) -> DiffReport:
    rep = DiffReport(old.directory, new.directory, threshold, len(old.cells), len(new.cells))
    olds = {c.name: c for c in old.cells}
    news = {c.name: c for c in new.cells}
    for name, n in news.items():
        o = olds.get(name)
        if o is None:
            rep.added.append((name, n.status, n.path))
            if n.status in BAD:
                rep.status_changes.append(
                    StatusChange(name, None, n.status, n.reasons[0] if n.reasons else None)
                )
            continue
        if o.status != n.status:
            rep.status_changes.append(
                StatusChange(name, o.status, n.status, n.reasons[0] if n.reasons else None)
            )
        if o.path and n.path and o.path != n.path:
            rep.path_moves.append(PathMove(name, o.path, n.path, n.expected_path))
        rep.mix_changes += _mix_changes(o, n, threshold, min_abs)
    for name, o in olds.items():
        if name not in news:
            rep.removed.append((name, o.status, o.path))

    def order(s: StatusChange) -> tuple[int, int, str]:
        # new failures first (fail before error), then other changes, improvements last
        if s.regression:
            return (0, 0 if s.new == "fail" else 1, s.cell)
        return (2 if s.improvement else 1, 0, s.cell)

    rep.status_changes.sort(key=order)
    return rep


def diff(
    old_dir: str | Path,
    new_dir: str | Path,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_abs: int = DEFAULT_MIN_ABS,
) -> DiffReport:
    """Compare two results directories (raises ResultsDirError on bad input)."""
    if not 0 <= threshold:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    return diff_results(
        load_results(old_dir), load_results(new_dir), threshold=threshold, min_abs=min_abs
    )


def _clip(s: str, n: int = 200) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def render_text(rep: DiffReport) -> str:
    lines = [f"sdematrix diff: {rep.old_dir} -> {rep.new_dir}"]
    lines.append(
        f"  cells: {rep.old_cells} old, {rep.new_cells} new; {len(rep.added)} added, "
        f"{len(rep.removed)} removed, {len(rep.status_changes)} status changes, "
        f"{len(rep.path_moves)} path moves, "
        f"{len({m.cell for m in rep.mix_changes})} cells with mix changes"
    )
    regs = rep.regressions
    if regs:
        lines += ["", f"REGRESSIONS ({len(regs)}):"] + [f"  {_clip(r, 2000)}" for r in regs]
    others = [s for s in rep.status_changes if not s.regression]
    if others:
        lines += ["", "Other status changes:"]
        for s in others:
            tag = "fixed" if s.improvement else "changed"
            lines.append(f"  {tag:8s} {s.cell}: {s.old or 'new cell'} -> {s.new}")
    if rep.path_moves:
        lines += ["", "Path moves:"]
        for p in rep.path_moves:
            exp = f" (expected {p.expected})" if p.expected else ""
            lines.append(f"  {p.cell}: {p.old} -> {p.new}{exp}")
    if rep.mix_changes:
        lines += ["", f"Mix changes (beyond {rep.threshold:.0%}):"]
        by_cell: dict[str, list[MixChange]] = {}
        for m in rep.mix_changes:
            by_cell.setdefault(m.cell, []).append(m)
        for cell, ms in by_cell.items():
            lines.append(f"  {cell}: " + "; ".join(m.describe() for m in ms))
    if rep.added:
        lines += ["", "Added cells:"] + [
            f"  + {n} ({s}{', ' + p if p else ''})" for n, s, p in rep.added
        ]
    if rep.removed:
        lines += ["", "Removed cells:"] + [
            f"  - {n} (was {s}{', ' + p if p else ''})" for n, s, p in rep.removed
        ]
    lines.append("")
    if regs:
        lines.append(f"verdict: {len(regs)} regression(s) (exit 1)")
    elif rep.changed:
        lines.append("verdict: changes, no regressions (exit 0)")
    else:
        lines.append("verdict: no changes (exit 0)")
    return "\n".join(lines) + "\n"
