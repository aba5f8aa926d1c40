"""AES-CFB with segment sizes 128, 8 and 1 bits (NIST SP 800-38A)."""

from __future__ import annotations

from typing import Any

from vaescrypt import _fastcall
from vaescrypt._buffers import as_view, cbuf, writable_view
from vaescrypt._errors import StreamStateError, raise_for_status, raise_for_stream_status
from vaescrypt._key import KEY_CLASSES, bind, key_ref, make_key, wrong_self
from vaescrypt._names import dir_id, path_name
from vaescrypt._native import ffi, lib
from vaescrypt._scratch import U8, result, take

# Bound once: a module global is one dict lookup, `lib.x` is two.
_cfb_encrypt = lib.vc_cfb_encrypt
_cfb_decrypt = lib.vc_cfb_decrypt

_KEY_P = ffi.typeof("vc_cfb_key *")
_KIND = _fastcall.KEY_CFB

# _fastcall (keys, the C methods) calls the library functions inside
# _native, whose addresses it gets here: one library in the process.
bind("cfb")

SEGMENT_SIZES = (128, 8, 1)


def _check_segment_size(segment_size: object) -> None:
    if not isinstance(segment_size, int) or isinstance(segment_size, bool):
        raise TypeError("segment_size must be an int")
    if segment_size not in SEGMENT_SIZES:
        raise ValueError(f"segment_size must be 128, 8 or 1, got {segment_size}")


def _length(segment_size: int, view: memoryview, bits: int | None) -> tuple[int, int]:
    """(length argument for C, output bytes) for data under a key of this
    segment size."""
    if segment_size != 1:
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

    # _ref in a slot: the C methods read it at a fixed offset (see AESGCM).
    __slots__ = ("__dict__", "__weakref__", "_ref", "_segment_size")

    def __init__(
        self, key: bytes | bytearray | memoryview, segment_size: int = 128, impl: str | None = None
    ) -> None:
        # _ref (a _fastcall.KeyRef) owns the native key and frees it with
        # this object; the C methods read the key and segment size from it.
        self._ref = make_key(
            _fastcall.KEY_CFB,
            "AESCFB",
            key,
            impl,
            "segment_size",
            segment_size,
            SEGMENT_SIZES,
            _check_segment_size,
        )
        self._segment_size = segment_size

    @property
    def _key(self) -> Any:
        """The key as a cffi pointer.  Borrowed, and only valid while
        self._ref is this key's KeyRef: every call in this module that passes
        a key to C holds the KeyRef in a local (or a stream) instead, because
        cffi releases the GIL and another thread may re-run __init__."""
        return ffi.cast(_KEY_P, key_ref(self, _KIND, "AESCFB._key").addr)

    @property
    def segment_size(self) -> int:
        return int(key_ref(self, _KIND, "AESCFB.segment_size").param)

    def path(self, direction: str) -> str:
        ref = key_ref(self, _KIND, "AESCFB.path")  # held across the call: see _key
        code = lib.vc_cfb_key_path(ffi.cast(_KEY_P, ref.addr), dir_id(direction))
        raise_for_status(min(code, 0), f"AESCFB {direction}")
        return path_name(code)

    # encrypt / decrypt: complete Python methods (views, CFB1 and bits=, every
    # error) through cffi; the FastMethods after them answer the common call
    # -- CFB128/CFB8, positional buffer arguments -- in C, as in AESGCM.
    def encrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        return _one_shot(self, _cfb_encrypt, iv, data, bits, "AESCFB.encrypt")

    def decrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        return _one_shot(self, _cfb_decrypt, iv, data, bits, "AESCFB.decrypt")

    encrypt = _fastcall.FastMethod("cfb_encrypt", encrypt)  # type: ignore[assignment]
    decrypt = _fastcall.FastMethod("cfb_decrypt", decrypt)  # type: ignore[assignment]

    def encryptor(self, iv: bytes | bytearray | memoryview) -> CfbStream:
        key_ref(self, _KIND, "AESCFB.encryptor")
        return CfbStream(self, 0, iv)

    def decryptor(self, iv: bytes | bytearray | memoryview) -> CfbStream:
        key_ref(self, _KIND, "AESCFB.decryptor")
        return CfbStream(self, 1, iv)


