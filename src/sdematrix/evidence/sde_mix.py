"""Parse an Intel SDE ``-mix`` output file into a :class:`~sdematrix.evidence.mix.Mix`.

The file (format "Mix output version 10", checked against a real SDE 9.24 file in
``tests/data/sde``) is a sequence of comment-headed sections.  The parts used:

* ``# $dynamic-counts`` under ``# EMIT_DYNAMIC_STATS FOR TID n``: one histogram
  per thread -> ``mix.threads``.  (A ``$dynamic-counts`` block under
  ``# EMIT_GLOBAL_DYNAMIC_STATS`` also exists; it can be empty and is ignored.)
* ``# $dynamic-counts-for-function: NAME  IMG: PATH at [0xLO, 0xHI)  PCT%``: one
  histogram per hot function.  SDE prints them per thread and, after the global
  section starts, once more summed over threads; the summed ones are used when
  present, else the per-thread ones are merged.  -> ``mix.functions`` and, summed
  per image, ``mix.images``.  SDE lists only its top functions (the real 9.24
  fixture: 10 functions = 99.49 %), so ``meta["function_coverage"]`` says which
  fraction of the total they cover, and :func:`forbid_coverage_problem` says
  when an image-scoped forbid check cannot be decided on them.
* ``# $global-dynamic-counts`` (the last block): the whole run -> ``mix.overall``.

Every block holds rows ``NAME  COUNT`` and is closed by ``*total N``.  Rows whose
name starts with ``*`` are groups: ``*isa-ext-X``, ``*isa-set-X``, ``*category-X``
go to the matching counters; the rest (``*avx512``, ``*mem-read-8``, ``*ilen-3``,
...) are kept for the global block in ``meta["groups"]``.  Other rows are
instructions: XED iclass names in SDE's default mode (``VAESENC``, ``ADD_LOCK``)
or XED iform names with ``-iform`` (``VAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512``).
:func:`classify` turns either into the ``(MNEMONIC, encoding, width)`` form key.

Anything that breaks the structure (a row that is not ``NAME COUNT``, a block
that never reaches ``*total``, no global block) raises
:class:`~sdematrix.errors.MixFileError` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import MixFileError
from ..inputs import MAX_MIX_BYTES, read_input
from .mix import Form, FunctionMix, Mix, MixCounts, Selector

__all__ = [
    "classify",
    "forbid_coverage_problem",
    "parse_mix_file",
    "parse_mix_text",
    "unlisted_count",
]

# --------------------------------------------------------------------------
# Row classification
# --------------------------------------------------------------------------

# An iform operand token: a register/memory/immediate kind followed by a
# lower-case or digit type suffix (XMMdq, ZMMu128, GPRv, MEMb, IMM8, MASKmskw,
# RELBRd) -- the suffix is what separates XMMdq from the bare ``XMM`` that is part
# of the iclass ``MOVSD_XMM``.
_OPERAND_TOKEN = re.compile(
    r"^(?:GPR|MEM|IMM|XMM|YMM|ZMM|MASK|RELBR|MMX|BND|TMM|SEG|CR|DR|ST|X87|PTR|Or)"
    r"[a-z0-9]"
)
# Bare register / fixed operand tokens that appear in iforms (IN_AL_IMMb,
# SHL_GPRv_CL, XCHG_GPRv_OrAX) and XED's trailing opcode tokens (MOV_GPRv_GPRv_89,
# MOVSD_XMM_XMMsd_XMMsd_0F10, SHL_GPRv_IMMb_C1r4) -- only looked for after the
# first token, since an iclass such as ADD is itself valid hex.
_FIXED_TOKENS = frozenset(
    {"AL", "AX", "EAX", "RAX", "CL", "DX", "ONE", "ST0", "STi", "AGEN", "FINAL", "XED"}
)
_OPCODE_TOKEN = re.compile(r"^(?:0F)?[0-9A-F]{2}(?:r[0-7])?$")
_EVEX_SUFFIX = re.compile(r"^(?:AVX512|AVX10)")
_VEC_TOKEN = re.compile(r"^([XYZ])MM[a-z0-9]")

# Opmask instructions are VEX-encoded although XED gives their iforms the
# _AVX512 suffix.
_KMASK = re.compile(
    r"^K(?:AND|ANDN|OR|XOR|XNOR|NOT|MOV|SHIFTL|SHIFTR|TEST|ORTEST|ADD|UNPCK)[BWDQ]+$"
)
# V-prefixed iclasses that are not vector instructions (VMX / SVM / verify).
_V_NOT_VEX = frozenset(
    {
        "VERR",
        "VERW",
        "VMCALL",
        "VMLAUNCH",
        "VMRESUME",
        "VMXOFF",
        "VMXON",
        "VMREAD",
        "VMWRITE",
        "VMPTRLD",
        "VMPTRST",
        "VMCLEAR",
        "VMFUNC",
        "VMRUN",
        "VMLOAD",
        "VMSAVE",
        "VMMCALL",
    }
)
# VEX-encoded general-purpose instructions (BMI1/BMI2).
_GPR_VEX = frozenset(
    {
        "ANDN",
        "BEXTR",
        "BLSI",
        "BLSR",
        "BLSMSK",
        "BZHI",
        "MULX",
        "PDEP",
        "PEXT",
        "RORX",
        "SARX",
        "SHLX",
        "SHRX",
    }
)
# Iclasses that exist only with EVEX encoding: in SDE's default (iclass) mode
# these are the only ones whose encoding the name alone settles.
_EVEX_ONLY = re.compile(
    r"^V(?:PTERNLOG[DQ]|P(?:AND|ANDN|OR|XOR)[DQ]|MOVDQ[AU](?:8|16|32|64)"
    r"|P?(?:BROADCAST|EXTRACT|INSERT|SHUF)[IF](?:32|64)X[248]|PERM[TI]2\w+"
    r"|P?COMPRESS\w*|P?EXPAND\w*|PBLENDM\w+|BLENDM\w+|PCMPU?[BWDQ]|PTESTN?M\w+"
    r"|PMOVM2\w+|PMOV[BWDQ]2M|ALIGN[DQ]|SCALEF\w+|RNDSCALE\w+|GETEXP\w+|GETMANT\w+"
    r"|FIXUPIMM\w+|RANGE\w+|REDUCE\w+|DBPSADBW|PMULTISHIFTQB|PCONFLICT[DQ]"
    r"|PLZCNT[DQ]|RCP14\w+|RSQRT14\w+|PRO[LR]V?[DQ]|PSRAV?Q|PABSQ|P(?:MAX|MIN)[SU]Q"
    r"|PMULLQ|CVTT?P[SD]2U\w+|CVTU\w+|PMOV(?:US|S)?[QDW][BWD]|PSHLDV?\w|PSHRDV?\w"
    r"|PERMB|PERMW|PERMI2B|PDPBUSDS?|PDPWSSDS?|PSHUFBITQMB|PMADD52[LH]UQ)$"
)
# Legacy SSE iclasses that only exist on xmm (for width in iclass mode).
_XMM_ONLY = frozenset(
    {
        "AESENC",
        "AESENCLAST",
        "AESDEC",
        "AESDECLAST",
        "AESIMC",
        "AESKEYGENASSIST",
        "PCLMULQDQ",
        "MOVDQU",
        "MOVDQA",
        "MOVAPS",
        "MOVUPS",
        "MOVAPD",
        "MOVUPD",
        "PSHUFD",
        "PSLLDQ",
        "PSRLDQ",
        "PUNPCKLQDQ",
        "PUNPCKHQDQ",
        "PBLENDW",
        "PINSRQ",
        "PEXTRQ",
        "PINSRD",
        "PEXTRD",
        "PTEST",
        "PSHUFLW",
        "PSHUFHW",
    }
)


def _split_iform(name: str) -> tuple[str, list[str]]:
    """(iclass, tokens after it) for an iform or a bare iclass name."""
    tokens = name.split("_")
    for i in range(1, len(tokens)):
        t = tokens[i]
        if (
            _OPERAND_TOKEN.match(t)
            or t in _FIXED_TOKENS
            or _OPCODE_TOKEN.match(t)
            or _EVEX_SUFFIX.match(t)
        ):
            return "_".join(tokens[:i]), tokens[i:]
    return name, []


@lru_cache(maxsize=8192)
def classify(name: str) -> Form:
    """The ``(MNEMONIC, encoding, width)`` of one SDE instruction row.

    For an iform the width is the widest vector register operand and the
    encoding is EVEX when the iform carries XED's ``_AVX512``/``_AVX10`` suffix
    or a zmm / opmask operand; an iclass-mode row gets its encoding from the
    name alone (EVEX only for EVEX-only iclasses) and width ``none`` unless the
    iclass only exists on xmm or is EVEX-only with a fixed width.
    """
    mnemonic, rest = _split_iform(name.strip())
    mnemonic = mnemonic.upper()
    widths = set()
    has_mask = False
    evex_suffix = False
    for t in rest:
        m = _VEC_TOKEN.match(t)
        if m:
            widths.add(m.group(1))
        elif t.startswith("MASK") and t != "MASK1":
            has_mask = True
        elif _EVEX_SUFFIX.match(t):
            evex_suffix = True
    width = (
        "zmm" if "Z" in widths else "ymm" if "Y" in widths else "xmm" if "X" in widths else "none"
    )

    if _KMASK.match(mnemonic) or mnemonic in _GPR_VEX:
        encoding = "vex"
    elif rest:
        if evex_suffix or width == "zmm" or has_mask:
            encoding = "evex"
        elif mnemonic.startswith("V") and mnemonic not in _V_NOT_VEX:
            encoding = "vex"
        else:
            encoding = "legacy"
    else:  # iclass-mode row: name only
        if _EVEX_ONLY.match(mnemonic):
            encoding = "evex"
        elif mnemonic.startswith("V") and mnemonic not in _V_NOT_VEX:
            encoding = "vex"
        else:
            encoding = "legacy"
        if mnemonic in _XMM_ONLY:
            width = "xmm"
    return (mnemonic, encoding, width)


# --------------------------------------------------------------------------
# File structure
# --------------------------------------------------------------------------

_FUNC_PREFIX = "# $dynamic-counts-for-function: "
# Linear-time pieces of the function header (a single regex with a lazy name
# and a greedy image, ``(.*?)\s+IMG: (.*) at``, backtracks cubically on a
# header that repeats " IMG: "): the name ends at the first whitespace +
# "IMG: ", the image at the last " at [", and the tail is matched anchored.
_IMG_SEP = re.compile(r"\sIMG: ")
_FUNC_TAIL = re.compile(r"(0x[0-9a-fA-F]+), (0x[0-9a-fA-F]+)\)\s+([0-9.]+)%")
_TID = re.compile(r"FOR TID (\d+)")
#: Digits of a count (decimal: a u64 has 20) and of an address (hex: 16).
_COUNT_DIGITS = 20
_ADDRESS_DIGITS = 16


def _count(text: str) -> int | None:
    """A non-negative decimal count of at most _COUNT_DIGITS digits; None
    when it is not one (the caller says which)."""
    if not text.isascii() or not text.isdigit():
        return None
    return int(text) if len(text.lstrip("0")) <= _COUNT_DIGITS else -1


def _address(text: str) -> int:
    """A 0x-prefixed address of at most 16 hex digits (ValueError otherwise)."""
    body = text[2:] if text[:2] in ("0x", "0X") else text
    if len(body.lstrip("0")) > _ADDRESS_DIGITS:
        raise OverflowError("address out of range")
    return int(body, 16)


def _function_header(line: str) -> tuple[str, str, int, int] | None:
    """(name, image, lo, hi) of a ``$dynamic-counts-for-function`` header,
    None if it does not parse; OverflowError for an address out of range."""
    rest = line[len(_FUNC_PREFIX) :]
    sep = _IMG_SEP.search(rest)
    at = rest.rfind(" at [")
    if sep is None or at < sep.end():
        return None
    tail = _FUNC_TAIL.fullmatch(rest[at + 5 :].rstrip())
    if tail is None:
        return None
    name = rest[: sep.start()].rstrip()
    image = rest[sep.end() : at]
    return name, image, _address(tail.group(1)), _address(tail.group(2))


@dataclass
class _Block:
    kind: str  # "thread" | "global-early" | "function" | "global" | "other"
    start: int  # 1-based line number of the header
    counts: MixCounts = field(default_factory=MixCounts)
    groups: dict[str, int] = field(default_factory=dict)
    global_section: bool = False
    tid: int | None = None
    name: str = ""
    image: str = ""
    lo: int | None = None
    hi: int | None = None


def parse_mix_file(path: Path | str) -> Mix:
    """Parse an SDE mix file; MixFileError (one line) if it is unreadable or corrupt."""
    p = Path(path)
    data = read_input(p, what="mix file", limit=MAX_MIX_BYTES, error=MixFileError)
    return parse_mix_text(data.decode("utf-8", errors="replace"), str(p))


class _MixParser:
    """One pass over a mix file's lines: the section context and what has been read.

    :meth:`feed` takes one line; inside a block it goes to :meth:`_block_line`
    (rows up to ``*total``), outside to the header and listing readers.  After the
    last line, :func:`_assemble` checks the structure and builds the :class:`Mix`.
    """

    def __init__(self, source_name: str) -> None:
        self.source_name = source_name
        self.meta: dict[str, object] = {"format": "sde-mix"}
        self.image_addresses: list[dict[str, object]] = []
        self.blocks: list[_Block] = []
        self.cur: _Block | None = None
        self.in_global = False  # past the first EMIT_GLOBAL_* header
        self.ctx_global_dyn = False  # inside EMIT_GLOBAL_DYNAMIC_STATS (not per-thread)
        self.ctx_tid: int | None = None
        self.in_images = False
        self.iform_rows = False

    def fail(self, lineno: int, msg: str) -> MixFileError:
        return MixFileError(f"{self.source_name}:{lineno}: {msg}")

    def feed(self, lineno: int, line: str) -> None:
        """One line, right-stripped."""
        if self.cur is not None:
            self._block_line(lineno, line, self.cur)
            return
        if not line:
            return
        if line[0] != "#":
            if self.in_images:
                self._image_row(lineno, line)
            return  # top-block listings, function totals
        if line.startswith("# $"):
            self.cur = self._block_header(lineno, line)
        elif line.startswith("# EMIT_"):
            self._section_header(lineno, line)
        elif line.startswith("# END_IMAGE_ADDRESSES"):
            self.in_images = False
        elif line.startswith("# Mix output version"):
            self.meta["mix_version"] = line.rsplit(None, 1)[-1]
        elif line.startswith("# Intel(R) SDE version:"):
            self.meta["sde_version"] = line.split(":", 1)[1].strip()

    # -- outside a block ---------------------------------------------------

    def _image_row(self, lineno: int, line: str) -> None:
        """A row of EMIT_IMAGE_ADDRESSES: ``PATH 0xLO 0xHI``."""
        parts = line.rsplit(None, 2)
        if len(parts) != 3:
            return
        try:
            self.image_addresses.append(
                {"image": parts[0], "lo": _address(parts[1]), "hi": _address(parts[2])}
            )
        except OverflowError:
            raise self.fail(lineno, "image address out of range") from None
        except ValueError:
            raise self.fail(lineno, f"bad image address row {line[:80]!r}") from None

    def _block_header(self, lineno: int, line: str) -> _Block:
        """A ``# $...`` line: the block it opens, placed in the current section."""
        if line.startswith("# $dynamic-counts-for-function:"):
            try:
                header = _function_header(line)
            except OverflowError:
                raise self.fail(lineno, "function address out of range") from None
            if header is None:
                raise self.fail(lineno, "unreadable '$dynamic-counts-for-function' header")
            fname, image, lo, hi = header
            return _Block(
                "function",
                lineno,
                global_section=self.in_global,
                tid=self.ctx_tid,
                name=fname,
                image=image.strip(),
                lo=lo,
                hi=hi,
            )
        if line.startswith("# $global-dynamic-counts"):
            return _Block("global", lineno, global_section=True)
        if line.startswith("# $dynamic-counts"):
            kind = "global-early" if self.ctx_global_dyn else "thread"
            return _Block(kind, lineno, global_section=self.in_global, tid=self.ctx_tid)
        return _Block("other", lineno)

    def _section_header(self, lineno: int, line: str) -> None:
        """A ``# EMIT_...`` line: global or per-thread section, image listing or not."""
        if line.startswith("# EMIT_GLOBAL"):
            self.in_global = True
            self.ctx_global_dyn = line.startswith("# EMIT_GLOBAL_DYNAMIC_STATS")
            self.ctx_tid = None
        else:
            self.ctx_global_dyn = False
            m = _TID.search(line)
            if m:
                if len(m.group(1).lstrip("0")) > _COUNT_DIGITS:
                    raise self.fail(lineno, "thread id out of range")
                self.ctx_tid = int(m.group(1))
        self.in_images = line.startswith("# EMIT_IMAGE_ADDRESSES")

    # -- inside a block ----------------------------------------------------

    def _block_line(self, lineno: int, line: str, cur: _Block) -> None:
        if not line:
            return
        if line[0] == "#":
            if line.startswith(("# $", "# END_", "# EMIT_")):
                raise self.fail(
                    lineno,
                    f"block started at line {cur.start} ends without '*total' (truncated?)",
                )
            return  # "# TID n", column headers
        name, n = self._row(lineno, line)
        if name[0] == "*":
            self._group_row(lineno, cur, name, n)
        else:
            form = classify(name)
            if not self.iform_rows and "_" in name and form[0] != name.upper():
                self.iform_rows = True
            cur.counts.forms[form] += n

    def _row(self, lineno: int, line: str) -> tuple[str, int]:
        """A block row ``NAME COUNT``, the count checked."""
        parts = line.split()
        if len(parts) != 2:
            raise self.fail(lineno, f"expected 'NAME COUNT', got {line[:80]!r}")
        name, num = parts
        got = _count(num)
        if got is None:
            if num[:1] == "-" and _count(num[1:]) is not None:
                raise self.fail(lineno, f"negative count in {line[:80]!r}")
            raise self.fail(lineno, f"count is not an integer in {line[:80]!r}")
        if got < 0:
            raise self.fail(lineno, f"count out of range ({len(num)} digits)")
        return name, got

    def _group_row(self, lineno: int, cur: _Block, name: str, n: int) -> None:
        """A ``*...`` row: a group counter, or ``*total`` closing the block."""
        c = cur.counts
        if name == "*total":
            rows = sum(c.forms.values())
            if n < rows:
                # a total can only be >= its own rows; a smaller one is a
                # number cut short (a file truncated inside "*total N")
                raise self.fail(
                    lineno,
                    f"'*total {n}' is smaller than the sum of the block's rows "
                    f"({rows}): truncated?",
                )
            c.total = n
            self.blocks.append(cur)
            self.cur = None
        elif name.startswith("*isa-ext-"):
            c.isa_ext[name[9:]] += n
        elif name.startswith("*isa-set-"):
            c.isa_set[name[9:]] += n
        elif name.startswith("*category-"):
            c.category[name[10:]] += n
        else:
            cur.groups[name[1:]] = cur.groups.get(name[1:], 0) + n


