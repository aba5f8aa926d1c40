"""Throughput of every usable code path, next to OpenSSL and `cryptography`.

    python -m vaescrypt.bench                      # table on the terminal
    python -m vaescrypt.bench --json               # machine-readable
    python -m vaescrypt.bench --modes gcm --paths avx512,aesni --sizes 1420,16384

Per (mode, direction, path, size) it reports MB/s (10^6 bytes/s) measured
  - in a C loop through the public API (vc_gcm_encrypt ...)        "C"
  - in a C loop through OpenSSL EVP (libcrypto.so.3 via dlopen)    "EVP"
  - from Python through vaescrypt (AESGCM / AESCFB)                 "py"
  - from Python through `cryptography` (AESGCM / Cipher+CFB)        "crypto"
and the ratios C/EVP and py/crypto, and two reference points:
  roof  an upper bound (AES issue rate): every block a path produces costs
        Nr AES round instructions (Nr = 10/12/14) on the AES unit, one
        128-bit lane each, so no path gets past
            size / (blocks(size) x Nr / lane-rounds per second)
        where blocks = ceil(size/16), +1 for E(J0) in GCM, size in CFB8,
        8 x size in CFB1, and lane-rounds per second is measured: a loop of
        AESENC on 12 independent accumulators, no loads or stores, at each
        register width (xmm 1 lane, ymm 2, zmm 4); a path's roof uses the
        best rate among the widths it may use (aesni: xmm; vaes_avx2 and
        avx10_256: up to ymm; avx512: up to zmm), the best sample of the
        run (the legend prints the median beside it).  The round-0 XOR is
        not counted: it can issue on ports the AES unit does not use.
        A measurement above its roof means the roof is wrong (too low), not
        that a path is fast: the table marks the ratio with "!", and
        "ROOF VIOLATED" lines follow it (and go to stderr; JSON:
        "roof_violations").  The exit status stays 0: the numbers stand.
  CTR   a bare 16-blocks-per-iteration zmm VAES CTR loop (no GHASH, no
        front-end), GCM only: a measured reference, NOT a bound (well-tuned
        GCM code has been measured at 96-102 % of it on Intel).
  port  a port-aware bound (GCM, the wide paths): per 16 bytes the AES
        rounds (Nr lane-rounds), the carry-less multiplies (3 Karatsuba
        products) and the reductions (2 multiplies per reduction, one per
        16 blocks on ymm, 32 on zmm), each at its measured issue rate at
        the path's width, combined as the ports combine them: a loop of
        27 VAESENC + 6 VPCLMULQDQ on independent accumulators measures how
        much the two overlap (share s = 0: separate ports, the time is the
        larger of the two; s = 1: one port, their sum), and
            time = max(A, M) + s x min(A, M)
        for A = AES time and M = multiply time of the message (AAD and
        length block hashed too).  A model calibrated by three measured
        loops, not a proof: shuffles, XORs, loads and stores are not in it,
        so real code stays below it ("C/port" is the fraction reached).
GCM uses a 12-byte nonce, 16 bytes of AAD and a 16-byte tag.

Quiet-state check: two probes are timed before and after every round of
every point: a fixed chain of 64 dependent integer multiplies
(vc_bench_chain_ns) and a 512-byte load-XOR-store pass over cache-resident
buffers (vc_bench_mem_ns).  A shared host has slow states that the load
average does not show: one in which the chain takes longer, and one in
which only code that touches memory slows down (35-45 % on the Zen 4 VM of
issue 23, library and OpenSSL alike, while the chain reads quiet).  A
round in which either probe read more than --slow-factor times its
quickest reading of the run is dropped and re-taken (up to --retakes extra
rounds per point).  The "quiet" column says kept/taken
rounds; a point none of whose rounds was quiet keeps its numbers but is
marked "~" and counted as dropped (its figures are from the slow state).
The spread per point, (max - min) / median over the kept rounds, is in
--json (c_spread, evp_spread) with the per-round samples.

Robustness on a small, shared machine: the process is pinned to one CPU;
every competitor of a (mode, direction, size) point is measured in turn,
round after round (--rounds), and each keeps its best round; time is the
thread's CPU time, so a batch is not charged for time another process had
the CPU.  "*" marks the path the dispatcher selects (the "best path").
The key set-up cost (C loop, and from Python next to `cryptography`) and a
check of the issue's targets are printed after the table, then, when the
run measured any of them, issue 23's C/EVP goals for the wide GCM paths
(vaescrypt.bench_goals: judged only on the Zen 4 machine class they were
measured on; --json records the machine and the verdict, and
`python -m vaescrypt.bench_goals RUN.json ...` judges several runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vaescrypt import bench_goals
from vaescrypt._cli import BenchError, run_cli

# Odd sizes (63, 200, 300, 500, 4095) exercise the partial-block tails.
DEFAULT_SIZES: tuple[int, ...] = (
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
ALL_MODES: tuple[str, ...] = ("gcm", "cfb128", "cfb8", "cfb1")
ALL_DIRS: tuple[str, ...] = ("encrypt", "decrypt")
KEY: bytes = bytes(range(32))
NONCE: bytes = bytes(range(0xA0, 0xAC))
IV: bytes = bytes(range(0xA0, 0xB0))
AAD: bytes = bytes(range(0x30, 0x40))

AES_ROUNDS: dict[int, int] = {128: 10, 192: 12, 256: 14}
# Register widths whose AES issue rate is measured (vc_bench_aes_issue).
ISSUE_WIDTHS: tuple[int, ...] = (128, 256, 512)
# The widest AES instruction each path may execute; generic uses none.
PATH_AES_WIDTH: dict[str, int] = {"aesni": 128, "vaes_avx2": 256, "avx10_256": 256, "avx512": 512}


@dataclass
class Row:
    mode: str
    direction: str
    path: str
    key_bits: int
    size: int
    selected: bool
    c_mbps: float | None
    evp_mbps: float | None
    py_mbps: float | None
    crypto_mbps: float | None
    roof_mbps: float | None = None  # issue-rate bound for this path (an upper bound)
    host_roof_mbps: float | None = None  # the same with the host's best AES width
    ctr_mbps: float | None = None  # the zmm CTR loop (a reference, not a bound)
    ctr_roof_mbps: float | None = None  # host roof for the CTR loop's work (no E(J0))
    port_roof_mbps: float | None = None  # port-aware bound (AES + multiplies, see "port")
    quiet: bool = True  # at least one round was taken in the quiet state
    rounds_kept: int = 0  # rounds measured in the quiet state
    rounds_taken: int = 0  # rounds measured in all (kept + dropped)
    c_samples: list[float] = field(default_factory=list)  # per kept round, MB/s
    evp_samples: list[float] = field(default_factory=list)

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    @property
    def c_vs_evp(self) -> float | None:
        return self._ratio(self.c_mbps, self.evp_mbps)

    @property
    def py_vs_crypto(self) -> float | None:
        return self._ratio(self.py_mbps, self.crypto_mbps)

    @property
    def c_vs_roof(self) -> float | None:
        return self._ratio(self.c_mbps, self.roof_mbps)

    @property
    def c_vs_ctr(self) -> float | None:
        return self._ratio(self.c_mbps, self.ctr_mbps)

    @property
    def c_vs_port(self) -> float | None:
        return self._ratio(self.c_mbps, self.port_roof_mbps)

    @property
    def c_spread(self) -> float | None:
        return spread(self.c_samples)

    @property
    def evp_spread(self) -> float | None:
        return spread(self.evp_samples)

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            c_vs_evp=self.c_vs_evp,
            py_vs_crypto=self.py_vs_crypto,
            c_vs_roof=self.c_vs_roof,
            c_vs_ctr=self.c_vs_ctr,
            c_vs_port=self.c_vs_port,
            c_spread=self.c_spread,
            evp_spread=self.evp_spread,
        )
        return d


def spread(samples: Sequence[float]) -> float | None:
    """(max - min) / median of a point's per-round figures, None for < 2."""
    if len(samples) < 2:
        return None
    med = statistics.median(samples)
    return (max(samples) - min(samples)) / med if med > 0 else None


