"""Executed instructions -> a :class:`~sdematrix.evidence.mix.Mix` and its chip
check: the one builder (:func:`build_checked_mix`) every backend that observes
raw instruction bytes (ptrace, QEMU) and ``sdematrix exec`` use.

Each backend reports, per distinct executed address, the instruction's bytes,
how many times it ran, and a way to name the address (its own symboliser);
the builder decodes the bytes (iced-x86, :mod:`sdematrix.evidence.decode`),
names the address, accounts the executions in the mix and gives every
function of the mix its run-time address range.

The chip check: every distinct executed instruction is checked against the
model's ISA with :func:`sdematrix.evidence.decode.chip_check`, one
:class:`Violation` per offending address.  ptrace and QEMU call
:func:`checked_mix`, exec's whole-run check
(:func:`sdematrix.evidence.exec_check.whole_checked_mix`) hands the same
builder its records already named, so a mix from any of them is judged by
the same rules (QEMU 7.2 runs LZCNT as BSR on a Westmere model without a
fault: only this check sees it).  :func:`mix_from_executed` is the builder
without the check.

Given the model, the mix records what the model executes: an encoding the
model runs as an older instruction (TZCNT as BSF without BMI1, see
:data:`sdematrix.evidence.decode.LEGACY_FORMS`) is accounted as that instruction and
counted in ``Mix.legacy_forms``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..backends.base import Violation
from ..spec.models import CpuModel
from .decode import Insn, as_executed, chip_check, decode, legacy_form
from .mix import Mix
from .symbols import Location

__all__ = [
    "MAX_VIOLATIONS",
    "Executed",
    "Judged",
    "Located",
    "as_bsf_meta",
    "build_checked_mix",
    "checked_mix",
    "judge_encoding",
    "mix_from_executed",
    "zero_source_as_bsf",
]

# Violations kept per run: one per offending address, and a run that breaks
# the model everywhere needs no more than this many lines to say so.
MAX_VIOLATIONS = 200

# (address, the instruction's bytes) -> where it ran; the bytes decide where
# a maps union has two images at the address (symbols.Symbolizer)
Locate = Callable[[int, bytes], Location]
# One distinct executed instruction, named: (address, bytes, executions, location)
Located = tuple[int, bytes, int, Location]


@dataclass(frozen=True)
class Executed:
    """One distinct executed instruction: its address, its bytes (at least the
    whole instruction when the backend has them), how often it ran, and the
    symboliser of the address space it ran in."""

    address: int
    code: bytes
    count: int
    locate: Locate


class Judged(NamedTuple):
    """One encoding, judged once: as decoded, as the model executes it, the
    chip-check reason (None: legal, or no model) and the legacy-form label."""

    insn: Insn
    ran: Insn
    why: str | None
    label: str | None


def judge_encoding(code: bytes, model: CpuModel | None, check: bool = True) -> Judged:
    """Decode `code` (its first instruction) and judge it against `model`."""
    insn = decode(code)
    lf = legacy_form(insn, model) if model is not None and insn.legacy is not None else None
    return Judged(
        insn,
        as_executed(insn, model) if lf is not None else insn,
        chip_check(insn, model) if check and model is not None else None,
        lf.label if lf is not None else None,
    )


def build_checked_mix(
    source: str,
    located: Iterable[Located],
    model: CpuModel | None,
    *,
    check: bool = True,
    limit: int = MAX_VIOLATIONS,
    isa_in_reason: bool = False,
    visit: Callable[[int, Insn, Location], None] | None = None,
) -> tuple[Mix, list[Violation]]:
    """The one builder of mixes and their chip check (see the module doc):
    `located` in execution-record order, each record (address, bytes,
    executions, location).  Each distinct encoding (the first 15 bytes, all
    that decode reads) is decoded and judged once; executions are summed per
    (image, function, form) and handed to the Mix once per key, in first-
    execution order (the counts one call per record gives).  `check`: the
    chip check against `model`, the first `limit` violations kept;
    `isa_in_reason`: a reason ends with the instruction's ISA set (``...; ISA
    set AVX2``, as ``sdematrix exec`` reports it); `visit(index, insn,
    location)` sees every record's instruction as decoded."""
    judged: dict[bytes, Judged] = {}
    acc: dict[tuple[str, str, str, str, str, str, str], int] = {}
    ranges: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    legacy: dict[str, int] = {}
    violations: list[Violation] = []
    for i, (addr, code, n, loc) in enumerate(located):
        key = code[:15]
        j = judged.get(key)
        if j is None:
            j = judged[key] = judge_encoding(key, model, check)
        insn, ran, why, label = j
        if label is not None:
            legacy[label] = legacy.get(label, 0) + n
        k = (
            loc.image,
            loc.function,
            ran.mnemonic,
            ran.encoding,
            ran.width,
            ran.isa_set,
            ran.isa_ext,
        )
        acc[k] = acc.get(k, 0) + n
        ranges.setdefault((loc.function, loc.image), (loc.lo, loc.hi))
        if why is not None and len(violations) < limit:
            violations.append(
                Violation(
                    reason=f"{why}; ISA set {insn.isa_set}" if isa_in_reason else why,
                    address=addr,
                    function=loc.function,
                    image=loc.image,
                    mnemonic=insn.mnemonic,
                    bytes_hex=code[: insn.length].hex(),
                )
            )
        if visit is not None:
            visit(i, insn, loc)
    mix = Mix(source=source)
    for (image, function, mnem, enc, width, isa_set, isa_ext), n in acc.items():
        mix.add_instruction(
            image=image,
            function=function,
            mnemonic=mnem,
            encoding=enc,
            width=width,
            count=n,
            isa_set=isa_set,
            isa_ext=isa_ext,
        )
    for fm in mix.functions:
        fm.lo, fm.hi = ranges.get((fm.name, fm.image), (None, None))
    mix.legacy_forms.update(legacy)
    return mix, violations


