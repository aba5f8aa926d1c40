"""`python -m <module> <args>` in a child process, output captured as text:
how the tests drive the project's command-line tools (exit codes and the
one-line error contract are the child's)."""

from __future__ import annotations

import subprocess
import sys


def run_module(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
