"""The names an expectations file may use, and what a model "has".

* Features (``has:`` / ``lacks:``): iced-x86 ``CpuidFeature`` names, the
  vocabulary of ``CpuModel.isa``.
* ISA sets and ISA extensions (selectors ``isa_set`` / ``isa_ext``): the
  XED-style group names :func:`sdematrix.evidence.decode.isa_groups` derives.  They are
  enumerated here the same way a mix gets them: every iced ``Code``'s CPUID
  features and encoding, at each vector width its encoding allows, through
  the same ``isa_groups`` -- so a name is in the vocabulary exactly when some
  instruction can produce it (plus ``LONGMODE``, which depends on the
  mnemonic, ``AVX2GATHER``, and ``INVALID``/``OTHER``).
* Mnemonics (iced ``Mnemonic``, upper case), encodings and widths.

A model has a feature for expectations only when its OS state allows using
it too (:func:`effective_features`): CPUID may list AVX2 while XCR0 lacks YMM
state (``spr_xcr0_sse``), and then every AVX2 instruction raises #UD.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import iced_x86 as iced

from ..evidence.decode import (
    BASELINE_FEATURES,
    ENCODING_NAMES,
    FEATURE_NAMES,
    Insn,
    chip_check,
    isa_groups,
)
from .models import CpuModel

__all__ = [
    "ENCODINGS",
    "WIDTHS",
    "effective_features",
    "feature_names",
    "isa_exts",
    "isa_sets",
    "mnemonics",
    "model_isa_sets",
    "suggest",
    "xcr0_needed",
]

ENCODINGS = ("legacy", "vex", "evex", "other")
WIDTHS = ("none", "xmm", "ymm", "zmm")
# widths an encoding can report (decode._width): legacy code has no ymm/zmm
_ENC_WIDTHS = {
    "legacy": ("none", "xmm"),
    "vex": ("none", "xmm", "ymm"),
    "evex": WIDTHS,
    "other": ("none",),
}
_EXTRA_GROUPS = {
    ("LONGMODE", "LONGMODE"),
    ("AVX2GATHER", "AVX2GATHER"),
    ("INVALID", "INVALID"),
    ("OTHER", "OTHER"),
}

# XCR0 state components (Intel SDM vol. 1, 13.1 "XSAVE-supported features
# and state-component bitmaps"): bit 1 SSE, 2 AVX (upper YMM), 3-4 MPX
# BNDREGS/BNDCSR, 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM, 17-18 AMX
# XTILECFG/XTILEDATA.  SDM vol. 1, 14.3 / 15.2: software may use AVX only
# when XCR0[2:1] = 11b, AVX-512 only when XCR0[7:5] = 111b and XCR0[2:1] =
# 11b; AMX needs XCR0[18:17].  Legacy-SSE forms (AES, PCLMULQDQ, GFNI's SSE
# form, SHA) need no XSAVE state the OS would leave off (FXSR/CR4.OSFXSR).
_YMM = 0x6
_ZMM = 0xE6
_AVX_STATE_FEATURES = frozenset({"FMA", "F16C", "FMA4", "XOP", "VAES", "VPCLMULQDQ"})


def xcr0_needed(feature: str) -> int:
    """The XCR0 bits an instruction of `feature` needs enabled (0: none)."""
    if feature.startswith(("AVX512", "AVX10")):
        return _ZMM
    if feature.startswith("AVX") or feature in _AVX_STATE_FEATURES:
        return _YMM
    if feature.startswith("AMX"):
        return 0x60000
    if feature == "MPX":
        return 0x18
    return 0


def effective_features(model: CpuModel) -> frozenset[str]:
    """The model's isa features its XCR0 lets software use."""
    return frozenset(f for f in model.isa if model.xcr0 & xcr0_needed(f) == xcr0_needed(f))


@cache
def feature_names() -> frozenset[str]:
    return frozenset(FEATURE_NAMES.values())


@cache
def mnemonics() -> frozenset[str]:
    return frozenset(
        k.upper()
        for k, v in vars(iced.Mnemonic).items()
        if not k.startswith("_") and isinstance(v, int)
    )


