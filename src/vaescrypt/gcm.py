"""AES-GCM: one-shot AEAD (AESGCM.encrypt/decrypt) and streaming contexts."""

from __future__ import annotations

from typing import Any

from vaescrypt import _fastcall
from vaescrypt._buffers import as_view, cbuf, writable_view
from vaescrypt._errors import (
    InvalidTag,
    StreamStateError,
    raise_for_status,
    raise_for_stream_status,
)
from vaescrypt._key import KEY_CLASSES, bind, key_ref, make_key, wrong_self
from vaescrypt._names import path_name
from vaescrypt._native import ffi, lib
from vaescrypt._scratch import U8, at, result, take

# Bound once: a module global is one dict lookup, `lib.x` is two.
_gcm_encrypt = lib.vc_gcm_encrypt
_gcm_decrypt = lib.vc_gcm_decrypt
_KEY_P = ffi.typeof("vc_gcm_key *")
_cast = ffi.cast
_KIND = _fastcall.KEY_GCM
#: SP 800-38D's plaintext limit, 2^36 - 32 bytes.  Checked before any output
#: is allocated: a longer message is the library's length ValueError, never
#: a MemoryError from allocating its output first.
MAX_DATA = int(lib.VC_GCM_MAX_DATA)

# _fastcall (keys, the C methods) calls the library functions inside
# _native, whose addresses it gets here: one library in the process.
bind("gcm")

TAG_LENGTHS = (4, 8, 12, 13, 14, 15, 16)


def _check_tag_length(tag_length: object) -> None:
    if not isinstance(tag_length, int) or isinstance(tag_length, bool):
        raise TypeError("tag_length must be an int")
    if tag_length not in TAG_LENGTHS:
        raise ValueError(f"GCM tag_length must be 4, 8 or 12..16 bytes, got {tag_length}")


def _check_data_length(n: int, what: str) -> None:
    if n > MAX_DATA:
        raise_for_status(lib.VC_ERR_DATA_LENGTH, f"{what} ({n} bytes; at most {MAX_DATA})")


def _check_nonce(nonce: object) -> memoryview:
    view = as_view("nonce", nonce)
    if len(view) == 0:
        raise ValueError("GCM nonce must be at least 1 byte (12 bytes recommended)")
    return view


