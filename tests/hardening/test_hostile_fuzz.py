"""A generated corpus per reader (issue 26): every input either parses
correctly or is the reader's own error with one line naming the source,
within a time bound -- 0 tracebacks, 0 hangs.

The generator is this file's own (seeded ``random``: reproducible, and
10,000 inputs per reader stay within a few seconds in-process, which
hypothesis's per-example overhead would not).  Each input is a valid
document built by the generator, then, for most inputs, one to four
mutations from a list of hostile edits: numbers thousands of digits long,
aliases, deep nesting, control characters, lines cut, duplicated or
swapped, separators repeated, random bytes.  For an unmutated input the
parse must also be *correct*: it is compared with what the generator put
in (or, for YAML, with PyYAML's own safe_load).

``SDEMATRIX_HOSTILE_N`` changes the corpus size (default 10,000) and
``SDEMATRIX_HOSTILE_SEED`` the seed (default: fixed, so a failure names
the input that reproduces it).
"""

from __future__ import annotations

import json
import os
import random
import string
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdematrix.backends.probe import ProbeError, parse_probe_output
from sdematrix.backends.ptrace.backend import parse_tracer_output
from sdematrix.backends.ptrace.profile import Site, write_profile
from sdematrix.errors import MatrixFileError, MixFileError, OutputDirError, SdeMatrixError
from sdematrix.evidence.sde_mix import parse_mix_text
from sdematrix.inputs import JsonProblem, check_output_path, decode_json, parse_yaml
from sdematrix.results.load import ResultsDirError, load_results
from sdematrix.results.merge import junit_suites
from sdematrix.spec.models import CpuidLeaf, CpuModel

N = int(os.environ.get("SDEMATRIX_HOSTILE_N", "10000"))
SEED = int(os.environ.get("SDEMATRIX_HOSTILE_SEED", "20261201"))
PER_INPUT_S = 1.0  # CPU seconds any single input may take

SHORT_TOKENS = [
    "1e999",
    "-1",
    "NaN",
    "\x00",
    "\x01",
    "\x1b[2J",
    "\x7f",
    "\x85",
    "\u2028",
    "\ufeff",
    "\ud800",
    "\t",
    "\r",
    "\n",
    "&a",
    "*a",
    "<<: *a",
    "]",
    "}",
    "'",
    '"',
    "\\",
    "#",
    "%",
    ": ",
    "- ",
    "!!python/object/apply:os.system",
    "!!binary",
    "!!set",
    "!!timestamp 2001-13-45",
    "---",
    "*total",
    "# $",
    "# EMIT_",
    "<!DOCTYPE x>",
    "<!ENTITY a 'b'>",
    "&a;",
    "]]>",
    "<![CDATA[",
    "é",
    "\udcff",
    '<?xml encoding="utf-99"?>',
]
# the expensive ones (they exceed a limit: Python's 4,300 digits, the depth
# caps, a regex's backtracking), drawn less often to keep the corpus fast
LONG_TOKENS = [
    "9" * 4400,
    "-" + "9" * 4400,
    "0x" + "f" * 4400,
    "f" * 4400,
    "[" * 300,
    "{" * 300,
    " IMG: " * 2000,
    " at [" * 2000,
    "<x>" * 300,
]


