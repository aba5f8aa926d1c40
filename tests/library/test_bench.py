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

import pytest
from _run_module import run_module

import vaescrypt
from vaescrypt import bench, bench_goals
from vaescrypt.bench import (
    QuietState,
    Row,
    aes_blocks,
    apply_port_roofs,
    apply_roofs,
    check_targets,
    issue_roof_mbps,
    path_issue_rate,
    port_roof_mbps,
    port_share,
    render_table,
    roof_violations,
    spread,
)

RATES = {128: 8e9, 256: 16e9, 512: 15e9}  # lane-rounds/s: ymm reads highest here


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("vaescrypt.bench", *args)


def _row(
    direction: str,
    size: int,
    py: float,
    crypto: float,
    c: float = 10000.0,
    path: str = "avx512",
    evp: float = 4000.0,
    mode: str = "gcm",
    ctr: float | None = 15000.0,
) -> Row:
    return Row(mode, direction, path, 256, size, path == "avx512", c, evp, py, crypto, ctr_mbps=ctr)


# ------------------------------------------------------------ arithmetic --


def test_default_sizes_cover_the_odd_tails() -> None:
    assert bench.DEFAULT_SIZES == (
        16,
        63,
        64,
        200,
        256,
        300,
        500,
        512,
        1420,
        4095,
        4096,
        16384,
        65536,
    )


@pytest.mark.parametrize(
    "mode, size, blocks",
    [
        ("gcm", 0, 1),
        ("gcm", 1, 2),
        ("gcm", 16, 2),
        ("gcm", 63, 5),
        ("gcm", 64, 5),
        ("gcm", 4095, 257),
        ("gcm", 16384, 1025),
        ("ctr", 16, 1),
        ("ctr", 17, 2),
        ("cfb128", 16, 1),
        ("cfb128", 17, 2),
        ("cfb8", 5, 5),
        ("cfb1", 5, 40),
    ],
)
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
    assert issue_roof_mbps(16e9, 128, "gcm", 4096) / issue_roof_mbps(
        16e9, 256, "gcm", 4096
    ) == pytest.approx(14 / 10)
    assert issue_roof_mbps(16e9, 192, "gcm", 16) == pytest.approx(16 / (2 * 12 / 16e9) / 1e6)
    with pytest.raises(ValueError):
        issue_roof_mbps(0.0, 256, "gcm", 64)
    with pytest.raises(ValueError):
        issue_roof_mbps(16e9, 256, "cfb128", 0)


def test_path_issue_rate_uses_the_best_usable_width() -> None:
    assert path_issue_rate("aesni", RATES) == 8e9
    assert path_issue_rate("vaes_avx2", RATES) == 16e9
    assert path_issue_rate("avx10_256", RATES) == 16e9
    assert path_issue_rate("avx512", RATES) == 16e9  # its ymm/xmm rounds count too
    assert path_issue_rate("avx512", {128: 8e9, 512: 15e9}) == 15e9
    assert path_issue_rate("generic", RATES) is None  # no AES instructions
    assert path_issue_rate("vaes_avx2", {512: 15e9}) is None  # nothing it can use


def test_apply_roofs_path_and_host() -> None:
    rows = [
        _row("encrypt", 4096, 5000.0, 4000.0, path="aesni"),
        _row("encrypt", 4096, 5000.0, 4000.0, path="generic"),
    ]
    apply_roofs(rows, RATES)
    assert rows[0].roof_mbps == pytest.approx(issue_roof_mbps(8e9, 256, "gcm", 4096))
    assert rows[0].host_roof_mbps == pytest.approx(issue_roof_mbps(16e9, 256, "gcm", 4096))
    assert rows[1].roof_mbps is None
    assert rows[1].host_roof_mbps == rows[0].host_roof_mbps
    assert rows[0].c_vs_roof == pytest.approx(10000.0 / rows[0].roof_mbps)
    apply_roofs(rows, {})
    assert rows[0].roof_mbps is None and rows[0].host_roof_mbps is None


# ------------------------------------------------------ port-aware roof --


