"""The host side of the probe contract (docs/PROBE.md).

* where the ``vc-probe`` executable is (:func:`probe_path`) and how one cell is
  invoked (:func:`probe_command`);
* the probe's inputs regenerated from the seed (:func:`derive_inputs`, the same
  splitmix64 byte stream as native/probe/probe_main.c);
* the reference answer computed independently with ``cryptography``
  (:func:`expected_output`, :func:`expected_digest`);
* the probe's one JSON line parsed and checked (:func:`parse_probe_output`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import SdeMatrixError
from ..inputs import JsonProblem, decode_json
from ..spec.models import DIRECTIONS, MODES, PATHS, Cell
from .base import ProbeCommand

try:  # cryptography >= 43 keeps CFB/CFB8 here; the old location warns.
    from cryptography.hazmat.decrepit.ciphers.modes import CFB, CFB8
except ImportError:  # pragma: no cover - older cryptography
    from cryptography.hazmat.primitives.ciphers.modes import CFB, CFB8  # type: ignore[assignment]

PROBE_ENV = "SDEMATRIX_PROBE"
PROBE_VERSION = 1
KEY_BITS = (128, 192, 256)
STATUSES = ("ok", "unsupported", "auth_failed", "error")
GCM_IV_BYTES = 12
GCM_AAD_BYTES = 16
GCM_TAG_BYTES = 16
CFB_IV_BYTES = 16
MAX_LENGTH = 1 << 30

_MASK64 = (1 << 64) - 1


class ProbeError(SdeMatrixError):
    """The probe cannot be found, invoked as asked, or its output is not a report."""


# --------------------------------------------------------------- location --


def _not_runnable(path: Path) -> str | None:
    """Why `path` cannot be exec'd as the probe (None: it can)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "dangling symbolic link" if path.is_symlink() else "no such file"
    except OSError as e:
        return (e.strerror or str(e)).lower()
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not an executable file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not os.access(path, os.X_OK):
        return f"not executable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def probe_path() -> Path:
    """The vc-probe executable, as an absolute path (backends run it from other
    working directories): $SDEMATRIX_PROBE, else the package's _bin/vc-probe.

    Raises :class:`ProbeError` (one line naming the variable, the path and
    what is wrong with it) when the probe cannot be run; the CLI calls this
    before a run, so a bad value is refused up front (exit 2)."""
    env = os.environ.get(PROBE_ENV)
    if env:
        p = Path(os.path.abspath(env))
        why = _not_runnable(p)
        if why is not None:
            raise ProbeError(f"{PROBE_ENV}={env}: {why}")
        return p
    p = Path(__file__).resolve().parent.parent / "_bin" / "vc-probe"
    why = _not_runnable(p)
    if why is None:
        return p
    raise ProbeError(
        f"vc-probe not built: {p}: {why} (build the package, e.g. `pip install -e .`, "
        f"or set {PROBE_ENV})"
    )


def _check_cell(cell: Cell) -> None:
    if cell.mode not in MODES:
        raise ProbeError(f"unknown mode {cell.mode!r} (expected one of {', '.join(MODES)})")
    if cell.direction not in DIRECTIONS:
        raise ProbeError(f"unknown direction {cell.direction!r} (expected encrypt or decrypt)")
    if cell.key_bits not in KEY_BITS:
        raise ProbeError(f"key_bits must be 128, 192 or 256, not {cell.key_bits!r}")
    if not isinstance(cell.length, int) or not 0 <= cell.length <= MAX_LENGTH:
        raise ProbeError(f"length must be an integer 0..2^30, not {cell.length!r}")


def probe_command(
    cell: Cell,
    seed: int,
    impl: str | None = None,
    force_tier: str | None = None,
    *,
    repeat: int = 1,
) -> ProbeCommand:
    """argv for running `cell` (argv[0] is the probe executable)."""
    _check_cell(cell)
    if not 0 <= seed <= _MASK64:
        raise ProbeError(f"seed must be an unsigned 64-bit integer, not {seed!r}")
    if impl is not None and force_tier is not None:
        raise ProbeError("impl and force_tier are exclusive")
    if impl is not None and impl != "auto" and impl not in PATHS:
        raise ProbeError(f"unknown impl {impl!r} (expected auto or one of {', '.join(PATHS)})")
    if force_tier is not None and force_tier not in PATHS:
        raise ProbeError(f"unknown tier {force_tier!r} (expected one of {', '.join(PATHS)})")
    if not 1 <= repeat <= 1_000_000:
        raise ProbeError(f"repeat must be 1..1000000, not {repeat!r}")
    argv = [
        str(probe_path()),
        "--mode",
        cell.mode,
        "--dir",
        cell.direction,
        "--key-bits",
        str(cell.key_bits),
        "--length",
        str(cell.length),
        "--seed",
        str(seed),
    ]
    if impl is not None:
        argv += ["--impl", impl]
    if force_tier is not None:
        argv += ["--force-tier", force_tier]
    if repeat != 1:
        argv += ["--repeat", str(repeat)]
    return ProbeCommand(argv=tuple(argv))


# ----------------------------------------------------------------- inputs --


