"""AES-CFB with segment sizes 128, 8 and 1 bits (NIST SP 800-38A)."""

from __future__ import annotations

from typing import Any, NoReturn

from vaescrypt import _fastcall
from vaescrypt._buffers import as_view, cbuf, writable_view
from vaescrypt._errors import StreamStateError, check_mask, raise_for_status
from vaescrypt._key import check_key, function_address
from vaescrypt._names import dir_id, impl_id, path_name
from vaescrypt._native import ffi, lib
from vaescrypt._scratch import U8, result, take

# Bound once: a module global is one dict lookup, `lib.x` is two.
_cfb_encrypt = lib.vc_cfb_encrypt
_cfb_decrypt = lib.vc_cfb_decrypt

# The C-API fast path (see _fastcall.c) calls the library functions inside
# _native, whose addresses it gets here: one library in the process.
_fastcall.bind_cfb(function_address("vc_cfb_encrypt"), function_address("vc_cfb_decrypt"))
_fastcall.bind_cfb_key(function_address("vc_cfb_key_new"), function_address("vc_cfb_key_free"))
_new_key = _fastcall.cfb_key_new
_KEY_P = ffi.typeof("vc_cfb_key *")
_PATH_AUTO = int(lib.VC_PATH_AUTO)
_fast_encrypt = _fastcall.cfb_encrypt
_fast_decrypt = _fastcall.cfb_decrypt

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
        if (
            type(key) is bytes and impl is None and type(segment_size) is int
            and segment_size in SEGMENT_SIZES and len(key) in (16, 24, 32)
        ):
            # Fast path, as in AESGCM: a bad VAESCRYPT_CPU_MASK comes back as
            # VC_ERR_CPU_MASK -> CpuMaskError.
            ref = _new_key(key, segment_size, _PATH_AUTO)
        else:
            kview = check_key("AESCFB", key)
            if not isinstance(segment_size, int) or isinstance(segment_size, bool):
                raise TypeError("segment_size must be an int")
            if segment_size not in SEGMENT_SIZES:
                raise ValueError(f"segment_size must be 128, 8 or 1, got {segment_size}")
            impl_code = impl_id(impl)
            check_mask()
            ref = _new_key(kview, segment_size, impl_code)
        if type(ref) is int:
            raise_for_status(ref, f"AESCFB(segment_size={segment_size}, impl={impl!r})")
        # ref (a _fastcall.KeyRef) owns the native key and frees it with this
        # object.  _key is the cffi view of it (borrowed), for the cffi calls.
        self._ref = ref
        self._key: Any = ffi.cast(_KEY_P, ref.addr)
        self._segment_size = segment_size
        # The key's address for _fastcall, or 0 for CFB1, whose lengths are
        # bit counts: never on the fast path.
        self._addr = ref.addr if segment_size != 1 else 0

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
        return result(sc, st, nout, "AESCFB")

    def encrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        # Fast path (CFB128/CFB8, exact bytes): one METH_FASTCALL call that
        # returns the new bytes, or the library's status as an int (the IV
        # length is checked in C), diagnosed by _fail with the general path's
        # wording.  Everything else takes _one_shot.
        if type(iv) is not bytes or type(data) is not bytes or bits is not None or not self._addr:
            return self._one_shot(_cfb_encrypt, iv, data, bits)
        out = _fast_encrypt(self._addr, iv, data)
        if type(out) is int:
            self._fail(out, iv)
        return out

    def decrypt(
        self,
        iv: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        bits: int | None = None,
    ) -> bytes:
        if type(iv) is not bytes or type(data) is not bytes or bits is not None or not self._addr:
            return self._one_shot(_cfb_decrypt, iv, data, bits)
        out = _fast_decrypt(self._addr, iv, data)
        if type(out) is int:
            self._fail(out, iv)
        return out

    @staticmethod
    def _fail(status: int, iv: bytes) -> NoReturn:
        """The error for a failed fast-path call, with _one_shot's wording."""
        _check_iv(iv)
        raise_for_status(status, "AESCFB")
        raise AssertionError("unreachable: a nonzero status always raises")

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
