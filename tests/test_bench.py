"""`python -m vaescrypt.bench`: its output contract, the roof arithmetic and
the target check.

Nothing here asserts a speed (benchmarks report ratios, they are not timed
tests): the arithmetic of the issue-rate roof, of the "above its roof"
check and of the target lines is checked on made-up numbers; the real runs
are short and only their shape and internal consistency are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import vaescrypt
from vaescrypt import bench
from vaescrypt.bench import (
    Row,
    aes_blocks,
    apply_roofs,
    check_targets,
    issue_roof_mbps,
    path_issue_rate,
    render_table,
    roof_violations,
)

RATES = {128: 8e9, 256: 16e9, 512: 15e9}  # lane-rounds/s: ymm reads highest here


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vaescrypt.bench", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def _row(direction: str, size: int, py: float, crypto: float, c: float = 10000.0,
         path: str = "avx512", evp: float = 4000.0, mode: str = "gcm",
         ctr: float | None = 15000.0) -> Row:
    return Row(mode, direction, path, 256, size, path == "avx512", c, evp, py, crypto,
               ctr_mbps=ctr)


# ------------------------------------------------------------ arithmetic --

def test_default_sizes_cover_the_odd_tails() -> None:
    assert bench.DEFAULT_SIZES == (16, 63, 64, 200, 256, 300, 500, 512, 1420, 4095, 4096,
                                   16384, 65536)


@pytest.mark.parametrize("mode, size, blocks", [
    ("gcm", 0, 1), ("gcm", 1, 2), ("gcm", 16, 2), ("gcm", 63, 5), ("gcm", 64, 5),
    ("gcm", 4095, 257), ("gcm", 16384, 1025),
    ("ctr", 16, 1), ("ctr", 17, 2),
    ("cfb128", 16, 1), ("cfb128", 17, 2), ("cfb8", 5, 5), ("cfb1", 5, 40),
])
def test_aes_blocks(mode: str, size: int, blocks: int) -> None:
    assert aes_blocks(mode, size) == blocks


def test_aes_blocks_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        aes_blocks("ecb", 16)
    with pytest.raises(ValueError):
        aes_blocks("gcm", -1)


def test_issue_roof_formula() -> None:
    # 16384 B of GCM = 1024 counter blocks + E(J0); AES-256 = 14 rounds each.
    t = 1025 * 14 / 16e9
    assert issue_roof_mbps(16e9, 256, "gcm", 16384) == pytest.approx(16384 / t / 1e6)
    # Large messages tend to rate x 16 / Nr bytes/s.
    assert issue_roof_mbps(16e9, 256, "cfb128", 1 << 20) == pytest.approx(16e9 * 16 / 14 / 1e6)
    # The key size scales it by Nr exactly; a short GCM message pays E(J0).
    assert issue_roof_mbps(16e9, 128, "gcm", 4096) / issue_roof_mbps(16e9, 256, "gcm", 4096) \
        == pytest.approx(14 / 10)
    assert issue_roof_mbps(16e9, 192, "gcm", 16) == pytest.approx(16 / (2 * 12 / 16e9) / 1e6)
    with pytest.raises(ValueError):
        issue_roof_mbps(0.0, 256, "gcm", 64)
    with pytest.raises(ValueError):
        issue_roof_mbps(16e9, 256, "cfb128", 0)


def test_path_issue_rate_uses_the_best_usable_width() -> None:
    assert path_issue_rate("aesni", RATES) == 8e9
    assert path_issue_rate("vaes_avx2", RATES) == 16e9
    assert path_issue_rate("avx10_256", RATES) == 16e9
    assert path_issue_rate("avx512", RATES) == 16e9      # its ymm/xmm rounds count too
    assert path_issue_rate("avx512", {128: 8e9, 512: 15e9}) == 15e9
    assert path_issue_rate("generic", RATES) is None     # no AES instructions
    assert path_issue_rate("vaes_avx2", {512: 15e9}) is None  # nothing it can use


def test_apply_roofs_path_and_host() -> None:
    rows = [_row("encrypt", 4096, 5000.0, 4000.0, path="aesni"),
            _row("encrypt", 4096, 5000.0, 4000.0, path="generic")]
    apply_roofs(rows, RATES)
    assert rows[0].roof_mbps == pytest.approx(issue_roof_mbps(8e9, 256, "gcm", 4096))
    assert rows[0].host_roof_mbps == pytest.approx(issue_roof_mbps(16e9, 256, "gcm", 4096))
    assert rows[1].roof_mbps is None
    assert rows[1].host_roof_mbps == rows[0].host_roof_mbps
    assert rows[0].c_vs_roof == pytest.approx(10000.0 / rows[0].roof_mbps)
    apply_roofs(rows, {})
    assert rows[0].roof_mbps is None and rows[0].host_roof_mbps is None


# ------------------------------------------------------ roof violations --

def _roofed(c: float, py: float = 100.0, evp: float = 4000.0, ctr: float | None = 15000.0,
            paths: tuple[str, ...] = ("avx512",)) -> list[Row]:
    rows = [_row("encrypt", 16384, py, 6000.0, c=c, path=p, evp=evp, ctr=ctr) for p in paths]
    apply_roofs(rows, RATES)
    return rows


def test_no_violation_below_the_roof() -> None:
    roof = issue_roof_mbps(16e9, 256, "gcm", 16384)  # ~18.26 GB/s
    assert roof_violations(_roofed(c=0.999 * roof, py=0.9 * roof)) == []
    # At the roof exactly is not above it.
    assert roof_violations(_roofed(c=roof)) == []


def test_c_py_above_path_roof_flagged() -> None:
    roof = issue_roof_mbps(8e9, 256, "gcm", 16384)  # aesni: xmm rate only
    lines = roof_violations(_roofed(c=1.05 * roof, py=1.01 * roof, paths=("aesni",)))
    assert len(lines) == 2
    assert lines[0] == (f"ROOF VIOLATED: gcm encrypt AES-256 16384 B: aesni C {1.05 * roof:.0f} "
                        f"MB/s > roof {roof:.0f} MB/s (1.050x): the roof is wrong, not the path "
                        "fast")
    assert lines[1].startswith("ROOF VIOLATED: gcm encrypt AES-256 16384 B: aesni py ")


def test_competitors_held_to_host_roof_once_per_point() -> None:
    host = issue_roof_mbps(16e9, 256, "gcm", 16384)
    ctr_roof = issue_roof_mbps(16e9, 256, "ctr", 16384)
    rows = _roofed(c=1000.0, evp=1.2 * host, ctr=1.1 * ctr_roof,
                   paths=("avx512", "avx10_256", "aesni", "generic"))
    lines = roof_violations(rows)
    assert [line.split(": ")[2].split(" ")[0] for line in lines] == ["EVP", "CTR"]
    assert "(1.200x)" in lines[0] and "(1.100x)" in lines[1]


def test_ctr_loop_roof_has_no_j0_block() -> None:
    # The CTR loop encrypts ceil(size/16) blocks, a GCM message one more: at
    # 16 B the loop may run at twice the GCM roof without breaking its own.
    rows = [_row("encrypt", 16, 100.0, 100.0, c=200.0,
                 ctr=1.9 * issue_roof_mbps(16e9, 256, "gcm", 16))]
    apply_roofs(rows, RATES)
    assert rows[0].ctr_roof_mbps == pytest.approx(2 * rows[0].host_roof_mbps)
    assert roof_violations(rows) == []
    rows[0].ctr_mbps = 1.01 * rows[0].ctr_roof_mbps
    assert [v.split(": ")[2][:8] for v in roof_violations(rows)] == ["CTR loop"]


def test_generic_never_has_a_roof() -> None:
    rows = _roofed(c=1e12, paths=("generic",))
    assert roof_violations(rows) == []


# ---------------------------------------------------------------- output --

def _meta() -> dict[str, object]:
    return {"openssl": "OpenSSL test", "cryptography": "0", "pinned_cpu": 0, "rounds": 1,
            "seconds_per_point": 0.1,
            "aes_issue_lane_rounds_per_s": {"128": 8e9, "256": 16e9, "512": 15e9},
            "aes_issue_median": {"128": 7.5e9, "256": 15.5e9, "512": 14.9e9},
            "aes_issue_samples": 11}


def test_table_columns_legend_and_loud_violation() -> None:
    roof = issue_roof_mbps(16e9, 256, "gcm", 16384)
    ok = render_table(_roofed(c=0.5 * roof), _meta())
    header = next(line for line in ok.splitlines() if line.startswith("mode"))
    assert header.split()[-6:] == ["roof", "MB/s", "C/roof", "CTR", "MB/s", "C/CTR"]
    assert "best of 11 samples: xmm 8.00 (median 7.50), ymm 16.00 (median 15.50), " \
        "zmm 15.00 (median 14.90)" in " ".join(ok.split())
    assert "NOT a bound" in ok
    assert "ROOF VIOLATED" not in ok and "!!!" not in ok
    bad = render_table(_roofed(c=1.5 * roof), _meta())
    row = next(line for line in bad.splitlines() if line.startswith("gcm"))
    assert "1.50x!" in row
    assert "!!! 1 measurement(s) above their roof" in bad
    assert "!!! ROOF VIOLATED: gcm encrypt AES-256 16384 B: avx512 C" in bad


def test_table_states_the_python_loop_cost() -> None:
    rows = _roofed(c=0.5 * issue_roof_mbps(16e9, 256, "gcm", 16384))
    assert "empty lambda" not in render_table(rows, _meta())  # --no-python: no such line
    text = render_table(rows, {**_meta(), "py_loop_ns": 27.4})
    assert "a lambda called in a loop: 27 ns per call of both is the loop's own" in text


def test_main_reports_violations_on_stderr_and_json(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    roof = issue_roof_mbps(16e9, 256, "gcm", 16384)
    monkeypatch.setattr(bench, "measure", lambda opts: (_roofed(c=2 * roof), _meta()))
    assert bench.main(["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert len(doc["roof_violations"]) == 1 and "avx512 C" in doc["roof_violations"][0]
    assert err.startswith("vaescrypt.bench: ROOF VIOLATED: ")
    assert "floor_mbps" not in doc["results"][0] and "py_vs_crypto_bound" not in doc["results"][0]


def test_targets_met_and_missed() -> None:
    rows = [_row("encrypt", 64, 300.0, 100.0), _row("encrypt", 16384, 9000.0, 6000.0),
            _row("decrypt", 64, 90.0, 100.0), _row("decrypt", 16384, 12000.0, 6000.0)]
    text = "\n".join(check_targets(rows))
    assert "MET     GCM encrypt: beats cryptography at every size >= 64: worst 1.50x at 16384 B" \
        in text
    assert "MISSED  GCM decrypt: beats cryptography at every size >= 64: worst 0.90x at 64 B" \
        in text
    assert "MET     GCM decrypt: >= 1.7x cryptography at 16 KiB: worst 2.00x at 16384 B" in text
    assert "MISSED  GCM encrypt: >= 1.7x cryptography at 16 KiB: worst 1.50x at 16384 B\n" \
        in text + "\n"
    assert "bound" not in text
    assert "n/a     CFB128 decrypt" in text


# -------------------------------------------------------------- real runs --

@pytest.mark.skipif("avx512" not in vaescrypt.available("gcm", "encrypt"),
                    reason="the zmm CTR loop and zmm issue rate need the avx512 path")
def test_json_run_roof_is_consistent_with_its_rates() -> None:
    p = _bench("--modes", "gcm", "--directions", "encrypt", "--sizes", "63",
               "--paths", "avx512,aesni", "--time", "0.05", "--rounds", "1", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    rates = {int(w): v for w, v in out["aes_issue_lane_rounds_per_s"].items()}
    assert set(rates) == {128, 256, 512} and all(v > 0 for v in rates.values())
    # The roof takes the best sample; the median is reported beside it.
    assert all(0 < out["aes_issue_median"][str(w)] <= rates[w] for w in rates)
    assert isinstance(out["roof_violations"], list)
    for row in out["results"]:
        assert row["size"] == 63
        for k in ("c_mbps", "roof_mbps", "host_roof_mbps", "ctr_mbps", "ctr_roof_mbps", "py_mbps"):
            assert row[k] > 0, k
        want = issue_roof_mbps(path_issue_rate(row["path"], rates) or 0.0, 256, "gcm", 63)
        assert row["roof_mbps"] == pytest.approx(want)
        assert row["c_vs_roof"] == pytest.approx(row["c_mbps"] / row["roof_mbps"])
        assert row["c_vs_ctr"] == pytest.approx(row["c_mbps"] / row["ctr_mbps"])


def test_table_run_prints_roof_columns() -> None:
    p = _bench("--modes", "cfb128", "--directions", "decrypt", "--sizes", "256",
               "--paths", "aesni", "--time", "0.02", "--rounds", "1", "--no-python")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = next(line for line in lines if line.startswith("mode"))
    assert header.split()[-6:] == ["roof", "MB/s", "C/roof", "CTR", "MB/s", "C/CTR"]
    if "aesni" in vaescrypt.available("cfb128", "decrypt"):
        # CFB has a roof (AES issue rate) but no CTR reference.
        row = next(line for line in lines if line.startswith("cfb128"))
        assert row.split()[-4] != "-" and row.split()[-2:] == ["-", "-"]


@pytest.mark.parametrize("args, message", [
    (("--sizes", "1k"), "--sizes takes comma-separated integers"),
    (("--paths", "sse9"), "unknown path 'sse9'"),
])
def test_bad_options_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    p = _bench(*args, "--time", "0.01", "--rounds", "1", "--no-python")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
