"""The ``ptrace`` backend: the probe runs natively on the host under ``vc-tracer``,
which answers every CPUID from the model's profile and XGETBV(0) with the
model's XCR0, and single-steps the SSC-marked region to record the exact
instruction stream.  The recorded instructions are decoded into a
:class:`~sdematrix.evidence.mix.Mix` and each is checked against the model's ISA.
The probe's straight-line blocks (:func:`.ptrace_profile.image_blocks`) run
natively inside the region, each instruction still counted once per
execution: the records equal single-stepping's (``SDEMATRIX_PTRACE_BLOCKS=0``
single-steps everything).

CPUID interception (``cpuid_mode``): with kernel CPUID faulting
(``arch_prctl(ARCH_SET_CPUID)``, "fault") every CPUID traps; without it (e.g.
an AMD guest: ENODEV) the tracer puts breakpoints ("bp") on the CPUID and
XGETBV instructions of the program's images -- the executable, ld.so and the
DT_NEEDED closure, found by decoding them (:mod:`.ptrace_profile`) -- and
emulates any CPUID / XGETBV it meets while single-stepping, wherever it is.
The limit of bp mode: code outside those images (dlopen'd, LD_PRELOAD'ed, JIT)
that is *not* single-stepped runs its CPUID natively.  "auto" uses faulting
where the kernel has it.  The run's ``mix.meta`` records the mode used and the
coverage of the region (``threads_stepped``, ``images``, ``instructions``).

The backend's self-test runs ``vc-tracer --print-cpuid`` under the tracer with
the host's own CPUID as profile, one field altered (the stepping), and
requires the traced program to see the profile: a tracer that runs but does
not intercept CPUID is broken, not available.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...evidence.mix import Mix
from ...evidence.mix_build import Executed, as_bsf_meta, checked_mix, zero_source_as_bsf
from ...evidence.symbols import Symbolizer
from ...spec.choices import CPUID_MODES, TRACER_CPUID_MODES
from ...spec.models import Cell, CpuModel
from ...verdict.reasons import Kind, Reason
from ..base import ProbeCommand, RunResult, Violation
from ..process import ProcessOutcome, run_process, tail_lines
from .profile import Site, image_sites, program_images, site_lines, write_profile
from .tracer_bin import TRACER_ENV, tracer_path

__all__ = [
    "PtraceBackend",
    "TracerOutput",
    "cpuid_faulting_available",
    "host_features",
    "parse_tracer_output",
]

# "0": the tracer single-steps every instruction of a region (--no-blocks)
# instead of running the probe's straight-line blocks natively; same records
BLOCKS_ENV = "SDEMATRIX_PTRACE_BLOCKS"
_SYS_ARCH_PRCTL = 158
_ARCH_SET_CPUID = 0x1012
# the self-test's alteration of the host's CPUID: leaf 1 EAX stepping bits
_SELFTEST_STEPPING_FLIP = 0x5
DEFAULT_MAX_STEPS = 50_000_000

# /proc/cpuinfo flag -> iced CpuidFeature name (the vocabulary of CpuModel.isa).
_FLAG_TO_FEATURE = {
    "fpu": "FPU",
    "tsc": "TSC",
    "cx8": "CX8",
    "cmov": "CMOV",
    "clflush": "CLFSH",
    "mmx": "MMX",
    "fxsr": "FXSR",
    "sse": "SSE",
    "sse2": "SSE2",
    "syscall": "SYSCALL",
    "sep": "SEP",
    "pni": "SSE3",
    "ssse3": "SSSE3",
    "sse4_1": "SSE4_1",
    "sse4_2": "SSE4_2",
    "sse4a": "SSE4A",
    "cx16": "CMPXCHG16B",
    "popcnt": "POPCNT",
    "movbe": "MOVBE",
    "abm": "LZCNT",
    "aes": "AES",
    "pclmulqdq": "PCLMULQDQ",
    "avx": "AVX",
    "avx2": "AVX2",
    "fma": "FMA",
    "f16c": "F16C",
    "bmi1": "BMI1",
    "bmi2": "BMI2",
    "adx": "ADX",
    "rdrand": "RDRAND",
    "rdseed": "RDSEED",
    "rdtscp": "RDTSCP",
    "rdpid": "RDPID",
    "sha_ni": "SHA",
    "xsave": "XSAVE",
    "xsaveopt": "XSAVEOPT",
    "xsavec": "XSAVEC",
    "xsaves": "XSAVES",
    "fsgsbase": "FSGSBASE",
    "clflushopt": "CLFLUSHOPT",
    "clwb": "CLWB",
    "clzero": "CLZERO",
    "avx512f": "AVX512F",
    "avx512dq": "AVX512DQ",
    "avx512cd": "AVX512CD",
    "avx512bw": "AVX512BW",
    "avx512vl": "AVX512VL",
    "avx512ifma": "AVX512_IFMA",
    "avx512vbmi": "AVX512_VBMI",
    "avx512_vbmi2": "AVX512_VBMI2",
    "avx512_vnni": "AVX512_VNNI",
    "avx512_bitalg": "AVX512_BITALG",
    "avx512_vpopcntdq": "AVX512_VPOPCNTDQ",
    "avx512_bf16": "AVX512_BF16",
    "avx512_fp16": "AVX512_FP16",
    "avx512_vp2intersect": "AVX512_VP2INTERSECT",
    "avx_vnni": "AVX_VNNI",
    "gfni": "GFNI",
    "vaes": "VAES",
    "vpclmulqdq": "VPCLMULQDQ",
    "pku": "PKU",
    "movdiri": "MOVDIRI",
    "movdir64b": "MOVDIR64B",
    "serialize": "SERIALIZE",
    "waitpkg": "WAITPKG",
    "amx_tile": "AMX_TILE",
    "amx_int8": "AMX_INT8",
    "amx_bf16": "AMX_BF16",
}
# Names of model.isa this backend can compare with the host; any other name
# (e.g. an AVX10 label iced does not know) is not a reason to skip.
CHECKABLE_FEATURES = frozenset(_FLAG_TO_FEATURE.values())
# The traced program runs on the host CPU, so a model can be traced here when
# the host executes every instruction the program may pick *because the model
# advertises it*: the library's tiers (AES, CLMUL, AVX*, AVX-512, VAES) and
# glibc's ifunc-selected string/memory routines (SSE4.x, AVX2, BMI, EVEX,
# ERMS-style moves).  Features no code in the probe's images dispatches on
# (AMX, AVX512_FP16, PKU, WAITPKG, SERIALIZE, MOVDIR*, RDRAND, RDSEED, ...)
# may be advertised by the model's CPUID while the host lacks them; should
# the program ever execute one, the host raises SIGILL and the cell is an
# error naming the instruction (host_isa.sigill_reason), never a silent
# pass.  RDRAND/RDSEED: glibc never executes them, and OpenSSL 3 does only
# with the non-default "rdcpu" seed source.  /proc/cpuinfo may omit them
# where the CPU has them: on an AMD EPYC Zen 5 KVM guest (kernel 6.x) CPUID
# lists RDSEED and `rdseed` executes, but the kernel's flags line has no
# rdseed (Linux withdraws the feature on parts with an RDSEED erratum, and
# Xen can hide both, XSA-320).  Requiring RDSEED made icl, spr and every
# newer model unrunnable there.
HOST_REQUIRED_FEATURES = frozenset(
    {
        "SSE",
        "SSE2",
        "SSE3",
        "SSSE3",
        "SSE4_1",
        "SSE4_2",
        "POPCNT",
        "CMPXCHG16B",
        "MOVBE",
        "LZCNT",
        "AES",
        "PCLMULQDQ",
        "AVX",
        "AVX2",
        "FMA",
        "F16C",
        "BMI1",
        "BMI2",
        "ADX",
        "XSAVE",
        "XSAVEC",
        "AVX512F",
        "AVX512DQ",
        "AVX512CD",
        "AVX512BW",
        "AVX512VL",
        "AVX512_VBMI",
        "AVX512_VBMI2",
        "VAES",
        "VPCLMULQDQ",
        "GFNI",
        "RDTSCP",
    }
)


def host_features(cpuinfo: str | None = None) -> frozenset[str]:
    """The host's features as iced names, from /proc/cpuinfo's first flags line."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            return frozenset(_FLAG_TO_FEATURE[f] for f in flags if f in _FLAG_TO_FEATURE)
    return frozenset()


