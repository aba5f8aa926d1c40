"""Models this host cannot execute faithfully (sdematrix.backends.host_isa): what a
model's CPUID advertises and the host's CPUID lacks is named (doctor, run
header, exec's verdict line), and a SIGILL on such an instruction is an error
of the model ("host cannot execute X (model M advertises it)"), while a
program's own SIGILL stays the program's failure.  The end-to-end test picks,
from this host's real CPUID, an instruction the host lacks and a model that
advertises it, so it works on any host."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from doubles.sdematrix_cli import run_cli

from sdematrix.backends.host_isa import (
    FEATURE_BITS,
    host_cpuid,
    host_lacks,
    parse_profile,
    sigill_reason,
)
from sdematrix.backends.ptrace.backend import PtraceBackend, parse_tracer_output
from sdematrix.spec.matrix_file import load_matrix

ROOT = Path(__file__).resolve().parent.parent.parent.parent
MODELS = load_matrix(ROOT / "src" / "sdematrix" / "sde_matrix.yaml").models


def _leaves(model: str) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    return {(c.leaf, c.subleaf): (c.eax, c.ebx, c.ecx, c.edx) for c in MODELS[model].cpuid}


def test_gap_between_two_models_cpuids() -> None:
    """dmr run on an spr-like host: dmr's additions are named, spr's own
    features are not; a model run on itself has no gap."""
    spr_host = _leaves("spr")
    gap = host_lacks(MODELS["dmr"], spr_host)
    for f in ("AMX_FP16", "AMX_COMPLEX", "AVX_IFMA", "AVX_VNNI_INT8", "SHA512", "APX_F", "AVX10.2"):
        assert f in gap, gap
    assert "AVX512_FP16" not in gap and "AMX_TILE" not in gap
    assert host_lacks(MODELS["spr"], spr_host) == []
    # AVX10.1 (gnr) adds no instruction an AVX-512 host lacks: not a gap
    assert "AVX10" not in " ".join(host_lacks(MODELS["gnr"], spr_host))
    # a Zen 4-like host lacks what spr advertises beyond it (issue 21's case)
    zen4 = host_lacks(MODELS["spr"], _leaves("zen4"))
    assert "AVX512_FP16" in zen4 and "AMX_TILE" in zen4
    assert host_lacks(MODELS["nhm"], _leaves("zen4")) == []


def test_sigill_reason_names_the_feature_and_the_model() -> None:
    spr_host = _leaves("spr")
    vpmadd52 = bytes.fromhex("c4e2f5b4c2")  # vpmadd52luq ymm0,ymm1,ymm2: AVX-IFMA
    why = sigill_reason(MODELS["dmr"], vpmadd52, "f in prog", spr_host)
    assert why is not None
    assert why.startswith("host cannot execute AVX_IFMA (model dmr advertises it)")
    assert "f in prog" in why and "c4e2f5b4c2" in why
    # the host has it: not the host's limit
    assert sigill_reason(MODELS["dmr"], vpmadd52, "", _leaves("dmr")) is None
    # ud2: the program's own SIGILL
    assert sigill_reason(MODELS["dmr"], bytes.fromhex("0f0b"), "", spr_host) is None


def test_profile_and_tracer_output_parsing() -> None:
    assert parse_profile("cpuid 7 1 10 0 0 20\nxcr0 e7\ncpuid x\n") == {(7, 1): (0x10, 0, 0, 0x20)}
    out = parse_tracer_output(
        "vc-tracer-output 1\nsigill 0 401000 c4e2f5b4c2\nexit signal 4\nend\n"
    )
    assert out.sigill == (0, 0x401000, bytes.fromhex("c4e2f5b4c2"))
    assert out.exit_code == 132


def test_every_name_is_a_cpuid_bit_once() -> None:
    assert len(set(FEATURE_BITS.values())) == len(FEATURE_BITS)


# ---- end to end on this host ---------------------------------------------------------

_ptrace_why = PtraceBackend().unavailable_reason()
needs_ptrace = pytest.mark.skipif(
    _ptrace_why is not None, reason=f"ptrace backend unavailable here: {_ptrace_why}"
)
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

# user-mode register-only instructions, one per feature (iced-checked encodings)
CANDIDATES = {
    # first: a host whose CPUID has no RDSEED (Xen can hide it, XSA-320) still
    # runs models that advertise it (backends/ptrace/backend.py, HOST_REQUIRED_FEATURES), so a
    # program that executes it there must be this error
    "RDSEED": "0fc7f8",  # rdseed eax
    "AVX_IFMA": "c4e2f5b4c2",  # vpmadd52luq ymm0,ymm1,ymm2
    "AVX_VNNI_INT8": "c4e27350c2",  # vpdpbssd xmm0,xmm1,xmm2
    "AVX_NE_CONVERT": "c4e27a72c1",  # vcvtneps2bf16 xmm0,xmm1
    "SHA512": "c4e277cbc2",  # vsha512rnds2 ymm0,ymm1,xmm2
    "SM3": "c4e270dac2",  # vsm3msg1 xmm0,xmm1,xmm2
    "AVX512_FP16": "62f5744858c2",  # vaddph zmm0,zmm1,zmm2
}


def _pick() -> tuple[str, str, str] | None:
    """(feature, encoding, model): an instruction this host lacks that a
    model the ptrace backend runs here advertises."""
    if host_cpuid() is None:
        return None
    backend = PtraceBackend()
    for feature, code in CANDIDATES.items():
        for name, model in MODELS.items():
            if feature in host_lacks(model) and backend.cannot_run(model) is None:
                return feature, code, name
    return None


def _prog(tmp_path: Path, code_hex: str) -> Path:
    data = ",".join(f"0x{code_hex[i : i + 2]}" for i in range(0, len(code_hex), 2))
    src = tmp_path / "ill.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((noinline)) static void uses_it(void)\n"
        f'{{ __asm__ volatile(".byte {data}" ::: "xmm0", "rax", "cc"); }}\n'
        'int main(void) { puts("before"); fflush(stdout); uses_it(); return 0; }\n'
    )
    exe = tmp_path / "ill"
    subprocess.run(["gcc", "-O2", str(src), "-o", str(exe)], check=True)
    return exe


def _sdematrix(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=600)  # tests/doubles/sdematrix_cli.py


@needs_ptrace
@needs_gcc
def test_sigill_on_an_advertised_feature_the_host_lacks_is_an_error(tmp_path: Path) -> None:
    picked = _pick()
    if picked is None:
        pytest.skip(
            f"this host has every feature among {', '.join(CANDIDATES)} that a "
            "model runnable here advertises"
        )
    feature, code, model = picked
    out = tmp_path / "out"
    p = _sdematrix("exec", "--cpu", model, "--out", str(out), "--", str(_prog(tmp_path, code)))
    assert f"{model:<8} ERROR host cannot execute {feature} (model {model} advertises it)" in (
        p.stderr
    ), p.stderr
    assert "uses_it in " in p.stderr  # names the function
    assert "host cannot execute (model advertises it): " in p.stderr  # the verdict line's list
    row = json.loads((out / "results.json").read_text())["models"][0]
    assert row["status"] == "error"
    assert feature in row["meta"]["host_lacks"]


@needs_ptrace
@needs_gcc
def test_a_programs_own_sigill_stays_a_failure(tmp_path: Path) -> None:
    """ud2 under the same kind of model: the program's bug, exit 132, FAIL."""
    picked = _pick()
    model = picked[2] if picked else "spr"
    p = _sdematrix("exec", "--cpu", model, "--", str(_prog(tmp_path, "0f0b")))
    assert f"{model:<8} FAIL  exit 132" in p.stderr, p.stderr
    assert "host cannot execute 0F0B" not in p.stderr


def test_doctor_names_the_gap_per_model() -> None:
    p = _sdematrix("doctor")
    assert p.returncode == 0, p.stderr
    gaps = {n: host_lacks(m) for n, m in MODELS.items()}
    if _ptrace_why is None and any(gaps.values()):
        assert "models whose CPUID advertises what this host cannot execute" in p.stdout
        name, lacks = next((n, g) for n, g in gaps.items() if g)
        assert f"  {name}: host cannot execute {', '.join(lacks)}" in p.stdout
