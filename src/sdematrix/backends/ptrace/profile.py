"""What the ptrace tracer is told before a run: the model's CPUID/XCR0 profile,
the breakpoint sites (CPUID, XGETBV, SSC marks) of the images the program maps,
and the straight-line blocks of the probe's own code (block stepping).

Sites are exact instruction starts, not byte-pattern hits: each candidate byte
pattern (``0F A2``, ``0F 01 D0``, ``BB imm32 64 67 90``) is confirmed by
decoding the executable section linearly from the nearest preceding function
symbol (or the section start), so a pattern inside another instruction's
immediate or displacement never receives an int3.  Results are cached per file
(path, size, mtime) in memory and on disk.

Blocks (:func:`image_blocks`) let the tracer run a marked region's
straight-line code at native speed instead of single-stepping each
instruction: a block is a run of instructions inside one function symbol's
extent (decoded linearly from the symbol, so only code the compiler laid out
as a function) in which only the last instruction E can transfer control, trap
or need the tracer (branch/call/ret/syscall/int/ud2/iret/popf/xbegin, CPUID,
XGETBV, an SSC mark, a rep-prefixed or string instruction, TZCNT, or the
function's last instruction).  Execution entering a block at any of its instructions
therefore runs straight to E; the tracer puts a temporary int3 on E, counts
the instructions before it, and single-steps E itself.  Direct branch targets
need not split blocks: the tracer enters a block at any instruction start.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import iced_x86 as iced
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ...spec.models import CpuModel
from ..host_isa import host_cpuid, host_xcr0
from .xsave_room import xsave_safe_cpuid

T = TypeVar("T")

SITES_VERSION = 1
BLOCKS_VERSION = 2
# a block shorter than this is not worth a breakpoint (the tracer needs at
# least two instructions before E to gain on single-stepping)
MIN_BLOCK_INSNS = 3
# mnemonics that end a block although iced calls their flow "next": the
# tracer must see them one at a time (emulated, TF-changing, or rep-counted)
# (TZCNT: the tracer reads its source before it runs, to catch a zero source
# on a model that executes it as BSF, see tracer/tracer.c tzcnt_note)
_BLOCK_ENDER_NAMES = ("CPUID", "XGETBV", "POPF", "POPFQ", "POPFD", "HLT", "TZCNT")
_BLOCK_ENDER_NAMES += ("XEND", "XABORT", "XBEGIN", "WRFSBASE", "WRGSBASE")
_BLOCK_ENDERS = frozenset(
    getattr(iced.Mnemonic, name) for name in _BLOCK_ENDER_NAMES if hasattr(iced.Mnemonic, name)
)
_MARK_NOP = b"\x64\x67\x90"
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


def _function_symbols(elf: ELFFile) -> Iterator[tuple[int, int]]:
    """(vaddr, size) of every function symbol with an address."""
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            for sym in sec.iter_symbols():
                if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"]:
                    yield int(sym["st_value"]), int(sym["st_size"])


def _scan_file(path: str) -> list[Site]:
    """Decode-confirmed sites of one ELF file."""
    sites: list[Site] = []
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        # function start vaddrs: linear-sweep resync points
        starts = sorted(lo for lo, _size in _function_symbols(elf))
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


@dataclass(frozen=True)
class Block:
    """A straight-line block of an image: the file offset of its first
    instruction and the length of each of its instructions (the last one, E,
    included)."""

    offset: int
    lengths: tuple[int, ...]


def _function_extents(elf: ELFFile) -> list[tuple[int, int]]:
    """(start vaddr, end vaddr) of every sized function symbol, sorted, overlaps
    (aliases) merged into the first."""
    spans = {(lo, lo + size) for lo, size in _function_symbols(elf) if size}
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo < out[-1][1]:
            continue  # an alias or a nested symbol: the first extent decides
        out.append((lo, hi))
    return out


def _ends_block(ins: iced.Instruction, raw: bytes) -> bool:
    return (
        ins.flow_control != iced.FlowControl.NEXT
        or ins.mnemonic in _BLOCK_ENDERS
        or ins.has_rep_prefix
        or ins.has_repne_prefix
        or ins.is_string_instruction
        or raw == _MARK_NOP
    )


def _blocks_of_file(path: str) -> list[Block]:
    """The straight-line blocks (>= MIN_BLOCK_INSNS instructions) of one ELF
    file's function symbols, sorted by offset."""
    blocks: list[Block] = []
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        extents = _function_extents(elf)
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_PROGBITS" or not (sec["sh_flags"] & 0x4):  # SHF_EXECINSTR
                continue
            data = sec.data()
            va0, fo0 = int(sec["sh_addr"]), int(sec["sh_offset"])
            va1 = va0 + len(data)
            decoder = iced.Decoder(64, data, ip=va0)
            ins = iced.Instruction()
            for lo, hi in extents:
                if lo < va0 or hi > va1:
                    continue
                decoder.position = lo - va0
                decoder.ip = lo
                pos, start, lens = lo, lo, []
                while pos < hi:
                    decoder.decode_out(ins)
                    n = ins.len
                    if ins.is_invalid or n == 0 or pos + n > hi:
                        # not code the sweep understands: no block spans it,
                        # and nothing after it in this function is trusted
                        lens = []
                        break
                    lens.append(n)
                    rel = pos - va0
                    pos += n
                    if _ends_block(ins, data[rel : rel + n]) or pos == hi:
                        if len(lens) >= MIN_BLOCK_INSNS:
                            blocks.append(Block(fo0 + (start - va0), tuple(lens)))
                        start, lens = pos, []
    blocks.sort(key=lambda b: b.offset)
    return blocks


