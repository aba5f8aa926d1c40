"""Names used at the Python boundary: modes, directions, code paths."""

from __future__ import annotations

from typing import Literal

from vaescrypt._native import ffi, lib

Mode = Literal["gcm", "cfb128", "cfb8", "cfb1"]
Direction = Literal["encrypt", "decrypt"]

MODES: tuple[str, ...] = tuple(
    ffi.string(lib.vc_mode_name(m)).decode() for m in range(lib.VC_MODE_COUNT)
)
DIRECTIONS: tuple[str, ...] = tuple(
    ffi.string(lib.vc_dir_name(d)).decode() for d in range(lib.VC_DIR_COUNT)
)
#: Every code path, widest first (the general preference order).
PATHS: tuple[str, ...] = tuple(
    ffi.string(lib.vc_path_name(p)).decode() for p in reversed(range(lib.VC_PATH_COUNT))
)


def mode_id(mode: str) -> int:
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return MODES.index(mode)


def dir_id(direction: str) -> int:
    if not isinstance(direction, str) or direction not in DIRECTIONS:
        raise ValueError(
            f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}"
        )
    return DIRECTIONS.index(direction)


def path_id(path: str) -> int:
    if not isinstance(path, str) or path not in PATHS:
        raise ValueError(f"unknown code path {path!r}; expected one of {', '.join(PATHS)}")
    return int(lib.vc_path_from_name(path.encode()))


def path_name(path: int) -> str:
    return ffi.string(lib.vc_path_name(path)).decode()


def impl_id(impl: str | None) -> int:
    """None or "auto" -> let the dispatcher choose; else a path name."""
    if impl is None or impl == "auto":
        return int(lib.VC_PATH_AUTO)
    return path_id(impl)
