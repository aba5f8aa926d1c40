"""vc-tracer against real traced programs (tests/data/traced_sample.c,
tests/data/traced_events.c): CPUID and XGETBV answers come from the profile
(ld.so's and libc's too), the marked region's instructions are counted exactly
(a signal does not count an instruction twice), threads / forks / execs are
followed (those created inside a region are stepped), exit status propagates.
Tests that depend on how CPUID is intercepted run in both CPUID modes; "fault"
skips on a host whose kernel has no CPUID faulting."""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import shutil
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from doubles.sdematrix_cli import fault_mode_skip_reason

from sdematrix.backends.ptrace.backend import (
    TracerOutput,
    parse_tracer_output,
)
from sdematrix.backends.ptrace.profile import image_sites, program_images, write_profile
from sdematrix.evidence.decode import decode
from sdematrix.spec.models import CpuidLeaf, CpuModel

ROOT = Path(__file__).resolve().parent.parent.parent.parent
TRACER_SRC = ROOT / "src" / "sdematrix" / "tracer"
SAMPLE_SRC = ROOT / "tests" / "data" / "traced_sample.c"
EVENTS_SRC = ROOT / "tests" / "data" / "traced_events.c"
LDSO = "/lib64/ld-linux-x86-64.so.2"
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"]

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64" or not shutil.which("gcc"),
    reason="needs Linux x86-64 and gcc",
)


def _host_has(flag: str) -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and flag in line.split() for line in text.splitlines())


def intel_model(*, avx2: bool = True, xcr0: int = 0x7, name: str = "hswish") -> CpuModel:
    """A small self-consistent Intel profile (Haswell-like, optionally without AVX2)."""
    ebx, ecx, edx = 0x756E6547, 0x6C65746E, 0x49656E69  # "Genu" "ntel" "ineI"
    l1_ecx = sum(1 << b for b in (0, 1, 9, 12, 19, 20, 23, 25, 26, 27, 28))
    l7_ebx = (1 << 3) | (1 << 8) | ((1 << 5) if avx2 else 0)
    leaves = (
        CpuidLeaf(0, 0, 0xD, ebx, ecx, edx),
        CpuidLeaf(1, 0, 0x000306C3, 0x00100800, l1_ecx, 0x178BFBFF),
        CpuidLeaf(7, 0, 0, l7_ebx, 0, 0),
        CpuidLeaf(0xD, 0, 0x7, 0x340, 0x340, 0),
        CpuidLeaf(0xD, 1, 0x1, 0, 0, 0),
        CpuidLeaf(0x80000000, 0, 0x80000008, 0, 0, 0),
        CpuidLeaf(0x80000001, 0, 0, 0, 0x21, 0x2C100800),
    )
    isa = {"AES", "PCLMULQDQ", "AVX", "XSAVE", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "POPCNT"}
    if avx2:
        isa |= {"AVX2", "BMI1", "BMI2", "FMA"}
    return CpuModel(
        name, name, "GenuineIntel", None, None, False, leaves, xcr0, frozenset(isa), 256
    )


def timeout_scale() -> float:
    """How much slower than real hardware this machine runs the traced
    programs: $SDEMATRIX_TIMEOUT_SCALE (a number >= 1; default 1).
    ci/fault-vm.sh's TCG guest sets it, so its timeouts stretch instead of
    its slow tests being deselected."""
    text = os.environ.get("SDEMATRIX_TIMEOUT_SCALE", "").strip() or "1"
    try:
        scale = float(text)
    except ValueError:
        scale = 0.0
    if not scale >= 1.0:  # also NaN
        raise pytest.UsageError(f"SDEMATRIX_TIMEOUT_SCALE={text!r}: want a number >= 1")
    return scale


def scaled(seconds: float) -> float:
    """A timeout of `seconds` on real hardware, scaled by timeout_scale()."""
    return seconds * timeout_scale()


@pytest.fixture(params=["bp", "fault"])
def cpuid_mode(request: pytest.FixtureRequest) -> str:
    """Each CPUID mode of the tracer; "fault" only where the kernel has it."""
    if request.param == "fault":
        why = fault_mode_skip_reason()
        if why is not None:
            pytest.skip(why)
    return str(request.param)


def matrix_model(name: str) -> CpuModel:
    """A model of the shipped matrix (sde_matrix.yaml)."""
    from sdematrix.spec.matrix_file import load_matrix

    return load_matrix(ROOT / "sde_matrix.yaml").models[name]


