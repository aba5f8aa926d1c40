"""sdematrix.decode: instruction fields, XED-style groups and the chip check."""

from __future__ import annotations

import pytest

from sdematrix.decode import BASELINE_FEATURES, chip_check, decode, decode_many
from sdematrix.models import CpuModel


def _model(isa: set[str], bits: int, name: str = "m") -> CpuModel:
    return CpuModel(
        name=name,
        title=name,
        vendor="GenuineIntel",
        sde_chip=None,
        qemu_model=None,
        chip_check_exe_only=False,
        cpuid=(),
        xcr0=0xE7,
        isa=frozenset(isa),
        max_vector_bits=bits,
    )


@pytest.mark.parametrize(
    ("hexbytes", "mnemonic", "encoding", "width", "isa_set", "isa_ext", "features"),
    [
        ("66410f38dcc1", "AESENC", "legacy", "xmm", "AES", "AES", ("AES",)),
        ("c4e279dcc1", "VAESENC", "vex", "xmm", "AVXAES", "AVXAES", ("AES", "AVX")),
        ("c4e27ddcc1", "VAESENC", "vex", "ymm", "VAES", "VAES", ("VAES",)),
        ("62f27d28dcc1", "VAESENC", "evex", "ymm", "AVX512_VAES_256", "AVX512EVEX",
         ("AVX512VL", "VAES")),
        ("62f27d48dcc1", "VAESENC", "evex", "zmm", "AVX512_VAES_512", "AVX512EVEX",
         ("AVX512F", "VAES")),
        ("660f3a44c100", "PCLMULQDQ", "legacy", "xmm", "PCLMULQDQ", "PCLMULQDQ", ("PCLMULQDQ",)),
        ("c4e37544c100", "VPCLMULQDQ", "vex", "ymm", "VPCLMULQDQ", "VPCLMULQDQ", ("VPCLMULQDQ",)),
        ("62f3752844c100", "VPCLMULQDQ", "evex", "ymm", "AVX512_VPCLMULQDQ_256", "AVX512EVEX",
         ("AVX512VL", "VPCLMULQDQ")),
        ("62f3754844c100", "VPCLMULQDQ", "evex", "zmm", "AVX512_VPCLMULQDQ_512", "AVX512EVEX",
         ("AVX512F", "VPCLMULQDQ")),
        ("c5fdefc0", "VPXOR", "vex", "ymm", "AVX2", "AVX2", ("AVX2",)),
        ("62f1fd48efc0", "VPXORQ", "evex", "zmm", "AVX512F_512", "AVX512EVEX", ("AVX512F",)),
        ("c5f892c8", "KMOVW", "vex", "none", "AVX512F_KOP", "AVX512VEX", ("AVX512F",)),
        ("660f6f06", "MOVDQA", "legacy", "xmm", "SSE2", "SSE2", ("SSE2",)),
        ("0fa2", "CPUID", "legacy", "none", "I386", "BASE", ("CPUID",)),
        ("4889c3", "MOV", "legacy", "none", "I86", "BASE", ("X64",)),
        ("4863c3", "MOVSXD", "legacy", "none", "LONGMODE", "LONGMODE", ("X64",)),
    ],
)  # fmt: skip
def test_fields(
    hexbytes: str,
    mnemonic: str,
    encoding: str,
    width: str,
    isa_set: str,
    isa_ext: str,
    features: tuple[str, ...],
) -> None:
    code = bytes.fromhex(hexbytes)
    insn = decode(code, 0x401000)
    assert insn.address == 0x401000
    assert insn.length == len(code)
    assert (insn.mnemonic, insn.encoding, insn.width) == (mnemonic, encoding, width)
    assert (insn.isa_set, insn.isa_ext) == (isa_set, isa_ext)
    assert insn.features == features
    assert insn.text.split()[0] == mnemonic.lower()