def cpuid_faulting_available() -> bool | str:
    """True when the kernel can make CPUID fault for a process (what the
    tracer's "fault" mode needs), else the reason, e.g.
    "arch_prctl ARCH_SET_CPUID: ENODEV".

    Asks with ``arch_prctl(ARCH_SET_CPUID, 1)`` -- "CPUID enabled", the state
    every process starts in -- which the kernel refuses with ENODEV when the
    CPU (or hypervisor) has no CPUID faulting, and otherwise leaves this
    process as it was."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"not Linux x86-64 ({platform.system()} {platform.machine()})"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(
            ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_SET_CPUID), ctypes.c_long(1)
        )
    except (OSError, AttributeError) as e:
        return f"cannot call arch_prctl: {e}"
    if rc == 0:
        return True
    err = ctypes.get_errno()
    return f"arch_prctl ARCH_SET_CPUID: {errno.errorcode.get(err, str(err))}"


@dataclass
class TracerOutput:
    """The tracer's output file, parsed."""

    cpuid_mode: str = "?"
    cpuid_answered: int = 0
    xgetbv_emulated: int = 0
    steps: int = 0
    regions: int = 0
    truncated: bool = False
    threads_stepped: int = 0
    cpuid_stepped: int = 0  # CPUIDs met while stepping (emulated where they were)
    xgetbv_stepped: int = 0
    # PUSHFs the tracer ran instead of stepping, stepped POPFs after which it
    # reset the kernel's stepping state (tracer/trapflag.c)
    pushf_run: int = 0
    popf_reset: int = 0
    # stepped SYSCALLs whose R11 (saved RFLAGS) held the tracer's TF, cleared;
    # stepped SYSCALLs a signal came before (their entry bookkeeping undone)
    syscall_r11_mended: int = 0
    syscall_steps_undone: int = 0
    blocks_entered: int = 0
    block_insns: int = 0
    blocks_interrupted: int = 0
    # executable file mappings whose CPUID/XGETBV sites were not searched
    unscanned: list[str] = field(default_factory=list)
    maps: dict[int, str] = field(default_factory=dict)  # space id -> maps text
    insns: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # space, addr, n, code
    # whole-process mode (--whole): every distinct instruction seen once
    seen: list[tuple[int, int, bytes]] = field(default_factory=list)  # space, addr, code
    # instruction starts under a kernel uprobe that no stop saw run (the
    # kernel runs them out of line): space, addr, the file's code, file
    # offset, path
    probed: list[tuple[int, int, bytes, int, str]] = field(default_factory=list)
    uprobe_steps: int = 0  # steps the kernel reported for a probed instruction
    uprobe_trampoline_steps: int = 0  # steps in the kernel's return-probe trampoline
    # sites under a kernel uprobe, never armed: space, kind, address, file offset, path
    sites_probed: list[tuple[int, str, int, int, str]] = field(default_factory=list)
    whole: dict[str, int] = field(default_factory=dict)  # planted, traps, seen, anon_exec
    nobounds: list[str] = field(default_factory=list)  # exec images without boundary data
    exit_kind: str | None = None  # "code" | "signal"
    exit_value: int | None = None
    complete: bool = False
    # TZCNTs the tracer saw run with a zero source: (space, address, executions)
    tzcnt_zero: list[tuple[int, int, int]] = field(default_factory=list)
    # the last SIGILL delivered to the program: (space, address, bytes)
    sigill: tuple[int, int, bytes] | None = None

    @property
    def exit_code(self) -> int | None:
        """Shell-style: the exit code, or 128+signal."""
        if self.exit_kind is None or self.exit_value is None:
            return None
        return self.exit_value if self.exit_kind == "code" else 128 + self.exit_value


