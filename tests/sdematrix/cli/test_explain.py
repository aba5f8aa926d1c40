"""The executable link between sde_matrix.yaml and the dispatcher: for every
model, the library's own C policy (fed the model's CPUID profile) must choose
exactly the path the matrix expects, in every (mode, direction)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdematrix.cli import explain as ex
from sdematrix.errors import UnknownCpuError
from sdematrix.integrations.github_shards import github_matrix
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import Matrix

SHIPPED = Path(__file__).resolve().parent.parent.parent.parent / "sde_matrix.yaml"

try:
    from vaescrypt._native import lib as _lib  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the build
    _NATIVE_ERR: str | None = f"vaescrypt._native is not importable ({e}); build the package"
else:
    _NATIVE_ERR = None

needs_native = pytest.mark.skipif(_NATIVE_ERR is not None, reason=_NATIVE_ERR or "")

MATRIX: Matrix = load_matrix(SHIPPED)


@needs_native
@pytest.mark.parametrize("cpu", list(MATRIX.models))
def test_dispatcher_agrees_with_matrix(cpu: str) -> None:
    rows = ex.decisions(MATRIX, cpu)
    assert len(rows) == 8
    bad = [
        f"{r.mode}/{r.direction}: chose {r.chosen}, matrix says {r.expected} ({r.reason})"
        for r in rows
        if not r.agrees
    ]
    assert not bad, f"{cpu}: " + "; ".join(bad)


@needs_native
def test_explain_text_and_disagreement_flag() -> None:
    text = ex.explain(MATRIX, "icl")
    assert "prefer-ymm" in text and "all cells agree" in text
    # a matrix whose expectation is wrong is flagged, not silently accepted
    wrong = load_matrix(SHIPPED)
    wrong.expected[("icl", "gcm", "encrypt")] = "avx512"
    text = ex.explain(wrong, "icl")
    assert "DISAGREES" in text and "1 cell(s) disagree" in text


@needs_native
def test_model_features_decoded_by_the_library() -> None:
    g = ex.model_features(MATRIX, "gnr256")
    assert "avx10" in g.features and "avx10_256" in g.features
    assert "avx10_512" not in g.features and "avx512f" not in g.features
    assert g.avx10_version == 1
    d = ex.model_features(MATRIX, "dmr")
    assert (d.family, d.model, d.avx10_version) == (0x13, 0x1, 2)
    p = ex.model_features(MATRIX, "p4p")
    assert "aes" not in p.features and p.xcr0 == 0


def test_unknown_cpu() -> None:
    with pytest.raises(UnknownCpuError, match="valid: p4p"):
        ex.explain(MATRIX, "k8")


def test_list_cpus_and_github_matrix() -> None:
    rows = ex.list_cpus(MATRIX)
    assert [r["cpu"] for r in rows] == list(MATRIX.models)
    spr = rows[[r["cpu"] for r in rows].index("spr")]
    assert spr["gcm"] == "avx512" and spr["cfb128/enc"] == "aesni"
    assert spr["cfb128/dec"] == "avx512" and spr["cfb8"] == "aesni"
    # the workflow's job matrix: shards covering exactly the models SDE emulates
    inc = github_matrix(MATRIX)["include"]
    cpus = [c for sh in inc for c in sh["cpus"].split(",")]
    assert "zen3" not in cpus and "gnr256" in cpus
    assert sorted(cpus) == sorted(n for n, m in MATRIX.models.items() if m.sde_chip)
    chips = dict(zip(cpus, (k for sh in inc for k in sh["chips"].split(",")), strict=True))
    assert chips["gnr256"] == "gnr256"
