"""AES-CFB with segment sizes 128, 8 and 1 bits (NIST SP 800-38A)."""

from __future__ import annotations

from typing import Any

from vaescrypt._buffers import as_view, cbuf, writable_view
from vaescrypt._errors import StreamStateError, check_mask, raise_for_status
from vaescrypt._key import check_key
from vaescrypt._names import dir_id, impl_id, path_name
from vaescrypt._native import ffi, lib
from vaescrypt._scratch import CHARS, POOL, POOL_MAX_BYTES, U8, give_back, new_scratch, take

# Bound once: a module global is one dict lookup, `lib.x` is two.
_cfb_encrypt = lib.vc_cfb_encrypt
_cfb_decrypt = lib.vc_cfb_decrypt
_unpack = ffi.unpack

SEGMENT_SIZES = (128, 8, 1)


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
        kview = check_key("AESCFB", key)
        if not isinstance(segment_size, int) or isinstance(segment_size, bool):
            raise TypeError("segment_size must be an int")
        if segment_size not in SEGMENT_SIZES:
            raise ValueError(f"segment_size must be 128, 8 or 1, got {segment_size}")
        impl_code = impl_id(impl)
        check_mask()
        out = ffi.new("vc_cfb_key **")
        raise_for_status(
            lib.vc_cfb_key_new(out, cbuf(kview), len(kview), segment_size, impl_code),
            f"AESCFB(segment_size={segment_size}, impl={impl!r})",
        )
        self._key: Any = ffi.gc(out[0], lib.vc_cfb_key_free)
        self._segment_size = segment_size

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
        """encrypt()/decrypt() for views, CFB1, bits= and argument errors."""
        ivv = _check_iv(iv)
        dv = as_view("data", data)
        clen, nout = self._length(dv, bits)
        sc = take(nout)
        st = fn(self._key, cbuf(ivv), cbuf(dv), sc[U8], clen)
        if st:
            give_back(sc)
            raise_for_status(st, "AESCFB")
        out: bytes = _unpack(sc[CHARS], nout)
        give_back(sc)
        return out

    def encrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        # Fast path (CFB128/CFB8, exact bytes, pooled output buffer): see
        # AESGCM.encrypt.  The C call takes the IV without a length, so its
        # length is the one check made here.
        if (
            type(iv) is not bytes or type(data) is not bytes or bits is not None
            or self._segment_size == 1 or len(iv) != 16
        ):
            return self._one_shot(_cfb_encrypt, iv, data, bits)
        n = len(data)
        if n > POOL_MAX_BYTES:
            return self._one_shot(_cfb_encrypt, iv, data, bits)
        try:
            sc = POOL.pop()
        except IndexError:
            sc = new_scratch(n)
        if sc[2] < n:  # CAPACITY
            sc = new_scratch(n)
        st = _cfb_encrypt(self._key, iv, data, sc[0], n)
        if st:
            POOL.append(sc)
            raise_for_status(st, "AESCFB")
        out: bytes = _unpack(sc[1], n)
        POOL.append(sc)
        return out

    def decrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        if (
            type(iv) is not bytes or type(data) is not bytes or bits is not None
            or self._segment_size == 1 or len(iv) != 16
        ):
            return self._one_shot(_cfb_decrypt, iv, data, bits)
        n = len(data)
        if n > POOL_MAX_BYTES:
            return self._one_shot(_cfb_decrypt, iv, data, bits)
        try:
            sc = POOL.pop()
        except IndexError:
            sc = new_scratch(n)
        if sc[2] < n:  # CAPACITY
            sc = new_scratch(n)
        st = _cfb_decrypt(self._key, iv, data, sc[0], n)
        if st:
            POOL.append(sc)
            raise_for_status(st, "AESCFB")
        out: bytes = _unpack(sc[1], n)
        POOL.append(sc)
        return out

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
