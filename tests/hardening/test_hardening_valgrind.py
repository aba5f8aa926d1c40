"""valgrind memcheck on the generic and AES-NI paths.

Two executables are built without sanitizers (tests/hardening/valgrind_build.py):
vg-driver (tests/hardening/vg_driver.c: every mode, exactly-sized malloc'd
buffers, lengths 0..80, one-shot / in-place / streaming / wrong GCM tag) and
the project's vc-probe (`--impl generic|aesni`, each mode and direction).
Both run under `valgrind --error-exitcode=99 --track-origins=yes`; any memcheck
error fails the test, and the output must equal a native run of the same
command (valgrind must not change a result).

Only generic and aesni: valgrind 3.19 emulates a CPU without AVX-512/VAES (its
synthetic CPUID hides them and it cannot decode most EVEX code), so the wide
paths cannot run under it.  Skipped with a reason when valgrind is absent.
Marked `slow`: deselect with -m "not slow".
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import vaescrypt
from hardening import valgrind_build

pytestmark = pytest.mark.slow

VALGRIND = shutil.which("valgrind")
VG_ARGS = ["-q", "--error-exitcode=99", "--track-origins=yes"]
PATHS = ("generic", "aesni")
MODES = ("gcm", "cfb128", "cfb8", "cfb1")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path | None]:
    if VALGRIND is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    return valgrind_build.build(tmp_path_factory.mktemp("vaescrypt-valgrind"))


def _native_and_valgrind(
    cmd: list[str], timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    native = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    under = subprocess.run(
        [str(VALGRIND), *VG_ARGS, *cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return native, under


def _check_memcheck(under: subprocess.CompletedProcess[str], what: str) -> None:
    assert under.returncode != 99, f"memcheck errors in {what}:\n{under.stderr[-6000:]}"


def _need_path(mode: str, path: str) -> None:
    if path not in vaescrypt.available(mode):
        pytest.skip(f"{path} is not available for {mode} on this host")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", MODES)
def test_driver_under_memcheck(built: tuple[Path, Path | None], mode: str, path: str) -> None:
    _need_path(mode, path)
    driver, _ = built
    native, under = _native_and_valgrind([str(driver), mode, path, "80"])
    assert native.returncode == 0, native.stderr
    _check_memcheck(under, f"vg-driver {mode} {path}")
    assert under.returncode == 0, f"vg-driver under valgrind: {under.stderr[-3000:]}"
    assert under.stdout == native.stdout, (under.stdout, native.stdout)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("direction", ("encrypt", "decrypt"))
@pytest.mark.parametrize("mode", MODES)
def test_probe_under_memcheck(
    built: tuple[Path, Path | None], mode: str, direction: str, path: str
) -> None:
    _need_path(mode, path)
    _, probe = built
    if probe is None:
        pytest.skip("native/probe has no sources yet (vc-probe not built)")
    length = "33" if mode == "cfb1" else "77"
    cmd = [
        str(probe),
        "--mode",
        mode,
        "--dir",
        direction,
        "--key-bits",
        "256",
        "--length",
        length,
        "--impl",
        path,
        "--seed",
        "7",
    ]
    native, under = _native_and_valgrind(cmd)
    _check_memcheck(under, " ".join(cmd[1:]))
    assert under.returncode == 0, f"probe under valgrind: {under.stdout}{under.stderr[-3000:]}"
    got, want = json.loads(under.stdout), json.loads(native.stdout)
    assert got["status"] == "ok" and got["path"] == path, got
    assert got["digest"] == want["digest"], "valgrind run computed a different output"


def test_memcheck_catches_an_overrun(built: tuple[Path, Path | None]) -> None:
    """Positive control: a call claiming one byte more than was allocated is reported."""
    driver, _ = built
    under = subprocess.run(
        [str(VALGRIND), *VG_ARGS, str(driver), "cfb128", "generic", "--overrun"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert under.returncode == 99, under.stderr[-3000:]
    assert "Invalid read" in under.stderr, under.stderr[-3000:]