class AESGCM:
    """AES-GCM with a key of 16, 24 or 32 bytes.

    impl: None (the dispatcher picks per direction) or a path name such as
    "aesni"; a path this CPU cannot run raises UnsupportedImplementation.
    """

    # _ref in a slot: the C methods read it at a fixed offset (~1 ns, against
    # ~12 ns for a generic attribute lookup; _fastcall.c owner_ref).
    # __dict__ and __weakref__ keep instances as open as a plain class's.
    __slots__ = ("__dict__", "__weakref__", "_ref", "_tag_length")

    def __init__(
        self, key: bytes | bytearray | memoryview, tag_length: int = 16, impl: str | None = None
    ) -> None:
        # _ref (a _fastcall.KeyRef) owns the native key and frees it with
        # this object; the C methods read the key and tag length from it.
        self._ref = make_key(
            _fastcall.KEY_GCM,
            "AESGCM",
            key,
            impl,
            "tag_length",
            tag_length,
            TAG_LENGTHS,
            _check_tag_length,
        )
        self._tag_length = tag_length

    @property
    def _key(self) -> Any:
        """The key as a cffi pointer.  Borrowed, and only valid while
        self._ref is this key's KeyRef: every call in this module that passes
        a key to C holds the KeyRef in a local (or a stream) instead, because
        cffi releases the GIL and another thread may re-run __init__."""
        return _cast(_KEY_P, key_ref(self, _KIND, "AESGCM._key").addr)

    @property
    def tag_length(self) -> int:
        return int(key_ref(self, _KIND, "AESGCM.tag_length").param)

    def path(self, direction: str) -> str:
        """The code path this key uses for "encrypt" or "decrypt"."""
        from vaescrypt._names import dir_id

        ref = key_ref(self, _KIND, "AESGCM.path")  # held across the call: see _key
        code = lib.vc_gcm_key_path(_cast(_KEY_P, ref.addr), dir_id(direction))
        raise_for_status(min(code, 0), f"AESGCM {direction}")
        return path_name(code)

    # encrypt / decrypt: the Python methods below are complete (any buffer,
    # keywords, every error) and go through cffi; the FastMethods after them
    # answer the common call -- positional buffer arguments -- in C without a
    # Python frame and hand everything else, refusals included, to these.
    def encrypt(
        self,
        nonce: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview | None,
        associated_data: bytes | bytearray | memoryview | None,
    ) -> bytes:
        """Ciphertext || tag."""
        # The KeyRef is held (and the tag length read from it) for the whole
        # call: cffi releases the GIL, and a re-keyed owner must not free the
        # key under the call or change the tag length between two reads.
        ref = key_ref(self, _KIND, "AESGCM.encrypt")
        nv = _check_nonce(nonce)
        dv = as_view("data", data, allow_none=True)
        av = as_view("associated_data", associated_data, allow_none=True)
        tl = ref.param
        n = len(dv)
        _check_data_length(n, "AESGCM.encrypt")
        total = n + tl
        sc = take(total)
        st = _gcm_encrypt(
            _cast(_KEY_P, ref.addr),
            cbuf(nv),
            len(nv),
            cbuf(av),
            len(av),
            cbuf(dv),
            sc[U8],
            n,
            at(sc, n),
            tl,
        )
        return result(sc, st, total, "AESGCM.encrypt")

    def decrypt(
        self,
        nonce: bytes | bytearray | memoryview,
        data: bytes | bytearray | memoryview,
        associated_data: bytes | bytearray | memoryview | None,
    ) -> bytes:
        """Plaintext of ciphertext || tag; InvalidTag (and nothing else) on forgery."""
        # Data shorter than the tag is refused before the nonce is looked at.
        ref = key_ref(self, _KIND, "AESGCM.decrypt")  # held, tag length from it: see encrypt
        tl = ref.param
        dv = as_view("data", data)
        if len(dv) < tl:
            raise InvalidTag("AESGCM.decrypt: data shorter than the tag")
        nv = _check_nonce(nonce)
        av = as_view("associated_data", associated_data, allow_none=True)
        n = len(dv) - tl
        _check_data_length(n, "AESGCM.decrypt")
        sc = take(n)
        st = _gcm_decrypt(
            _cast(_KEY_P, ref.addr),
            cbuf(nv),
            len(nv),
            cbuf(av),
            len(av),
            cbuf(dv[:n]),
            sc[U8],
            n,
            cbuf(dv[n:]),
            tl,
        )
        return result(sc, st, n, "AESGCM.decrypt")

    encrypt = _fastcall.FastMethod("gcm_encrypt", encrypt)  # type: ignore[assignment]
    decrypt = _fastcall.FastMethod("gcm_decrypt", decrypt)  # type: ignore[assignment]

    def encryptor(
        self,
        nonce: bytes | bytearray | memoryview,
        associated_data: bytes | bytearray | memoryview | None = None,
    ) -> GcmEncryptor:
        key_ref(self, _KIND, "AESGCM.encryptor")
        return GcmEncryptor(self, nonce, associated_data)

    def decryptor(
        self,
        nonce: bytes | bytearray | memoryview,
        associated_data: bytes | bytearray | memoryview | None = None,
    ) -> GcmDecryptor:
        key_ref(self, _KIND, "AESGCM.decryptor")
        return GcmDecryptor(self, nonce, associated_data)


KEY_CLASSES[_KIND] = AESGCM


