"""Kernel uprobes for the tests: a probe on one function of one file, put in
place through tracefs for a test and taken away after it.

Hosts with observability or security agents probe libraries (libc's
mprotect, libssl's SSL_write...): the kernel writes an int3 on the probed
instruction in every process that maps the file, takes that int3 itself and
runs the instruction out of line in an ``[uprobes]`` page.  The tests probe
a file they built themselves, so no other process (the other xdist worker)
meets the probe.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

GROUP = "sdmtest"
_TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
_names = itertools.count()


def _mounted() -> Path | None:
    for p in _TRACEFS:
        if (p / "uprobe_events").exists():
            return p
    return None


def tracefs_or_reason() -> Path | str:
    """The tracefs directory with uprobe_events, mounted if need be (root
    only), or why this host cannot probe (a sentence for pytest.skip)."""
    found = _mounted()
    if found is not None and not os.access(found / "uprobe_events", os.W_OK):
        return f"uprobes: {found}/uprobe_events is not writable (euid {os.geteuid()})"
    if found is not None:
        return found
    if os.geteuid() != 0:
        return f"uprobes: tracefs is not mounted and mounting it needs root (euid {os.geteuid()})"
    p = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(_TRACEFS[0])],
        capture_output=True,
        text=True,
        check=False,
    )
    found = _mounted()
    if found is not None:
        return found
    if p.returncode != 0:
        return f"uprobes: mount -t tracefs failed: {p.stderr.strip()}"
    return "uprobes: this kernel has no uprobe_events (CONFIG_UPROBE_EVENTS off)"


def file_offset(path: Path, symbol: str) -> int:
    """The file offset of `symbol`'s first byte (what a uprobe names)."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        addr = None
        for sec in elf.iter_sections():
            if isinstance(sec, SymbolTableSection):
                for s in sec.get_symbol_by_name(symbol) or []:
                    addr = s["st_value"]
        if addr is None:
            raise LookupError(f"{symbol} not in {path}")
        for seg in elf.iter_segments("PT_LOAD"):
            if seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                return addr - seg["p_vaddr"] + seg["p_offset"]
    raise LookupError(f"{symbol} of {path} is in no loaded segment")


@dataclass
class Uprobe:
    tracefs: Path
    name: str
    path: Path

    def hits(self) -> int:
        """How often the kernel took this probe's int3 (uprobe_profile)."""
        for line in (self.tracefs / "uprobe_profile").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == self.name:
                return int(parts[2])
        raise LookupError(f"uprobe {self.name} not in uprobe_profile")


def _append(events: Path, line: str) -> None:
    """One command to uprobe_events.  O_APPEND: opened for writing without
    it, the file clears every probe on the host (and tracefs refuses the
    seek that Python's "a" mode makes)."""
    fd = os.open(events, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@contextmanager
def uprobe(tracefs: Path, path: Path, symbol: str, *, ret: bool = False) -> Iterator[Uprobe]:
    """A uprobe on `symbol`'s first instruction in `path` (`ret`: a return
    probe, which also puts the kernel's int3 on the entry and sends the
    return through the kernel's trampoline), enabled for the `with` body and
    removed after it."""
    name = f"p{os.getpid()}_{next(_names)}"
    events = tracefs / "uprobe_events"
    kind = "r" if ret else "p"
    _append(events, f"{kind}:{GROUP}/{name} {path}:{file_offset(path, symbol):#x}\n")
    enable = tracefs / "events" / GROUP / name / "enable"
    try:
        enable.write_text("1\n")
        yield Uprobe(tracefs, name, path)
    finally:
        if enable.exists():
            enable.write_text("0\n")
        _append(events, f"-:{GROUP}/{name}\n")
