"""Decode x86-64 instructions into the fields a :class:`~sdematrix.evidence.mix.Mix` and the
chip check need, on top of the iced-x86 decoder.

iced gives mnemonic, encoding, operand registers/memory sizes and the CPUID
features an instruction needs (iced's ``CpuidFeature`` names, which is also the
vocabulary of ``CpuModel.isa``).  From those we derive, best effort, the XED
style group names SDE prints (``isa_set`` such as ``AVX512_VAES_256`` and
``isa_ext`` such as ``AVX512EVEX``), so that mixes from different backends can
be compared on the same rows.  iced has no AVX10 labels: an EVEX ymm
instruction reports ``AVX512VL`` and the model's ``max_vector_bits`` decides
whether zmm is allowed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache

import iced_x86 as iced

from ..spec.models import CpuModel

__all__ = [
    "BASELINE_FEATURES",
    "ENCODING_NAMES",
    "FEATURE_NAMES",
    "HINT_NOP_CODES",
    "LEGACY_FORMS",
    "Insn",
    "LegacyForm",
    "as_executed",
    "chip_check",
    "decode",
    "decode_many",
    "isa_groups",
    "legacy_form",
    "width_bits",
]

# Features every x86-64 CPU has: a chip check never reports them.  (The x86-64
# baseline: 8086..486 integer ISA, long mode, x87, MMX, SSE, SSE2, CMOV, CX8,
# FXSAVE, SYSCALL, TSC, CLFLUSH, multi-byte NOP, PAUSE (a NOP on anything older).)
BASELINE_FEATURES: frozenset[str] = frozenset(
    {
        "INTEL8086",
        "INTEL186",
        "INTEL286",
        "INTEL386",
        "INTEL486",
        "X64",
        "CPUID",
        "FPU",
        "FPU287",
        "FPU387",
        "MMX",
        "SSE",
        "SSE2",
        "CMOV",
        "CX8",
        "FXSR",
        "SYSCALL",
        "SEP",
        "TSC",
        "CLFSH",
        "MULTIBYTENOP",
        "PAUSE",
    }
)

# Encodings in the reserved-NOP ("hint NOP") space that iced tags with the
# feature that gave them a meaning, but that a CPU without that feature executes
# as a NOP: the chip check accepts them on every model (iced Code names).
#
# * ENDBR64 (F3 0F 1E FA), ENDBR32 (F3 0F 1E FB): CET indirect-branch
#   tracking.  Intel SDM vol. 2 ENDBR64: "this instruction is a NOP on
#   processors that do not support CET"; XED (datafiles/cet/cet-nop-remove.xed.txt)
#   decodes F3 0F 1E /7 with RM 2/3 as NOP (isa-set PPRO) when CET=0.  gcc's
#   -fcf-protection (Ubuntu's default) puts one at every function entry.
# * RDSSPD/RDSSPQ (F3 [REX.W] 0F 1E /1, mod = 11): CET shadow stack.  SDM:
#   "This opcode is a NOP when CET shadow stacks are not enabled and on
#   processors that do not support CET"; XED's CET=0 table has the same NOP.
#   glibc reads the shadow-stack pointer this way (setjmp, swapcontext).
# * CLDEMOTE (NP 0F 1C /0, memory form): SDM CLDEMOTE: "On processors which do
#   not support the CLDEMOTE instruction (including legacy hardware) the
#   instruction will be treated as a NOP."
# * PREFETCHIT0/PREFETCHIT1 (0F 18 /7 and /6, RIP-relative only): PREFETCHI
#   lives in the 0F 18 /4-/7 reserved-NOP space (SDM vol. 2 opcode map, group
#   16); iced decodes the same ModRM with a non-RIP base as RESERVEDNOP and
#   binutils (the PREFETCHI patch, 2022) disassembles it as nop.
#
# Handled elsewhere, so not listed:
# * multi-byte NOP 0F 1F /0 and the 0F 0D, 0F 18-1F reserved NOPs iced decodes as
#   NOP / RESERVEDNOP (feature MULTIBYTENOP, in BASELINE_FEATURES), including
#   the MPX space 0F 1A/1B (BNDMK, BNDCL, ...: iced's default decoder does not
#   decode MPX, and without MPX these are NOPs: SDM BNDMK "retains legacy
#   behavior (NOP)"); PAUSE (F3 90, a NOP before SSE2; feature PAUSE, baseline).
# * prefixes that turn into hints: BND (F2) on CALL/RET/JMP/Jcc (MPX branch
#   prefix, ignored without MPX, SDM vol. 1 ch. 17 "Intel MPX Support for
#   Pointer Operations with Branching") and NOTRACK (3E) on indirect CALL/JMP
#   (CET-IBT): iced reports the plain branch's features for these.
#
# Not a hint NOP: PREFETCHW (0F 0D /1).  XED files it under PREFETCH_NOP on
# every Intel chip from the Pentium Pro ("not subject to chip-check because of
# prior implementation as NOP", datafiles/xed-chips.txt), but the SDM gives it
# a CPUID flag (PRFCHW) that only later Intel parts enumerate, and some
# pre-Nehalem 64-bit Intel CPUs are reported not to accept it (a public Q&A on
# Windows 8.1's PrefetchW requirement: "may not be supported in some older
# 64-bit Intel processors predating Nehalem"): the chip check keeps requiring
# PREFETCHW, as the shipped models list it from Broadwell on.
HINT_NOP_CODES: frozenset[int] = frozenset(
    {
        iced.Code.ENDBR64,
        iced.Code.ENDBR32,
        iced.Code.RDSSPD_R32,
        iced.Code.RDSSPQ_R64,
        iced.Code.CLDEMOTE_M8,
        iced.Code.PREFETCHIT0_M8,
        iced.Code.PREFETCHIT1_M8,
    }
)


@dataclass(frozen=True)
class LegacyForm:
    """An encoding that a model without `feature` executes as a different,
    older instruction (XED calls these "dual encoding instructions": the chip
    decides which of two instructions the bytes are)."""

    feature: str  # iced CpuidFeature name the model must have for the new meaning
    new: str  # the instruction the bytes are on a model with `feature` ("TZCNT")
    executes_as: str  # ... and what a model without it executes ("BSF")
    isa_set: str  # XED isa-set of the old instruction ("I386")
    isa_ext: str  # XED extension of the old instruction ("BASE")
    features: tuple[str, ...]  # iced features of the old instruction
    same_result: bool  # True: legal (same result, see `differs`); False: a violation
    differs: str  # how the old instruction's result differs
    source: str  # where this is written down

    @property
    def label(self) -> str:
        """How the mix's legacy_forms table names it: "TZCNT as BSF"."""
        return f"{self.new} as {self.executes_as}"


