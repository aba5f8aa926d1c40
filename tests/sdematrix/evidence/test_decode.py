"""sdematrix.evidence.decode: instruction fields, XED-style groups and the chip check."""

from __future__ import annotations

import pytest

from sdematrix.evidence.decode import BASELINE_FEATURES, chip_check, decode, decode_many
from sdematrix.spec.models import CpuModel


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
        (
            "62f27d28dcc1",
            "VAESENC",
            "evex",
            "ymm",
            "AVX512_VAES_256",
            "AVX512EVEX",
            ("AVX512VL", "VAES"),
        ),
        (
            "62f27d48dcc1",
            "VAESENC",
            "evex",
            "zmm",
            "AVX512_VAES_512",
            "AVX512EVEX",
            ("AVX512F", "VAES"),
        ),
        ("660f3a44c100", "PCLMULQDQ", "legacy", "xmm", "PCLMULQDQ", "PCLMULQDQ", ("PCLMULQDQ",)),
        ("c4e37544c100", "VPCLMULQDQ", "vex", "ymm", "VPCLMULQDQ", "VPCLMULQDQ", ("VPCLMULQDQ",)),
        (
            "62f3752844c100",
            "VPCLMULQDQ",
            "evex",
            "ymm",
            "AVX512_VPCLMULQDQ_256",
            "AVX512EVEX",
            ("AVX512VL", "VPCLMULQDQ"),
        ),
        (
            "62f3754844c100",
            "VPCLMULQDQ",
            "evex",
            "zmm",
            "AVX512_VPCLMULQDQ_512",
            "AVX512EVEX",
            ("AVX512F", "VPCLMULQDQ"),
        ),
        ("c5fdefc0", "VPXOR", "vex", "ymm", "AVX2", "AVX2", ("AVX2",)),
        ("62f1fd48efc0", "VPXORQ", "evex", "zmm", "AVX512F_512", "AVX512EVEX", ("AVX512F",)),
        ("c5f892c8", "KMOVW", "vex", "none", "AVX512F_KOP", "AVX512VEX", ("AVX512F",)),
        ("660f6f06", "MOVDQA", "legacy", "xmm", "SSE2", "SSE2", ("SSE2",)),
        ("0fa2", "CPUID", "legacy", "none", "I386", "BASE", ("CPUID",)),
        ("4889c3", "MOV", "legacy", "none", "I86", "BASE", ("X64",)),
        ("4863c3", "MOVSXD", "legacy", "none", "LONGMODE", "LONGMODE", ("X64",)),
    ],
)
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
        {
            "AVX",
            "AVX2",
            "AES",
            "PCLMULQDQ",
            "VAES",
            "VPCLMULQDQ",
            "AVX512F",
            "AVX512VL",
            "AVX512BW",
            "AVX512DQ",
        },
        256,
        "gnr256",
    )
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
    # xmm-width VEX and VZEROUPPER need XCR0[2:1] = 11b as well (SDM vol. 2, 2.8)
    vex_xmm = decode(bytes.fromhex("c5f1fec2"))  # vpaddd xmm0, xmm1, xmm2
    assert vex_xmm.mnemonic == "VPADDD" and vex_xmm.width == "xmm"
    why = chip_check(vex_xmm, sse_only)
    assert why is not None and "XCR0[2:1]" in why
    assert chip_check(vex_xmm, ymm_only) is None
    vzu = decode(bytes.fromhex("c5f877"))
    assert vzu.mnemonic == "VZEROUPPER"
    assert chip_check(vzu, sse_only) is not None and chip_check(vzu, ymm_only) is None
    # VEX general-purpose forms (BMI1 ANDN, BMI2 SHLX) need no vector state
    bmi = _model(isa | {"BMI1", "BMI2"}, 512)
    for hexbytes in ("c4e278f2c1", "c4e271f7c2"):  # andn eax,eax,ecx ; shlx eax,edx,ecx
        ins = decode(bytes.fromhex(hexbytes))
        assert ins.mnemonic in ("ANDN", "SHLX")
        assert chip_check(ins, replace(bmi, xcr0=0x3)) is None
    # opmask instructions also need the opmask/ZMM state
    kmov = decode(bytes.fromhex("c5f890c1"))  # kmovw k0, k1
    assert kmov.mnemonic == "KMOVW"
    why = chip_check(kmov, replace(_model(isa | {"AVX512F"}, 512), xcr0=0x7))
    assert why is not None and "opmask" in why


