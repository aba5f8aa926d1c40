"""Map run-time addresses to (image, function) from a /proc/PID/maps snapshot and
the images' ELF symbol tables (pyelftools).

Used by the ptrace and QEMU backends to attribute executed instructions.  Each
ELF file is read once per process (cached on path, size and mtime).

The ptrace tracer hands over a union of the maps it read during the run
(tracer.c: merge_maps), not one snapshot: an image unloaded with dlclose
keeps its lines, and the image loaded after it at the same address (ld.so
reuses the gap) has lines over the same range.  An address there has two
candidate mappings: the file that holds the instruction's recorded bytes at
that offset names it, else the later line (code that no file holds: JIT
code written where a dlclose'd library was, whose line the tracer itself may
have made non-executable).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

__all__ = [
    "ElfImage",
    "Location",
    "Mapping",
    "Symbolizer",
    "func_symbols",
    "load_image",
    "parse_maps",
]


@dataclass(frozen=True)
class Mapping:
    lo: int
    hi: int
    perms: str
    offset: int
    path: str  # file path, "[vdso]", "[heap]", or "" for anonymous


@dataclass(frozen=True)
class Location:
    image: str  # path of the mapped file, or "[vdso]"/"?" ...
    function: str  # symbol name, or "image+0xOFF" when no symbol covers it
    lo: int | None = None  # run-time range of the function, when known
    hi: int | None = None
    # [lo, hi) meets a range that more than one mapping of the union covers:
    # the Location holds for its own address only, not for its whole range
    shared: bool = False


def parse_maps(text: str) -> list[Mapping]:
    """Parse /proc/PID/maps lines (malformed lines are skipped), sorted by
    start address (lines with the same start keep their order)."""
    return sorted(_maps_in_order(text), key=lambda m: m.lo)


def _maps_in_order(text: str) -> list[Mapping]:
    out: list[Mapping] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        try:
            lo_s, hi_s = parts[0].split("-", 1)
            lo, hi, off = int(lo_s, 16), int(hi_s, 16), int(parts[2], 16)
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) > 5 else ""
        out.append(Mapping(lo, hi, parts[1], off, path))
    return out


def _file_holds(path: str, offset: int, code: bytes) -> bool:
    """True when the file `path` holds `code` at `offset`."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(len(code)) == code
    except OSError:
        return False


@dataclass
class ElfImage:
    """What we need of one ELF file: its load segments and function symbols."""

    path: str
    segments: list[tuple[int, int, int]]  # (file offset, file size, vaddr) of PT_LOADs
    sym_addrs: list[int]  # sorted start vaddrs
    syms: list[tuple[int, int, str]]  # (vaddr, size, name), same order

    def vaddr_of_offset(self, off: int) -> int | None:
        for fo, fsz, va in self.segments:
            if fo <= off < fo + max(fsz, 1):
                return va + (off - fo)
        return None

    def offset_of_vaddr(self, vaddr: int) -> int | None:
        for fo, fsz, va in self.segments:
            if va <= vaddr < va + fsz:
                return fo + (vaddr - va)
        return None

    def function_at(self, vaddr: int) -> tuple[str, int, int] | None:
        """(name, start, end) of the function symbol covering `vaddr`; a symbol
        without a size covers up to the next symbol."""
        i = bisect.bisect_right(self.sym_addrs, vaddr) - 1
        while i >= 0:
            start, size, name = self.syms[i]
            if size and start <= vaddr < start + size:
                return name, start, start + size
            if not size:
                end = self.sym_addrs[i + 1] if i + 1 < len(self.syms) else start + 1
                if start <= vaddr < end:
                    return name, start, end
            # A sized symbol that ends before vaddr: maybe an enclosing alias
            # at the same start exists just before it; otherwise give up.
            if i > 0 and self.syms[i - 1][0] == start:
                i -= 1
                continue
            return None
        return None


