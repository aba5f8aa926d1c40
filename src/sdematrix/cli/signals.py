"""SIGTERM treated like Ctrl-C, and a quiet window for clean-up: shared by
the CLI (the whole command) and the Docker runner (its run).  Handlers can
only be installed from the main thread; elsewhere these are no-ops."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_BOTH = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwinding the main thread the way Ctrl-C does."""


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _restoring() -> Iterator[None]:
    """Put both dispositions back on the way out (None: a handler not
    installed from Python, left alone)."""
    old = {s: signal.getsignal(s) for s in _BOTH}
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:
                signal.signal(s, h)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside: SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread."""
    if not _main_thread():
        yield
        return
    with _restoring():
        signal.signal(signal.SIGTERM, _raise_terminated)
        yield


def ignore() -> None:
    """Shutting down: a second Ctrl-C / SIGTERM must not cut the clean-up
    short or print a traceback.  The enclosing context restores them."""
    if _main_thread():
        for s in _BOTH:
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def ignored() -> Iterator[None]:
    """ignore() for the duration of the block only."""
    if not _main_thread():
        yield
        return
    with _restoring():
        ignore()
        yield


@contextmanager
def deferred() -> Iterator[list[int]]:
    """Inside: SIGINT / SIGTERM are only recorded (the yielded list), so the
    block -- writing the final results -- always completes; then call
    :func:`raise_pending` to act on them.  Handlers installed inside the block
    (the runner's) take over while they are installed."""
    got: list[int] = []
    if not _main_thread():
        yield got
        return

    def record(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    with _restoring():
        for s in _BOTH:
            signal.signal(s, record)
        yield got


def raise_pending(got: list[int]) -> None:
    """Act on signals :func:`deferred` recorded: Terminated for SIGTERM,
    KeyboardInterrupt for SIGINT."""
    if signal.SIGTERM in got:
        raise Terminated
    if got:
        raise KeyboardInterrupt
