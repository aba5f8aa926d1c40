"""Bad inputs at the command line: each is one stderr line ``sdematrix: error:
...`` and exit 2, before any cell runs (or, where that is the right outcome,
error cells and exit 1).  No traceback ever.

Complements tests/sdematrix/cli/test_cli.py (bad YAML, missing file, unknown CPU in --cpu,
unavailable backend, --out under a file, bad arguments, a truncated real SDE
mix) and tests/sdematrix/spec/test_matrix_file.py (the loader's messages and line numbers):
here every bad matrix file goes through the real CLI, plus duplicate CPUs,
empty / unreadable matrix files, unwritable JUnit / output paths, a probe that
cannot be started, and corrupt or truncated mix files cut at every point.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from doubles.fake_matrix import SDE_DOUBLE
from doubles.sde_mix_text import iform_file
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    assert_one_line_error,
    run_cli,
)

from sdematrix.cli.main import main

DATA = Path(__file__).resolve().parent.parent.parent / "data" / "matrix"
BAD_MATRICES = sorted(DATA.glob("bad_*.yaml"))
VALID = "p4p, mrm, pnr, nhm, wsm"  # the start of the shipped matrix's list of CPU names


def _marked_line(path: Path) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if "# <-- error" in line:
            return n
    raise AssertionError(f"{path} has no '# <-- error' marker")


# ------------------------------------------------------------ the matrix --


@pytest.mark.parametrize("path", BAD_MATRICES, ids=lambda p: p.name)
def test_every_bad_matrix_file_is_one_cli_line(path: Path, tmp_path: Path) -> None:
    """Malformed YAML, schema violations, a CPU defined twice, an empty
    ``models``, ... through `sdematrix run`: FILE:LINE, exit 2, no output dir."""
    out = tmp_path / "out"
    r = run_cli("run", "--matrix", str(path), "--out", str(out))
    assert_one_line_error(r, 2, f"{path}:{_marked_line(path)}")
    assert not out.exists()


def test_duplicate_cpu_in_the_file_names_both_lines() -> None:
    path = DATA / "bad_duplicate_cpu.yaml"
    line = assert_one_line_error(run_cli("list-cpus", "--matrix", str(path)), 2)
    assert "duplicate key 'wsm' (first defined at line " in line


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "the file is empty"),
        (b"# only a comment\n\n", "the file is empty"),
        (b"- spr\n- icl\n", "mapping"),
        (b"version: 1\n", "schema"),
        (b"\xff\xfe\x00\x01 not text", "cannot read the matrix file"),
        (b"version: 1\nmodels: {}\n", "schema"),
    ],
    ids=["empty", "comment-only", "list", "no-models", "binary", "empty-models"],
)
def test_empty_or_unreadable_matrix(content: bytes, needle: str, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(content)
    out = tmp_path / "out"
    assert_one_line_error(
        run_cli("run", "--matrix", str(path), "--out", str(out)), 2, str(path), needle
    )
    assert not out.exists()


def test_matrix_path_is_a_directory(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("explain", "spr", "--matrix", str(tmp_path)), 2, "cannot read the matrix file"
    )


# ------------------------------------------------------------ CPU choice --


@pytest.mark.parametrize(
    ("cpus", "needle"),
    [
        ("spr,spr", "CPU named more than once: spr"),
        ("icl,spr,icl", "CPU named more than once: icl"),
        ("spr,SPR", "unknown CPU 'SPR'"),
        (",", "empty CPU name"),
        ("spr,,icl", "empty CPU name"),
        ("all,spr", "'all' cannot be combined"),
    ],
)
def test_bad_cpu_selection(cpus: str, needle: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run_cli("run", "--matrix", str(SHIPPED_MATRIX), "--cpu", cpus, "--out", str(out))
    assert_one_line_error(r, 2, needle)
    assert not out.exists()


def test_explain_unknown_cpu_lists_the_valid_ones() -> None:
    r = run_cli("explain", "pentium9", "--matrix", str(SHIPPED_MATRIX))
    assert_one_line_error(r, 2, "unknown CPU 'pentium9'", VALID)


# ----------------------------------------------------------- the outputs --


def _sde_run(*extra: str) -> subprocess.CompletedProcess[str]:
    """A run that would use the SDE double: fails before any cell if an
    output cannot be written."""
    return run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--cpu",
        "wsm",
        "--backend",
        "sde",
        "--sde-path",
        str(SDE_DOUBLE),
        *extra,
    )


def test_junit_path_under_a_file(tmp_path: Path) -> None:
    f = tmp_path / "plain-file"
    f.write_text("")
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = _sde_run("--out", str(out), "--junit", str(f / "junit.xml"))
    assert_one_line_error(r, 2, "cannot write JUnit file", str(f / "junit.xml"))
    assert time.monotonic() - t0 < 30
    assert not (out / "results.json").exists()


def test_junit_path_is_a_directory(tmp_path: Path) -> None:
    """Caught before the run (it used to run every cell, then exit 2 with no JUnit)."""
    out = tmp_path / "out"
    r = _sde_run("--out", str(out), "--junit", str(tmp_path))
    assert_one_line_error(r, 2, "cannot write JUnit file", "Is a directory")
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("where", ["existing-file", "proc"])
def test_out_dir_cannot_be_made(where: str, tmp_path: Path) -> None:
    if where == "existing-file":
        out = tmp_path / "results"
        out.write_text("not a directory")
    else:
        out = Path("/proc/sdematrix-cannot-exist/results")  # not creatable, even by root
    r = _sde_run("--out", str(out))
    assert_one_line_error(r, 2, str(out), "not writable")


# ------------------------------------------------------------ mix files --


def test_mix_corrupt_files_through_the_cli(tmp_path: Path) -> None:
    lines = iform_file().splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("MOV_GPRv_MEMv"))
    cases = {
        "bad-count.mix": (
            "\n".join([*lines[:row], "VAESENC  12x4", *lines[row + 1 :]]),
            f":{row + 1}:",
        ),
        "three-fields.mix": (
            "\n".join([*lines[:row], "VAESENC 1 2", *lines[row + 1 :]]),
            f":{row + 1}:",
        ),
        "empty.mix": ("", "global-dynamic-counts"),
        "not-a-mix.mix": ("hello\nworld\n", "not an SDE mix file"),
    }
    for name, (text, needle) in cases.items():
        p = tmp_path / name
        p.write_text(text)
        assert_one_line_error(run_cli("mix", str(p)), 2, str(p), needle)
    binary = tmp_path / "binary.mix"
    binary.write_bytes(bytes(range(256)) * 8)
    assert_one_line_error(run_cli("mix", str(binary)), 2, str(binary))
    assert_one_line_error(run_cli("mix", str(tmp_path)), 2, "cannot read mix file")
    assert_one_line_error(run_cli("mix", str(tmp_path / "nope.mix")), 2, "cannot read mix file")


def _final_total(data: bytes) -> tuple[int, int]:
    """(offset of the first digit, offset just past the last digit) of the
    count on the global block's ``*total`` line."""
    at = data.rindex(b"*total") + len(b"*total")
    first = at + len(data[at:]) - len(data[at:].lstrip(b" \t"))
    return first, data.index(b"\n", first)


def test_mix_truncated_anywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Cut the file at every 5th byte up to the final ``*total`` count: each
    cut is a one-line error naming the file; the whole file parses."""
    data = iform_file().encode()
    first_digit, _end = _final_total(data)
    p = tmp_path / "cut.mix"
    for n in [*range(0, first_digit + 1, 5), first_digit]:
        p.write_bytes(data[:n])
        code = main(["mix", p.as_posix()])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (n, code, captured.err)
        assert lines[0].startswith(f"sdematrix: error: {p}"), (n, lines[0])
        assert captured.out == "", n
    p.write_bytes(data)
    assert main(["mix", p.as_posix(), "--compact"]) == 0
    assert '"total": 1098' in capsys.readouterr().out


def test_mix_cut_inside_the_final_total_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = iform_file().encode()
    first_digit, end = _final_total(data)
    p = tmp_path / "cut.mix"
    for n in range(first_digit + 1, end):
        p.write_bytes(data[:n])
        code = main(["mix", p.as_posix()])
        captured = capsys.readouterr()
        assert code == 2, (n, data[first_digit:n], captured.out[:200])
