"""AES-CFB with segment sizes 128, 8 and 1 bits (NIST SP 800-38A)."""

from __future__ import annotations

from typing import Any

from vaescrypt import _fastcall
from vaescrypt._buffers import as_view, cbuf, writable_view
from vaescrypt._errors import StreamStateError, raise_for_status
from vaescrypt._key import bind, make_key
from vaescrypt._names import dir_id, path_name
from vaescrypt._native import ffi, lib
from vaescrypt._scratch import U8, result, take

# Bound once: a module global is one dict lookup, `lib.x` is two.
_cfb_encrypt = lib.vc_cfb_encrypt
_cfb_decrypt = lib.vc_cfb_decrypt

_KEY_P = ffi.typeof("vc_cfb_key *")

# _fastcall (keys, the C methods) calls the library functions inside
# _native, whose addresses it gets here: one library in the process.
bind("cfb")

SEGMENT_SIZES = (128, 8, 1)


def _check_segment_size(segment_size: object) -> None:
    if not isinstance(segment_size, int) or isinstance(segment_size, bool):
        raise TypeError("segment_size must be an int")
    if segment_size not in SEGMENT_SIZES:
        raise ValueError(f"segment_size must be 128, 8 or 1, got {segment_size}")


def _check_iv(iv: object) -> memoryview:
    view = as_view("iv", iv)
    if len(view) != 16:
        raise ValueError(f"CFB iv must be 16 bytes, got {len(view)}")
    return view


class AESCFB:
    """AES-CFB.  segment_size is 128 (CFB128), 8 (CFB8) or 1 (CFB1) bits.

    For CFB1 the data is a bit string, most significant bit of each byte
    first; bits= gives its length (default 8 * len(data)) and the unused low
    bits of a final partial output byte are zero.
    """

    def __init__(
        self, key: bytes | bytearray | memoryview, segment_size: int = 128, impl: str | None = None
    ) -> None:
        # _ref (a _fastcall.KeyRef) owns the native key and frees it with
        # this object; the C methods read the key and segment size from it.
        self._ref = make_key(_fastcall.KEY_CFB, "AESCFB", key, impl, "segment_size",
                             segment_size, SEGMENT_SIZES, _check_segment_size)
        self._segment_size = segment_size

    @property
    def _key(self) -> Any:
        """The key as a cffi pointer, for the calls that go through cffi
        (the general methods, streams, path()).  Borrowed: self owns it."""
        return ffi.cast(_KEY_P, self._ref.addr)

    @property
    def segment_size(self) -> int:
        return self._segment_size

    def path(self, direction: str) -> str:
        code = lib.vc_cfb_key_path(self._key, dir_id(direction))
        raise_for_status(min(code, 0), f"AESCFB {direction}")
        return path_name(code)

    def _length(self, view: memoryview, bits: int | None) -> tuple[int, int]:
        """(length argument for C, output bytes)."""
        if self._segment_size != 1:
            if bits is not None:
                raise TypeError("bits= is only for segment_size=1")
            return len(view), len(view)
        if bits is None:
            bits = 8 * len(view)
        if not isinstance(bits, int) or isinstance(bits, bool):
            raise TypeError("bits must be an int")
        if bits < 0 or bits > 8 * len(view):
            raise ValueError(f"bits must be 0..{8 * len(view)} for {len(view)} bytes, got {bits}")
        return bits, (bits + 7) // 8

    def _one_shot(self, fn: Any, iv: object, data: object, bits: int | None) -> bytes:
        ivv = _check_iv(iv)
        dv = as_view("data", data)
        clen, nout = self._length(dv, bits)
        sc = take(nout)
        st = fn(self._key, cbuf(ivv), cbuf(dv), sc[U8], clen)
        return result(sc, st, nout, "AESCFB")

    # encrypt / decrypt: complete Python methods (views, CFB1 and bits=, every
    # error) through cffi; the FastMethods after them answer the common call
    # -- CFB128/CFB8, positional buffer arguments -- in C, as in AESGCM.
    def encrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        return self._one_shot(_cfb_encrypt, iv, data, bits)

    def decrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        return self._one_shot(_cfb_decrypt, iv, data, bits)

    encrypt = _fastcall.FastMethod("cfb_encrypt", encrypt)  # type: ignore[assignment]
    decrypt = _fastcall.FastMethod("cfb_decrypt", decrypt)  # type: ignore[assignment]

    def encryptor(self, iv: bytes | bytearray | memoryview) -> CfbStream:
        return CfbStream(self, 0, iv)

    def decryptor(self, iv: bytes | bytearray | memoryview) -> CfbStream:
        return CfbStream(self, 1, iv)


class CfbStream:
    """Streaming CFB in one direction.  CFB128/CFB8: any chunk sizes.  CFB1:
    whole bytes, except that a final chunk may carry a partial byte (bits=)."""

    def __init__(self, owner: AESCFB, direction: int, iv: object) -> None:
        ivv = _check_iv(iv)
        self._owner = owner  # the stream borrows the C key
        out = ffi.new("vc_cfb_stream **")
        raise_for_status(
            lib.vc_cfb_stream_new(out, owner._key, direction, cbuf(ivv)), "AESCFB stream"
        )
        self._s: Any = ffi.gc(out[0], lib.vc_cfb_stream_free)
        self._done = False

    def update(self, data: bytes | bytearray | memoryview, bits: int | None = None) -> bytes:
        dv = as_view("data", data)
        _, nout = self._owner._length(dv, bits)
        out = bytearray(nout)
        self.update_into(dv, out, bits)
        return bytes(out)

    def update_into(
        self,
        data: bytes | bytearray | memoryview,
        buf: bytearray | memoryview,
        bits: int | None = None,
    ) -> int:
        """Process data into buf (which may be data itself); returns bytes written."""
        if self._done:
            raise StreamStateError("CFB stream already finalized")
        dv = as_view("data", data)
        clen, nout = self._owner._length(dv, bits)
        o = writable_view("buf", buf, nout)
        st = lib.vc_cfb_stream_update(
            self._s, cbuf(dv), ffi.from_buffer("uint8_t[]", o, require_writable=True), clen
        )
        raise_for_status(st, "CFB update")
        return nout

    def finalize(self) -> bytes:
        if self._done:
            raise StreamStateError("CFB stream already finalized")
        self._done = True
        return b""