def test_port_share_reads_the_mix_loop() -> None:
    # ymm: AES 16e9 lane-rounds/s, multiplies 8e9 lane-mults/s; one pass is
    # 27 x 2 lane-rounds (3.375 ns) and 6 x 2 lane-mults (1.5 ns).
    a, m = 27 * 2 / 16e9, 6 * 2 / 8e9
    assert port_share(16e9, 8e9, 1 / a, 256) == pytest.approx(0.0)  # separate ports
    assert port_share(16e9, 8e9, 1 / (a + m), 256) == pytest.approx(1.0)  # one port
    assert port_share(16e9, 8e9, 1 / (a + 0.25 * m), 256) == pytest.approx(0.25)
    # Faster than either half alone, or slower than the sum: clamped.
    assert port_share(16e9, 8e9, 2 / a, 256) == 0.0
    assert port_share(16e9, 8e9, 0.5 / (a + m), 256) == 1.0


def test_port_roof_formula() -> None:
    # 4096 B AES-256 on ymm: 257 AES blocks x 14 rounds; 256 + 2 hashed
    # blocks x (3 + 2/16) multiplies.
    a = 257 * 14 / 16e9
    m = 258 * (3 + 2 / 16) / 8e9
    assert port_roof_mbps(16e9, 8e9, 0.0, 256, 256, 4096) == pytest.approx(4096 / a / 1e6)
    assert port_roof_mbps(16e9, 8e9, 1.0, 256, 256, 4096) == pytest.approx(4096 / (a + m) / 1e6)
    assert port_roof_mbps(16e9, 8e9, 0.5, 256, 256, 4096) == pytest.approx(
        4096 / (a + 0.5 * m) / 1e6
    )
    # zmm reduces once per 32 blocks; multiplies can be the larger half.
    m512 = 258 * (3 + 2 / 32) / 1e9
    assert port_roof_mbps(16e9, 1e9, 0.0, 512, 256, 4096) == pytest.approx(4096 / m512 / 1e6)
    # Never above the AES-only roof at the same rate.
    for share in (0.0, 0.3, 1.0):
        assert port_roof_mbps(16e9, 8e9, share, 256, 256, 1420) <= issue_roof_mbps(
            16e9, 256, "gcm", 1420
        ) * (1 + 1e-12)
    with pytest.raises(ValueError):
        port_roof_mbps(0.0, 8e9, 0.0, 256, 256, 64)


def test_apply_port_roofs_wide_gcm_rows_only() -> None:
    rows = [_row("encrypt", 4096, 1.0, 1.0, path=p) for p in ("vaes_avx2", "avx512", "aesni")]
    rows.append(_row("encrypt", 4096, 1.0, 1.0, path="avx512", mode="cfb128"))
    aes, clmul = {256: 16e9, 512: 15e9}, {256: 8e9, 512: 15e9}
    mix = {256: 1 / (27 * 2 / 16e9), 512: 1 / (27 * 4 / 15e9 + 6 * 4 / 15e9)}
    shares = apply_port_roofs(rows, aes, clmul, mix)
    assert shares == {256: pytest.approx(0.0), 512: pytest.approx(1.0)}
    assert rows[0].port_roof_mbps == pytest.approx(port_roof_mbps(16e9, 8e9, 0.0, 256, 256, 4096))
    # avx512 takes the best AES rate of its widths (ymm's 16e9 here), its own
    # width's multiply rate and share.
    assert rows[1].port_roof_mbps == pytest.approx(port_roof_mbps(16e9, 15e9, 1.0, 512, 256, 4096))
    assert rows[1].port_roof_mbps <= issue_roof_mbps(16e9, 256, "gcm", 4096)
    assert rows[2].port_roof_mbps is None and rows[3].port_roof_mbps is None
    assert rows[0].c_vs_port == pytest.approx(10000.0 / rows[0].port_roof_mbps)
    # A width without its mix measurement gets no port roof.
    assert apply_port_roofs(rows, aes, clmul, {512: mix[512]}) == {512: pytest.approx(1.0)}
    assert rows[0].port_roof_mbps is None


# ---------------------------------------------------- quiet-state check --


