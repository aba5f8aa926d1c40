"""The results writer: files written as cells finish, escaping of every value
it embeds (JUnit / HTML / markdown), JUnit written once, work/ kept only for
failures, and an unwritable or full --out is one line, exit 2 (issues 22, 26, 27)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import xml.dom.minidom
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from doubles.fake_matrix import make_matrix

from sdematrix.backends.base import RunResult
from sdematrix.errors import OutputDirError
from sdematrix.evidence.mix import FunctionMix, Mix, MixCounts
from sdematrix.pipeline.run import CellRecord, RunReport
from sdematrix.report import write_html, write_markdown
from sdematrix.report.markdown import _md
from sdematrix.results.junit import junit_xml_string, xml_safe
from sdematrix.results.writer import KEEP_FUNCTIONS, ResultsWriter, write_results
from sdematrix.verdict.cell import Outcome

# every C0 and C1 control, DEL, the two non-characters, and markup / table syntax
HOSTILE = (
    "".join(chr(i) for i in range(0x20))
    + "".join(chr(i) for i in range(0x7F, 0xA0))
    + "\ufffe\uffff"
    + " <b>&amp;\"'|`x`]]>"
)
XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
HTML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")


def _mix(n_functions: int = 60) -> Mix:
    mix = Mix(source="ptrace", meta={"cpuid_mode": "fault"})
    mix.overall = MixCounts(total=1000)
    mix.overall.isa_set.update({"AES": 600, "SSE2": 400})
    mix.overall.width.update({"xmm": 1000})
    mix.overall.encoding.update({"legacy": 1000})
    for i in range(n_functions):
        c = MixCounts(total=1000 - i)
        c.isa_set.update({"AES": 1000 - i})
        mix.functions.append(
            FunctionMix(name=f"f{i}", image="/x/vc-probe", lo=i, hi=i + 1, counts=c)
        )
    return mix


def _report(tmp: Path, title: str = "Sapphire Rapids", reason: str = "x") -> RunReport:
    matrix = make_matrix(tmp)
    matrix.models["spr"] = dataclasses.replace(matrix.models["spr"], title=title)
    cells = matrix.cells(["spr"])
    rep = RunReport(
        matrix=matrix,
        cells=cells,
        started_at="2026-12-01T00:00:00+00:00",
        workdir=str(tmp / "out" / "work"),
    )
    rep.model_backends["spr"] = {"backend": "ptrace", "skip_reason": None}
    for i, c in enumerate(cells):
        status = "fail" if i == 0 else "pass"
        reasons = [f"path: expected avx512, got aesni {reason}", f"second {reason}", "third"]
        res = RunResult(backend="ptrace", status="ok", mix=_mix(), stderr_tail=reason)
        out = Outcome(
            c,
            status,
            reasons if status == "fail" else [],
            path="aesni",
            expected_path="avx512",
            backend="ptrace",
            duration_s=0.5,
            output_tail=reason,
        )
        rep.records.append(CellRecord(c, out, res))
    return rep


def test_xml_safe_replaces_what_xml_forbids():
    s = xml_safe(HOSTILE)
    assert not XML_ILLEGAL.search(s)
    assert "\\x01" in s and "\\x1b" in s and "\\ufffe" in s and "\t\n" in s and "\r" in s


def test_hostile_title_and_reasons_round_trip(tmp_path):
    rep = _report(tmp_path, title=HOSTILE, reason=HOSTILE)
    text = junit_xml_string(rep)
    xml.dom.minidom.parseString(text.encode())  # expat: fails on any illegal character
    root = ET.fromstring(text)
    suite = root.find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    # ElementTree reads attribute whitespace back as spaces, text as is: every
    # visible character of the title survives, the forbidden ones as escapes
    assert "\\x01" in props["title"] and "<b>&amp;" in props["title"]
    fail = root.find(".//failure")
    assert "\\x1b" in fail.text and "second" in fail.text and "third" in fail.text

    out = tmp_path / "out"
    write_results(out, rep)
    assert ET.parse(out / "junit.xml").getroot().get("failures") == "1"
    assert json.loads((out / "results.json").read_text())["models"]["spr"]["title"] == HOSTILE
    page = write_html(out, tmp_path / "r.html")
    html_text = page.read_text()
    assert not HTML_ILLEGAL.search(html_text)
    assert "&lt;b&gt;&amp;amp;" in html_text and "<b>&amp;" not in html_text.split("<body>")[1]

    class Strict(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.data: list[str] = []

        def handle_data(self, d: str) -> None:
            self.data.append(d)

    p = Strict()
    p.feed(html_text)
    assert any("\\x01" in d for d in p.data)
    md = write_markdown(out)
    assert not HTML_ILLEGAL.search(md)


def test_markdown_cells_are_escaped():
    # renders as: a|b c\x01<i> -- one table cell, one line, no markup
    assert _md("a|b\nc\x01<i>") == "a\\|b c\\\\x01&lt;i&gt;"


def test_junit_written_once_and_linked(tmp_path):
    rep = _report(tmp_path)
    out = tmp_path / "out"
    junit = tmp_path / "elsewhere" / "j.xml"
    w = ResultsWriter(out, rep, junit_path=junit)
    w.begin()
    for r in rep.records:
        w.add(r)
    w.finish()
    assert junit.is_file() and (out / "junit.xml").is_file()
    assert os.path.samefile(junit, out / "junit.xml")  # one file, two names
    assert not list(out.rglob("*.tmp")) and not list(junit.parent.glob("*.tmp"))


def test_incremental_files_are_well_formed_after_every_cell(tmp_path):
    rep = _report(tmp_path)
    out = tmp_path / "out"
    w = ResultsWriter(out, rep, flush_interval=0.0)
    w.begin()
    data = json.loads((out / "results.json").read_text())
    assert data["in_progress"] is True and data["cells"] == []
    assert ET.parse(out / "junit.xml").getroot().get("tests") == "0"
    for k, r in enumerate(rep.records, 1):
        w.add(r)
        data = json.loads((out / "results.json").read_text())
        assert len(data["cells"]) == k and len(data["not_run"]) == len(rep.cells) - k
        assert ET.parse(out / "junit.xml").getroot().get("tests") == str(k)
        assert (out / "cells" / f"{r.cell.name}.json").is_file()
        if k == 2:  # a report of a run still writing says so
            assert "run still in progress" in write_html(out, tmp_path / "mid.html").read_text()
    w.finish()
    data = json.loads((out / "results.json").read_text())
    assert data["in_progress"] is False and data["counts"]["fail"] == 1


def test_passing_cells_keep_less(tmp_path):
    """A passing cell's scratch files go and its mix keeps the busiest
    functions only; a failing cell keeps both whole (unless --keep-work)."""
    rep = _report(tmp_path)
    out = tmp_path / "out"
    work = out / "work"
    work.mkdir(parents=True)
    for r in rep.records:
        (work / f"{r.cell.name}.ptrace-trace.txt").write_text("trace\n")
        r.result.artifacts["trace"] = str(work / f"{r.cell.name}.ptrace-trace.txt")
    write_results(out, rep, keep_work=False)
    bad, good = rep.records[0].cell.name, rep.records[1].cell.name
    assert (work / f"{bad}.ptrace-trace.txt").is_file()
    assert not (work / f"{good}.ptrace-trace.txt").exists()
    cell = json.loads((out / "cells" / f"{good}.json").read_text())
    assert cell["run"]["work_removed"] == 1 and "trace" not in cell["run"]["artifacts"]
    full = json.loads((out / "mix" / f"{bad}.mix.json").read_text())
    slim = json.loads((out / "mix" / f"{good}.mix.json").read_text())
    assert len(full["functions"]) == 60
    assert len(slim["functions"]) == KEEP_FUNCTIONS
    assert slim["meta"]["functions_executed"] == 60
    assert slim["meta"]["functions_omitted"] == 60 - KEEP_FUNCTIONS
    assert slim["overall"] == full["overall"]
    # --keep-work keeps everything
    write_results(tmp_path / "keep", rep, keep_work=True)


# Set in the child that test_unwritable_out_is_one_line runs as root.
_NO_DAC = "SDEMATRIX_TEST_WITHOUT_DAC_OVERRIDE"


def test_unwritable_out_is_one_line(tmp_path):
    if os.geteuid() == 0 and not os.environ.get(_NO_DAC):
        # Root writes through any mode bits (CAP_DAC_OVERRIDE): run this
        # very test again in a child whose capability bounding set lacks
        # it, where the directory's mode applies to root as to its owner.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without util-linux setpriv: cannot drop CAP_DAC_OVERRIDE")
        root = Path(__file__).resolve().parents[3]
        child = subprocess.run(
            [
                setpriv,
                "--bounding-set=-dac_override,-dac_read_search",
                "--",
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"{Path(__file__).resolve()}::test_unwritable_out_is_one_line",
            ],
            cwd=root,
            env={**os.environ, _NO_DAC: "1"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert child.returncode == 0 and "1 passed" in child.stdout, child.stdout + child.stderr
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(OutputDirError, match="not writable"):
        write_results(ro / "out", _report(tmp_path))


def test_out_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(OutputDirError, match="not writable"):
        write_results(f, _report(tmp_path))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this host")
def test_full_disk_leaves_no_file_that_claims_success(tmp_path, monkeypatch):
    """ENOSPC while results.json is written: OutputDirError, and the old
    results.json (in progress) stays; no temporary file is left."""
    import builtins

    rep = _report(tmp_path)
    out = tmp_path / "out"
    w = ResultsWriter(out, rep)
    w.begin()
    for r in rep.records:
        w.add(r)
    real_open = builtins.open

    def full_open(file, mode="r", *a, **k):
        if "w" in mode and str(file).endswith(".tmp"):
            return real_open("/dev/full", mode, *a, **k)
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.raises(OutputDirError, match="No space left"):
        w.finish()
    monkeypatch.undo()
    assert json.loads((out / "results.json").read_text())["in_progress"] is True
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
