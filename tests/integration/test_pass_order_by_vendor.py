"""The order in which the one-shot pass runs an avx10_256 encryption of 6-8
vectors follows the CPU's vendor: round by round on AMD, vector by vector
on any other (vc_gcm_key_new sets the key's round_major from CPUID leaf 0;
tier_avx10_256.c leaves the choice to it with VC_RM_ENC 2).

Proven the way the matrix proves a path: the real probe runs under the
ptrace backend presenting the shipped zen4 and icl profiles, in each CPUID
mode the host has, with the path forced to avx10_256 (neither model
dispatches it: zen4 takes avx512, icl is a prefer-ymm model but the forced
path is what is under test).

- The mix counts the ymm VAESENCs, which in these runs only the pass
  executes.  Round by round runs all 8 vectors' 13 middle rounds (AES-256)
  even for a 6-vector message; vector by vector runs only the 6 it needs.
- At 256 bytes (8 vectors) both orders do the same AES work.
- Every run gives the matrix's known answer (expected_digest: the
  `cryptography` output the cells are judged by), also for messages that
  end in a partial vector (200 and 255 bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX, fault_mode_skip_reason, usable_ptrace

from sdematrix.backends.probe import expected_digest, probe_command
from sdematrix.backends.ptrace.backend import PtraceBackend
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import Cell

MIDDLE_ROUNDS = 13  # AES-256: 14 rounds, the last one VAESENCLAST
# The shipped profiles and the order each vendor gets.
ROUND_MAJOR = {"zen4": True, "icl": False}


def _ymm_vaesenc(forms: dict[tuple[str, str, str], int]) -> int:
    """ymm VAESENCs of either encoding (GCC writes VEX for ymm0-15)."""
    return sum(n for (mn, _enc, width), n in forms.items() if mn == "VAESENC" and width == "ymm")


@pytest.fixture(params=["bp", "fault"])
def backend(request: pytest.FixtureRequest) -> PtraceBackend:
    """The ptrace backend in each CPUID mode ("fault" only where the kernel
    has CPUID faulting); a tracer that fails its self-test is a failure."""
    if request.param == "fault":
        why = fault_mode_skip_reason()
        if why is not None:
            pytest.skip(why)
    return usable_ptrace(PtraceBackend(cpuid_mode=str(request.param)))


@pytest.mark.parametrize("cpu", sorted(ROUND_MAJOR))
def test_encryption_order_follows_the_vendor(
    backend: PtraceBackend, cpu: str, tmp_path: Path
) -> None:
    model = load_matrix(SHIPPED_MATRIX).models[cpu]
    why = backend.cannot_run(model)
    if why is not None:
        pytest.skip(why)
    vendor = "AuthenticAMD" if ROUND_MAJOR[cpu] else "GenuineIntel"
    counts = {}
    for length in (192, 200, 255, 256):
        cell = Cell(cpu, "gcm", "encrypt", 256, length)
        r = backend.run(
            cell,
            model,
            probe_command(cell, 1, impl="avx10_256"),
            tmp_path / f"{length}",
            timeout=120,
        )
        assert r.status == "ok", r.reason
        assert r.violations == [], [v.describe() for v in r.violations]
        assert r.probe is not None and r.mix is not None
        assert (r.probe["path"], r.probe["vendor"]) == ("avx10_256", vendor)
        assert r.probe["digest"] == expected_digest(cell, 1), length
        counts[length] = _ymm_vaesenc(r.mix.overall.forms)
    assert counts[256] == 8 * MIDDLE_ROUNDS
    assert counts[192] == (8 if ROUND_MAJOR[cpu] else 6) * MIDDLE_ROUNDS