# --- hint NOPs ---------------------------------------------------------------

# The shipped matrix's oldest models, as far as the chip check looks at them.
_X86_64 = {
    "INTEL8086",
    "INTEL186",
    "INTEL286",
    "INTEL386",
    "INTEL486",
    "CPUID",
    "PAUSE",
    "MULTIBYTENOP",
    "FPU",
    "FPU287",
    "FPU387",
    "TSC",
    "CX8",
    "SEP",
    "CMOV",
    "CLFSH",
    "MMX",
    "FXSR",
    "SSE",
    "SSE2",
    "SYSCALL",
    "X64",
    "SSE3",
    "CMPXCHG16B",
}
_SNB = _X86_64 | {
    "SSSE3",
    "SSE4_1",
    "SSE4_2",
    "POPCNT",
    "RDTSCP",
    "AES",
    "PCLMULQDQ",
    "AVX",
    "XSAVE",
    "XSAVEOPT",
}


@pytest.mark.parametrize(
    ("hexbytes", "mnemonic", "iced_feature"),
    [
        ("f30f1efa", "ENDBR64", "CET_IBT"),
        ("f30f1efb", "ENDBR32", "CET_IBT"),
        ("f30f1ec8", "RDSSPD", "CET_SS"),  # rdsspd eax
        ("f3480f1ec8", "RDSSPQ", "CET_SS"),  # rdsspq rax
        ("0f1c00", "CLDEMOTE", "CLDEMOTE"),  # cldemote [rax]
        ("0f183d00000000", "PREFETCHIT0", "PREFETCHITI"),  # prefetchit0 [rip+0]
        ("0f183500000000", "PREFETCHIT1", "PREFETCHITI"),  # prefetchit1 [rip+0]
    ],
)
def test_hint_nops_pass_on_models_without_the_feature(
    hexbytes: str, mnemonic: str, iced_feature: str
) -> None:
    insn = decode(bytes.fromhex(hexbytes))
    # iced still names the feature (the mix shows what the bytes are) ...
    assert (insn.mnemonic, insn.features, insn.hint_nop) == (mnemonic, (iced_feature,), True)
    # ... but a CPU without it runs a NOP: legal on every model
    for model in (_model(_X86_64, 128, "p4p"), _model(_SNB, 256, "snb")):
        assert chip_check(insn, model) is None, (mnemonic, model.name)


@pytest.mark.parametrize(
    ("hexbytes", "mnemonic", "text"),
    [
        ("f390", "PAUSE", "pause"),
        ("0f1f440000", "NOP", "nop [rax+rax]"),  # multi-byte NOP
        ("660f1f840000000000", "NOP", "nop [rax+rax]"),
        ("0f1a00", "RESERVEDNOP", "nop [rax],eax"),  # MPX space (bndldx without MPX)
        ("f30f1b00", "RESERVEDNOP", "nop [rax],eax"),  # MPX space (bndmk without MPX)
        ("f30f1e00", "RESERVEDNOP", "nop [rax],eax"),  # 0F 1E memory form
        ("f2c3", "RET", "bnd ret"),  # MPX BND prefix on branches
        ("f2e900000000", "JMP", "bnd jmp"),
        ("f2e800000000", "CALL", "bnd call"),
        ("f275fe", "JNE", "bnd jne"),
        ("3effe0", "JMP", "notrack jmp rax"),  # CET notrack prefix
        ("3effd0", "CALL", "notrack call rax"),
    ],
)
def test_other_hints_are_baseline(hexbytes: str, mnemonic: str, text: str) -> None:
    insn = decode(bytes.fromhex(hexbytes))
    assert insn.mnemonic == mnemonic and insn.text.startswith(text)
    assert not insn.hint_nop  # no exemption needed: iced tags them baseline
    assert chip_check(insn, _model(_X86_64, 128, "p4p")) is None