def parse_tracer_output(text: str) -> TracerOutput:
    """Parse the tracer's output file; raises ValueError (one line) when corrupt."""
    out = TracerOutput()
    lines = text.splitlines()
    if not lines or lines[0] != "vc-tracer-output 1":
        raise ValueError("not a vc-tracer output file")
    i = 1
    while i < len(lines):
        parts = lines[i].split()
        i += 1
        if not parts:
            continue
        key = parts[0]
        try:
            if key == "maps":
                space = int(parts[1])
                body: list[str] = []
                while i < len(lines) and lines[i] != "endmaps":
                    body.append(lines[i])
                    i += 1
                i += 1
                out.maps[space] = "\n".join(body)
            elif key == "insn":
                code = bytes.fromhex(parts[4]) if len(parts) > 4 else b""
                out.insns.append((int(parts[1]), int(parts[2], 16), int(parts[3]), code))
            elif key == "seen":
                code = bytes.fromhex(parts[3]) if len(parts) > 3 else b""
                out.seen.append((int(parts[1]), int(parts[2], 16), code))
            elif key == "probed":
                path = lines[i - 1].split(" ", 5)[5]
                out.probed.append(
                    (
                        int(parts[1]),
                        int(parts[2], 16),
                        bytes.fromhex(parts[4]),
                        int(parts[3], 16),
                        path,
                    )
                )
            elif key in ("whole_planted", "whole_traps", "whole_seen", "whole_anon_exec"):
                out.whole[key[len("whole_") :]] = int(parts[1])
            elif key == "whole_nobounds":
                out.nobounds.append(lines[i - 1].split(" ", 1)[1])
            elif key == "site_probed":
                path = lines[i - 1].split(" ", 5)[5]
                out.sites_probed.append(
                    (int(parts[1]), parts[2], int(parts[3], 16), int(parts[4], 16), path)
                )
            elif key == "tzcnt_zero":
                out.tzcnt_zero.append((int(parts[1]), int(parts[2], 16), int(parts[3])))
            elif key == "sigill":
                code = bytes.fromhex(parts[3]) if len(parts) > 3 else b""
                out.sigill = (int(parts[1]), int(parts[2], 16), code)
            elif key == "cpuid_mode":
                out.cpuid_mode = parts[1]
            elif key in (
                "cpuid_answered",
                "xgetbv_emulated",
                "steps",
                "regions",
                "threads_stepped",
                "cpuid_stepped",
                "xgetbv_stepped",
                "pushf_run",
                "popf_reset",
                "syscall_r11_mended",
                "syscall_steps_undone",
                "blocks_entered",
                "block_insns",
                "blocks_interrupted",
                "uprobe_steps",
                "uprobe_trampoline_steps",
            ):
                setattr(out, key, int(parts[1]))
            elif key == "unscanned":
                out.unscanned.append(lines[i - 1].split(" ", 1)[1])
            elif key == "truncated":
                out.truncated = parts[1] == "1"
            elif key == "exit":
                out.exit_kind, out.exit_value = parts[1], int(parts[2])
            elif key == "end":
                out.complete = True
        except (IndexError, ValueError) as e:
            raise ValueError(f"corrupt vc-tracer output line {i}: {lines[i - 1][:80]!r}") from e
    return out


