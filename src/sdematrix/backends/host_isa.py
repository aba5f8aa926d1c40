"""What a model advertises that this host cannot execute.

The ptrace backend runs the program on the host CPU while it sees the model's
CPUID.  A model may advertise an instruction set the host lacks (this Emerald
Rapids host has no AMX-FP16, AVX-IFMA, SHA512...; a Zen 4 host no AMX or
AVX512-FP16): a program that believes the CPUID and runs such an instruction
dies of SIGILL, which says nothing about the program.  This module compares
the two CPUIDs bit by bit over the instruction-set feature flags below and
names what the host lacks, so that ``doctor``, the run header and the verdict
line can say it, and a SIGILL on such an instruction is an error of the cell
("host cannot execute X (model M advertises it)"), not a program failure.

The flags are the CPUID feature bits of the Intel SDM vol. 2A, CPUID
instruction, "Information Returned by CPUID" (leaf 01H ECX/EDX, leaf 07H
sub-leaf 0 EBX/ECX/EDX and sub-leaf 1 EAX/EDX, leaf 0DH sub-leaf 1 EAX,
leaf 80000001H ECX/EDX), named as iced-x86 names the feature an instruction
needs (``CpuidFeature``), so a decoded instruction's features can be looked
up here; AVX10, APX_F, USER_MSR and LAHF_SAHF have no iced name and keep the
SDM's.  Not listed, so never reported: bits that enable no instruction
(OSXSAVE, hypervisor, TSC adjust...); instructions an unprivileged program
cannot run on any host (VMX, SMX, MONITOR/MWAIT, INVPCID, PCONFIG, HRESET,
LKGS, WRMSRNS, MSRLIST, XSAVES: CPL 0), or only where the kernel enables them, which
Debian 12's Linux 6.1 does for none of them (UINTR, Key Locker, USER_MSR);
and MPX, CLDEMOTE and PREFETCHITI, whose instructions are NOPs on a CPU
without them (decode.HINT_NOP_CODES).
A KVM guest hides some host bits too (WAITPKG here): those count, the guest
cannot run them either.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from functools import cache

from ..spec.models import CpuModel

__all__ = ["FEATURE_BITS", "HostCpuid", "host_cpuid", "host_lacks", "sigill_reason"]

# name -> (leaf, sub-leaf, register, bit)
FEATURE_BITS: dict[str, tuple[int, int, str, int]] = {
    # CPUID.01H:ECX
    "SSE3": (1, 0, "ecx", 0),
    "PCLMULQDQ": (1, 0, "ecx", 1),
    "SSSE3": (1, 0, "ecx", 9),
    "FMA": (1, 0, "ecx", 12),
    "CMPXCHG16B": (1, 0, "ecx", 13),
    "SSE4_1": (1, 0, "ecx", 19),
    "SSE4_2": (1, 0, "ecx", 20),
    "MOVBE": (1, 0, "ecx", 22),
    "POPCNT": (1, 0, "ecx", 23),
    "AES": (1, 0, "ecx", 25),
    "XSAVE": (1, 0, "ecx", 26),
    "AVX": (1, 0, "ecx", 28),
    "F16C": (1, 0, "ecx", 29),
    "RDRAND": (1, 0, "ecx", 30),
    # CPUID.01H:EDX
    "FPU": (1, 0, "edx", 0),
    "TSC": (1, 0, "edx", 4),
    "CX8": (1, 0, "edx", 8),
    "SEP": (1, 0, "edx", 11),
    "CMOV": (1, 0, "edx", 15),
    "CLFSH": (1, 0, "edx", 19),
    "MMX": (1, 0, "edx", 23),
    "FXSR": (1, 0, "edx", 24),
    "SSE": (1, 0, "edx", 25),
    "SSE2": (1, 0, "edx", 26),
    # CPUID.(EAX=07H,ECX=0):EBX
    "FSGSBASE": (7, 0, "ebx", 0),
    "BMI1": (7, 0, "ebx", 3),
    "HLE": (7, 0, "ebx", 4),
    "AVX2": (7, 0, "ebx", 5),
    "BMI2": (7, 0, "ebx", 8),
    "RTM": (7, 0, "ebx", 11),
    "AVX512F": (7, 0, "ebx", 16),
    "AVX512DQ": (7, 0, "ebx", 17),
    "RDSEED": (7, 0, "ebx", 18),
    "ADX": (7, 0, "ebx", 19),
    "AVX512_IFMA": (7, 0, "ebx", 21),
    "CLFLUSHOPT": (7, 0, "ebx", 23),
    "CLWB": (7, 0, "ebx", 24),
    "AVX512PF": (7, 0, "ebx", 26),
    "AVX512ER": (7, 0, "ebx", 27),
    "AVX512CD": (7, 0, "ebx", 28),
    "SHA": (7, 0, "ebx", 29),
    "AVX512BW": (7, 0, "ebx", 30),
    "AVX512VL": (7, 0, "ebx", 31),
    # CPUID.(EAX=07H,ECX=0):ECX
    "PREFETCHWT1": (7, 0, "ecx", 0),
    "AVX512_VBMI": (7, 0, "ecx", 1),
    "PKU": (7, 0, "ecx", 3),
    "WAITPKG": (7, 0, "ecx", 5),
    "AVX512_VBMI2": (7, 0, "ecx", 6),
    "CET_SS": (7, 0, "ecx", 7),
    "GFNI": (7, 0, "ecx", 8),
    "VAES": (7, 0, "ecx", 9),
    "VPCLMULQDQ": (7, 0, "ecx", 10),
    "AVX512_VNNI": (7, 0, "ecx", 11),
    "AVX512_BITALG": (7, 0, "ecx", 12),
    "AVX512_VPOPCNTDQ": (7, 0, "ecx", 14),
    "RDPID": (7, 0, "ecx", 22),
    "MOVDIRI": (7, 0, "ecx", 27),
    "MOVDIR64B": (7, 0, "ecx", 28),
    "ENQCMD": (7, 0, "ecx", 29),
    # CPUID.(EAX=07H,ECX=0):EDX
    "AVX512_4VNNIW": (7, 0, "edx", 2),
    "AVX512_4FMAPS": (7, 0, "edx", 3),
    "AVX512_VP2INTERSECT": (7, 0, "edx", 8),
    "SERIALIZE": (7, 0, "edx", 14),
    "TSXLDTRK": (7, 0, "edx", 16),
    "CET_IBT": (7, 0, "edx", 20),
    "AMX_BF16": (7, 0, "edx", 22),
    "AVX512_FP16": (7, 0, "edx", 23),
    "AMX_TILE": (7, 0, "edx", 24),
    "AMX_INT8": (7, 0, "edx", 25),
    # CPUID.(EAX=07H,ECX=1):EAX
    "SHA512": (7, 1, "eax", 0),
    "SM3": (7, 1, "eax", 1),
    "SM4": (7, 1, "eax", 2),
    "RAO_INT": (7, 1, "eax", 3),
    "AVX_VNNI": (7, 1, "eax", 4),
    "AVX512_BF16": (7, 1, "eax", 5),
    "CMPCCXADD": (7, 1, "eax", 7),
    "AMX_FP16": (7, 1, "eax", 21),
    "AVX_IFMA": (7, 1, "eax", 23),
    # CPUID.(EAX=07H,ECX=1):EDX
    "AVX_VNNI_INT8": (7, 1, "edx", 4),
    "AVX_NE_CONVERT": (7, 1, "edx", 5),
    "AMX_COMPLEX": (7, 1, "edx", 8),
    "AVX_VNNI_INT16": (7, 1, "edx", 10),
    "AVX10": (7, 1, "edx", 19),
    "APX_F": (7, 1, "edx", 21),
    # CPUID.(EAX=0DH,ECX=1):EAX
    "XSAVEOPT": (0xD, 1, "eax", 0),
    "XSAVEC": (0xD, 1, "eax", 1),
    # CPUID.80000001H:ECX/EDX
    "LAHF_SAHF": (0x80000001, 0, "ecx", 0),
    "LZCNT": (0x80000001, 0, "ecx", 5),
    "PREFETCHW": (0x80000001, 0, "ecx", 8),
    "SYSCALL": (0x80000001, 0, "edx", 11),
    "RDTSCP": (0x80000001, 0, "edx", 27),
}

_REGS = ("eax", "ebx", "ecx", "edx")
HostCpuid = Mapping[tuple[int, int], tuple[int, int, int, int]]


def parse_profile(text: str) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """The ``cpuid LEAF SUB EAX EBX ECX EDX`` lines (hex) of a tracer profile."""
    out: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0] == "cpuid":
            try:
                n = [int(x, 16) for x in parts[1:]]
            except ValueError:
                continue
            out[(n[0], n[1])] = (n[2], n[3], n[4], n[5])
    return out


@cache
def _host_profile_text() -> str | None:
    """``vc-tracer --host-profile`` once per process, None when the tracer
    cannot say (not built, not x86-64)."""
    from .ptrace.tracer_bin import tracer_path

    tracer = tracer_path()
    if tracer is None:
        return None
    try:
        p = subprocess.run(
            [str(tracer), "--host-profile"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def host_cpuid() -> HostCpuid | None:
    """This host's CPUID leaves (``vc-tracer --host-profile``), None when the
    tracer cannot say (not built, not x86-64)."""
    text = _host_profile_text()
    leaves = parse_profile(text) if text else {}
    return leaves or None


def host_xcr0() -> int | None:
    """This host's real XCR0 (the ``xcr0`` line of ``--host-profile``)."""
    for line in (_host_profile_text() or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "xcr0":
            try:
                return int(parts[1], 16)
            except ValueError:
                return None
    return None


def _has(leaves: HostCpuid, where: tuple[int, int, str, int]) -> bool:
    leaf, sub, reg, bit = where
    regs = leaves.get((leaf, sub))
    if regs is None:
        return False
    # a leaf above the maximum (basic or extended) reads as absent
    top = leaves.get((leaf & 0x80000000, 0))
    if top is None or top[0] < leaf:
        return False
    if leaf == 7 and sub > 0 and leaves.get((7, 0), (0, 0, 0, 0))[0] < sub:
        return False
    return bool(regs[_REGS.index(reg)] >> bit & 1)


def model_leaves(model: CpuModel) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    return {(c.leaf, c.subleaf): (c.eax, c.ebx, c.ecx, c.edx) for c in model.cpuid}


def host_lacks(model: CpuModel, host: HostCpuid | None = None) -> list[str]:
    """The features `model`'s CPUID advertises that the host's CPUID lacks
    (`FEATURE_BITS` order); [] when the host's CPUID is unknown."""
    if host is None:
        host = host_cpuid()
        if host is None:
            return []
    mine = model_leaves(model)
    out = [
        name
        for name, where in FEATURE_BITS.items()
        if name != "AVX10" and _has(mine, where) and not _has(host, where)
    ]
    # AVX10.1 is an enumeration of AVX-512 instructions (the AVX512* bits
    # above decide those); AVX10.2 on adds instructions.  So the AVX10 gap is
    # the model's version (CPUID.24H:EBX[7:0]) when it is >= 2 and above the
    # host's.
    mv, hv = _avx10_version(mine), _avx10_version(host)
    if mv >= 2 and hv < mv:
        out.append(f"AVX10.{mv}")
    return out


def _avx10_version(leaves: HostCpuid) -> int:
    if not _has(leaves, FEATURE_BITS["AVX10"]):
        return 0
    regs = leaves.get((0x24, 0))
    return regs[1] & 0xFF if regs is not None else 0


def sigill_reason(
    model: CpuModel, code: bytes, where: str = "", host: HostCpuid | None = None
) -> str | None:
    """Why a SIGILL at the instruction `code` is the host's limit, not the
    program's: it needs a feature the model advertises and the host lacks.
    None when it is not (then the SIGILL is the program's)."""
    from ..evidence.decode import decode

    lacking = set(host_lacks(model, host))
    if not lacking or not code:
        return None
    insn = decode(code)
    hit = [f for f in insn.features if f in lacking]
    if not hit:
        return None
    at = f" at {where}" if where else ""
    return (
        f"host cannot execute {'+'.join(hit)} (model {model.name} advertises it): "
        f"{insn.text}{at} [{code[: insn.length].hex()}] died of SIGILL"
    )