@dataclass(frozen=True)
class _Form:
    features: tuple[str, ...]
    encoding: str
    width: str
    isa_set: str
    isa_ext: str


@cache
def _forms() -> tuple[_Form, ...]:
    """Every (features, encoding, width) an instruction can decode to, with
    its groups."""
    seen: set[tuple[tuple[str, ...], str]] = set()
    for name, code in vars(iced.Code).items():
        if not name.isupper() or not isinstance(code, int):
            continue
        try:
            ins = iced.Instruction.create(code)
        except (ValueError, TypeError):
            continue
        feats = tuple(FEATURE_NAMES.get(f, str(f)) for f in ins.cpuid_features())
        seen.add((feats, ENCODING_NAMES.get(ins.encoding, "other")))
    out = [_Form(f, e, w, *isa_groups(f, e, w)) for f, e in sorted(seen) for w in _ENC_WIDTHS[e]]
    return tuple(out)


@cache
def isa_sets() -> frozenset[str]:
    return frozenset({f.isa_set for f in _forms()} | {s for s, _ in _EXTRA_GROUPS})


@cache
def isa_exts() -> frozenset[str]:
    return frozenset({f.isa_ext for f in _forms()} | {e for _, e in _EXTRA_GROUPS})


def model_isa_sets(model: CpuModel) -> list[str]:
    """The ISA sets of instructions `model` can execute: the chip check
    passes them and every feature they need is usable under its XCR0 (a
    VEX.128 form needs YMM state as well, SDM vol. 2, 2.3.10)."""
    ok: set[str] = {"I86", "LONGMODE"}
    usable = effective_features(model) | BASELINE_FEATURES
    for f in _forms():
        if f.isa_set in ok or not all(x in usable or "_OR_" in x for x in f.features):
            continue
        insn = Insn(
            address=0,
            length=1,
            mnemonic="",
            encoding=f.encoding,
            width=f.width,
            isa_set=f.isa_set,
            isa_ext=f.isa_ext,
            features=f.features,
            text="",
        )
        if chip_check(insn, model) is None:
            ok.add(f.isa_set)
    if "AVX2" in ok:
        ok.add("AVX2GATHER")
    return sorted(ok)


def _squash(s: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", s.upper())


def suggest(word: str, vocabulary: Iterable[str], aliases: dict[str, str] | None = None) -> str:
    """``; did you mean X?`` for a misspelt `word` (case, dashes and
    underscores ignored first, then difflib), or '' when nothing is close.
    `aliases` maps other spellings (lower case, e.g. a model's title) to a
    vocabulary name."""
    vocab = sorted(vocabulary)
    stem = word.strip("*?[]")
    hits = [v for v in vocab if _squash(v) == _squash(stem)]
    if not hits and aliases:
        low = stem.lower()
        hits = sorted({n for a, n in aliases.items() if low and (a == low or a.startswith(low))})
    if not hits:
        by_squash = {_squash(v): v for v in vocab}
        hits = [by_squash[s] for s in difflib.get_close_matches(_squash(stem), by_squash, n=3)]
    if not hits:
        return ""
    return "; did you mean " + " or ".join(hits[:3]) + "?"


def features_text(model: CpuModel) -> str:
    """`sdematrix explain MODEL --features`: the names an expectations file
    may use for `model` (features for has/lacks, ISA sets for selectors)."""
    usable = effective_features(model)
    off = sorted(model.isa - usable)
    lines = [
        f"{model.name}: {model.title} (xcr0 {model.xcr0:#x}, {model.max_vector_bits}-bit vectors)",
        f"  features (has/lacks): {' '.join(sorted(usable))}",
    ]
    if off:
        lines.append(f"  in CPUID but off in XCR0 (not 'has' for expectations): {' '.join(off)}")
    lines.append(f"  ISA sets it can execute (isa_set): {' '.join(model_isa_sets(model))}")
    return "\n".join(lines) + "\n"