def trace(
    built: dict[str, Path],
    tmp_path: Path,
    argv: list[str],
    model: CpuModel,
    *,
    extra_images: tuple[str, ...] = (),
    tracer_args: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], TracerOutput]:
    profile, out = tmp_path / "profile.txt", tmp_path / "out.txt"
    exe = shutil.which(argv[0]) or argv[0]
    images = program_images(exe) + [p for e in extra_images for p in program_images(e)]
    images = list(dict.fromkeys(images))
    # the traced program's own code gets its blocks: every test below runs
    # with block stepping (the tracer's default) where a region allows it
    write_profile(profile, model, [s for p in images for s in image_sites(p)], images, images[:1])
    cmd = [str(built["tracer"]), "--profile", str(profile), "--out", str(out), *tracer_args]
    proc = subprocess.run(
        [*cmd, "--", *argv], capture_output=True, text=True, timeout=scaled(60), check=False
    )
    text = out.read_text() if out.exists() else "vc-tracer-output 1\n"
    return proc, parse_tracer_output(text)


def counts_by_mnemonic(t: TracerOutput) -> Counter[str]:
    c: Counter[str] = Counter()
    for _space, addr, n, code in t.insns:
        c[decode(code, addr).mnemonic] += n
    return c


def test_cpuid_and_xgetbv_come_from_profile(built: dict[str, Path], tmp_path: Path) -> None:
    proc, t = trace(built, tmp_path, [str(built["dyn"])], intel_model(avx2=False, xcr0=0x7))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["vendor"] == "GenuineIntel" and seen["max_leaf"] == 0xD
    assert seen["avx2"] == 0 and seen["avx512f"] == 0 and seen["aes"] == 1
    assert seen["xcr0"] == "0x7"
    assert t.cpuid_answered >= 4  # ld.so's feature probe + the sample's 3
    assert t.xgetbv_emulated >= 1
    assert t.exit_kind == "code" and t.exit_value == 0 and t.complete

    proc, _ = trace(built, tmp_path, [str(built["dyn"])], intel_model(avx2=True, xcr0=0x7))
    assert json.loads(proc.stdout.splitlines()[-1])["avx2"] == 1


@pytest.mark.parametrize("iters", [1, 37, 1000])
def test_region_counts_exact(built: dict[str, Path], tmp_path: Path, iters: int) -> None:
    argv = [str(built["dyn"]), "--iters", str(iters), "--rep", "9"]
    proc, t = trace(built, tmp_path, argv, intel_model())
    assert proc.returncode == 0, proc.stderr
    c = counts_by_mnemonic(t)
    assert c["AESENC"] == iters
    assert c["DEC"] == iters and c["JNE"] == iters
    assert c["MOVSB"] == 1  # rep movsb with rcx=9: once per visit, not 9
    assert t.regions == 1
    # nothing outside the marks: the stop mark's `mov ebx, 0x222` is the last
    # instruction, the start mark's own bytes are not counted
    assert all(code[:3] != b"\x64\x67\x90" for _s, _a, _n, code in t.insns)
    loop = {"AESENC", "DEC", "JNE"}
    others = [n for _s, a, n, code in t.insns if decode(code, a).mnemonic not in loop]
    assert others and all(n == 1 for n in others)  # straight code around the loop: once
    total = sum(n for *_x, n, _c in t.insns)
    assert total == 3 * iters + len(others)
    assert t.steps == total + 8  # the rep steps 9 times, counted once
    assert t.maps and str(built["dyn"]) in next(iter(t.maps.values()))


def test_threads_and_fork_are_followed(built: dict[str, Path], tmp_path: Path) -> None:
    argv = [str(built["dyn"]), "--iters", "50", "--threads", "3", "--fork"]
    proc, t = trace(built, tmp_path, argv, intel_model(avx2=False, xcr0=0x7))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["threads_avx2"] == [0, 0, 0]
    assert seen["threads_xcr0"] == ["0x7"] * 3
    assert seen["fork_avx2"] == 0
    assert t.regions == 4  # main thread + 3 threads
    assert counts_by_mnemonic(t)["AESENC"] == 4 * 50


def test_static_pie(built: dict[str, Path], tmp_path: Path) -> None:
    if "spie" not in built:
        pytest.skip("no static-pie toolchain")
    argv = [str(built["spie"]), "--iters", "20", "--threads", "1"]
    proc, t = trace(built, tmp_path, argv, intel_model(avx2=False, xcr0=0x3))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert (seen["avx2"], seen["xcr0"], seen["threads_avx2"]) == (0, "0x3", [0])
    assert counts_by_mnemonic(t)["AESENC"] == 2 * 20


