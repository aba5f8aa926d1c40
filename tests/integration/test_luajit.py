"""A JIT nobody here wrote whose code generator follows CPUID: LuaJIT 2.1
(Debian 12's luajit).

LuaJIT reads CPUID once (lj_vm_cpuid, in its own binary) and its x86
backend then emits SSE4.1's ROUNDSD for math.floor where the CPU has SSE4.1
and BMI2's SHLX/SHRX/RORX for bit operations where it has BMI2; `jit.status()`
names what it found.  Under `sdematrix exec`, a script whose trace uses
both:

* prints what it prints natively, on every model, in both CPUID modes;
* LuaJIT reports the model's features: "SSE3" on p4p, "SSE4.1" from nhm,
  "BMI2" from hsw;
* the trace it generated ([anon], every instruction of it stepped) holds
  exactly those instructions: no SSE4.1 on p4p, ROUNDSD but no BMI2 on nhm,
  BMI2 on hsw -- the instruction mix proves which code LuaJIT generated --
  and the chip check of all of it is clean.

The trace calls a VM helper on every iteration, so it leaves its JIT region
and enters it again each time (two injected syscalls an entry, and
--jit-converge counts per entry: docs/EXEC.md): 2,000 iterations keep it
to seconds, and LuaJIT compiles the loop after 56.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from doubles.sdematrix_cli import SHIPPED_MATRIX, read_models, run_cli, skip_unless_ptrace_runs

SCRIPT = """\
local bit = require("bit")
local s, f = 0, 0
for i = 1, 2000 do
  s = bit.bxor(s, bit.lshift(i, i % 7), bit.rshift(i, i % 5))
  f = f + math.floor(i / 3.5)
end
print(s, f)
print(select(2, jit.status()) ~= nil and table.concat({select(2, jit.status())}, " ") or "")
"""

# model: (features LuaJIT must report, must not report, ISA extensions its
# trace must hold, must not hold)
EXPECTED = {
    "p4p": ({"SSE3"}, {"SSE4.1", "BMI2"}, set(), {"SSE4", "BMI2"}),
    "nhm": ({"SSE3", "SSE4.1"}, {"BMI2"}, {"SSE4"}, {"BMI2"}),
    "hsw": ({"SSE3", "SSE4.1", "BMI2"}, set(), {"SSE4", "BMI2"}, set()),
}


def _trace_isa(mix_json: dict) -> set[str]:
    return {ext for f in mix_json["functions"] if f["image"] == "[anon]" for ext in f["by_isa_ext"]}


@pytest.mark.skipif(shutil.which("luajit") is None, reason="luajit not installed")
@pytest.mark.parametrize("mode", ["fault", "bp"])
def test_luajit_generates_code_for_the_model(tmp_path: Path, mode: str) -> None:
    models = list(EXPECTED)
    skip_unless_ptrace_runs(SHIPPED_MATRIX, models, mode)
    script = tmp_path / "trace.lua"
    script.write_text(SCRIPT)
    native = subprocess.run(
        ["luajit", str(script)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    out = tmp_path / "out"
    p = run_cli(
        "exec", "--cpu", ",".join(models), "--cpuid-mode", mode, "--jobs", "2",
        "--out", str(out), "--", "luajit", str(script),
        timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    res = read_models(out)
    for model, (has, lacks, isa_has, isa_lacks) in EXPECTED.items():
        r = res[model]
        assert r["status"] == "pass" and r["violations"] == [], (model, r["reasons"])
        lines = (out / model / "stdout").read_text().splitlines()
        assert lines[0] == native[0], (model, lines)  # the script's result
        flags = set(lines[1].split())
        assert has <= flags and not lacks & flags, (model, lines[1])
        isa = _trace_isa(json.loads((out / model / "mix.json").read_text()))
        assert isa_has <= isa and not isa_lacks & isa, (model, isa)
        assert r["meta"]["jit_steps"] > 1000 and r["meta"]["jit_unchecked"] == 0, r["meta"]