# -------------------------------------------------------------------- roof --


def aes_blocks(mode: str, size: int) -> int:
    """AES block encryptions one message of `size` bytes needs, at least.

    GCM: one per 16-byte counter block (a partial last block still costs a
    whole one) plus E(J0) for the tag (H is made with the key).  "ctr" (the
    bench's bare CTR loop) and CFB128: one per 16 bytes; CFB8: one per
    byte; CFB1: one per bit (size is in bytes)."""
    if size < 0:
        raise ValueError("size must be >= 0")
    if mode == "gcm":
        return -(-size // 16) + 1
    if mode in ("ctr", "cfb128"):
        return -(-size // 16)
    if mode == "cfb8":
        return size
    if mode == "cfb1":
        return 8 * size
    raise ValueError(f"unknown mode {mode!r}")


def issue_roof_mbps(lane_rounds_per_s: float, key_bits: int, mode: str, size: int) -> float:
    """The issue-rate bound in MB/s: `size` bytes over the time the AES unit
    needs to issue aes_blocks x Nr round instructions (one 128-bit lane each)
    at `lane_rounds_per_s`.  For large GCM messages this tends to
    lane_rounds_per_s x 16 / Nr bytes per second."""
    blocks = aes_blocks(mode, size)
    if lane_rounds_per_s <= 0 or blocks == 0:
        raise ValueError("the roof needs a positive rate and at least one block")
    seconds = blocks * AES_ROUNDS[key_bits] / lane_rounds_per_s
    return size / seconds / 1e6


def path_issue_rate(path: str, rates: dict[int, float]) -> float | None:
    """The best measured lane-rounds/s over the widths `path` may use (its
    own and narrower: a wide path also runs xmm AES for single blocks), or
    None for a path without AES instructions or nothing measured."""
    width = PATH_AES_WIDTH.get(path)
    usable = [r for w, r in rates.items() if width is not None and w <= width and r > 0]
    return max(usable) if usable else None


def apply_roofs(rows: Sequence[Row], rates: dict[int, float]) -> None:
    """Fill each row's roof (its path's widths), host roof (every width) and
    the CTR loop's roof (host rate, its own block count)."""
    host = max((r for r in rates.values() if r > 0), default=None)
    for row in rows:
        rate = path_issue_rate(row.path, rates)
        row.roof_mbps = issue_roof_mbps(rate, row.key_bits, row.mode, row.size) if rate else None
        row.host_roof_mbps = (
            issue_roof_mbps(host, row.key_bits, row.mode, row.size) if host else None
        )
        row.ctr_roof_mbps = (
            issue_roof_mbps(host, row.key_bits, "ctr", row.size)
            if host and row.ctr_mbps is not None
            else None
        )


# Blocks per reduction of the wide paths' main loops (two batches share one:
# 2 x 8 blocks on ymm, 2 x 16 on zmm); a reduction is 2 multiplies per lane.
REDUCE_BLOCKS: dict[int, int] = {256: 16, 512: 32}
# The mix loop (native/bench/bench.c): VAESENC and VPCLMULQDQ per pass.
MIX_AES, MIX_CLMUL = 27, 6


def port_share(aes_rate: float, clmul_rate: float, passes_per_s: float, width: int) -> float:
    """How far AES and carry-less multiplies share ports, 0 (separate) ..
    1 (one port), from the mix loop: its pass time against the AES half
    alone and the multiply half alone (rates in lane-operations/s)."""
    lanes = width // 128
    a = MIX_AES * lanes / aes_rate
    m = MIX_CLMUL * lanes / clmul_rate
    t = 1.0 / passes_per_s
    lo, hi = min(a, m), max(a, m)
    return min(1.0, max(0.0, (t - hi) / lo)) if lo > 0 else 0.0


def port_roof_mbps(
    aes_rate: float, clmul_rate: float, share: float, width: int, key_bits: int, size: int
) -> float:
    """The port-aware GCM bound in MB/s (see "port" in the module text): AES
    work of aes_blocks("gcm", size) blocks, multiply work of the hashed
    blocks (data, 16 B of AAD, the length block) at 3 products each plus
    2 per lane per reduction, combined as max + share x min."""
    if aes_rate <= 0 or clmul_rate <= 0 or size <= 0:
        raise ValueError("the port roof needs positive rates and size")
    a = aes_blocks("gcm", size) * AES_ROUNDS[key_bits] / aes_rate
    hashed = -(-size // 16) + 2
    per_block = 3 + 2 / REDUCE_BLOCKS[width]
    m = hashed * per_block / clmul_rate
    return size / (max(a, m) + share * min(a, m)) / 1e6


def apply_port_roofs(
    rows: Sequence[Row], aes: dict[int, float], clmul: dict[int, float], mix: dict[int, float]
) -> dict[int, float]:
    """Fill port_roof_mbps for the GCM rows of the wide paths; returns the
    share measured per width (for the legend).  The share comes from the
    path's own width; the AES rate is the path's best usable one, as for
    the issue-rate roof, so the port bound never exceeds that roof."""
    shares = {
        w: port_share(aes[w], clmul[w], mix[w], w)
        for w in REDUCE_BLOCKS
        if aes.get(w) and clmul.get(w) and mix.get(w)
    }
    for row in rows:
        w = PATH_AES_WIDTH.get(row.path)
        rate = path_issue_rate(row.path, aes)
        if row.mode != "gcm" or w not in shares or rate is None:
            row.port_roof_mbps = None
            continue
        row.port_roof_mbps = port_roof_mbps(rate, clmul[w], shares[w], w, row.key_bits, row.size)
    return shares


def roof_violations(rows: Sequence[Row]) -> list[str]:
    """One line per measurement above its roof.  A bound cannot be beaten, so
    each line is a bug in the roof (a rate measured too low, a width or a
    block count the model misses), never a fast path.  C and py are held to
    the row path's roof; EVP, cryptography and the CTR loop (the same for
    every path of a point: reported once) to the host's, the best any AES
    code here can do (the CTR loop with its own block count: no E(J0))."""
    out: list[str] = []
    seen: set[tuple[str, str, int, int, str]] = set()
    for r in rows:
        point = f"{r.mode} {r.direction} AES-{r.key_bits} {r.size} B"
        checks: list[tuple[str, float | None, float | None]] = [
            (f"{r.path} C", r.c_mbps, r.roof_mbps),
            (f"{r.path} py", r.py_mbps, r.roof_mbps),
        ]
        for name, v, roof in (
            ("EVP", r.evp_mbps, r.host_roof_mbps),
            ("cryptography", r.crypto_mbps, r.host_roof_mbps),
            ("CTR loop", r.ctr_mbps, r.ctr_roof_mbps),
        ):
            key = (r.mode, r.direction, r.key_bits, r.size, name)
            if key not in seen:
                seen.add(key)
                checks.append((name, v, roof))
        for name, v, roof in checks:
            if v is not None and roof and v > roof:
                out.append(
                    f"ROOF VIOLATED: {point}: {name} {v:.0f} MB/s > roof {roof:.0f} MB/s "
                    f"({v / roof:.3f}x): the roof is wrong, not the path fast"
                )
    return out


# ------------------------------------------------------------------ timing --

_clock = time.thread_time_ns


class PyTimer:
    """Seconds per call of fn(), as the best of many short batches of CPU time."""

    def __init__(self, fn: Callable[[], object], batch_s: float) -> None:
        self.fn = fn
        self.best = float("inf")
        fn()  # warm-up (and the error check)
        n = 1
        while True:  # calibrate: one batch ~ batch_s
            took = self._batch(n)
            if took >= batch_s / 4 or n >= 1 << 24:
                break
            n *= 4
        self.number = max(1, int(n * batch_s / max(took, 1e-9)))

    def _batch(self, n: int) -> float:
        fn = self.fn
        t0 = _clock()
        for _ in range(n):
            fn()
        return (_clock() - t0) / 1e9

    def round(self, batches: int = 3) -> None:
        for _ in range(batches):
            self.best = min(self.best, self._batch(self.number) / self.number)

    def mbps(self, size: int) -> float:
        return size / self.best / 1e6


def pin_to_one_cpu() -> int | None:
    """Pin this process to the last CPU it may run on; returns that CPU."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
        return cpus[-1]
    except (AttributeError, OSError):
        return None


def _c_value(v: float) -> float | None:
    return v if v > 0 else None


def _vaescrypt_op(
    mode: str, direction: str, path: str, key: bytes, size: int
) -> Callable[[], object]:
    import vaescrypt

    data = bytes(size)
    if mode == "gcm":
        g = vaescrypt.AESGCM(key, impl=path)
        if direction == "encrypt":
            return lambda: g.encrypt(NONCE, data, AAD)
        ct = g.encrypt(NONCE, data, AAD)
        return lambda: g.decrypt(NONCE, ct, AAD)
    seg = {"cfb128": 128, "cfb8": 8, "cfb1": 1}[mode]
    c = vaescrypt.AESCFB(key, segment_size=seg, impl=path)
    fn = c.encrypt if direction == "encrypt" else c.decrypt
    return lambda: fn(IV, data)


def _cryptography_op(
    mode: str, direction: str, key: bytes, size: int
) -> Callable[[], object] | None:
    """The same operation through `cryptography`, or None (absent / no CFB1)."""
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        return None
    data = bytes(size)
    if mode == "gcm":
        g = AESGCM(key)
        if direction == "encrypt":
            return lambda: g.encrypt(NONCE, data, AAD)
        ct = g.encrypt(NONCE, data, AAD)
        return lambda: g.decrypt(NONCE, ct, AAD)
    if mode == "cfb1":
        return None
    try:  # cryptography >= 47 keeps CFB in the "decrepit" namespace
        from cryptography.hazmat.decrepit.ciphers import modes as cmodes
    except ImportError:
        from cryptography.hazmat.primitives.ciphers import modes as cmodes  # type: ignore[no-redef]
    mode_cls = cmodes.CFB if mode == "cfb128" else cmodes.CFB8
    algo = algorithms.AES(key)

    def run() -> bytes:
        cipher = Cipher(algo, mode_cls(IV))
        ctx = cipher.encryptor() if direction == "encrypt" else cipher.decryptor()
        return ctx.update(data) + ctx.finalize()

    return run


# -------------------------------------------------------------------- main --


@dataclass
class Options:
    modes: list[str]
    directions: list[str]
    paths: list[str] | None
    sizes: list[int]
    key_bits: list[int]
    seconds: float
    rounds: int
    python: bool
    as_json: bool
    slow_factor: float = 1.10
    retakes: int = 5


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(t) for t in _csv(text)]
    except ValueError:
        raise BenchError(f"--{what} takes comma-separated integers, got {text!r}") from None
    if not vals:
        raise BenchError(f"--{what} is empty")
    return vals


def parse_args(argv: Sequence[str] | None) -> Options:
    ap = argparse.ArgumentParser(
        prog="python -m vaescrypt.bench",
        description="vaescrypt throughput vs OpenSSL and cryptography",
    )
    ap.add_argument("--modes", default=",".join(ALL_MODES), help="gcm,cfb128,cfb8,cfb1")
    ap.add_argument("--directions", default=",".join(ALL_DIRS), help="encrypt,decrypt")
    ap.add_argument("--paths", default="", help="restrict to these paths (default: all usable)")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes")
    ap.add_argument("--key-bits", default="256", help="128,192,256")
    ap.add_argument(
        "--time", type=float, default=0.3, help="seconds per measurement, split over the rounds"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds per point (each competitor keeps its best)",
    )
    ap.add_argument("--no-python", action="store_true", help="skip the Python-level timings")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument(
        "--slow-factor",
        type=float,
        default=1.10,
        help="a round is in the slow state when a quiet-state probe around it took "
        "more than this times that probe's quickest reading of the run",
    )
    ap.add_argument(
        "--retakes",
        type=int,
        default=10,
        help="extra rounds per point to replace rounds taken in the slow state",
    )
    a = ap.parse_args(argv)
    opts = Options(
        modes=_csv(a.modes),
        directions=_csv(a.directions),
        paths=_csv(a.paths) or None,
        sizes=_ints(a.sizes, "sizes"),
        key_bits=_ints(a.key_bits, "key-bits"),
        seconds=a.time,
        rounds=a.rounds,
        python=not a.no_python,
        as_json=a.json,
        slow_factor=a.slow_factor,
        retakes=a.retakes,
    )
    for m in opts.modes:
        if m not in ALL_MODES:
            raise BenchError(f"unknown mode {m!r}; expected some of {', '.join(ALL_MODES)}")
    for d in opts.directions:
        if d not in ALL_DIRS:
            raise BenchError(f"unknown direction {d!r}; expected encrypt and/or decrypt")
    if any(s <= 0 or s > (1 << 30) for s in opts.sizes):
        raise BenchError("--sizes must be between 1 and 2^30 bytes")
    if any(k not in (128, 192, 256) for k in opts.key_bits):
        raise BenchError("--key-bits must be 128, 192 and/or 256")
    if not 0 < opts.seconds <= 60:
        raise BenchError("--time must be in (0, 60] seconds")
    if not 1 <= opts.rounds <= 100:
        raise BenchError("--rounds must be 1..100")
    if not 1.0 < opts.slow_factor <= 10.0:
        raise BenchError("--slow-factor must be in (1, 10]")
    if not 0 <= opts.retakes <= 100:
        raise BenchError("--retakes must be 0..100")
    return opts


PROBE_SECONDS = 0.004  # one reading of a quiet-state probe (best of 5 batches of ~0.8 ms)


class QuietState:
    """The quiet-state check over named probes (each returns ns; a reading
    <= 0 means the probe is not available): per probe the quickest reading
    of the run is its quiet reference, and a round is judged slow when any
    probe read before or after it above `factor` times its reference.  The
    bench uses two: the integer chain (the core's state) and the memory
    probe (a state in which only code that loads and stores slows down)."""

    def __init__(self, probes: dict[str, Callable[[], float]], factor: float) -> None:
        self.probes = probes
        self.factor = factor
        self.samples: dict[str, list[float]] = {n: [] for n in probes}
        self.rounds_dropped = 0
        self.points_retaken = 0
        self.points_dropped = 0
        for _ in range(5):  # a reference before the first point
            self.read()

    def read(self) -> tuple[float, ...]:
        out = []
        for name, probe in self.probes.items():
            v = probe()
            if v > 0:
                self.samples[name].append(v)
            out.append(v)
        return tuple(out)

    def quiet_ns(self, name: str) -> float | None:
        return min(self.samples[name]) if self.samples[name] else None

    def is_quiet(self, before: tuple[float, ...], after: tuple[float, ...]) -> bool:
        for name, b, a in zip(self.probes, before, after, strict=True):
            ref = self.quiet_ns(name)
            if ref is None or b <= 0 or a <= 0:
                continue  # no such probe on this host: nothing to judge by
            if max(b, a) > self.factor * ref:
                return False
        return True

    def meta(self) -> dict[str, Any]:
        m: dict[str, Any] = {}
        for name, got in self.samples.items():
            m[f"{name}_quiet_ns"] = min(got) if got else None
            m[f"{name}_median_ns"] = statistics.median(got) if got else None
            m[f"{name}_samples"] = len(got)
        m.update(
            slow_factor=self.factor,
            rounds_dropped=self.rounds_dropped,
            points_retaken=self.points_retaken,
            points_dropped=self.points_dropped,
        )
        return m


def quiet_probes(lib: Any) -> dict[str, Callable[[], float]]:
    """The bench's two quiet-state probes (see QuietState)."""
    return {
        "chain": lambda: float(lib.vc_bench_chain_ns(PROBE_SECONDS)),
        "memory": lambda: float(lib.vc_bench_mem_ns(PROBE_SECONDS)),
    }


def _load_bench(opts: Options) -> tuple[Any, Any, Any, Any]:
    """The binding, its id helpers and the benchmark extension (ffi, lib);
    a clear BenchError when one is missing or a --paths name is unknown."""
    try:
        import vaescrypt
        from vaescrypt._names import dir_id, mode_id, path_id
    except ImportError as e:
        raise BenchError(f"cannot import the vaescrypt binding: {e}") from None
    try:
        # The C loops live in their own extension (native/bench/), which only
        # this module loads: the production vaescrypt._native has none of them.
        from vaescrypt._bench import ffi, lib
    except ImportError as e:
        raise BenchError(
            f"cannot import the benchmark extension vaescrypt._bench "
            f"(build it with `python3 setup.py build_ext --inplace`): {e}"
        ) from None
    if opts.paths:
        for p in opts.paths:
            if p not in vaescrypt.PATHS:
                raise BenchError(
                    f"unknown path {p!r}; expected some of {', '.join(vaescrypt.PATHS)}"
                )
    return vaescrypt, (dir_id, mode_id, path_id), ffi, lib


def measure(opts: Options) -> tuple[list[Row], dict[str, Any]]:
    vaescrypt, (dir_id, mode_id, path_id), ffi, lib = _load_bench(opts)
    cpu = pin_to_one_cpu()
    ver = lib.vc_bench_openssl_version()
    meta: dict[str, Any] = {
        "openssl": ffi.string(ver).decode() if ver != ffi.NULL else None,
        "cryptography": _cryptography_version(),
        "cpu": sorted(vaescrypt.cpu_features()),
        "pinned_cpu": cpu,
        "host": platform.node(),
        "machine": bench_goals.this_machine().as_json(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seconds_per_point": opts.seconds,
        "rounds": opts.rounds,
    }
    per_round = opts.seconds / opts.rounds
    # The py and crypto columns time `lambda: <call>` in a loop: what an empty
    # lambda costs in that loop is in both columns, not in the call (best of
    # rounds before and after the points: a noisy host makes it wander).
    loop = PyTimer(lambda: None, per_round / 6) if opts.python else None
    if loop is not None:
        for _ in range(opts.rounds):
            loop.round()
    # lane-rounds/s per width: measured here and again in every round of
    # every point; the roof uses the best of the whole run.
    samples: dict[int, list[float]] = {}
    _measure_issue(lib, samples, opts.seconds / len(ISSUE_WIDTHS))
    clmul: dict[int, list[float]] = {}
    mix: dict[int, list[float]] = {}
    _measure_ports(lib, clmul, mix, opts.seconds / len(ISSUE_WIDTHS))
    quiet = QuietState(quiet_probes(lib), opts.slow_factor)
    rows: list[Row] = []
    for bits in opts.key_bits:
        key = KEY[: bits // 8]
        for mode in opts.modes:
            for direction in opts.directions:
                paths = [
                    p
                    for p in vaescrypt.available(mode, direction)
                    if not opts.paths or p in opts.paths
                ]
                chosen = vaescrypt.selected(mode, direction)
                m, d = mode_id(mode), dir_id(direction)
                for size in opts.sizes:
                    rows += _measure_point(
                        opts,
                        lib,
                        mode,
                        direction,
                        m,
                        d,
                        paths,
                        chosen,
                        path_id,
                        bits,
                        key,
                        size,
                        per_round,
                        samples,
                        quiet,
                    )
                    if mode == "gcm":
                        _measure_ports(lib, clmul, mix, per_round / 4)
        meta.setdefault("keysetup", {})[bits] = _keysetup(opts, lib, key, bits, per_round)
    if loop is not None:
        for _ in range(opts.rounds):
            loop.round()
        meta["py_loop_ns"] = loop.best * 1e9
    apply_roofs(rows, {w: max(v) for w, v in samples.items()})
    shares = apply_port_roofs(
        rows,
        {w: max(v) for w, v in samples.items()},
        {w: max(v) for w, v in clmul.items()},
        {w: max(v) for w, v in mix.items()},
    )
    meta.update(_rate_meta(samples, clmul, mix, shares))
    meta["quiet_state"] = quiet.meta()
    return rows, meta


def _rate_meta(
    samples: dict[int, list[float]],
    clmul: dict[int, list[float]],
    mix: dict[int, list[float]],
    shares: dict[int, float],
) -> dict[str, Any]:
    """The run's measured issue rates and port shares, for --json."""
    meta: dict[str, Any] = {}
    meta["clmul_issue_lane_mults_per_s"] = {str(w): max(v) for w, v in clmul.items()}
    meta["mix_passes_per_s"] = {str(w): max(v) for w, v in mix.items()}
    meta["port_share"] = {str(w): v for w, v in shares.items()}
    meta["aes_issue_lane_rounds_per_s"] = {
        str(w): max(samples[w]) if w in samples else None for w in ISSUE_WIDTHS
    }
    meta["aes_issue_median"] = {
        str(w): statistics.median(samples[w]) if w in samples else None for w in ISSUE_WIDTHS
    }
    meta["aes_issue_samples"] = max((len(v) for v in samples.values()), default=0)
    return meta


def _measure_issue(lib: Any, samples: dict[int, list[float]], seconds: float) -> None:
    """Measure each width's AES issue rate once into `samples` (widths the
    CPU lacks stay absent).  The roof takes the largest sample of the run:
    a busy neighbour or a lower clock only ever makes the loop read low."""
    for w in ISSUE_WIDTHS:
        v = _c_value(lib.vc_bench_aes_issue(w, seconds))
        if v is not None:
            samples.setdefault(w, []).append(v)


def _measure_ports(
    lib: Any, clmul: dict[int, list[float]], mix: dict[int, list[float]], seconds: float
) -> None:
    """One sample of each width's multiply issue rate and mix pass rate."""
    for w in ISSUE_WIDTHS:
        v = _c_value(lib.vc_bench_clmul_issue(w, seconds))
        if v is not None:
            clmul.setdefault(w, []).append(v)
        if w in REDUCE_BLOCKS:
            v = _c_value(lib.vc_bench_mix_passes(w, seconds))
            if v is not None:
                mix.setdefault(w, []).append(v)


@dataclass
class _PointRounds:
    """What a point's rounds measured: every figure, and the quiet rounds'."""

    kept: int = 0
    taken: int = 0
    evp_all: list[float] = field(default_factory=list)
    evp_kept: list[float] = field(default_factory=list)
    ctr_all: list[float] = field(default_factory=list)
    ctr_kept: list[float] = field(default_factory=list)
    c_all: dict[str, list[float]] = field(default_factory=dict)
    c_kept: dict[str, list[float]] = field(default_factory=dict)

    def pick(self, every: list[float], quiet: list[float]) -> list[float]:
        """The quiet rounds' figures, or every round's if none was quiet."""
        return quiet if self.kept else every


def _take_rounds(
    opts: Options,
    lib: Any,
    mode: str,
    m: int,
    d: int,
    paths: list[str],
    path_id: Callable[[str], int],
    bits: int,
    size: int,
    per_round: float,
    samples: dict[int, list[float]],
    quiet: QuietState,
    py: dict[str, PyTimer],
    crypto: PyTimer | None,
) -> _PointRounds:
    """The point's rounds: EVP, the CTR loop, the AES issue rate and every
    path in turn, the integer chain read before and after; a slow round is
    re-taken (up to opts.retakes more).  Returns kept and taken counts and
    every / kept figures of EVP, CTR and each path."""
    r = _PointRounds(c_all={p: [] for p in paths}, c_kept={p: [] for p in paths})
    while r.kept < opts.rounds and r.taken < opts.rounds + opts.retakes:
        r.taken += 1
        before = quiet.read()
        e = _c_value(lib.vc_bench_openssl(m, d, bits, size, per_round))
        t = _c_value(lib.vc_bench_ctr_loop(bits, size, per_round)) if mode == "gcm" else None
        _measure_issue(lib, samples, per_round / 4)
        cs: dict[str, float | None] = {}
        for p in paths:
            cs[p] = _c_value(lib.vc_bench_lib(m, d, path_id(p), bits, size, per_round))
            if p in py:
                py[p].round()
        if crypto is not None:
            crypto.round()
        ok = quiet.is_quiet(before, quiet.read())
        r.kept += ok
        for v, every, good in (
            (e, r.evp_all, r.evp_kept),
            (t, r.ctr_all, r.ctr_kept),
            *((cs[p], r.c_all[p], r.c_kept[p]) for p in paths),
        ):
            if v is not None:
                every.append(v)
                if ok:
                    good.append(v)
    return r


def _measure_point(
    opts: Options,
    lib: Any,
    mode: str,
    direction: str,
    m: int,
    d: int,
    paths: list[str],
    chosen: str,
    path_id: Callable[[str], int],
    bits: int,
    key: bytes,
    size: int,
    per_round: float,
    samples: dict[int, list[float]],
    quiet: QuietState,
) -> list[Row]:
    """One (mode, direction, size): every competitor, interleaved round by
    round (the AES issue rate too, into `samples`); roofs come later.  The
    integer chain is timed around each round: a round in the slow state is
    dropped and re-taken (up to opts.retakes more); if no round was quiet,
    the point keeps every round's figures and is marked not quiet."""
    evp: float | None = None
    ctr: float | None = None
    c: dict[str, float | None] = dict.fromkeys(paths)
    py: dict[str, PyTimer] = {}
    crypto: PyTimer | None = None
    if opts.python:
        crypto_fn = _cryptography_op(mode, direction, key, size)
        crypto = PyTimer(crypto_fn, per_round / 6) if crypto_fn else None
        py = {
            p: PyTimer(_vaescrypt_op(mode, direction, p, key, size), per_round / 6) for p in paths
        }
    r = _take_rounds(
        opts, lib, mode, m, d, paths, path_id, bits, size, per_round, samples, quiet, py, crypto
    )
    quiet.rounds_dropped += r.taken - r.kept
    quiet.points_retaken += r.taken > r.kept
    quiet.points_dropped += r.kept == 0
    evp = _best(r.pick(r.evp_all, r.evp_kept))
    ctr = _best(r.pick(r.ctr_all, r.ctr_kept))
    for p in paths:
        c[p] = _best(r.pick(r.c_all[p], r.c_kept[p]))
    return [
        Row(
            mode,
            direction,
            p,
            bits,
            size,
            p == chosen,
            c[p],
            evp,
            py[p].mbps(size) if p in py else None,
            crypto.mbps(size) if crypto is not None else None,
            ctr_mbps=ctr,
            quiet=r.kept > 0,
            rounds_kept=r.kept,
            rounds_taken=r.taken,
            c_samples=r.pick(r.c_all[p], r.c_kept[p]),
            evp_samples=r.pick(r.evp_all, r.evp_kept),
        )
        for p in paths
    ]


def _best(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _cryptography_version() -> str | None:
    try:
        import cryptography
    except ImportError:
        return None
    return str(cryptography.__version__)


def _keysetup(
    opts: Options, lib: Any, key: bytes, bits: int, per_round: float
) -> dict[str, float | None]:
    """Nanoseconds per key set-up: C loop (new + free), and the Python objects."""
    import vaescrypt
    from vaescrypt._names import impl_id, mode_id

    auto = impl_id("auto")
    out: dict[str, float | None] = {
        "c_gcm_key_new_ns": _c_value(
            lib.vc_bench_keysetup(mode_id("gcm"), auto, bits, opts.seconds)
        ),
        "c_cfb_key_new_ns": _c_value(
            lib.vc_bench_keysetup(mode_id("cfb128"), auto, bits, opts.seconds)
        ),
        "py_vaescrypt_AESGCM_ns": None,
        "py_cryptography_AESGCM_ns": None,
    }
    if not opts.python:
        return out
    ours = PyTimer(lambda: vaescrypt.AESGCM(key), per_round / 6)
    theirs: PyTimer | None = None
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        theirs = PyTimer(lambda: AESGCM(key), per_round / 6)
    except ImportError:
        pass
    for _ in range(opts.rounds):
        ours.round()
        if theirs is not None:
            theirs.round()
    out["py_vaescrypt_AESGCM_ns"] = ours.best * 1e9
    out["py_cryptography_AESGCM_ns"] = theirs.best * 1e9 if theirs is not None else None
    return out


# ----------------------------------------------------------------- targets --


def check_targets(rows: Sequence[Row]) -> list[str]:
    """The issue's targets (AES-256, the selected path, from Python, ratio to
    `cryptography`): one line each, MET or MISSED with the worst point."""
    sel = [r for r in rows if r.selected and r.key_bits == 256 and r.py_vs_crypto is not None]
    # (text, mode, direction, sizes the goal covers, ratio needed)
    goals: list[tuple[str, str, str, Callable[[int], bool], float]] = []
    for dname in ("encrypt", "decrypt"):
        goals.append(
            (
                f"GCM {dname}: beats cryptography at every size >= 64",
                "gcm",
                dname,
                lambda n: n >= 64,
                1.0,
            )
        )
        goals.append(
            (
                f"GCM {dname}: >= 1.7x cryptography at 16 KiB",
                "gcm",
                dname,
                lambda n: n == 16384,
                1.7,
            )
        )
    goals.append(
        (
            "CFB128 decrypt: >= 1.1x cryptography (every size)",
            "cfb128",
            "decrypt",
            lambda n: True,
            1.1,
        )
    )
    goals.append(
        (
            "CFB128 encrypt: >= 1.0x cryptography (every size)",
            "cfb128",
            "encrypt",
            lambda n: True,
            1.0,
        )
    )
    lines = []
    for text, mode, direction, covers, need in goals:
        pts = [r for r in sel if r.mode == mode and r.direction == direction and covers(r.size)]
        if not pts:
            lines.append(f"  n/a     {text} (not measured)")
            continue
        worst = min(pts, key=lambda r: r.py_vs_crypto or 0.0)
        ratio = worst.py_vs_crypto or 0.0
        verdict = "MET   " if ratio >= need else "MISSED"
        lines.append(f"  {verdict}  {text}: worst {ratio:.2f}x at {worst.size} B")
    return lines


def _fmt(v: float | None, ratio: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x" if ratio else f"{v:.0f}"


TABLE_HEAD = (
    "mode",
    "dir",
    "path",
    "bits",
    "size",
    "C MB/s",
    "EVP MB/s",
    "C/EVP",
    "quiet",
    "py MB/s",
    "crypto MB/s",
    "py/crypto",
    "port MB/s",
    "C/port",
    "roof MB/s",
    "C/roof",
    "CTR MB/s",
    "C/CTR",
)


def _table_cells(r: Row, over: bool) -> tuple[str, ...]:
    """One row of the table, in TABLE_HEAD's order."""
    return (
        r.mode,
        r.direction[:3],
        r.path + ("*" if r.selected else ""),
        str(r.key_bits),
        str(r.size),
        _fmt(r.c_mbps),
        _fmt(r.evp_mbps),
        _fmt(r.c_vs_evp, True),
        _quiet_cell(r),
        _fmt(r.py_mbps),
        _fmt(r.crypto_mbps),
        _fmt(r.py_vs_crypto, True),
        _fmt(r.port_roof_mbps),
        _fmt(r.c_vs_port, True),
        _fmt(r.roof_mbps),
        _fmt(r.c_vs_roof, True) + ("!" if over else ""),
        _fmt(r.ctr_mbps),
        _fmt(r.c_vs_ctr, True),
    )


def _table_footer(rows: Sequence[Row], meta: dict[str, Any]) -> list[str]:
    """Roof violations and key set-up times, under the table."""
    lines: list[str] = []
    violations = roof_violations(rows)
    if violations:
        lines += [
            "",
            (
                f"!!! {len(violations)} measurement(s) above their roof: the roof "
                "is too low (a bug in the bench), not a path faster than the hardware:"
            ),
            *(f"!!! {v}" for v in violations),
        ]
    for bits, ks in sorted(meta.get("keysetup", {}).items()):
        lines.append("")
        lines.append(f"Key set-up, AES-{bits} (ns per key):")
        lines.append(
            f"  C loop  vc_gcm_key_new+free {_fmt(ks['c_gcm_key_new_ns'])}   "
            f"vc_cfb_key_new+free {_fmt(ks['c_cfb_key_new_ns'])}"
        )
        lines.append(
            f"  Python  vaescrypt.AESGCM(key) {_fmt(ks['py_vaescrypt_AESGCM_ns'])}   "
            f"cryptography AESGCM(key) {_fmt(ks['py_cryptography_AESGCM_ns'])}"
        )
    return lines


def render_table(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    head = TABLE_HEAD
    over = {id(r) for r in rows if r.c_mbps and r.roof_mbps and r.c_mbps > r.roof_mbps}
    body = [_table_cells(r, id(r) in over) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = [
        (
            f"OpenSSL (EVP, C loop): {meta['openssl'] or 'unavailable'}; "
            f"cryptography {meta.get('cryptography') or 'unavailable'}; "
            f"pinned to CPU {meta.get('pinned_cpu')}; {meta.get('rounds')} interleaved rounds, "
            f"{meta.get('seconds_per_point')} s per point; * = dispatcher's path"
        )
    ]
    for line in (head, *body):
        lines.append(
            "  ".join(
                c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))
            )
        )
    lines += ["", *roof_legend(meta), *port_legend(meta), *quiet_legend(meta)]
    if meta.get("py_loop_ns"):
        lines.append(
            f"py, crypto = from Python, a lambda called in a loop: {meta['py_loop_ns']:.0f} ns "
            "per call of both is the loop's own (an empty lambda)."
        )
    lines += _table_footer(rows, meta)
    targets = check_targets(rows)
    if targets:
        lines += [
            "",
            "Targets (AES-256, dispatcher's path, from Python vs cryptography):",
            *targets,
        ]
    goals = goals_verdict(rows, meta)
    if goals is not None:
        lines += ["", *bench_goals.render(goals)]
    return "\n".join(lines)


def goals_verdict(rows: Sequence[Row], meta: dict[str, Any]) -> bench_goals.Verdict | None:
    """This run against issue 23's C/EVP goals (see vaescrypt.bench_goals),
    None when the run measured none of their cells."""
    v = bench_goals.judge(
        [[r.as_json() for r in rows]], [bench_goals.Machine.from_json(meta.get("machine"))]
    )
    return v if v.matched else None


def _quiet_cell(r: Row) -> str:
    """kept/taken rounds, "~" when none was quiet ("-" when not checked)."""
    if not r.rounds_taken:
        return "-"
    return f"{r.rounds_kept}/{r.rounds_taken}" + ("" if r.quiet else "~")


def quiet_legend(meta: dict[str, Any]) -> list[str]:
    """The quiet-state check's summary: references, drops, re-takes."""
    q = meta.get("quiet_state")
    if not q:
        return []

    def ref(name: str, unit: str) -> str:
        best, med = q.get(f"{name}_quiet_ns"), q.get(f"{name}_median_ns")
        if not best or not med:
            return f"{name}: not measured"
        return f"{name} {best:.1f} ns {unit} (median {med:.1f}, {q[f'{name}_samples']} probes)"

    return [
        "quiet = rounds kept/taken: two probes timed around each round, the integer chain",
        "  (64 dependent multiplies) and the memory probe (a 512 B load-XOR-store pass); a",
        f"  round is dropped (and re-taken) when either read above {q['slow_factor']:.2f} x its quickest:",
        f"  {ref('chain', 'per chain')}; {ref('memory', 'per pass')}.",
        (
            f"  {q['rounds_dropped']} round(s) dropped, {q['points_retaken']} point(s) re-taken, "
            f"{q['points_dropped']} point(s) dropped (no quiet round; figures kept, marked ~)."
        ),
    ]


def port_legend(meta: dict[str, Any]) -> list[str]:
    """The port-aware bound's measured inputs."""
    names = {"256": "ymm", "512": "zmm"}
    shares = meta.get("port_share") or {}
    if not shares:
        return []
    aes = meta.get("aes_issue_lane_rounds_per_s") or {}
    clm = meta.get("clmul_issue_lane_mults_per_s") or {}
    parts = [
        f"{names.get(w, w)}: AES {aes[w] / 1e9:.2f}, multiply {clm[w] / 1e9:.2f} "
        f"(10^9 lane-ops/s), share {v:.2f}"
        for w, v in sorted(shares.items())
        if aes.get(w) and clm.get(w)
    ]
    return [
        "port = port-aware bound (GCM, wide paths): AES rounds + carry-less multiplies +",
        "  reductions per 16 B at each one's measured rate, time max(A, M) + share x min(A, M);",
        "  share from a 27 VAESENC + 6 VPCLMULQDQ loop (0 separate ports, 1 one port).",
        "  " + "; ".join(parts) + ".",
    ]


def roof_legend(meta: dict[str, Any]) -> list[str]:
    """What the roof and CTR columns are, with the measured issue rates."""
    names = {"128": "xmm", "256": "ymm", "512": "zmm"}
    rates = meta.get("aes_issue_lane_rounds_per_s") or {}
    medians = meta.get("aes_issue_median") or {}
    measured = ", ".join(
        f"{names.get(w, w)} {v / 1e9:.2f}"
        + (f" (median {medians[w] / 1e9:.2f})" if medians.get(w) else "")
        for w, v in rates.items()
        if v
    )
    n = meta.get("aes_issue_samples")
    return [
        "roof = upper bound from the AES issue rate: blocks x Nr round instructions at the",
        "  best lane-rounds/s the path's widths reached (GCM blocks = ceil(size/16) + 1 for",
        "  E(J0); round-0 XOR not counted).  10^9 lane-rounds/s, best"
        + (f" of {n} samples" if n else "")
        + ": "
        + (measured or "none (no AES unit the bench can drive)")
        + ".",
        "CTR = a bare zmm VAES CTR loop (no GHASH): a measured reference, NOT a bound.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("vaescrypt.bench", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    opts = parse_args(argv)
    rows, meta = measure(opts)
    violations = roof_violations(rows)
    if opts.as_json:
        goals = goals_verdict(rows, meta)
        print(
            json.dumps(
                {
                    **meta,
                    "results": [r.as_json() for r in rows],
                    "targets": check_targets(rows),
                    "goals": goals.as_json() if goals else None,
                    "roof_violations": violations,
                },
                indent=2,
            )
        )
    else:
        print(render_table(rows, meta))
    for v in violations:  # loud on the terminal even when stdout goes to a file
        print(f"vaescrypt.bench: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
