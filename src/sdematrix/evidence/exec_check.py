"""The whole-run chip check of ``sdematrix exec``, fast for ~10^5 distinct
instructions: the bookkeeping in front of the one builder,
:func:`sdematrix.evidence.mix_build.build_checked_mix` (which `sdematrix run`'s
:func:`~sdematrix.evidence.mix_build.checked_mix` and the stepped regions use
too), so the decode, the chip check, the legacy forms and the mix are the
same code.  What this adds, for a run that records each instruction once
(JIT code: once per window of bytes at an address, see :func:`_cut`):

* one iced-x86 decoder over all recorded bytes finds each instruction's
  length, and each record is cut to its instruction: the builder decodes and
  judges once per distinct *encoding* (the exact bytes), not once per
  recorded 15-byte window (a whole process has ~150k distinct addresses but
  a fraction of that many distinct encodings);
* addresses are symbolised in sorted order: an address inside the function
  range the previous lookup returned reuses it, so the symbol tables are
  searched about once per function.

Violations keep the execution order of the records (the first listed is the
first executed), at most :data:`sdematrix.evidence.mix_build.MAX_VIOLATIONS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import iced_x86 as iced

from ..backends.base import Violation
from ..spec.models import CpuModel
from .mix import Mix
from .mix_build import MAX_VIOLATIONS, Locate, Located, build_checked_mix
from .symbols import Location

__all__ = ["Recorded", "merge_versions", "whole_checked_mix"]

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
    items: Sequence[Recorded], locate_in: Callable[[int], Locate]
) -> dict[tuple[int, int, bytes], Location]:
    """(space, address, bytes) -> Location, one symbol lookup per function
    range (a range that overlapping maps share is looked up per address)."""
    out: dict[tuple[int, int, bytes], Location] = {}
    keys = sorted({(s, a, c) for s, a, c, _n in items})
    cur_space, cur = -1, None
    locate: Locate | None = None
    for s, a, c in keys:
        if s != cur_space:
            cur_space, cur, locate = s, None, locate_in(s)
        if (
            cur is None
            or cur.shared
            or cur.lo is None
            or cur.hi is None
            or not cur.lo <= a < cur.hi
        ):
            assert locate is not None
            cur = locate(a, c)
        out[(s, a, c)] = cur
    return out


def whole_checked_mix(
    source: str,
    items: Sequence[Recorded],
    locate_in: Callable[[int], Locate],
    model: CpuModel | None,
    limit: int = MAX_VIOLATIONS,
    isa_in_reason: bool = False,
) -> tuple[Mix, list[Violation], int]:
    """The mix of `items` (in execution-record order), the chip check of
    every one against `model` (None: no check) and how many distinct
    instructions they hold, built by
    :func:`sdematrix.evidence.mix_build.build_checked_mix` from the records
    cut to their instruction and named (see the module doc).
    `isa_in_reason`: a violation's reason ends with the instruction's ISA
    set (``...; ISA set AVX2``), as ``sdematrix exec`` reports it."""
    located = _cut(items, locate_in)
    mix, violations = build_checked_mix(
        source, located, model, limit=limit, isa_in_reason=isa_in_reason
    )
    return mix, violations, len(located)


def merge_versions(items: Sequence[Recorded], locate_in: Callable[[int], Locate]) -> list[Recorded]:
    """Stepped records with their counts, where the tracer may have kept
    more than one per address: it starts a new record when the 15 bytes it
    reads there change (tracer.c: rec_at; JIT code rewritten, an image loaded
    where another ran).  Records of one address that are one instruction of
    one image (their windows differ only past the instruction) are one, at
    the first, their counts summed; the rest are left as they are."""
    per_addr = Counter((s, a) for s, a, _c, _n in items)
    several = [it for it in items if per_addr[(it[0], it[1])] > 1]
    if not several:
        return list(items)
    lengths = dict(zip(several, _lengths(several), strict=True))
    locs = _locations(several, locate_in)
    out: list[Recorded] = []
    at: dict[tuple[int, int, bytes, str], int] = {}
    for s, a, code, n in items:
        if per_addr[(s, a)] == 1:
            out.append((s, a, code, n))
            continue
        ln = lengths[(s, a, code, n)]
        key = (s, a, code[:ln] if ln else code, locs[(s, a, code)].image)
        if key in at:
            k = at[key]
            out[k] = (s, a, out[k][2], out[k][3] + n)
        else:
            at[key] = len(out)
            out.append((s, a, code, n))
    return out


def _cut(items: Sequence[Recorded], locate_in: Callable[[int], Locate]) -> list[Located]:
    """The records cut to their instruction and named, one per (space,
    address, instruction, image): the tracer records JIT code once per window
    of bytes at an address, so an instruction whose following bytes changed
    comes twice and is kept once, while new code at an address is kept, and
    so is the same instruction of an image loaded where an unloaded one ran
    (its own record, named by its own bytes: symbols.Symbolizer)."""
    lengths = _lengths(items)
    locs = _locations(items, locate_in)
    out: list[Located] = []
    kept: set[tuple[int, int, bytes, str]] = set()
    for (s, a, code, n), ln in zip(items, lengths, strict=True):
        cut = code[:ln] if ln else code[:_MAXLEN]
        loc = locs[(s, a, code)]
        if (s, a, cut, loc.image) in kept:
            continue
        kept.add((s, a, cut, loc.image))
        out.append((a, cut, n, loc))
    return out