def test_real_cet_and_prefetchw_instructions_are_still_checked() -> None:
    p4p = _model(_X86_64, 128, "p4p")
    # setssbsy (F3 0F 01 E8) and incsspq rax (F3 48 0F AE E8) are not in NOP space: #UD
    for hexbytes in ("f30f01e8", "f3480faee8"):
        insn = decode(bytes.fromhex(hexbytes))
        why = chip_check(insn, p4p)
        assert not insn.hint_nop and why is not None and "CET_SS" in why, hexbytes
    # prefetchw [rax]: only later Intel parts enumerate PRFCHW (see HINT_NOP_CODES)
    why = chip_check(decode(bytes.fromhex("0f0d08")), p4p)
    assert why is not None and "PREFETCHW" in why
    # a hint NOP keeps its flag when decoded at an address (the cached path)
    assert decode(bytes.fromhex("f30f1efa"), 0x401000).hint_nop


# --- vector width: VSIB index, VEX.L / EVEX.L'L, rounding ----------------------

_GNR256_ISA = {
    "AVX",
    "AVX2",
    "AES",
    "PCLMULQDQ",
    "VAES",
    "VPCLMULQDQ",
    "AVX512F",
    "AVX512VL",
    "AVX512BW",
    "AVX512DQ",
}


@pytest.mark.parametrize(
    ("hexbytes", "text", "width"),
    [
        # EVEX.512 gathers/scatters with a zmm index and a ymm data register
        ("62f27d49910c90", "vpgatherqd ymm1,k1,[rax+zmm2*4]", "zmm"),
        ("62f27d49930c90", "vgatherqps ymm1,k1,[rax+zmm2*4]", "zmm"),
        ("62f27d49a10c90", "vpscatterqd [rax+zmm2*4],k1,ymm1", "zmm"),
        # EVEX.256 with an xmm data register and a ymm index
        ("62f27d29910c90", "vpgatherqd xmm1,k1,[rax+ymm2*4]", "ymm"),
        ("62f27d29900c90", "vpgatherdd ymm1,k1,[rax+ymm2*4]", "ymm"),
        # VEX.256 AVX2 gather, xmm data and mask, ymm index
        ("c4e265910c90", "vpgatherqd xmm1,[rax+ymm2*4],xmm3", "ymm"),
        # EVEX.512 with only ymm registers: a 1to8 broadcast source
        ("62f1fc585b08", "vcvtqq2ps ymm1,[rax]{1to8}", "zmm"),
        ("62f1fc485bca", "vcvtqq2ps ymm1,zmm2", "zmm"),
        # packed reg-reg EVEX.b: L'L is the rounding mode, the length is 512
        ("62f16c1858cb", "vaddps zmm1{rne-sae},zmm2,zmm3", "zmm"),
        ("62f1fd185aca", "vcvtpd2ps ymm1{rne-sae},zmm2", "zmm"),
        # scalar (LIG) EVEX with rounding/SAE: L'L = 00/01/11 is the rounding
        # control, not a length; the operands are xmm
        ("62f16e1858cb", "vaddss xmm1{rne-sae},xmm2,xmm3", "xmm"),  # L'L=00 (rn)
        ("62f1ef7958cb", "vaddsd xmm1{k1}{rz-sae},xmm2,xmm3", "xmm"),  # L'L=11 (rz)
        ("62f1ee382ac8", "vcvtsi2ss xmm1{rd-sae},xmm2,rax", "xmm"),  # L'L=01 (rd)
        ("62f17c182eca", "vucomiss xmm1{sae},xmm2", "xmm"),
        # opmask instructions: VEX.L1 in kaddq/kunpckdq is not a vector length
        ("c4e1fb92c8", "kmovq k1,rax", "none"),
        ("c4e1ec4acb", "kaddq k1,k2,k3", "none"),
        ("c4e1ec4bcb", "kunpckdq k1,k2,k3", "none"),
        # mask <-> vector
        ("62f27e4828c9", "vpmovm2b zmm1,k1", "zmm"),
        ("62f1752874ca", "vpcmpeqb k1,ymm1,ymm2", "ymm"),
    ],
)
def test_width_from_encoding_and_every_register(hexbytes: str, text: str, width: str) -> None:
    insn = decode(bytes.fromhex(hexbytes))
    assert insn.text == text
    assert insn.width == width


