"""sdematrix.report.diff: what changed between two results directories."""

from __future__ import annotations

import pytest
from data.results import resultsgen

from sdematrix.report import ResultsDirError, diff, render_text
from sdematrix.report.diff import MixChange


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = resultsgen.baseline(tmp_path_factory.mktemp("old"))
    new = resultsgen.changed(tmp_path_factory.mktemp("new"))
    return base, new


def test_regressions_and_order(dirs):
    old, new = dirs
    rep = diff(old, new)
    assert rep.exit_code == 1
    # new failures first (fail before error), then the fixed one last
    assert [(s.cell, s.old, s.new) for s in rep.status_changes] == [
        ("icl.cfb128.decrypt.256.512", "pass", "fail"),
        ("spr.gcm.encrypt.128.100", "pass", "fail"),
        ("hsw.cfb1.encrypt.128.16", "pass", "error"),
        ("snb.cfb8.decrypt.128.32", "error", "pass"),
    ]
    assert [s.cell for s in rep.new_failures] == [
        "icl.cfb128.decrypt.256.512",
        "spr.gcm.encrypt.128.100",
        "hsw.cfb1.encrypt.128.16",
    ]
    assert rep.status_changes[-1].improvement
    moves = {(p.cell, p.old, p.new, p.expected) for p in rep.path_moves}
    assert moves == {
        ("spr.gcm.encrypt.128.100", "avx512", "aesni", "avx512"),
        ("icl.cfb128.decrypt.256.512", "avx10_256", "avx512", "avx10_256"),
    }
    # one line per regressed cell (issue 22: 4 cells once printed as 8): the
    # two path moves are of cells that newly fail, so they share their line
    assert len(rep.regressions) == 3
    assert rep.regressions[0].startswith(
        "new fail: icl.cfb128.decrypt.256.512 (pass -> fail); path moved avx10_256 -> avx512"
    )


def test_added_removed(dirs):
    old, new = dirs
    rep = diff(old, new)
    assert {n for n, _s, _p in rep.removed} == {
        f"wsm.{m}.{d}.{k}.{n}"
        for m, wl in resultsgen.WORKLOADS.items()
        for d in ("encrypt", "decrypt")
        for k, n in wl
    }
    assert len(rep.added) == 10 and all(n.startswith("gnr.") for n, _s, _p in rep.added)
    assert all(s == "pass" and p for _n, s, p in rep.added)


def test_mix_changes(dirs):
    old, new = dirs
    rep = diff(old, new)
    adl = [m for m in rep.mix_changes if m.cell == "adl.gcm.decrypt.256.512"]
    metrics = {m.metric: m for m in adl}
    assert metrics["total"].kind == "grew" and metrics["total"].new > metrics["total"].old
    assert metrics["isa_set:AVX2_GFNI"].kind == "appeared"
    assert metrics["width:ymm"].kind == "grew"
    # the path moves bring their mixes along: zmm disappears, xmm appears
    spr = {m.metric: m for m in rep.mix_changes if m.cell == "spr.gcm.encrypt.128.100"}
    assert spr["width:zmm"].kind == "disappeared" and spr["encoding:evex"].new == 0
    assert spr["isa_set:AES"].kind == "appeared"
    # untouched cells: no mix change
    assert not [m for m in rep.mix_changes if m.cell.startswith("snb.gcm.")]
    # a threshold above every relative change silences grew/shrank (not appear/disappear)
    loose = diff(old, new, threshold=10.0)
    assert not [m for m in loose.mix_changes if m.kind in ("grew", "shrank")]
    assert [m for m in loose.mix_changes if m.kind == "appeared"]


def test_mix_change_floor():
    assert MixChange("c", "total", 100, 150).describe() == "total 100 -> 150 (+50.0%)"
    assert MixChange("c", "width:zmm", 0, 3).describe() == "zmm 0 -> 3 (appeared)"
    assert MixChange("c", "isa_set:AES", 0, 9).describe() == "new ISA set AES (0 -> 9)"


def test_same_dir_no_changes(dirs):
    old, _new = dirs
    rep = diff(old, old)
    assert rep.exit_code == 0 and not rep.changed and rep.regressions == []
    assert render_text(rep).rstrip().endswith("verdict: no changes (exit 0)")


def test_fix_only_is_not_a_regression(dirs):
    old, new = dirs
    rep = diff(new, old)  # reversed: the failures get fixed, but paths move back
    assert [s.cell for s in rep.new_failures] == ["snb.cfb8.decrypt.128.32"]
    fixed = [s.cell for s in rep.status_changes if s.improvement]
    assert set(fixed) == {
        "icl.cfb128.decrypt.256.512",
        "spr.gcm.encrypt.128.100",
        "hsw.cfb1.encrypt.128.16",
    }


def test_render_text(dirs):
    old, new = dirs
    text = render_text(diff(old, new))
    lines = text.splitlines()
    i = lines.index("REGRESSIONS (3):")
    assert lines[i + 1].startswith(
        "  new fail: icl.cfb128.decrypt.256.512 (pass -> fail); path moved avx10_256 -> avx512: path:"
    )
    assert len([ln for ln in lines[i + 1 :] if ln.startswith("  new ")]) == 3
    assert "  fixed    snb.cfb8.decrypt.128.32: error -> pass" in lines
    assert "  spr.gcm.encrypt.128.100: avx512 -> aesni (expected avx512)" in lines
    assert any(
        ln.startswith("  adl.gcm.decrypt.256.512: total ") and "new ISA set AVX2_GFNI" in ln
        for ln in lines
    )
    assert "  - wsm.gcm.encrypt.256.512 (was pass, aesni)" in lines
    assert "  + gnr.gcm.encrypt.256.512 (pass, avx512)" in lines
    assert lines[-1] == "verdict: 3 regression(s) (exit 1)"


def test_bad_input(dirs, tmp_path):
    old, _new = dirs
    with pytest.raises(ResultsDirError) as ei:
        diff(old, tmp_path)
    assert ei.value.exit_code == 2 and "no results.json" in str(ei.value)
    with pytest.raises(ResultsDirError):
        diff(tmp_path / "missing", old)
