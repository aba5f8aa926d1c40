"""Turning Python bytes-like arguments into C buffers without copying."""

from __future__ import annotations

from typing import Any

from vaescrypt._native import ffi

BytesLike = bytes | bytearray | memoryview


def as_view(name: str, data: object, *, allow_none: bool = False) -> memoryview:
    """A flat, C-contiguous byte view of data (bytes, bytearray, memoryview)."""
    if data is None and allow_none:
        return memoryview(b"")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be bytes, bytearray or memoryview, not {type(data).__name__}")
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def writable_view(name: str, buf: object, size: int) -> memoryview:
    """A writable byte view of buf with room for at least size bytes."""
    if not isinstance(buf, bytearray | memoryview):
        raise TypeError(f"{name} must be a writable bytearray or memoryview")
    view = as_view(name, buf)
    if view.readonly:
        raise TypeError(f"{name} must be writable")
    if len(view) < size:
        raise ValueError(f"{name} must have room for {size} bytes, has {len(view)}")
    return view


def cbuf(view: memoryview) -> Any:
    """uint8_t * into the view (NULL-safe for empty views: cffi handles them)."""
    return ffi.from_buffer("uint8_t[]", view)