class _GcmStream:
    """One message.  The C stream borrows its key, so the stream holds the
    key's KeyRef itself -- not the AESGCM, whose key may be replaced (its
    __init__ run again) while the stream lives -- and takes the tag length
    from it.  One thread at a time: a call made while another thread is
    inside the stream raises ConcurrentUseError (the C library's busy flag).
    After fork(), a stream that another thread was inside at that moment is
    incomplete in the child and raises StreamStateError there (start a new
    one); idle streams work in the child as in the parent.

    Every public method first checks that it was called on a stream of its
    own class (GcmEncryptor.finalize(a_decryptor) is a TypeError): the C
    stream of an encryptor and of a decryptor have the same C type, so cffi
    would not tell them apart.  The attribute is _keyref, not _ref: a stream
    is not a key, and AESGCM.encrypt(a_stream, ...) must not find one."""

    _DIR = 0

    def __init__(self, owner: AESGCM, nonce: object, aad: object) -> None:
        if not isinstance(self, _GcmStream):
            wrong_self(self, "GcmEncryptor or GcmDecryptor", "GCM stream __init__")
        self._keyref = ref = key_ref(owner, _KIND, type(self).__name__)
        nv = _check_nonce(nonce)
        self._tag_length: int = ref.param
        out = ffi.new("vc_gcm_stream **")
        raise_for_status(
            lib.vc_gcm_stream_new(out, _cast(_KEY_P, ref.addr), self._DIR, cbuf(nv), len(nv)),
            type(self).__name__,
        )
        self._s: Any = ffi.gc(out[0], lib.vc_gcm_stream_free)
        self._done = False
        self._data = False  # update_into succeeded once: AAD is closed
        if aad is not None:
            self.update_aad(aad)  # type: ignore[arg-type]

    def _check_open(self) -> None:
        if self._done:
            raise StreamStateError(f"{type(self).__name__} already finalized")

    def update_aad(self, data: bytes | bytearray | memoryview) -> None:
        """More associated data; only before the first update()."""
        if not isinstance(self, _GcmStream):
            wrong_self(self, "GcmEncryptor or GcmDecryptor", "update_aad")
        self._check_open()
        v = as_view("associated_data", data)
        raise_for_stream_status(
            lib.vc_gcm_stream_aad(self._s, cbuf(v), len(v)), "update_aad", not self._data
        )

    def update(self, data: bytes | bytearray | memoryview) -> bytes:
        if not isinstance(self, _GcmStream):
            wrong_self(self, "GcmEncryptor or GcmDecryptor", "update")
        v = as_view("data", data)
        # checked before the output is allocated (the C call checks the
        # stream's running total as well)
        _check_data_length(len(v), f"{type(self).__name__}.update")
        out = bytearray(len(v))
        self.update_into(v, out)
        return bytes(out)

    def update_into(self, data: bytes | bytearray | memoryview, buf: bytearray | memoryview) -> int:
        """Process data into buf; returns len(data).  buf may be data itself
        (the same bytes), but not partly overlap it (ValueError)."""
        if not isinstance(self, _GcmStream):
            wrong_self(self, "GcmEncryptor or GcmDecryptor", "update_into")
        self._check_open()
        v = as_view("data", data)
        o = writable_view("buf", buf, len(v))
        st = lib.vc_gcm_stream_update(
            self._s, cbuf(v), ffi.from_buffer("uint8_t[]", o, require_writable=True), len(v)
        )
        if st:
            raise_for_stream_status(st, "update", True)  # not _done: checked above
        self._data = True
        return len(v)


class GcmEncryptor(_GcmStream):
    """Streaming GCM encryption; .tag is set by finalize()."""

    _DIR = 0

    def __init__(self, owner: AESGCM, nonce: object, aad: object) -> None:
        super().__init__(owner, nonce, aad)
        self._tag: bytes | None = None

    def finalize(self) -> bytes:
        if not isinstance(self, GcmEncryptor):
            wrong_self(self, "GcmEncryptor", "GcmEncryptor.finalize")
        self._check_open()
        tag = bytearray(self._tag_length)
        raise_for_stream_status(
            lib.vc_gcm_stream_finish(
                self._s, ffi.from_buffer("uint8_t[]", tag, require_writable=True), len(tag)
            ),
            "finalize",
            True,
        )
        self._done = True
        self._tag = bytes(tag)
        return b""

    @property
    def tag(self) -> bytes:
        if not isinstance(self, GcmEncryptor):
            wrong_self(self, "GcmEncryptor", "GcmEncryptor.tag")
        if self._tag is None:
            raise StreamStateError("tag is available after finalize()")
        return self._tag


class GcmDecryptor(_GcmStream):
    """Streaming GCM decryption.  Plaintext from update() is unauthenticated
    until finalize(tag) returns without raising InvalidTag."""

    _DIR = 1

    def finalize(self, tag: bytes | bytearray | memoryview) -> bytes:
        if not isinstance(self, GcmDecryptor):
            wrong_self(self, "GcmDecryptor", "GcmDecryptor.finalize")
        self._check_open()
        tv = as_view("tag", tag)
        if len(tv) != self._tag_length:
            raise ValueError(
                f"tag must be {self._tag_length} bytes (the key's tag_length), got {len(tv)}"
            )
        st = lib.vc_gcm_stream_finish(self._s, cbuf(tv), len(tv))
        if st == lib.VC_ERR_STATE:  # another thread is inside: still open
            raise_for_stream_status(st, "finalize", True)
        self._done = True
        raise_for_status(st, "finalize")
        return b""
