"""Encodings an older model executes as a different instruction (TZCNT as BSF,
LZCNT as BSR, ...: sdematrix.evidence.decode.LEGACY_FORMS), judged alike by the chip
check of `sdematrix run` (mix_build.checked_mix: ptrace and QEMU), of
`sdematrix exec` (exec_check.whole_checked_mix) and recorded alike in their
mixes; and, end to end, `sdematrix exec` on small programs gcc builds here."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from doubles.sdematrix_cli import run_cli

from sdematrix.backends.ptrace.backend import PtraceBackend, parse_tracer_output
from sdematrix.backends.qemu.backend import mix_from_plugin
from sdematrix.evidence.decode import LEGACY_FORMS, as_executed, chip_check, decode, legacy_form
from sdematrix.evidence.exec_check import whole_checked_mix
from sdematrix.evidence.mix import Mix
from sdematrix.evidence.mix_build import Executed, checked_mix, zero_source_as_bsf
from sdematrix.evidence.symbols import Location, Mapping
from sdematrix.qemu_plugin import PluginOutput
from sdematrix.spec.matrix_file import load_matrix

ROOT = Path(__file__).resolve().parent.parent.parent.parent
MODELS = load_matrix(ROOT / "src" / "sdematrix" / "sde_matrix.yaml").models

TZCNT = bytes.fromhex("f3480fbcc0")  # tzcnt rax, rax (glibc's printf has this one)
TZCNT32 = bytes.fromhex("f30fbcf0")  # tzcnt esi, eax (gcc -march=x86-64 __builtin_ctz)
LZCNT = bytes.fromhex("f30fbdf0")  # lzcnt esi, eax
BSF = bytes.fromhex("0fbcf0")  # bsf esi, eax
WBNOINVD = bytes.fromhex("f30f09")


def _loc(addr: int, code: bytes = b"") -> Location:
    return Location("img", "fn", 0x1000, 0x2000)


# ---- the table and the chip check ---------------------------------------------------


@pytest.mark.parametrize("model", ["p4p", "nhm", "wsm", "snb", "ivb", "slm", "glm"])
def test_tzcnt_is_bsf_on_models_without_bmi1(model: str) -> None:
    m = MODELS[model]
    assert "BMI1" not in m.isa
    for code in (TZCNT, TZCNT32, bytes.fromhex("66f30fbcc0"), bytes.fromhex("f30fbc00")):
        insn = decode(code)
        assert insn.mnemonic == "TZCNT"
        assert chip_check(insn, m) is None
        lf = legacy_form(insn, m)
        assert lf is not None and lf.label == "TZCNT as BSF"
        ran = as_executed(insn, m)
        assert (ran.mnemonic, ran.isa_set, ran.isa_ext) == ("BSF", "I386", "BASE")
        assert ran.text.startswith("bsf ")
        assert ran.encoding == insn.encoding and ran.width == insn.width


@pytest.mark.parametrize("model", ["hsw", "skx", "spr"])
def test_tzcnt_and_lzcnt_are_themselves_where_the_model_has_them(model: str) -> None:
    m = MODELS[model]
    for code, mnem in ((TZCNT, "TZCNT"), (LZCNT, "LZCNT")):
        insn = decode(code)
        assert chip_check(insn, m) is None
        assert legacy_form(insn, m) is None
        assert as_executed(insn, m) is insn
        assert insn.mnemonic == mnem


@pytest.mark.parametrize("model", ["p4p", "nhm", "wsm", "snb", "ivb", "slm"])
def test_lzcnt_without_lzcnt_is_a_violation_that_says_bsr(model: str) -> None:
    m = MODELS[model]
    why = chip_check(decode(LZCNT), m)
    assert why is not None
    assert f"LZCNT executes as BSR on model {model}" in why
    assert "returns a different result" in why
    assert "not in model" not in why
    assert as_executed(decode(LZCNT), m).mnemonic == "BSR"


def test_plain_bsf_and_other_instructions_are_not_legacy_forms() -> None:
    nhm = MODELS["nhm"]
    for code in (BSF, bytes.fromhex("f3c3"), bytes.fromhex("f390"), bytes.fromhex("f30fb8c0")):
        insn = decode(code)
        assert insn.legacy is None
        assert as_executed(insn, nhm) is insn
    # POPCNT has no older meaning: on p4p it is #UD, reported as missing
    assert "POPCNT not in model p4p" in (
        chip_check(decode(bytes.fromhex("f30fb8c0")), MODELS["p4p"]) or ""
    )


def test_wbnoinvd_is_wbinvd_without_the_feature() -> None:
    insn = decode(WBNOINVD)
    assert chip_check(insn, MODELS["skx"]) is None
    assert as_executed(insn, MODELS["skx"]).mnemonic == "WBINVD"
    assert as_executed(insn, MODELS["icx"]).mnemonic == "WBNOINVD"


def test_every_table_entry_cites_its_source_and_names_a_known_feature() -> None:
    import iced_x86 as iced

    names = set(vars(iced.CpuidFeature))
    codes = {v: k for k, v in vars(iced.Code).items() if isinstance(v, int)}
    for code, lf in LEGACY_FORMS.items():
        assert "XED" in lf.source
        assert lf.feature in names
        assert codes[code].startswith(lf.new + "_") or codes[code] == lf.new


def test_hle_prefixes_rep_ret_pause_bnd_notrack_need_nothing_on_p4p() -> None:
    """Prefixes older parts ignore: XACQUIRE/XRELEASE (HLE), REP on RET, BND,
    NOTRACK, branch hints; PAUSE (a NOP before the Pentium 4): legal on the
    oldest model and recorded as what they are."""
    p4p = MODELS["p4p"]
    for hexcode, mnem in (
        ("f2f00fb111", "CMPXCHG"),  # xacquire lock cmpxchg
        ("f3f00fb111", "CMPXCHG"),  # xrelease lock cmpxchg
        ("f3c60001", "MOV"),  # xrelease mov (HLE release store)
        ("f3c3", "RET"),  # rep ret
        ("f390", "PAUSE"),
        ("f2c3", "RET"),  # bnd ret
        ("3effe0", "JMP"),  # notrack jmp rax
        ("2e7400", "JE"),  # hint-not-taken
    ):
        insn = decode(bytes.fromhex(hexcode))
        assert insn.mnemonic == mnem
        assert chip_check(insn, p4p) is None, hexcode


# ---- the mixes: run (ptrace/QEMU) and exec alike ------------------------------------


def _executed() -> list[Executed]:
    return [
        Executed(0x1000, TZCNT, 5, _loc),
        Executed(0x1005, BSF, 2, _loc),
        Executed(0x1008, LZCNT, 3, _loc),
    ]


def test_run_mix_records_what_the_model_executes() -> None:
    mix, violations = checked_mix("ptrace", _executed(), MODELS["nhm"])
    assert mix.overall.mnemonic == {"BSF": 7, "BSR": 3}
    assert mix.overall.isa_set["I386"] == 10
    assert dict(mix.legacy_forms) == {"TZCNT as BSF": 5, "LZCNT as BSR": 3}
    assert mix.legacy_total == 8
    assert [v.address for v in violations] == [0x1008]
    assert "executes as BSR" in violations[0].reason
    assert violations[0].mnemonic == "LZCNT" and violations[0].bytes_hex == LZCNT.hex()

    mix, violations = checked_mix("ptrace", _executed(), MODELS["hsw"])
    assert mix.overall.mnemonic == {"TZCNT": 5, "BSF": 2, "LZCNT": 3}
    assert not mix.legacy_forms and not violations


def test_exec_whole_check_agrees_with_run_check() -> None:
    items = [(0, e.address, e.code, e.count) for e in _executed()]
    for model in ("nhm", "hsw", "p4p"):
        fast, fv, _n = whole_checked_mix("ptrace", items, lambda _s: _loc, MODELS[model])
        ref, rv = checked_mix("ptrace", _executed(), MODELS[model])
        assert fast.to_json() == ref.to_json()
        assert fv == rv


def test_qemu_mix_goes_through_the_same_table(tmp_path: Path) -> None:
    img = tmp_path / "img"
    img.write_bytes(TZCNT + LZCNT + b"\xc3")
    base = 0x400000
    run = PluginOutput(
        pid=1,
        counts={(base, TZCNT): 4, (base + 5, LZCNT): 1, (base + 9, b"\xc3"): 1},
        maps=[Mapping(base, base + 0x1000, "r-xp", 0, str(img))],
    )
    mix, violations = mix_from_plugin([run], model=MODELS["wsm"])
    assert mix.overall.mnemonic == {"BSF": 4, "BSR": 1, "RET": 1}
    assert dict(mix.legacy_forms) == {"TZCNT as BSF": 4, "LZCNT as BSR": 1}
    assert len(violations) == 1 and "LZCNT executes as BSR on model wsm" in violations[0].reason


def test_legacy_forms_survive_the_mix_file(tmp_path: Path) -> None:
    mix, _ = checked_mix("ptrace", _executed(), MODELS["nhm"])
    mix.save(tmp_path / "m.json")
    back = Mix.load(tmp_path / "m.json")
    assert back.legacy_forms == mix.legacy_forms
    assert back.to_json() == mix.to_json()


# ---- end to end: sdematrix exec --------------------------------------------------------

_ptrace_why = PtraceBackend().unavailable_reason()
needs_ptrace = pytest.mark.skipif(
    _ptrace_why is not None, reason=f"ptrace backend unavailable here: {_ptrace_why}"
)
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

_PROG = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    unsigned x = (unsigned)strtoul(argc > 1 ? argv[1] : "1000", 0, 0);
    printf("%d\n", __builtin_%s(x));
    return 0;
}
"""