def _one_shot(
    owner: object, fn: Any, iv: object, data: object, bits: int | None, what: str
) -> bytes:
    # A function, not a method: AESCFB.encrypt(an_aesgcm, ...) reaches here
    # and is refused by key_ref (TypeError), not by a missing attribute.
    # The KeyRef is held for the whole call (cffi releases the GIL; a
    # re-keyed owner must not free the key under it), and the length unit
    # (bytes, or bits for CFB1) comes from that same key.
    ref = key_ref(owner, _KIND, what)
    ivv = _check_iv(iv)
    dv = as_view("data", data)
    clen, nout = _length(ref.param, dv, bits)
    sc = take(nout)
    st = fn(ffi.cast(_KEY_P, ref.addr), cbuf(ivv), cbuf(dv), sc[U8], clen)
    return result(sc, st, nout, "AESCFB")


KEY_CLASSES[_KIND] = AESCFB


class CfbStream:
    """Streaming CFB in one direction.  CFB128/CFB8: any chunk sizes.  CFB1:
    whole bytes, except that a final chunk may carry a partial byte (bits=).

    The C stream borrows its key, so the stream holds the key's KeyRef itself
    (not the AESCFB, whose key may be replaced while the stream lives) and
    takes the segment size from it.  One thread at a time: a call made while
    another thread is inside the stream raises ConcurrentUseError.
    After fork(), a stream that another thread was inside at that moment is
    incomplete in the child and raises StreamStateError there (start a new
    one); idle streams work in the child as in the parent.

    As for the GCM streams, every public method checks that it runs on a
    CfbStream, and the key is kept as _keyref (a stream is not a key)."""

    def __init__(self, owner: AESCFB, direction: int, iv: object) -> None:
        if not isinstance(self, CfbStream):
            wrong_self(self, "CfbStream", "CfbStream.__init__")
        self._keyref = ref = key_ref(owner, _KIND, "CfbStream")
        ivv = _check_iv(iv)
        self._segment_size: int = ref.param
        out = ffi.new("vc_cfb_stream **")
        raise_for_status(
            lib.vc_cfb_stream_new(out, ffi.cast(_KEY_P, ref.addr), direction, cbuf(ivv)),
            "AESCFB stream",
        )
        self._s: Any = ffi.gc(out[0], lib.vc_cfb_stream_free)
        self._done = False
        self._ended = False  # CFB1: a partial byte ended the stream (C refuses more)

    def update(self, data: bytes | bytearray | memoryview, bits: int | None = None) -> bytes:
        if not isinstance(self, CfbStream):
            wrong_self(self, "CfbStream", "CfbStream.update")
        dv = as_view("data", data)
        _, nout = _length(self._segment_size, dv, bits)
        out = bytearray(nout)
        self.update_into(dv, out, bits)
        return bytes(out)

    def update_into(
        self,
        data: bytes | bytearray | memoryview,
        buf: bytearray | memoryview,
        bits: int | None = None,
    ) -> int:
        """Process data into buf; returns bytes written.  buf may be data
        itself (the same bytes), but not partly overlap it (ValueError)."""
        if not isinstance(self, CfbStream):
            wrong_self(self, "CfbStream", "CfbStream.update_into")
        if self._done:
            raise StreamStateError("CFB stream already finalized")
        dv = as_view("data", data)
        clen, nout = _length(self._segment_size, dv, bits)
        o = writable_view("buf", buf, nout)
        st = lib.vc_cfb_stream_update(
            self._s, cbuf(dv), ffi.from_buffer("uint8_t[]", o, require_writable=True), clen
        )
        if st:
            raise_for_stream_status(st, "CFB update", not self._ended)
        if bits is not None and bits % 8:
            self._ended = True
        return nout

    def finalize(self) -> bytes:
        if not isinstance(self, CfbStream):
            wrong_self(self, "CfbStream", "CfbStream.finalize")
        if self._done:
            raise StreamStateError("CFB stream already finalized")
        self._done = True
        return b""
