"""sdematrix.spec.matrix_cache: the built matrix is reused only while the file and
the code that builds it are unchanged; a bad file is never cached."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sdematrix.errors import MatrixFileError
from sdematrix.spec import matrix_cache
from sdematrix.spec.matrix_file import load_matrix

SHIPPED = (
    Path(__file__).resolve().parent.parent.parent.parent / "src" / "sdematrix" / "sde_matrix.yaml"
)


def test_cache_hit_equals_full_load_and_edits_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "m.yaml"
    shutil.copy(SHIPPED, f)
    first = matrix_cache.load_matrix_cached(f)
    entries = list((tmp_path / "cache" / "sdematrix").glob("matrix-*.pickle"))
    assert len(entries) == 1
    again = matrix_cache.load_matrix_cached(f)
    assert again == first == load_matrix(f)
    # an edit (a model's title) misses the cache and is seen
    f.write_text(f.read_text().replace('title: "Sapphire Rapids"', 'title: "SPR edited"', 1))
    edited = matrix_cache.load_matrix_cached(f)
    assert edited.models["spr"].title == "SPR edited" != first.models["spr"].title
    assert len(list((tmp_path / "cache" / "sdematrix").glob("matrix-*.pickle"))) == 2


def test_bad_file_is_never_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "bad.yaml"
    f.write_text("models: [\n")
    for _ in range(2):
        with pytest.raises(MatrixFileError):
            matrix_cache.load_matrix_cached(f)
    assert not list((tmp_path / "cache").rglob("matrix-*.pickle"))
