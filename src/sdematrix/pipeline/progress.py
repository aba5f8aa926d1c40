"""Run progress on the terminal.

On a TTY: one live line, rewritten in place (``\\r``), with counts per status and
the cells in flight.  Otherwise (CI logs, pipes): one plain line per finished
cell, with the first reason for anything that did not pass and, for a
failure or an error, every further reason on its own indented line.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import TextIO

from ..spec.models import Cell
from ..verdict.cell import Outcome

__all__ = ["Progress"]

_LABEL = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skip": "SKIP"}


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.counts: Counter[str] = Counter()
        self.done = 0
        self.running: dict[str, float] = {}
        self._lock = threading.Lock()
        self._width = 0
        self._closed = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def _live(self) -> None:
        c = self.counts
        inflight = ", ".join(list(self.running)[:2])
        more = f" +{len(self.running) - 2}" if len(self.running) > 2 else ""
        line = (
            f"[{self.done}/{self.total}] pass {c['pass']} fail {c['fail']} "
            f"error {c['error']} skip {c['skip']}" + (f" | {inflight}{more}" if inflight else "")
        )
        line = line[:160]
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self._write("\r" + line + " " * pad)

    def start(self, cell: Cell) -> None:
        with self._lock:
            self.running[cell.name] = 0.0
            if self.tty:
                self._live()

    def finish(self, outcome: Outcome) -> None:
        with self._lock:
            self.running.pop(outcome.cell.name, None)
            self.done += 1
            self.counts[outcome.status] += 1
            if self.tty:
                if outcome.status in ("fail", "error"):
                    # keep failures visible above the live line
                    self._write("\r" + " " * self._width + "\r")
                    self._width = 0
                    self._write(self._plain(outcome) + "\n")
                self._live()
            else:
                self._write(self._plain(outcome) + "\n")

    def drop(self, cell: Cell) -> None:
        """A cell that was in flight when the run stopped."""
        with self._lock:
            self.running.pop(cell.name, None)

    def _plain(self, o: Outcome) -> str:
        width = len(str(self.total))
        path = "-" if o.status == "skip" else (o.path or o.expected_path or "-")
        line = (
            f"[{self.done:>{width}}/{self.total}] {_LABEL[o.status]:<5} {o.cell.name} "
            f"({o.backend or '-'}, {path}, {o.duration_s:.1f}s)"
        )
        if o.status != "pass" and o.reasons:
            line += f": {o.message}"
            if o.status in ("fail", "error"):
                # every reason, not only the first: one indented line each
                for r in o.reasons[1:]:
                    line += "\n" + "\n".join("      " + x for x in str(r).splitlines() or [""])
        return line

    def note(self, text: str) -> None:
        with self._lock:
            if self.tty:
                self._write("\r" + " " * self._width + "\r")
                self._width = 0
            self._write(text + "\n")
            if self.tty and self.done < self.total and not self._closed:
                self._live()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self.tty and self._width:
                self._write("\n")
                self._width = 0