_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size
# STT_FUNC only: pyelftools names type 10 STT_LOOS, so the elftools path never
# matched "STT_GNU_IFUNC" either (an ifunc symbol names its resolver anyway)
_FUNC_TYPES = (2,)
_SYMTAB_TYPES = ("SHT_SYMTAB", "SHT_DYNSYM")


def _better(old: tuple[int, str] | None, size: int, name: str) -> bool:
    """Prefer a sized symbol, then the shorter (less mangled) name."""
    return (
        old is None
        or (bool(size) and not old[0])
        or (bool(size) == bool(old[0]) and len(name) < len(old[1]))
    )


def _func_symbols_fast(fh: BinaryIO, elf: ELFFile) -> Iterator[tuple[int, int, str]]:
    """:func:`func_symbols` of a little-endian ELF64 file, read with struct
    (pyelftools builds an object per symbol: ~10x slower on libpython's
    tables); same selection and order as :func:`_func_symbols_elftools`."""
    for sec in elf.iter_sections():
        if sec["sh_type"] not in _SYMTAB_TYPES or sec["sh_entsize"] != _SYM.size:
            continue
        strsec = elf.get_section(sec["sh_link"])
        fh.seek(sec["sh_offset"])
        table = fh.read(sec["sh_size"])
        fh.seek(strsec["sh_offset"])
        strtab = fh.read(strsec["sh_size"])
        for st_name, info, _other, shndx, value, size in _SYM.iter_unpack(
            table[: len(table) - len(table) % _SYM.size]
        ):
            if (info & 0xF) not in _FUNC_TYPES or shndx == 0:
                continue
            end = strtab.find(b"\0", st_name)
            raw = strtab[st_name : end if end >= 0 else len(strtab)] if st_name else b""
            yield value, size, raw.decode("utf-8", errors="replace")


def _func_symbols_elftools(elf: ELFFile) -> Iterator[tuple[int, int, str]]:
    for sec in elf.iter_sections():
        if not isinstance(sec, SymbolTableSection):
            continue
        for sym in sec.iter_symbols():
            if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                continue
            if sym["st_shndx"] == "SHN_UNDEF":
                continue
            yield int(sym["st_value"]), int(sym["st_size"]), sym.name


def func_symbols(fh: BinaryIO, elf: ELFFile) -> Iterator[tuple[int, int, str]]:
    """(value, size, name) of every defined function symbol of `elf` (read
    from `fh`), .symtab and .dynsym, in table order; name may be ""."""
    if elf.elfclass == 64 and elf.little_endian:
        return _func_symbols_fast(fh, elf)
    return _func_symbols_elftools(elf)


def _read_image(path: str) -> ElfImage:
    segments: list[tuple[int, int, int]] = []
    found: dict[int, tuple[int, str]] = {}
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                segments.append((seg["p_offset"], seg["p_filesz"], seg["p_vaddr"]))
        for addr, size, name in func_symbols(fh, elf):
            if name and _better(found.get(addr), size, name):
                found[addr] = (size, name)
    syms = sorted((a, s, n) for a, (s, n) in found.items())
    return ElfImage(path=path, segments=segments, sym_addrs=[s[0] for s in syms], syms=syms)


@lru_cache(maxsize=64)
def _load_cached(path: str, size: int, mtime_ns: int) -> ElfImage | None:
    del size, mtime_ns  # cache key only
    try:
        return _read_image(path)
    except (OSError, ELFError, ValueError):
        return None