# Encodings whose meaning depends on the model: on a model with `feature`
# they are the new instruction, on one without it the old one, silently (no
# #UD).  The chip check judges them by what the model executes; the mix records
# the old instruction and counts it under `legacy_forms` (iced Code names).
#
# The class, from XED's list of dual-encoding instructions (src/common/
# xed-chip-modes.c, table isa2op: "depending on the host, a given encoding
# can be interpreted as two different instructions"), entry by entry:
#   P4 (PAUSE, F3 90, else NOP): PAUSE is in every x86-64 CPU (baseline).
#   PREFETCHIT (0F 18 /6 /7), CLDEMOTE (0F 1C /0), MPXMODE (0F 1A/1B),
#   CET (ENDBR, RDSSP), IBHF (F3 REX.W 0F 1E F8): the old meaning is a NOP,
#   see HINT_NOP_CODES (iced decodes IBHF and the MPX space as RESERVEDNOP).
#   PREFETCHRST (0F 18 /4, MOVRS): iced 1.21 decodes it as RESERVEDNOP.
#   MODE_SHORT_UD0: only the length of UD0 changes; it faults either way.
#   LZCNT, TZCNT, WBNOINVD: this table.
#
# * TZCNT (F3 0F BC) without BMI1 executes as BSF.  Intel SDM vol. 2B TZCNT:
#   "On processors that do not support TZCNT, the instruction byte encoding is
#   executed as BSF."  XED datafiles/hswbmi/tzcnt-isa.xed.txt: the pattern
#   "0x0F 0xBC refining_f3 TZCNT=0" is ICLASS BSF (ISA_SET I386), and
#   xed-chip-modes.c sets TZCNT=1 only on chips with ISA set BMI1.  For a
#   non-zero source both give the index of the lowest set bit; for a zero
#   source TZCNT returns the operand size and sets CF, BSF sets ZF and leaves
#   the destination undefined (SDM BSF; AMD documents it unchanged).  gcc
#   emits `rep bsf` for __builtin_ctz at -march=x86-64 because the result is
#   the same wherever ctz is defined (non-zero input); glibc's printf of a
#   double runs one.  Legal, and counted under legacy_forms.
#   Where the tracer sees a zero source it runs the instruction as BSF (the
#   destination kept, tracer/tzcnt.c), as the model would: see docs/EXEC.md.
# * LZCNT (F3 0F BD) without LZCNT (Intel: Haswell on; AMD: ABM, K10 on)
#   executes as BSR.  Intel SDM vol. 2A LZCNT: "LZCNT differs from BSR" and
#   "on processors that do not support LZCNT, the instruction byte encoding is
#   executed as BSR."  XED datafiles/hsw/lzcnt-isa.xed.txt: "0x0F 0xBD
#   f3_refining_prefix LZCNT=0" is BSR.  BSR returns the index of the highest
#   set bit, LZCNT the number of leading zeros (operand size - 1 - index):
#   the result differs for every non-zero input, so running it is a violation
#   with its own message.
# * WBNOINVD (F3 0F 09) without WBNOINVD executes as WBINVD: XED
#   datafiles/wbnoinvd/wbnoinvd-isa.xed.txt ("0x0F 0x09 WBNOINVD=0" is WBINVD)
#   and xed-chip-modes.c ("replacing a previous WBINVD").  Both write back all
#   modified lines; WBINVD also invalidates them, which software observes only
#   as time.  Privileged (CPL 0): a user program faults (#GP) either way.
_TZCNT_AS_BSF = LegacyForm(
    feature="BMI1",
    new="TZCNT",
    executes_as="BSF",
    isa_set="I386",
    isa_ext="BASE",
    features=("INTEL386",),
    same_result=True,
    differs="for a zero source BSF leaves the destination and sets ZF, TZCNT returns "
    "the operand size and sets CF",
    source="Intel SDM vol. 2B TZCNT; XED datafiles/hswbmi/tzcnt-isa.xed.txt",
)
_LZCNT_AS_BSR = LegacyForm(
    feature="LZCNT",
    new="LZCNT",
    executes_as="BSR",
    isa_set="I386",
    isa_ext="BASE",
    features=("INTEL386",),
    same_result=False,
    differs="BSR returns the index of the highest set bit, LZCNT the count of leading zeros",
    source="Intel SDM vol. 2A LZCNT; XED datafiles/hsw/lzcnt-isa.xed.txt",
)
_WBNOINVD_AS_WBINVD = LegacyForm(
    feature="WBNOINVD",
    new="WBNOINVD",
    executes_as="WBINVD",
    isa_set="I486REAL",
    isa_ext="BASE",
    features=("INTEL486",),
    same_result=True,
    differs="WBINVD also invalidates the caches (only slower)",
    source="XED datafiles/wbnoinvd/wbnoinvd-isa.xed.txt, src/common/xed-chip-modes.c",
)
LEGACY_FORMS: dict[int, LegacyForm] = {
    iced.Code.TZCNT_R16_RM16: _TZCNT_AS_BSF,
    iced.Code.TZCNT_R32_RM32: _TZCNT_AS_BSF,
    iced.Code.TZCNT_R64_RM64: _TZCNT_AS_BSF,
    iced.Code.LZCNT_R16_RM16: _LZCNT_AS_BSR,
    iced.Code.LZCNT_R32_RM32: _LZCNT_AS_BSR,
    iced.Code.LZCNT_R64_RM64: _LZCNT_AS_BSR,
    iced.Code.WBNOINVD: _WBNOINVD_AS_WBINVD,
}