def test_quiet_state_judges_each_probe_against_its_quickest() -> None:
    chain = iter([55.0, 52.0, 50.0, 51.0, 53.0])
    mem = iter([20.0, 18.0, 17.0, 17.5, 19.0])
    q = QuietState({"chain": lambda: next(chain), "memory": lambda: next(mem)}, 1.10)
    assert q.quiet_ns("chain") == 50.0 and q.quiet_ns("memory") == 17.0
    assert len(q.samples["chain"]) == len(q.samples["memory"]) == 5
    assert q.is_quiet((54.0, 18.0), (55.0, 18.7))  # both <= 1.10 x their quickest
    assert not q.is_quiet((50.0, 17.0), (55.5, 17.0))  # the chain's after-probe was slow
    assert not q.is_quiet((66.0, 17.0), (50.0, 17.0))
    # the memory state alone: the chain reads quiet, the memory probe does not
    assert not q.is_quiet((50.0, 17.0), (50.0, 27.0))
    assert not q.is_quiet((50.0, 30.0), (50.0, 17.0))
    assert q.is_quiet((-1.0, 17.0), (50.0, 17.0))  # no probe result: not judged
    m = q.meta()
    assert m["chain_quiet_ns"] == 50.0 and m["memory_quiet_ns"] == 17.0
    assert m["chain_samples"] == m["memory_samples"] == 5 and m["slow_factor"] == 1.10


def test_quiet_state_without_a_probe_on_this_host() -> None:
    # A probe that returns an error code (<= 0) has no reference: it never
    # makes a round slow, and the legend says it was not measured.
    q = QuietState({"chain": lambda: 50.0, "memory": lambda: -3.0}, 1.10)
    assert q.quiet_ns("memory") is None and q.is_quiet((50.0, -3.0), (50.0, -3.0))
    assert not q.is_quiet((50.0, -3.0), (60.0, -3.0))
    text = "\n".join(bench.quiet_legend({"quiet_state": q.meta()}))
    assert "memory: not measured" in text and "chain 50.0 ns per chain" in text


def test_spread() -> None:
    assert spread([]) is None and spread([5.0]) is None
    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)


def _fake_lib(chains: list[float], mems: list[float] | None = None) -> object:
    """A stand-in for vaescrypt._bench's lib: fixed rates, the given chain
    and memory-probe readings in order (then quiet ones)."""
    it = iter(chains)
    im = iter(mems or [])

    class Lib:
        def vc_bench_openssl(self, *a: object) -> float:
            return 1000.0

        def vc_bench_ctr_loop(self, *a: object) -> float:
            return 9000.0

        def vc_bench_aes_issue(self, *a: object) -> float:
            return 16e9

        def vc_bench_lib(self, *a: object) -> float:
            self.calls = getattr(self, "calls", 0) + 1
            return 4000.0 + self.calls  # a different figure every round

        def chain(self) -> float:
            return next(it, 50.0)

        def memory(self) -> float:
            return next(im, 17.0)

    return Lib()


def _point(lib: object, rounds: int, retakes: int) -> tuple[Row, QuietState]:
    opts = bench.Options(
        modes=["gcm"],
        directions=["encrypt"],
        paths=None,
        sizes=[512],
        key_bits=[256],
        seconds=0.1,
        rounds=rounds,
        python=False,
        as_json=False,
        retakes=retakes,
    )
    q = QuietState(
        {"chain": lib.chain, "memory": lib.memory},  # type: ignore[attr-defined]
        1.10,
    )
    rows = bench._measure_point(
        opts,
        lib,
        "gcm",
        "encrypt",
        0,
        0,
        ["avx512"],
        "avx512",
        lambda p: 0,
        256,
        bytes(32),
        512,
        0.01,
        {},
        q,
    )
    return rows[0], q


def test_slow_rounds_are_dropped_and_retaken() -> None:
    # 5 quiet reference probes, then round 1 slow (after-probe 70 ns), the
    # rest quiet: 3 rounds kept out of 4 taken.
    lib = _fake_lib([50.0] * 5 + [50.0, 70.0])
    row, q = _point(lib, rounds=3, retakes=2)
    assert (row.rounds_kept, row.rounds_taken, row.quiet) == (3, 4, True)
    assert row.c_samples == [4002.0, 4003.0, 4004.0]  # round 1's 4001 is not among them
    assert row.c_mbps == 4004.0 and row.c_spread == pytest.approx(2 / 4003)
    assert (q.rounds_dropped, q.points_retaken, q.points_dropped) == (1, 1, 0)
    assert bench._quiet_cell(row) == "3/4"


