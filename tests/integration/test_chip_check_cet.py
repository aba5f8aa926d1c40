"""A probe built the way Ubuntu's gcc builds by default (``-fcf-protection=full``:
an ENDBR64 at every function entry, a NOTRACK prefix on jump-table jumps) must
pass the chip check on every model, CET or not: ENDBR64 is a hint NOP on a CPU
without CET (issue 12, "no blind spots in the chip check").

The probe is built once with ``_buildinfo.build_probe(dir/vc-probe,
["-fcf-protection=full"])`` (extra compiler arguments go where the mutation
checks put their ``-D`` flags); the test proves from the ELF that the build
really carries ENDBR64s, then runs ``sdematrix run --backend ptrace`` with
SDEMATRIX_PROBE pointing at it on hsw, snb, icl and p4p (none has CET) and
requires every cell to pass with ENDBR64 among the instructions it judged.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from _by_path import buildinfo
from doubles.sdematrix_cli import (
    SHIPPED_MATRIX,
    cli_env,
    ptrace_skip_reason,
    read_cells,
    read_junit,
    run_cli,
)
from elftools.elf.elffile import ELFFile

from sdematrix.evidence.decode import chip_check, decode_many
from sdematrix.spec.matrix_file import load_matrix

# one xdist worker builds the probe once (ci/test.sh runs --dist loadgroup)
pytestmark = pytest.mark.xdist_group("cet-probe")

CET_FLAGS = ["-fcf-protection=full"]
CPUS = ["hsw", "snb", "icl", "p4p"]
# Library entry points the probe calls: each must start with ENDBR64 in a CET build.
ENTRY_POINTS = ("vc_tier_get", "vc_cfb_key_new")


def _compiler_takes(bi: ModuleType, flags: list[str]) -> str | None:
    """None when the C compiler accepts `flags`, else its complaint."""
    proc = subprocess.run(
        [*bi.compiler(), *flags, "-x", "c", "-c", "-o", "/dev/null", "-"],
        input="int f(void) { return 0; }\n",
        capture_output=True,
        text=True,
        check=False,
    )
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


@pytest.fixture(scope="session")
def cet_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bi = buildinfo()
    if not bi.have_compiler() or not bi.probe_sources():
        pytest.skip(f"no C compiler ({bi.compiler()[0]}) or no probe sources on this host")
    why = _compiler_takes(bi, CET_FLAGS)
    if why is not None:
        pytest.skip(f"the C compiler {bi.compiler()[0]} rejects {' '.join(CET_FLAGS)}: {why}")
    dest = tmp_path_factory.mktemp("probe-cet") / "vc-probe"
    bi.build_probe(dest, CET_FLAGS)
    return dest


def _text_insns(path: Path) -> Iterator[tuple[str, int]]:
    """(mnemonic, address) of every instruction of the ELF's .text, decoded
    linearly (gcc puts no data in .text on x86-64)."""
    with path.open("rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        assert text is not None, f"{path} has no .text"
        for insn in decode_many(text.data(), text["sh_addr"]):
            yield insn.mnemonic, insn.address


def _symbols(path: Path) -> dict[str, int]:
    with path.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        assert symtab is not None, f"{path} is stripped"
        return {s.name: s["st_value"] for s in symtab.iter_symbols() if s.name}


def test_cet_build_really_has_endbr64(cet_probe: Path) -> None:
    insns = list(_text_insns(cet_probe))
    endbr = {addr for mnem, addr in insns if mnem == "ENDBR64"}
    # one per function with external linkage or address taken, at least
    assert len(endbr) >= 50, f"only {len(endbr)} ENDBR64 in {cet_probe}"
    syms = _symbols(cet_probe)
    for name in ENTRY_POINTS:
        assert syms[name] in endbr, f"{name} does not start with ENDBR64"


def test_cet_probe_passes_models_without_cet(cet_probe: Path, tmp_path: Path) -> None:
    why = ptrace_skip_reason(SHIPPED_MATRIX, CPUS)
    if why is not None:
        pytest.skip(why)
    matrix = load_matrix(SHIPPED_MATRIX)
    for name in CPUS:  # the point of the test: none of these models has CET
        assert not {"CET_IBT", "CET_SS"} & matrix.models[name].isa, name
    out = tmp_path / "out"
    junit = out / "junit.xml"
    proc = run_cli(
        "run",
        "--matrix",
        str(SHIPPED_MATRIX),
        "--backend",
        "ptrace",
        "--cpu",
        ",".join(CPUS),
        "--jobs",
        "2",
        "--timeout",
        "240",
        "--out",
        str(out),
        "--junit",
        str(junit),
        env=cli_env(SDEMATRIX_PROBE=str(cet_probe)),
        timeout=900,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    cells = read_cells(out)
    cells.pop("")
    names = {c.name for c in matrix.cells(CPUS)}
    assert set(cells) == names, proc.stderr[-3000:]
    failed = {n: c["reasons"] for n, c in cells.items() if c["status"] != "pass"}
    assert not failed, json.dumps(failed, indent=1)[:4000]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {n for n, c in read_junit(junit).items() if c.status == "pass"} == names
    # ENDBR64 ran inside every judged region (so the pass is not an absence)
    for name in names:
        mix = json.loads((out / cells[name]["files"]["mix"]).read_text())
        assert mix["overall"]["by_mnemonic"].get("ENDBR64", 0) > 0, name


def test_endbr64_alone_on_each_model() -> None:
    """The same verdict from the decoder alone, for every shipped model."""
    matrix = load_matrix(SHIPPED_MATRIX)
    endbr64 = next(decode_many(bytes.fromhex("f30f1efa")))
    for model in matrix.models.values():
        assert chip_check(endbr64, model) is None, model.name