_WIDTH_BY_BYTES = {16: "xmm", 32: "ymm", 64: "zmm"}
_WIDTH_ORDER = {"none": 0, "xmm": 1, "ymm": 2, "zmm": 3}
_WIDTH_BITS = {"none": 0, "xmm": 128, "ymm": 256, "zmm": 512}


def _enum_names(module: object) -> dict[int, str]:
    return {v: k for k, v in vars(module).items() if k.isupper() and isinstance(v, int)}


FEATURE_NAMES = _enum_names(iced.CpuidFeature)
_MNEMONIC_NAMES = {
    v: k.upper()
    for k, v in vars(iced.Mnemonic).items()
    if not k.startswith("_") and isinstance(v, int)
}
ENCODING_NAMES = {
    iced.EncodingKind.LEGACY: "legacy",
    iced.EncodingKind.VEX: "vex",
    iced.EncodingKind.EVEX: "evex",
}
_FORMATTER = iced.Formatter(iced.FormatterSyntax.INTEL)
_FORMATTER.use_pseudo_ops = False  # "pclmulqdq xmm0,xmm1,0", not "pclmullqlqdq"

# iced feature -> XED isa-set stem for EVEX forms (suffixed _128/_256/_512/_SCALAR).
_EVEX_STEM = {
    "VAES": "AVX512_VAES",
    "VPCLMULQDQ": "AVX512_VPCLMULQDQ",
    "GFNI": "AVX512_GFNI",
}
# iced base-ISA features -> XED isa-set names (isa_ext BASE / LONGMODE).
_BASE_SET = {
    "INTEL8086": "I86",
    "INTEL186": "I186",
    "INTEL286": "I286",
    "INTEL386": "I386",
    "INTEL486": "I486REAL",
    "X64": "I86",
    "CMOV": "CMOV",
    "CPUID": "I386",
    "MULTIBYTENOP": "FAT_NOP",
    "PAUSE": "PAUSE",
    "CX8": "PENTIUMREAL",
    "TSC": "PENTIUMREAL",
    "FPU": "X87",
    "FPU287": "X87",
    "FPU387": "X87",
}
_LEGACY_EXT = {"SSE4_1": "SSE4", "SSE4_2": "SSE4", "SSSE3": "SSSE3", "SSE3": "SSE3"}
_LEGACY_SET = {"SSE4_1": "SSE4", "SSE4_2": "SSE42"}


