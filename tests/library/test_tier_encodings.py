"""The ISA tiers use only the encodings their names promise, read back from
the machine code the build produced.

* From the built extension (vaescrypt._native): every function symbol of a
  tier, decoded with iced-x86 through sdematrix.evidence.decode.
* From each tier's translation unit compiled alone with the project's flags:
  every instruction in .text, so static helpers that kept their own symbol
  are covered too.

Rules: avx10_256 has no zmm operand and is EVEX (at least one EVEX-only
instruction); vaes_avx2 has no EVEX and no zmm; aesni has neither VEX nor EVEX
(it must run on Westmere); generic has no AES or carry-less multiply.  And all
VAES GCM code of each wide tier stays within 16 KiB of .text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from sdematrix.evidence.decode import Insn, decode_many

vaescrypt_native = pytest.importorskip("vaescrypt._native")
from vaescrypt import _buildinfo as bi

PREFIXES = {
    "avx512": ("vc_avx512_",),
    "avx10_256": ("vc_avx10_256_",),
    "vaes_avx2": ("vc_vaes_avx2_",),
    "aesni": ("vc_aesni_", "aesni_"),
    "generic": ("vc_generic_",),
}
AES_CLMUL = (
    "AESENC",
    "AESENCLAST",
    "AESDEC",
    "AESDECLAST",
    "AESKEYGENASSIST",
    "AESIMC",
    "PCLMULQDQ",
)


def _functions(path: Path) -> dict[str, list[Insn]]:
    """name -> decoded instructions of every sized FUNC symbol in .text."""
    out: dict[str, list[Insn]] = {}
    with path.open("rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text")
        data, base = text.data(), text["sh_addr"]
        symtab = elf.get_section_by_name(".symtab")
        assert symtab is not None, f"{path} has no symbol table"
        for sym in symtab.iter_symbols():
            if sym["st_info"]["type"] != "STT_FUNC" or sym["st_size"] == 0:
                continue
            if elf.get_section(sym["st_shndx"]).name != ".text":
                continue
            lo = sym["st_value"] - base
            code = data[lo : lo + sym["st_size"]]
            out[sym.name] = list(decode_many(code, sym["st_value"]))
    return out


@pytest.fixture(scope="module")
def extension_functions() -> dict[str, list[Insn]]:
    return _functions(Path(vaescrypt_native.__file__))


def _tier(funcs: dict[str, list[Insn]], path: str) -> dict[str, list[Insn]]:
    got = {n: i for n, i in funcs.items() if n.startswith(PREFIXES[path])}
    assert got, f"no {path} functions found in the extension"
    return got


def _offenders(funcs: dict[str, list[Insn]], bad: Callable[[Insn], bool]) -> list[str]:
    return [f"{n}: {i.text}" for n, insns in funcs.items() for i in insns if bad(i)][:10]


def _check(path: str, funcs: dict[str, list[Insn]]) -> None:
    if path == "avx10_256":
        assert not _offenders(funcs, lambda i: i.width == "zmm")
        assert sum(i.encoding == "evex" for ins in funcs.values() for i in ins) > 0
    elif path == "vaes_avx2":
        assert not _offenders(funcs, lambda i: i.encoding == "evex" or i.width == "zmm")
        assert any(
            i.mnemonic == "VAESENC" and i.width == "ymm" for ins in funcs.values() for i in ins
        )
    elif path == "aesni":
        assert not _offenders(funcs, lambda i: i.encoding in ("vex", "evex"))
        assert any(i.mnemonic == "AESENC" for ins in funcs.values() for i in ins)
    elif path == "generic":
        assert not _offenders(funcs, lambda i: i.mnemonic.lstrip("V") in AES_CLMUL)
    elif path == "avx512":
        assert any(
            i.mnemonic == "VAESENC" and i.width == "zmm" for ins in funcs.values() for i in ins
        )


@pytest.mark.parametrize("path", list(PREFIXES))
def test_extension_tier_encodings(extension_functions: dict[str, list[Insn]], path: str) -> None:
    _check(path, _tier(extension_functions, path))


TU = {
    "avx10_256": "native/tier_avx10_256.c",
    "vaes_avx2": "native/tier_vaes_avx2.c",
    "aesni": "native/tier_aesni.c",
}


@pytest.mark.parametrize("path", list(TU))
def test_translation_unit_encodings(path: str, tmp_path: Path) -> None:
    if not bi.have_compiler():
        pytest.skip("no C compiler")
    src = bi.REPO_ROOT / TU[path]
    if not src.is_file():
        pytest.skip("needs the source tree")
    [obj] = bi.compile_objects([src], tmp_path)
    funcs = _functions(obj)
    _check(path, funcs)


@pytest.mark.parametrize("path", ["avx512", "avx10_256", "vaes_avx2"])
def test_vaes_gcm_code_size(extension_functions: dict[str, list[Insn]], path: str) -> None:
    """Each wide tier's VAES GCM code (gcm_oneshot, gcm_crypt, ghash,
    ghash_init and helpers) within 16 KiB of .text: the budget is per width
    (issue 16)."""
    size = sum(
        sum(i.length for i in insns)
        for name, insns in _tier(extension_functions, path).items()
        if "cfb128" not in name
    )
    assert 0 < size <= 16 * 1024, f"{path} VAES GCM code is {size} bytes"
