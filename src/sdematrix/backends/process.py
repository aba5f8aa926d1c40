"""Running a backend's child process: its own process group, stdout/stderr
captured up to a cap (the tail is kept), a flood or a timeout kills the whole
group.  Shared by the SDE, ptrace and QEMU backends."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = ["CAPTURE_LIMIT", "FLOOD_LIMIT", "ProcessOutcome", "run_process", "tail_lines"]

# Bytes of stdout/stderr kept per stream (the tail); a stream that passes
# FLOOD_LIMIT bytes in total gets the process killed.
CAPTURE_LIMIT = 1 << 20
FLOOD_LIMIT = 64 << 20


@dataclass
class ProcessOutcome:
    returncode: int | None  # None when killed by us (timeout/flood)
    stdout: str  # tail, at most CAPTURE_LIMIT bytes
    stderr: str
    timed_out: bool
    flooded: bool
    duration_s: float
    stdout_bytes: int
    stderr_bytes: int


class _TailReader(threading.Thread):
    """Drain one pipe, keeping the last `limit` bytes; flag a flood."""

    def __init__(self, stream: IO[bytes], limit: int, flood: int, on_flood: threading.Event):
        super().__init__(daemon=True)
        self.stream = stream
        self.limit = limit
        self.flood = flood
        self.on_flood = on_flood
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.total = 0

    def run(self) -> None:
        while True:
            try:
                chunk = self.stream.read1(65536)  # type: ignore[attr-defined]
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self.total += len(chunk)
            self.chunks.append(chunk)
            self.kept += len(chunk)
            while self.kept - len(self.chunks[0]) >= self.limit:
                self.kept -= len(self.chunks.popleft())
            if self.total > self.flood:
                self.on_flood.set()
                break

    def text(self) -> str:
        data = b"".join(self.chunks)[-self.limit :]
        return data.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float,
    capture_limit: int = CAPTURE_LIMIT,
    flood_limit: int = FLOOD_LIMIT,
) -> ProcessOutcome:
    """Run `argv` in its own process group (session) with stdin closed.

    On timeout or an output flood the whole group is SIGKILLed (so an emulator
    and everything it started go together).  Raises OSError when the program
    cannot be started.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=str(cwd) if cwd else None,
        start_new_session=True,
    )
    flood = threading.Event()
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        _TailReader(proc.stdout, capture_limit, flood_limit, flood),
        _TailReader(proc.stderr, capture_limit, flood_limit, flood),
    ]
    for r in readers:
        r.start()
    timed_out = False
    deadline = t0 + timeout
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if flood.is_set():
            _kill_group(proc)
            proc.wait()
            break
        if time.monotonic() >= deadline:
            timed_out = True
            _kill_group(proc)
            proc.wait()
            break
    # The leader is gone; a child it left in its group may still hold the pipes
    # open: give the readers a moment, then kill what is left of the group.
    for r in readers:
        r.join(timeout=2.0)
    if any(r.is_alive() for r in readers):
        _kill_group(proc)
    for r in readers:
        r.join(timeout=5.0)
    for s in (proc.stdout, proc.stderr):
        try:
            s.close()
        except OSError:
            pass
    return ProcessOutcome(
        returncode=None if (timed_out or flood.is_set()) else proc.returncode,
        stdout=readers[0].text(),
        stderr=readers[1].text(),
        timed_out=timed_out,
        flooded=flood.is_set(),
        duration_s=time.monotonic() - t0,
        stdout_bytes=readers[0].total,
        stderr_bytes=readers[1].total,
    )


def tail_lines(text: str, n: int = 20, width: int = 400) -> str:
    """The last `n` lines of `text`, each cut to `width` characters."""
    lines = [ln[:width] for ln in text.splitlines()[-n:]]
    return "\n".join(lines)