def test_memory_operand_width_and_trailing_bytes() -> None:
    # vmovdqu64 zmm0, [rsi] then junk: only the first instruction is decoded
    insn = decode(bytes.fromhex("62f1fe486f06") + b"\xcc" * 9)
    assert (insn.mnemonic, insn.width, insn.length) == ("VMOVDQU64", "zmm", 6)
    # vpbroadcastd ymm0, [rsi] (a 4-byte load into a ymm register)
    assert decode(bytes.fromhex("c4e27d5806")).width == "ymm"
    # xsave [rsi]: a 512+ byte memory block is not a vector operand
    assert decode(bytes.fromhex("0fae26")).width == "none"


def test_rip_relative_text_uses_address() -> None:
    code = bytes.fromhex("488b0510000000")  # mov rax, [rip+0x10]
    assert "401017" in decode(code, 0x401000).text.lower()
    assert "501017" in decode(code, 0x501000).text.lower()


def test_invalid_and_many() -> None:
    assert decode(b"\xff").mnemonic == "INVALID"
    insns = list(decode_many(bytes.fromhex("90c5fdefc0c3"), 0x1000))
    assert [(i.address, i.mnemonic) for i in insns] == [
        (0x1000, "NOP"),
        (0x1001, "VPXOR"),
        (0x1005, "RET"),
    ]


def test_chip_check_features() -> None:
    westmere = _model({"AES", "PCLMULQDQ", "SSSE3", "SSE4_1", "SSE4_2", "POPCNT"}, 128, "wsm")
    aesenc = decode(bytes.fromhex("66410f38dcc1"))
    assert chip_check(aesenc, westmere) is None
    why = chip_check(decode(bytes.fromhex("c4e279dcc1")), westmere)
    assert why is not None and "AVX" in why and "wsm" in why
    # baseline features never count
    assert chip_check(decode(bytes.fromhex("0fa2")), westmere) is None
    assert {"SSE2", "X64", "CMOV"} <= BASELINE_FEATURES
    # ymm on a 128-bit model is reported even when the feature list passes
    hsw_no_width = _model({"AVX", "AVX2", "VAES"}, 128)
    why = chip_check(decode(bytes.fromhex("c5fdefc0")), hsw_no_width)
    assert why is not None and "256" in why


def test_chip_check_avx10_256_model() -> None:
    gnr256 = _model(
        {"AVX", "AVX2", "AES", "PCLMULQDQ", "VAES", "VPCLMULQDQ", "AVX512F", "AVX512VL",
         "AVX512BW", "AVX512DQ"},
        256,
        "gnr256",
    )  # fmt: skip
    assert chip_check(decode(bytes.fromhex("62f27d28dcc1")), gnr256) is None  # EVEX ymm VAES
    why = chip_check(decode(bytes.fromhex("62f27d48dcc1")), gnr256)  # zmm VAES
    assert why is not None and "zmm" in why
    icl = _model(set(gnr256.isa), 512, "icx")
    assert chip_check(decode(bytes.fromhex("62f27d48dcc1")), icl) is None
    no_vl = _model({"AVX512F", "VAES"}, 512)
    why = chip_check(decode(bytes.fromhex("62f27d28dcc1")), no_vl)
    assert why is not None and "AVX512VL" in why


def test_chip_check_xcr0_state() -> None:
    """CPUID may say AVX-512 while the OS left its state off (XCR0): then EVEX
    and wide registers raise #UD, and the chip check must say so."""
    from dataclasses import replace

    isa = {"AVX", "AVX2", "AES", "VAES", "AVX512F", "AVX512VL"}
    evex_ymm = decode(bytes.fromhex("62f27d28dcc1"))
    vex_ymm = decode(bytes.fromhex("c4e27ddcc1"))
    full = _model(isa, 512)
    assert chip_check(evex_ymm, full) is None
    ymm_only = replace(full, xcr0=0x7)
    why = chip_check(evex_ymm, ymm_only)
    assert why is not None and "XCR0" in why
    assert chip_check(vex_ymm, ymm_only) is None
    sse_only = replace(full, xcr0=0x3)
    why = chip_check(vex_ymm, sse_only)
    assert why is not None and "AVX state" in why