def test_exec_is_followed(built: dict[str, Path], tmp_path: Path) -> None:
    """The model survives an exec (CPUID interception re-established after it)."""
    sh = shutil.which("sh")
    assert sh
    argv = [sh, "-c", f"exec {built['dyn']} --iters 5"]
    proc, t = trace(
        built, tmp_path, argv, intel_model(avx2=False), extra_images=(str(built["dyn"]),)
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["avx2"] == 0
    assert counts_by_mnemonic(t)["AESENC"] == 5


def test_exit_status_and_signals(built: dict[str, Path], tmp_path: Path) -> None:
    proc, t = trace(built, tmp_path, [str(built["dyn"]), "--bogus"], intel_model())
    assert proc.returncode == 2 and (t.exit_kind, t.exit_value) == ("code", 2)
    sh = shutil.which("sh")
    assert sh
    # a signal the program handles itself passes through; one that kills it propagates
    proc, t = trace(
        built, tmp_path, [sh, "-c", "trap 'exit 7' USR1; kill -USR1 $$; sleep 5"], intel_model()
    )
    assert (t.exit_kind, t.exit_value) == ("code", 7)
    proc, t = trace(built, tmp_path, [sh, "-c", "kill -SEGV $$"], intel_model())
    assert (t.exit_kind, t.exit_value) == ("signal", 11) and proc.returncode == 128 + 11


def test_zmm_code_runs_and_is_recorded(built: dict[str, Path], tmp_path: Path) -> None:
    if not _host_has("avx512f"):
        pytest.skip("host has no AVX-512")
    proc, t = trace(built, tmp_path, [str(built["dyn"]), "--zmm"], intel_model())
    assert proc.returncode == 0, proc.stderr
    widths = {decode(code).width for *_x, code in t.insns}
    assert "zmm" in widths


def test_max_steps_truncates(built: dict[str, Path], tmp_path: Path) -> None:
    argv = [str(built["dyn"]), "--iters", "1000"]
    proc, t = trace(built, tmp_path, argv, intel_model(), tracer_args=("--max-steps", "100"))
    assert proc.returncode == 0
    assert t.truncated and t.steps == 100


def insns_of(t: TracerOutput, space: int | None = None) -> list[tuple[int, str, int, str]]:
    """(addr, mnemonic, count, width) of every recorded instruction."""
    rows = []
    for sp, addr, n, code in t.insns:
        if space is None or sp == space:
            d = decode(code, addr)
            rows.append((addr, d.mnemonic, n, d.width))
    return rows


def test_signal_interrupted_instruction_counted_once(
    built: dict[str, Path], tmp_path: Path, cpuid_mode: str
) -> None:
    """A SIGPROF every 5 ms of the tracee's CPU time interrupts a 20,000-turn
    loop tens of times (49 on a Zen 5 host): each loop instruction is counted exactly
    20,000 times (once per completed step), and the handler's code, which
    ran, is counted once per call.  The interval scales with timeout_scale():
    on a host that steps 20x slower, a 5 ms timer could fire before the
    stepped handler returns, and the loop would never advance
    (tests/data/traced_events.c, --alarm)."""
    n = 20_000
    interval_us = round(5000 * timeout_scale())
    argv = [str(built["events"]), "--alarm", str(n), str(interval_us)]
    proc, t = trace(built, tmp_path, argv, intel_model(), tracer_args=("--cpuid-mode", cpuid_mode))
    assert proc.returncode == 0, proc.stderr
    assert t.cpuid_mode == cpuid_mode and t.regions == 1
    rows = insns_of(t)
    by_mn: Counter[str] = Counter()
    for _a, mn, cnt, _w in rows:
        by_mn[mn] += cnt
    loop = [(a, mn, cnt) for a, mn, cnt, _w in rows if mn in ("DEC", "JNE")]
    assert sorted(mn for _a, mn, _c in loop) == ["DEC", "JNE"]
    assert all(cnt == n for _a, _mn, cnt in loop), loop
    alarms = json.loads(proc.stdout.splitlines()[-1])["alarms"]
    # the handler ran inside the region (the test means something) ...
    handler_runs = {cnt for a, _mn, cnt, _w in rows if cnt not in (1, n)}
    assert len(handler_runs) == 1, rows
    runs = handler_runs.pop()
    assert 1 < runs <= alarms
    # ... and rt_sigreturn (`syscall` in libc's restorer) ran once per call
    assert by_mn["SYSCALL"] == runs
    total = sum(cnt for _a, _mn, cnt, _w in rows)
    assert t.steps == total  # no rep instruction: every step is one count


def test_thread_created_in_region_is_stepped(
    built: dict[str, Path], tmp_path: Path, cpuid_mode: str
) -> None:
    """A thread created inside the region (no marks of its own) is stepped: its
    AVX-512 instruction is recorded."""
    if not _host_has("avx512f"):
        pytest.skip("host CPU has no AVX-512F (the sample's thread executes vpxorq zmm)")
    proc, t = trace(
        built,
        tmp_path,
        [str(built["events"]), "--spawn-zmm"],
        intel_model(),
        tracer_args=("--cpuid-mode", cpuid_mode),
    )
    assert proc.returncode == 0, proc.stderr
    assert t.threads_stepped == 2 and t.regions == 1
    zmm = [(a, mn, cnt) for a, mn, cnt, w in insns_of(t) if w == "zmm"]
    assert [(mn, cnt) for _a, mn, cnt in zmm] == [("VPXORQ", 1)]
    assert len(t.maps) == 1  # one address space


def test_process_forked_in_region_is_stepped(
    built: dict[str, Path], tmp_path: Path, cpuid_mode: str
) -> None:
    if not _host_has("avx512f"):
        pytest.skip("host CPU has no AVX-512F (the sample's child executes vpxorq zmm)")
    proc, t = trace(
        built,
        tmp_path,
        [str(built["events"]), "--fork-zmm"],
        intel_model(),
        tracer_args=("--cpuid-mode", cpuid_mode),
    )
    assert proc.returncode == 0, proc.stderr
    assert t.threads_stepped == 2 and sorted(t.maps) == [0, 1]
    child = [(mn, cnt) for _a, mn, cnt, w in insns_of(t, space=1) if w == "zmm"]
    assert child == [("VPXORQ", 1)]
    assert not [w for *_x, w in insns_of(t, space=0) if w == "zmm"]


def test_cpuid_in_unlisted_code_is_emulated_while_stepping(
    built: dict[str, Path], tmp_path: Path, cpuid_mode: str
) -> None:
    """CPUID and XGETBV in code written at run time (no image, no breakpoint
    site) see the model when met inside the region, in both modes."""
    proc, t = trace(
        built,
        tmp_path,
        [str(built["events"]), "--jit-cpuid"],
        intel_model(xcr0=0x7),
        tracer_args=("--cpuid-mode", cpuid_mode),
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert (seen["jit_vendor"], seen["jit_xcr0"]) == ("GenuineIntel", "0x7")
    mns = Counter(mn for _a, mn, _c, _w in insns_of(t))
    assert mns["CPUID"] == 1 and mns["XGETBV"] == 1
    assert t.cpuid_stepped == 1 and t.xgetbv_stepped == 1


def test_unscanned_images_are_reported(built: dict[str, Path], tmp_path: Path) -> None:
    """A library loaded with dlopen was not searched for CPUID sites: the
    tracer names it (its CPUID outside a region is not intercepted in bp
    mode); the program's own images are not named."""
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to dlopen")
    proc, t = trace(built, tmp_path, [str(built["events"]), "--dlopen", libm], intel_model())
    assert proc.returncode == 0, proc.stderr
    assert len(t.unscanned) == 1 and Path(t.unscanned[0]).name.startswith("libm")
    proc, t = trace(built, tmp_path, [str(built["events"]), "--memcpy"], intel_model())
    assert proc.returncode == 0 and t.unscanned == []


def _ld_diagnostics(
    built: dict[str, Path], tmp_path: Path, model: CpuModel, mode: str
) -> dict[str, str]:
    proc, t = trace(
        built, tmp_path, [LDSO, "--list-diagnostics"], model, tracer_args=("--cpuid-mode", mode)
    )
    assert proc.returncode == 0, proc.stderr
    assert t.cpuid_mode == mode and t.cpuid_answered > 0
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_ldso_sees_the_model(built: dict[str, Path], tmp_path: Path, cpuid_mode: str) -> None:
    """glibc's ld.so, traced, reports the model's CPUID and picks the
    x86-64-v* level the model implies: v2 on Sandy Bridge (no AVX2), v3 on
    Haswell, none on the Pentium 4 -- whatever the host is."""
    if not Path(LDSO).exists():
        pytest.skip(f"no {LDSO} (not a glibc x86-64 system)")
    native = subprocess.run(
        [LDSO, "--list-diagnostics"], capture_output=True, text=True, check=False
    )
    if native.returncode != 0 or "x86.cpu_features.isa_1=" not in native.stdout:
        pytest.skip("this glibc's ld.so has no --list-diagnostics with x86.cpu_features (< 2.33)")
    want = {"p4p": ("0xf", "0x1"), "snb": ("0x6", "0x3"), "hsw": ("0x6", "0x7")}
    for name, (family, isa_levels) in want.items():
        model = matrix_model(name)
        diag = _ld_diagnostics(built, tmp_path, model, cpuid_mode)
        leaf1 = next(c for c in model.cpuid if c.leaf == 1)
        assert diag["x86.cpu_features.features[0x0].cpuid[0x0]"] == f"{leaf1.eax:#x}", name
        assert diag["x86.cpu_features.basic.family"] == family, name
        # isa_1 bits: baseline, x86-64-v2, x86-64-v3, x86-64-v4
        assert diag["x86.cpu_features.isa_1"] == isa_levels, name


def test_libc_ifunc_follows_the_model(
    built: dict[str, Path], tmp_path: Path, cpuid_mode: str
) -> None:
    """libc's memcpy is the variant ld.so's ifunc picked for the model: 256-bit
    moves on Haswell, 128-bit only on Sandy Bridge (AVX but no AVX2)."""
    widths: dict[str, set[str]] = {}
    for name in ("snb", "hsw"):
        proc, t = trace(
            built,
            tmp_path,
            [str(built["events"]), "--memcpy"],
            matrix_model(name),
            tracer_args=("--cpuid-mode", cpuid_mode),
        )
        assert proc.returncode == 0, proc.stderr
        widths[name] = {w for *_x, w in insns_of(t)}
    assert "ymm" in widths["hsw"] and "zmm" not in widths["hsw"]
    assert "ymm" not in widths["snb"] and "xmm" in widths["snb"]


def test_cpuid_fault_mode_reports_kernel_support(built: dict[str, Path], tmp_path: Path) -> None:
    """--cpuid-mode fault works where the kernel has CPUID faulting, and fails
    with a clear message where it does not (never silently sees the host)."""
    proc, t = trace(
        built,
        tmp_path,
        [str(built["dyn"])],
        intel_model(avx2=False),
        tracer_args=("--cpuid-mode", "fault"),
    )
    if proc.returncode == 0:
        assert t.cpuid_mode == "fault"
        assert json.loads(proc.stdout.splitlines()[-1])["avx2"] == 0
    else:
        assert "ARCH_SET_CPUID" in proc.stderr and proc.returncode == 125


def test_bad_profile_is_one_line_error(built: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("cpuid 1 2\nxcr0 7\n")
    proc = subprocess.run(
        [str(built["tracer"]), "--profile", str(bad), "--out", str(tmp_path / "o"), "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 125
    assert proc.stderr.count("\n") == 1 and "bad cpuid line" in proc.stderr


def test_unlisted_leaves_follow_hardware_rules(built: dict[str, Path], tmp_path: Path) -> None:
    """Max basic leaf 1: the sample's leaf-7 query is above it.  An Intel model
    then answers with leaf 1's data (EBX bit 5 set here, read as "avx2"), an AMD
    model with zeros."""
    base = intel_model(avx2=True)

    def with_leaves(vendor_regs: tuple[int, int, int], vendor: str) -> CpuModel:
        leaves = tuple(
            CpuidLeaf(0, 0, 1, *vendor_regs)
            if c.leaf == 0
            else CpuidLeaf(1, 0, c.eax, 0x00100820, c.ecx, c.edx)
            if c.leaf == 1
            else c
            for c in base.cpuid
        )
        return replace(base, vendor=vendor, cpuid=leaves)

    intel = with_leaves((0x756E6547, 0x6C65746E, 0x49656E69), "GenuineIntel")
    amd = with_leaves((0x68747541, 0x444D4163, 0x69746E65), "AuthenticAMD")
    proc, _ = trace(built, tmp_path, [str(built["dyn"])], intel)
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert (seen["vendor"], seen["max_leaf"], seen["avx2"]) == ("GenuineIntel", 1, 1)
    proc, _ = trace(built, tmp_path, [str(built["dyn"])], amd)
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert (seen["vendor"], seen["max_leaf"], seen["avx2"]) == ("AuthenticAMD", 1, 0)
