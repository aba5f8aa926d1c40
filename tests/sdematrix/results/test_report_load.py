"""sdematrix.results.load: reading results directories, tolerant of missing pieces."""

from __future__ import annotations

import json
import shutil

import pytest
from data.results import resultsgen

from sdematrix.errors import SdeMatrixError
from sdematrix.results.load import ResultsDirError, load_results, worst_status
from sdematrix.results.outcome_json import outcome_to_json


@pytest.fixture(scope="module")
def changed_dir(tmp_path_factory):
    return resultsgen.changed(tmp_path_factory.mktemp("changed"))


def test_load_changed(changed_dir):
    res = load_results(changed_dir)
    assert len(res.cells) == 7 * 10
    assert res.cpus == ["snb", "hsw", "icl", "adl", "spr", "gnr", "zen4"]
    assert res.counts == {"pass": 57, "fail": 2, "error": 1, "skip": 10, "not_run": 0}
    assert res.columns[:3] == [("gcm", "encrypt"), ("gcm", "decrypt"), ("cfb128", "encrypt")]
    assert len(res.columns) == 8
    cell = res.cell("icl.cfb128.decrypt.256.512")
    assert cell is not None and cell.status == "fail" and cell.path == "avx512"
    assert cell.violations[0].mnemonic == "VAESENC"
    assert cell.mix is not None and cell.mix.overall.width["zmm"] > 0
    assert res.models["zen4"].skip_reason == resultsgen.ZEN4_SKIP
    assert res.all_warnings() == []


def test_groups_take_worst_status(changed_dir):
    groups = load_results(changed_dir).groups()
    assert len(groups) == 7 * 8
    g = groups[("spr", "gcm", "encrypt")]
    assert [c.status for c in g.cells] == ["pass", "fail"]
    assert g.status == "fail"
    assert g.path == "mixed" and g.paths == ["avx512", "aesni"]
    assert g.expected_path == "avx512"
    assert groups[("zen4", "gcm", "encrypt")].status == "skip"
    assert groups[("zen4", "gcm", "encrypt")].path is None
    assert worst_status(["pass", "skip"]) == "skip"
    assert worst_status(["error", "fail", "pass"]) == "fail"
    assert worst_status([]) == "not_run"


