"""The matrix's vocabulary: CPU models, path signatures, workloads and cells.

Loaded from sde_matrix.yaml by :mod:`sdematrix.spec.matrix_file`; everything else
reads these dataclasses, never the YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..evidence.mix import Selector
from .choices import BACKEND_NAMES

MODES = ("gcm", "cfb128", "cfb8", "cfb1")
DIRECTIONS = ("encrypt", "decrypt")
PATHS = ("generic", "aesni", "vaes_avx2", "avx10_256", "avx512")


@dataclass(frozen=True)
class CpuidLeaf:
    leaf: int
    subleaf: int
    eax: int
    ebx: int
    ecx: int
    edx: int


@dataclass(frozen=True)
class CpuModel:
    name: str  # short name used everywhere: "spr"
    title: str  # "Sapphire Rapids"
    vendor: str  # "GenuineIntel" | "AuthenticAMD"
    sde_chip: str | None  # SDE knob without the dash: "spr", "gnr256"; None if SDE has none
    qemu_model: str | None  # "SandyBridge"; None when QEMU 7.2 can't model it faithfully
    chip_check_exe_only: bool  # pass -chip_check_exe_only to SDE (old chips vs the vDSO)
    cpuid: tuple[CpuidLeaf, ...]  # the profile the ptrace backend answers CPUID from
    xcr0: int  # XCR0 the model's OS would enable
    isa: frozenset[str]  # chip-check feature names (iced-x86 CpuidFeature names)
    max_vector_bits: int  # 128 | 256 | 512: widest vector register the model has

    def leaf(self, leaf: int, subleaf: int = 0) -> CpuidLeaf | None:
        for c in self.cpuid:
            if c.leaf == leaf and c.subleaf == subleaf:
                return c
        return None


@dataclass(frozen=True)
class PathSignature:
    """What a path's instruction mix must contain (per mode) and must not."""

    path: str
    scope: str  # "all" or an image-name pattern the check is limited to (e.g. "vc-probe*")
    require: dict[str, tuple[Selector, ...]]  # mode or "*" -> selectors that must count > 0
    forbid: tuple[Selector, ...]  # selectors that must count == 0

    def required_for(self, mode: str) -> tuple[Selector, ...]:
        return self.require.get("*", ()) + self.require.get(mode, ())


@dataclass(frozen=True)
class Workload:
    key_bits: int
    length: int  # bytes (for cfb1, 8*length bits)


@dataclass(frozen=True)
class Cell:
    cpu: str
    mode: str
    direction: str
    key_bits: int
    length: int

    @property
    def name(self) -> str:
        return f"{self.cpu}.{self.mode}.{self.direction}.{self.key_bits}.{self.length}"


@dataclass
class Matrix:
    source: Path
    models: dict[str, CpuModel]  # in file order
    signatures: dict[str, PathSignature]
    expected: dict[tuple[str, str, str], str]  # (cpu, mode, direction) -> path
    workloads: dict[str, tuple[Workload, ...]]  # mode -> workloads
    seed: int = 1
    backend_preference: tuple[str, ...] = BACKEND_NAMES
    extra: dict[str, object] = field(default_factory=dict)

    def cells(self, cpus: list[str] | None = None) -> list[Cell]:
        names = list(self.models) if not cpus else cpus
        out: list[Cell] = []
        for cpu in names:
            for mode in MODES:
                for direction in DIRECTIONS:
                    for w in self.workloads.get(mode, ()):
                        out.append(Cell(cpu, mode, direction, w.key_bits, w.length))
        return out
