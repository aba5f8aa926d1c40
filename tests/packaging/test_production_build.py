"""What users run carries no benchmark harness and no mutation fault switch.

- The benchmark loops (native/bench/: OpenSSL through dlopen, the AES issue-rate
  and zmm CTR loops, vc_bench_*) are built only into vaescrypt._bench, which only
  `python -m vaescrypt.bench` imports.  `import vaescrypt` must not load it,
  and the production extension vaescrypt._native must not contain it: no
  vc_bench_* in its cffi lib, none in its dynamic symbol table (`nm -D`), no
  "libcrypto" string and no dlopen import.
- The mutation faults are test-only sources (tests/data/mutation/fault_*.c)
  that only the test suite's fault builds of the probe link in
  (tests/doubles/fault_builds.py, tests/integration/test_mutation.py); no library source
  mentions a fault.  A fault source exports the marker `vc_fault_build`
  (tests/data/mutation/fault_marker.h); the production extension and the
  shipped vc-probe must have neither the marker nor any "VC_FAULT" bytes, and
  the marker must appear in every fault build (so the check has teeth).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _by_path import buildinfo
from doubles import fault_builds

ROOT = Path(__file__).resolve().parents[2]


def _nm(path: Path, *args: str) -> list[str]:
    nm = shutil.which("nm")
    assert nm is not None, "nm (binutils) is needed: ci/bootstrap.sh installs it"
    proc = subprocess.run([nm, *args, str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"nm {' '.join(args)} {path} failed: {proc.stderr.strip()}"
    return proc.stdout.splitlines()


def _symbols(lines: list[str]) -> set[str]:
    return {ln.split()[-1] for ln in lines if ln.strip()}


def _native_so() -> Path:
    spec = importlib.util.find_spec("vaescrypt._native")
    assert spec is not None and spec.origin, "vaescrypt._native is not built"
    return Path(spec.origin)


def test_import_vaescrypt_loads_no_benchmark_code() -> None:
    code = (
        "import json, sys, vaescrypt\n"
        "vaescrypt.AESGCM(bytes(16)).encrypt(bytes(12), b'x', None)\n"
        "lib = vaescrypt._native.lib\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith('vaescrypt')),"
        " 'lib': sorted(n for n in dir(lib) if n.startswith('vc_'))}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert "vaescrypt._native" in seen["modules"]
    assert "vc_gcm_encrypt" in seen["lib"]  # the listing works at all
    assert "vaescrypt._bench" not in seen["modules"]
    assert "vaescrypt.bench" not in seen["modules"]
    assert [n for n in seen["lib"] if n.startswith("vc_bench")] == []


def test_native_extension_has_no_bench_or_fault_symbols() -> None:
    so = _native_so()
    dynsyms = _symbols(_nm(so, "-D"))
    assert "vc_gcm_encrypt" in dynsyms  # nm sees the library's exports
    assert sorted(s for s in dynsyms if s.startswith("vc_bench")) == []
    assert "vc_fault_build" not in dynsyms
    assert not any(s.startswith("dlopen") for s in dynsyms), "production extension imports dlopen"
    data = so.read_bytes()
    assert b"libcrypto" not in data
    assert b"VC_FAULT" not in data


def test_bench_extension_carries_the_harness() -> None:
    """The harness moved, it did not vanish: vaescrypt._bench exports it."""
    spec = importlib.util.find_spec("vaescrypt._bench")
    assert spec is not None and spec.origin, (
        "vaescrypt._bench is not built (python3 setup.py build_ext --inplace)"
    )
    dynsyms = _symbols(_nm(Path(spec.origin), "-D"))
    wanted = {
        "vc_bench_lib",
        "vc_bench_keysetup",
        "vc_bench_openssl",
        "vc_bench_openssl_version",
        "vc_bench_aes_issue",
        "vc_bench_ctr_loop",
    }
    assert wanted <= dynsyms
    assert "vc_fault_build" not in dynsyms


def test_shipped_probe_is_not_a_fault_build() -> None:
    probe = ROOT / "src" / "sdematrix" / "_bin" / "vc-probe"
    if not probe.exists():
        pytest.skip(f"{probe} is not built (python3 setup.py build_ext --inplace builds it)")
    assert "vc_fault_build" not in _symbols(_nm(probe))
    assert b"VC_FAULT" not in probe.read_bytes()


def test_production_sources_and_flags() -> None:
    bi = buildinfo()
    lib_srcs = bi.library_sources(ROOT)
    fault_srcs = {f.source for f in fault_builds.FAULTS.values()}
    assert fault_srcs and not fault_srcs & set(lib_srcs)
    # no library source or header knows of a fault (the faults wrap symbols)
    for src in [*lib_srcs, *(ROOT / "native").rglob("*.h"), *(ROOT / "dispatch").rglob("*.h")]:
        text = src.read_text()
        assert "VC_FAULT" not in text and "vc_fault" not in text, f"{src} carries fault code"
    assert not [s for s in lib_srcs if "bench" in s.relative_to(ROOT).parts or "bench" in s.name]
    assert [s.name for s in bi.bench_sources(ROOT)] == ["bench.c"]
    assert not [f for f in bi.our_cflags() if "VC_FAULT" in f]
    # nothing in the library's headers or sources pulls the bench header in
    for src in [*lib_srcs, *(ROOT / "native" / "include").glob("*.h")]:
        assert "vc_bench" not in src.read_text(), f"{src} refers to the benchmark harness"


@pytest.mark.parametrize("fault", [None, *sorted(fault_builds.FAULTS)])
def test_fault_marker_appears_exactly_in_fault_builds(fault: str | None, tmp_path: Path) -> None:
    """The objects of a probe built like the mutation tests build it: the
    library's never carry the marker, a fault build's fault source does."""
    bi = buildinfo()
    if not bi.have_compiler():
        pytest.fail("no C compiler: the production build check needs one (ci/bootstrap.sh)")
    extra = [fault_builds.FAULTS[fault].source] if fault else []
    objs = bi.compile_objects([*bi.library_sources(ROOT), *extra], tmp_path, root=ROOT)
    lib_objs, fault_objs = objs[: len(objs) - len(extra)], objs[len(objs) - len(extra) :]
    for obj in lib_objs:
        assert "vc_fault_build" not in _symbols(_nm(obj)), obj
        assert b"VC_FAULT" not in obj.read_bytes(), obj
    for obj in fault_objs:
        assert "vc_fault_build" in _symbols(_nm(obj))
        assert f"VC_FAULT_BUILD: {fault}".encode() in obj.read_bytes()
    assert len(fault_objs) == (1 if fault else 0)
