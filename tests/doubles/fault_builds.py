"""The mutation tests' fault builds of vc-probe (docs/MUTATION.md).

A fault is a test-only C source under tests/data/mutation/ plus the library
symbols it wraps at link time (``-Wl,--wrap=``): the library's own sources
carry no fault code and no fault switch.  Each fault source also exports the
marker ``vc_fault_build`` (tests/data/mutation/fault_marker.h).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

MUTATION_DIR = Path(__file__).resolve().parents[1] / "data" / "mutation"


@dataclass(frozen=True)
class Fault:
    source: Path
    wraps: tuple[str, ...]

    def link_args(self) -> list[str]:
        return [f"-Wl,--wrap={sym}" for sym in self.wraps]


FAULTS: dict[str, Fault] = {
    "CFB8_VAES": Fault(MUTATION_DIR / "fault_cfb8_vaes.c", ("vc_tier_get", "vc_policy_select")),
    "AVX10_ZMM": Fault(MUTATION_DIR / "fault_avx10_zmm.c", ("vc_tier_get",)),
    "IGNORE_XCR0": Fault(
        MUTATION_DIR / "fault_ignore_xcr0.c",
        (
            "vc_path_supported",
            "vc_path_supported_for",
            "vc_policy_select",
            "vc_policy_available",
            "vc_policy_explain",
        ),
    ),
}


def build_probe(bi: ModuleType, dest: Path, fault: str | None) -> Path:
    """vc-probe at dest, built with the named fault (None: without one)."""
    if fault is None:
        return Path(bi.build_probe(dest))
    f = FAULTS[fault]
    return Path(bi.build_probe(dest, extra_sources=[f.source], link_args=f.link_args()))
