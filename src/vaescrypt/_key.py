"""What the cipher classes share about keys: the argument check, and the
addresses the C-API fast path (_fastcall) is given."""

from __future__ import annotations

from vaescrypt._buffers import as_view
from vaescrypt._native import ffi, lib

_UINTPTR = ffi.typeof("uintptr_t")
_cast = ffi.cast


def function_address(name: str) -> int:
    """The address of a library function inside vaescrypt._native: _fastcall
    calls the very same library (one copy, one dispatcher state)."""
    return int(_cast(_UINTPTR, ffi.addressof(lib, name)))


def check_key(cls_name: str, key: object) -> memoryview:
    view = as_view("key", key)
    if len(view) not in (16, 24, 32):
        raise ValueError(
            f"{cls_name} key must be 16, 24 or 32 bytes (128, 192 or 256 bits), got {len(view)}"
        )
    return view
