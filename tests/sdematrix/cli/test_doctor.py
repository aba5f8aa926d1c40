"""sdematrix doctor's line between "this host cannot" (an honest skip) and "the
tool is broken here" (a failure), on the reasons the backends really give."""

from __future__ import annotations

import pytest

from sdematrix.cli.doctor import is_host_limit


@pytest.mark.parametrize(
    "reason",
    [
        "ptrace backend needs Linux x86-64 (this is Darwin arm64)",
        "CPUID faulting not available on this host (arch_prctl ARCH_SET_CPUID: ENODEV)",
        "ptrace not permitted: PTRACE_TRACEME: Operation not permitted",
        "host CPU lacks AVX512F, VAES needed by model spr",
        "host CPU has no 512-bit vectors needed by model spr",
        "host has no CPUID faulting (arch_prctl ARCH_SET_CPUID: ENODEV)",
        "Intel SDE not installed (set SDE_PATH or put sde64 on PATH)",
        "SDE has no chip model for zen4 (Zen 4)",
        "no QEMU CPU model is configured for Sapphire Rapids (qemu_model: null)",
    ],
)
def test_host_limits(reason: str) -> None:
    assert is_host_limit(reason)


@pytest.mark.parametrize(
    "reason",
    [
        "tracer broken: the traced program saw cpuid 1 0 = 0x806f8 ..., the profile says 0x306c3",
        "tracer broken: not a vc-tracer output file",
        "tracer binary not found (set SDEMATRIX_TRACER or build the package's _bin/vc-tracer)",
        "cannot run the tracer: [Errno 8] Exec format error",
        "tracer output incomplete",
        # quoting a host-limit word does not make a broken tracer a host limit
        "tracer broken: --host-profile exit 1: PTRACE_GETREGS: Operation not permitted",
        "ptrace backend unavailable: cannot run the tracer: [Errno 1] Operation not permitted",
    ],
)
def test_broken_tool_is_not_a_host_limit(reason: str) -> None:
    assert not is_host_limit(reason)


def test_backends_say_which_reasons_are_host_limits(tmp_path) -> None:
    """The doctor reads the kind a backend gives its reason (never its text);
    the kinds agree with what is_host_limit makes of the same words."""
    from sdematrix.backends.qemu.backend import QemuBackend
    from sdematrix.backends.registry import _Missing
    from sdematrix.backends.sde.backend import SdeBackend
    from sdematrix.verdict.reasons import Kind

    cases = [
        (SdeBackend(environ={"PATH": str(tmp_path)}).unavailable_reason(), Kind.HOST_LIMIT),
        (
            SdeBackend(sde_path=tmp_path / "none", environ={}).unavailable_reason(),
            Kind.BACKEND_ERROR,
        ),
        (QemuBackend(str(tmp_path / "no-qemu")).unavailable_reason(), Kind.HOST_LIMIT),
        (_Missing("x", "no module").unavailable_reason(), Kind.BACKEND_ERROR),
    ]
    for why, kind in cases:
        assert why is not None and why.kind is kind, why
        assert is_host_limit(why) == (kind is Kind.HOST_LIMIT), why
