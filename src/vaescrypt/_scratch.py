"""Reusable native output buffers for the one-shot calls.

A one-shot call must return a new `bytes`.  The cheapest correct way with
cffi is: let C write into a buffer that is already allocated and hot in the
cache, then make the result with ONE copy (`ffi.unpack` on a `char *` builds
the bytes object straight from the pointer).  The alternative, a fresh
`bytearray` per call, costs an allocation, a zero fill and the same copy.
A published `bytes` is never written to (CPython shares small ones).

The C call releases the GIL, so a buffer must never be shared by two calls in
flight: each call takes a buffer off POOL with `POOL.pop()` and puts it back
with `POOL.append()`, both atomic, so concurrent callers simply get different
buffers (an empty pool means a new one).  The pool therefore never holds more
buffers than there were calls in flight at once.

A buffer is a list so that it can also cache one derived pointer: GCM writes
its tag at `u8 + n`, and building that cdata costs as much as a small
encryption's worth of Python; repeated message sizes reuse it.

Buffers keep the last message they carried until the next call overwrites
them; that is no more than a freed heap block would keep.  Calls larger than
POOL_MAX_BYTES get a buffer of their own that is not kept.
"""

from __future__ import annotations

from typing import Any

from vaescrypt._errors import raise_for_status
from vaescrypt._native import ffi

#: Largest buffer the pool keeps (bigger calls allocate and drop their own).
POOL_MAX_BYTES = 1 << 20
#: Smallest buffer the pool hands out, so small sizes all share one.
POOL_MIN_BYTES = 1 << 14

# Indices into a scratch list.
U8 = 0  # uint8_t[] cdata (what the C API takes)
CHARS = 1  # the same memory as char * (what ffi.unpack turns into bytes)
CAPACITY = 2  # bytes
AT_N = 3  # n for which AT_PTR is valid (-1: none)
AT_PTR = 4  # u8 + n

_unpack = ffi.unpack
# No zero fill: every byte handed back to Python was written by C first.
_alloc = ffi.new_allocator(should_clear_after_alloc=False)


def new_scratch(size: int) -> list[Any]:
    """[u8, chars, capacity, -1, None] with capacity >= size."""
    cap = max(size, POOL_MIN_BYTES)
    if cap <= POOL_MAX_BYTES:  # round up: a slowly growing size reallocates rarely
        cap = 1 << (cap - 1).bit_length()
    u8 = _alloc("uint8_t[]", cap)
    return [u8, ffi.cast("char *", u8), cap, -1, None]


def at(scratch: list[Any], n: int) -> Any:
    """The cdata pointer u8 + n (cached for the last n asked)."""
    if scratch[AT_N] != n:
        scratch[AT_PTR] = scratch[U8] + n
        scratch[AT_N] = n
    return scratch[AT_PTR]


#: Idle buffers, each with capacity POOL_MIN_BYTES..POOL_MAX_BYTES.
POOL: list[list[Any]] = [new_scratch(POOL_MIN_BYTES)]


def take(size: int) -> list[Any]:
    """A buffer of at least size bytes, owned by the caller until give_back()."""
    if size > POOL_MAX_BYTES:
        return new_scratch(size)
    try:
        s = POOL.pop()
    except IndexError:
        return new_scratch(size)
    if s[CAPACITY] < size:
        return new_scratch(size)  # the small one is dropped; the new one replaces it
    return s


def give_back(s: list[Any]) -> None:
    if s[CAPACITY] <= POOL_MAX_BYTES:
        POOL.append(s)


def result(s: list[Any], status: int, n: int, what: str) -> bytes:
    """The end of a call that wrote into `s`: raise for a nonzero library
    status, else its first n bytes as bytes; either way `s` goes back to the
    pool (only after the copy: another thread may take it the moment it is
    back)."""
    if status:
        give_back(s)
        raise_for_status(status, what)
    out: bytes = _unpack(s[CHARS], n)
    give_back(s)
    return out