def _function_mixes(blocks: list[_Block]) -> tuple[list[FunctionMix], bool]:
    """The per-function histograms: the global section's if any (else the
    per-thread ones), merged by (name, image, lo); and whether they were global."""
    fblocks = [b for b in blocks if b.kind == "function"]
    global_f = [b for b in fblocks if b.global_section]
    chosen = global_f if global_f else fblocks
    functions: list[FunctionMix] = []
    by_key: dict[tuple[str, str, int | None], FunctionMix] = {}
    for b in chosen:
        key = (b.name, b.image, b.lo)
        fm = by_key.get(key)
        if fm is None:
            fm = FunctionMix(name=b.name, image=b.image, counts=MixCounts(), lo=b.lo, hi=b.hi)
            by_key[key] = fm
            functions.append(fm)
        fm.counts.merge(b.counts)
    return functions, bool(global_f)


def _assemble(p: _MixParser, lineno: int) -> Mix:
    """The end of the file: structure checks, then the :class:`Mix` and its meta."""
    if p.cur is not None:
        raise p.fail(
            lineno, f"file ends inside the block started at line {p.cur.start} (truncated?)"
        )
    globals_ = [b for b in p.blocks if b.kind == "global"]
    if not globals_:
        raise p.fail(
            lineno, "no '# $global-dynamic-counts' block (truncated or not an SDE mix file?)"
        )
    final = globals_[-1]

    mix = Mix(source="sde")
    mix.overall = final.counts
    mix.threads = [b.counts for b in p.blocks if b.kind == "thread"]
    mix.functions, from_global = _function_mixes(p.blocks)
    for fm in mix.functions:
        mix.images.setdefault(fm.image, MixCounts()).merge(fm.counts)

    covered = sum(f.counts.total for f in mix.functions)
    meta = p.meta
    meta.update(
        {
            "iform": p.iform_rows,
            "groups": dict(final.groups),
            "image_addresses": p.image_addresses,
            "function_coverage": (covered / final.counts.total) if final.counts.total else None,
            "function_covered": covered,
            "region_total": final.counts.total,
            "functions_from": "global" if from_global else "threads",
            "unattributed": final.counts.total - sum(final.counts.forms.values()),
            "early_global_totals": [b.counts.total for b in p.blocks if b.kind == "global-early"],
        }
    )
    mix.meta = meta
    return mix


