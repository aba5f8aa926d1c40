"""What the ptrace tracer is told before a run: the model's CPUID/XCR0 profile and
the breakpoint sites (CPUID, XGETBV, SSC marks) of the images the program maps.

Sites are exact instruction starts, not byte-pattern hits: each candidate byte
pattern (``0F A2``, ``0F 01 D0``, ``BB imm32 64 67 90``) is confirmed by
decoding the executable section linearly from the nearest preceding function
symbol (or the section start), so a pattern inside another instruction's
immediate or displacement never receives an int3.  Results are cached per file
(path, size, mtime) in memory and on disk.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import iced_x86 as iced
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..models import CpuModel

SITES_VERSION = 1
_PATTERNS = {
    "cpuid": (re.compile(rb"\x0f\xa2"), 0),
    "xgetbv": (re.compile(rb"\x0f\x01\xd0"), 0),
    # mov ebx, imm32 ; 64 67 90  -> the site is the `64` byte, the check the `BB`
    "mark": (re.compile(rb"\xbb(?=[\x00-\xff]{4}\x64\x67\x90)"), 5),
}
_LIB_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


@dataclass(frozen=True)
class Site:
    kind: str  # "cpuid" | "xgetbv" | "mark"
    offset: int  # file offset of the byte that gets the int3
    path: str  # real path of the image (as /proc/PID/maps shows it)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sdematrix" / "sites"


def _scan_file(path: str) -> list[Site]:
    """Decode-confirmed sites of one ELF file."""
    sites: list[Site] = []
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        starts: list[int] = []  # function start vaddrs: linear-sweep resync points
        for sec in elf.iter_sections():
            if isinstance(sec, SymbolTableSection):
                for sym in sec.iter_symbols():
                    if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"]:
                        starts.append(int(sym["st_value"]))
        starts.sort()
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_PROGBITS" or not (sec["sh_flags"] & 0x4):  # SHF_EXECINSTR
                continue
            data = sec.data()
            va0, fo0 = int(sec["sh_addr"]), int(sec["sh_offset"])
            cands: list[tuple[int, str, int]] = []  # (insn start rel, kind, site rel)
            for kind, (rx, delta) in _PATTERNS.items():
                for m in rx.finditer(data):
                    cands.append((m.start(), kind, m.start() + delta))
            if not cands:
                continue
            cands.sort()
            decoder = iced.Decoder(64, data, ip=va0)
            ins = iced.Instruction()
            pos = 0  # next instruction start (relative) of the running sweep
            for start, kind, site in cands:
                if start < pos:
                    # Maybe the sweep already passed it: it is confirmed only if
                    # it was an instruction start, which we no longer know; redo
                    # from the resync point before it.
                    pos = 0
                i = bisect.bisect_right(starts, va0 + start) - 1
                resync = starts[i] - va0 if i >= 0 and starts[i] >= va0 else 0
                pos = max(pos, resync)
                decoder.position = pos
                decoder.ip = va0 + pos
                while pos < start:
                    decoder.decode_out(ins)
                    pos += max(ins.len, 1)
                if pos == start:
                    sites.append(Site(kind, fo0 + site, path))
    return sites


def image_sites(path: str) -> list[Site]:
    """Sites of one image, from the memory or disk cache when the file is unchanged."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = f"{SITES_VERSION}:{real}:{st.st_size}:{st.st_mtime_ns}"
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    cache_file = _cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    try:
        rows = json.loads(cache_file.read_text())
        sites = [Site(k, int(o), real) for k, o in rows]
    except (OSError, ValueError, TypeError):
        try:
            sites = _scan_file(real)
        except (ELFError, ValueError):
            sites = []
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps([[s.kind, s.offset] for s in sites]))
            tmp.replace(cache_file)
        except OSError:
            pass
    _MEMO[key] = sites
    return sites


_MEMO: dict[str, list[Site]] = {}


def _needed_and_interp(path: str) -> tuple[list[str], str | None, list[str]]:
    needed: list[str] = []
    rpaths: list[str] = []
    interp: str | None = None
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                interp = seg.get_interp_name()
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                for tag in sec.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                        origin = os.path.dirname(os.path.realpath(path))
                        text = tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath
                        rpaths += [p.replace("$ORIGIN", origin) for p in text.split(":") if p]
    return needed, interp, rpaths


def program_images(exe: str, env: dict[str, str] | None = None) -> list[str]:
    """The executable, its interpreter and its DT_NEEDED closure (real paths)."""
    env = dict(os.environ if env is None else env)
    ld_path = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    out: list[str] = []
    todo = [os.path.realpath(exe)]
    while todo:
        path = todo.pop(0)
        if path in out:
            continue
        out.append(path)
        try:
            needed, interp, rpaths = _needed_and_interp(path)
        except (OSError, ELFError, ValueError):
            continue
        if interp and os.path.exists(interp):
            todo.append(os.path.realpath(interp))
        for name in needed:
            for d in (*rpaths, *ld_path, *_LIB_DIRS):
                cand = os.path.join(d, name)
                if os.path.exists(cand):
                    todo.append(os.path.realpath(cand))
                    break
    return out


def write_profile(
    path: Path, model: CpuModel, sites: Iterable[Site], images: Iterable[str] = ()
) -> None:
    """The tracer's profile file (format documented in tracer.c).  `images`
    are the images whose sites were searched: an executable mapping of any
    other file is reported by the tracer as unscanned."""
    lines = [f"# vc-tracer profile for model {model.name} ({model.title})"]
    for c in model.cpuid:
        lines.append(
            f"cpuid {c.leaf:x} {c.subleaf:x} {c.eax & 0xFFFFFFFF:x} {c.ebx & 0xFFFFFFFF:x} "
            f"{c.ecx & 0xFFFFFFFF:x} {c.edx & 0xFFFFFFFF:x}"
        )
    lines.append(f"xcr0 {model.xcr0:x}")
    for img in images:
        if "\n" not in img:
            lines.append(f"image {os.path.realpath(img)}")
    for s in sites:
        if "\n" in s.path:
            continue
        lines.append(f"site {s.kind} {s.offset:x} {s.path}")
    path.write_text("\n".join(lines) + "\n")
