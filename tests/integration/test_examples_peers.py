"""Other people's dispatchers, judged by ``sdematrix exec --expect``
(examples/openssl_cfb, examples/numpy_dispatch; README "Other people's
dispatchers").

* OpenSSL 4.0 inside the `cryptography` wheel: CFB128 decryption runs
  ``ossl_aes_cfb128_vaes_dec`` (AVX512_VAES_512) under spr and plain AES-NI
  (``aesni_encrypt``) under hsw; CFB8 executes no VAES instruction anywhere.
* numpy's ``__cpu_dispatch__``: baseline only on nhm, X86_V3 on hsw,
  AVX512_SPR on spr; on p4p (below numpy's X86_V2 baseline) the import fails
  with numpy's own error, and the chip check names the X86_V2 instruction
  numpy's module ran before its check did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doubles.sdematrix_cli import read_models

from sdematrix.backends.ptrace.backend import PtraceBackend

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"

_ptrace_why = PtraceBackend().unavailable_reason()
pytestmark = pytest.mark.skipif(
    _ptrace_why is not None, reason=f"ptrace backend unavailable here: {_ptrace_why}"
)


def _sdematrix(
    *args: str, timeout: float = 1200, env_set: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # OPENBLAS_CORETYPE (set machine-wide on some hosts) forces numpy's
    # bundled OpenBLAS onto one kernel set whatever CPUID says: these tests
    # ask what the programs' own dispatchers choose, so it is not inherited
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env |= {"PYTHONPATH": str(ROOT / "src"), **(env_set or {})}
    return subprocess.run(
        [sys.executable, "-m", "sdematrix", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _functions(out: Path, model: str, image: str) -> dict[str, dict[str, int]]:
    mix = json.loads((out / model / "mix.json").read_text())
    return {f["name"]: f["by_isa_set"] for f in mix["functions"] if image in f["image"]}


def _verdicts(stderr: str) -> dict[str, str]:
    return {ln.split()[2]: ln for ln in stderr.splitlines() if ln.startswith("sdematrix exec: ")}


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError as e:  # the test extra installs it: missing is a broken setup
        pytest.fail(f"{module} not importable ({e}); pip install -e '.[test]'")


def test_openssl_cfb128_decrypt_vaes_on_spr_aesni_on_hsw(tmp_path: Path) -> None:
    _need("cryptography")
    d = EXAMPLES / "openssl_cfb"
    native = subprocess.run(
        [sys.executable, "-I", str(d / "cfb.py"), "cfb128-decrypt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = tmp_path / "out"
    p = _sdematrix(
        "exec",
        "--cpu",
        "hsw,spr",
        "--expect",
        str(d / "cfb128.expect.yaml"),
        "--out",
        str(out),
        "--",
        sys.executable,
        "-I",
        str(d / "cfb.py"),
        "cfb128-decrypt",
    )
    assert p.returncode == 0, p.stderr
    res = read_models(out)
    for m in ("hsw", "spr"):
        assert res[m]["status"] == "pass" and res[m]["violations"] == [], res[m]["reasons"]
        assert (out / m / "stdout").read_text() == native
    v = _verdicts(p.stderr)
    assert "1 of 2 expectations applied" in v["hsw"] and "1 of 2 expectations applied" in v["spr"]
    spr = _functions(out, "spr", "_rust")
    assert spr["ossl_aes_cfb128_vaes_dec"].get("AVX512_VAES_512", 0) > 0, spr.get(
        "ossl_aes_cfb128_vaes_dec"
    )
    hsw = _functions(out, "hsw", "_rust")
    assert "ossl_aes_cfb128_vaes_dec" not in hsw
    assert hsw["aesni_encrypt"].get("AES", 0) > 0
    assert not any(k.startswith(("VAES", "AVX512_VAES")) for sets in hsw.values() for k in sets)


def test_openssl_cfb8_takes_no_vaes(tmp_path: Path) -> None:
    _need("cryptography")
    d = EXAMPLES / "openssl_cfb"
    out = tmp_path / "out"
    p = _sdematrix(
        "exec",
        "--cpu",
        "spr",
        "--expect",
        str(d / "cfb8.expect.yaml"),
        "--out",
        str(out),
        "--",
        sys.executable,
        "-I",
        str(d / "cfb.py"),
        "cfb8-decrypt",
    )
    assert p.returncode == 0, p.stderr
    res = read_models(out)
    assert res["spr"]["status"] == "pass", res["spr"]["reasons"]
    assert "2 of 2 expectations applied" in _verdicts(p.stderr)["spr"]
    spr = _functions(out, "spr", "_rust")
    assert spr["aesni_encrypt"].get("AES", 0) > 0
    assert not any(n.startswith("ossl_aes_cfb128_vaes") for n in spr)


def test_openssl_expectations_catch_a_vaes_slip(tmp_path: Path) -> None:
    """The CFB8 file is not vacuous: run against the CFB128 decryption it
    fails on spr naming the VAES function (what the slip would look like)."""
    _need("cryptography")
    d = EXAMPLES / "openssl_cfb"
    p = _sdematrix(
        "exec",
        "--cpu",
        "spr",
        "--expect",
        str(d / "cfb8.expect.yaml"),
        "--",
        sys.executable,
        "-I",
        str(d / "cfb.py"),
        "cfb128-decrypt",
        "1024",
    )
    assert p.returncode == 1, p.stderr
    assert re.search(
        r"CFB8 never takes a VAES path: forbidden but executed \d+x: "
        r"\{isa_set=AVX512_VAES\*\} -- .* in ossl_aes_cfb128_vaes_dec \(_rust",
        p.stderr,
    ), p.stderr


def test_openblas_forced_to_haswell_kernels_fails_the_nehalem_model(tmp_path: Path) -> None:
    """OPENBLAS_CORETYPE=Haswell makes numpy's bundled OpenBLAS skip its CPUID
    dispatch and run its Haswell (AVX/FMA) kernels on any CPU: on nhm
    (no AVX) that is what a real Nehalem would die of, and the chip check
    names the OpenBLAS kernel -- a true positive on code nobody here wrote.
    The run names the variable as the reason, before the verdicts, in
    results.json and in the report."""
    _need("numpy")
    d = EXAMPLES / "numpy_dispatch"
    out = tmp_path / "out"
    p = _sdematrix(
        "exec",
        "--cpu",
        "nhm",
        "--out",
        str(out),
        "--report",
        str(out),
        "--",
        sys.executable,
        "-I",
        str(d / "dispatch.py"),
        env_set={"OPENBLAS_CORETYPE": "Haswell"},
    )
    assert p.returncode == 1, p.stderr
    note = (
        "the environment overrides CPU dispatch on every model: OPENBLAS_CORETYPE=Haswell "
        "(OpenBLAS: kernel set chosen by name, CPUID not asked)"
    )
    assert f"sdematrix exec: note: {note}" in p.stderr.splitlines(), p.stderr[:2000]
    doc = json.loads((out / "results.json").read_text())
    assert "OPENBLAS_CORETYPE" in [o["variable"] for o in doc["dispatch_overrides"]]
    assert f"> {note}" in (out / "summary.md").read_text()
    res = read_models(out)["nhm"]
    assert res["status"] == "fail" and res["exit_code"] == 0, res["reasons"]
    assert any(
        re.search(r"\w+_HASWELL in libscipy_openblas\w*[-.\w]*\.so .*: AVX\w* not in model nhm", r)
        for r in res["reasons"]
    ), res["reasons"]


def test_numpy_dispatch_follows_the_model(tmp_path: Path) -> None:
    _need("numpy")
    d = EXAMPLES / "numpy_dispatch"
    out = tmp_path / "out"
    # p4p's import fails (exit 1): allowed, so its verdict is the chip check's
    p = _sdematrix(
        "exec",
        "--cpu",
        "p4p,nhm,hsw,spr",
        "--expect",
        str(d / "dispatch.expect.yaml"),
        "--allow-exit",
        "1",
        "--out",
        str(out),
        "--",
        sys.executable,
        "-I",
        str(d / "dispatch.py"),
    )
    res = read_models(out)
    found = {}
    for m in ("nhm", "hsw", "spr"):
        assert res[m]["status"] == "pass" and res[m]["exit_code"] == 0, (m, res[m]["reasons"])
        assert res[m]["meta"]["expectations_applied"] == 1, m
        found[m] = json.loads((out / m / "stdout").read_text().splitlines()[0])["found"]
    assert found == {
        "nhm": [],
        "hsw": ["X86_V3"],
        "spr": ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"],
    }, found

    # p4p: numpy's own error, and the chip check names what ran before it
    assert res["p4p"]["exit_code"] == 1
    assert "your machine doesn't support" in (out / "p4p" / "stderr").read_text()
    assert res["p4p"]["status"] == "fail"
    first = res["p4p"]["violations"][0]
    assert "_multiarray_umath" in first["image"], first
    assert re.search(r"(SSSE3|SSE4_1|SSE4_2|POPCNT) not in model p4p", first["reason"]), first
    assert p.returncode == 1, p.stderr
