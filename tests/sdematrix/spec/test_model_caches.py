"""How sdematrix.spec.caches decodes a profile's cache leaves."""

from __future__ import annotations

from sdematrix.spec.caches import (
    descriptor_leaf,
    ext_l2_l3,
    presented_caches,
)
from sdematrix.spec.models import CpuidLeaf, CpuModel


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
    # a leaf above the max basic leaf is not what software reads
    assert presented_caches(_model([_leaf(0, a=3), _leaf(4, 0, 0x121, 0x02C0003F, 0x3F)])) == ()
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
