"""The matrix loader: the shipped file and the small good file load; every bad
file fails with one line that names the offending line (marked "# <-- error"
in the file itself); CPU selection names the valid CPUs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sdematrix.errors import MatrixFileError, UnknownCpuError
from sdematrix.evidence.mix import MixCounts, Selector
from sdematrix.spec.matrix_file import (
    CELL_KEYS,
    VAES_PATHS,
    load_matrix,
    required_selectors,
    select_cpus,
)
from sdematrix.spec.models import DIRECTIONS, MODES, Matrix

ROOT = Path(__file__).resolve().parent.parent.parent.parent
DATA = Path(__file__).resolve().parent.parent.parent / "data" / "matrix"
SHIPPED = ROOT / "sde_matrix.yaml"
BAD = sorted(DATA.glob("bad_*.yaml"))

# What each bad file's message must say besides the line number.
BAD_WORDS = {
    "bad_syntax.yaml": "YAML syntax error",
    "bad_schema.yaml": "max_vector_bits",
    "bad_unknown_key.yaml": "chip_chek_exe_only",
    "bad_unknown_path.yaml": "'vaes_avx2' which has no signature",
    "bad_duplicate_cpu.yaml": "duplicate key 'wsm'",
    "bad_empty_models.yaml": "models",
    "bad_missing_expectation.yaml": "'p4p' has no entry under expected.models",
    "bad_zero_length.yaml": "minimum of 1",
    "bad_isa_vs_cpuid.yaml": "lacks AES",
    "bad_xcr0.yaml": "OSXSAVE",
    "bad_class_overlap.yaml": "'gcm.decrypt' is in class",
    "bad_address_width.yaml": "57-bit linear addresses but 7.0:ECX.LA57=0 makes them 48",
}


@pytest.fixture(scope="module")
def shipped() -> Matrix:
    return load_matrix(SHIPPED)


def _marker_line(path: Path) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if "# <-- error" in line:
            return n
    raise AssertionError(f"{path.name} has no '# <-- error' marker")


def test_every_bad_file_is_covered() -> None:
    assert {p.name for p in BAD} == set(BAD_WORDS)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_file_names_the_line(path: Path) -> None:
    with pytest.raises(MatrixFileError) as exc:
        load_matrix(path)
    msg = str(exc.value)
    assert "\n" not in msg
    m = re.match(rf"^{re.escape(str(path))}:(\d+)(:\d+)?: ", msg)
    assert m, msg
    assert int(m.group(1)) == _marker_line(path), msg
    assert BAD_WORDS[path.name] in msg, msg


def test_good_file_loads() -> None:
    m = load_matrix(DATA / "good.yaml")
    assert list(m.models) == ["wsm", "p4p"]
    assert m.seed == 7
    assert m.backend_preference == ("ptrace", "qemu")
    assert m.expected[("wsm", "gcm", "encrypt")] == "aesni"
    assert m.expected[("wsm", "cfb1", "decrypt")] == "generic"  # the override
    assert m.expected[("wsm", "cfb1", "encrypt")] == "aesni"
    assert m.expected[("p4p", "cfb128", "decrypt")] == "generic"
    wsm = m.models["wsm"]
    # nested isa lists (YAML anchors) are flattened
    assert {"INTEL8086", "SSSE3", "SSE4_1", "AES", "PCLMULQDQ"} <= wsm.isa
    # the brand string becomes leaves 0x80000002..4, NUL padded
    brand = b""
    for leaf in (0x80000002, 0x80000003, 0x80000004):
        c = wsm.leaf(leaf)
        assert c is not None
        brand += b"".join(r.to_bytes(4, "little") for r in (c.eax, c.ebx, c.ecx, c.edx))
    assert brand.rstrip(b"\0") == b"Intel(R) Xeon(R) CPU X5670 @ 2.93GHz"
    assert wsm.leaf(1) is not None and wsm.leaf(1).ecx == 0x029EE3FF  # type: ignore[union-attr]
    assert m.workloads["cfb1"][0].key_bits == 192
    sig = m.signatures["aesni"]
    assert sig.require["*"] == (Selector(mnemonic="AESENC", encoding="legacy"),)
    sels = required_selectors(sig, "cfb128", "decrypt")
    assert Selector(isa_ext="AES") in sels and Selector(mnemonic="PCLMULQDQ") not in sels
    assert Selector(isa_ext="AES") not in required_selectors(sig, "cfb128", "encrypt")


def test_unreadable_and_empty(tmp_path: Path) -> None:
    with pytest.raises(MatrixFileError, match="cannot read"):
        load_matrix(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    with pytest.raises(MatrixFileError, match="empty"):
        load_matrix(empty)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(MatrixFileError, match=r":1: .*mapping"):
        load_matrix(scalar)


def test_non_string_key_is_an_error(tmp_path: Path) -> None:
    text = (DATA / "good.yaml").read_text().replace("seed: 7", "7: seed")
    p = tmp_path / "intkey.yaml"
    p.write_text(text)
    with pytest.raises(MatrixFileError, match=r":3: mapping key '7' must be a string"):
        load_matrix(p)


# --------------------------------------------------------- shipped matrix --

MODELS = [
    "p4p",
    "mrm",
    "pnr",
    "nhm",
    "wsm",
    "snb",
    "ivb",
    "hsw",
    "bdw",
    "skl",
    "skx",
    "clx",
    "cpx",
    "cnl",
    "icl",
    "icx",
    "tgl",
    "adl",
    "rpl",
    "mtl",
    "arl",
    "lnl",
    "ptl",
    "spr",
    "emr",
    "gnr",
    "gnr256",
    "dmr",
    "nvl",
    "future",
    "slt",
    "slm",
    "glm",
    "glp",
    "tnt",
    "snr",
    "srf",
    "cwf",
    "zen1",
    "zen2",
    "zen3",
    "zen4",
    "zen5",
    "kvm64_aes",
    "knl",
    "spr_novpclmul",
    "spr_xcr0_ymm",
    "spr_xcr0_sse",
    "gnr_leaf23",
    "adl_avx512",
]


def test_shipped_models_in_display_order(shipped: Matrix) -> None:
    assert list(shipped.models) == MODELS


def test_shipped_is_complete(shipped: Matrix) -> None:
    assert len(CELL_KEYS) == len(MODES) * len(DIRECTIONS)
    for cpu in shipped.models:
        for mode in MODES:
            for d in DIRECTIONS:
                path = shipped.expected[(cpu, mode, d)]
                assert path in shipped.signatures
                if mode in ("cfb8", "cfb1"):
                    assert path not in VAES_PATHS
    assert set(shipped.signatures) == {"generic", "aesni", "vaes_avx2", "avx10_256", "avx512"}
    assert all(s.scope == "vc-probe*" for s in shipped.signatures.values())


def test_shipped_model_facts(shipped: Matrix) -> None:
    m = shipped.models
    assert m["zen3"].sde_chip is None and m["zen4"].sde_chip is None
    assert m["gnr256"].sde_chip == "gnr256" and m["gnr256"].max_vector_bits == 256
    assert m["p4p"].chip_check_exe_only and not m["spr"].chip_check_exe_only
    assert "AES" not in m["p4p"].isa
    assert "VAES" not in m["skx"].isa and "AVX512F" in m["skx"].isa
    assert "VAES" in m["adl"].isa and "AVX512F" not in m["adl"].isa
    # gnr256: AVX10 enumerated, AVX512F bit clear, VL256 only, EVEX state still enabled
    g = m["gnr256"]
    assert g.leaf(7, 1).edx >> 19 & 1  # type: ignore[union-attr]
    assert not g.leaf(7, 0).ebx >> 16 & 1  # type: ignore[union-attr]
    assert g.leaf(0x24).ebx & 0x70000 == 0x30000  # type: ignore[union-attr]
    assert g.xcr0 & 0xE6 == 0xE6
    assert "AVX512VL" in g.isa
    assert m["dmr"].leaf(0x24).ebx & 0xFF == 2  # type: ignore[union-attr]
    # QEMU only for VAES-free models it emulates
    for name, model in m.items():
        if model.qemu_model:
            assert "VAES" not in model.isa, name


def test_cfb128_encrypt_policy_is_one_edit(shipped: Matrix) -> None:
    classes = shipped.extra["classes"]
    assert isinstance(classes, dict)
    assert "cfb128.encrypt" in classes["serial"]
    assert shipped.expected[("spr", "cfb128", "encrypt")] == "aesni"
    assert shipped.expected[("spr", "cfb128", "decrypt")] == "avx512"


def test_select_cpus(shipped: Matrix) -> None:
    assert select_cpus(shipped, "spr,icl") == ["spr", "icl"]
    assert select_cpus(shipped, " spr , icl ") == ["spr", "icl"]
    assert select_cpus(shipped, ["zen4"]) == ["zen4"]
    assert select_cpus(shipped, "all") == MODELS
    assert select_cpus(shipped, None) == MODELS
    with pytest.raises(UnknownCpuError) as exc:
        select_cpus(shipped, "spr,bogus")
    msg = str(exc.value)
    assert "'bogus'" in msg and "p4p" in msg and "zen4" in msg and "\n" not in msg
    with pytest.raises(UnknownCpuError, match="more than once: spr"):
        select_cpus(shipped, "spr,icl,spr")
    with pytest.raises(UnknownCpuError, match="empty CPU name"):
        select_cpus(shipped, "spr,,icl")


def test_selectors_count_what_signatures_mean(shipped: Matrix) -> None:
    """The shipped signatures tell the paths apart on hand-made mixes."""

    def mix(*forms: tuple[str, str, str]) -> MixCounts:
        c = MixCounts()
        for f in forms:
            c.add(*f, count=10)
        return c

    paths = {
        "avx512": mix(("VAESENC", "evex", "zmm"), ("VPCLMULQDQ", "evex", "zmm")),
        "avx10_256": mix(("VAESENC", "evex", "ymm"), ("VPCLMULQDQ", "evex", "ymm")),
        "vaes_avx2": mix(("VAESENC", "vex", "ymm"), ("VPCLMULQDQ", "vex", "ymm")),
        "aesni": mix(("AESENC", "legacy", "xmm"), ("PCLMULQDQ", "legacy", "xmm")),
        "generic": mix(("XOR", "legacy", "none")),
    }
    for name, sig in shipped.signatures.items():
        for other, counts in paths.items():
            ok = all(
                s.count(counts) > 0 for s in required_selectors(sig, "gcm", "encrypt")
            ) and all(s.count(counts) == 0 for s in sig.forbid)
            assert ok == (name == other), (name, other)
