"""Every shipped profile presents a cache hierarchy, and its cache leaves
agree with each other (see sdematrix.spec.caches for the leaves and why)."""

from __future__ import annotations

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX

from sdematrix.cli.explain import explain
from sdematrix.spec.caches import (
    Cache,
    descriptor_leaf,
    ext_l2_l3,
    presented_caches,
)
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import CpuidLeaf, CpuModel

MATRIX = load_matrix(SHIPPED_MATRIX)


def _model(leaves: list[CpuidLeaf], vendor: str = "GenuineIntel") -> CpuModel:
    return CpuModel(
        name="t", title="t", vendor=vendor, sde_chip=None, qemu_model=None,
        chip_check_exe_only=False, cpuid=tuple(leaves), xcr0=3,
        isa=frozenset(), max_vector_bits=128,
    )  # fmt: skip


def _leaf(leaf: int, sub: int = 0, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> CpuidLeaf:
    return CpuidLeaf(leaf, sub, a, b, c, d)


def test_decoding_follows_the_sdm() -> None:
    # SPR's L1d from a real dump: 12 ways x 1 partition x 64 B x 64 sets
    m = _model([_leaf(0, a=0x20), _leaf(4, 0, 0xFC004121, 0x02C0003F, 0x3F)])
    (l1d,) = presented_caches(m)
    assert (l1d.name, l1d.size, l1d.ways, l1d.line, l1d.shared_by) == ("L1d", 48 << 10, 12, 64, 2)
    # AMD reads 0x8000001D, and 0x80000006 EDX carries L3 in 512 KiB units
    amd = _model(
        [
            _leaf(0x80000000, a=0x80000020),
            _leaf(0x80000006, c=1024 << 16 | 0x40, d=64 << 18),
            _leaf(0x8000001D, 0, 0x121, 0x01C0003F, 0x3F),
        ],
        vendor="AuthenticAMD",
    )
    assert descriptor_leaf(amd) == 0x8000001D
    assert [c.name for c in presented_caches(amd)] == ["L1d"]
    assert ext_l2_l3(amd) == (1 << 20, 32 << 20)
    # sizes print exactly: whole MiB as MiB, anything else in KiB
    assert Cache(2, "", 1280 << 10, 20, 64, 2).describe() == "L2 1280 KiB 20-way"
    assert Cache(3, "", 54 << 20, 12, 64, 72).describe() == "L3 54 MiB 12-way"


@pytest.mark.parametrize("cpu", sorted(MATRIX.models))
def test_every_model_presents_its_caches(cpu: str) -> None:
    model = MATRIX.models[cpu]
    caches = presented_caches(model)
    names = [c.name for c in caches]
    assert names.count("L1d") == 1 and "L2" in names, (cpu, names)
    assert [c.level for c in caches] == sorted(c.level for c in caches), (cpu, names)
    assert len(set(names)) == len(names), (cpu, names)
    assert all(c.line == 64 for c in caches), (cpu, caches)
    # each level larger than the one below (a swapped or mistyped subleaf
    # breaks it; every dumped chip keeps it)
    by = {c.name: c.size for c in caches}
    assert by["L2"] > by["L1d"], (cpu, by)
    assert "L3" not in by or by["L3"] > by["L2"], (cpu, by)
    # glibc's Intel path starts at leaf 2: its low byte is always 1 (SDM)
    if model.vendor == "GenuineIntel":
        two = model.leaf(2)
        assert two is not None and two.eax & 0xFF == 1, cpu


# glibc's AMD path reads 0x80000005-6: on AMD they must say what 0x8000001D
# says.  Intel's 0x80000006 is not cross-checked: the skx, clx, icx, icl and
# tgl dumps report 256 KiB there beside leaf 4's larger L2, and the profiles
# keep what the silicon answers.
AMD = sorted(n for n, m in MATRIX.models.items() if m.vendor == "AuthenticAMD")


@pytest.mark.parametrize("cpu", AMD)
def test_amd_legacy_cache_leaves_agree(cpu: str) -> None:
    model = MATRIX.models[cpu]
    by = {c.name: c for c in presented_caches(model)}
    l2, l3 = ext_l2_l3(model)
    assert l2 == by["L2"].size, (cpu, l2, by["L2"])
    l1 = model.leaf(0x80000005)
    assert l1 is not None, cpu
    assert (l1.ecx >> 24) << 10 == by["L1d"].size, cpu
    assert (l1.edx >> 24) << 10 == by["L1i"].size, cpu
    assert l3 > 0, cpu


def test_explain_shows_the_caches() -> None:
    text = explain(MATRIX, "spr")
    assert "caches (CPUID leaf 0x4): L1d 48 KiB 12-way" in text, text


HYBRID = sorted(
    n for n, m in MATRIX.models.items() if m.leaf(7) is not None and m.leaf(7).edx >> 15 & 1
)


def test_hybrid_models_are_the_client_hybrids() -> None:
    assert HYBRID == ["adl", "adl_avx512", "arl", "lnl", "mtl", "nvl", "ptl", "rpl"]


@pytest.mark.parametrize("cpu", HYBRID)
def test_hybrid_models_say_their_core_type(cpu: str) -> None:
    """7.0:EDX[15] (Hybrid) says leaf 0x1A names each logical processor's core
    type (SDM Vol. 2A): EAX[31:24] 0x20 Atom (E-core) or 0x40 Core (P-core).
    Every profile is its dump's CPU #0, a P-core; zeros there read as "not
    enumerated" to hwloc and oneTBB, which group cores by it."""
    l1a = MATRIX.models[cpu].leaf(0x1A)
    assert l1a is not None and l1a.eax >> 24 == 0x40, (cpu, l1a)
