"""Throughput of every usable code path, next to OpenSSL and `cryptography`.

    python -m vaescrypt.bench                      # table on the terminal
    python -m vaescrypt.bench --json               # machine-readable
    python -m vaescrypt.bench --modes gcm --paths avx512,aesni --sizes 1420,16384

Per (mode, direction, path, size) it reports MB/s (10^6 bytes/s) measured
  - in a C loop through the public API (vc_gcm_encrypt ...)        "C"
  - in a C loop through OpenSSL EVP (libcrypto.so.3 via dlopen)    "EVP"
  - from Python through vaescrypt (AESGCM / AESCFB)                 "py"
  - from Python through `cryptography` (AESGCM / Cipher+CFB)        "crypto"
and the ratios C/EVP and py/crypto; GCM rows also give C/roof, where the
roof is a bare 16-blocks-per-iteration zmm VAES CTR loop (no GHASH).
GCM uses a 12-byte nonce, 16 bytes of AAD and a 16-byte tag.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_SIZES: tuple[int, ...] = (16, 64, 256, 512, 1420, 4096, 16384, 65536)
ALL_MODES: tuple[str, ...] = ("gcm", "cfb128", "cfb8", "cfb1")
ALL_DIRS: tuple[str, ...] = ("encrypt", "decrypt")
KEY: bytes = bytes(range(32))
NONCE: bytes = bytes(range(0xA0, 0xAC))
IV: bytes = bytes(range(0xA0, 0xB0))
AAD: bytes = bytes(range(0x30, 0x40))


class BenchError(Exception):
    """A bad option or an environment problem: reported as one line."""


@dataclass
class Row:
    mode: str
    direction: str
    path: str
    key_bits: int
    size: int
    c_mbps: float | None
    evp_mbps: float | None
    py_mbps: float | None
    crypto_mbps: float | None
    roof_mbps: float | None

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

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(c_vs_evp=self.c_vs_evp, py_vs_crypto=self.py_vs_crypto, c_vs_roof=self.c_vs_roof)
        return d


# ------------------------------------------------------------------ timing --

def _py_rate(fn: Callable[[], object], size: int, seconds: float) -> float:
    """MB/s of fn() (best of 3 repeats, each ~seconds/3)."""
    timer = timeit.Timer(fn)
    number, took = timer.autorange()
    per = max(seconds / 3, 1e-3)
    number = max(1, int(number * per / max(took, 1e-9)))
    best = min(timer.repeat(repeat=3, number=number)) / number
    return size / best / 1e6


def _c_value(v: float) -> float | None:
    return v if v > 0 else None


def _vaescrypt_op(mode: str, direction: str, path: str, key: bytes,
                  size: int) -> Callable[[], object]:
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


def _cryptography_op(mode: str, direction: str, key: bytes,
                     size: int) -> Callable[[], object] | None:
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
    python: bool
    as_json: bool


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
    ap = argparse.ArgumentParser(prog="python -m vaescrypt.bench",
                                 description="vaescrypt throughput vs OpenSSL and cryptography")
    ap.add_argument("--modes", default=",".join(ALL_MODES), help="gcm,cfb128,cfb8,cfb1")
    ap.add_argument("--directions", default=",".join(ALL_DIRS), help="encrypt,decrypt")
    ap.add_argument("--paths", default="", help="restrict to these paths (default: all usable)")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes")
    ap.add_argument("--key-bits", default="256", help="128,192,256")
    ap.add_argument("--time", type=float, default=0.2, help="seconds per measurement")
    ap.add_argument("--no-python", action="store_true", help="skip the Python-level timings")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    opts = Options(
        modes=_csv(a.modes), directions=_csv(a.directions), paths=_csv(a.paths) or None,
        sizes=_ints(a.sizes, "sizes"), key_bits=_ints(a.key_bits, "key-bits"),
        seconds=a.time, python=not a.no_python, as_json=a.json,
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
    return opts


def measure(opts: Options) -> tuple[list[Row], dict[str, Any]]:
    try:
        import vaescrypt
        from vaescrypt._names import dir_id, mode_id, path_id
        from vaescrypt._native import ffi, lib
    except ImportError as e:
        raise BenchError(f"cannot import the vaescrypt binding: {e}") from None
    if opts.paths:
        for p in opts.paths:
            if p not in vaescrypt.PATHS:
                raise BenchError(f"unknown path {p!r}; expected some of {', '.join(vaescrypt.PATHS)}")
    ver = lib.vc_bench_openssl_version()
    meta: dict[str, Any] = {
        "openssl": ffi.string(ver).decode() if ver != ffi.NULL else None,
        "cpu": sorted(vaescrypt.cpu_features()),
        "seconds_per_point": opts.seconds,
    }
    rows: list[Row] = []
    roof: dict[tuple[int, int], float | None] = {}
    for bits in opts.key_bits:
        key = KEY[: bits // 8]
        for mode in opts.modes:
            for direction in opts.directions:
                paths = [p for p in vaescrypt.available(mode, direction)
                         if not opts.paths or p in opts.paths]
                m, d = mode_id(mode), dir_id(direction)
                for size in opts.sizes:
                    evp = _c_value(lib.vc_bench_openssl(m, d, bits, size, opts.seconds))
                    crypto_fn = _cryptography_op(mode, direction, key, size) if opts.python else None
                    crypto = _py_rate(crypto_fn, size, opts.seconds) if crypto_fn else None
                    r_mbps = None
                    if mode == "gcm":
                        if (bits, size) not in roof:
                            roof[(bits, size)] = _c_value(lib.vc_bench_roof(bits, size, opts.seconds))
                        r_mbps = roof[(bits, size)]
                    for path in paths:
                        c = _c_value(lib.vc_bench_lib(m, d, path_id(path), bits, size, opts.seconds))
                        py = (_py_rate(_vaescrypt_op(mode, direction, path, key, size), size,
                                       opts.seconds) if opts.python else None)
                        rows.append(Row(mode, direction, path, bits, size, c, evp, py, crypto, r_mbps))
    return rows, meta


def _fmt(v: float | None, ratio: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x" if ratio else f"{v:.0f}"


def render_table(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    head = ("mode", "dir", "path", "bits", "size", "C MB/s", "EVP MB/s", "C/EVP",
            "py MB/s", "crypto MB/s", "py/crypto", "C/roof")
    body = [(r.mode, r.direction[:3], r.path, str(r.key_bits), str(r.size), _fmt(r.c_mbps),
             _fmt(r.evp_mbps), _fmt(r.c_vs_evp, True), _fmt(r.py_mbps), _fmt(r.crypto_mbps),
             _fmt(r.py_vs_crypto, True), _fmt(r.c_vs_roof, True)) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = [f"OpenSSL (EVP, C loop): {meta['openssl'] or 'unavailable'}"]
    for line in (head, *body):
        lines.append("  ".join(c.rjust(w) if i >= 3 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths))))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
        rows, meta = measure(opts)
    except BenchError as e:
        print(f"vaescrypt.bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaescrypt.bench: interrupted", file=sys.stderr)
        return 130
    if opts.as_json:
        print(json.dumps({**meta, "results": [r.as_json() for r in rows]}, indent=2))
    else:
        print(render_table(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