@dataclass(frozen=True)
class Insn:
    """One decoded instruction."""

    address: int
    length: int
    mnemonic: str  # upper case, e.g. "VAESENC"
    encoding: str  # "legacy" | "vex" | "evex" | "other"
    width: str  # "none" | "xmm" | "ymm" | "zmm": widest vector operand
    isa_set: str  # XED-style, best effort: "AVX512_VAES_256", "AES", "I86", ...
    isa_ext: str  # XED-style, best effort: "AVX512EVEX", "AES", "BASE", ...
    features: tuple[str, ...]  # iced CpuidFeature names, e.g. ("AVX512VL", "VAES")
    text: str  # Intel-syntax disassembly
    # True for an encoding that executes as a NOP on a CPU without its feature
    # (ENDBR64, RDSSPQ, CLDEMOTE, ...: see HINT_NOP_CODES): legal on every model.
    hint_nop: bool = False
    # The older instruction these bytes are on a model without the feature
    # (TZCNT -> BSF ...: see LEGACY_FORMS), None for every other encoding.
    legacy: LegacyForm | None = None

    @property
    def width_bits(self) -> int:
        return _WIDTH_BITS[self.width]


def width_bits(width: str) -> int:
    """Bits of a width name: "zmm" -> 512, "none" -> 0."""
    return _WIDTH_BITS[width]


def _reg_width(reg: int) -> str | None:
    """The width name of a vector register (xmm/ymm/zmm), None for any other."""
    if iced.RegisterExt.is_zmm(reg):
        return "zmm"
    if iced.RegisterExt.is_ymm(reg):
        return "ymm"
    if iced.RegisterExt.is_xmm(reg):
        return "xmm"
    return None


# OpCodeInfo.l (the L / L'L value the decoded form is defined with) -> width.
_WIDTH_BY_L = {0: "xmm", 1: "ymm", 2: "zmm"}


