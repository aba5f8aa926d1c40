"""Symbolizer on the tracer's maps union: lines of different times over one
range (an image dlclose'd and another loaded where it was).  The files here
are plain bytes, not ELF: an address is named by its image (``file+0xOFF``),
which is what overlapping lines decide."""

from __future__ import annotations

from pathlib import Path

from sdematrix.evidence.exec_check import whole_checked_mix
from sdematrix.evidence.symbols import Symbolizer

# VPADDD ymm0, ymm0, ymm0; RET -- and the SSE2 PADDD xmm0, xmm0; RET
AVX2 = bytes.fromhex("c5fdfec0c3")
SSE2 = bytes.fromhex("660ffec0c3")


def _image(tmp_path: Path, name: str, code: bytes) -> str:
    """A 16 KiB file holding `code` at offset 0x1100."""
    data = bytearray(0x4000)
    data[0x1100 : 0x1100 + len(code)] = code
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _line(lo: int, hi: int, perms: str, off: int, path: str) -> str:
    return f"{lo:x}-{hi:x} {perms} {off:08x} fe:00 1 {path}\n"


def test_overlapping_lines_are_told_apart_by_the_instructions_bytes(tmp_path: Path) -> None:
    first = _image(tmp_path, "first.so", AVX2)
    second = _image(tmp_path, "second.so", SSE2)
    base = 0x7F0000001000
    maps = _line(base, base + 0x1000, "r-xp", 0x1000, first)
    maps += _line(base, base + 0x1000, "r-xp", 0x1000, second)  # read later
    sym = Symbolizer(maps)
    at = base + 0x100
    assert sym.locate(at, AVX2).image == first
    assert sym.locate(at, SSE2).image == second
    # no bytes, or bytes neither file holds (JIT code, a patched byte): the
    # later line
    assert sym.locate(at).image == second
    assert sym.locate(at, b"\x0f\x0b").image == second
    assert sym.locate(at, AVX2[:4] + b"\xcc").image == second
    # every Location there says it holds for its own address only
    assert sym.locate(at, AVX2).shared and sym.overlapped(at, at + 1)
    assert not sym.overlapped(base + 0x1000, base + 0x2000)


def test_an_earlier_wide_line_is_found_and_bytes_beat_a_later_line(tmp_path: Path) -> None:
    lib = _image(tmp_path, "lib.so", SSE2)
    data = _image(tmp_path, "data.bin", b"")
    base = 0x7F0000000000
    # lib.so's text, then a data file mapped read-only over its second page
    # and a small anonymous line past that: the address 0x3100 lies only in
    # lib.so's line, which starts below two lines that do not hold it
    maps = _line(base, base + 0x4000, "r-xp", 0, lib)
    maps += _line(base + 0x1000, base + 0x2000, "r--p", 0x1000, data)
    maps += _line(base + 0x2000, base + 0x2800, "rw-p", 0, "")
    sym = Symbolizer(maps)
    assert sym.mapping_at(base + 0x3100) is not None
    assert sym.locate(base + 0x3100).image == lib
    assert not sym.locate(base + 0x3100).shared
    # in the overlaps: the file that holds the bytes, else the later line
    assert sym.locate(base + 0x1100, SSE2).image == lib
    assert sym.locate(base + 0x1100, b"\x90\x90").image == data
    assert sym.locate(base + 0x2100, b"\x90").image == "[anon]"


def test_the_chip_check_names_each_record_by_its_own_image(tmp_path: Path) -> None:
    """whole_checked_mix looks an address up once per function range; in a
    range two lines share, each record is looked up with its own bytes, and
    the same instruction run from both images is counted for each.  The
    records are what the tracer's are: 15 bytes read at the address, so a
    RET that both images have there is told apart by what follows it."""
    from sdematrix.spec.matrix_arg import load_matrix_arg

    first = _image(tmp_path, "first.so", AVX2 + b"\x0f\x0b")  # then UD2
    second = _image(tmp_path, "second.so", SSE2 + b"\x90\x90")  # then NOPs
    base = 0x7F0000001000
    maps = _line(base, base + 0x1000, "r-xp", 0x1000, first)
    maps += _line(base, base + 0x1000, "r-xp", 0x1000, second)
    sym = Symbolizer(maps)
    at = base + 0x100
    items = [
        (0, addr, Path(path).read_bytes()[0x1100 + k : 0x1115 + k], 1)
        for path in (first, second)
        for k, addr in ((0, at), (4, at + 4))
    ]
    model = load_matrix_arg(None).models["nhm"]
    mix, violations, distinct = whole_checked_mix("ptrace", items, lambda _s: sym.locate, model)
    assert [(v.mnemonic, v.image) for v in violations] == [("VPADDD", first)]
    assert distinct == 4
    assert mix.images[first].mnemonic == {"VPADDD": 1, "RET": 1}
    assert mix.images[second].mnemonic == {"PADDD": 1, "RET": 1}


def test_stepped_versions_of_an_address_merge_per_instruction_and_image(tmp_path: Path) -> None:
    """The tracer starts a new record when the bytes it reads at an address
    change: a RET whose next byte changed is one instruction (counts summed),
    the PADDD and the VPADDD written at one address stay two, and the same
    MOVD run from two images at one address stays one per image."""
    from sdematrix.evidence.exec_check import merge_versions

    movd = bytes.fromhex("660f6ec7")
    first = _image(tmp_path, "first.so", movd + AVX2)
    second = _image(tmp_path, "second.so", movd + SSE2)
    base = 0x7F0000001000
    maps = _line(base, base + 0x1000, "r-xp", 0x1000, first)
    maps += _line(base, base + 0x1000, "r-xp", 0x1000, second)
    maps += _line(0x10000, 0x11000, "rwxp", 0, "")
    sym = Symbolizer(maps)
    at = base + 0x100
    window = {p: Path(p).read_bytes()[0x1100:0x110F] for p in (first, second)}
    items = [
        (0, 0x10000, bytes.fromhex("660ffec1c300"), 1),
        (0, 0x10000, bytes.fromhex("c5fdfec1c300"), 2),
        (0, 0x10004, bytes.fromhex("c300"), 2),
        (0, 0x10004, bytes.fromhex("c390"), 1),
        (1, 0x10004, bytes.fromhex("c390"), 4),
        (0, at, window[first], 1),
        (0, at, window[second], 2),
    ]
    merged = merge_versions(items, lambda _s: sym.locate)
    assert merged == [items[0], items[1], (0, 0x10004, bytes.fromhex("c300"), 3), *items[4:]]
    assert merge_versions(items[4:5], lambda _s: sym.locate) == items[4:5]