def load_image(path: str) -> ElfImage | None:
    """The ElfImage of `path`, or None when it is not a readable ELF file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _load_cached(path, st.st_size, st.st_mtime_ns)


class Symbolizer:
    """Resolves addresses of one address space: one maps snapshot, or the
    tracer's union of several (see the module doc for overlapping lines)."""

    def __init__(self, maps: list[Mapping] | str) -> None:
        ordered = _maps_in_order(maps) if isinstance(maps, str) else list(maps)
        # (start, union order) sorted: the later of two lines is the newer
        by_lo = sorted(range(len(ordered)), key=lambda i: (ordered[i].lo, i))
        self.maps = [ordered[i] for i in by_lo]
        self._rank = by_lo
        self._los = [m.lo for m in self.maps]
        # _reach[i]: the highest end of maps[0..i], so a backward walk from
        # the last line starting at or below an address can stop early
        self._reach: list[int] = []
        # the ranges two or more lines cover, merged and sorted
        self._overlaps: list[tuple[int, int]] = []
        reach = 0
        for m in self.maps:
            if m.lo < reach:
                lo, hi = m.lo, min(m.hi, reach)
                if self._overlaps and lo <= self._overlaps[-1][1]:
                    prev = self._overlaps[-1]
                    self._overlaps[-1] = (prev[0], max(prev[1], hi))
                else:
                    self._overlaps.append((lo, hi))
            reach = max(reach, m.hi)
            self._reach.append(reach)
        self._cache: dict[int | tuple[int, bytes], Location] = {}
        self._images: dict[str, ElfImage | None] = {}  # path -> image, read once

    def _containing(self, addr: int) -> list[int]:
        i = bisect.bisect_right(self._los, addr) - 1
        out = []
        while i >= 0 and self._reach[i] > addr:
            if addr < self.maps[i].hi:
                out.append(i)
            i -= 1
        return out

    def overlapped(self, lo: int, hi: int) -> bool:
        """True when an address in [lo, hi) lies in more than one line."""
        i = bisect.bisect_right(self._overlaps, (hi,)) - 1
        return i >= 0 and self._overlaps[i][1] > lo

    def mapping_at(self, addr: int, code: bytes = b"") -> Mapping | None:
        """The mapping `addr` lies in; where lines of the union overlap, the
        one the instruction `code` (its bytes, when known) came from: see
        the module doc."""
        found = self._containing(addr)
        if len(found) <= 1:
            return self.maps[found[0]] if found else None

        def score(i: int) -> tuple[bool, int]:
            m = self.maps[i]
            holds = bool(code) and m.path.startswith("/")
            return holds and _file_holds(m.path, m.offset + (addr - m.lo), code), self._rank[i]

        return self.maps[max(found, key=score)]

    def locate(self, addr: int, code: bytes = b"") -> Location:
        """The image and function of the instruction at `addr` (`code`: its
        bytes, which decide between overlapping lines of a maps union)."""
        key: int | tuple[int, bytes] = (addr, code) if self.overlapped(addr, addr + 1) else addr
        loc = self._cache.get(key)
        if loc is None:
            loc = self._locate(addr, code)
            lo = addr if loc.lo is None else loc.lo
            if self.overlapped(lo, addr + 1 if loc.hi is None else loc.hi):
                loc = replace(loc, shared=True)
            self._cache[key] = loc
        return loc

    def _locate(self, addr: int, code: bytes) -> Location:
        m = self.mapping_at(addr, code)
        if m is None:
            return Location("?", f"?+{addr:#x}")
        if not m.path.startswith("/"):
            return Location(m.path or "[anon]", f"{m.path or '[anon]'}+{addr - m.lo:#x}")
        off = m.offset + (addr - m.lo)
        if m.path in self._images:
            img = self._images[m.path]
        else:
            img = self._images[m.path] = load_image(m.path)
        base = os.path.basename(m.path)
        if img is None:
            return Location(m.path, f"{base}+{off:#x}")
        vaddr = img.vaddr_of_offset(off)
        if vaddr is None:
            return Location(m.path, f"{base}+{off:#x}")
        fn = img.function_at(vaddr)
        if fn is None:
            return Location(m.path, f"{base}+{vaddr:#x}")
        name, start, end = fn
        bias = addr - vaddr
        return Location(m.path, name, start + bias, end + bias)