def _width(ins: iced.Instruction, encoding: str) -> str:
    """The widest vector length `ins` operates at: the widest of

    * every vector register operand, the VSIB index register included
      (``vpgatherqd ymm1{k1}, [rax+zmm2*4]`` reads a zmm: it is a 512-bit
      instruction, EVEX.L'L = 10, though its destination is a ymm);
    * the vector length the encoding selects (VEX.L, EVEX.L'L), for VEX/EVEX
      forms that use vector registers at all.  iced resolves L'L into the
      instruction's Code, so ``op_code().l`` is the encoded length, and for a
      packed register-register EVEX form with EVEX.b = 1 (embedded rounding /
      SAE) the 512-bit form whose L'L bits carry the rounding mode (Intel SDM
      vol. 2, "Intel AVX-512 Encoding": with EVEX.b set on a register-only
      packed form, L'L is the rounding control and the vector length is
      512).  Forms the SDM marks LIG (scalar
      ``vaddss xmm1, xmm2, xmm3, {rn-sae}``, ``vcvtsi2ss``, ``vucomiss``...) ignore
      L'L, so only their operands count: xmm.  This catches 512-bit forms whose
      registers are all narrower, e.g. ``vcvtqq2ps ymm1, [rax]{1to8}``;
    * a vector load/store's memory operand (a VEX/EVEX form whose only vector
      operand is memory); XSAVE-like blocks of legacy code don't count.

    Opmask-only VEX instructions (KMOVQ, KADDQ: VEX.L1 selects the operation,
    not a vector length) use no vector register and stay "none".
    """
    best = "none"

    def widen(w: str | None) -> None:
        nonlocal best
        if w is not None and _WIDTH_ORDER[w] > _WIDTH_ORDER[best]:
            best = w

    has_vector_reg = False
    for i in range(ins.op_count):
        kind = ins.op_kind(i)
        if kind == iced.OpKind.REGISTER:
            w = _reg_width(ins.op_register(i))
        elif kind == iced.OpKind.MEMORY and ins.is_vsib:
            w = _reg_width(ins.memory_index)
        else:
            continue
        has_vector_reg = has_vector_reg or w is not None
        widen(w)
    if has_vector_reg and encoding in ("vex", "evex"):
        op_code = ins.op_code()
        if not op_code.is_lig:
            widen(_WIDTH_BY_L.get(op_code.l))
    if has_vector_reg or encoding in ("vex", "evex"):
        for i in range(ins.op_count):
            if ins.op_kind(i) == iced.OpKind.MEMORY:
                size = iced.MemorySizeExt.size(ins.memory_size)
                widen(_WIDTH_BY_BYTES.get(size))
    return best


# Instructions XED files under LONGMODE; iced marks every 64-bit-operand form X64.
_LONGMODE_ONLY = frozenset({"CDQE", "CQO", "MOVSXD", "CMPXCHG16B", "SWAPGS", "SYSCALL", "SYSRET"})


def isa_groups(
    features: tuple[str, ...], encoding: str, width: str, mnemonic: str = ""
) -> tuple[str, str]:
    """XED-style (isa_set, isa_ext) from iced features, encoding and width."""
    feats = [f for f in features if f != "AVX512VL"]
    fs = set(features)
    if encoding == "evex":
        main = next((f for f in feats if f in _EVEX_STEM), None)
        if main is not None:
            stem = _EVEX_STEM[main]
        else:
            avx512 = [f for f in feats if f.startswith("AVX512")]
            stem = avx512[-1] if avx512 else "AVX512F"
        suffix = {"xmm": "_128", "ymm": "_256", "zmm": "_512"}.get(width, "_SCALAR")
        return stem + suffix, "AVX512EVEX"
    if encoding == "vex":
        if any(f.startswith("AVX512") for f in fs):  # opmask instructions
            stem = next(f for f in feats if f.startswith("AVX512"))
            return stem + "_KOP", "AVX512VEX"
        if "VAES" in fs:
            return "VAES", "VAES"
        if "VPCLMULQDQ" in fs:
            return "VPCLMULQDQ", "VPCLMULQDQ"
        if "AES" in fs:
            return "AVXAES", "AVXAES"
        for name in ("AVX2", "FMA", "F16C", "BMI1", "BMI2", "AVX_VNNI", "AVX"):
            if name in fs:
                if name == "AVX2" and "AVX2GATHER" in fs:
                    return "AVX2GATHER", "AVX2GATHER"
                return name, name
        if feats:
            return feats[0], feats[0]
        return "AVX", "AVX"
    if encoding == "legacy":
        for name in ("AES", "PCLMULQDQ", "SHA", "SSE4_2", "SSE4_1", "SSSE3", "SSE3"):
            if name in fs:
                return _LEGACY_SET.get(name, name), _LEGACY_EXT.get(name, name)
        if "SSE2" in fs:
            return "SSE2", "SSE2"
        if "SSE" in fs:
            return "SSE", "SSE"
        nonbase = [f for f in feats if f not in _BASE_SET]
        if nonbase:
            return nonbase[0], nonbase[0]
        if "X64" in fs and mnemonic in _LONGMODE_ONLY:
            return "LONGMODE", "LONGMODE"
        for f in feats:
            if f in _BASE_SET:
                s = _BASE_SET[f]
                return s, ("X87" if s == "X87" else "BASE")
        return "I86", "BASE"
    return (feats[0] if feats else "OTHER"), "OTHER"


