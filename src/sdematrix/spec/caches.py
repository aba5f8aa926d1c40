"""The cache hierarchy a model's CPUID presents, decoded the way software reads it.

A program learns its caches from CPUID, not from /sys: glibc sizes memcpy's
non-temporal threshold and ``sysconf(_SC_LEVEL*_CACHE_*)`` from it, OpenBLAS
its blocking.  A profile that answers those leaves with zeros makes every
such program take its no-cache fallback (glibc: a 16 KiB non-temporal
threshold instead of megabytes), so each profile lists its chip's cache
leaves and this module decodes them: for ``sdematrix explain`` and for the
tests that hold real programs' readings under the tracer to the profile.

Leaves, as the SDM (Vol. 2A, CPUID) and AMD's APM (Vol. 3, CPUID) define them:

* leaf 4 (Intel) and 0x8000001D (AMD, the same layout): one subleaf per
  cache, until a subleaf of type 0.  EAX[4:0] type (1 data, 2 instruction,
  3 unified), EAX[7:5] level, EAX[25:14] + 1 logical processors sharing it;
  EBX[31:22] + 1 ways, EBX[21:12] + 1 partitions, EBX[11:0] + 1 line size;
  ECX + 1 sets.  Size = ways x partitions x line x sets.
* 0x80000006 ECX: L2 size in KiB in [31:16], line size in [7:0] (both
  vendors); EDX[31:18]: L3 size in 512 KiB units (AMD only).

Every listed leaf is one software reads: the loader rejects a leaf above the
profile's max basic / extended leaf (spec/matrix_file.py), where an Intel CPU
answers the highest basic leaf and an AMD CPU zeros (as tracer/profile.c does).
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import CpuModel

_KINDS = {1: "d", 2: "i", 3: ""}  # L1d, L1i, L2 (unified: no suffix)
_MAX_SUBLEAVES = 16  # the loop's bound: real parts list 2-5 caches


@dataclass(frozen=True)
class Cache:
    level: int
    kind: str  # "d" data, "i" instruction, "" unified
    size: int  # bytes
    ways: int
    line: int  # bytes
    shared_by: int  # logical processors sharing it

    @property
    def name(self) -> str:
        return f"L{self.level}{self.kind}"

    def describe(self) -> str:
        return f"{self.name} {_size_text(self.size)} {self.ways}-way"


def _size_text(n: int) -> str:
    """Whole MiB as MiB, anything else exact in KiB (1280 KiB, not "1.2 MiB")."""
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n >> 10} KiB"


def descriptor_leaf(model: CpuModel) -> int:
    """The deterministic cache-parameter leaf this vendor's software reads."""
    return 0x8000001D if model.vendor == "AuthenticAMD" else 4


def presented_caches(model: CpuModel) -> tuple[Cache, ...]:
    """The caches the model's leaf 4 (Intel) or 0x8000001D (AMD) lists, in
    subleaf order; empty when the profile lists none."""
    leaf = descriptor_leaf(model)
    out: list[Cache] = []
    for sub in range(_MAX_SUBLEAVES):
        c = model.leaf(leaf, sub)
        if c is None or c.eax & 0x1F == 0:
            break
        kind = _KINDS.get(c.eax & 0x1F)
        if kind is None:  # reserved type: software stops here too
            break
        ways = (c.ebx >> 22) + 1
        parts = ((c.ebx >> 12) & 0x3FF) + 1
        line = (c.ebx & 0xFFF) + 1
        sets = c.ecx + 1
        out.append(
            Cache(
                level=(c.eax >> 5) & 7,
                kind=kind,
                size=ways * parts * line * sets,
                ways=ways,
                line=line,
                shared_by=((c.eax >> 14) & 0xFFF) + 1,
            )
        )
    return tuple(out)


def ext_l2_l3(model: CpuModel) -> tuple[int, int]:
    """(L2, L3) sizes in bytes from leaf 0x80000006 (L3: AMD only), 0 where
    the profile does not list the leaf or it says nothing."""
    c = model.leaf(0x80000006)
    if c is None:
        return 0, 0
    l3 = (c.edx >> 18) * 512 * 1024 if model.vendor == "AuthenticAMD" else 0
    return (c.ecx >> 16) * 1024, l3


def describe_caches(model: CpuModel) -> str:
    caches = presented_caches(model)
    if not caches:
        return "(none presented)"
    return ", ".join(c.describe() for c in caches)
