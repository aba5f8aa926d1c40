"""python -m vaescrypt.bench_ab: the in-process A/B of two builds that the
speed claims in docs/BENCHMARKS.md and the C comments were measured with.

No test here judges a speed: the real runs load two copies of this tree's
built vaescrypt._bench and check the tool's mechanics (two copies in one
process, every point measured, the output's shape); bad input must give one
line and exit code 2."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
from _run_module import run_module

import vaescrypt
from vaescrypt import bench, bench_ab


def _built_extension() -> Path:
    from vaescrypt import _bench

    return Path(_bench.__file__)


def _two_copies(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "before", tmp_path / "after"
    for d in (a, b):
        d.mkdir()
        shutil.copy(_built_extension(), d / bench_ab.EXT_FILE)
    return a, b


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("vaescrypt.bench_ab", *args)


def test_median_change_is_the_median_of_pairwise_ratios() -> None:
    # ratios 1.10, 0.90, 1.05: the median is 1.05, whatever the means say
    assert bench_ab.median_change([100.0, 200.0, 50.0], [110.0, 180.0, 52.5]) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        bench_ab.median_change([1.0, 2.0], [1.0])


def test_two_files_are_two_copies_in_the_process(tmp_path: Path) -> None:
    a, b = _two_copies(tmp_path)
    lib_a = bench_ab.load_build(str(a / bench_ab.EXT_FILE))
    lib_b = bench_ab.load_build(str(b / bench_ab.EXT_FILE))
    assert lib_a is not lib_b
    # each copy has its own functions (different addresses of one symbol)
    from vaescrypt._bench import ffi

    assert ffi.cast("uintptr_t", ffi.addressof(lib_a, "vc_bench_lib")) != ffi.cast(
        "uintptr_t", ffi.addressof(lib_b, "vc_bench_lib")
    )


def test_null_ab_measures_every_point(tmp_path: Path) -> None:
    a, b = _two_copies(tmp_path)
    paths = vaescrypt.available("gcm", "encrypt")[:2]  # widest two here
    r = _run(
        str(a), str(b), "--paths", ",".join(paths), "--sizes", "16,300",
        "--pairs", "3", "--seconds", "0.001", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    got = {(x["path"], x["direction"], x["size"]) for x in out["results"]}
    assert got == {(p, d, s) for p in paths for d in bench.ALL_DIRS for s in (16, 300)}
    for x in out["results"]:
        assert len(x["before_mbps"]) == len(x["after_mbps"]) == 3
        assert all(v > 0 for v in x["before_mbps"] + x["after_mbps"])
        assert math.isfinite(x["change"])


def test_text_output_one_line_per_path_and_direction(tmp_path: Path) -> None:
    a, b = _two_copies(tmp_path)
    r = _run(str(a), str(b), "--paths", "generic", "--sizes", "64,100", "--pairs", "1",
             "--seconds", "0.001")  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("after / before, median of 1 alternated pairs")
    assert [ln.split()[:2] for ln in lines[1:]] == [["generic", "enc"], ["generic", "dec"]]
    assert all(" 64:" in ln and " 100:" in ln and ln.endswith("%") for ln in lines[1:])


def test_mode_selects_the_c_loop(tmp_path: Path) -> None:
    # CFB128 decryption, the one CFB direction the wide paths take: the
    # default paths are the wide ones that run it in the directions asked
    a, b = _two_copies(tmp_path)
    r = _run(str(a), str(b), "--mode", "cfb128", "--dirs", "decrypt", "--sizes", "64",
             "--pairs", "1", "--seconds", "0.001", "--json")  # fmt: skip
    wide = [p for p in vaescrypt.available("cfb128", "decrypt") if p not in ("aesni", "generic")]
    if not wide:  # a CPU without VAES: the refusal, not an empty run
        assert r.returncode == 2 and "no wide cfb128 path" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["mode"] == "cfb128"
        assert [x["path"] for x in out["results"]] == wide
        assert all(x["direction"] == "decrypt" for x in out["results"])
    r = _run(str(a), str(b), "--mode", "cfb8", "--paths", "generic", "--sizes", "32",
             "--pairs", "1", "--seconds", "0.001")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "(AES-256, CFB8)" in r.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["SAME", "SAME"], "same file"),
        (["A", "/nonexistent/dir"], "AFTER: no _bench.abi3.so"),
        (["A", "NOT_EXT"], "cannot load"),
        (["A", "B", "--dirs", "sideways"], "unknown direction"),
        (["A", "B", "--sizes", "12,x"], "comma-separated integers"),
        (["A", "B", "--sizes", "0"], "between 1 and 2^30"),
        (["A", "B", "--pairs", "0"], "--pairs"),
        (["A", "B", "--key-bits", "512"], "--key-bits"),
        (["A", "B", "--paths", "no_such_path"], "does not run gcm"),
        (["A", "B", "--mode", "ecb"], "unknown mode"),
        # CFB128 encryption is serial: no wide path takes it
        (["A", "B", "--mode", "cfb128", "--paths", "generic,avx512"], "does not run cfb128"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    a, b = _two_copies(tmp_path)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / bench_ab.EXT_FILE).write_bytes(b"not an ELF file\n")
    subst = {"A": str(a), "B": str(b), "SAME": str(a), "NOT_EXT": str(junk)}
    r = _run(*[subst.get(x, x) for x in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vaescrypt.bench_ab: error: "), r.stderr
    assert message in err[0]
    assert "Traceback" not in r.stderr