def parse_mix_text(text: str, source_name: str = "<mix>") -> Mix:
    """Parse the text of an SDE mix file (see the module docstring)."""
    parser = _MixParser(source_name)
    lineno = 0
    # split on "\n" only: str.splitlines also breaks at \x0b, \x1c, U+2028 ...,
    # which would shift every line number after one
    for lineno, raw in enumerate(text.split("\n"), start=1):
        parser.feed(lineno, raw.rstrip())
    return _assemble(parser, lineno)


def unlisted_count(mix: Mix, selector: Selector) -> int:
    """How many of the run's instructions matching `selector` are in no
    function of ``mix.functions``: the whole run's count (complete, SDE's
    global block) minus what the listed functions account for.  0 for a mix
    whose every instruction is attributed (ptrace, QEMU: by construction)."""
    listed = sum(selector.count(f.counts) for f in mix.functions)
    return max(selector.count(mix.overall) - listed, 0)


def forbid_coverage_problem(mix: Mix, scope: str, forbid: Sequence[Selector]) -> str | None:
    """Why the `forbid` selectors cannot be judged in `scope` on this mix, or
    None when they can.

    Image scopes are counted from the per-function blocks.  When those do not
    cover the whole region (SDE lists only its top functions), an instruction
    the scope forbids may have run in a function SDE did not list: a count of
    0 in the scope would then be a pass on partial evidence.  The check is
    decidable exactly when every forbidden instruction of the run is in a
    listed function (then the scoped count is exact), which includes the
    case where the complete whole-run count is 0.  Scope ``all`` is the
    complete global block: always decidable."""
    if scope == "all":
        return None
    blind = [(sel, n) for sel in forbid if (n := unlisted_count(mix, sel)) > 0]
    if not blind:
        return None
    covered = sum(f.counts.total for f in mix.functions)
    total = mix.overall.total
    pct = 100.0 * covered / total if total else 0.0
    what = "; ".join(f"{sel.describe()} x{n}" for sel, n in blind[:3])
    return (
        f"forbid check in scope {scope} is undecidable: the per-function counts cover "
        f"{pct:.2f}% of the region ({covered} of {total} instructions) and forbidden "
        f"instructions ran in functions the mix does not list: {what}"
    )
