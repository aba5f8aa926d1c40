"""The trap models of sde_matrix.yaml, and the catch that makes them worth
running: with the AES-NI-without-SSE4.1 model (QEMU/KVM kvm64 +aes) an aesni
tier that executes an SSE4.1 instruction must be reported by the chip check,
naming the instruction and the function.

The SSE4.1 instruction does not come from today's aesni tier (which the
dispatcher fix may rewrite to need only AES + SSE2): a test probe is linked
with tests/data/trap/sse41_aesni_tier.c through ``-Wl,--wrap=vc_tier_get``, so
its aesni tier's key set-up deterministically runs one PEXTRD in
``vc_trap_sse41_setkey``; the cells are run with the path forced to aesni
(``vc-probe --force-tier aesni``), the way a dispatcher that trusted CPUID.1
ECX[25] alone would run them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _by_path import buildinfo
from doubles.sdematrix_cli import SHIPPED_MATRIX, ptrace_skip_reason

from sdematrix.backends.probe import ProbeCommand, probe_command
from sdematrix.backends.registry import BackendSelector
from sdematrix.cli import explain as ex
from sdematrix.pipeline.run import run_cells
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import Cell

TRAP_SOURCE = Path(__file__).resolve().parent.parent / "data" / "trap" / "sse41_aesni_tier.c"
MODEL = "kvm64_aes"
TRAPS = [
    "kvm64_aes",
    "knl",
    "spr_novpclmul",
    "spr_xcr0_ymm",
    "spr_xcr0_sse",
    "gnr_leaf23",
    "adl_avx512",
]


def test_every_trap_model_names_its_source_and_why() -> None:
    """Each trap model's yaml block says where the profile comes from and
    which path the policy must pick, and is not something SDE can emulate."""
    text = SHIPPED_MATRIX.read_text()
    m = load_matrix(SHIPPED_MATRIX)
    for name in TRAPS:
        block = re.search(rf"^  {name}:\n((?:    .*\n)+)", text, re.MULTILINE)
        assert block, name
        assert "# source: " in block.group(1), name
        assert m.models[name].sde_chip is None, name
    assert len(m.models) >= 48


def test_trap_facts_the_policy_sees() -> None:
    m = load_matrix(SHIPPED_MATRIX)
    kvm = ex.model_features(m, "kvm64_aes")
    assert "aes" in kvm.features and "sse41" not in kvm.features
    assert "pclmulqdq" not in kvm.features
    assert "SSE4_1" not in m.models["kvm64_aes"].isa and "SSSE3" not in m.models["kvm64_aes"].isa
    knl = ex.model_features(m, "knl")
    assert "avx512f" in knl.features and "avx512vl" not in knl.features
    assert "vaes" not in knl.features
    assert "vpclmulqdq" not in ex.model_features(m, "spr_novpclmul").features
    assert "vaes" in ex.model_features(m, "spr_novpclmul").features
    ymm = ex.model_features(m, "spr_xcr0_ymm")
    assert "os_ymm" in ymm.features and "os_evex" not in ymm.features
    assert "os_ymm" not in ex.model_features(m, "spr_xcr0_sse").features
    g = ex.model_features(m, "gnr_leaf23")
    assert "avx10" in g.features and g.avx10_version == 0
    assert "avx10_512" not in g.features and m.models["gnr_leaf23"].leaf(0) is not None
    assert m.models["gnr_leaf23"].leaf(0).eax < 0x24  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def trap_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bi = buildinfo()
    if not bi.have_compiler() or not bi.probe_sources():
        pytest.skip("no C compiler or no probe sources")
    work = tmp_path_factory.mktemp("trap-probe")
    srcs = [*bi.library_sources(), *bi.probe_sources(), TRAP_SOURCE]
    objs = bi.compile_objects(srcs, work / "obj")
    # the file name matters: the path signatures are scoped to vc-probe*
    return Path(
        bi.link_executable(objs, work / "vc-probe", extra=["-Wl,-z,now", "-Wl,--wrap=vc_tier_get"])
    )


def test_chip_check_catches_sse41_in_a_forced_aesni_tier(
    trap_probe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = ptrace_skip_reason(SHIPPED_MATRIX, [MODEL])
    if why is not None:
        pytest.skip(why)
    monkeypatch.setenv("SDEMATRIX_PROBE", str(trap_probe))
    matrix = load_matrix(SHIPPED_MATRIX)
    # the CFB cells: AES alone is what a CPUID-trusting dispatcher would check
    # for them (GCM would also need PCLMULQDQ, which kvm64 lacks)
    cells = [c for c in matrix.cells([MODEL]) if c.mode in ("cfb128", "cfb8")]
    assert len(cells) == 4

    def make(cell: Cell, seed: int) -> ProbeCommand:
        return probe_command(cell, seed, force_tier="aesni")

    report = run_cells(
        matrix,
        cells,
        BackendSelector(matrix, "ptrace"),
        workdir=tmp_path / "work",
        jobs=2,
        timeout=120.0,
        make_probe=make,
        handle_signals=False,
    )
    assert len(report.records) == 4
    for rec in report.records:
        o = rec.outcome
        assert o.status == "fail", (o.cell.name, o.status, o.reasons)
        assert o.path == "aesni"
        chip = [r for r in o.reasons if r.startswith(f"chip check ({MODEL}): ")]
        assert chip, o.reasons
        assert any(
            re.match(
                rf"chip check \({MODEL}\): PEXTRD vc_trap_sse41_setkey in vc-probe at "
                rf"0x[0-9a-f]+ \[[0-9a-f ]+\]: SSE4_1 not in model {MODEL}",
                r,
            )
            for r in chip
        ), chip
        # the trap tier computes the right answer: only the ISA is wrong
        assert not any(r.startswith("digest") for r in o.reasons), o.reasons
