"""Buffers that sit flush against a PROT_NONE page (ctypes mmap/mprotect).

Each GuardedRegion is three pages mapped anonymously:

    page 0          page 1            page 2
    [ PROT_NONE ]   [ READ|WRITE ]    [ PROT_NONE ]
                    ^start     end^

`at_end(n)` is the address of an n-byte buffer whose last byte is the last byte
of page 1 (one byte further faults); `at_start(n)` is the first byte of page 1
(one byte before faults).  A read or write outside [addr, addr + n) by the
library crosses into a PROT_NONE page and the process dies with SIGSEGV, which
is what the parent test watches for.
"""

from __future__ import annotations

import ctypes
import mmap
import os

PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class GuardedRegion:
    """One read-write page between two PROT_NONE pages."""

    def __init__(self) -> None:
        base = _libc.mmap(
            None,
            3 * PAGE,
            mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            -1,
            0,
        )
        if base is None or base == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), "mmap of a guarded region failed")
        self.base: int = base
        _check(_libc.mprotect(base, PAGE, PROT_NONE), "mprotect(low guard)")
        _check(_libc.mprotect(base + 2 * PAGE, PAGE, PROT_NONE), "mprotect(high guard)")
        self.lo = base + PAGE  # first usable byte
        self.hi = base + 2 * PAGE  # one past the last usable byte

    def at_end(self, n: int) -> int:
        if not 0 <= n <= PAGE:
            raise ValueError(f"buffer of {n} bytes does not fit in a page")
        return self.hi - n

    def at_start(self, n: int) -> int:
        if not 0 <= n <= PAGE:
            raise ValueError(f"buffer of {n} bytes does not fit in a page")
        return self.lo

    def place(self, placement: str, n: int) -> int:
        """ "end": flush against the high guard; "start": right after the low guard."""
        if placement == "end":
            return self.at_end(n)
        if placement == "start":
            return self.at_start(n)
        raise ValueError(f"unknown placement {placement!r}")

    def close(self) -> None:
        if self.base:
            _check(_libc.munmap(self.base, 3 * PAGE), "munmap")
            self.base = 0


def write(addr: int, data: bytes) -> None:
    if data:
        ctypes.memmove(addr, data, len(data))


def read(addr: int, n: int) -> bytes:
    return ctypes.string_at(addr, n) if n else b""


def fill(addr: int, value: int, n: int) -> None:
    if n:
        ctypes.memset(addr, value, n)
