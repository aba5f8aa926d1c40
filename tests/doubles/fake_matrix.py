"""A small hand-built Matrix for tests that must not depend on sde_matrix.yaml."""

from __future__ import annotations

from pathlib import Path

from sdematrix.backends.base import ProbeCommand
from sdematrix.evidence.mix import Selector
from sdematrix.spec.models import Cell, CpuidLeaf, CpuModel, Matrix, PathSignature, Workload

DOUBLES = Path(__file__).resolve().parent
SDE_DOUBLE = DOUBLES / "sde64"
FAKE_PROBE = DOUBLES / "fake-probe"


SHIPPED_MATRIX = DOUBLES.parents[1] / "sde_matrix.yaml"


def _shipped_profile(chip: str | None) -> tuple[tuple[CpuidLeaf, ...], int]:
    """The CPUID profile and XCR0 of the shipped model with SDE knob `chip`
    (what fake-probe under the SDE double reports), or the empty profile."""
    from sdematrix.spec.matrix_file import load_matrix

    for m in load_matrix(SHIPPED_MATRIX).models.values():
        if chip is not None and m.sde_chip == chip:
            return m.cpuid, m.xcr0
    return (), 0xE7


def model(name: str, chip: str | None, bits: int = 512, exe_only: bool = False) -> CpuModel:
    cpuid, xcr0 = _shipped_profile(chip)
    return CpuModel(
        name=name,
        title=name.upper(),
        vendor="GenuineIntel",
        sde_chip=chip,
        qemu_model=None,
        chip_check_exe_only=exe_only,
        cpuid=cpuid,
        xcr0=xcr0,
        isa=frozenset({"AES"}),
        max_vector_bits=bits,
    )


def sel(**kw: str) -> Selector:
    return Selector.parse(kw)


SIGNATURES = {
    "avx512": PathSignature(
        "avx512",
        "all",
        {"*": (sel(mnemonic="VAESENC*", width="zmm"),)},
        (),
    ),
    "vaes_avx2": PathSignature(
        "vaes_avx2",
        "all",
        {"*": (sel(mnemonic="VAESENC*", encoding="vex", width="ymm"),)},
        (sel(encoding="evex"),),
    ),
    "aesni": PathSignature(
        "aesni",
        "all",
        {"*": (sel(mnemonic="AESENC*", encoding="legacy"),), "gcm": (sel(mnemonic="PCLMULQDQ"),)},
        (sel(width="zmm"), sel(width="ymm"), sel(isa_set="AVX512*")),
    ),
    "generic": PathSignature("generic", "all", {}, (sel(mnemonic="*AES*"),)),
}


def make_matrix(tmp: Path | None = None) -> Matrix:
    models = {
        "spr": model("spr", "spr"),
        "hsw": model("hsw", "hsw", 256),
        "nochip": model("nochip", None),
    }
    expected: dict[tuple[str, str, str], str] = {}
    for cpu in models:
        for mode in ("gcm", "cfb128", "cfb8", "cfb1"):
            for d in ("encrypt", "decrypt"):
                if cpu == "spr" and mode in ("gcm", "cfb128"):
                    expected[(cpu, mode, d)] = "avx512"
                else:
                    expected[(cpu, mode, d)] = "aesni"
    return Matrix(
        source=(tmp or Path("/nonexistent")) / "fake_matrix.yaml",
        models=models,
        signatures=dict(SIGNATURES),
        expected=expected,
        workloads={m: (Workload(128, 64),) for m in ("gcm", "cfb128", "cfb8", "cfb1")},
        seed=1,
        backend_preference=("sde", "ptrace", "qemu"),
    )


def fake_probe_command(cell: Cell, seed: int) -> ProbeCommand:
    return ProbeCommand(
        argv=(
            str(FAKE_PROBE),
            "--mode",
            cell.mode,
            "--dir",
            cell.direction,
            "--key-bits",
            str(cell.key_bits),
            "--length",
            str(cell.length),
            "--seed",
            str(seed),
        )
    )


def fake_digest(cell: Cell, seed: int) -> str:
    """What fake-probe reports as its digest: the host's reference digest."""
    from sdematrix.backends.probe import expected_digest

    return expected_digest(cell, seed)
