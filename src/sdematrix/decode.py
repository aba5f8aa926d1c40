"""Decode x86-64 instructions into the fields a :class:`~sdematrix.mix.Mix` and the
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
from dataclasses import dataclass
from functools import lru_cache

import iced_x86 as iced

from .models import CpuModel

__all__ = [
    "BASELINE_FEATURES",
    "Insn",
    "chip_check",
    "decode",
    "decode_many",
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

_WIDTH_BY_BYTES = {16: "xmm", 32: "ymm", 64: "zmm"}
_WIDTH_ORDER = {"none": 0, "xmm": 1, "ymm": 2, "zmm": 3}
_WIDTH_BITS = {"none": 0, "xmm": 128, "ymm": 256, "zmm": 512}


def _enum_names(module: object) -> dict[int, str]:
    return {v: k for k, v in vars(module).items() if k.isupper() and isinstance(v, int)}


_FEATURE_NAMES = _enum_names(iced.CpuidFeature)
_MNEMONIC_NAMES = {
    v: k.upper()
    for k, v in vars(iced.Mnemonic).items()
    if not k.startswith("_") and isinstance(v, int)
}
_ENCODINGS = {
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

    @property
    def width_bits(self) -> int:
        return _WIDTH_BITS[self.width]


def width_bits(width: str) -> int:
    """Bits of a width name: "zmm" -> 512, "none" -> 0."""
    return _WIDTH_BITS[width]


def _width(ins: iced.Instruction, encoding: str) -> str:
    best = "none"
    has_vector_reg = False
    for i in range(ins.op_count):
        kind = ins.op_kind(i)
        if kind == iced.OpKind.REGISTER:
            reg = ins.op_register(i)
            if iced.RegisterExt.is_zmm(reg):
                w = "zmm"
            elif iced.RegisterExt.is_ymm(reg):
                w = "ymm"
            elif iced.RegisterExt.is_xmm(reg):
                w = "xmm"
            else:
                continue
            has_vector_reg = True
            if _WIDTH_ORDER[w] > _WIDTH_ORDER[best]:
                best = w
    # A vector load/store's memory operand counts too (e.g. a VEX/EVEX form whose
    # only vector operand is memory); XSAVE-like blocks of legacy code don't.
    if has_vector_reg or encoding in ("vex", "evex"):
        for i in range(ins.op_count):
            if ins.op_kind(i) == iced.OpKind.MEMORY:
                size = iced.MemorySizeExt.size(ins.memory_size)
                w = _WIDTH_BY_BYTES.get(size, "none")
                if _WIDTH_ORDER[w] > _WIDTH_ORDER[best]:
                    best = w
    return best


# Instructions XED files under LONGMODE; iced marks every 64-bit-operand form X64.
_LONGMODE_ONLY = frozenset({"CDQE", "CQO", "MOVSXD", "CMPXCHG16B", "SWAPGS", "SYSCALL", "SYSRET"})


def _groups(
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
    encoding = _ENCODINGS.get(ins.encoding, "other")
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
    features = tuple(_FEATURE_NAMES.get(f, str(f)) for f in ins.cpuid_features())
    width = _width(ins, encoding)
    mnemonic = _MNEMONIC_NAMES.get(ins.mnemonic, str(ins.mnemonic))
    isa_set, isa_ext = _groups(features, encoding, width, mnemonic)
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
    return Insn(
        address=address,
        length=insn.length,
        mnemonic=insn.mnemonic,
        encoding=insn.encoding,
        width=insn.width,
        isa_set=insn.isa_set,
        isa_ext=insn.isa_ext,
        features=insn.features,
        text=text,
    )


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


def chip_check(insn: Insn, model: CpuModel) -> str | None:
    """Why `insn` cannot execute on `model`, or None when it can.

    Three rules: every CPUID feature the instruction needs (minus the x86-64
    baseline) must be in ``model.isa``; its widest vector operand must fit
    ``model.max_vector_bits`` (an AVX10/256 model has AVX512F/VL/... in its isa
    but no zmm); and the register state it uses must be enabled in the
    model's XCR0.
    """
    if insn.mnemonic == "INVALID":
        return "undecodable instruction"
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
        return f"EVEX instruction but model {model.name}'s XCR0 {model.xcr0:#x} lacks opmask/ZMM state"
    if insn.width in ("ymm", "zmm") and not model.xcr0 & 0x4:
        return f"{insn.width} operand but model {model.name}'s XCR0 {model.xcr0:#x} lacks AVX state"
    return None
