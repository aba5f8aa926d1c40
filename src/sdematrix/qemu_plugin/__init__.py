"""The QEMU TCG plugin that counts the probe's marked region: building it, and
reading what it writes.

The C source (``sdematrix_mix.c`` + its own API header) ships with the package;
:func:`build_plugin` compiles it once per source version into the user's cache
directory (``$XDG_CACHE_HOME/sdematrix`` or ``~/.cache/sdematrix``).  The file
formats are described at the top of ``sdematrix_mix.c``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MixFileError
from ..evidence.symbols import Mapping

__all__ = [
    "LastInsn",
    "LastRecord",
    "PluginBuildError",
    "PluginOutput",
    "build_plugin",
    "build_tcg_probe",
    "cache_dir",
    "parse_last_file",
    "parse_plugin_output",
    "plugin_source_dir",
]

SOURCES = ("sdematrix_mix.c", "qemu_plugin_api.h")
CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden")
MIX_MAGIC = "sdematrix-qemu-mix 1"
LAST_MAGIC = b"SDMLAST1"
LAST_HEADER = struct.Struct("<8sQQQ32x")
LAST_SLOT = struct.Struct("<QBBB5x16s32s")
LAST_SLOTS = 256


class PluginBuildError(Exception):
    """The plugin could not be compiled (str() is one line)."""


def plugin_source_dir() -> Path:
    return Path(__file__).resolve().parent


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sdematrix"


def _source_digest(src: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (src / name).read_bytes())
    h.update(" ".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def _compile(what: str, target: Path, variants: list[list[str]], cc: str | None) -> Path:
    """`target`, compiled on first use: each argument list of `variants` is
    tried in turn (the compiler and ``-o`` are added) and the first that
    builds is kept.  Each build writes a temporary name and renames, so
    concurrent builders never see a half-written file."""
    if target.is_file():
        return target
    compiler = cc or os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise PluginBuildError(f"no C compiler ({compiler!r} not found) to build {what}")
    out_dir = target.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=out_dir)
        os.close(fd)
    except OSError as e:
        raise PluginBuildError(f"cannot write the plugin cache {out_dir}: {e}") from e
    err = ""
    for args in variants:
        try:
            proc = subprocess.run(
                [compiler, *args, "-o", tmp],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            err = f"cannot run {compiler}: {e}"
            continue
        if proc.returncode == 0:
            os.replace(tmp, target)
            return target
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip())
        err = f"building {what} failed: {first[:300]}"
    Path(tmp).unlink(missing_ok=True)
    raise PluginBuildError(err)


def build_plugin(cache: Path | None = None, cc: str | None = None) -> Path:
    """The plugin .so for the current sources, compiled on first use.

    The output name carries a digest of the sources and flags, so an edited
    plugin is rebuilt."""
    src = plugin_source_dir()
    missing = [n for n in SOURCES if not (src / n).is_file()]
    if missing:
        raise PluginBuildError(f"plugin sources missing from {src}: {', '.join(missing)}")
    target = (cache or cache_dir()) / f"qemu-mix-plugin-{_source_digest(src)}.so"
    argv = ["-shared", "-fPIC", *CFLAGS, f"-I{src}", str(src / "sdematrix_mix.c"), "-lpthread"]
    return _compile("the QEMU plugin", target, [argv], cc)


TCG_PROBE_SOURCE = "tcg_probe.c"
TCG_PROBE_CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")


def build_tcg_probe(cache: Path | None = None, cc: str | None = None) -> Path:
    """The TCG capability probe (``tcg_probe.c``), compiled on first use into
    the cache like the plugin; static when the toolchain can link it so (the
    guest then needs no loader), else dynamic."""
    src = plugin_source_dir() / TCG_PROBE_SOURCE
    if not src.is_file():
        raise PluginBuildError(f"TCG probe source missing: {src}")
    digest = hashlib.sha256(src.read_bytes() + " ".join(TCG_PROBE_CFLAGS).encode()).hexdigest()
    target = (cache or cache_dir()) / f"qemu-tcg-probe-{digest[:16]}"
    argv = [*TCG_PROBE_CFLAGS, str(src)]
    return _compile("the TCG probe", target, [[*argv, "-static"], argv], cc)


# ----------------------------------------------------------------- output --


@dataclass
class PluginOutput:
    """One process's counts (the ``prefix.<pid>`` file)."""

    pid: int
    start_code: int = 0
    end_code: int = 0
    entry: int = 0
    starts: int = 0
    stops: int = 0
    # (address, instruction bytes) -> executions inside marked regions
    counts: dict[tuple[int, bytes], int] = field(default_factory=dict)
    symbols: dict[int, str] = field(default_factory=dict)  # QEMU's symbol per address
    maps: list[Mapping] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_plugin_output(path: Path) -> PluginOutput:
    """Read a ``prefix.<pid>`` file; MixFileError when it is corrupt or cut short."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise MixFileError(f"cannot read QEMU plugin output {path}: {e.strerror}") from e
    if not lines or lines[0] != MIX_MAGIC:
        raise MixFileError(f"{path.name}: not a QEMU plugin mix file")
    if lines[-1] != "end":
        raise MixFileError(f"{path.name}: truncated (no 'end' line)")
    out = PluginOutput(pid=0)
    for n, line in enumerate(lines[1:-1], start=2):
        parts = line.split()
        try:
            tag = parts[0]
            if tag == "i":
                addr, code, count = int(parts[1], 16), bytes.fromhex(parts[2]), int(parts[3])
                key = (addr, code)
                out.counts[key] = out.counts.get(key, 0) + count
                if len(parts) > 4 and parts[4] != "-":
                    out.symbols[addr] = parts[4]
            elif tag == "map":
                lo, hi, off = int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)
                path_s = line.split(None, 5)[5]
                out.maps.append(Mapping(lo, hi, parts[3], off, path_s))
            elif tag == "pid":
                out.pid = int(parts[1])
            elif tag == "code":
                out.start_code, out.end_code, out.entry = (int(p, 16) for p in parts[1:4])
            elif tag == "regions":
                out.starts, out.stops = int(parts[1]), int(parts[2])
            elif tag == "warning":
                out.warnings.append(" ".join(parts[1:]))
            else:
                raise ValueError(f"unknown record {tag!r}")
        except (IndexError, ValueError) as e:
            raise MixFileError(f"{path.name}:{n}: bad line ({e})") from e
    return out


@dataclass(frozen=True)
class LastInsn:
    vcpu: int
    address: int
    code: bytes
    symbol: str | None


@dataclass(frozen=True)
class LastRecord:
    """The ``prefix.<pid>.last`` file: where each vCPU was last."""

    start_code: int
    end_code: int
    entry: int
    insns: tuple[LastInsn, ...]


def parse_last_file(path: Path) -> LastRecord:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise MixFileError(f"cannot read {path}: {e.strerror}") from e
    need = LAST_HEADER.size + LAST_SLOTS * LAST_SLOT.size
    if len(data) < need:
        raise MixFileError(f"{path.name}: {len(data)} bytes, expected {need}")
    magic, start, end, entry = LAST_HEADER.unpack_from(data, 0)
    if magic != LAST_MAGIC:
        raise MixFileError(f"{path.name}: bad magic {magic!r}")
    insns = []
    for v in range(LAST_SLOTS):
        addr, n, valid, symlen, code, sym = LAST_SLOT.unpack_from(
            data, LAST_HEADER.size + v * LAST_SLOT.size
        )
        if valid and 0 < n <= 15:
            name = sym[: min(symlen, 32)].decode("ascii", errors="replace") or None
            insns.append(LastInsn(v, addr, code[:n], name))
    return LastRecord(start, end, entry, tuple(insns))
