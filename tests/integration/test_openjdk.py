"""A dispatcher nobody here wrote that lives in JIT code: OpenJDK 17's
HotSpot (Debian 12's openjdk-17-jre-headless).

HotSpot reads CPUID in a stub it generates into its code cache (so the
tracer steps it as JIT code: PUSHF/POPF and all, tracer/trapflag.c), picks
its instruction sets from the answer (UseAVX, UseAES, BMI ...) and then
generates its interpreter and compiled code for them.  Under `sdematrix
exec`, `java -Xlog:os+cpu -version`:

* runs as natively (exit 0, its version banner), once per CPUID mode;
* HotSpot's own report of the CPU ("CPU: ... family 6 model 26 ..., sse4.2,
  popcnt, ...") is the model's: Nehalem's without AVX, AES or BMI, Haswell's
  with AVX2, AES, CLMUL, BMI1/2, FMA and LZCNT, neither with AVX-512;
* the chip check of every instruction run, JIT code included (about 1.9
  million JIT steps), is clean: the code HotSpot generated for the model
  fits the model.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX, read_models, run_cli, skip_unless_ptrace_runs

# HotSpot's names for the features it found (vm_version_x86.hpp's list)
EXPECTED = {
    "nhm": ("family 6 model 26 ", {"sse4.2", "popcnt"}, {"avx", "avx2", "aes", "clmul", "bmi1"}),
    "hsw": (
        "family 6 model 60 ",
        {"avx", "avx2", "aes", "clmul", "bmi1", "bmi2", "fma", "lzcnt"},
        {"avx512f", "sha"},
    ),
}


def _cpu_line(stdout: str) -> str:
    m = re.search(r"\[os,cpu\] CPU: (.*)", stdout)
    assert m, stdout[-2000:]
    return m.group(1)


@pytest.mark.skipif(
    shutil.which("java") is None, reason="java (openjdk-17-jre-headless) not installed"
)
@pytest.mark.parametrize(("mode", "model"), [("fault", "nhm"), ("bp", "hsw")])
def test_hotspot_sees_the_model_and_its_jit_code_fits_it(
    tmp_path: Path, mode: str, model: str
) -> None:
    skip_unless_ptrace_runs(SHIPPED_MATRIX, [model], mode)
    out = tmp_path / "out"
    p = run_cli(
        "exec", "--cpu", model, "--cpuid-mode", mode, "--jit-converge", "100000",
        "--timeout", "600", "--out", str(out), "--", "java", "-Xlog:os+cpu", "-version",
        timeout=900,
    )  # fmt: skip
    res = read_models(out)[model]
    assert p.returncode == 0 and res["status"] == "pass", (p.stderr[-3000:], res["reasons"])
    assert res["violations"] == []
    assert 'openjdk version "17' in (out / model / "stderr").read_text()
    line = _cpu_line((out / model / "stdout").read_text())
    where, present, absent = EXPECTED[model]
    features = {f.strip() for f in line.split(",")}
    assert where in line, line
    assert present <= features and not absent & features, line
    meta = res["meta"]
    # HotSpot's CPUID stub went through the PUSHF/POPF path, and its JIT code
    # was stepped (not left unchecked)
    assert meta["pushf_run"] >= 1 and meta["popf_reset"] >= 1, meta
    assert meta["jit_steps"] > 100_000 and meta["jit_unchecked"] == 0, meta
