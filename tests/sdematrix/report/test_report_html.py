"""sdematrix.report.html: the self-contained HTML report, checked as a DOM.

Two layers: the HTML as written (parsed with the stdlib parser) and the DOM
as headless Chromium builds it (``--dump-dom``), plus a screenshot kept as a
test artifact (``build/test-artifacts/report.png``).  The Chromium tests skip
when /usr/bin/chromium is absent (``apt-get install -y chromium``).  One test
runs the real matrix runner on the ptrace backend (skips if that cannot run
here) and checks the report of a real run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from data.results import resultsgen
from doubles.sdematrix_cli import ptrace_skip_reason, run_cli

from sdematrix.errors import OutputDirError
from sdematrix.report import ResultsDirError, load_results, write_html
from sdematrix.report.html import anchor

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "build" / "test-artifacts"


class Dom(HTMLParser):
    """Start tags with their attributes, in document order (+ text per id'd element)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str | None = None, cls: str | None = None) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.tags
            if (tag is None or t == tag) and (cls is None or cls in a.get("class", "").split())
        ]

    def ids(self) -> set[str]:
        return {a["id"] for _t, a in self.tags if "id" in a}


def expected_squares(results_dir: Path) -> dict[str, tuple[str, str, str]]:
    """data-cell -> (data-path, data-expected, data-status), computed from the
    results files directly (not through the report's grouping code)."""
    import json

    data = json.loads((results_dir / "results.json").read_text())
    by: dict[str, list[dict]] = {}
    for c in data["cells"]:
        by.setdefault(f"{c['cpu']}.{c['mode']}.{c['direction']}", []).append(c)
    rank = ["fail", "error", "not_run", "skip", "pass"]
    out = {}
    for key, cs in by.items():
        paths = list(dict.fromkeys(c["path"] for c in cs if c["path"]))
        path = "" if not paths else paths[0] if len(paths) == 1 else "mixed"
        exps = list(dict.fromkeys(c["expected_path"] for c in cs if c["expected_path"]))
        status = min((c["status"] for c in cs), key=rank.index)
        out[key] = (path, exps[0] if exps else "", status)
    return out


@pytest.fixture(scope="module")
def changed_dir(tmp_path_factory):
    return resultsgen.changed(tmp_path_factory.mktemp("changed"))


@pytest.fixture(scope="module")
def report(changed_dir, tmp_path_factory):
    out = write_html(changed_dir, tmp_path_factory.mktemp("html") / "report.html")
    return out


# --------------------------------------------------------------------------
# The HTML as written
# --------------------------------------------------------------------------


def test_self_contained(report):
    text = report.read_text()
    dom = Dom(text)
    tags = {t for t, _a in dom.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert "iframe" not in tags and "object" not in tags
    for _t, a in dom.tags:
        for k in ("src", "href", "action", "srcset"):
            v = a.get(k)
            assert v is None or v.startswith("#"), (k, v)
    assert "@import" not in text and "url(" not in text
    # the only URL in the file is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}


def test_heatmap_cells(report, changed_dir):
    dom = Dom(report.read_text())
    cells = dom.find("td", "hm-cell")
    want = expected_squares(changed_dir)
    got = {a["data-cell"]: (a["data-path"], a["data-expected"], a["data-status"]) for a in cells}
    assert len(cells) == len(want) == 56
    assert got == want
    assert got["spr.gcm.encrypt"] == ("mixed", "avx512", "fail")
    assert got["icl.cfb128.decrypt"] == ("avx512", "avx10_256", "fail")
    assert got["zen4.cfb8.encrypt"] == ("", "aesni", "skip")
    spr = next(a for a in cells if a["data-cell"] == "spr.gcm.encrypt")
    assert spr["data-workloads"] == "2" and spr["data-paths"] == "avx512 aesni"
    assert "st-fail" in spr["class"].split()
    # every square links to a detail section that exists
    ids = dom.ids()
    links = [a["href"] for a in dom.find("a") if a.get("href", "").startswith("#cell-")]
    assert len(links) >= 56 and all(h[1:] in ids for h in links)
    for key in want:
        assert anchor(key) in ids


def test_detail_sections(report, changed_dir):
    text = report.read_text()
    dom = Dom(text)
    res = load_results(changed_dir)
    sections = dom.find("section", "detail")
    assert len(sections) == 56
    icl = next(a for a in sections if a["data-cell"] == "icl.cfb128.decrypt")
    assert "st-fail" in icl["class"]
    # the icl failure's section holds its violation and reasons
    start = text.index(f'id="{anchor("icl.cfb128.decrypt")}"')
    end = text.index("<section", start)
    chunk = text[start:end]
    assert "Chip-check violations (1)" in chunk and "62f27d48dcc1" in chunk
    assert "forbidden by path avx10_256" in chunk
    # charts: the ISA-set bars carry the mix's own numbers
    cell = res.cell("icl.cfb128.decrypt.256.512")
    sets = cell.mix.overall.isa_set
    bars = {
        a["data-label"]: int(a["data-value"])
        for a in Dom(chunk).find("rect", "bar")
        if "data-segment" not in a
    }
    assert bars["AVX512_VAES_512"] == sets["AVX512_VAES_512"] == 128
    seg = {
        (a["data-label"], a["data-segment"]): int(a["data-value"])
        for a in Dom(chunk).find("rect", "bar")
        if "data-segment" in a
    }
    forms = cell.mix.overall.forms
    assert seg[("zmm", "evex")] == sum(
        n for (_m, e, w), n in forms.items() if (e, w) == ("evex", "zmm")
    )
    assert "vc_avx512_cfb128_dec" in chunk  # top functions
    # the error's output tail and run metadata
    assert "Segmentation fault (core dumped)" in text
    assert "9.33.0 external" in text and "AMD EPYC 9654" in text


def test_missing_mix_and_bad_input(changed_dir, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(changed_dir, d)
    (d / "mix" / "snb.gcm.encrypt.256.512.mix.json").unlink()
    text = write_html(d, tmp_path / "r.html").read_text()
    assert "Report warnings" in text and "snb.gcm.encrypt.256.512.mix.json is missing" in text
    assert "top ISA sets from the summary" in text
    with pytest.raises(ResultsDirError, match="not an sdematrix results directory"):
        write_html(tmp_path, tmp_path / "x.html")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputDirError, match="cannot write HTML report"):
        write_html(changed_dir, blocker / "sub" / "r.html")


def test_deterministic(changed_dir, tmp_path):
    a = write_html(changed_dir, tmp_path / "a.html").read_text()
    b = write_html(changed_dir, tmp_path / "b.html").read_text()
    assert a == b


# --------------------------------------------------------------------------
# Headless Chromium
# --------------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (apt-get install -y chromium)"
)


