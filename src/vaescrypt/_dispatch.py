"""What the CPU offers and which code path the dispatcher picks (C policy, read-only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vaescrypt._errors import check_mask
from vaescrypt._names import DIRECTIONS, MODES, PATHS, dir_id, mode_id, path_id, path_name
from vaescrypt._native import ffi, lib

FEATURES: tuple[str, ...] = tuple(
    ffi.string(lib.vc_feature_name(f)).decode() for f in range(lib.VC_F_COUNT)
)


@dataclass(frozen=True)
class CpuInfo:
    """A decoded feature set (live CPU, or synthetic CPUID leaves)."""

    features: frozenset[str]
    detected: frozenset[str]
    vendor: str
    family: int
    model: int
    stepping: int
    xcr0: int
    avx10_version: int


def _bits_to_names(bits: int) -> frozenset[str]:
    return frozenset(name for i, name in enumerate(FEATURES) if bits >> i & 1)


def _info(f: Any) -> CpuInfo:
    return CpuInfo(
        features=_bits_to_names(f.bits),
        detected=_bits_to_names(f.detected_bits),
        vendor=ffi.string(f.vendor).decode(errors="replace"),
        family=int(f.family),
        model=int(f.model),
        stepping=int(f.stepping),
        xcr0=int(f.xcr0),
        avx10_version=int(f.avx10_version),
    )


def cpu_info() -> CpuInfo:
    """The live CPU, with VAESCRYPT_CPU_MASK applied."""
    check_mask()
    return _info(lib.vc_cpu_features_get())


def cpu_features() -> frozenset[str]:
    """Feature names the dispatcher sees (after VAESCRYPT_CPU_MASK)."""
    return cpu_info().features


def selected(mode: str, direction: str) -> str:
    """The path the dispatcher picks for (mode, direction) on this CPU."""
    m, d = mode_id(mode), dir_id(direction)
    check_mask()
    return path_name(lib.vc_select(m, d))


def _usable(m: int, d: int, p: int) -> bool:
    f = lib.vc_cpu_features_get()
    return bool(
        lib.vc_path_supported_for(f, m, p)
        and lib.vc_path_eligible(m, d, p)
        and lib.vc_path_implemented(m, d, p)
    )


def available(mode: str, direction: str | None = None) -> list[str]:
    """Paths usable for mode on this CPU (supported, eligible, built), best first.

    With a direction: the dispatcher's candidates in its preference order (the
    first one that is not vetoed is selected()).  Without: every path that can
    be forced for the mode in at least one direction, widest first.
    """
    m = mode_id(mode)
    check_mask()
    if direction is not None:
        out = ffi.new("int[]", int(lib.VC_PATH_COUNT))
        n = lib.vc_available(m, dir_id(direction), out)
        return [path_name(out[i]) for i in range(n)]
    return [p for p in PATHS if any(_usable(m, d, path_id(p)) for d in range(lib.VC_DIR_COUNT))]


def path_usable(mode: str, direction: str, path: str) -> bool:
    """Can `impl=path` run (mode, direction) here?"""
    m, d, p = mode_id(mode), dir_id(direction), path_id(path)
    check_mask()
    return _usable(m, d, p)


def path_supported(path: str, mode: str | None = None) -> bool:
    """Can this CPU + OS execute the path (for mode, if given: CFB aesni needs AES only)?"""
    p = path_id(path)
    check_mask()
    f = lib.vc_cpu_features_get()
    if mode is None:
        return bool(lib.vc_path_supported(f, p))
    return bool(lib.vc_path_supported_for(f, mode_id(mode), p))


def path_eligible(mode: str, direction: str, path: str) -> bool:
    """Does the policy allow the path for the mode at all (CFB8/CFB1: xmm paths only)?"""
    return bool(lib.vc_path_eligible(mode_id(mode), dir_id(direction), path_id(path)))


def path_implemented(mode: str, direction: str, path: str) -> bool:
    """Was the tier built with the operations (mode, direction) needs?"""
    return bool(lib.vc_path_implemented(mode_id(mode), dir_id(direction), path_id(path)))


def explain(mode: str, direction: str) -> str:
    """One line: what the dispatcher picks for (mode, direction) and why."""
    m, d = mode_id(mode), dir_id(direction)
    check_mask()
    return _explain(lib.vc_cpu_features_get(), m, d)


def _explain(f: Any, m: int, d: int) -> str:
    buf = ffi.new("char[]", 512)
    lib.vc_explain(f, m, d, buf, 512)
    return ffi.string(buf).decode()


Leaf = tuple[int, int, int, int, int, int]  # leaf, subleaf, eax, ebx, ecx, edx


def _decode(leaves: Iterable[Leaf], xcr0: int) -> Any:
    rows = list(leaves)
    table = ffi.new("vc_cpuid_leaf[]", max(len(rows), 1))
    for i, (leaf, sub, a, b, c, dx) in enumerate(rows):
        table[i].leaf, table[i].subleaf = leaf, sub
        table[i].eax, table[i].ebx, table[i].ecx, table[i].edx = a, b, c, dx
    f = ffi.new("vc_cpu_features *")
    lib.vc_features_from_cpuid(f, table, len(rows), xcr0)
    return f


def features_from_cpuid(leaves: Iterable[Leaf], xcr0: int) -> CpuInfo:
    """Decode raw CPUID answers with the library's own decoder (no mask applied)."""
    return _info(_decode(leaves, xcr0))


def select_for_cpuid(leaves: Iterable[Leaf], xcr0: int) -> Mapping[tuple[str, str], str]:
    """The pure policy (vc_select_with) for every (mode, direction) of a CPUID profile.

    Tier availability in this build still counts (a path not built is never chosen).
    """
    f = _decode(leaves, xcr0)
    return {
        (mode, direction): path_name(lib.vc_select_with(f, mode_id(mode), dir_id(direction)))
        for mode in MODES
        for direction in DIRECTIONS
    }


def explain_for_cpuid(leaves: Iterable[Leaf], xcr0: int, mode: str, direction: str) -> str:
    return _explain(_decode(leaves, xcr0), mode_id(mode), dir_id(direction))
