"""The runner end to end with the SDE double, then its JUnit and results directory."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from doubles.fake_matrix import SDE_DOUBLE, fake_digest, fake_probe_command, make_matrix

from sdematrix.backends.probe import ProbeError
from sdematrix.backends.registry import BackendSelector
from sdematrix.backends.sde.backend import SdeBackend
from sdematrix.errors import OutputDirError
from sdematrix.pipeline.run import run_cells
from sdematrix.results.junit import junit_xml_string, prepare_out_dir
from sdematrix.results.writer import write_results


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDE_", "FAKE_PROBE"))}
    env.update(SDE_PATH=str(SDE_DOUBLE), FAKE_PROBE_PATH="aesni")
    matrix = make_matrix(tmp)
    selector = BackendSelector(matrix, "sde", factory=lambda n: SdeBackend(environ=env))

    def make_probe(cell, seed):
        if cell.cpu == "hsw" and cell.mode == "cfb1" and cell.direction == "decrypt":
            raise ProbeError("vc-probe not built (test)")
        return fake_probe_command(cell, seed)

    rep = run_cells(
        matrix,
        matrix.cells(),
        selector,
        workdir=tmp / "work",
        jobs=3,
        timeout=30,
        make_probe=make_probe,
        expected_digest=fake_digest,
        handle_signals=False,
    )
    write_results(tmp / "out", rep)
    return rep, tmp / "out"


def test_run_outcomes(report):
    rep, _ = report
    by = {r.cell.name: r.outcome for r in rep.records}
    assert len(by) == 24 and not rep.not_run and not rep.interrupted
    assert by["hsw.cfb8.encrypt.128.64"].status == "pass"
    spr_gcm = by["spr.gcm.encrypt.128.64"]
    assert spr_gcm.status == "fail"
    assert spr_gcm.reasons[0] == "path: expected avx512, got aesni"
    assert by["spr.cfb8.decrypt.128.64"].status == "pass"
    assert by["nochip.gcm.encrypt.128.64"].status == "skip"
    assert "no chip model" in by["nochip.gcm.encrypt.128.64"].reasons[0]
    err = by["hsw.cfb1.decrypt.128.64"]
    assert err.status == "error" and "vc-probe not built" in err.reasons[0]
    assert rep.count("pass") == 11 and rep.count("fail") == 4 and rep.count("error") == 1
    assert rep.count("skip") == 8 and not rep.ok
    assert rep.model_backends["nochip"]["backend"] is None
    assert rep.backends["sde"]["version"] == "9.33.0 external"


def test_junit_structure(report):
    _rep, out = report
    root = ET.parse(out / "junit.xml").getroot()
    assert root.tag == "testsuites"
    assert root.get("tests") == "24" and root.get("failures") == "4" and root.get("errors") == "1"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["spr", "hsw", "nochip"]
    spr = suites[0]
    cases = spr.findall("testcase")
    assert len(cases) == 8
    gcm = next(c for c in cases if c.get("name") == "spr.gcm.encrypt.128.64")
    assert gcm.get("classname") == "sdematrix.spr"
    props = {p.get("name"): p.get("value") for p in gcm.find("properties")}
    assert props == {
        "cpu": "spr",
        "mode": "gcm",
        "direction": "encrypt",
        "key_bits": "128",
        "length": "64",
        "backend": "sde",
        "backend_version": "9.33.0 external",
        "path": "aesni",
        "expected_path": "avx512",
        "legacy_forms": "0",  # executions run as an older instruction (TZCNT as BSF)
        # coverage: what the verdict saw (the SDE double's region total; its
        # function blocks cover the whole region)
        "coverage.instructions": "2130",
        "coverage.function_coverage": "1.0",
    }
    fail = gcm.find("failure")
    assert fail.get("message") == "path: expected avx512, got aesni (+2 more)"
    assert "required by path avx512 but not executed" in fail.text
    assert "seen instead" in fail.text
    assert "by encoding:" in gcm.find("system-out").text
    skip = suites[2].find("testcase").find("skipped")
    assert "no chip model" in skip.get("message")
    err = next(
        c for c in suites[1].findall("testcase") if c.get("name") == "hsw.cfb1.decrypt.128.64"
    )
    assert "vc-probe not built" in err.find("error").get("message")


def test_results_directory(report):
    _rep, out = report
    res = json.loads((out / "results.json").read_text())
    assert res["schema"] == "sdematrix-results/1"
    assert res["counts"] == {"pass": 11, "fail": 4, "error": 1, "skip": 8, "not_run": 0}
    assert res["backends"]["sde"]["available"] is True
    assert res["models"]["spr"]["backend"] == "sde"
    assert res["host"]["python"]
    assert len(res["cells"]) == 24
    c = next(c for c in res["cells"] if c["cell"] == "hsw.cfb8.encrypt.128.64")
    assert c["status"] == "pass" and c["files"]["mix"] == "mix/hsw.cfb8.encrypt.128.64.mix.json"
    assert c["mix_summary"]["by_encoding"]["legacy"] > 0
    cell = json.loads((out / c["files"]["cell"]).read_text())
    assert cell["probe"]["path"] == "aesni"
    assert cell["run"]["probe_argv"][0].endswith("fake-probe")
    assert cell["run"]["artifacts"]["command"].split()[1] == "-hsw"
    mix = json.loads((out / c["files"]["mix"]).read_text())
    assert mix["source"] == "sde" and mix["overall"]["total"] > 0


def test_junit_is_valid_for_an_empty_report(report):
    rep, _ = report
    empty = type(rep)(matrix=rep.matrix, cells=[])
    root = ET.fromstring(junit_xml_string(empty))
    assert root.get("tests") == "0"


def test_unwritable_out_dir(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(OutputDirError, match="not writable"):
        prepare_out_dir(f / "sub")
