"""The tracer's "fault" CPUID mode (kernel CPUID faulting) on paths that need
only AVX2, so they run on any AVX2 host with faulting -- this suite natively on
an Intel host, ci/fault-vm.sh's TCG guest (no AVX-512) elsewhere -- and the
mutation check that a fault handler which does not advance RIP past an
emulated CPUID fails.  Each stepping test runs in both CPUID modes ("fault"
skips where the kernel has no CPUID faulting).  Timeouts scale with
$SDEMATRIX_TIMEOUT_SCALE (test_tracer.timeout_scale)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from test_tracer import (  # noqa: F401  (fixture re-export)
    CFLAGS,
    TRACER_SRC,
    _host_has,
    cpuid_mode,
    fault_mode_skip_reason,
    insns_of,
    intel_model,
    scaled,
    timeout_scale,
    trace,
)

from sdematrix.backends.base import ProbeCommand
from sdematrix.backends.ptrace.backend import PtraceBackend, TracerOutput
from sdematrix.evidence.decode import decode
from sdematrix.spec.models import Cell

CELL = Cell("hswish", "gcm", "encrypt", 128, 16)
NO_AVX2 = "host CPU has no AVX2 (the sample's thread executes vpxor ymm)"
VPXOR_YMM3 = bytes.fromhex("c5e5efdb")  # ymm_work's vpxor ymm3, ymm3, ymm3


def ymm_work_runs(t: TracerOutput, space: int | None = None) -> list[int]:
    """Counts of ymm_work's VPXOR in the recorded instructions (libc's own
    AVX2 code, e.g. memset in pthread_create on a Haswell model, aside)."""
    return [
        n
        for sp, a, n, code in t.insns
        if code.startswith(VPXOR_YMM3)
        and decode(code, a).mnemonic == "VPXOR"
        and space in (None, sp)
    ]


def test_thread_created_in_region_is_stepped_avx2(
    built: dict[str, Path],
    tmp_path: Path,
    cpuid_mode: str,  # noqa: F811
) -> None:
    """A thread created inside the region (no marks of its own) is stepped:
    its one AVX2 instruction is recorded, in this CPUID mode."""
    if not _host_has("avx2"):
        pytest.skip(NO_AVX2)
    proc, t = trace(
        built,
        tmp_path,
        [str(built["events"]), "--spawn-ymm"],
        intel_model(),
        tracer_args=("--cpuid-mode", cpuid_mode),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["what"] == "spawn-ymm"
    assert t.cpuid_mode == cpuid_mode
    assert t.threads_stepped == 2 and t.regions == 1
    assert ymm_work_runs(t) == [1]
    assert ("VPXOR", "ymm") in {(mn, w) for _a, mn, _c, w in insns_of(t)}
    assert len(t.maps) == 1  # one address space


def test_process_forked_in_region_is_stepped_avx2(
    built: dict[str, Path],
    tmp_path: Path,
    cpuid_mode: str,  # noqa: F811
) -> None:
    """A child forked inside the region is stepped in its own address space:
    its AVX2 instruction is recorded there, none in the parent's."""
    if not _host_has("avx2"):
        pytest.skip(NO_AVX2)
    proc, t = trace(
        built,
        tmp_path,
        [str(built["events"]), "--fork-ymm"],
        intel_model(),
        tracer_args=("--cpuid-mode", cpuid_mode),
    )
    assert proc.returncode == 0, proc.stderr
    assert t.cpuid_mode == cpuid_mode
    assert t.threads_stepped == 2 and sorted(t.maps) == [0, 1]
    assert ymm_work_runs(t, space=1) == [1]
    assert ymm_work_runs(t, space=0) == []


