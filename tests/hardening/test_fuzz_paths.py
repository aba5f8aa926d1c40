"""Differential fuzzing of every code path against OpenSSL (libFuzzer).

One harness per mode family, each checking every path this CPU can run (the
generic one included) byte for byte against OpenSSL's libcrypto, computed
once per input, under ASan + UBSan:

* tests/fuzz/vc_fuzz_gcm.c: GCM one-shot, streaming and in place, both
  directions, forged tags;
* tests/fuzz/vc_fuzz_cfb.c: CFB128 / CFB8 / CFB1 (one per input), both
  directions, one-shot, streaming, in place.

Each run starts from the committed seeds in tests/fuzz/corpus/ and lasts
VAESCRYPT_FUZZ_SECONDS per harness (5 by default: the CI run).  Any crash,
sanitizer report or mismatch fails the test with the harness's message and
the saved crashing input.  The harness prints its own execution rate; the
long run (>= 10^7 executions) is documented in docs/HARDENING.md.

Needs clang with libFuzzer and OpenSSL's headers (Debian: clang,
libclang-rt-14-dev, libssl-dev, installed by ci/bootstrap.sh); without them
the test fails and says so.
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

FUZZ_DIR = Path(__file__).resolve().parent.parent / "fuzz"
CORPUS = FUZZ_DIR / "corpus"
MAX_LEN = 4096
HARNESS_MODES = {"gcm": ("gcm",), "cfb": ("cfb128", "cfb8", "cfb1")}
# A floor far below what the harnesses do (several thousand executions per
# CPU second with sanitizers): only a return to the old per-input cost
# (~10x slower) trips it, not a busy host.
MIN_RATE_PER_CPU_SECOND = 1000.0

pytestmark = pytest.mark.xdist_group("fuzz")


def _build_module() -> ModuleType:
    return load_by_path("_vc_build_fuzzer", FUZZ_DIR / "build_fuzzer.py")


def _seconds() -> int:
    raw = os.environ.get("VAESCRYPT_FUZZ_SECONDS", "5")
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
        return {
            f"{h}{'-teeth' if t else ''}": bf.build(out, h, teeth=t)
            for h in HARNESS_MODES
            for t in (False, True)
        }
    except bf.FuzzBuildError as e:
        pytest.fail(f"cannot build the libFuzzer harnesses: {e}")


def _stats(log: str) -> dict[str, float]:
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^stat::(\w+):\s+([0-9.]+)", log, re.MULTILINE)
    }


def _paths_logged(log: str) -> dict[tuple[str, str], list[str]]:
    return {
        (m.group(1), m.group(2)): m.group(3).split()
        for m in re.finditer(r"^vc_fuzz_\w+: paths (\w+) (\w+): (.*)$", log, re.MULTILINE)
    }


def _rate_line(log: str, harness: str) -> tuple[int, float, float]:
    """(executions, exec/s wall, exec/s per CPU second) from the harness's
    own line at exit."""
    m = re.search(
        rf"^vc_fuzz_{harness}: rate: (\d+) executions in [0-9.]+ s wall, "
        r"[0-9.]+ s CPU: (\d+) exec/s wall, (\d+) exec/s per CPU second$",
        log,
        re.MULTILINE,
    )
    assert m, f"no rate line from vc_fuzz_{harness}:\n{log[-2000:]}"
    return int(m.group(1)), float(m.group(2)), float(m.group(3))


def test_seed_corpus_is_committed() -> None:
    seeds = sorted(p for p in CORPUS.iterdir() if p.is_file())
    assert len(seeds) >= 5, f"{CORPUS} should hold the hand-made seeds"
    assert all(0 < p.stat().st_size <= MAX_LEN for p in seeds)
    # seeds for both harnesses, and every CFB segment size
    names = {p.name.split("_")[0] for p in seeds}
    assert {"gcm", "cfb128", "cfb8", "cfb1"} <= names, names


@pytest.mark.parametrize("harness", list(HARNESS_MODES))
def test_fuzz_every_path_against_openssl(
    harness: str, fuzzers: dict[str, Path], tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    seconds = _seconds()
    work = tmp_path / "corpus"
    work.mkdir()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    cmd = [
        str(fuzzers[harness]),
        f"-max_total_time={seconds}",
        f"-max_len={MAX_LEN}",
        "-timeout=60",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
        str(work),
        str(CORPUS),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=seconds + 300)
    log = proc.stdout + proc.stderr
    crashes = sorted(artifacts.iterdir())
    if proc.returncode != 0 or crashes:
        tail = "\n".join(log.splitlines()[-40:])
        pytest.fail(
            f"libFuzzer found a problem (exit {proc.returncode}); saved inputs: "
            f"{[str(c) for c in crashes]}; reproduce with `{fuzzers[harness]} <input>`"
            f"\n{tail}"
        )
    stats = _stats(log)
    assert "number_of_executed_units" in stats, f"no final stats in the log:\n{log[-2000:]}"
    execs = int(stats["number_of_executed_units"])
    seeds = len(list(CORPUS.iterdir()))
    assert execs > seeds, f"only {execs} executions in {seconds} s"
    # The harness's own count is libFuzzer's, and its rate is not the old one.
    own, wall_rate, cpu_rate = _rate_line(log, harness)
    assert own == execs, f"harness counted {own}, libFuzzer {execs}"
    assert cpu_rate >= MIN_RATE_PER_CPU_SECOND, f"{cpu_rate} exec/s per CPU second"
    # The harness compared exactly the paths the library offers on this CPU.
    logged = _paths_logged(log)
    for mode in HARNESS_MODES[harness]:
        for direction in ("encrypt", "decrypt"):
            assert logged.get((mode, direction)) == list(vaescrypt.available(mode, direction)), (
                f"{mode} {direction}: harness ran {logged.get((mode, direction))}"
            )
    record_property("fuzz_seconds", seconds)
    record_property("fuzz_executions", execs)
    record_property("fuzz_exec_per_sec", wall_rate)
    record_property("fuzz_exec_per_cpu_sec", cpu_rate)
    print(
        f"\nvc_fuzz_{harness}: {execs} executions in {seconds} s ({wall_rate:.0f} exec/s, "
        f"{cpu_rate:.0f} per CPU second), corpus {len(list(work.iterdir()))} new inputs"
    )


def test_a_mismatch_is_caught(fuzzers: dict[str, Path], tmp_path: Path) -> None:
    """The GCM teeth build corrupts one byte of the widest path's output: the
    seeds alone must make it abort with a MISMATCH naming that path."""
    proc = subprocess.run(
        [str(fuzzers["gcm-teeth"]), "-runs=0", f"-artifact_prefix={tmp_path}/", str(CORPUS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    widest = vaescrypt.available("gcm", "encrypt")[0]
    assert f"MISMATCH encrypt ciphertext: mode=gcm path={widest} dir=encrypt" in proc.stderr, (
        proc.stderr[-2000:]
    )
    assert list(tmp_path.glob("crash-*")), "libFuzzer saved no crashing input"


def test_a_generic_mismatch_is_caught_by_openssl(fuzzers: dict[str, Path], tmp_path: Path) -> None:
    """The CFB teeth build corrupts the generic path's output, which is now
    compared with OpenSSL (no longer with itself): the seeds must catch it."""
    proc = subprocess.run(
        [str(fuzzers["cfb-teeth"]), "-runs=0", f"-artifact_prefix={tmp_path}/", str(CORPUS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    assert re.search(
        r"vc_fuzz_cfb: MISMATCH one-shot: mode=cfb(128|8|1) path=generic ", proc.stderr
    ), proc.stderr[-2000:]
    assert list(tmp_path.glob("crash-*")), "libFuzzer saved no crashing input"
