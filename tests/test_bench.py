"""`python -m vaescrypt.bench`: its output contract and the target check.

Nothing here asserts a speed (benchmarks report ratios, they are not timed
tests); the runs are short and only their shape and internal consistency are
checked.  The arithmetic of the target lines is checked on made-up rows.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import vaescrypt
from vaescrypt.bench import Row, check_targets


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vaescrypt.bench", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def _row(direction: str, size: int, py: float, crypto: float, c: float = 10000.0,
         floor: float | None = 12000.0) -> Row:
    return Row("gcm", direction, "avx512", 256, size, True, c, 4000.0, py, crypto, 16000.0,
               floor)


def test_targets_met_missed_and_bound() -> None:
    rows = [_row("encrypt", 64, 300.0, 100.0), _row("encrypt", 16384, 9000.0, 6000.0),
            _row("decrypt", 64, 90.0, 100.0), _row("decrypt", 16384, 12000.0, 6000.0)]
    lines = check_targets(rows)
    text = "\n".join(lines)
    assert "MET     GCM encrypt: beats cryptography at every size >= 64: worst 1.50x at 16384 B" \
        in text
    assert "MISSED  GCM decrypt: beats cryptography at every size >= 64: worst 0.90x at 64 B" \
        in text
    assert "MET     GCM decrypt: >= 1.7x cryptography at 16 KiB: worst 2.00x" in text
    # Bound = t_crypto / (t_floor + (t_py - t_c)), per 16384-byte call:
    #   t_crypto = 16384/6000, t_floor = 16384/12000, t_py - t_c = 16384/9000 - 16384/10000
    t = 16384
    bound = (t / 6000) / (t / 12000 + t / 9000 - t / 10000)
    assert f"MISSED  GCM encrypt: >= 1.7x cryptography at 16 KiB: worst 1.50x at 16384 B " \
           f"(bound on this host: {bound:.2f}x)" in text
    assert "n/a     CFB128 decrypt" in text


def test_bound_needs_every_term() -> None:
    assert _row("encrypt", 16384, 9000.0, 6000.0, floor=None).py_vs_crypto_bound is None
    assert _row("encrypt", 16384, 9000.0, 6000.0).py_vs_crypto_bound is not None
    # Python faster than the C loop (noise) counts as zero overhead, not negative.
    r = _row("encrypt", 16384, 11000.0, 6000.0, c=10000.0, floor=12000.0)
    assert r.py_vs_crypto_bound == pytest.approx(12000.0 / 6000.0)


@pytest.mark.skipif("avx512" not in vaescrypt.available("gcm", "encrypt"),
                    reason="the roof and floor loops need the avx512 path")
def test_json_run_has_roof_floor_and_consistent_ratios() -> None:
    p = _bench("--modes", "gcm", "--directions", "encrypt", "--sizes", "4096",
               "--paths", "avx512", "--time", "0.05", "--rounds", "1", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (row,) = out["results"]
    assert row["path"] == "avx512" and row["size"] == 4096
    for k in ("c_mbps", "roof_mbps", "floor_mbps", "py_mbps", "crypto_mbps"):
        assert row[k] > 0, k
    assert row["c_vs_floor"] == pytest.approx(row["c_mbps"] / row["floor_mbps"])
    assert row["c_vs_roof"] == pytest.approx(row["c_mbps"] / row["roof_mbps"])
    # The floor does the roof's work plus 13 carry-less multiplies per 16
    # blocks: it cannot be much faster than the roof (slack for noise).
    assert row["floor_mbps"] < 1.15 * row["roof_mbps"]
    assert any("GCM encrypt" in t for t in out["targets"])


def test_table_run_prints_floor_column() -> None:
    p = _bench("--modes", "cfb128", "--directions", "decrypt", "--sizes", "256",
               "--paths", "aesni", "--time", "0.02", "--rounds", "1", "--no-python")
    assert p.returncode == 0, p.stderr
    header = next(line for line in p.stdout.splitlines() if line.startswith("mode"))
    assert header.split()[-2:] == ["C/roof", "C/floor"]


@pytest.mark.parametrize("args, message", [
    (("--sizes", "1k"), "--sizes takes comma-separated integers"),
    (("--paths", "sse9"), "unknown path 'sse9'"),
])
def test_bad_options_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    p = _bench(*args, "--time", "0.01", "--rounds", "1", "--no-python")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