def _mutate(rng: random.Random, text: str) -> str:
    """One hostile edit of `text`."""
    kind = rng.randrange(9)
    pos = rng.randrange(len(text) + 1)
    if kind == 0:  # insert a hostile token
        tokens = LONG_TOKENS if rng.random() < 0.15 else SHORT_TOKENS
        return text[:pos] + rng.choice(tokens) + text[pos:]
    if kind == 1:  # a number made huge
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if digits:
            i = rng.choice(digits)
            return text[:i] + "9" * rng.choice((25, 25, 400, 4400)) + text[i:]
        return text + "9" * 4400
    if kind == 2:  # cut (a truncated file)
        return text[:pos]
    if kind == 3:  # delete a line
        lines = text.split("\n")
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    if kind == 4:  # duplicate a line
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if kind == 5:  # swap two lines
        lines = text.split("\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == 6:  # random printable bytes
        junk = "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 40)))
        return text[:pos] + junk + text[pos:]
    if kind == 7:  # repeat a piece (a separator repeated thousands of times)
        a = rng.randrange(len(text) + 1)
        piece = text[a : a + rng.randrange(1, 8)]
        return text[:a] + piece * rng.choice((2, 2, 100, 100, 3000)) + text[a:]
    # a random character from anywhere in Unicode (surrogates included)
    return text[:pos] + chr(rng.randrange(0x110000)) + text[pos:]


def _hostile(rng: random.Random, text: str) -> tuple[str, bool]:
    """(input, mutated?): a quarter of the corpus stays valid."""
    if rng.random() < 0.25:
        return text, False
    for _ in range(rng.randrange(1, 5)):
        text = _mutate(rng, text)
    return text, True


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory in memory (/dev/shm) when there is one: the
    corpora write a file per input, and a disk-backed /tmp on a busy host
    costs ~5 ms a write, which is not the readers' time."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="sdematrix-hostile-") as d:
            yield Path(d)
    else:
        yield tmp_path


def _one_line(e: BaseException, source: str) -> None:
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, repr(msg)
    assert msg.startswith(source), (source, msg[:200])
    assert len(msg) < 1000, msg[:200]


def run_corpus(
    name: str,
    generate: Callable[[random.Random, int], tuple[Any, Any]],
    check: Callable[[Any, Any], None],
    errors: tuple[type[BaseException], ...],
    source: str,
    n: int = N,
) -> dict[str, int]:
    """Run `check(input, expected)` over `n` generated inputs; an exception
    must be one of `errors` with a one-line message starting with `source`.
    Returns the tally (asserting both outcomes happened)."""
    rng = random.Random(f"{SEED}:{name}")
    tally = {"parsed": 0, "refused": 0}
    worst = 0.0
    for i in range(n):
        data, expected = generate(rng, i)
        t0 = time.process_time()
        try:
            check(data, expected)
            tally["parsed"] += 1
        except errors as e:
            _one_line(e, source)
            tally["refused"] += 1
        except Exception as e:
            raise AssertionError(
                f"{name} input {i} (seed {SEED}): {type(e).__name__}: {e}; "
                f"input starts {str(data)[:300]!r}"
            ) from e
        took = time.process_time() - t0
        worst = max(worst, took)
        assert took < PER_INPUT_S, f"{name} input {i}: {took:.2f} s"
    assert tally["parsed"] and tally["refused"], tally
    return tally


# -------------------------------------------------------------------- YAML --


def _yaml_doc(rng: random.Random) -> str:
    """A small random YAML document in the matrix's style (block mappings,
    flow lists, anchors and aliases, quoted strings, numbers)."""
    lines = ["version: 1"]
    anchors: list[str] = []
    for k in range(rng.randrange(1, 8)):
        key = rng.choice(["models", "seed", "x-isa", "title", "cpuid", "leaves", "signatures"])
        key = f"{key}_{k}"
        r = rng.randrange(5)
        if r == 0:
            lines.append(f"{key}: {rng.randrange(1 << 64)}")
        elif r == 1:
            lines.append(f'{key}: "{rng.choice(["Haswell", "Ice Lake (10 nm)", "a: b"])}"')
        elif r == 2:
            name = f"a{k}"
            anchors.append(name)
            items = ", ".join(
                rng.choice(["AES", "AVX2", "SSE4_1", "0x1f", "12"])
                for _ in range(rng.randrange(1, 6))
            )
            lines.append(f"{key}: &{name} [{items}]")
        elif r == 3 and anchors:
            lines.append(f"{key}: [*{rng.choice(anchors)}, MONITOR]")
        else:
            lines.append(f"{key}:")
            for j in range(rng.randrange(1, 4)):
                lines.append(
                    f"  k{j}: {{leaf: {rng.randrange(99)}, eax: 0x{rng.randrange(1 << 32):x}}}"
                )
    return "\n".join(lines) + "\n"


def test_yaml_corpus() -> None:
    def gen(rng: random.Random, _i: int) -> tuple[str, bool]:
        return _hostile(rng, _yaml_doc(rng))

    def check(text: str, mutated: bool) -> None:
        _node, data = parse_yaml(text, "m.yaml", MatrixFileError)
        if not mutated:  # a correct parse: what PyYAML's own loader reads
            assert data == yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    run_corpus("yaml", gen, check, (MatrixFileError,), "m.yaml")


# ----------------------------------------------------------------- SDE mix --

_INSNS = [
    "VAESENC_YMMu128_YMMu128_YMMu128",
    "AESENC_XMMdq_XMMdq",
    "ADD_GPRv_GPRv_01",
    "MOV",
    "VPCLMULQDQ_ZMMu128_ZMMu64_ZMMu64_IMM8_AVX512",
    "*isa-ext-AES",
    "*isa-set-AVX2",
    "*category-AES",
    "*mem-read-8",
]


def _mix_block(rng: random.Random, header: str) -> tuple[list[str], int]:
    rows, total = [header, "#", "#    opcode       count"], 0
    for name in rng.sample(_INSNS, rng.randrange(1, len(_INSNS))):
        n = rng.randrange(1 << rng.choice((8, 32, 63)))
        if name[0] != "*":
            total += n
        rows.append(f"{name:<40} {n}")
    total += rng.randrange(100)
    rows.append(f"*total {total}")
    return rows, total


def _mix_doc(rng: random.Random) -> tuple[str, int, int]:
    """(text, the global total, how many functions) of a small SDE mix."""
    lines = [
        "# Mix output version 10",
        "# EMIT_IMAGE_ADDRESSES",
        "#",
        f"/lib/x{rng.randrange(9)}.so  7f00{rng.randrange(1 << 16):04x}  7f10000000",
        "# END_IMAGE_ADDRESSES",
        f"# EMIT_DYNAMIC_STATS FOR TID {rng.randrange(99)}",
    ]
    rows, _ = _mix_block(rng, "# $dynamic-counts")
    lines += rows
    nfunc = rng.randrange(3)
    for f in range(nfunc):
        lo = rng.randrange(1 << 47)
        head = (
            f"# $dynamic-counts-for-function: fn{f}<int, a b>  IMG: /usr/lib/l{f}.so "
            f"at [0x{lo:x}, 0x{lo + 99:x})  {rng.randrange(100)}.5%"
        )
        rows, _ = _mix_block(rng, head)
        lines += rows
    lines.append("# EMIT_GLOBAL_DYNAMIC_STATS")
    rows, total = _mix_block(rng, "# $global-dynamic-counts")
    lines += rows
    return "\n".join(lines) + "\n", total, nfunc


def test_mix_corpus() -> None:
    def gen(rng: random.Random, _i: int) -> tuple[str, tuple[int, int] | None]:
        text, total, nfunc = _mix_doc(rng)
        hostile, mutated = _hostile(rng, text)
        return hostile, None if mutated else (total, nfunc)

    def check(text: str, want: tuple[int, int] | None) -> None:
        mix = parse_mix_text(text, "x.mix")
        if want is not None:
            assert (mix.overall.total, len(mix.functions)) == want

    run_corpus("mix", gen, check, (MixFileError,), "x.mix:")


# ------------------------------------------------------------ results dirs --


def _results_doc(rng: random.Random) -> tuple[dict[str, Any], int]:
    cells = []
    for i in range(rng.randrange(1, 6)):
        cpu = rng.choice(["hsw", "spr", "icl"])
        cells.append(
            {
                "cell": f"{cpu}.gcm.encrypt.{rng.choice((128, 256))}.{i}",
                "cpu": cpu,
                "mode": "gcm",
                "direction": rng.choice(["encrypt", "decrypt"]),
                "status": rng.choice(["pass", "fail", "error", "skip"]),
                "path": "aesni",
                "expected_path": "aesni",
                "duration_s": rng.random() * 9,
                "mix_summary": {
                    "total": rng.randrange(1 << 40),
                    "by_width": {"xmm": 3},
                    "top_isa_sets": {"AES": 2},
                },
                "reasons": ["r"],
                "files": {"cell": f"cells/c{i}.json"},
            }
        )
    return {
        "schema": "sdematrix-results/1",
        "cells": cells,
        "models": {"hsw": {"title": "H"}},
        "counts": {"pass": 1},
        "not_run": ["spr.cfb1.encrypt.128.16"],
    }, len(cells) + 1


def _touch_everything(res: Any) -> None:
    """Every lazily computed piece a report reads."""
    _ = (res.counts, res.cpus, res.columns, res.all_warnings())
    for g in res.groups().values():
        _ = (g.status, g.path, g.expected_path)
    for c in res.cells:
        _ = (
            c.detail,
            c.mix,
            c.overall,
            c.total_instructions,
            c.by_width,
            c.by_isa_set,
            c.violations,
            c.workload,
        )


def test_results_dir_corpus(fast_dir: Path) -> None:
    root = fast_dir / "r"
    (root / "cells").mkdir(parents=True)
    cell_json = json.dumps(
        {
            "outcome": {"cell": "hsw.gcm.encrypt.128.0"},
            "run": {"violations": [{"reason": "x", "address": "0x1"}]},
        }
    )

    def gen(rng: random.Random, i: int) -> tuple[tuple[str, str], int | None]:
        doc, ncells = _results_doc(rng)
        text, mutated = _hostile(rng, json.dumps(doc, indent=rng.choice((None, 1))))
        cell, _ = _hostile(rng, cell_json)
        return (text, cell), None if mutated else ncells

    def check(data: tuple[str, str], ncells: int | None) -> None:
        text, cell = data
        (root / "results.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        (root / "cells" / "c0.json").write_bytes(cell.encode("utf-8", "surrogatepass"))
        res = load_results(root)
        _touch_everything(res)
        if ncells is not None:
            assert len(res.cells) == ncells

    run_corpus("results", gen, check, (ResultsDirError,), str(root))


def test_json_decoder_corpus() -> None:
    """decode_json alone (the cells' and mixes' JSON): JsonProblem or a value
    equal to json.loads's."""

    def gen(rng: random.Random, _i: int) -> tuple[str, bool]:
        doc, _ = _results_doc(rng)
        return _hostile(rng, json.dumps(doc))

    def check(text: str, mutated: bool) -> None:
        try:
            got = decode_json(text)
        except JsonProblem as e:
            raise ResultsDirError(f"j: {e}") from None
        if not mutated:
            assert got == json.loads(text)

    run_corpus("json", gen, check, (ResultsDirError,), "j: ")


# ------------------------------------------------------------------ JUnit --


def _junit_doc(rng: random.Random) -> tuple[str, int]:
    suites = []
    for s in range(rng.randrange(1, 4)):
        cases = "".join(
            f'<testcase classname="c{s}" name="t{k}" time="0.1"/>' for k in range(rng.randrange(3))
        )
        suites.append(
            f'<testsuite name="s{s}" tests="{rng.randrange(99)}" failures="0" '
            f'errors="0" skipped="0" time="{rng.random():.3f}">{cases}</testsuite>'
        )
    return '<?xml version="1.0" encoding="utf-8"?>\n<testsuites>' + "".join(
        suites
    ) + "</testsuites>", len(suites)


def test_junit_corpus(fast_dir: Path) -> None:
    f = fast_dir / "j.xml"

    def gen(rng: random.Random, _i: int) -> tuple[str, int | None]:
        text, n = _junit_doc(rng)
        hostile, mutated = _hostile(rng, text)
        return hostile, None if mutated else n

    def check(text: str, n: int | None) -> None:
        f.write_bytes(text.encode("utf-8", "surrogatepass"))
        suites = junit_suites(f)
        if n is not None:
            assert len(suites) == n

    run_corpus("junit", gen, check, (MatrixFileError,), f"merge-junit: {f}")


# ------------------------------------------------------------ probe output --


def _probe_doc(rng: random.Random) -> str:
    report = {
        "probe": 1,
        "status": "ok",
        "mode": "gcm",
        "dir": "encrypt",
        "key_bits": 128,
        "length": rng.randrange(1 << 20),
        "seed": rng.randrange(1 << 64),
        "forced": False,
        "selected": {"gcm": "aesni"},
        "features": ["aes"],
        "vendor": "GenuineIntel",
        "family": 6,
        "model": 0xCF,
        "xcr0": "0xe7",
        "digest": "ab" * 32,
        "path": "aesni",
    }
    return "emulator noise\n" + json.dumps(report) + "\n"


def test_probe_output_corpus() -> None:
    def gen(rng: random.Random, _i: int) -> tuple[str, bool]:
        return _hostile(rng, _probe_doc(rng))

    def check(text: str, mutated: bool) -> None:
        report = parse_probe_output(text)
        if not mutated:
            assert report["path"] == "aesni" and report["digest"] == "ab" * 32

    run_corpus("probe", gen, check, (ProbeError,), "probe ")


# ----------------------------------------------------------- tracer output --


def _tracer_doc(rng: random.Random) -> tuple[str, int]:
    lines = [
        "vc-tracer-output 1",
        "cpuid_mode fault",
        f"steps {rng.randrange(1 << 40)}",
        "maps 0",
        "555555554000-555555556000 r-xp 00000000 08:01 1 /bin/true",
        "endmaps",
    ]
    n = rng.randrange(1, 6)
    for k in range(n):
        lines.append(f"insn 0 {0x555555554000 + k:x} {rng.randrange(1 << 32)} 90")
    lines += ["unscanned /lib/a b.so", "exit code 0", "end"]
    return "\n".join(lines) + "\n", n


def test_tracer_output_corpus() -> None:
    class _Corrupt(SdeMatrixError):
        pass

    def gen(rng: random.Random, _i: int) -> tuple[str, int | None]:
        text, n = _tracer_doc(rng)
        hostile, mutated = _hostile(rng, text)
        return hostile, None if mutated else n

    def check(text: str, n: int | None) -> None:
        try:
            out = parse_tracer_output(text)
        except ValueError as e:  # the documented failure, one line
            raise _Corrupt(f"tracer: {e}") from None
        if n is not None:
            assert len(out.insns) == n and out.complete and out.exit_code == 0

    run_corpus("tracer", gen, check, (_Corrupt,), "tracer: ")


# ------------------------------------------------- tracer profile (writer) --


def _model(title: str, name: str = "hsw") -> CpuModel:
    return CpuModel(
        name=name,
        title=title,
        vendor="GenuineIntel",
        sde_chip=None,
        qemu_model=None,
        chip_check_exe_only=False,
        cpuid=(CpuidLeaf(0, 0, 0xD, 1, 2, 3), CpuidLeaf(1, 0, 4, 5, 6, 7)),
        xcr0=7,
        isa=frozenset(),
        max_vector_bits=128,
    )


def test_profile_cannot_be_injected(fast_dir: Path) -> None:
    """Whatever the title, name or paths hold, the profile has exactly the
    records the model and the sites make: one comment, two cpuid lines,
    one xcr0 line, and one line per path that can be written."""
    rng = random.Random(f"{SEED}:profile")
    p = fast_dir / "profile"
    alphabet = [chr(c) for c in range(0x20)] + ["\x7f", "\x85", "\u2028", "a", " ", "é", "\\"]
    for _ in range(N):
        title = "".join(rng.choice(alphabet) for _ in range(rng.randrange(30)))
        path = "/x" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
        site = Site("cpuid", rng.randrange(1 << 20), path)
        write_profile(p, _model(title, name="n" + rng.choice(["", "\nxcr0 0"])), [site], [path])
        lines = p.read_bytes().split(b"\n")
        assert lines[-1] == b""
        records = lines[:-1]
        assert records[0].startswith(b"# vc-tracer profile for model n")
        assert [r.split(b" ")[0] for r in records[1:4]] == [b"cpuid", b"cpuid", b"xcr0"]
        writable = not any(c in path for c in "\x00\n\r")
        assert len(records) == 4 + 2 * writable
        assert b"\r" not in b"".join(records[:4]) and b"\x00" not in p.read_bytes()


# ---------------------------------------------------------- output paths --


def test_output_path_corpus(fast_dir: Path) -> None:
    """Random names (control characters, long components, existing files
    and directories): accepted only when the place is writable, else
    OutputDirError naming the path in one line; nothing is created."""
    (fast_dir / "f").write_text("")
    (fast_dir / "d").mkdir()
    pieces = ["f", "d", "new", "..", ".", "a\nb", "\x1b", "x" * 300, "", "f/g", "\udcff"]
    rng = random.Random(f"{SEED}:out")
    before = sorted(p.name for p in fast_dir.iterdir())
    for _ in range(2000):
        rel = "/".join(rng.choice(pieces) for _ in range(rng.randrange(1, 4)))
        path = str(fast_dir / rel)
        want_dir = rng.random() < 0.5
        try:
            check_output_path(path, what="out", want_dir=want_dir)
        except OutputDirError as e:
            assert "\n" not in str(e) and "\x1b" not in str(e)
            continue
        assert not any(ord(c) < 0x20 for c in path)
        p = Path(path)
        assert not p.exists() or p.is_dir() == want_dir
    assert sorted(p.name for p in fast_dir.iterdir()) == before


@pytest.mark.parametrize("reader", ["yaml", "mix"])
def test_large_inputs_are_linear(reader: str) -> None:
    """1 MB of each reader's worst-case repetition stays < 1 s CPU."""
    piece = {"yaml": "  - [a, b, *x]\n", "mix": "ADD_GPRv_GPRv_01 5\n"}[reader]
    body = piece * (1_000_000 // len(piece))
    t0 = time.process_time()
    if reader == "yaml":
        with pytest.raises(MatrixFileError, match="alias uses"):
            parse_yaml("a: &x c\nb:\n" + body, "big.yaml", MatrixFileError)
    else:
        text = "# $global-dynamic-counts\n" + body + "*total 999999999999\n"
        assert parse_mix_text(text, "big.mix").overall.total == 999999999999
    assert time.process_time() - t0 < 1.0


# ------------------------------------------------------------ /proc reads --


def test_proc_maps_corpus() -> None:
    """/proc/PID/maps text (what the tracer copies into its output and the
    symbolizer reads): malformed lines are skipped, never an exception."""
    from sdematrix.evidence.symbols import parse_maps

    base = (
        "555555554000-555555556000 r-xp 00000000 08:01 1234  /usr/bin/a b\n"
        "7ffff7fc3000-7ffff7fc7000 r--p 00000000 00:00 0      [vvar]\n"
        "7ffff7fc7000-7ffff7fc9000 r-xp 00000000 00:00 0      [vdso]\n"
    )

    rng = random.Random(f"{SEED}:maps")
    for i in range(N):
        text, mutated = _hostile(rng, base)
        t0 = time.process_time()
        maps = parse_maps(text)  # any exception fails the test, naming nothing else
        assert time.process_time() - t0 < PER_INPUT_S, i
        if not mutated:
            assert [m.path for m in maps] == ["/usr/bin/a b", "[vvar]", "[vdso]"]
        assert all(isinstance(m.lo, int) and isinstance(m.hi, int) for m in maps)
