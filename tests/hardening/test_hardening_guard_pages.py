"""Guard pages: no path reads or writes one byte outside the caller's buffers.

Each (mode, path) this host can run is swept in a child process
(tests/hardening/guard_sweep.py): lengths 0..300, every buffer (key, IV/nonce,
AAD, input, output, tag) flush against a PROT_NONE page at its end, then at
its start; encrypt and decrypt, out-of-place, in-place and streaming; GCM also
decrypts with a wrong tag and checks the output buffer is left all zero.  An
out-of-bounds access kills the child with SIGSEGV and the test fails naming the
last call (mode, path, operation, lengths, placement).

VAESCRYPT_GUARD_MAX_LEN overrides the top length (default 300).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import vaescrypt

SWEEP = Path(__file__).resolve().parent.parent / "hardening" / "guard_sweep.py"
MAX_LEN = int(os.environ.get("VAESCRYPT_GUARD_MAX_LEN", "300"))
CASES = [(m, p) for m in vaescrypt.MODES for p in vaescrypt.available(m)]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SWEEP), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _last_case(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("CASE ")]
    return lines[-1][5:] if lines else "(before the first call)"


def _describe_death(proc: subprocess.CompletedProcess[str]) -> str:
    rc = proc.returncode
    how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    return f"{how} during: {_last_case(proc.stdout)}\n{proc.stderr[-1500:]}"


@pytest.mark.parametrize(("mode", "path"), CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_guard_page_sweep(mode: str, path: str) -> None:
    proc = _run("--mode", mode, "--path", path, "--max-len", str(MAX_LEN))
    if proc.returncode < 0:
        pytest.fail(f"out-of-bounds access on {mode}/{path}: {_describe_death(proc)}")
    fails = [ln[5:] for ln in proc.stdout.splitlines() if ln.startswith("FAIL ")]
    assert not fails, f"{len(fails)} wrong result(s) on {mode}/{path}:\n" + "\n".join(fails)
    assert proc.returncode == 0, _describe_death(proc)
    done = proc.stdout.splitlines()[-1]
    assert done.startswith("DONE "), done
    calls = int(done.split()[1])
    # every length, both placements, at least one direction's worth of calls
    assert calls >= 2 * (MAX_LEN + 1) * 4, done


@pytest.mark.parametrize("mode", ["gcm", "cfb1"])
def test_guard_catches_a_one_byte_overrun(mode: str) -> None:
    """The harness can fail: a call told 17 bytes for a 16-byte buffer at the
    guard must die with SIGSEGV, and the report names that call."""
    proc = _run("--mode", mode, "--path", "generic", "--self-test-overrun", timeout=60)
    assert proc.returncode == -signal.SIGSEGV, _describe_death(proc)
    assert "op=deliberate_overrun" in _last_case(proc.stdout)
