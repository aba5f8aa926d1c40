"""What the cipher classes share about keys: the argument check, and the
addresses the C-API fast path (_fastcall) is given."""

from __future__ import annotations

from typing import Any

from vaescrypt._buffers import as_view
from vaescrypt._native import ffi, lib

_UINTPTR = ffi.typeof("uintptr_t")
_UINTPTR_P = ffi.typeof("uintptr_t *")
_cast = ffi.cast


def function_address(name: str) -> int:
    """The address of a library function inside vaescrypt._native: _fastcall
    calls the very same library (one copy, one dispatcher state)."""
    return int(_cast(_UINTPTR, ffi.addressof(lib, name)))


def key_address(out_slot: Any) -> int:
    """The address of the key a `vc_*_key **` out slot received, read as the
    integer in the slot: half the cost of casting the pointer itself."""
    addr: int = _cast(_UINTPTR_P, out_slot)[0]
    return addr


def check_key(cls_name: str, key: object) -> memoryview:
    view = as_view("key", key)
    if len(view) not in (16, 24, 32):
        raise ValueError(
            f"{cls_name} key must be 16, 24 or 32 bytes (128, 192 or 256 bits), got {len(view)}"
        )
    return view
