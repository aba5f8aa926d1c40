"""mix_from_executed: the decode + symbolise + account loop the ptrace and QEMU
backends share (their own tests check it end to end on real traces)."""

from __future__ import annotations

from pathlib import Path

from sdematrix.evidence.decode import BASELINE_FEATURES, Insn
from sdematrix.evidence.mix_build import Executed, checked_mix, mix_from_executed
from sdematrix.evidence.symbols import Location, Symbolizer
from sdematrix.spec.models import CpuModel

AESENC = bytes.fromhex("660f38dcc1")  # aesenc xmm0, xmm1
VAESENC_YMM = bytes.fromhex("c4e27ddcc1")  # vaesenc ymm0, ymm0, ymm1
VAESENC_ZMM = bytes.fromhex("62f27d48dcc1")  # vaesenc zmm0, zmm0, zmm1
RET = bytes.fromhex("c3")


def _space(functions: dict[int, Location]):
    def locate(addr: int, code: bytes = b"") -> Location:
        return functions.get(addr, Location("?", f"?+{addr:#x}"))

    return locate


def test_counts_forms_images_functions_and_ranges() -> None:
    a = _space(
        {
            0x1000: Location("/lib/a.so", "enc", 0x1000, 0x1040),
            0x1005: Location("/lib/a.so", "enc", 0x1000, 0x1040),
            0x2000: Location("/bin/p", "main", 0x2000, 0x2100),
        }
    )
    # a second address space naming the same function with another range:
    # the first range seen is kept
    b = _space({0x1000: Location("/lib/a.so", "enc", 0x7000, 0x7040)})
    seen: list[tuple[int, str, str]] = []

    def visit(ex: Executed, insn: Insn, loc: Location) -> None:
        seen.append((ex.address, insn.mnemonic, loc.function))

    mix = mix_from_executed(
        "ptrace",
        [
            Executed(0x1000, AESENC, 10, a),
            Executed(0x1005, VAESENC_YMM + b"\x90" * 4, 3, a),  # trailing bytes ignored
            Executed(0x2000, RET, 1, a),
            Executed(0x1000, VAESENC_ZMM, 2, b),
            Executed(0x3000, RET, 5, a),  # nowhere
        ],
        visit,
    )
    assert mix.source == "ptrace" and mix.meta == {}
    assert seen == [
        (0x1000, "AESENC", "enc"),
        (0x1005, "VAESENC", "enc"),
        (0x2000, "RET", "main"),
        (0x1000, "VAESENC", "enc"),
        (0x3000, "RET", "?+0x3000"),
    ]
    assert mix.overall.total == 21
    assert mix.overall.mnemonic == {"AESENC": 10, "VAESENC": 5, "RET": 6}
    assert mix.overall.width["ymm"] == 3 and mix.overall.width["zmm"] == 2
    assert mix.overall.encoding["evex"] == 2 and mix.overall.encoding["legacy"] == 16
    assert {k: v.total for k, v in mix.images.items()} == {"/lib/a.so": 15, "/bin/p": 1, "?": 5}
    fns = {(f.name, f.image): f for f in mix.functions}
    assert [(f.name, f.counts.total) for f in mix.functions] == [
        ("enc", 15),
        ("main", 1),
        ("?+0x3000", 5),
    ]
    assert (fns["enc", "/lib/a.so"].lo, fns["enc", "/lib/a.so"].hi) == (0x1000, 0x1040)
    assert (fns["main", "/bin/p"].lo, fns["main", "/bin/p"].hi) == (0x2000, 0x2100)
    assert (fns["?+0x3000", "?"].lo, fns["?+0x3000", "?"].hi) == (None, None)


def test_nothing_executed_is_an_empty_mix() -> None:
    mix = mix_from_executed("qemu", iter(()))
    assert mix.source == "qemu" and mix.overall.total == 0
    assert mix.functions == [] and mix.images == {}


def test_real_symbolizer_of_this_process() -> None:
    """An address inside a mapped file is attributed to that file."""
    maps = Path("/proc/self/maps").read_text()
    sym = Symbolizer(maps)
    # the first executable file mapping, read from the maps text itself
    # (not through the Symbolizer under test)
    fields = next(
        f
        for f in (ln.split() for ln in maps.splitlines())
        if len(f) >= 6 and f[5].startswith("/") and "x" in f[1]
    )
    lo, path = int(fields[0].split("-")[0], 16), fields[5]
    mix = mix_from_executed("ptrace", [Executed(lo, RET, 7, sym.locate)])
    assert list(mix.images) == [path] and mix.images[path].total == 7


def _check_model(isa: str, bits: int, xcr0: int) -> CpuModel:
    return CpuModel(
        name="m",
        title="M",
        vendor="GenuineIntel",
        sde_chip=None,
        qemu_model=None,
        chip_check_exe_only=False,
        cpuid=(),
        xcr0=xcr0,
        isa=frozenset(isa.split()) | BASELINE_FEATURES,
        max_vector_bits=bits,
    )


def test_checked_mix_one_violation_per_offending_address() -> None:
    """The chip check ptrace and QEMU share: a Violation per distinct
    executed instruction the model lacks, with where and what."""
    a = _space({0x1000: Location("/bin/p", "enc", 0x1000, 0x1100)})
    executed = [
        Executed(0x1000, AESENC, 10, a),
        Executed(0x1005, VAESENC_YMM + b"\x90", 3, a),
        Executed(0x100A, VAESENC_ZMM, 2, a),
        Executed(0x1010, RET, 1, a),
    ]
    aes_only = _check_model("SSE3 SSSE3 SSE4_1 AES PCLMULQDQ", 128, 0x3)
    mix, violations = checked_mix("qemu", executed, aes_only)
    assert mix.source == "qemu" and mix.overall.total == 16
    assert [(v.address, v.mnemonic, v.bytes_hex) for v in violations] == [
        (0x1005, "VAESENC", VAESENC_YMM.hex()),
        (0x100A, "VAESENC", VAESENC_ZMM.hex()),
    ]
    assert all("not in model m" in v.reason for v in violations)
    assert violations[0].image == "?"  # 0x1005 is not in the locator's table
    # a model with everything: no violation; no model: no check at all
    full = _check_model("AES AVX AVX2 VAES AVX512F AVX512VL", 512, 0xE7)
    assert checked_mix("ptrace", executed, full)[1] == []
    assert checked_mix("ptrace", executed, None)[1] == []
    # the limit caps the list
    assert len(checked_mix("ptrace", executed, aes_only, limit=1)[1]) == 1
