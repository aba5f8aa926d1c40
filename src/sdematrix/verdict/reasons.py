"""Why a verdict is what it is: one :class:`Reason` per broken rule.

A reason is its text (what JUnit, results.json and the reports print, so a
``Reason`` *is* a ``str``) plus the :class:`Kind` of rule it breaks, set by the
judge that wrote it (:mod:`sdematrix.verdict.cell`, :mod:`sdematrix.verdict.exec_judge`).
Backends give the reasons they are unusable here the same way (a host
limit or a broken tool).  Consumers -- the pytest plugin filing reasons
under its four checks, the run summary and the markdown report grouping
cells that could not run here, the doctor telling a host limit from a broken
backend -- read the kind, never the text.

String operations on a reason (slicing, ``+``, ``join``) give plain text:
the kind belongs to the reason as the judge wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Self

__all__ = ["CANNOT_RUN", "Kind", "Reason", "cannot_run_why", "kinds_of", "reasons_from_json"]

#: Prefix of the error reason of a cell the user named (``--cpu``/``--backend``)
#: that no backend can run here; the rest of the reason says why.
CANNOT_RUN = "cannot run here: "


class Kind(StrEnum):
    """Which rule a reason reports broken (its value is what results.json stores)."""

    CANNOT_RUN = (
        "cannot-run-here"  # no backend can present the model here (skip / named-cell error)
    )
    HOST_LIMIT = "host-limit"  # a backend unusable for what this host lacks (doctor: not broken)
    BACKEND_ERROR = "backend-error"  # the run (or a backend's self-test) broke: the tool is broken
    MATRIX = "matrix"  # the matrix states no expected path for the cell
    DISPATCH = "dispatch"  # the path the dispatcher chose, the CPU it detected
    MIX = "mix"  # the expected path's instruction-mix signature; an empty region
    CHIP = "chip-check"  # an instruction outside the model
    ANSWER = "known-answer"  # the probe's status and output digest
    EXIT = "exit-status"  # `sdematrix exec`: the program's exit status
    EXPECTATION = "expectation"  # `sdematrix exec --expect`: a broken expectation


class Reason(str):
    """A reason's text, carrying the :class:`Kind` of rule it reports."""

    __slots__ = ("kind",)
    kind: Kind

    def __new__(cls, text: str, kind: Kind) -> Self:
        self = super().__new__(cls, text)
        self.kind = Kind(kind)
        return self

    def __repr__(self) -> str:
        return f"Reason({str.__repr__(self)}, {self.kind.value!r})"

    def __reduce__(self) -> tuple[type[Reason], tuple[str, Kind]]:  # pickling (xdist, copy)
        return (Reason, (str(self), self.kind))


def cannot_run_why(status: str, reasons: Sequence[str]) -> str | None:
    """Why a cell could not run on this host (its first reason, without the
    :data:`CANNOT_RUN` prefix a named cell's error carries); None for a cell
    whose first reason is of another kind."""
    first = reasons[0] if reasons else None
    if not isinstance(first, Reason) or first.kind is not Kind.CANNOT_RUN:
        return None
    return first.removeprefix(CANNOT_RUN) if status == "error" else str(first)


def kinds_of(reasons: Iterable[str]) -> list[str]:
    """The kinds of `reasons`, as results.json stores them ("" for plain text)."""
    return [r.kind.value if isinstance(r, Reason) else "" for r in reasons]


def reasons_from_json(texts: Sequence[str], kinds: Sequence[str] | None, status: str) -> list[str]:
    """results.json's ``reasons`` with their ``reason_kinds`` (absent in files
    written before kinds existed: then a skip's reason, the only reason a
    skip has, is of kind cannot-run-here, and a named cell's cannot-run error
    is known by its :data:`CANNOT_RUN` prefix -- the one place text is read,
    for old files only)."""
    known = {k.value for k in Kind} | {""}
    if (
        kinds is not None
        and len(kinds) == len(texts)
        and all(isinstance(k, str) and k in known for k in kinds)
    ):
        return [Reason(t, Kind(k)) if k else t for t, k in zip(texts, kinds, strict=True)]
    out: list[str] = list(texts)
    if out and (status == "skip" or (status == "error" and out[0].startswith(CANNOT_RUN))):
        out[0] = Reason(out[0], Kind.CANNOT_RUN)
    return out
