"""The library tests under AddressSanitizer + UndefinedBehaviorSanitizer.

vaescrypt._native is rebuilt with VAESCRYPT_SANITIZE=1 into a temporary
directory (tests/hardening/sanitized_build.py) and a child pytest runs the NIST
vector, differential, authentication, C-API fast-path and stream-safety tests
(tests/library/test_vaescrypt_cavp.py, _differential.py, _auth.py, _fastcall.py,
_stream_safety.py: two threads on one stream, re-keyed owners, overlapping
buffers) against it with gcc's libasan preloaded,
PYTHONMALLOC=malloc (so ASan knows the bounds of every Python buffer),
ASAN_OPTIONS=detect_leaks=0 (the interpreter leaks by design) and
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1.  Any sanitizer report fails
the test.  A positive control first proves the set-up catches a heap overflow.

Marked `slow` (build + run take about 1-2 minutes): deselect with -m "not slow".
VAESCRYPT_SANITIZE_CASES sets the differential case count (default 100).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hardening import sanitized_build

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# The NIST vectors, the differential tests and the authentication tests
# drive the library; the _fastcall tests drive the CPython extension's own C
# (key references, the one-shot entry points, the C methods); the
# stream-safety tests race two threads on one stream and re-key a stream's
# owner (a heap overflow / use-after-free before issue 13's fixes).
LIBRARY_TESTS = [
    "tests/library/test_vaescrypt_cavp.py",
    "tests/library/test_vaescrypt_differential.py",
    "tests/library/test_vaescrypt_auth.py",
    "tests/binding/test_vaescrypt_fastcall.py",
    "tests/binding/test_vaescrypt_stream_safety.py",
]
REPORT = re.compile(
    r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer"
    r"|UndefinedBehaviorSanitizer"
)

OVERFLOW_SNIPPET = """
from vaescrypt._native import ffi, lib
kp = ffi.new("vc_cfb_key **")
assert lib.vc_cfb_key_new(kp, bytes(16), 16, 128, lib.VC_PATH_AUTO) == 0
src, dst = bytearray(16), bytearray(64)
# lie: 40 bytes from a 16-byte buffer -> heap-buffer-overflow in the library
lib.vc_cfb_encrypt(kp[0], bytes(16), ffi.from_buffer("uint8_t[]", src),
                   ffi.from_buffer("uint8_t[]", dst), 40)
print("NOT CAUGHT")
"""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(package dir with the sanitized vaescrypt, directory for sanitizer logs)."""
    if sanitized_build.libasan_path() is None:
        pytest.skip("gcc has no libasan.so (gcc -print-file-name=libasan.so)")
    root = tmp_path_factory.mktemp("vaescrypt-asan")
    pkg = sanitized_build.build(root / "build")
    logs = root / "logs"
    logs.mkdir()
    return pkg, logs


def _reports(logs: Path, text: str) -> str:
    found = [p.read_text(errors="replace") for p in sorted(logs.iterdir())]
    if REPORT.search(text):
        found.append(text)
    return "\n".join(found)


def _run(
    args: list[str], pkg: Path, logs: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = sanitized_build.asan_env(pkg, logs)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_sanitized_build_catches_an_overflow(sanitized: tuple[Path, Path], tmp_path: Path) -> None:
    """Positive control: the set-up can fail (ASan sees a deliberate over-read)."""
    pkg, _ = sanitized
    proc = _run(["-c", OVERFLOW_SNIPPET], pkg, tmp_path, timeout=120)
    report = _reports(tmp_path, proc.stdout + proc.stderr)
    assert "NOT CAUGHT" not in proc.stdout and proc.returncode != 0, (
        "ASan did not catch a 24-byte over-read: the sanitized build is not active\n"
        + proc.stdout
        + proc.stderr[-2000:]
    )
    assert "heap-buffer-overflow" in report, report[-3000:]


def test_library_tests_clean_under_asan_ubsan(sanitized: tuple[Path, Path]) -> None:
    pkg, logs = sanitized
    missing = [t for t in LIBRARY_TESTS if not (REPO / t).exists()]
    if missing:
        pytest.fail(f"library test files missing: {missing}")
    cases = os.environ.get("VAESCRYPT_SANITIZE_CASES", "100")
    code = (
        "import vaescrypt._native as n, vaescrypt._fastcall as f; "
        "print(n.__file__); print(f.__file__)"
    )
    probe = _run(["-c", code], pkg, logs, 60)
    files = probe.stdout.split()
    assert (
        probe.returncode == 0 and len(files) == 2 and all(f.startswith(str(pkg)) for f in files)
    ), f"child did not load the sanitized extensions: {probe.stdout}{probe.stderr[-2000:]}"
    proc = _run(
        [
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:sdematrix",
            "-p",
            "no:benchmark",
            "-p",
            "no:xdist",
            *LIBRARY_TESTS,
        ],
        pkg,
        logs,
        timeout=900,
        extra_env={"VAESCRYPT_DIFF_CASES": cases},
    )
    report = _reports(logs, proc.stdout + proc.stderr)
    assert not report, f"sanitizer report:\n{report[-6000:]}"
    assert proc.returncode == 0, (
        f"library tests failed under sanitizers (exit {proc.returncode}):\n"
        f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    )
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]