def _chromium(args: list[str], page: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        *args,
        page.resolve().as_uri(),
    ]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, cwd=tmp)


def browser_dom(page: Path, tmp: Path) -> Dom:
    p = _chromium(["--dump-dom"], page, tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    return Dom(p.stdout)


def screenshot(page: Path, tmp: Path, name: str) -> Path:
    png = tmp / name
    p = _chromium([f"--screenshot={png}", "--window-size=1400,2000"], page, tmp)
    assert p.returncode == 0 and png.is_file(), p.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(png, ARTIFACTS / name)
    return png


@needs_chromium
def test_browser_dom_and_screenshot(report, changed_dir, tmp_path):
    dom = browser_dom(report, tmp_path)
    cells = dom.find("td", "hm-cell")
    want = expected_squares(changed_dir)
    assert len(cells) == len(want)
    assert {a["data-cell"]: a["data-path"] for a in cells} == {k: v[0] for k, v in want.items()}
    assert len(dom.find("svg", "chart")) >= 2 * 50
    screenshot(report, tmp_path, "report.png")


def _real_run(out: Path) -> Path:
    """`sdematrix run` on the ptrace backend for snb (runs on any AES-NI
    host; spr too where this host can run it): a real results directory.
    Whether the backend can run here is decided up front; once it runs, a
    crash or a missing results.json fails the test."""
    matrix = REPO / "sde_matrix.yaml"
    cpus = ["snb", "spr"]
    if ptrace_skip_reason(matrix, cpus) is not None:  # one trial trace when both run
        cpus = ["snb"]
        why = ptrace_skip_reason(matrix, cpus)
        if why is not None:
            pytest.skip(f"sdematrix run --backend ptrace cannot run here: {why}")
    p = run_cli(
        "run",
        "--backend",
        "ptrace",
        "--cpu",
        ",".join(cpus),
        "--jobs",
        "1",
        "--timeout",
        "120",
        "--out",
        str(out),
        cwd=REPO,
        timeout=600,
    )
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert (out / "results.json").is_file(), p.stderr[-2000:]
    return out


@needs_chromium
def test_real_run_report(tmp_path):
    out = _real_run(tmp_path / "run")
    res = load_results(out)
    assert res.cells and not res.all_warnings()
    page = write_html(out, tmp_path / "real.html")
    dom = browser_dom(page, tmp_path)
    cells = dom.find("td", "hm-cell")
    want = expected_squares(out)
    assert {
        a["data-cell"]: (a["data-path"], a["data-expected"], a["data-status"]) for a in cells
    } == want
    ran = [c for c in res.cells if c.mix is not None]
    assert ran  # the charts show the real mix's numbers
    c = ran[0]
    text = page.read_text()
    start = text.index(f'id="{anchor(c.name)}"')
    chunk = Dom(text[start : text.index("</div>", text.index("</svg>", start))])
    bars = {
        a["data-label"]: int(a["data-value"])
        for a in chunk.find("rect", "bar")
        if "data-segment" not in a
    }
    top = c.mix.overall.isa_set.most_common(1)[0]
    assert bars[top[0]] == top[1]
    screenshot(page, tmp_path, "report-real.png")
