"""Shared argument checks for the cipher classes."""

from __future__ import annotations

from vaescrypt._buffers import as_view


def check_key(cls_name: str, key: object) -> memoryview:
    view = as_view("key", key)
    if len(view) not in (16, 24, 32):
        raise ValueError(
            f"{cls_name} key must be 16, 24 or 32 bytes (128, 192 or 256 bits), got {len(view)}"
        )
    return view
