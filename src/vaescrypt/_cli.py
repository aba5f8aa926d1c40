"""The error contract of vaescrypt's measuring commands (vaescrypt.bench,
vaescrypt.bench_ab, vaescrypt.bench_goals): a BenchError is one line on
stderr and exit 2, Ctrl-C is exit 130."""

from __future__ import annotations

import sys
from collections.abc import Callable


class BenchError(Exception):
    """A bad option, bad input or an environment problem: reported as one line."""


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """body() under the commands' error contract (see the module)."""
    try:
        return body()
    except BenchError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