def image_blocks(path: str) -> list[Block]:
    """Blocks of one image, from the memory or disk cache when the file is unchanged."""
    return _cached(
        f"blocks{BLOCKS_VERSION}",
        path,
        _blocks_of_file,
        lambda b: [b.offset, _hex_lengths(b)],
        lambda _real, row: Block(int(row[0]), tuple(int(c, 16) for c in row[1])),
    )


def _hex_lengths(b: Block) -> str:
    """One hex digit per instruction length (x86 instructions are 1..15 bytes)."""
    return "".join(f"{n:x}" for n in b.lengths)


def _cached(
    kind: str,
    path: str,
    compute: Callable[[str], list[T]],
    to_row: Callable[[T], list[Any]],
    from_row: Callable[[str, Any], T],
) -> list[T]:
    """compute(real path) of one image, from the memory or disk cache (JSON
    rows, one per item) when the file is unchanged; [] for a file that is not
    a readable ELF."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = f"{kind}:{real}:{st.st_size}:{st.st_mtime_ns}"
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    cache_file = _cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    try:
        items = [from_row(real, row) for row in json.loads(cache_file.read_text())]
    except (OSError, ValueError, TypeError):
        try:
            items = compute(real)
        except (ELFError, ValueError):
            items = []
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps([to_row(x) for x in items]))
            tmp.replace(cache_file)
        except OSError:
            pass
    _MEMO[key] = items
    return items


_MEMO: dict[str, list[Any]] = {}


def image_sites(path: str) -> list[Site]:
    """Sites of one image, from the memory or disk cache when the file is unchanged."""
    return _cached(
        str(SITES_VERSION),
        path,
        _scan_file,
        lambda s: [s.kind, s.offset],
        _site_from_row,
    )


def _site_from_row(real: str, row: Any) -> Site:
    """A cached site row; a kind the scanner never writes (a hand-edited or
    corrupt cache) is ValueError, so the file is rescanned."""
    kind, offset = row
    if kind not in _PATTERNS or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"bad cached site {row!r}")
    return Site(kind, offset, real)


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


def _file_stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def program_images(exe: str, env: dict[str, str] | None = None) -> list[str]:
    """The executable, its interpreter and its DT_NEEDED closure (real paths).
    Remembered per (executable, LD_LIBRARY_PATH) while every file of the
    closure is unchanged: every cell of a run asks for the same probe."""
    env = dict(os.environ if env is None else env)
    ld_path = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    key = (os.path.realpath(exe), tuple(ld_path))
    hit = _IMAGES_MEMO.get(key)
    if hit is not None and all(_file_stamp(p) == stamp for p, stamp in hit):
        return [p for p, _stamp in hit]
    out = _program_images(exe, ld_path)
    _IMAGES_MEMO[key] = [(p, _file_stamp(p)) for p in out]
    return out


_IMAGES_MEMO: dict[tuple[str, tuple[str, ...]], list[tuple[str, tuple[int, int] | None]]] = {}


def _program_images(exe: str, ld_path: list[str]) -> list[str]:
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


# A profile record is one line: a value holding a line break (or a NUL, which
# ends the C reader's string) could add or cut records, so such paths are
# never written and free text (the model's title) is escaped.
_LINE_BREAKING = re.compile(r"[\x00\n\r]")


def _writable_path(path: str) -> bool:
    return not _LINE_BREAKING.search(path)


def _comment_text(text: str) -> str:
    """`text` for a `#` line: every non-printable character escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def site_lines(sites: Iterable[Site], images: Iterable[str] = ()) -> list[str]:
    """The profile's `image` and `site` records (paths with a line break or
    a NUL cannot be written and are left out)."""
    lines = [f"image {os.path.realpath(img)}" for img in images if _writable_path(img)]
    lines += [f"site {s.kind} {s.offset:x} {s.path}" for s in sites if _writable_path(s.path)]
    return lines


def write_profile(
    path: Path,
    model: CpuModel,
    sites: Iterable[Site],
    images: Iterable[str] = (),
    block_images: Iterable[str] = (),
) -> None:
    """The tracer's profile file (format documented in tracer/tracer.c).  `images`
    are the images whose sites were searched: an executable mapping of any
    other file is reported by the tracer as unscanned.  `block_images` get
    their straight-line blocks listed (see :func:`image_blocks`), which the
    tracer runs natively inside marked regions.  No value can add a line:
    records are numbers and checked paths, the comment is escaped."""
    title = _comment_text(f"{model.name} ({model.title})")
    lines = [f"# vc-tracer profile for model {title}"]
    # leaf 0DH's XSAVE sizes never below what this host's hardware writes
    # (xsave_room: glibc's trampoline otherwise overflows its stack area)
    for c in xsave_safe_cpuid(model.cpuid, host_cpuid(), host_xcr0()):
        lines.append(
            f"cpuid {c.leaf:x} {c.subleaf:x} {c.eax & 0xFFFFFFFF:x} {c.ebx & 0xFFFFFFFF:x} "
            f"{c.ecx & 0xFFFFFFFF:x} {c.edx & 0xFFFFFFFF:x}"
        )
    lines.append(f"xcr0 {model.xcr0:x}")
    lines += site_lines(sites, images)
    for img in block_images:
        real = os.path.realpath(img)
        if not _writable_path(real):
            continue
        lines.append(f"blocks {real}")
        lines += [f"b {b.offset:x} {_hex_lengths(b)}" for b in image_blocks(real)]
    bad = next((ln for ln in lines if _LINE_BREAKING.search(ln)), None)
    if bad is not None:  # an invariant of the code above, kept checked
        raise ValueError(f"profile record would break a line: {bad[:80]!r}")
    path.write_text("\n".join(lines) + "\n")
