"""Executed instructions -> a :class:`~sdematrix.evidence.mix.Mix`, shared by the
backends that observe raw instruction bytes (ptrace, QEMU).

Each backend reports, per distinct executed address, the instruction's bytes,
how many times it ran, and a way to name the address (its own symboliser);
:func:`mix_from_executed` decodes the bytes (iced-x86, :mod:`sdematrix.evidence.decode`),
names the address, accounts the executions in the mix and gives every
function of the mix its run-time address range.  A backend that must look at
each decoded instruction passes ``on_insn``.

:func:`checked_mix` is that plus the chip check both backends share: every
distinct executed instruction is checked against the model's ISA with
:func:`sdematrix.evidence.decode.chip_check`, one :class:`Violation` per offending
address.  ptrace and QEMU call this one function, so a mix from either is
judged by the same rules (QEMU 7.2 runs LZCNT as BSR on a Westmere model
without a fault: only this check sees it).

Given the model, the mix records what the model executes: an encoding the
model runs as an older instruction (TZCNT as BSF without BMI1, see
:data:`sdematrix.evidence.decode.LEGACY_FORMS`) is accounted as that instruction and
counted in ``Mix.legacy_forms``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..backends.base import Violation
from ..spec.models import CpuModel
from .decode import Insn, as_executed, chip_check, decode, legacy_form
from .mix import Mix
from .symbols import Location

__all__ = [
    "MAX_VIOLATIONS",
    "Executed",
    "checked_mix",
    "mix_from_executed",
    "zero_source_violations",
]

# Violations kept per run: one per offending address, and a run that breaks
# the model everywhere needs no more than this many lines to say so.
MAX_VIOLATIONS = 200

Locate = Callable[[int], Location]


@dataclass(frozen=True)
class Executed:
    """One distinct executed instruction: its address, its bytes (at least the
    whole instruction when the backend has them), how often it ran, and the
    symboliser of the address space it ran in."""

    address: int
    code: bytes
    count: int
    locate: Locate


def mix_from_executed(
    source: str,
    executed: Iterable[Executed],
    on_insn: Callable[[Executed, Insn, Location], None] | None = None,
    model: CpuModel | None = None,
) -> Mix:
    """A new Mix (``source`` "ptrace" / "qemu" ...) holding `executed`, in
    order, as `model` executes it (legacy forms, see the module doc; None:
    as decoded).  A function's range (``lo``/``hi``) is the one its first
    instruction's location gave.  ``on_insn`` sees every instruction (as
    decoded) after it is accounted; ``meta`` is left for the caller."""
    mix = Mix(source=source)
    ranges: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    for ex in executed:
        insn = decode(ex.code, ex.address)
        loc = ex.locate(ex.address)
        ran = insn
        if model is not None and insn.legacy is not None:
            lf = legacy_form(insn, model)
            if lf is not None:
                ran = as_executed(insn, model)
                mix.legacy_forms[lf.label] += ex.count
        mix.add_instruction(
            image=loc.image,
            function=loc.function,
            mnemonic=ran.mnemonic,
            encoding=ran.encoding,
            width=ran.width,
            count=ex.count,
            isa_set=ran.isa_set,
            isa_ext=ran.isa_ext,
        )
        ranges.setdefault((loc.function, loc.image), (loc.lo, loc.hi))
        if on_insn is not None:
            on_insn(ex, insn, loc)
    for fm in mix.functions:
        fm.lo, fm.hi = ranges.get((fm.name, fm.image), (None, None))
    return mix


def checked_mix(
    source: str,
    executed: Iterable[Executed],
    model: CpuModel | None,
    limit: int = MAX_VIOLATIONS,
) -> tuple[Mix, list[Violation]]:
    """:func:`mix_from_executed` plus the chip check against `model` (None:
    no check): every distinct executed instruction the model cannot execute
    gives one Violation (address, function, image, mnemonic, bytes), the
    first `limit` of them in execution-record order."""
    violations: list[Violation] = []

    def check(ex: Executed, insn: Insn, loc: Location) -> None:
        if model is None or len(violations) >= limit:
            return
        why = chip_check(insn, model)
        if why is not None:
            violations.append(
                Violation(
                    reason=why,
                    address=ex.address,
                    function=loc.function,
                    image=loc.image,
                    mnemonic=insn.mnemonic,
                    bytes_hex=ex.code[: insn.length].hex(),
                )
            )

    return mix_from_executed(source, executed, check, model), violations


def zero_source_violations(
    zeros: Iterable[tuple[int, int, int]],
    code_at: Callable[[int, int], bytes | None],
    locate_in: Callable[[int], Locate],
    model: CpuModel | None,
) -> list[Violation]:
    """The tracer's ``tzcnt_zero`` records (space, address, executions with a
    zero source) as violations on a model that executes TZCNT as BSF (no
    BMI1, :data:`sdematrix.evidence.decode.LEGACY_FORMS`): there the result differs.
    `code_at(space, address)` gives the recorded bytes."""
    out: list[Violation] = []
    if model is None:
        return out
    for space, addr, n in zeros:
        code = code_at(space, addr)
        if not code:
            continue
        insn = decode(code, addr)
        lf = legacy_form(insn, model)
        if lf is None or lf.new != "TZCNT":
            continue
        loc = locate_in(space)(addr)
        out.append(
            Violation(
                reason=f"TZCNT of zero executes as BSF on {model.name}: result differs "
                f"({n} execution{'s' if n != 1 else ''} with a zero source seen)",
                address=addr,
                function=loc.function,
                image=loc.image,
                mnemonic=insn.mnemonic,
                bytes_hex=code[: insn.length].hex(),
            )
        )
    return out
