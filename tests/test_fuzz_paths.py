"""Differential fuzzing of every code path against the generic one (libFuzzer).

tests/fuzz/vc_fuzz_paths.c derives key/IV/AAD/tag length/data/split points
from each input and checks, for every path this CPU can run, GCM (one-shot,
streaming, in place, both directions, forged tags) and CFB128/CFB8/CFB1 (both
directions, one-shot, streaming, in place) byte for byte against the generic
path, under ASan + UBSan.  The run starts from the committed seeds in
tests/fuzz/corpus/ and lasts VAESCRYPT_FUZZ_SECONDS (10 by default; the long
check in README.md uses 60).  Any crash, sanitizer report or mismatch fails
the test with the harness's message and the saved crashing input.

Needs clang with libFuzzer (Debian: clang + libclang-rt-14-dev, installed by
ci/bootstrap.sh); without it the test fails and says so.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from _by_path import load_by_path

import vaescrypt

FUZZ_DIR = Path(__file__).resolve().parent / "fuzz"
CORPUS = FUZZ_DIR / "corpus"
MAX_LEN = 4096

pytestmark = pytest.mark.xdist_group("fuzz")


def _build_module() -> ModuleType:
    return load_by_path("_vc_build_fuzzer", FUZZ_DIR / "build_fuzzer.py")


def _seconds() -> int:
    raw = os.environ.get("VAESCRYPT_FUZZ_SECONDS", "10")
    try:
        s = int(raw)
    except ValueError:
        pytest.fail(f"VAESCRYPT_FUZZ_SECONDS={raw!r} is not a whole number of seconds")
    if not 1 <= s <= 86400:
        pytest.fail(f"VAESCRYPT_FUZZ_SECONDS={s} is outside 1..86400")
    return s


@pytest.fixture(scope="module")
def fuzzers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    bf = _build_module()
    out = tmp_path_factory.mktemp("vc-fuzz")
    try:
        return {"plain": bf.build(out), "teeth": bf.build(out, teeth=True)}
    except bf.FuzzBuildError as e:
        pytest.fail(f"cannot build the libFuzzer harness: {e}")


def _stats(log: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^stat::(\w+):\s+([0-9.]+)", log, re.MULTILINE)}


def _paths_logged(log: str) -> dict[tuple[str, str], list[str]]:
    return {(m.group(1), m.group(2)): m.group(3).split()
            for m in re.finditer(r"^vc_fuzz_paths: paths (\w+) (\w+): (.*)$", log, re.MULTILINE)}


def test_seed_corpus_is_committed() -> None:
    seeds = sorted(p for p in CORPUS.iterdir() if p.is_file())
    assert len(seeds) >= 5, f"{CORPUS} should hold the hand-made seeds"
    assert all(0 < p.stat().st_size <= MAX_LEN for p in seeds)


def test_fuzz_every_path_against_generic(fuzzers: dict[str, Path], tmp_path: Path,
                                         record_property: pytest.RecordProperty) -> None:
    seconds = _seconds()
    work = tmp_path / "corpus"
    work.mkdir()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    cmd = [str(fuzzers["plain"]), f"-max_total_time={seconds}", f"-max_len={MAX_LEN}",
           "-timeout=60", "-rss_limit_mb=4096", "-print_final_stats=1",
           f"-artifact_prefix={artifacts}/", str(work), str(CORPUS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          timeout=seconds + 300)
    log = proc.stdout + proc.stderr
    crashes = sorted(artifacts.iterdir())
    if proc.returncode != 0 or crashes:
        tail = "\n".join(log.splitlines()[-40:])
        pytest.fail(f"libFuzzer found a problem (exit {proc.returncode}); saved inputs: "
                    f"{[str(c) for c in crashes]}; reproduce with `{fuzzers['plain']} <input>`"
                    f"\n{tail}")
    stats = _stats(log)
    assert "number_of_executed_units" in stats, f"no final stats in the log:\n{log[-2000:]}"
    execs = int(stats["number_of_executed_units"])
    rate = stats.get("average_exec_per_sec", 0.0)
    seeds = len(list(CORPUS.iterdir()))
    assert execs > seeds, f"only {execs} executions in {seconds} s"
    # The harness compared exactly the paths the library offers on this CPU.
    logged = _paths_logged(log)
    for mode in ("gcm", "cfb128", "cfb8", "cfb1"):
        for direction in ("encrypt", "decrypt"):
            assert logged.get((mode, direction)) == list(vaescrypt.available(mode, direction)), \
                f"{mode} {direction}: harness ran {logged.get((mode, direction))}"
    record_property("fuzz_seconds", seconds)
    record_property("fuzz_executions", execs)
    record_property("fuzz_exec_per_sec", rate)
    print(f"\nvc_fuzz_paths: {execs} executions in {seconds} s ({rate:.0f} exec/s), "
          f"corpus {len(list(work.iterdir()))} new inputs, paths {logged[('gcm', 'encrypt')]}")


def test_a_mismatch_is_caught(fuzzers: dict[str, Path], tmp_path: Path) -> None:
    """The teeth build corrupts one byte of the widest GCM path's output: the
    seeds alone must make it abort with a MISMATCH naming that path."""
    proc = subprocess.run([str(fuzzers["teeth"]), "-runs=0", f"-artifact_prefix={tmp_path}/",
                           str(CORPUS)], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode != 0
    widest = vaescrypt.available("gcm", "encrypt")[0]
    assert f"MISMATCH encrypt ciphertext: mode=gcm path={widest} dir=encrypt" in proc.stderr, \
        proc.stderr[-2000:]
    assert list(tmp_path.glob("crash-*")), "libFuzzer saved no crashing input"