def _probe_report(stdout: str) -> tuple[dict[str, Any] | None, str | None]:
    """(report, None) or (None, why not)."""
    try:
        from ..probe import ProbeError, parse_probe_output
    except ImportError:  # the probe module is optional for this backend
        import json

        for line in reversed(stdout.splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj, None
        return None, "probe printed no JSON report"
    try:
        return parse_probe_output(stdout), None
    except ProbeError as e:
        return None, str(e)


def _host_sigill(traced: TracerOutput, model: CpuModel) -> str | None:
    """The error reason of a run that died of SIGILL on an instruction the
    model advertises but this host cannot execute (sdematrix.backends.host_isa), else
    None (a SIGILL of the program's own making stays the program's)."""
    if traced.exit_kind != "signal" or traced.exit_value != signal.SIGILL or not traced.sigill:
        return None
    from ..host_isa import sigill_reason

    space, addr, code = traced.sigill
    loc = Symbolizer(traced.maps.get(space, "")).locate(addr, code)
    return sigill_reason(model, code, f"{loc.function} in {loc.image} at {addr:#x}")


def build_mix(traced: TracerOutput, model: CpuModel | None) -> tuple[Mix, list[Violation]]:
    """Decode the recorded instructions into a Mix; chip-check each against
    `model` (one Violation per offending address; the check QEMU shares)."""
    symbolizers = {sid: Symbolizer(text) for sid, text in traced.maps.items()}
    empty = Symbolizer("")
    executed = (
        Executed(addr, code, count, symbolizers.get(space, empty).locate)
        for space, addr, count, code in traced.insns
    )
    mix, violations = checked_mix("ptrace", executed, model)
    codes: dict[tuple[int, int], list[bytes]] = {}
    for space, addr, _n, code in traced.insns:
        codes.setdefault((space, addr), []).append(code)
    as_bsf = zero_source_as_bsf(
        traced.tzcnt_zero,
        lambda s, a: codes.get((s, a), []),
        lambda s: symbolizers.get(s, empty).locate,
        model,
    )
    # TZCNTs of zero the tracer ran as BSF, as the model does (tracer/tzcnt.c)
    mix.meta.update(as_bsf_meta(as_bsf))
    mix.meta.update(
        {
            "cpuid_mode": traced.cpuid_mode,
            "cpuid_answered": traced.cpuid_answered,
            "xgetbv_emulated": traced.xgetbv_emulated,
            "steps": traced.steps,
            "regions": traced.regions,
            "distinct_addresses": len(traced.insns),
            "truncated": traced.truncated,
            # coverage of the marked regions
            "threads_stepped": traced.threads_stepped,
            "images": sorted(mix.images),
            "instructions": sum(n for _s, _a, n, _c in traced.insns),
            "cpuid_stepped": traced.cpuid_stepped,
            "xgetbv_stepped": traced.xgetbv_stepped,
            "pushf_run": traced.pushf_run,
            "popf_reset": traced.popf_reset,
            "syscall_r11_mended": traced.syscall_r11_mended,
            "syscall_steps_undone": traced.syscall_steps_undone,
            # block stepping: straight-line runs executed natively, and the
            # instructions they covered (counted as if single-stepped)
            "blocks_entered": traced.blocks_entered,
            "block_insns": traced.block_insns,
            "unscanned_images": list(traced.unscanned),
        }
    )
    return mix, violations


def _profile_lines(text: str) -> dict[str, str]:
    """'cpuid LEAF SUB' / 'xcr0' -> the rest of the line, from profile-format text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0] == "cpuid":
            out[f"cpuid {parts[1]} {parts[2]}"] = " ".join(parts[3:])
        elif len(parts) == 2 and parts[0] == "xcr0":
            out["xcr0"] = parts[1]
    return out


def _selftest_profile(host_profile: str) -> str:
    """The host's profile with leaf 1's stepping altered: a program that sees
    it was answered by the tracer, not by the CPU."""
    lines = []
    for line in host_profile.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[:3] == ["cpuid", "1", "0"]:
            eax = int(parts[3], 16) ^ _SELFTEST_STEPPING_FLIP
            line = " ".join([*parts[:3], f"{eax:x}", *parts[4:]])
        lines.append(line)
    return "\n".join(lines) + "\n"


class PtraceBackend:
    name = "ptrace"

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS, cpuid_mode: str = "auto") -> None:
        if cpuid_mode not in CPUID_MODES:
            raise ValueError(
                f"unknown CPUID mode {cpuid_mode!r} (choose from {', '.join(CPUID_MODES)})"
            )
        self.max_steps = max_steps
        self.cpuid_mode = cpuid_mode
        self._unavailable: str | None = None
        self._checked = False
        self._cpuid_mode: str | None = None

    # -- availability -----------------------------------------------------
    def unavailable_reason(self) -> str | None:
        if not self._checked:
            self._unavailable = self._check()
            self._checked = True
        return self._unavailable

    def cpuid_mode_in_use(self) -> str | None:
        """How the self-test's traced program was made to see its profile,
        "fault" or "bp" (every cell uses the same); None when unavailable."""
        return self._cpuid_mode if self.unavailable_reason() is None else None

    def _check(self) -> str | None:
        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
            return Reason(
                f"ptrace backend needs Linux x86-64 (this is {platform.system()} "
                f"{platform.machine()})",
                Kind.HOST_LIMIT,
            )
        tracer = tracer_path()
        if tracer is None or not os.access(tracer, os.X_OK):
            return Reason(
                f"tracer binary not found (set {TRACER_ENV} or build the package's _bin/vc-tracer)",
                Kind.BACKEND_ERROR,
            )
        if self.cpuid_mode == "fault":
            faulting = cpuid_faulting_available()
            if faulting is not True:
                return Reason(
                    f"CPUID faulting not available on this host ({faulting})", Kind.HOST_LIMIT
                )
        return self._self_test(tracer)

    def _self_test(self, tracer: Path) -> str | None:
        """Run ``vc-tracer --print-cpuid`` under the tracer with the host's
        CPUID (stepping altered) and every site of its images armed; the
        traced program must print exactly the profile's leaves 0 and 1 and
        XCR0.  None when it does, else what went wrong."""
        try:
            host = subprocess.run(
                [str(tracer), "--host-profile"],
                check=False,
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return Reason(
                f"tracer broken: cannot run {tracer} --host-profile: {e}", Kind.BACKEND_ERROR
            )
        if host.returncode != 0 or "cpuid 1 0 " not in host.stdout:
            err = (host.stderr.strip().splitlines() or ["no output"])[-1]
            return Reason(
                f"tracer broken: --host-profile exit {host.returncode}: {err}", Kind.BACKEND_ERROR
            )
        text = _selftest_profile(host.stdout)
        with tempfile.TemporaryDirectory(prefix="sdematrix-ptrace-") as tmp:
            prof, out = Path(tmp) / "profile", Path(tmp) / "out"
            lines = [text.rstrip("\n")]
            try:
                sites = self.sites_for(str(tracer), dict(os.environ))
                lines += site_lines(sites, program_images(str(tracer), dict(os.environ)))
            except (OSError, ValueError) as e:
                return Reason(
                    f"tracer broken: cannot find the CPUID sites of {tracer}: {e}",
                    Kind.BACKEND_ERROR,
                )
            prof.write_text("\n".join(lines) + "\n")
            argv = [
                str(tracer),
                "--profile",
                str(prof),
                "--out",
                str(out),
                "--cpuid-mode",
                self.cpuid_mode,
                "--",
                str(tracer),
                "--print-cpuid",
            ]
            try:
                proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as e:
                return Reason(f"cannot run the tracer: {e}", Kind.BACKEND_ERROR)
            if proc.returncode != 0 or not out.exists():
                err = (proc.stderr.strip().splitlines() or ["no message"])[-1]
                if "PTRACE_TRACEME" in err or "Operation not permitted" in err:
                    return Reason(f"ptrace not permitted: {err}", Kind.HOST_LIMIT)
                return Reason(
                    f"tracer broken: traced self-test exit {proc.returncode}: {err}",
                    Kind.BACKEND_ERROR,
                )
            try:
                traced = parse_tracer_output(out.read_text())
            except ValueError as e:
                return Reason(f"tracer broken: {e}", Kind.BACKEND_ERROR)
        want, seen = _profile_lines(text), _profile_lines(proc.stdout)
        for key in ("cpuid 0 0", "cpuid 1 0", "xcr0"):
            if seen.get(key) != want.get(key):
                return Reason(
                    f"tracer broken: the traced program saw {key} = {seen.get(key)}, "
                    f"the profile says {want.get(key)} (CPUID mode {traced.cpuid_mode})",
                    Kind.BACKEND_ERROR,
                )
        if traced.cpuid_mode not in TRACER_CPUID_MODES:
            return Reason(
                f"tracer broken: CPUID mode {traced.cpuid_mode!r} in the self-test",
                Kind.BACKEND_ERROR,
            )
        self._cpuid_mode = traced.cpuid_mode
        return None

    def version(self) -> str | None:
        tracer = tracer_path()
        if tracer is None:
            return None
        try:
            v = subprocess.run(
                [str(tracer), "--version"], check=False, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
        if self.cpuid_mode_in_use():
            how = "CPUID faulting" if self._cpuid_mode == "fault" else "CPUID breakpoints"
            v += f" ({how})"
        return v or None

    def cannot_run(self, model: CpuModel) -> str | None:
        host = host_features()
        missing = sorted((model.isa & CHECKABLE_FEATURES & HOST_REQUIRED_FEATURES) - host)
        if missing:
            return f"host CPU lacks {', '.join(missing)} needed by model {model.name}"
        if model.max_vector_bits >= 512 and "AVX512F" not in host:
            return f"host CPU has no 512-bit vectors needed by model {model.name}"
        return None

    # -- one cell -------------------------------------------------------------
    def sites_for(self, exe: str, env: dict[str, str]) -> list[Site]:
        """The breakpoint sites of `exe`'s images (see :func:`program_images`)."""
        return [s for img in program_images(exe, env) for s in image_sites(img)]

    def _tracer_argv(
        self, tracer: Path, profile: Path, out: Path, exe: str, args: tuple[str, ...]
    ) -> list[str]:
        return [
            str(tracer),
            "--profile",
            str(profile),
            "--out",
            str(out),
            "--max-steps",
            str(self.max_steps),
            "--cpuid-mode",
            self.cpuid_mode,
            *(["--no-blocks"] if os.environ.get(BLOCKS_ENV) == "0" else []),
            "--",
            exe,
            *args,
        ]

    def _start_trace(
        self,
        tracer: Path,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> tuple[ProcessOutcome, Path, Path]:
        """Write the cell's profile and run the probe under the tracer:
        (the process, the profile, the trace file)."""
        exe = probe.argv[0]
        if os.sep not in exe:
            exe = shutil.which(exe) or exe
        env = probe.environment(os.environ)
        # one file pair per cell: cells of one run share `workdir` and run
        # concurrently (--jobs)
        profile = workdir / f"{cell.name}.ptrace-profile.txt"
        out = workdir / f"{cell.name}.ptrace-trace.txt"
        out.unlink(missing_ok=True)
        images = program_images(exe, env)
        # the probe's own code gets its straight-line blocks listed: the
        # tracer runs them natively (block stepping), same records
        write_profile(profile, model, self.sites_for(exe, env), images, images[:1])
        argv = self._tracer_argv(tracer, profile, out, exe, probe.argv[1:])
        proc = run_process(argv, env=env, cwd=workdir, timeout=timeout)
        return proc, profile, out

    @staticmethod
    def _read_trace(
        result: RunResult, proc: ProcessOutcome, out: Path, timeout: float
    ) -> TracerOutput | None:
        """The tracer's records; None (the reason in `result`) when the run timed
        out, flooded its output or left no readable trace."""
        if proc.timed_out:
            result.status = "timeout"
            result.reason = f"timed out after {timeout:g} s"
            return None
        if proc.flooded:
            result.reason = "probe output flood (killed)"
            return None
        try:
            return parse_tracer_output(out.read_text())
        except (OSError, ValueError) as e:
            last = (proc.stderr.strip().splitlines() or [str(e)])[-1]
            result.reason = f"tracer failed (exit {proc.returncode}): {last}"
            return None

    @staticmethod
    def _save_mix(
        result: RunResult, traced: TracerOutput, cell: Cell, model: CpuModel, workdir: Path
    ) -> None:
        """The cell's mix and chip-check violations, into `result` and a JSON file."""
        mix, violations = build_mix(traced, model)
        mix.meta.update({"cell": cell.name, "model": model.name})
        mix_file = workdir / f"{cell.name}.ptrace-mix.json"
        mix.save(mix_file)
        result.artifacts["mix"] = str(mix_file)
        result.mix = mix
        result.violations = violations

    def _settle(
        self, result: RunResult, traced: TracerOutput, proc: ProcessOutcome, model: CpuModel
    ) -> None:
        """The probe's report, and the status: ok, or why the run is an error (a
        host SIGILL, a truncated region, no probe report)."""
        result.probe, why = _probe_report(proc.stdout)
        host_gap = _host_sigill(traced, model)
        if host_gap is not None:
            result.probe = None
            result.reason = host_gap
        elif traced.truncated:
            result.reason = f"marked region exceeded {self.max_steps} single steps"
        elif result.probe is None:
            how = (
                f"killed by signal {traced.exit_value}"
                if traced.exit_kind == "signal"
                else f"exit {traced.exit_value}"
            )
            last = (proc.stderr.strip().splitlines() or [""])[-1]
            result.reason = f"{why} ({how}) {last}".strip()
        else:
            result.status = "ok"

    def run(
        self,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> RunResult:
        t0 = time.monotonic()
        result = RunResult(backend=self.name, status="error")
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            tracer = tracer_path()
            if tracer is None:
                result.reason = f"tracer binary not found (set {TRACER_ENV})"
                return result
            proc, profile, out = self._start_trace(tracer, cell, model, probe, workdir, timeout)
        except (OSError, ValueError) as e:
            result.reason = f"cannot run the tracer: {e}"
            result.duration_s = time.monotonic() - t0
            return result
        result.duration_s = proc.duration_s
        result.stdout_tail = tail_lines(proc.stdout)
        result.stderr_tail = tail_lines(proc.stderr)
        result.backend_version = "vc-tracer 1"
        result.artifacts = {"profile": str(profile), "trace": str(out)}
        traced = self._read_trace(result, proc, out, timeout)
        if traced is None:
            return result
        result.exit_code = traced.exit_code
        if not traced.complete:
            result.reason = "tracer output incomplete"
            return result
        self._save_mix(result, traced, cell, model, workdir)
        self._settle(result, traced, proc, model)
        return result