def test_a_round_slow_only_in_memory_is_dropped_and_retaken() -> None:
    # The chain reads quiet throughout; round 2's memory probe before it is
    # slow (26 ns against 17): it is dropped and a fourth round taken.
    lib = _fake_lib([50.0] * 20, [17.0] * 5 + [17.0, 17.0, 26.0])
    row, q = _point(lib, rounds=3, retakes=2)
    assert (row.rounds_kept, row.rounds_taken, row.quiet) == (3, 4, True)
    assert row.c_samples == [4001.0, 4003.0, 4004.0]  # round 2's 4002 is not among them
    assert (q.rounds_dropped, q.points_retaken, q.points_dropped) == (1, 1, 0)


def test_point_with_no_quiet_round_is_marked_dropped() -> None:
    lib = _fake_lib([50.0] * 5 + [80.0] * 20)
    row, q = _point(lib, rounds=2, retakes=1)
    assert (row.rounds_kept, row.rounds_taken, row.quiet) == (0, 3, False)
    assert row.c_samples == [4001.0, 4002.0, 4003.0]  # every round, as taken
    assert (q.rounds_dropped, q.points_retaken, q.points_dropped) == (3, 1, 1)
    assert bench._quiet_cell(row) == "0/3~"
    text = render_table([row], {**_meta(), "quiet_state": q.meta()})
    assert "3 round(s) dropped, 1 point(s) re-taken, 1 point(s) dropped" in text


# ------------------------------------------------------ roof violations --


def _roofed(
    c: float,
    py: float = 100.0,
    evp: float = 4000.0,
    ctr: float | None = 15000.0,
    paths: tuple[str, ...] = ("avx512",),
) -> list[Row]:
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
    assert lines[0] == (
        f"ROOF VIOLATED: gcm encrypt AES-256 16384 B: aesni C {1.05 * roof:.0f} "
        f"MB/s > roof {roof:.0f} MB/s (1.050x): the roof is wrong, not the path "
        "fast"
    )
    assert lines[1].startswith("ROOF VIOLATED: gcm encrypt AES-256 16384 B: aesni py ")


def test_competitors_held_to_host_roof_once_per_point() -> None:
    host = issue_roof_mbps(16e9, 256, "gcm", 16384)
    ctr_roof = issue_roof_mbps(16e9, 256, "ctr", 16384)
    rows = _roofed(
        c=1000.0,
        evp=1.2 * host,
        ctr=1.1 * ctr_roof,
        paths=("avx512", "avx10_256", "aesni", "generic"),
    )
    lines = roof_violations(rows)
    assert [line.split(": ")[2].split(" ")[0] for line in lines] == ["EVP", "CTR"]
    assert "(1.200x)" in lines[0] and "(1.100x)" in lines[1]


def test_ctr_loop_roof_has_no_j0_block() -> None:
    # The CTR loop encrypts ceil(size/16) blocks, a GCM message one more: at
    # 16 B the loop may run at twice the GCM roof without breaking its own.
    rows = [
        _row("encrypt", 16, 100.0, 100.0, c=200.0, ctr=1.9 * issue_roof_mbps(16e9, 256, "gcm", 16))
    ]
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
    return {
        "openssl": "OpenSSL test",
        "cryptography": "0",
        "pinned_cpu": 0,
        "rounds": 1,
        "seconds_per_point": 0.1,
        "aes_issue_lane_rounds_per_s": {"128": 8e9, "256": 16e9, "512": 15e9},
        "aes_issue_median": {"128": 7.5e9, "256": 15.5e9, "512": 14.9e9},
        "aes_issue_samples": 11,
    }


def test_table_columns_legend_and_loud_violation() -> None:
    roof = issue_roof_mbps(16e9, 256, "gcm", 16384)
    ok = render_table(_roofed(c=0.5 * roof), _meta())
    header = next(line for line in ok.splitlines() if line.startswith("mode"))
    assert header.split()[-6:] == ["roof", "MB/s", "C/roof", "CTR", "MB/s", "C/CTR"]
    assert header.split()[7:11] == ["EVP", "MB/s", "C/EVP", "quiet"]
    assert header.split()[-9:-6] == ["port", "MB/s", "C/port"]
    assert (
        "best of 11 samples: xmm 8.00 (median 7.50), ymm 16.00 (median 15.50), "
        "zmm 15.00 (median 14.90)" in " ".join(ok.split())
    )
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


