"""In-process A/B of two builds of the library (``python -m vaescrypt.bench_ab``).

    python -m vaescrypt.bench_ab BEFORE AFTER [--mode gcm] [--paths P,..] [--sizes N,..]
        [--dirs encrypt,decrypt] [--pairs 11] [--seconds 0.004] [--key-bits 256] [--json]

BEFORE and AFTER are two builds of the benchmark extension, vaescrypt._bench
(the file ``_bench.abi3.so``, or a directory holding it): copy the built one
aside, change the C, rebuild, and compare the copy with the new build.  Both
are loaded into this one process, pinned to one CPU.  Per (path, direction,
size) point -- the --mode's C loop as ``vaescrypt.bench`` times it (GCM:
one-shot through the C API, 12-byte IV, 16-byte AAD) -- each build runs a C
loop of --seconds, alternately
A then B and B then A, --pairs times; the point's result is the median of the
per-pair ratios after/before, printed as a change in per cent.

Why one process and pairs: on a shared VM the core's speed drifts by several
per cent over seconds, and two separate runs of the bench disagree by more
than most single changes gain.  Two measurements a few milliseconds apart see
the same state; their ratio cancels the drift, and the median drops the pairs
a context switch disturbed.  What it does not cancel is code placement: the
two builds' functions sit at different addresses, which alone moved single
points by 1-2 % (see docs/BENCHMARKS.md).  Run it three times (three
processes) and read a change as real when all three agree; a build against a
copy of itself (a null A/B) shows this host's floor.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vaescrypt._cli import BenchError, run_cli
from vaescrypt.bench import ALL_DIRS, ALL_MODES, _csv, _ints, pin_to_one_cpu

EXT_NAME = "vaescrypt._bench"
EXT_FILE = "_bench.abi3.so"
DEFAULT_SIZES: tuple[int, ...] = (16, 64, 256, 512, 1420, 4096)


@dataclass(frozen=True)
class AbOptions:
    before: str
    after: str
    mode: str
    paths: list[str]
    dirs: list[str]
    sizes: list[int]
    pairs: int
    seconds: float
    key_bits: int
    as_json: bool


def _extension_file(arg: str, which: str) -> str:
    path = os.path.join(arg, EXT_FILE) if os.path.isdir(arg) else arg
    if not os.path.isfile(path):
        raise BenchError(f"{which}: no {EXT_FILE} at {path!r}")
    return os.path.abspath(path)


def parse_args(argv: Sequence[str] | None) -> AbOptions:
    ap = argparse.ArgumentParser(
        prog="python -m vaescrypt.bench_ab",
        description="In-process A/B of two builds of vaescrypt._bench.",
    )
    ap.add_argument("before", help=f"the baseline build: {EXT_FILE} or a directory holding it")
    ap.add_argument("after", help="the changed build, likewise")
    ap.add_argument("--mode", default="gcm", help=", ".join(ALL_MODES))
    ap.add_argument("--paths", default="", help="code paths (default: every wide path here)")
    ap.add_argument("--dirs", default="encrypt,decrypt")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--pairs", type=int, default=11, help="alternated pairs per point")
    ap.add_argument("--seconds", type=float, default=0.004, help="per C loop")
    ap.add_argument("--key-bits", type=int, default=256)
    ap.add_argument("--json", dest="as_json", action="store_true")
    a = ap.parse_args(argv)
    before = _extension_file(a.before, "BEFORE")
    after = _extension_file(a.after, "AFTER")
    if os.path.samefile(before, after):
        # The dynamic loader would hand back the one copy it already has.
        raise BenchError("BEFORE and AFTER are the same file; for a null A/B compare a copy")
    if a.mode not in ALL_MODES:
        raise BenchError(f"unknown mode {a.mode!r}; expected one of {', '.join(ALL_MODES)}")
    dirs = _csv(a.dirs)
    for d in dirs:
        if d not in ALL_DIRS:
            raise BenchError(f"unknown direction {d!r}; expected encrypt and/or decrypt")
    sizes = _ints(a.sizes, "sizes")
    if not dirs:
        raise BenchError("--dirs is empty")
    if any(not 1 <= s <= 1 << 30 for s in sizes):
        raise BenchError("--sizes must be between 1 and 2^30 bytes")
    if not 1 <= a.pairs <= 1000:
        raise BenchError("--pairs must be 1..1000")
    if not 0 < a.seconds <= 10:
        raise BenchError("--seconds must be in (0, 10]")
    if a.key_bits not in (128, 192, 256):
        raise BenchError("--key-bits must be 128, 192 or 256")
    return AbOptions(
        before, after, a.mode, _csv(a.paths), dirs, sizes, a.pairs, a.seconds, a.key_bits,
        a.as_json,
    )  # fmt: skip


def load_build(path: str) -> Any:
    """The cffi ``lib`` of the extension at path, loaded under its own name
    but from this file: two different files are two copies in the process."""
    loader = importlib.machinery.ExtensionFileLoader(EXT_NAME, path)
    spec = importlib.util.spec_from_file_location(EXT_NAME, path, loader=loader)
    if spec is None:
        raise BenchError(f"cannot load {path!r} as {EXT_NAME}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:
        raise BenchError(f"cannot load {path!r} as {EXT_NAME}: {e}") from None
    lib = getattr(module, "lib", None)
    if lib is None or not hasattr(lib, "vc_bench_lib"):
        raise BenchError(f"{path!r} is not a vaescrypt._bench build (no vc_bench_lib)")
    return lib


def median_change(before: list[float], after: list[float]) -> float:
    """Median of the per-pair ratios after/before, as a change (0.01 = +1 %)."""
    return statistics.median(b / a for a, b in zip(before, after, strict=True)) - 1.0


def _timed(lib: Any, ids: tuple[int, int, int], opts: AbOptions, size: int) -> float:
    mode, direction, path = ids
    v = float(lib.vc_bench_lib(mode, direction, path, opts.key_bits, size, opts.seconds))
    if v <= 0:
        raise BenchError(f"the C loop failed at {size} B (status {v:g})")
    return v


def run(opts: AbOptions) -> list[dict[str, Any]]:
    try:
        from vaescrypt import available
        from vaescrypt._names import dir_id, mode_id, path_id
    except ImportError as e:
        raise BenchError(f"cannot import the vaescrypt binding: {e}") from None

    def here(p: str) -> bool:  # p runs opts.mode in every direction asked for
        return all(p in available(opts.mode, d) for d in opts.dirs)

    paths = opts.paths or [p for p in ("avx512", "avx10_256", "vaes_avx2") if here(p)]
    if not paths:
        raise BenchError(f"no wide {opts.mode} path on this CPU; name one with --paths")
    for p in paths:
        if not here(p):
            raise BenchError(
                f"path {p!r} does not run {opts.mode} {'/'.join(opts.dirs)} on this CPU"
            )
    libs = (load_build(opts.before), load_build(opts.after))
    pin_to_one_cpu()
    out: list[dict[str, Any]] = []
    for p in paths:
        for d in opts.dirs:
            ids = (mode_id(opts.mode), dir_id(d), path_id(p))
            for size in opts.sizes:
                for lib in libs:  # warm both: caches, branch predictors, frequency
                    _timed(lib, ids, opts, size)
                a: list[float] = []
                b: list[float] = []
                for i in range(opts.pairs):  # A B, then B A: neither always goes first
                    if i % 2 == 0:
                        a.append(_timed(libs[0], ids, opts, size))
                        b.append(_timed(libs[1], ids, opts, size))
                    else:
                        b.append(_timed(libs[1], ids, opts, size))
                        a.append(_timed(libs[0], ids, opts, size))
                out.append(
                    {
                        "path": p,
                        "direction": d,
                        "size": size,
                        "change": median_change(a, b),
                        "before_mbps": a,
                        "after_mbps": b,
                    }
                )
    return out


def render(results: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for key in dict.fromkeys((r["path"], r["direction"]) for r in results):
        cells = [
            f"{r['size']}:{r['change'] * 100:+.1f}%"
            for r in results
            if (r["path"], r["direction"]) == key
        ]
        lines.append(f"{key[0]:10s} {key[1][:3]}  " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("vaescrypt.bench_ab", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    opts = parse_args(argv)
    results = run(opts)
    if opts.as_json:
        print(
            json.dumps(
                {"before": opts.before, "after": opts.after, "mode": opts.mode, "results": results},
                indent=2,
            )
        )
    else:
        what = "GCM one-shot, 16-byte AAD" if opts.mode == "gcm" else opts.mode.upper()
        print(
            f"after / before, median of {opts.pairs} alternated pairs "
            f"(AES-{opts.key_bits}, {what}):"
        )
        print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