def _build(tmp_path: Path, name: str, builtin: str, *flags: str) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(_PROG.replace("%s", builtin, 1))
    exe = tmp_path / name
    subprocess.run(["gcc", "-O2", *flags, str(src), "-o", str(exe)], check=True)
    return exe


def _sdematrix(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=600)  # tests/doubles/sdematrix_cli.py


@needs_ptrace
@needs_gcc
def test_exec_lzcnt_program_fails_on_wsm_with_the_bsr_message(tmp_path: Path) -> None:
    exe = _build(tmp_path, "lz", "clz", "-mlzcnt")
    dis = subprocess.run(
        ["objdump", "-d", str(exe)], capture_output=True, text=True, check=True
    ).stdout
    assert "lzcnt" in dis  # gcc really emitted F3 0F BD
    out = tmp_path / "out"
    p = _sdematrix("exec", "--cpu", "wsm,hsw", "--out", str(out), "--", str(exe))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "wsm      FAIL" in p.stderr and "hsw      PASS" in p.stderr
    assert "LZCNT executes as BSR on model wsm (no LZCNT) and returns a different result" in (
        p.stderr
    )
    assert "main in lz" in p.stderr  # names the function


@needs_ptrace
@needs_gcc
def test_exec_tzcnt_program_passes_on_nhm_and_counts_the_bsf(tmp_path: Path) -> None:
    exe = _build(tmp_path, "tz", "ctz", "-march=x86-64")
    out = tmp_path / "out"
    p = _sdematrix("exec", "--cpu", "nhm,hsw", "--out", str(out), "--", str(exe), "8")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "nhm" / "stdout").read_text() == "3\n" == (out / "hsw" / "stdout").read_text()
    assert "legacy_forms" in p.stderr and "TZCNT as BSF" in p.stderr
    rows = {m["model"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert rows["nhm"]["mix_summary"]["legacy_forms"] >= 1
    assert rows["hsw"]["mix_summary"]["legacy_forms"] == 0
    nhm_mix = json.loads((out / "nhm" / "mix.json").read_text())
    assert nhm_mix["legacy_forms"]["TZCNT as BSF"] >= 1
    main = [f for f in nhm_mix["functions"] if f["name"] == "main"]
    assert main and "BSF" in main[0]["by_mnemonic"] and "TZCNT" not in main[0]["by_mnemonic"]
    hsw_mix = json.loads((out / "hsw" / "mix.json").read_text())
    hsw_main = next(f for f in hsw_mix["functions"] if f["name"] == "main")
    assert "TZCNT" in hsw_main["by_mnemonic"]
    junit = ET.parse(out / "junit.xml").getroot()
    props = {
        s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
        for s in junit.iter("testsuite")
    }
    assert int(props["nhm"]["legacy_forms"]) >= 1 and props["hsw"]["legacy_forms"] == "0"


@needs_ptrace
@pytest.mark.skipif(shutil.which("awk") is None, reason="awk not installed")
@pytest.mark.parametrize(
    ("value", "printed", "zero"),
    [("123456789.123", "123456789.123000", False), ("0.5", "0.500000", True)],
)
def test_exec_awk_printf_passes_on_nhm(value: str, printed: str, zero: bool) -> None:
    """glibc's printf of a double runs TZCNT (issue 21's false alarm).  For
    0.5 its printf_fp counts the trailing zeros of a zero limb: on nhm that
    TZCNT of zero runs as BSF (the destination kept), printf takes Nehalem's
    path and prints the same (this was a false violation, "result differs",
    until the tracer ran it as the model does)."""
    p = _sdematrix("exec", "--cpu", "nhm", "--", "awk", f'BEGIN{{printf "%f\\n", {value}}}')
    assert p.returncode == 0, p.stderr
    assert p.stdout == printed + "\n"
    assert "nhm      PASS" in p.stderr and "chip check clean" in p.stderr
    assert "TZCNT as BSF" in p.stderr
    assert (
        "TZCNT of zero run as BSF, as nhm does (destination kept): 1 execution(s)" in p.stderr
    ) == zero


# ---- TZCNT of zero: the tracer reads the source where it stops at a TZCNT ------------


def test_zero_source_runs_as_bsf_only_where_tzcnt_is_bsf() -> None:
    out = parse_tracer_output(
        "vc-tracer-output 1\ntzcnt_zero 0 1000 3\ntzcnt_zero 0 1008 1\nexit code 0\nend\n"
    )
    assert out.tzcnt_zero == [(0, 0x1000, 3), (0, 0x1008, 1)]
    # 0x1000: JIT code rewritten there, two records: the zero source was seen
    # for the TZCNT, which is not the first one recorded
    codes = {(0, 0x1000): [LZCNT, TZCNT], (0, 0x1008): [LZCNT]}

    def as_bsf(model: str) -> list[tuple[int, int]]:
        runs = zero_source_as_bsf(
            out.tzcnt_zero, lambda s, a: codes.get((s, a), []), lambda _s: _loc, MODELS[model]
        )
        return [(z["address"], z["executions"]) for z in runs]

    assert as_bsf("nhm") == [(0x1000, 3)]
    assert as_bsf("hsw") == []  # a real TZCNT: zero is its own business (returns 64)


_TZ0 = r"""
#include <stdio.h>
#include <stdlib.h>
static volatile unsigned long mem_src;
__attribute__((noinline)) unsigned long tz_reg(unsigned long x) {
    unsigned long r = 77;
    __asm__ volatile("tzcnt %1, %0" : "+r"(r) : "r"(x) : "cc");
    return r;
}
__attribute__((noinline)) unsigned long tz_mem(void) {
    unsigned long r = 77;
    __asm__ volatile("tzcnt %1, %0" : "+r"(r) : "m"(mem_src) : "cc");  /* RIP-relative */
    return r;
}
int main(int argc, char **argv) {
    unsigned long x = strtoul(argv[1], 0, 0);
    mem_src = strtoul(argv[2], 0, 0);
    printf("%lu %lu\n", tz_reg(x), tz_mem());
    return 0;
}
"""


@needs_ptrace
@needs_gcc
@pytest.mark.parametrize("region", ["whole", "function:main"])
def test_exec_runs_a_zero_tzcnt_as_bsf_on_nhm(tmp_path: Path, region: str) -> None:
    """First-visit (whole) and stepped (function region) alike: a TZCNT with
    a zero source, register or RIP-relative memory, gives what the model's
    CPU gives: on nhm (no BMI1) BSF keeps the destination (77), on hsw TZCNT
    returns 64; non-zero sources agree (3).  Both models pass and nhm's
    verdict names the function where it happened."""
    src = tmp_path / "tz0.c"
    src.write_text(_TZ0)
    exe = tmp_path / "tz0"
    subprocess.run(["gcc", "-O2", str(src), "-o", str(exe)], check=True)
    cases = (
        (("8", "8"), None, "3 3"),
        (("0", "8"), "tz_reg", "{} 3"),
        (("8", "0"), "tz_mem", "3 {}"),
    )
    for k, (args, fn, printed) in enumerate(cases):
        out = tmp_path / f"out{k}"
        p = _sdematrix(
            "exec", "--cpu", "nhm,hsw", "--region", region, "--out", str(out), "--", str(exe), *args
        )
        assert p.returncode == 0, p.stderr
        assert "nhm      PASS" in p.stderr and "hsw      PASS" in p.stderr
        assert (out / "nhm" / "stdout").read_text() == printed.format(77) + "\n"
        assert (out / "hsw" / "stdout").read_text() == printed.format(64) + "\n"
        notes = [x for x in p.stderr.splitlines() if "TZCNT of zero" in x]
        if fn is None:
            assert notes == [], p.stderr
        else:
            assert notes == [
                f"    TZCNT of zero run as BSF, as nhm does (destination kept): 1 execution(s) at {fn} (tz0)"
            ], p.stderr


_TZJ = r"""
#include <stdio.h>
#include <stdlib.h>
#include "jit_page.h"
int main(int argc, char **argv)
{
    (void)argc;
    static const unsigned char code[] = {0x48, 0xc7, 0xc0, 0x4d, 0, 0, 0, /* mov rax, 77 */
                                         0xf3, 0x48, 0x0f, 0xbc, 0xc7,    /* tzcnt rax, rdi */
                                         0xc3};                           /* ret */
    unsigned char *p = jit_page(code, sizeof code);
    if (!p)
        return 3;
    unsigned long x = strtoul(argv[1], 0, 0);
    unsigned long a = ((unsigned long (*)(unsigned long))p)(x);
    printf("%lu %lu\n", a, ((unsigned long (*)(unsigned long))p)(x));
    return 0;
}
"""


@needs_ptrace
@needs_gcc
def test_jit_tzcnt_of_zero_runs_as_bsf_every_time(tmp_path: Path) -> None:
    """JIT code is stepped, so every execution of its TZCNT is seen: both
    calls with a zero source give nhm's BSF result (77) and hsw's TZCNT one
    (64)."""
    src = tmp_path / "tzj.c"
    src.write_text(_TZJ)
    exe = tmp_path / "tzj"
    subprocess.run(
        ["gcc", "-O1", "-I", str(ROOT / "tests" / "data"), str(src), "-o", str(exe)], check=True
    )
    out = tmp_path / "out"
    p = _sdematrix("exec", "--cpu", "nhm,hsw", "--out", str(out), "--", str(exe), "0")
    assert p.returncode == 0, p.stderr
    assert (out / "nhm" / "stdout").read_text() == "77 77\n"
    assert (out / "hsw" / "stdout").read_text() == "64 64\n"
    assert "destination kept): 2 execution(s) at [anon]+0x7 ([anon])" in p.stderr