@dataclass(frozen=True)
class ProbeInputs:
    key: bytes
    iv: bytes
    aad: bytes
    data: bytes


def splitmix64_bytes(seed: int, n: int) -> bytes:
    """The first `n` bytes of the splitmix64 stream: little-endian bytes of
    successive outputs (see docs/PROBE.md)."""
    state = seed & _MASK64
    out = bytearray()
    while len(out) < n:
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        out += z.to_bytes(8, "little")
    return bytes(out[:n])


def derive_inputs(cell: Cell, seed: int) -> ProbeInputs:
    """key, iv, aad, data in the order the probe takes them from one stream."""
    _check_cell(cell)
    gcm = cell.mode == "gcm"
    nkey = cell.key_bits // 8
    niv = GCM_IV_BYTES if gcm else CFB_IV_BYTES
    naad = GCM_AAD_BYTES if gcm else 0
    s = splitmix64_bytes(seed, nkey + niv + naad + cell.length)
    return ProbeInputs(
        key=s[:nkey],
        iv=s[nkey : nkey + niv],
        aad=s[nkey + niv : nkey + niv + naad],
        data=s[nkey + niv + naad :],
    )


# -------------------------------------------------------------- reference --


def cfb1(key: bytes, iv: bytes, data: bytes, *, encrypt: bool) -> bytes:
    """CFB with 1-bit segments (SP 800-38A 6.3), bits most significant first.

    Each bit: keystream bit = MSB of E_K(register); the register then shifts
    left by one and takes in the *ciphertext* bit (the output when
    encrypting, the input when decrypting)."""
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    reg = int.from_bytes(iv, "big")
    mask128 = (1 << 128) - 1
    out = bytearray(len(data))
    for i, byte in enumerate(data):
        o = 0
        for b in range(7, -1, -1):
            ks = ecb.update(reg.to_bytes(16, "big"))[0] >> 7
            bit_in = (byte >> b) & 1
            bit_out = bit_in ^ ks
            c = bit_out if encrypt else bit_in
            reg = ((reg << 1) | c) & mask128
            o |= bit_out << b
        out[i] = o
    return bytes(out)


def expected_output(cell: Cell, seed: int) -> bytes:
    """What the probe must output for `cell`, computed with `cryptography`."""
    x = derive_inputs(cell, seed)
    enc = cell.direction == "encrypt"
    if cell.mode == "gcm":
        g = AESGCM(x.key)
        # Encrypt: ciphertext || tag.  Decrypt: the probe decrypts the
        # encryption of `data`, so the plaintext is `data` itself; still go
        # through decrypt so the tag path of the reference is exercised.
        sealed = g.encrypt(x.iv, x.data, x.aad)
        return sealed if enc else g.decrypt(x.iv, sealed, x.aad)
    if cell.mode == "cfb1":
        return cfb1(x.key, x.iv, x.data, encrypt=enc)
    mode = CFB(x.iv) if cell.mode == "cfb128" else CFB8(x.iv)
    c = Cipher(algorithms.AES(x.key), mode)
    ctx = c.encryptor() if enc else c.decryptor()
    return ctx.update(x.data) + ctx.finalize()


def expected_digest(cell: Cell, seed: int) -> str:
    return hashlib.sha256(expected_output(cell, seed)).hexdigest()


# ----------------------------------------------------------------- output --

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "probe": int,
    "status": str,
    "mode": str,
    "dir": str,
    "key_bits": int,
    "length": int,
    "seed": int,
    "forced": bool,
    "selected": dict,
    "features": list,
    "vendor": str,
    "family": int,
    "model": int,
    "xcr0": str,
}


def _short(value: object) -> str:
    """repr of a report value, cut to 60 characters (the error stays one short line)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The probe's JSON report from its stdout.

    The report is the last line that is a JSON object (an emulator may print
    before it); anything else raises :class:`ProbeError` with one line."""
    report: dict[str, Any] | None = None
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = decode_json(line)  # bounded numbers and depth
        except JsonProblem:
            continue
        if isinstance(obj, dict) and "probe" in obj:
            report = obj
            break
    if report is None:
        first = next((ln.strip() for ln in stdout.splitlines() if ln.strip()), "")
        shown = (first[:80] + "...") if len(first) > 80 else first
        raise ProbeError(f"probe printed no JSON report (first line: {shown!r})")
    if report.get("probe") != PROBE_VERSION:
        raise ProbeError(
            f"probe report version {_short(report.get('probe'))}, expected {PROBE_VERSION}"
        )
    for key, typ in _REQUIRED.items():
        if not isinstance(report.get(key), typ):
            raise ProbeError(f"probe report field {key!r} missing or of the wrong type")
    if report["status"] not in STATUSES:
        raise ProbeError(f"probe report has unknown status {_short(report['status'])}")
    if report["status"] == "ok":
        digest = report.get("digest")
        if not (isinstance(digest, str) and len(digest) == 64):
            raise ProbeError("probe report has status ok but no sha256 digest")
        if report.get("path") not in PATHS:
            raise ProbeError(f"probe report names unknown path {_short(report.get('path'))}")
    return report
