"""Mutation checks ("teeth", docs/MUTATION.md): a probe built with one
compile-time fault must make `sdematrix run --backend ptrace` fail exactly the
cells the fault touches, with reasons that name what went wrong; the same
cells pass with a probe built the same way without a fault.

Each probe variant is built once per session by
``doubles.fault_builds.build_probe(bi, dir/vc-probe, fault)``: the library plus
the fault's test-only source (tests/data/mutation/fault_*.c) linked with
``-Wl,--wrap=`` for the symbols it replaces (the file name matters: the
signatures are scoped to the image ``vc-probe*``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _by_path import buildinfo
from doubles import fault_builds
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    JunitCase,
    cli_env,
    ptrace_skip_reason,
    read_cells,
    read_junit,
    run_cli,
)

from sdematrix.spec.matrix_file import VAES_PATHS, load_matrix
from sdematrix.spec.models import Matrix

# one xdist worker builds the four probes once (ci/test.sh runs --dist loadgroup)
pytestmark = pytest.mark.xdist_group("mutation")

XCR0_MATRIX = Path(__file__).resolve().parent.parent / "data" / "mutation" / "xcr0_os.yaml"
XCR0_MODEL = "spr_os_ymm"

ProbeFactory = Callable[[str | None], Path]


@pytest.fixture(scope="session")
def probe_variant(tmp_path_factory: pytest.TempPathFactory) -> ProbeFactory:
    """fault name (e.g. "CFB8_VAES") or None -> a vc-probe built with it."""
    bi = buildinfo()
    if not bi.have_compiler() or not bi.probe_sources():
        pytest.skip("no C compiler or no probe sources")
    built: dict[str, Path] = {}

    def get(fault: str | None) -> Path:
        key = fault or "none"
        if key not in built:
            dest = tmp_path_factory.mktemp(f"probe-{key.lower()}") / "vc-probe"
            fault_builds.build_probe(bi, dest, fault)
            built[key] = dest
        return built[key]

    return get


def _need(matrix: Path, models: list[str]) -> None:
    why = ptrace_skip_reason(matrix, models)
    if why is not None:
        pytest.skip(why)


class Run:
    """One `sdematrix run --backend ptrace` and what it wrote."""

    def __init__(self, probe: Path, matrix: Path, cpus: list[str], out: Path) -> None:
        junit = out / "mutation-junit.xml"
        self.proc = run_cli(
            "run",
            "--matrix",
            str(matrix),
            "--backend",
            "ptrace",
            "--cpu",
            ",".join(cpus),
            "--jobs",
            "2",
            "--timeout",
            "120",
            "--out",
            str(out),
            "--junit",
            str(junit),
            env=cli_env(SDEMATRIX_PROBE=str(probe)),
        )
        assert "Traceback" not in self.proc.stderr, self.proc.stderr
        self.out = out
        self.matrix: Matrix = load_matrix(matrix)
        self.names = [c.name for c in self.matrix.cells(cpus)]
        self.cells: dict[str, dict[str, Any]] = read_cells(out)
        self.doc = self.cells.pop("")
        self.junit: dict[str, JunitCase] = read_junit(junit)

    @property
    def code(self) -> int:
        return self.proc.returncode

    def status_of(self, status: str) -> set[str]:
        return {n for n, c in self.cells.items() if c["status"] == status}

    def check_shape(self) -> None:
        """Every cell asked for was run, judged, and reported the same way in
        results.json and the JUnit file; no cell is an error or a skip."""
        assert sorted(self.cells) == sorted(self.names), self.proc.stderr[-3000:]
        assert set(self.junit) == set(self.names)
        for name, c in self.cells.items():
            assert c["status"] in ("pass", "fail"), (name, c["status"], c["reasons"])
            assert self.junit[name].status == c["status"], name
            if c["status"] == "fail":
                assert self.junit[name].message.startswith(c["reasons"][0]), name
                for r in c["reasons"]:
                    assert r in self.junit[name].text, (name, r)
        assert self.doc["interrupted"] is False and self.doc["not_run"] == []


def _match_any(pattern: str, reasons: list[str]) -> re.Match[str]:
    for r in reasons:
        m = re.fullmatch(pattern, r)
        if m:
            return m
    raise AssertionError(f"no reason matches {pattern!r}:\n" + "\n".join(reasons))


# ------------------------------------------------------------ the file --


def test_xcr0_matrix_is_the_shipped_matrix_plus_one_model() -> None:
    """The test-only matrix reuses the shipped seed, workloads, signatures and
    classes, and its model is the shipped spr with only the OS state changed."""
    shipped = load_matrix(SHIPPED_MATRIX)
    m = load_matrix(XCR0_MATRIX)
    assert (m.seed, m.workloads, m.signatures) == (
        shipped.seed,
        shipped.workloads,
        shipped.signatures,
    )
    assert list(m.models) == [XCR0_MODEL]
    mine, spr = m.models[XCR0_MODEL], shipped.models["spr"]
    assert mine.xcr0 == 0x7 and spr.xcr0 & 0xE6 == 0xE6
    assert (mine.vendor, mine.isa, mine.max_vector_bits) == (
        spr.vendor,
        spr.isa,
        spr.max_vector_bits,
    )
    a = {(c.leaf, c.subleaf): c for c in mine.cpuid}
    b = {(c.leaf, c.subleaf): c for c in spr.cpuid}
    assert set(a) == set(b)
    changed = {k for k in a if a[k] != b[k]}
    assert changed == {(7, 0), (0xD, 0), (0xD, 1)}
    assert a[(7, 0)].ecx == b[(7, 0)].ecx & ~(1 << 4)  # OSPKE only
    assert a[(0xD, 0)].ebx == a[(0xD, 1)].ebx == 832  # XSAVE area of x87+SSE+AVX
    for key in shipped.expected:
        if key[0] == "spr":
            want = "vaes_avx2" if shipped.expected[key] in VAES_PATHS else shipped.expected[key]
            assert m.expected[(XCR0_MODEL, key[1], key[2])] == want, key


# ------------------------------------------------------------- control --

CONTROL_CPUS = ["spr", "gnr256", "icl"]


def test_no_fault_passes_the_cells_the_faults_break(
    probe_variant: ProbeFactory, tmp_path: Path
) -> None:
    _need(SHIPPED_MATRIX, CONTROL_CPUS)
    run = Run(probe_variant(None), SHIPPED_MATRIX, CONTROL_CPUS, tmp_path / "out")
    assert run.code == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    run.check_shape()
    assert run.status_of("pass") == set(run.names)


def test_no_fault_passes_the_xcr0_model(probe_variant: ProbeFactory, tmp_path: Path) -> None:
    _need(XCR0_MATRIX, [XCR0_MODEL])
    run = Run(probe_variant(None), XCR0_MATRIX, [XCR0_MODEL], tmp_path / "out")
    assert run.code == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    run.check_shape()
    assert run.status_of("pass") == set(run.names)
    gcm = [c for c in run.cells.values() if c["mode"] == "gcm"]
    assert gcm and all(c["path"] == "vaes_avx2" for c in gcm)


# -------------------------------------------------------------- faults --


def test_fault_cfb8_vaes_fails_exactly_the_cfb8_cells(
    probe_variant: ProbeFactory, tmp_path: Path
) -> None:
    cpus = ["spr", "gnr256"]
    _need(SHIPPED_MATRIX, cpus)
    run = Run(probe_variant("CFB8_VAES"), SHIPPED_MATRIX, cpus, tmp_path / "out")
    assert run.code == 1, run.proc.stderr[-3000:]
    run.check_shape()
    cfb8 = {n for n in run.names if ".cfb8." in n}
    assert {n.split(".")[2] for n in cfb8} == {"encrypt", "decrypt"}
    assert run.status_of("fail") == cfb8
    # avx512 where it is allowed; avx10_256 carries no cfb8 code, so the
    # fault lands on vaes_avx2 on the AVX10/256 part
    wrong = {"spr": "avx512", "gnr256": "vaes_avx2"}
    for name in cfb8:
        c = run.cells[name]
        got = wrong[c["cpu"]]
        assert got in VAES_PATHS
        assert (c["expected_path"], c["path"]) == ("aesni", got)
        assert c["reasons"][0] == f"path: expected aesni, got {got}"
        width = "zmm" if got == "avx512" else "ymm"
        m = _match_any(
            r"forbidden for path aesni but executed (\d+)x in scope vc-probe\*: "
            rf"\{{mnemonic=VAES\*, width={width}\}} -- "
            rf"VAESENC\((?:vex|evex),{width}\) x(\d+) in (vc_\w+_cfb8) \(vc-probe\).*",
            c["reasons"],
        )
        # 16 bytes of AES-128 CFB8: one block (9 VAESENC + 1 VAESENCLAST) per byte
        assert int(m.group(1)) == 16 * 10 and int(m.group(2)) == 16 * 9
        assert m.group(3).startswith(f"vc_{got}_")
        assert c["digest"] == c["expected_digest"]  # a right answer by the wrong path
        assert run.junit[name].message.startswith(f"path: expected aesni, got {got}")
    assert "avx512!=aesni" in run.proc.stdout and "vaes_avx2!=aesni" in run.proc.stdout


def test_fault_avx10_zmm_fails_the_avx10_256_gcm_cells(
    probe_variant: ProbeFactory, tmp_path: Path
) -> None:
    cpus = ["spr", "gnr256", "icl"]
    _need(SHIPPED_MATRIX, cpus)
    run = Run(probe_variant("AVX10_ZMM"), SHIPPED_MATRIX, cpus, tmp_path / "out")
    assert run.code == 1, run.proc.stderr[-3000:]
    run.check_shape()
    gcm256 = {n for n in run.names if n.split(".")[:2] in (["gnr256", "gcm"], ["icl", "gcm"])}
    assert len(gcm256) == 8
    assert run.status_of("fail") == gcm256  # spr (avx512) and every non-GCM cell pass
    for name in gcm256:
        c = run.cells[name]
        # the path is the right one; what it executed is not
        assert c["path"] == c["expected_path"] == "avx10_256"
        assert not any(r.startswith("path:") for r in c["reasons"])
        m = _match_any(
            r"forbidden for path avx10_256 but executed 1x in scope vc-probe\*: \{width=zmm\} -- "
            r"VPXORQ\(evex,zmm\) x1 in (vc_avx10_256_\w+) \(vc-probe\)",
            c["reasons"],
        )
        fn = m.group(1)
        if c["cpu"] == "gnr256":  # no 512-bit vectors at all: the chip check fires too
            _match_any(
                rf"chip check \(gnr256\): VPXORQ {fn} in vc-probe at 0x[0-9a-f]+ \[[0-9a-f]+\]: "
                r"zmm operand \(512-bit\) exceeds model gnr256's 256-bit vectors",
                c["reasons"],
            )
        else:  # icl has zmm; only the avx10_256 signature forbids it
            assert not any(r.startswith("chip check") for r in c["reasons"]), c["reasons"]
        assert "VPXORQ" in run.junit[name].text


def test_fault_ignore_xcr0_picks_a_path_the_os_cannot_run(
    probe_variant: ProbeFactory, tmp_path: Path
) -> None:
    _need(XCR0_MATRIX, [XCR0_MODEL])
    run = Run(probe_variant("IGNORE_XCR0"), XCR0_MATRIX, [XCR0_MODEL], tmp_path / "out")
    assert run.code == 1, run.proc.stderr[-3000:]
    run.check_shape()
    wide = {n for n in run.names if run.matrix.expected[tuple(n.split(".")[:3])] == "vaes_avx2"}
    assert {tuple(n.split(".")[1:3]) for n in wide} == {
        ("gcm", "encrypt"),
        ("gcm", "decrypt"),
        ("cfb128", "decrypt"),
    }
    assert run.status_of("fail") == wide  # the serial (aesni) cells are untouched
    for name in wide:
        c = run.cells[name]
        assert c["reasons"][0] == "path: expected vaes_avx2, got avx512"
        _match_any(
            r"forbidden for path vaes_avx2 but executed \d+x in scope vc-probe\*: \{encoding=evex\}"
            r" -- .*\(evex,zmm\) x\d+ in vc_avx512_\w+ \(vc-probe\).*",
            c["reasons"],
        )
        # observable because the tracer answered XGETBV(0) with the model's 0x7
        probe = json.loads((run.out / c["files"]["cell"]).read_text())["probe"]
        assert probe["xcr0"] == "0x7"
        assert "avx512f" in probe["features"] and "os_evex" not in probe["features"]
        meta = json.loads((run.out / c["files"]["mix"]).read_text())["meta"]
        assert meta["xgetbv_emulated"] >= 1
