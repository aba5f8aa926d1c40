"""PtraceBackend end to end on the traced samples: self-test, CPUID modes, mix,
chip check (of every thread stepped), coverage in mix.meta, errors."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from doubles.sdematrix_cli import usable_ptrace
from test_tracer import (  # noqa: F401  (fixture re-export)
    _host_has,
    cpuid_mode,
    fault_mode_skip_reason,
    intel_model,
    scaled,
)

from sdematrix.backends.base import Backend, ProbeCommand
from sdematrix.backends.ptrace.backend import (
    PtraceBackend,
    cpuid_faulting_available,
    host_features,
    parse_tracer_output,
)
from sdematrix.evidence.mix import Mix
from sdematrix.spec.models import Cell

CELL = Cell("hswish", "gcm", "encrypt", 128, 16)


@pytest.fixture
def backend(built: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> PtraceBackend:
    monkeypatch.setenv("SDEMATRIX_TRACER", str(built["tracer"]))
    return usable_ptrace(PtraceBackend())


@pytest.fixture
def moded_backend(
    built: dict[str, Path],
    cpuid_mode: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> PtraceBackend:
    """The backend in each CPUID mode ("fault" skips where the kernel lacks it)."""
    monkeypatch.setenv("SDEMATRIX_TRACER", str(built["tracer"]))
    return usable_ptrace(PtraceBackend(cpuid_mode=cpuid_mode))


def test_self_test_passes_in_each_mode(moded_backend: PtraceBackend, cpuid_mode: str) -> None:  # noqa: F811
    assert moded_backend.cpuid_mode_in_use() == cpuid_mode
    how = "CPUID faulting" if cpuid_mode == "fault" else "CPUID breakpoints"
    assert moded_backend.version() == f"vc-tracer 1 ({how})"


def test_auto_mode_uses_faulting_where_available(backend: PtraceBackend) -> None:
    want = "fault" if cpuid_faulting_available() is True else "bp"
    assert backend.cpuid_mode_in_use() == want


def test_self_test_catches_a_tracer_that_does_not_intercept(
    built: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bp mode without breakpoint sites lets the self-test's program read the
    host's CPUID: the backend is then broken, with the field named."""
    monkeypatch.setenv("SDEMATRIX_TRACER", str(built["tracer"]))
    b = PtraceBackend(cpuid_mode="bp")
    monkeypatch.setattr(b, "sites_for", lambda exe, env: [])
    reason = b.unavailable_reason()
    assert reason is not None and reason.startswith(
        "tracer broken: the traced program saw cpuid 1 0 = "
    ), reason
    assert b.cpuid_mode_in_use() is None


