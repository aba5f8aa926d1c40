"""``sdematrix exec`` on a corpus of programs nobody here wrote.

1. Correct programs pass.  Each program Debian 12 ships (compressors,
   interpreters, a database, TLS/crypto, text tools, a program that dlopens
   modules, the C library's printf/strtod/qsort) runs under p4p, nhm, slm,
   snb and hsw in one ``exec`` call: every model passes with 0 violations
   and prints what the program prints natively.  ci/bootstrap.sh installs
   them.
2. Real violations are caught.  One C file (tests/data/corpus/levels.c)
   built ``-march=x86-64-v2`` / ``-v3`` / ``-v4`` fails on the first model
   below its level, naming the first offending instruction and its function,
   and passes on the model that has the level -- whose mix shows the level's
   instructions in the hot function (so the build really used them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from doubles.sdematrix_cli import read_models

from sdematrix.backends.ptrace.backend import PtraceBackend

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "tests" / "data" / "corpus"
MODELS = ("p4p", "nhm", "slm", "snb", "hsw")

_ptrace_why = PtraceBackend().unavailable_reason()
pytestmark = pytest.mark.skipif(
    _ptrace_why is not None, reason=f"ptrace backend unavailable here: {_ptrace_why}"
)

# A text input with repeats (compressible) and numbers (sort -g, awk).
TEXT = "".join(
    f"{i:5d} {(i * 7919) % 1000 / 8:.3f} line of the corpus input, word{i % 37} {'ab' * (i % 5)}\n"
    for i in range(600)
).encode()


@dataclass(frozen=True)
class Program:
    name: str
    argv: tuple[str, ...]
    stdin: bytes = TEXT
    dlopens: str = ""  # a directory whose modules it dlopens (and runs code of)


SQL = (
    "create table t(a integer primary key, b text, c real);"
    "with recursive n(i) as (select 1 union all select i + 1 from n where i < 2000)"
    " insert into t select i, printf('%08x', (i * 2654435761) % 4294967296), i / 3.0 from n;"
    "create index tb on t(b);"
    "select count(*), max(b), printf('%.4f', sum(c)) from t where b > '8';"
)
PY = (
    "import zlib, _json, _decimal, _bz2, _lzma\n"
    "print(zlib.crc32(b'corpus'), _json.encode_basestring_ascii('d\\u00e9j\\u00e0'),"
    " _decimal.Decimal(1) / _decimal.Decimal(7), len(_bz2.BZ2Compressor().flush()),"
    " _lzma.is_check_supported(_lzma.CHECK_CRC64), 2.5 ** 0.5, sorted({3.5: 1, -1e9: 2}))\n"
)
PERL = (
    'printf "%f %e %.3g\\n", 123456789.123, 1/7, 2**0.5;'
    " my %h = map { $_ => $_ ** 2 } 1 .. 2000; print scalar(keys %h), qq{\\n};"
    ' print join(",", sort { $a <=> $b } map { sprintf "%.2f", sqrt } 1 .. 12), qq{\\n};'
    " while (<STDIN>) { $w{$1}++ while /(word\\d+)/g } print scalar(keys %w), qq{\\n};"
)

CORPUS = [
    Program("gzip", ("gzip", "-c", "-n")),
    Program("xz", ("xz", "-c")),
    Program("zstd", ("zstd", "-c", "-q")),
    Program("bzip2", ("bzip2", "-c")),
    Program("lz4", ("lz4", "-c", "-q")),
    Program(
        "python3",
        ("/usr/bin/python3", "-I", "-S", "-c", PY),
        b"",
        dlopens="/usr/lib/python3.11/lib-dynload/",
    ),
    Program("perl", ("perl", "-e", PERL)),
    Program(
        "awk",
        (
            "awk",
            (
                'BEGIN { printf "%f\\n", 123456789.123 }'
                ' { n += $2; w[$6]++ } END { printf "%.3f %d\\n", n / NR, length(w) }'
            ),
        ),
    ),
    Program("sqlite3", ("sqlite3", ":memory:", SQL), b""),
    Program(
        "openssl",
        (
            "openssl",
            "enc",
            "-aes-256-cbc",
            "-pbkdf2",
            "-iter",
            "1000",
            "-pass",
            "pass:corpus",
            "-S",
            "0102030405060708",
        ),
    ),
    Program(
        "iconv",
        ("iconv", "-f", "UTF-8", "-t", "UTF-16LE"),
        dlopens="/usr/lib/x86_64-linux-gnu/gconv/",
    ),
    Program(
        "jq",
        ("jq", "-c", "-n", "[range(0; 500)] | map(. * 1.5) | [add, (map(tostring) | length)]"),
        b"",
    ),
    Program("sort", ("sort", "-g", "-k2,2", "-s")),
    Program("libc_numbers", ("@libc_numbers",), b""),
]


def _sdematrix(
    *args: str, stdin: bytes = b"", timeout: float = 900
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "sdematrix", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _build(src: Path, exe: Path, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc not found: ci/bootstrap.sh installs it")
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", *flags, "-o", str(exe), str(src)], check=True
    )
    return exe


def _argv(prog: Program, tmp: Path) -> list[str]:
    if prog.argv[0].startswith("@"):
        name = prog.argv[0][1:]
        return [str(_build(DATA / f"{name}.c", tmp / name)), *prog.argv[1:]]
    if shutil.which(prog.argv[0]) is None:
        # ci/bootstrap.sh installs the corpus: a missing program is a broken setup, not a skip
        pytest.fail(f"{prog.argv[0]} not installed (ci/bootstrap.sh installs the corpus)")
    return list(prog.argv)


@pytest.mark.parametrize("prog", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_program_passes_every_model(prog: Program, tmp_path: Path) -> None:
    """One exec call, five models: each passes, 0 violations, native output."""
    argv = _argv(prog, tmp_path)
    native = subprocess.run(argv, input=prog.stdin, capture_output=True, timeout=120, check=True)
    out = tmp_path / "out"
    p = _sdematrix(
        "exec", "--cpu", ",".join(MODELS), "--out", str(out), "--", *argv, stdin=prog.stdin
    )
    err = p.stderr.decode(errors="replace")
    assert (out / "results.json").is_file(), err
    res = read_models(out)
    bad = {
        m: res[m]["reasons"] for m in MODELS if res[m]["status"] != "pass" or res[m]["violations"]
    }
    assert not bad, f"{prog.name}: false alarms or failures on correct code: {bad}"
    assert p.returncode == 0, err
    for m in MODELS:
        assert (out / m / "stdout").read_bytes() == native.stdout, (
            f"{prog.name} under {m}: output differs"
        )
        meta = res[m]["meta"]
        assert meta["distinct_instructions"] > 1000, (m, meta)
        if prog.dlopens:  # code of dlopen'd modules ran and was checked
            ran = [i for i in meta["images"] if i.startswith(prog.dlopens)]
            assert ran, f"{prog.name} under {m}: no code of {prog.dlopens}* ran: {meta['images']}"
    if prog.dlopens:  # the first model's run asked for them (later models know them)
        assert res[MODELS[0]]["meta"]["images_asked"] >= 1


# ---------------------------------------------------------------- levels --

# level -> (the model below it, the model that has it, ISA sets that only the
# level adds over the lower model, (hot function, ISA-set prefix it must run
# on the higher model))
LEVELS = {
    "v2": (
        "p4p",
        "nhm",
        {"POPCNT", "SSSE3", "SSE4", "SSE42"},
        [("popcounts", "POPCNT"), ("scale_add", "SSE4")],
    ),
    "v3": (
        "snb",
        "hsw",
        {"AVX2", "AVX2GATHER", "BMI1", "BMI2", "FMA", "F16C", "MOVBE", "LZCNT"},
        [("scale_add", "AVX2")],
    ),
    "v4": ("hsw", "skx", None, [("scale_add", "AVX512F_"), ("to_double", "AVX512DQ_")]),
}
LEVEL_FUNCTIONS = {"main", "fill", "popcounts", "scale_add", "to_double"}
VIOLATION = re.compile(
    r"chip check \((?P<model>\w+)\): (?P<mnemonic>[A-Z0-9]+) (?P<function>\S+) in (?P<image>\S+) "
    r"at 0x[0-9a-f]+ \[[0-9a-f]+\]: .* not in model \w+; ISA set (?P<isa_set>\w+)"
)


@pytest.mark.parametrize("level", list(LEVELS))
def test_level_build_fails_below_its_level(level: str, tmp_path: Path) -> None:
    low, high, only_level, hot = LEVELS[level]
    exe = _build(DATA / "levels.c", tmp_path / f"levels-{level}", "-O3", f"-march=x86-64-{level}")
    native = subprocess.run([str(exe)], capture_output=True, timeout=60, check=True).stdout
    out = tmp_path / "out"
    p = _sdematrix("exec", "--cpu", f"{low},{high}", "--out", str(out), "--", str(exe))
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1, err
    res = read_models(out)

    # below the level: a failure whose first reason is the first offending
    # instruction, in one of the program's functions, of an ISA set the level adds
    assert res[low]["status"] == "fail", res[low]
    first = res[low]["reasons"][0]
    m = VIOLATION.match(first)
    assert m, first
    assert m["model"] == low and m["image"] == exe.name, first
    assert m["function"] in LEVEL_FUNCTIONS, first
    if only_level is None:  # v4: anything AVX-512
        assert m["isa_set"].startswith("AVX512"), first
    else:
        assert m["isa_set"] in only_level, first
    v0 = res[low]["violations"][0]
    assert (v0["mnemonic"], v0["function"]) == (m["mnemonic"], m["function"])
    line = next(ln for ln in err.splitlines() if ln.startswith(f"sdematrix exec: {low} "))
    assert " FAIL " in line, line

    # at the level: clean, same output, and the hot code ran the level's instructions
    assert res[high]["status"] == "pass", res[high]["reasons"]
    assert res[high]["violations"] == []
    assert (out / high / "stdout").read_bytes() == native
    mix = json.loads((out / high / "mix.json").read_text())
    fns = {f["name"]: f for f in mix["functions"] if f["image"] == str(exe)}
    for fn, prefix in hot:
        sets = fns[fn]["by_isa_set"]
        assert any(s.startswith(prefix) for s in sets), (level, fn, sets)