def _located(executed: Iterable[Executed]) -> Iterator[Located]:
    for ex in executed:
        yield ex.address, ex.code, ex.count, ex.locate(ex.address, ex.code)


def mix_from_executed(
    source: str,
    executed: Iterable[Executed],
    on_insn: Callable[[Executed, Insn, Location], None] | None = None,
    model: CpuModel | None = None,
) -> Mix:
    """A new Mix (``source`` "ptrace" / "qemu" ...) holding `executed`, in
    order, as `model` executes it (legacy forms, see the module doc; None:
    as decoded), without the chip check (:func:`build_checked_mix`).  A
    function's range (``lo``/``hi``) is the one its first instruction's
    location gave.  ``on_insn`` sees every instruction (as decoded, at its
    address); ``meta`` is left for the caller."""
    if on_insn is None:
        return build_checked_mix(source, _located(executed), model, check=False)[0]
    seen = list(executed)

    def visit(i: int, insn: Insn, loc: Location) -> None:
        ex = seen[i]
        on_insn(ex, decode(ex.code, ex.address), loc)

    return build_checked_mix(source, _located(seen), model, check=False, visit=visit)[0]


def checked_mix(
    source: str,
    executed: Iterable[Executed],
    model: CpuModel | None,
    limit: int = MAX_VIOLATIONS,
    *,
    isa_in_reason: bool = False,
) -> tuple[Mix, list[Violation]]:
    """:func:`mix_from_executed` plus the chip check against `model` (None:
    no check): every distinct executed instruction the model cannot execute
    gives one Violation (address, function, image, mnemonic, bytes), the
    first `limit` of them in execution-record order (:func:`build_checked_mix`)."""
    return build_checked_mix(
        source, _located(executed), model, limit=limit, isa_in_reason=isa_in_reason
    )


def zero_source_as_bsf(
    zeros: Iterable[tuple[int, int, int]],
    codes_at: Callable[[int, int], Iterable[bytes]],
    locate_in: Callable[[int], Locate],
    model: CpuModel | None,
) -> list[dict[str, Any]]:
    """The tracer's ``tzcnt_zero`` records (space, address, executions with a
    zero source) on a model that executes TZCNT as BSF (no BMI1,
    :data:`sdematrix.evidence.decode.LEGACY_FORMS`): the tracer ran those
    executions as the model does (tracer/tzcnt.c: BSF of zero keeps the
    destination and sets ZF), so the program took the model's path; one
    entry per address (function, image, address, executions), for the
    verdict to say so.  Not violations: whether the destination's value
    matters is the program's business (glibc's printf("%f", 0.5) counts the
    trailing zeros of a zero limb, and prints the same either way).
    `codes_at(space, address)` gives the bytes recorded there (JIT code
    rewritten at an address has more than one: the TZCNT among them is the
    one the tracer saw with a zero source)."""
    out: list[dict[str, Any]] = []
    if model is None:
        return out
    for space, addr, n in zeros:
        code = next(
            (
                code
                for code in codes_at(space, addr)
                if (lf := legacy_form(decode(code, addr), model)) is not None and lf.new == "TZCNT"
            ),
            None,
        )
        if code is None:
            continue
        loc = locate_in(space)(addr, code)
        out.append({"function": loc.function, "image": loc.image, "address": addr, "executions": n})
    return out


def as_bsf_meta(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`zero_source_as_bsf`'s entries as meta: the executions run as BSF
    (``tzcnt_zero_as_bsf``) and where, one "FUNCTION (IMAGE)" each
    (``tzcnt_zero_as_bsf_at``; JUnit joins a list with spaces)."""
    return {
        "tzcnt_zero_as_bsf": sum(z["executions"] for z in runs),
        "tzcnt_zero_as_bsf_at": [
            f"{z['function']} ({z['image'].rsplit('/', 1)[-1]})" for z in runs
        ],
    }