def test_fault_mode_without_faulting_names_the_reason(
    built: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SDEMATRIX_TRACER", str(built["tracer"]))
    b = PtraceBackend(cpuid_mode="fault")
    why = cpuid_faulting_available()
    if why is True:
        assert b.unavailable_reason() is None and b.cpuid_mode_in_use() == "fault"
    else:
        assert why.startswith("arch_prctl ARCH_SET_CPUID: "), why
        assert b.unavailable_reason() == f"CPUID faulting not available on this host ({why})"
    # the test suite's skip reason says the same
    assert fault_mode_skip_reason() == (
        None if why is True else f"host has no CPUID faulting ({why})"
    )


def test_unknown_cpuid_mode_is_a_one_line_error() -> None:
    with pytest.raises(
        ValueError, match=r"^unknown CPUID mode 'trap' \(choose from auto, fault, bp\)$"
    ):
        PtraceBackend(cpuid_mode="trap")


def test_second_thread_avx512_is_a_violation(
    moded_backend: PtraceBackend,
    built: dict[str, Path],
    tmp_path: Path,
) -> None:
    """A thread created inside the region runs AVX-512 on a 256-bit model
    without AVX-512: the chip check sees it; the coverage says two threads."""
    if not _host_has("avx512f"):
        pytest.skip("host CPU has no AVX-512F (the sample's thread executes vpxorq zmm)")
    probe = ProbeCommand((str(built["events"]), "--spawn-zmm"))
    r = moded_backend.run(CELL, intel_model(), probe, tmp_path / "w", timeout=scaled(60))
    assert r.status == "ok", r.reason
    assert [(v.mnemonic, v.function, v.bytes_hex) for v in r.violations] == [
        ("VPXORQ", "zmm_work", "62f1e548efdb")
    ]
    assert r.mix is not None
    meta = r.mix.meta
    assert meta["threads_stepped"] == 2
    assert meta["instructions"] == r.mix.overall.total > 0
    assert str(built["events"]) in meta["images"]
    assert any(Path(i).name.startswith("libc.so") for i in meta["images"])
    assert meta["cpuid_mode"] == moded_backend.cpuid_mode_in_use()


def test_protocol_and_version(backend: PtraceBackend) -> None:
    assert isinstance(backend, Backend)
    v = backend.version()
    assert v is not None and v.startswith("vc-tracer 1 (CPUID")


def test_run_builds_mix(backend: PtraceBackend, built: dict[str, Path], tmp_path: Path) -> None:
    probe = ProbeCommand((str(built["dyn"]), "--iters", "64"))
    r = backend.run(CELL, intel_model(avx2=False), probe, tmp_path / "w", timeout=scaled(30))
    assert r.status == "ok", r.reason
    assert r.exit_code == 0 and r.probe is not None and r.probe["avx2"] == 0
    assert r.mix is not None and r.mix.source == "ptrace"
    assert r.mix.overall.forms[("AESENC", "legacy", "xmm")] == 64
    assert r.mix.overall.isa_set["AES"] == 64
    sample = str(built["dyn"])
    assert r.mix.images[sample].total == r.mix.overall.total
    assert any(f.name == "marked_region" and f.image == sample for f in r.mix.functions)
    assert r.violations == []
    saved = Mix.load(Path(r.artifacts["mix"]))
    assert saved.overall.forms == r.mix.overall.forms
    assert saved.meta["cpuid_answered"] >= 3
    assert saved.meta["threads_stepped"] == 1
    assert saved.meta["instructions"] == r.mix.overall.total
    assert saved.meta["images"] == [sample]
    assert saved.meta["unscanned_images"] == []
    assert json.loads(Path(r.artifacts["mix"]).read_text())["source"] == "ptrace"


def test_blocks_can_be_turned_off(
    backend: PtraceBackend,
    built: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe's blocks run natively by default; SDEMATRIX_PTRACE_BLOCKS=0
    single-steps every instruction; the mix is the same."""
    probe = ProbeCommand((str(built["dyn"]), "--iters", "64"))
    fast = backend.run(CELL, intel_model(), probe, tmp_path / "a", timeout=scaled(30))
    monkeypatch.setenv("SDEMATRIX_PTRACE_BLOCKS", "0")
    slow = backend.run(CELL, intel_model(), probe, tmp_path / "b", timeout=scaled(30))
    assert fast.status == slow.status == "ok", (fast.reason, slow.reason)
    assert fast.mix is not None and slow.mix is not None
    assert fast.mix.meta["blocks_entered"] >= 64 and slow.mix.meta["blocks_entered"] == 0
    assert fast.mix.overall.forms == slow.mix.overall.forms
    assert fast.mix.meta["steps"] == slow.mix.meta["steps"]


def test_zmm_is_a_violation_on_256_bit_model(
    backend: PtraceBackend,
    built: dict[str, Path],
    tmp_path: Path,
) -> None:
    if not _host_has("avx512f"):
        pytest.skip("host has no AVX-512")
    probe = ProbeCommand((str(built["dyn"]), "--zmm"))
    model = intel_model()
    r = backend.run(CELL, model, probe, tmp_path / "w", timeout=scaled(30))
    assert r.status == "ok", r.reason
    assert len(r.violations) == 1
    v = r.violations[0]
    assert v.mnemonic == "VPXORQ" and v.function == "marked_region"
    assert v.bytes_hex == "62f1ed48efd2" and "AVX512F" in v.reason
    # with AVX-512 features but 256-bit vectors (AVX10/256) the width is the reason
    avx10 = replace(model, isa=model.isa | {"AVX512F", "AVX512VL"}, max_vector_bits=256)
    r = backend.run(CELL, avx10, probe, tmp_path / "w2", timeout=scaled(30))
    assert [v.mnemonic for v in r.violations] == ["VPXORQ"]
    assert "512-bit" in r.violations[0].reason
    ok = replace(avx10, max_vector_bits=512, xcr0=0xE7)
    assert backend.run(CELL, ok, probe, tmp_path / "w3", timeout=scaled(30)).violations == []


def test_probe_failure_is_error_not_exception(
    backend: PtraceBackend,
    built: dict[str, Path],
    tmp_path: Path,
) -> None:
    r = backend.run(CELL, intel_model(), ProbeCommand((str(built["dyn"]), "--bogus")), tmp_path, 30)
    assert r.status == "error" and r.exit_code == 2
    assert "no JSON report" in (r.reason or "") and "bad argument" in r.stderr_tail
    r = backend.run(CELL, intel_model(), ProbeCommand(("/nonexistent/probe",)), tmp_path, 30)
    assert r.status == "error" and r.reason


def test_timeout_kills_tracee(backend: PtraceBackend, tmp_path: Path) -> None:
    probe = ProbeCommand((sys.executable, "-c", "import time; time.sleep(30)"))
    r = backend.run(CELL, intel_model(), probe, tmp_path, timeout=1.0)
    assert r.status == "timeout" and r.duration_s < 10


def test_cannot_run_names_missing_features(
    backend: PtraceBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sdematrix.backends.ptrace.backend as ptrace_mod

    host = host_features()
    m = intel_model()
    assert backend.cannot_run(replace(m, isa=frozenset(host & m.isa))) is None
    # A host without VAES/AVX512F cannot execute what a model advertising them
    # makes the library (and glibc) run: skip, naming the features.
    with monkeypatch.context() as mp:  # undoes only this patch, not the fixture's
        mp.setattr(ptrace_mod, "host_features", lambda: host - {"VAES", "AVX512F"})
        why = backend.cannot_run(replace(m, isa=m.isa | {"VAES", "AVX512F"}))
    assert why is not None and "VAES" in why and "AVX512F" in why
    # Features nothing in the probe's images dispatches on (AMX, FP16, PKU...) are
    # not a reason to skip: executing one would SIGILL, an error cell, not a pass.
    assert backend.cannot_run(replace(m, isa=frozenset(host & m.isa) | {"AMX_TILE"})) is None
    # names iced does not know (labels such as AVX10) are not a reason to skip
    assert backend.cannot_run(replace(m, isa=frozenset(host & m.isa) | {"AVX10_256"})) is None


def test_host_features_parse() -> None:
    text = "processor: 0\nflags\t\t: fpu sse2 avx2 avx512vl vaes sha_ni weird\n"
    assert host_features(text) == {"FPU", "SSE2", "AVX2", "AVX512VL", "VAES", "SHA"}


def test_parse_tracer_output_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_tracer_output("hello\n")
    with pytest.raises(ValueError, match="corrupt"):
        parse_tracer_output("vc-tracer-output 1\ninsn 0 zz 1 90\n")
    t = parse_tracer_output("vc-tracer-output 1\nsteps 5\nexit signal 9\nend\n")
    assert (t.steps, t.exit_code, t.complete) == (5, 137, True)