def test_second_thread_avx2_is_a_violation(
    built: dict[str, Path],
    cpuid_mode: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread created in the region runs AVX2 on a model without AVX2: the
    backend's chip check (every stepped thread) names the instruction."""
    if not _host_has("avx2"):
        pytest.skip(NO_AVX2)
    monkeypatch.setenv("SDEMATRIX_TRACER", str(built["tracer"]))
    b = PtraceBackend(cpuid_mode=cpuid_mode)
    reason = b.unavailable_reason()
    assert reason is None, reason
    probe = ProbeCommand((str(built["events"]), "--spawn-ymm"))
    r = b.run(CELL, intel_model(avx2=False), probe, tmp_path / "w", timeout=scaled(60))
    assert r.status == "ok", r.reason
    assert [(v.mnemonic, v.function, v.bytes_hex) for v in r.violations] == [
        ("VPXOR", "ymm_work", "c5e5efdb")
    ]
    assert r.mix is not None and r.mix.meta["threads_stepped"] == 2
    assert r.mix.meta["cpuid_mode"] == cpuid_mode


def test_timeout_scale_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDEMATRIX_TIMEOUT_SCALE", raising=False)
    assert timeout_scale() == 1.0 and scaled(60) == 60
    monkeypatch.setenv("SDEMATRIX_TIMEOUT_SCALE", "12.5")
    assert scaled(60) == 750
    for bad in ("0.5", "fast", "nan", "-3"):
        monkeypatch.setenv("SDEMATRIX_TIMEOUT_SCALE", bad)
        with pytest.raises(
            pytest.UsageError, match=r"^SDEMATRIX_TIMEOUT_SCALE='.*': want a number >= 1$"
        ):
            timeout_scale()


# The fault handler's CPUID branch (vc-tracer's on_cpuid_fault): after the
# emulation (which advances RIP past the 2-byte CPUID), the tracee resumes.
_FAULT_BRANCH = re.compile(
    r"(\nstatic bool on_cpuid_fault\(struct thread \*t, pid_t pid\)\n\{\n(?:.*\n)*?"
    r"(\s*)emulate_cpuid\(pid, &r\);\n\s*resume\(t, 0\);\n\s*return true;\n\})"
)


@pytest.fixture(scope="module")
def mutant_tracer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vc-tracer built from a copy of its sources whose fault-mode CPUID
    handler puts RIP back on the CPUID after emulating it (the tracee then
    faults on the same CPUID forever)."""
    d = tmp_path_factory.mktemp("mutant")
    for src in TRACER_SRC.glob("*"):
        (d / src.name).write_bytes(src.read_bytes())
    text = (d / "tracer.c").read_text()
    hits = _FAULT_BRANCH.findall(text)
    assert len(hits) == 1, "the fault-mode CPUID branch of tracer.c moved: update _FAULT_BRANCH"
    mutated = _FAULT_BRANCH.sub(
        lambda m: m.group(1).replace(
            "emulate_cpuid(pid, &r);",
            "emulate_cpuid(pid, &r);\n"
            + m.group(2)
            + "r.rip -= 2; /* MUTANT */ set_regs(pid, &r);",
        ),
        text,
    )
    (d / "tracer.c").write_text(mutated)
    exe = d / "vc-tracer-mutant"
    srcs = sorted(str(p) for p in d.glob("*.c"))
    subprocess.run(["gcc", *CFLAGS, "-D_GNU_SOURCE", *srcs, "-o", str(exe)], check=True)
    return exe


def test_fault_handler_that_does_not_advance_rip_fails(
    built: dict[str, Path],
    mutant_tracer: Path,
    tmp_path: Path,
) -> None:
    """Teeth: the mutant passes bp mode (its breakpoint path is intact) and
    fails fault mode -- the traced program never gets past ld.so's first
    CPUID, so the run times out instead of printing what it saw."""
    why = fault_mode_skip_reason()
    if why is not None:
        pytest.skip(why)
    mutant = dict(built, tracer=mutant_tracer)
    proc, t = trace(
        mutant,
        tmp_path,
        [str(built["dyn"])],
        intel_model(avx2=False),
        tracer_args=("--cpuid-mode", "bp"),
    )
    assert proc.returncode == 0 and t.cpuid_mode == "bp"
    assert json.loads(proc.stdout.splitlines()[-1])["avx2"] == 0
    with pytest.raises(subprocess.TimeoutExpired):
        profile = tmp_path / "profile.txt"  # written by the bp run above
        subprocess.run(
            [
                str(mutant_tracer),
                "--profile",
                str(profile),
                "--out",
                str(tmp_path / "m.txt"),
                "--cpuid-mode",
                "fault",
                "--",
                str(built["dyn"]),
            ],
            capture_output=True,
            timeout=scaled(5),
            check=False,
        )
