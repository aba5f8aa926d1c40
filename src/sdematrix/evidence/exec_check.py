"""The whole-run chip check of ``sdematrix exec``, fast for ~10^5 distinct
instructions.

Same decode, same chip check and same mix as
:func:`sdematrix.evidence.mix_build.checked_mix` (which `sdematrix run` and the
stepped regions use): every instruction is decoded by
:func:`sdematrix.evidence.decode.decode` and judged by
:func:`sdematrix.evidence.decode.chip_check`, and the mix is filled through
:meth:`sdematrix.evidence.mix.Mix.add_instruction`.  What differs is only the
bookkeeping, for a run that records each instruction once:

* one iced-x86 decoder over all recorded bytes finds each instruction's
  length; decode and chip check then run once per distinct *encoding* (the
  exact bytes), not once per address (a whole process has ~150k distinct
  addresses but a fraction of that many distinct encodings);
* addresses are symbolised in sorted order: an address inside the function
  range the previous lookup returned reuses it, so the symbol tables are
  searched about once per function;
* the mix is accumulated per (image, function, form) and handed to the Mix
  once per key, in first-execution order (the same counts, fewer calls).

Legacy forms (TZCNT as BSF on a model without BMI1) are accounted as the
instruction the model executes and counted in ``Mix.legacy_forms``, as
:func:`sdematrix.evidence.mix_build.mix_from_executed` does.

Violations keep the execution order of the records (the first listed is the
first executed), at most :data:`sdematrix.evidence.mix_build.MAX_VIOLATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import iced_x86 as iced

from ..backends.base import Violation
from ..spec.models import CpuModel
from .decode import Insn, as_executed, chip_check, decode, legacy_form
from .mix import Mix
from .mix_build import MAX_VIOLATIONS
from .symbols import Location

__all__ = ["Recorded", "whole_checked_mix"]

# (space, address, bytes, executions)
Recorded = tuple[int, int, bytes, int]
_MAXLEN = 15


def _lengths(items: Sequence[Recorded]) -> list[int]:
    """Each record's instruction length (0: undecodable within its bytes)."""
    parts = []
    for _s, _a, code, _n in items:
        c = code[:_MAXLEN]
        parts.append(c + b"\x00" * (_MAXLEN - len(c)))
    buf = b"".join(parts)
    dec = iced.Decoder(64, buf, ip=0)
    ins = iced.Instruction()
    out = []
    for k, (_s, _a, code, _n) in enumerate(items):
        dec.position = k * _MAXLEN
        dec.ip = 0
        dec.decode_out(ins)
        n = ins.len
        out.append(n if not ins.is_invalid and 0 < n <= min(len(code), _MAXLEN) else 0)
    return out


def _locations(
    items: Sequence[Recorded], locate_in: Callable[[int], Callable[[int], Location]]
) -> dict[tuple[int, int], Location]:
    """(space, address) -> Location, one symbol lookup per function range."""
    out: dict[tuple[int, int], Location] = {}
    keys = sorted({(s, a) for s, a, _c, _n in items})
    cur_space, cur = -1, None
    locate: Callable[[int], Location] | None = None
    for s, a in keys:
        if s != cur_space:
            cur_space, cur, locate = s, None, locate_in(s)
        if cur is None or cur.lo is None or cur.hi is None or not cur.lo <= a < cur.hi:
            assert locate is not None
            cur = locate(a)
        out[(s, a)] = cur
    return out


def whole_checked_mix(
    source: str,
    items: Sequence[Recorded],
    locate_in: Callable[[int], Callable[[int], Location]],
    model: CpuModel | None,
    limit: int = MAX_VIOLATIONS,
    isa_in_reason: bool = False,
) -> tuple[Mix, list[Violation]]:
    """The mix of `items` (in execution-record order) and the chip check of
    every one against `model` (None: no check); see the module doc.
    `isa_in_reason`: a violation's reason ends with the instruction's ISA
    set (``...; ISA set AVX2``), as ``sdematrix exec`` reports it."""
    lengths = _lengths(items)
    locs = _locations(items, locate_in)
    # bytes -> (insn as decoded, as the model executes it, chip-check reason,
    # legacy-form label or None)
    judged: dict[bytes, tuple[Insn, Insn, str | None, str | None]] = {}
    legacy: dict[str, int] = {}
    acc: dict[tuple[str, str, str, str, str, str, str], int] = {}
    ranges: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    violations: list[Violation] = []
    for (s, a, code, n), ln in zip(items, lengths, strict=True):
        key = code[:ln] if ln else code[:_MAXLEN]
        got = judged.get(key)
        if got is None:
            insn = decode(key)
            lf = legacy_form(insn, model) if model is not None and insn.legacy else None
            got = (
                insn,
                as_executed(insn, model) if lf else insn,
                chip_check(insn, model) if model is not None else None,
                lf.label if lf else None,
            )
            judged[key] = got
        insn, ran, why, label = got
        if label is not None:
            legacy[label] = legacy.get(label, 0) + n
        loc = locs[(s, a)]
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
            if isa_in_reason:
                why = f"{why}; ISA set {insn.isa_set}"
            violations.append(
                Violation(
                    reason=why,
                    address=a,
                    function=loc.function,
                    image=loc.image,
                    mnemonic=insn.mnemonic,
                    bytes_hex=code[: insn.length].hex(),
                )
            )
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