def test_not_a_results_dir(tmp_path):
    with pytest.raises(ResultsDirError, match="does not exist"):
        load_results(tmp_path / "nope")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ResultsDirError, match="is not a directory"):
        load_results(f)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ResultsDirError, match=r"not an sdematrix results directory \(no results"):
        load_results(empty)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.json").write_text("{not json")
    with pytest.raises(ResultsDirError, match=r"is not valid JSON \(line 1"):
        load_results(bad)
    (bad / "results.json").write_text(json.dumps({"schema": "other/2", "cells": []}))
    with pytest.raises(ResultsDirError, match="has schema 'other/2'"):
        load_results(bad)
    (bad / "results.json").write_text(json.dumps({"schema": "sdematrix-results/1"}))
    with pytest.raises(ResultsDirError, match="no 'cells' list") as ei:
        load_results(bad)
    err = ei.value
    assert isinstance(err, SdeMatrixError) and err.exit_code == 2 and "\n" not in str(err)


def test_missing_pieces_are_warnings(changed_dir, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(changed_dir, d)
    (d / "mix" / "snb.gcm.encrypt.256.512.mix.json").unlink()
    (d / "mix" / "snb.gcm.decrypt.256.512.mix.json").write_text("{truncated")
    (d / "cells" / "hsw.cfb1.encrypt.128.16.json").unlink()
    res = load_results(d)
    a = res.cell("snb.gcm.encrypt.256.512")
    assert a.mix is None and a.total_instructions == a.mix_summary["total"] > 0
    b = res.cell("snb.gcm.decrypt.256.512")
    assert b.mix is None
    c = res.cell("hsw.cfb1.encrypt.128.16")
    assert c.detail is None and c.violations == [] and c.status == "error"
    w = res.all_warnings()
    assert len(w) == 3
    assert any("snb.gcm.encrypt.256.512.mix.json is missing" in x for x in w)
    assert any("is not valid JSON" in x for x in w)
    assert any("hsw.cfb1.encrypt.128.16.json is missing" in x for x in w)


def test_rebuilt_from_cells_when_results_json_missing(changed_dir, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(changed_dir, d)
    (d / "results.json").unlink()
    res = load_results(d)
    assert len(res.cells) == 70
    assert res.counts["fail"] == 2
    assert any("results.json is missing" in w for w in res.warnings)
    assert res.cell("adl.gcm.decrypt.256.512").mix is not None


def test_not_run_cells_and_count_mismatch(tmp_path):
    specs = [resultsgen.CellSpec("snb", "gcm", "encrypt", 128, 100, "pass", "aesni", "aesni")]
    d = resultsgen.write_results_dir(tmp_path / "r", specs, not_run=["snb.gcm.decrypt.128.100"])
    data = json.loads((d / "results.json").read_text())
    data["counts"]["pass"] = 5
    (d / "results.json").write_text(json.dumps(data))
    res = load_results(d)
    nr = res.cell("snb.gcm.decrypt.128.100")
    assert nr is not None and nr.status == "not_run" and nr.key_bits == 128 and nr.length == 100
    assert res.counts["not_run"] == 1
    assert any("counts disagree" in w for w in res.warnings)


def test_reason_kinds_round_trip_through_results_json():
    """The loader reads results.json through the schema code that writes it
    (sdematrix.results.outcome_json): every reason comes back with its kind; a file
    written before reasons had kinds falls back to what its status says."""
    from sdematrix.results.outcome_json import outcome_from_json
    from sdematrix.spec.models import Cell
    from sdematrix.verdict.cell import Outcome
    from sdematrix.verdict.reasons import CANNOT_RUN, Kind, Reason, cannot_run_why

    cell = Cell("spr", "gcm", "encrypt", 128, 64)
    o = Outcome(
        cell,
        "fail",
        [
            Reason("path: expected avx512, got aesni", Kind.DISPATCH),
            Reason("chip check (spr): X", Kind.CHIP),
        ],
        path="aesni",
    )
    d = outcome_to_json(o)
    assert d["reason_kinds"] == ["dispatch", "chip-check"]
    back = outcome_from_json(json.loads(json.dumps(d)))
    assert back["cell"] == cell and back["name"] == cell.name and back["path"] == "aesni"
    assert back["reasons"] == o.reasons
    assert [r.kind for r in back["reasons"]] == [Kind.DISPATCH, Kind.CHIP]
    # old files: no reason_kinds
    named = {"cell": cell.name, "status": "error", "reasons": [f"{CANNOT_RUN}no SDE"]}
    r = outcome_from_json(named)["reasons"]
    assert r[0].kind is Kind.CANNOT_RUN and cannot_run_why("error", r) == "no SDE"
    skip = outcome_from_json({"cell": cell.name, "status": "skip", "reasons": ["no SDE"]})
    assert cannot_run_why("skip", skip["reasons"]) == "no SDE"
    other = outcome_from_json({"cell": cell.name, "status": "error", "reasons": ["timed out"]})
    assert cannot_run_why("error", other["reasons"]) is None
    # a kind the file states wins over what its text looks like
    stated = {**named, "reason_kinds": ["backend-error"]}
    assert cannot_run_why("error", outcome_from_json(stated)["reasons"]) is None
    # unknown or damaged kinds: the fallback, never a traceback
    for bad in (["no-such-kind"], [["x"]], ["dispatch", "mix"], "dispatch"):
        r = outcome_from_json({**named, "reason_kinds": bad})["reasons"]
        assert r == named["reasons"] and r[0].kind is Kind.CANNOT_RUN
