"""XSAVE area sizes the traced program is shown: never smaller than what this
host's hardware writes.

The tracer answers CPUID from the model's profile and XGETBV with the model's
XCR0, but the XSAVE family (XSAVE, XSAVEOPT, XSAVEC) runs on the host and
saves the state components of the HOST's real XCR0 (Intel SDM vol. 1,
13.7 "Operation of XSAVE": the requested-feature bitmap is EDX:EAX AND XCR0,
the real register).  Programs size their XSAVE buffers from CPUID leaf 0DH:

* subleaf 0 EBX, "maximum size required by enabled features in XCR0", and
  ECX, the size for every supported component (SDM vol. 2, CPUID, leaf 0DH);
* subleaf 1 EBX, the compacted size for XCR0 | IA32_XSS;
* subleaf i >= 2: EAX the size and EBX the offset of component i.

glibc's lazy-binding trampoline (``_dl_runtime_resolve_xsavec`` /
``_xsave``, sysdeps/x86/cpu-features.c ``update_active``) sums the subleaf
sizes of SSE, AVX, MPX and the three AVX-512 components to size a stack area,
then runs XSAVEC with the mask 0xee.  With a Goldmont profile (no AVX) on an
AVX-512 host the area is ~700 bytes and the hardware writes ~2,400 when the
vector state is in use: the saved RBX, return address and link map above the
area are overwritten, or the write runs off the top of the stack (a SIGSEGV
in XSAVEC at start-up, seen in ~10 % of Docker cells where the environment,
and so the room above the first frame, is small).

So every size the hardware can need is raised to the host's: subleaf 0
EBX/ECX and subleaf 1 EBX to at least the host's, and for each component the
host's XCR0 enables, the host's subleaf (size, offset, alignment) where the
model lists none or a smaller size.  The model's supported-component bits
(subleaf 0 EAX/EDX) and its XCR0 are unchanged: the program still sees the
model's features; only buffer sizes grow, which real software tolerates (a
larger XSAVE area than needed is always valid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...spec.models import CpuidLeaf

__all__ = ["xsave_safe_cpuid"]

HostLeaves = Mapping[tuple[int, int], tuple[int, int, int, int]]

_XSAVE_LEAF = 0xD


def xsave_safe_cpuid(
    leaves: Sequence[CpuidLeaf], host: HostLeaves | None, host_xcr0: int | None
) -> list[CpuidLeaf]:
    """`leaves` with leaf 0DH's sizes raised to at least the host's (see the
    module doc).  Unchanged when the model has no leaf 0DH (no XSAVE: software
    uses FXSAVE's fixed 512 bytes) or the host's leaves are unknown."""
    out = list(leaves)
    if not host or host_xcr0 is None:
        return out
    index = {(c.leaf, c.subleaf): i for i, c in enumerate(out)}
    if (_XSAVE_LEAF, 0) not in index:
        return out

    def raise_to(sub: int, ebx: int | None = None, ecx: int | None = None) -> None:
        c = out[index[(_XSAVE_LEAF, sub)]]
        new_ebx = max(c.ebx, ebx) if ebx is not None else c.ebx
        new_ecx = max(c.ecx, ecx) if ecx is not None else c.ecx
        out[index[(_XSAVE_LEAF, sub)]] = CpuidLeaf(
            c.leaf, c.subleaf, c.eax, new_ebx, new_ecx, c.edx
        )

    h0 = host.get((_XSAVE_LEAF, 0))
    if h0 is not None:
        raise_to(0, ebx=h0[1], ecx=h0[2])
    h1 = host.get((_XSAVE_LEAF, 1))
    if h1 is not None and (_XSAVE_LEAF, 1) in index:
        raise_to(1, ebx=h1[1])
    for bit in range(2, 63):
        if not host_xcr0 >> bit & 1:
            continue
        h = host.get((_XSAVE_LEAF, bit))
        if h is None or h[0] == 0:
            continue
        i = index.get((_XSAVE_LEAF, bit))
        if i is not None and out[i].eax >= h[0]:
            continue
        leaf = CpuidLeaf(_XSAVE_LEAF, bit, h[0], h[1], h[2], 0)
        if i is None:
            index[(_XSAVE_LEAF, bit)] = len(out)
            out.append(leaf)
        else:
            out[i] = leaf
    return out
