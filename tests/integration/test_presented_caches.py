"""Programs nobody here wrote see the model's caches, not none.

glibc reads its cache sizes from CPUID at start-up (leaf 2 / leaf 4 on
Intel, 0x80000005-6 on AMD) and sizes memcpy's non-temporal threshold from
them; OpenBLAS reads 0x80000006 for its blocking.  A profile that answered
those leaves with zeros (every profile before its cache leaves were listed)
showed a machine with no caches: `getconf LEVEL1_DCACHE_SIZE` printed
nothing, glibc fell back to its 16 KiB floor for non-temporal stores (so
every memcpy above 16 KiB under any model took the streaming path a real
chip takes only from megabytes), and numpy's OpenBLAS printed "could not
determine the L2 cache size".

Here the real programs run under `sdematrix exec` in each CPUID mode the host
has, on models of both vendors, a hybrid part and an old one, and what they
read must be what the profile's leaves decode to
(:mod:`sdematrix.spec.caches`).
"""

from __future__ import annotations

import re
import sys

import pytest
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    cli_env,
    run_cli,
    skip_unless_ptrace_runs,
)

from sdematrix.spec.caches import ext_l2_l3, presented_caches
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import CpuModel

# both vendors, a hybrid client part (CPU #0 of its dump), a server part and
# a pre-leaf-0xB one
MODELS = ["spr", "adl", "snb", "zen4", "p4p"]
GLIBC_NT_FLOOR = 0x4040  # glibc's minimum x86_non_temporal_threshold (dl-cacheinfo.h)


def _exec(model: str, mode: str, *argv: str) -> str:
    # the programs' own readings: a host's GLIBC_TUNABLES would set glibc's
    # thresholds and OPENBLAS_CORETYPE OpenBLAS's kernels whatever CPUID says
    env = {k: v for k, v in cli_env().items() if k not in ("GLIBC_TUNABLES", "OPENBLAS_CORETYPE")}
    r = run_cli(
        "exec", "--cpu", model, "--cpuid-mode", mode, "--", *argv,
        env=env,
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-1200:]
    return r.stdout + r.stderr


def _glibc_readings(model: CpuModel) -> dict[str, set[int]]:
    """What glibc's sysconf may report for the model's leaves: on Intel the
    leaf-4 caches by level and kind; on AMD L1d and L2 (0x80000005-6 and
    0x8000001D agree on them: the unit tests check it) and L3 either as
    0x80000006 EDX gives it (the whole package: glibc 2.36's handle_amd)
    or as 0x8000001D does (one core complex: glibc versions that read that
    leaf), both being what a real Zen answers."""
    caches = {c.name: c for c in presented_caches(model)}
    want = {
        "LEVEL1_DCACHE_SIZE": {caches["L1d"].size},
        "LEVEL1_DCACHE_LINESIZE": {caches["L1d"].line},
        "LEVEL2_CACHE_SIZE": {caches["L2"].size},
    }
    if model.vendor == "AuthenticAMD":
        want["LEVEL3_CACHE_SIZE"] = {ext_l2_l3(model)[1], caches["L3"].size}
    elif "L3" in caches:
        want["LEVEL3_CACHE_SIZE"] = {caches["L3"].size}
    return want


@pytest.mark.parametrize("mode", ["bp", "fault"])
@pytest.mark.parametrize("cpu", MODELS)
def test_getconf_reads_the_models_caches(cpu: str, mode: str) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, [cpu], mode)
    model = load_matrix(SHIPPED_MATRIX).models[cpu]
    out = _exec(cpu, mode, "getconf", "-a")
    seen = dict(re.findall(r"^(LEVEL\d_\w+?)\s+(\d+)$", out, re.MULTILINE))
    want = _glibc_readings(model)
    wrong = {k: (seen.get(k), sorted(v)) for k, v in want.items() if int(seen.get(k, -1)) not in v}
    assert not wrong, (wrong, out[-1500:])


@pytest.mark.parametrize("mode", ["bp", "fault"])
@pytest.mark.parametrize("cpu", MODELS)
def test_glibc_non_temporal_threshold_is_not_the_no_cache_floor(cpu: str, mode: str) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, [cpu], mode)
    out = _exec(cpu, mode, "/lib64/ld-linux-x86-64.so.2", "--list-tunables")
    m = re.search(r"glibc\.cpu\.x86_non_temporal_threshold: 0x([0-9a-f]+)", out)
    assert m is not None, out[-1500:]
    # a fraction of the shared cache per thread: above the floor on every model
    assert int(m.group(1), 16) > GLIBC_NT_FLOOR, out[-1500:]


@pytest.mark.parametrize("mode", ["bp", "fault"])
def test_openblas_finds_an_l2_cache(mode: str) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["spr"], mode)
    try:
        import numpy  # noqa: F401
    except ImportError as e:  # the test extra installs it: missing is a broken setup
        pytest.fail(f"numpy not importable ({e}); pip install -e '.[test]'")
    out = _exec("spr", mode, sys.executable, "-c", "import numpy; print(numpy.ones(4).sum())")
    assert "4.0" in out, out[-1500:]
    assert "could not determine the L2 cache size" not in out, out[-1500:]
