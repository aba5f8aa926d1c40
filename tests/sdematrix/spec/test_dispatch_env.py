"""Environment variables that override a library's CPU dispatch
(sdematrix.spec.dispatch_env): which ones ``exec`` names beside its verdicts,
and vaescrypt's own mask, which ``run`` keeps away from the probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles.sdematrix_cli import cli_env, ptrace_skip_reason, run_cli

from sdematrix.backends.base import ProbeCommand
from sdematrix.spec.dispatch_env import dispatch_overrides

ROOT = Path(__file__).resolve().parents[3]


def test_the_variables_named_and_the_ones_left_alone() -> None:
    env = {
        "OPENBLAS_CORETYPE": "Haswell",
        "OPENBLAS_L2_SIZE": "512",  # a cache size, not a kernel choice
        "OPENBLAS_VERBOSE": "2",
        "NVPL_BLAS_DEBUG_CPU_TYPE": "1",  # NVIDIA's Arm BLAS: no x86 dispatch
        "OPENSSL_ia32cap": "~0x200000200000000",
        "JSIMD_FORCESSE2": "1",
        "DOTNET_EnableAVX2": "0",
        "COMPlus_EnableAVX": "0",
        "GODEBUG": "madvdontneed=1,cpu.avx2=off",
        "ATEN_CPU_CAPABILITY": "avx2",
        "PATH": "/usr/bin",
    }
    got = {o.variable: o.library for o in dispatch_overrides(env)}
    assert got == {
        "OPENBLAS_CORETYPE": "OpenBLAS",
        "OPENSSL_ia32cap": "OpenSSL",
        "JSIMD_FORCESSE2": "libjpeg-turbo",
        "DOTNET_EnableAVX2": ".NET runtime",
        "COMPlus_EnableAVX": ".NET runtime",
        "GODEBUG": "Go runtime",
        "ATEN_CPU_CAPABILITY": "PyTorch",
    }
    first = dispatch_overrides(env)[0]
    assert first.describe().startswith("ATEN_CPU_CAPABILITY=avx2 (PyTorch: ")


@pytest.mark.parametrize(
    ("var", "value", "named"),
    [
        ("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2_Usable", True),
        ("GLIBC_TUNABLES", "glibc.malloc.check=3:glibc.cpu.hwcap_mask=0", True),
        ("GLIBC_TUNABLES", "glibc.malloc.check=3", False),  # no CPU tunable
        ("GODEBUG", "madvdontneed=1", False),
        ("GODEBUG", "cpu.all=off", True),
        ("VAESCRYPT_CPU_MASK", "-vaes", True),
    ],
)
def test_variables_named_by_what_their_value_holds(var: str, value: str, named: bool) -> None:
    assert bool(dispatch_overrides({var: value})) is named


def test_the_probe_never_inherits_the_mask_but_a_cell_may_set_it() -> None:
    caller = {"PATH": "/usr/bin", "VAESCRYPT_CPU_MASK": "-avx512f", "LANG": "C"}
    assert ProbeCommand(argv=("vc-probe",)).environment(caller) == {"PATH": "/usr/bin", "LANG": "C"}
    cell = ProbeCommand(argv=("vc-probe",), env={"VAESCRYPT_CPU_MASK": "-vaes"})
    assert cell.environment(caller)["VAESCRYPT_CPU_MASK"] == "-vaes"
    assert caller["VAESCRYPT_CPU_MASK"] == "-avx512f"  # the caller's mapping is left as it was


# the project's guard: a host limit skips, a broken tracer fails
_WSM_WHY = ptrace_skip_reason(ROOT / "sde_matrix.yaml", ["wsm"])


@pytest.mark.skipif(_WSM_WHY is not None, reason=str(_WSM_WHY))
def test_a_masked_shell_does_not_change_the_matrix(tmp_path) -> None:
    """With VAESCRYPT_CPU_MASK=-aes inherited, the probe on wsm (AES-NI)
    picked the generic path and every cell failed as 'generic != aesni';
    now the run says the mask is not passed on and wsm takes aesni."""
    out = tmp_path / "o"
    r = run_cli(
        "run",
        "--cpu",
        "wsm",
        "--backend",
        "ptrace",
        "--out",
        str(out),
        env=cli_env(VAESCRYPT_CPU_MASK="-aes"),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "VAESCRYPT_CPU_MASK=-aes in the environment is not passed to the probe" in r.stderr
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert len(cells) == 10 and all(c["status"] == "pass" for c in cells)
    assert {c["path"] for c in cells if c["mode"] == "gcm"} == {"aesni"}


@pytest.mark.parametrize(
    "odd",
    [None, "OPENBLAS_CORETYPE", [3, None, "x"], {"variable": "A"}, [{"variable": 7, "x": []}]],
)
def test_a_results_file_with_odd_overrides_still_renders(odd: object) -> None:
    """`sdematrix report OUT` reads results.json back: whatever its
    ``dispatch_overrides`` holds, the report renders (no traceback)."""
    from sdematrix.report.exec_html import render_html, render_markdown

    doc = {"argv": ["true"], "models": [], "dispatch_overrides": odd}
    md, page = render_markdown(doc), render_html(doc)
    notes = md.count("> the environment overrides CPU dispatch")
    assert notes == page.count("class='note'")
    assert notes == (1 if isinstance(odd, list) and odd and isinstance(odd[-1], dict) else 0)
