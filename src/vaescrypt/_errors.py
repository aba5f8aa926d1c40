"""Exceptions raised by vaescrypt, and the mapping from the C library's vc_status codes."""

from __future__ import annotations

from typing import NoReturn

from vaescrypt._native import ffi, lib


class VaescryptError(Exception):
    """Base class of the errors specific to vaescrypt."""


class InvalidTag(VaescryptError):
    """GCM authentication failed; no plaintext was released."""


class UnsupportedImplementation(VaescryptError):
    """The forced code path cannot run on this CPU, or is not allowed for the mode."""


class CpuMaskError(VaescryptError, ValueError):
    """VAESCRYPT_CPU_MASK is malformed or names an unknown feature."""


class StreamStateError(VaescryptError):
    """A streaming call came out of order (e.g. AAD after data, use after finalize)."""


class ConcurrentUseError(StreamStateError, RuntimeError):
    """A stream was used by two threads at once.  The call that found the
    stream busy was refused and changed nothing; a stream is for one thread
    at a time (serialize the calls, or use one stream per thread)."""


def mask_error() -> str | None:
    """The dispatcher's one-line message about VAESCRYPT_CPU_MASK, if it is invalid."""
    msg = lib.vc_dispatch_error()
    return None if msg == ffi.NULL else ffi.string(msg).decode()


def check_mask() -> None:
    msg = mask_error()
    if msg is not None:
        raise CpuMaskError(msg)


def raise_for_status(status: int, what: str = "") -> None:
    """Raise the Python exception for a negative vc_status (no-op for VC_OK)."""
    if status == lib.VC_OK:
        return
    _raise(status, what)


def raise_for_stream_status(status: int, what: str, in_order: bool) -> None:
    """raise_for_status for a stream call.  The C library answers VC_ERR_STATE
    both for a call out of order and for a call made while another thread is
    inside the same stream; in_order says the Python layer has checked the
    call is in order, so VC_ERR_STATE can only mean the second."""
    if status == lib.VC_OK:
        return
    if in_order and status == lib.VC_ERR_STATE:
        raise ConcurrentUseError(
            f"{what}: the stream is in use by another thread "
            "(one thread at a time per stream; this call was refused and changed nothing)"
        )
    _raise(status, what)


def _raise(status: int, what: str) -> NoReturn:
    text = ffi.string(lib.vc_status_message(status)).decode()
    msg = f"{what}: {text}" if what else text
    if status == lib.VC_ERR_AUTH:
        raise InvalidTag(msg)
    if status in (lib.VC_ERR_UNSUPPORTED, lib.VC_ERR_INELIGIBLE):
        raise UnsupportedImplementation(msg)
    if status == lib.VC_ERR_CPU_MASK:
        raise CpuMaskError(mask_error() or msg)
    if status == lib.VC_ERR_STATE:
        raise StreamStateError(msg)
    if status == lib.VC_ERR_NOMEM:
        raise MemoryError(msg)
    if status == lib.VC_ERR_OBJECT:
        raise TypeError(msg)
    if status == lib.VC_ERR_FORKED:
        raise StreamStateError(msg)
    raise ValueError(msg)
