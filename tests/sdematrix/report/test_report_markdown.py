"""sdematrix.report.markdown: the heat-map for a GitHub step summary."""

from __future__ import annotations

import pytest
from data.results import resultsgen

from sdematrix.errors import OutputDirError
from sdematrix.report import (
    ResultsDirError,
    emit_step_summary,
    load_results,
    write_markdown,
    write_reports,
)
from sdematrix.report.markdown import BUDGET


@pytest.fixture(scope="module")
def changed_dir(tmp_path_factory):
    return resultsgen.changed(tmp_path_factory.mktemp("changed"))


def _table(md: str) -> dict[str, list[str]]:
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split(" | ")]
    out = {"": header}
    for r in rows[1:]:
        cells = [c.strip() for c in r.strip().strip("|").split(" | ")]
        out[cells[0].strip("*")] = cells[1:]
    return out


def test_table(changed_dir):
    md = write_markdown(changed_dir)
    t = _table(md)
    assert t[""] == [
        "CPU",
        "gcm enc",
        "gcm dec",
        "cfb128 enc",
        "cfb128 dec",
        "cfb8 enc",
        "cfb8 dec",
        "cfb1 enc",
        "cfb1 dec",
    ]
    assert list(t)[1:] == ["snb", "hsw", "icl", "adl", "spr", "gnr", "zen4"]
    assert t["snb"] == ["✅ aesni"] * 8
    assert t["adl"][0] == "✅ vaes_avx2" and t["adl"][3] == "✅ vaes_avx2"
    assert t["icl"][3] == "❌ avx512 (expected avx10_256)"
    assert t["spr"][0] == "❌ avx512 / aesni (expected avx512) (1 of 2 fail)"
    assert t["hsw"][6] == "⚠️ error (expected aesni)"
    assert t["zen4"] == ["⏭ skip"] * 8
    assert "✅ 57 pass · ❌ 2 fail · ⚠️ 1 error · ⏭ 10 skip" in md


def test_reasons_list(changed_dir):
    lines = write_markdown(changed_dir).splitlines()
    i = lines.index("**Failures and errors (3)**")
    assert lines[i + 2] == (
        "- ❌ `icl.cfb128.decrypt.256.512`: path: expected avx10_256, got avx512 (+2 more)"
    )
    # every further reason, nested under its cell (issue 22: no reason is cut)
    icl = load_results(changed_dir).cell("icl.cfb128.decrypt.256.512")
    assert lines[i + 3 : i + 5] == [f"  - {r}" for r in icl.reasons[1:]]
    assert "- ⚠️ `hsw.cfb1.encrypt.128.16`: probe crashed (signal 11)" in lines
    # cells that could not run: one line per reason, with the count and models
    assert "**Could not run here (10 cells)**" in lines
    assert f"- ⏭ 10 cells (zen4): {resultsgen.ZEN4_SKIP}" in lines


def test_big_run_stays_small(tmp_path):
    specs = []
    for i in range(60):
        cpu = f"m{i:02d}"
        for mode, wls in resultsgen.WORKLOADS.items():
            for d in ("encrypt", "decrypt"):
                for kb, ln in wls:
                    specs.append(
                        resultsgen.CellSpec(
                            cpu,
                            mode,
                            d,
                            kb,
                            ln,
                            "fail",
                            "aesni",
                            "avx512",
                            reasons=["path: expected avx512, got aesni | " + "x<y> " * 400],
                            has_mix=False,
                        )
                    )
    d = resultsgen.write_results_dir(tmp_path / "big", specs)
    md = write_markdown(d)
    assert len(md.encode()) < BUDGET + 4096
    assert "❌ 600 fail" in md
    assert "- … and 560 more failures (see the HTML report)" in md
    item = next(ln for ln in md.splitlines() if ln.startswith("- ❌ `m00."))
    visible = item.replace("&lt;", "<").replace("&gt;", ">").replace("\\|", "|")
    assert len(visible) < 320 and item.endswith("…")
    assert "\\|" in item and "&lt;y&gt;" in item and "<y>" not in item  # escaped


def test_step_summary(changed_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert emit_step_summary(changed_dir) is None
    target = tmp_path / "summary.md"
    target.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert emit_step_summary(changed_dir) == target
    text = target.read_text()
    assert text.startswith("# earlier step\n### sdematrix matrix: ❌ **failures**")
    emit_step_summary(changed_dir)
    assert target.read_text().count("### sdematrix matrix") == 2
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no" / "such" / "dir" / "f"))
    with pytest.raises(OutputDirError, match="cannot append to GITHUB_STEP_SUMMARY"):
        emit_step_summary(changed_dir)


def test_write_reports(changed_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "gh.md"))
    files = write_reports(changed_dir, tmp_path / "rep")
    assert files.html.read_text().startswith("<!DOCTYPE html>")
    assert files.markdown.read_text() == write_markdown(changed_dir)
    assert files.step_summary == tmp_path / "gh.md"


def test_bad_dir(tmp_path):
    with pytest.raises(ResultsDirError, match="no results.json"):
        write_markdown(tmp_path)