def _from_iced(ins: iced.Instruction) -> Insn:
    encoding = ENCODING_NAMES.get(ins.encoding, "other")
    if ins.is_invalid:
        return Insn(
            address=ins.ip,
            length=max(ins.len, 1),
            mnemonic="INVALID",
            encoding="other",
            width="none",
            isa_set="INVALID",
            isa_ext="INVALID",
            features=(),
            text="(bad)",
        )
    features = tuple(FEATURE_NAMES.get(f, str(f)) for f in ins.cpuid_features())
    width = _width(ins, encoding)
    mnemonic = _MNEMONIC_NAMES.get(ins.mnemonic, str(ins.mnemonic))
    isa_set, isa_ext = isa_groups(features, encoding, width, mnemonic)
    return Insn(
        address=ins.ip,
        length=ins.len,
        mnemonic=mnemonic,
        encoding=encoding,
        width=width,
        isa_set=isa_set,
        isa_ext=isa_ext,
        features=features,
        text=_FORMATTER.format(ins),
        hint_nop=ins.code in HINT_NOP_CODES,
        legacy=LEGACY_FORMS.get(ins.code),
    )


@lru_cache(maxsize=65536)
def _decode_cached(code: bytes) -> Insn:
    ins = iced.Decoder(64, code, ip=0).decode()
    return _from_iced(ins)


def decode(code: bytes, address: int = 0) -> Insn:
    """Decode the first instruction of `code` (up to 15 bytes are looked at) as
    if it sat at `address`.  Undecodable bytes give mnemonic "INVALID".

    Cached on the bytes: the text of an instruction with a RIP-relative operand
    or a branch target is the one decoded at address 0 re-decoded at `address`.
    """
    key = bytes(code[:15])
    insn = _decode_cached(key)
    if address == 0:
        return insn
    text = insn.text
    if insn.mnemonic != "INVALID":
        ins = iced.Decoder(64, key, ip=address).decode()
        if ins.is_ip_rel_memory_operand or ins.flow_control != iced.FlowControl.NEXT:
            text = _FORMATTER.format(ins)
    return replace(insn, address=address, text=text)


def decode_many(code: bytes, address: int = 0) -> Iterator[Insn]:
    """Decode `code` linearly from `address` (a block of straight code)."""
    decoder = iced.Decoder(64, code, ip=address)
    for ins in decoder:
        yield _from_iced(ins)


def _feature_present(feature: str, isa: frozenset[str]) -> bool:
    if feature in BASELINE_FEATURES or feature in isa:
        return True
    if "_OR_" in feature:  # iced's HLE_OR_RTM, SKINIT_OR_SVM: either will do
        return any(part in isa for part in feature.split("_OR_"))
    return False


def legacy_form(insn: Insn, model: CpuModel) -> LegacyForm | None:
    """The older instruction `model` executes `insn` as (TZCNT as BSF on a
    model without BMI1, see `LEGACY_FORMS`), None when it executes `insn`."""
    lf = insn.legacy
    if lf is None or _feature_present(lf.feature, model.isa):
        return None
    return lf


def as_executed(insn: Insn, model: CpuModel | None) -> Insn:
    """`insn` as `model` executes it: a legacy form (`legacy_form`) becomes the
    old instruction (mnemonic, ISA set, features, text), anything else is
    `insn` itself.  What the mix records."""
    lf = legacy_form(insn, model) if model is not None else None
    if lf is None:
        return insn
    new, old = lf.new.lower(), lf.executes_as.lower()
    text = insn.text.replace(new, old, 1) if insn.text.startswith(new) else insn.text
    return replace(
        insn,
        mnemonic=lf.executes_as,
        isa_set=lf.isa_set,
        isa_ext=lf.isa_ext,
        features=lf.features,
        text=text,
        legacy=None,
    )


def legacy_violation(lf: LegacyForm, model_name: str) -> str:
    """The chip-check reason for a legacy form whose result differs."""
    return (
        f"{lf.new} executes as {lf.executes_as} on model {model_name} (no {lf.feature}) "
        f"and returns a different result: {lf.differs}"
    )


