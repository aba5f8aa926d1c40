"""Instruction starts of an ELF image, for the tracer's whole-process mode.

The tracer plants a first-visit int3 on every instruction start of an image
(``vc-tracer --whole``, tracer/whole.c).  An int3 on a byte that is *not* an
instruction start would change the program, so the starts are found
conservatively:

* ranges: every function of the image as the unwinder knows it (the FDEs
  listed in ``.eh_frame_hdr``: compilers and OpenSSL's perlasm emit one per
  function) plus every sized function symbol (``.symtab`` / ``.dynsym``);
  bytes in no range -- data tables placed between functions, padding, code
  without unwind data -- get no int3;
* inside a range, a linear sweep with iced-x86 from the range's start; the
  sweep stops at an undecodable byte;
* two ranges whose sweeps disagree (an instruction start inside another
  range's instruction) lose both conflicting starts.

The result, little-endian uint32 file offsets sorted, is cached on disk per
file (path, size, mtime): the tracer reads the file named in its profile's
``bounds`` record.
"""

from __future__ import annotations

import array
import hashlib
import os
import struct
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

import iced_x86 as iced
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .symbols import func_symbols

__all__ = ["Bounds", "bounds_file", "fde_ranges", "instruction_starts"]

BOUNDS_VERSION = 2
_SHF_EXECINSTR = 0x4
_DW_EH_PE_omit = 0xFF


@dataclass(frozen=True)
class Bounds:
    """Where an image's instruction starts are stored, and how many."""

    path: str  # the image (real path)
    file: Path  # uint32 LE file offsets, sorted
    count: int


def _fde_ranges(elf: ELFFile) -> list[tuple[int, int]]:
    """(start, end) vaddrs of the FDEs listed in .eh_frame_hdr's search table
    (GCC / binutils encodings: pcrel|sdata4 pointers, datarel|sdata4 table);
    an FDE whose own pc_begin does not match its table entry is left out."""
    hdr = elf.get_section_by_name(".eh_frame_hdr")
    eh = elf.get_section_by_name(".eh_frame")
    if hdr is None or eh is None:
        return []
    h = hdr.data()
    if len(h) < 12 or h[0] != 1 or h[1] != 0x1B or h[2] != 0x03 or h[3] != 0x3B:
        return []
    hdr_va = int(hdr["sh_addr"])
    (count,) = struct.unpack_from("<I", h, 8)
    e = eh.data()
    eh_va = int(eh["sh_addr"])
    out: list[tuple[int, int]] = []
    for k in range(count):
        off = 12 + 8 * k
        if off + 8 > len(h):
            break
        loc_rel, fde_rel = struct.unpack_from("<ii", h, off)
        start, fde_va = hdr_va + loc_rel, hdr_va + fde_rel
        fo = fde_va - eh_va
        if fo < 0 or fo + 16 > len(e):
            continue
        length, _cie = struct.unpack_from("<II", e, fo)
        if length == 0xFFFFFFFF or length < 12:
            continue
        pc_rel, pc_range = struct.unpack_from("<iI", e, fo + 8)
        if fde_va + 8 + pc_rel != start or pc_range == 0:
            continue
        # A signal-frame FDE (CIE augmentation "S": glibc's __restore_rt)
        # starts one byte before its code, so that unwinders, which look up
        # return address - 1, find it: that byte is the previous
        # instruction's last one, and a sweep from it would put int3s inside
        # `mov rax, 15` (a SIGILL at every signal return).
        end = start + pc_range
        cie_fo = fo + 4 - _cie
        if 0 <= cie_fo and cie_fo + 9 < len(e):
            aug_end = e.find(b"\0", cie_fo + 9)
            if aug_end > 0 and b"S" in e[cie_fo + 9 : aug_end]:
                start += 1
        if start < end:
            out.append((start, end))
    return out


@lru_cache(maxsize=256)
def _fde_ranges_cached(path: str, size: int, mtime_ns: int) -> tuple[tuple[int, int], ...]:
    del size, mtime_ns  # cache key only
    try:
        with open(path, "rb") as fh:
            return tuple(sorted(set(_fde_ranges(ELFFile(fh)))))
    except (OSError, ELFError, ValueError, struct.error):
        return ()


def fde_ranges(path: str) -> tuple[tuple[int, int], ...]:
    """Sorted (start, end) vaddrs of the functions `path`'s unwind table
    (.eh_frame_hdr) lists; () when it has none or is not ELF."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return _fde_ranges_cached(path, st.st_size, st.st_mtime_ns)


def _symbol_ranges(fh: BinaryIO, elf: ELFFile) -> list[tuple[int, int]]:
    return [(lo, lo + size) for lo, size, _name in func_symbols(fh, elf) if size]


def instruction_starts(path: str) -> list[int]:
    """Sorted file offsets of the instruction starts of `path` (see module doc)."""
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        secs = []
        for sec in elf.iter_sections():
            if sec["sh_type"] == "SHT_PROGBITS" and sec["sh_flags"] & _SHF_EXECINSTR:
                secs.append((int(sec["sh_addr"]), int(sec["sh_offset"]), sec.data()))
        ranges = sorted(set(_fde_ranges(elf) + _symbol_ranges(fh, elf)))
    lengths: dict[int, int] = {}  # file offset -> instruction length
    ins = iced.Instruction()
    for va, fo, data in secs:
        end_va = va + len(data)
        decoder = iced.Decoder(64, data, ip=va)
        for lo, hi in ranges:
            if lo < va or lo >= end_va:
                continue
            hi = min(hi, end_va)
            pos = lo - va
            decoder.position = pos
            decoder.ip = lo
            while pos < hi - va:
                decoder.decode_out(ins)
                if ins.code == iced.Code.INVALID or ins.len == 0:
                    break
                lengths.setdefault(fo + pos, ins.len)
                pos += ins.len
    starts = sorted(lengths)
    bad: set[int] = set()
    prev, prev_end = -1, -1
    for s in starts:
        if s < prev_end:  # inside the previous instruction: the sweeps disagree
            bad.update((s, prev))
        if s + lengths[s] > prev_end:
            prev, prev_end = s, s + lengths[s]
    return [s for s in starts if s not in bad]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sdematrix" / "bounds"


def bounds_file(path: str) -> Bounds:
    """The cached starts file of `path`, computed when missing or stale."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = f"{BOUNDS_VERSION}:{real}:{st.st_size}:{st.st_mtime_ns}"
    name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".u32"
    for base in (_cache_dir(), Path(tempfile.gettempdir()) / f"sdematrix-bounds-{os.getuid()}"):
        f = base / name
        if f.exists():
            return Bounds(real, f, f.stat().st_size // 4)
    try:
        starts = instruction_starts(real)
    except (ELFError, ValueError, struct.error):
        starts = []
    arr = array.array("I", starts)
    if sys.byteorder != "little":
        arr.byteswap()
    for base in (_cache_dir(), Path(tempfile.gettempdir()) / f"sdematrix-bounds-{os.getuid()}"):
        try:
            base.mkdir(parents=True, exist_ok=True)
            f = base / name
            tmp = f.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(arr.tobytes())
            tmp.replace(f)
            return Bounds(real, f, len(starts))
        except OSError:
            continue
    raise OSError(f"cannot write the instruction-starts cache for {real}")
