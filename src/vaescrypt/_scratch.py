"""Reusable native output buffers for the one-shot calls.

A one-shot call must return a new `bytes`.  The cheapest correct way with
cffi is: let C write into a buffer that is already allocated and hot in the
cache, then make the result with ONE copy (`ffi.unpack` on a `char *` builds
the bytes object straight from the pointer).  The alternative, a fresh
`bytearray` per call, costs an allocation, a zero fill and the same copy.
A published `bytes` is never written to (CPython shares small ones).

The C call releases the GIL, so a buffer must never be shared by two calls in
flight: each call takes a buffer off a list with `list.pop()` and puts it
back with `list.append()`, both atomic, so concurrent callers simply get
different buffers (a miss allocates a new one).

Buffers keep the last message they carried until the next call overwrites
them; that is no more than a freed heap block would keep.  Requests above
POOL_MAX_BYTES get a buffer of their own that is not kept.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from vaescrypt._native import ffi

#: Largest buffer the pool keeps (bigger calls allocate and drop their own).
POOL_MAX_BYTES = 1 << 20
#: Smallest buffer the pool hands out, so tiny and growing sizes share one.
POOL_MIN_BYTES = 1 << 14
#: How many idle buffers the pool keeps (one per concurrent caller in use).
POOL_MAX_IDLE = 8

# No zero fill: every byte handed back to Python was written by C first.
_alloc = ffi.new_allocator(should_clear_after_alloc=False)


class Scratch(NamedTuple):
    """One native buffer: `u8` for the C API, `chars` for ffi.unpack."""

    u8: Any
    chars: Any
    capacity: int


def new_scratch(size: int) -> Scratch:
    cap = max(size, POOL_MIN_BYTES)
    if cap <= POOL_MAX_BYTES:  # round up: a slowly growing size reallocates rarely
        cap = 1 << (cap - 1).bit_length()
    u8 = _alloc("uint8_t[]", cap)
    return Scratch(u8, ffi.cast("char *", u8), cap)


#: Idle buffers.  Take with POOL.pop() (IndexError when empty), return with
#: give_back().
POOL: list[Scratch] = [new_scratch(POOL_MIN_BYTES)]


def take(size: int) -> Scratch:
    """A buffer of at least size bytes, owned by the caller until give_back()."""
    try:
        s = POOL.pop()
    except IndexError:
        return new_scratch(size)
    if s.capacity < size:
        return new_scratch(size)  # the small one is dropped; the big one replaces it
    return s


def give_back(s: Scratch) -> None:
    if s.capacity <= POOL_MAX_BYTES and len(POOL) < POOL_MAX_IDLE:
        POOL.append(s)