def test_main_reports_violations_on_stderr_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    roof = issue_roof_mbps(16e9, 256, "gcm", 16384)
    monkeypatch.setattr(bench, "measure", lambda opts: (_roofed(c=2 * roof), _meta()))
    assert bench.main(["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert len(doc["roof_violations"]) == 1 and "avx512 C" in doc["roof_violations"][0]
    assert err.startswith("vaescrypt.bench: ROOF VIOLATED: ")
    assert "floor_mbps" not in doc["results"][0] and "py_vs_crypto_bound" not in doc["results"][0]


def test_targets_met_and_missed() -> None:
    rows = [
        _row("encrypt", 64, 300.0, 100.0),
        _row("encrypt", 16384, 9000.0, 6000.0),
        _row("decrypt", 64, 90.0, 100.0),
        _row("decrypt", 16384, 12000.0, 6000.0),
    ]
    text = "\n".join(check_targets(rows))
    assert (
        "MET     GCM encrypt: beats cryptography at every size >= 64: worst 1.50x at 16384 B"
        in text
    )
    assert (
        "MISSED  GCM decrypt: beats cryptography at every size >= 64: worst 0.90x at 64 B" in text
    )
    assert "MET     GCM decrypt: >= 1.7x cryptography at 16 KiB: worst 2.00x at 16384 B" in text
    assert (
        "MISSED  GCM encrypt: >= 1.7x cryptography at 16 KiB: worst 1.50x at 16384 B\n"
        in text + "\n"
    )
    assert "bound" not in text
    assert "n/a     CFB128 decrypt" in text


# -------------------------------------------------------------- real runs --


@pytest.mark.skipif(
    "avx512" not in vaescrypt.available("gcm", "encrypt"),
    reason="the zmm CTR loop and zmm issue rate need the avx512 path",
)
def test_json_run_roof_is_consistent_with_its_rates() -> None:
    p = _bench(
        "--modes",
        "gcm",
        "--directions",
        "encrypt",
        "--sizes",
        "63",
        "--paths",
        "avx512,aesni",
        "--time",
        "0.05",
        "--rounds",
        "1",
        "--json",
    )
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
        assert 1 <= row["rounds_kept"] <= row["rounds_taken"] or not row["quiet"]
        assert len(row["c_samples"]) >= 1 and "c_spread" in row and "evp_spread" in row
        assert row["c_mbps"] == max(row["c_samples"])
        if row["path"] == "avx512":
            assert 0 < row["port_roof_mbps"] <= row["roof_mbps"] * (1 + 1e-9)
            assert row["c_vs_port"] == pytest.approx(row["c_mbps"] / row["port_roof_mbps"])
        else:
            assert row["port_roof_mbps"] is None  # aesni: no port model
    q = out["quiet_state"]
    assert q["chain_quiet_ns"] > 0 and q["chain_samples"] >= 5 + 2 * len(out["results"]) // 2
    assert q["memory_quiet_ns"] > 0 and q["memory_samples"] == q["chain_samples"]
    assert set(out["port_share"]) <= {"256", "512"} and "512" in out["port_share"]
    # The machine the goals of issue 23 are judged against; 63 B is none of
    # their sizes, so no goal verdict.
    assert out["machine"] == bench_goals.this_machine().as_json()
    assert out["goals"] is None


def test_table_run_prints_roof_columns() -> None:
    p = _bench(
        "--modes",
        "cfb128",
        "--directions",
        "decrypt",
        "--sizes",
        "256",
        "--paths",
        "aesni",
        "--time",
        "0.02",
        "--rounds",
        "1",
        "--no-python",
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = next(line for line in lines if line.startswith("mode"))
    assert header.split()[-6:] == ["roof", "MB/s", "C/roof", "CTR", "MB/s", "C/CTR"]
    if "aesni" in vaescrypt.available("cfb128", "decrypt"):
        # CFB has a roof (AES issue rate) but no CTR reference.
        row = next(line for line in lines if line.startswith("cfb128"))
        assert row.split()[-4] != "-" and row.split()[-2:] == ["-", "-"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--sizes", "1k"), "--sizes takes comma-separated integers"),
        (("--paths", "sse9"), "unknown path 'sse9'"),
        (("--slow-factor", "0.9"), "--slow-factor must be in (1, 10]"),
        (("--retakes", "-1"), "--retakes must be 0..100"),
    ],
)
def test_bad_options_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    p = _bench(*args, "--time", "0.01", "--rounds", "1", "--no-python")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