def test_zmm_index_gather_fails_a_256_bit_model() -> None:
    gnr256 = _model(_GNR256_ISA, 256, "gnr256")
    gather = decode(bytes.fromhex("62f27d49910c90"))  # vpgatherqd ymm1{k1}, [rax+zmm2*4]
    why = chip_check(gather, gnr256)
    assert why is not None and "zmm" in why and "256-bit" in why
    # the same gather with a ymm index (EVEX.256) fits
    assert chip_check(decode(bytes.fromhex("62f27d29910c90")), gnr256) is None
    # and the zmm-index one runs on a 512-bit model
    assert chip_check(gather, _model(_GNR256_ISA, 512, "spr")) is None
    # an EVEX.512 broadcast convert with only ymm registers is zmm too
    why = chip_check(decode(bytes.fromhex("62f1fc585b08")), gnr256)
    assert why is not None and "zmm" in why


def test_scalar_rounding_is_not_zmm_on_a_256_bit_model() -> None:
    gnr256 = _model(_GNR256_ISA, 256, "gnr256")
    for hexbytes in ("62f16e1858cb", "62f1ef7958cb", "62f1ee382ac8", "62f17c182eca"):
        assert chip_check(decode(bytes.fromhex(hexbytes)), gnr256) is None, hexbytes
    # the packed 512-bit rounding form is rejected
    why = chip_check(decode(bytes.fromhex("62f16c1858cb")), gnr256)
    assert why is not None and "zmm" in why


@pytest.mark.parametrize(
    "hexbytes",
    [
        "c4e1fb92c8",  # kmovq k1, rax
        "c4e1f890ca",  # kmovq k1, k2
        "c4e1ec4acb",  # kaddq k1, k2, k3
        "c4e1ec4bcb",  # kunpckdq k1, k2, k3
        "c4e3f933ca03",  # kshiftlq k1, k2, 3
        "c4e1f898ca",  # kortestq k1, k2
        "c5fb92c8",  # kmovd k1, eax
        "62f27e2828c9",  # vpmovm2b ymm1, k1 (32 mask bits)
    ],
)
def test_avx10_256_allows_64_bit_opmask_instructions(hexbytes: str) -> None:
    """AVX10 technical paper 356368 rev. 2.0 (Dec 2023) lifted rev. 1.0's
    32-bit opmask limit for AVX10/256: 64-bit opmask forms are legal there."""
    insn = decode(bytes.fromhex(hexbytes))
    assert chip_check(insn, _model(_GNR256_ISA, 256, "gnr256")) is None, insn.text
    # they still need the feature iced tags them with (AVX512BW / AVX512F)
    why = chip_check(insn, _model(_SNB | {"AVX2"}, 256, "hsw"))
    assert why is not None and "AVX512" in why, insn.text


def test_avx10_256_rejects_zmm_mask_producers() -> None:
    gnr256 = _model(_GNR256_ISA, 256, "gnr256")
    why = chip_check(decode(bytes.fromhex("62f27e4828c9")), gnr256)  # vpmovm2b zmm1, k1
    assert why is not None and "zmm" in why


# ---- legacy forms (decode.LEGACY_FORMS): judged by what the model executes --------


@pytest.mark.parametrize(
    ("hexbytes", "isa", "verdict_part", "ran_as"),
    [
        ("f3480fbcc0", set(), None, "BSF"),  # TZCNT without BMI1: BSF, legal
        ("f3480fbcc0", {"BMI1"}, None, "TZCNT"),
        ("f30fbdc0", set(), "LZCNT executes as BSR on model m (no LZCNT)", "BSR"),
        ("f30fbdc0", {"LZCNT"}, None, "LZCNT"),
        ("f30f09", set(), None, "WBINVD"),
        ("0fbcc0", set(), None, "BSF"),  # plain BSF: not a legacy form
    ],
)
def test_legacy_forms_per_model(
    hexbytes: str, isa: set[str], verdict_part: str | None, ran_as: str
) -> None:
    from sdematrix.evidence.decode import as_executed

    model = _model(isa, 128)
    insn = decode(bytes.fromhex(hexbytes))
    why = chip_check(insn, model)
    if verdict_part is None:
        assert why is None
    else:
        assert why is not None and verdict_part in why and "not in model" not in why
    assert as_executed(insn, model).mnemonic == ran_as
    assert as_executed(insn, None) is insn  # no model: as decoded