def chip_check(insn: Insn, model: CpuModel) -> str | None:
    """Why `insn` cannot execute on `model`, or None when it can.

    Three rules: every CPUID feature the instruction needs (minus the x86-64
    baseline) must be in ``model.isa``; its vector length (see `_width`:
    registers, VSIB index, VEX.L / EVEX.L'L) must fit ``model.max_vector_bits``
    (an AVX10/256 model has AVX512F/VL/... in its isa but no zmm); and the
    register state it uses must be enabled in the model's XCR0.  Hint NOPs
    (`HINT_NOP_CODES`: ENDBR64 and friends) pass on every model.  A legacy
    form (`LEGACY_FORMS`) on a model without its feature is judged as what
    the model executes: legal when the result is the same (TZCNT as BSF),
    else a violation that says what it executes as (LZCNT as BSR).

    Opmask instructions on an AVX10/256 model: "The Converged Vector ISA:
    Intel AVX10" technical paper, order no. 356368, revision 2.0 (December
    2023) removed revision 1.0's 32-bit opmask limit for AVX10/256 (the AVX10
    architecture specification, doc. 784267, changed with it; LLVM followed
    in PR #75571, after enforcing the rev. 1.0 rule in PR #73074).  So the
    64-bit opmask forms (KMOVQ, KADDQ, KSHIFTLQ, KUNPCKDQ, KORTESTQ, ...) are
    legal on AVX10/256 and need only what iced tags them with (AVX512BW, which
    an AVX10 model lists); they use no vector register, so the width rule
    never rejects them.  (Revision 3.0, March 2025, dropped AVX10/256
    altogether; models like gnr256 follow SDE's -gnr256, i.e. revision 2.0.)
    """
    if insn.mnemonic == "INVALID":
        return "undecodable instruction"
    if insn.hint_nop:
        return None
    lf = legacy_form(insn, model)
    if lf is not None:
        return None if lf.same_result else legacy_violation(lf, model.name)
    missing = [f for f in insn.features if not _feature_present(f, model.isa)]
    if missing:
        return f"{'+'.join(missing)} not in model {model.name}"
    if insn.width_bits > model.max_vector_bits:
        return (
            f"{insn.width} operand ({insn.width_bits}-bit) exceeds model {model.name}'s "
            f"{model.max_vector_bits}-bit vectors"
        )
    # The OS must have enabled the register state too (XCR0): EVEX needs
    # opmask + ZMM_Hi256 + Hi16_ZMM (bits 5-7), any ymm needs AVX state (bit
    # 2).  With the state off the CPU raises #UD, whatever CPUID says.
    if insn.encoding == "evex" and model.xcr0 & 0xE0 != 0xE0:
        return (
            f"EVEX instruction but model {model.name}'s XCR0 {model.xcr0:#x} lacks opmask/ZMM state"
        )
    if insn.width in ("ymm", "zmm") and not model.xcr0 & 0x4:
        return f"{insn.width} operand but model {model.name}'s XCR0 {model.xcr0:#x} lacks AVX state"
    # Any VEX-encoded vector or opmask instruction, xmm forms and VZEROUPPER
    # included, raises #UD unless XCR0[2:1] = 11b (Intel SDM vol. 2, 2.8
    # "Exception Classifications of VEX-Encoded Instructions": #UD "If
    # XCR0[2:1] != 11b"; opmask instructions, exception type K20, also need
    # XCR0[7:5] = 111b).  VEX-encoded general-purpose instructions (BMI1,
    # BMI2: ANDN, BZHI, SHLX, ...) use no vector state and are exempt.
    if insn.encoding == "vex" and not _vex_gpr_only(insn):
        if model.xcr0 & 0x6 != 0x6:
            return (
                f"VEX instruction but model {model.name}'s XCR0 {model.xcr0:#x} lacks "
                "SSE/AVX state (XCR0[2:1] != 11b)"
            )
        if any(f.startswith("AVX512") for f in insn.features) and model.xcr0 & 0xE0 != 0xE0:
            return (
                f"opmask instruction but model {model.name}'s XCR0 {model.xcr0:#x} lacks "
                "opmask/ZMM state"
            )
    return None


# VEX-encoded instructions on general-purpose registers only.
_VEX_GPR_FEATURES = frozenset({"BMI1", "BMI2"})


def _vex_gpr_only(insn: Insn) -> bool:
    """True for a VEX form that touches no vector or opmask state (BMI1/BMI2)."""
    own = [f for f in insn.features if f not in BASELINE_FEATURES]
    return bool(own) and all(f in _VEX_GPR_FEATURES for f in own) and insn.width == "none"
