"""Every public vaescrypt method called on an object of every other class.

    python tests/hardening/misuse_sweep.py        # prints "misuse sweep: N calls ...", exit 0

A method reached through its class with a foreign `self`
(`vaescrypt.AESCFB.encrypt(an_aesgcm, iv, data)`,
`vaescrypt.GcmEncryptor(an_aescfb, nonce, None)`,
`vaescrypt.GcmEncryptor.finalize(a_decryptor)`) must raise TypeError before
any address reaches the C library, which would otherwise read one kind of key
with another's layout.  The same calls go to the C entry points directly
(cffi casts of one object's address to another's type): each must answer
VC_ERR_OBJECT without reading past the object's 4-byte tag.
tests/hardening/test_vaescrypt_misuse.py runs this in process and under valgrind
(where any read outside an object is an error), so the module is standalone:
it imports only vaescrypt.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from vaescrypt._native import ffi, lib

import vaescrypt

KEY = bytes(range(32))
NONCE = bytes(12)
IV = bytes(16)


def objects() -> dict[str, Any]:
    """One live object of every public class (three AESCFB segment sizes),
    plus objects that are no vaescrypt class at all."""
    g = vaescrypt.AESGCM(KEY)
    c128 = vaescrypt.AESCFB(KEY)
    return {
        "AESGCM": g,
        "AESCFB128": c128,
        "AESCFB8": vaescrypt.AESCFB(KEY, segment_size=8),
        "AESCFB1": vaescrypt.AESCFB(KEY, segment_size=1),
        "GcmEncryptor": g.encryptor(NONCE),
        "GcmDecryptor": g.decryptor(NONCE),
        "CfbStream": c128.encryptor(IV),
        "None": None,
        "int": 42,
        "bytes": b"0123456789abcdef",
        "object": object(),
    }


def _prop(cls: type, name: str) -> Callable[..., Any]:
    return getattr(cls, name).fget  # type: ignore[no-any-return]


# (class, what, call(obj)): every public method / property of every public
# class, with arguments that are valid for that class; obj is `self` (for a
# stream constructor: the key it is made from), so every object that is not
# an instance of the class must be refused.
CALLS: list[tuple[type, str, Callable[[Any], Any]]] = [
    (vaescrypt.AESGCM, "encrypt", lambda o: vaescrypt.AESGCM.encrypt(o, NONCE, b"x" * 40, None)),
    (
        vaescrypt.AESGCM,
        "encrypt kw",
        lambda o: vaescrypt.AESGCM.encrypt(o, NONCE, data=b"x", associated_data=b""),
    ),
    (vaescrypt.AESGCM, "decrypt", lambda o: vaescrypt.AESGCM.decrypt(o, NONCE, bytes(32), None)),
    (vaescrypt.AESGCM, "encryptor", lambda o: vaescrypt.AESGCM.encryptor(o, NONCE)),
    (vaescrypt.AESGCM, "decryptor", lambda o: vaescrypt.AESGCM.decryptor(o, NONCE)),
    (vaescrypt.AESGCM, "path", lambda o: vaescrypt.AESGCM.path(o, "encrypt")),
    (vaescrypt.AESGCM, "tag_length", lambda o: _prop(vaescrypt.AESGCM, "tag_length")(o)),
    (vaescrypt.AESGCM, "_key", lambda o: _prop(vaescrypt.AESGCM, "_key")(o)),
    # stream constructors: the owner must be a key of the stream's kind
    (vaescrypt.AESGCM, "GcmEncryptor(owner)", lambda o: vaescrypt.GcmEncryptor(o, NONCE, None)),
    (vaescrypt.AESGCM, "GcmDecryptor(owner)", lambda o: vaescrypt.GcmDecryptor(o, NONCE, b"a")),
    (vaescrypt.AESCFB, "encrypt", lambda o: vaescrypt.AESCFB.encrypt(o, IV, b"x" * 40)),
    (vaescrypt.AESCFB, "decrypt", lambda o: vaescrypt.AESCFB.decrypt(o, IV, b"x" * 40)),
    (vaescrypt.AESCFB, "encrypt bits", lambda o: vaescrypt.AESCFB.encrypt(o, IV, b"x", bits=3)),
    (vaescrypt.AESCFB, "encryptor", lambda o: vaescrypt.AESCFB.encryptor(o, IV)),
    (vaescrypt.AESCFB, "decryptor", lambda o: vaescrypt.AESCFB.decryptor(o, IV)),
    (vaescrypt.AESCFB, "path", lambda o: vaescrypt.AESCFB.path(o, "decrypt")),
    (vaescrypt.AESCFB, "segment_size", lambda o: _prop(vaescrypt.AESCFB, "segment_size")(o)),
    (vaescrypt.AESCFB, "_key", lambda o: _prop(vaescrypt.AESCFB, "_key")(o)),
    (vaescrypt.AESCFB, "CfbStream(owner)", lambda o: vaescrypt.CfbStream(o, 0, IV)),
]
# The stream methods are called through the class that defines them: for
# the GCM streams that is the shared base (an encryptor and a decryptor are
# both GCM streams there) and each subclass's finalize / tag.
_GCM_STREAM = vaescrypt.GcmEncryptor.__mro__[1]
CALLS += [
    (_GCM_STREAM, "update_aad", lambda o: vaescrypt.GcmEncryptor.update_aad(o, b"a")),
    (_GCM_STREAM, "update", lambda o: vaescrypt.GcmEncryptor.update(o, b"x" * 20)),
    (
        _GCM_STREAM,
        "update_into",
        lambda o: vaescrypt.GcmEncryptor.update_into(o, b"x" * 20, bytearray(20)),
    ),
    (vaescrypt.GcmEncryptor, "finalize", lambda o: vaescrypt.GcmEncryptor.finalize(o)),
    (vaescrypt.GcmEncryptor, "tag", lambda o: _prop(vaescrypt.GcmEncryptor, "tag")(o)),
    (vaescrypt.GcmDecryptor, "finalize", lambda o: vaescrypt.GcmDecryptor.finalize(o, bytes(16))),
    (vaescrypt.CfbStream, "update", lambda o: vaescrypt.CfbStream.update(o, b"x" * 20)),
    (
        vaescrypt.CfbStream,
        "update_into",
        lambda o: vaescrypt.CfbStream.update_into(o, b"x" * 20, bytearray(20)),
    ),
    (vaescrypt.CfbStream, "finalize", lambda o: vaescrypt.CfbStream.finalize(o)),
]


def sweep_python() -> tuple[int, list[str]]:
    """(calls made, failures): each CALLS entry on every object that is not an
    instance of its class must raise TypeError (and nothing else)."""
    made, bad = 0, []
    for cls, what, call in CALLS:
        for name, obj in objects().items():  # fresh objects: no call sees another's leftovers
            if isinstance(obj, cls):
                continue
            made += 1
            try:
                call(obj)
            except TypeError:
                continue
            except Exception as e:  # noqa: BLE001 - the wrong exception is the finding
                bad.append(f"{cls.__name__}.{what}({name}): {type(e).__name__}: {e}")
            else:
                bad.append(f"{cls.__name__}.{what}({name}): no error")
    return made, bad


def _c_objects() -> dict[str, Any]:
    """Live C objects of the four kinds, as raw addresses (the binding's
    objects keep them alive), plus a freed key of each kind."""
    objs = objects()
    out = {
        "gcm_key": int(ffi.cast("uintptr_t", objs["AESGCM"]._key)),
        "cfb_key": int(ffi.cast("uintptr_t", objs["AESCFB8"]._key)),
        "gcm_stream": int(ffi.cast("uintptr_t", objs["GcmEncryptor"]._s)),
        "cfb_stream": int(ffi.cast("uintptr_t", objs["CfbStream"]._s)),
    }
    out["_keep"] = objs  # type: ignore[assignment]
    return out


def sweep_c() -> tuple[int, list[str]]:
    """Every C entry point with every other kind of object: VC_ERR_OBJECT."""
    objs = _c_objects()
    tag = ffi.new("uint8_t[16]")
    buf = ffi.new("uint8_t[64]")
    out = ffi.new("uint8_t[64]")
    iv = ffi.new("uint8_t[16]")
    entry: dict[str, tuple[str, Callable[[Any], int]]] = {
        "vc_gcm_encrypt": (
            "gcm_key",
            lambda p: lib.vc_gcm_encrypt(
                ffi.cast("vc_gcm_key *", p), iv, 12, ffi.NULL, 0, buf, out, 64, tag, 16
            ),
        ),
        "vc_gcm_decrypt": (
            "gcm_key",
            lambda p: lib.vc_gcm_decrypt(
                ffi.cast("vc_gcm_key *", p), iv, 12, ffi.NULL, 0, buf, out, 64, tag, 16
            ),
        ),
        "vc_gcm_decrypt iv7": (
            "gcm_key",
            lambda p: lib.vc_gcm_decrypt(
                ffi.cast("vc_gcm_key *", p), iv, 7, ffi.NULL, 0, buf, out, 64, tag, 16
            ),
        ),
        "vc_gcm_key_path": (
            "gcm_key",
            lambda p: lib.vc_gcm_key_path(ffi.cast("vc_gcm_key *", p), 0),
        ),
        "vc_gcm_stream_new": (
            "gcm_key",
            lambda p: lib.vc_gcm_stream_new(
                ffi.new("vc_gcm_stream **"), ffi.cast("vc_gcm_key *", p), 0, iv, 12
            ),
        ),
        "vc_gcm_stream_aad": (
            "gcm_stream",
            lambda p: lib.vc_gcm_stream_aad(ffi.cast("vc_gcm_stream *", p), buf, 5),
        ),
        "vc_gcm_stream_update": (
            "gcm_stream",
            lambda p: lib.vc_gcm_stream_update(ffi.cast("vc_gcm_stream *", p), buf, out, 64),
        ),
        "vc_gcm_stream_finish": (
            "gcm_stream",
            lambda p: lib.vc_gcm_stream_finish(ffi.cast("vc_gcm_stream *", p), tag, 16),
        ),
        "vc_cfb_encrypt": (
            "cfb_key",
            lambda p: lib.vc_cfb_encrypt(ffi.cast("vc_cfb_key *", p), iv, buf, out, 64),
        ),
        "vc_cfb_decrypt": (
            "cfb_key",
            lambda p: lib.vc_cfb_decrypt(ffi.cast("vc_cfb_key *", p), iv, buf, out, 64),
        ),
        "vc_cfb_key_path": (
            "cfb_key",
            lambda p: lib.vc_cfb_key_path(ffi.cast("vc_cfb_key *", p), 1),
        ),
        "vc_cfb_stream_new": (
            "cfb_key",
            lambda p: lib.vc_cfb_stream_new(
                ffi.new("vc_cfb_stream **"), ffi.cast("vc_cfb_key *", p), 0, iv
            ),
        ),
        "vc_cfb_stream_update": (
            "cfb_stream",
            lambda p: lib.vc_cfb_stream_update(ffi.cast("vc_cfb_stream *", p), buf, out, 64),
        ),
    }
    # The free functions must leave an object of another kind alone (freeing
    # it with the wrong size would wipe past its end); each is called on every
    # foreign object, which must still work afterwards (checked below).
    frees = {
        "vc_gcm_key_free": ("gcm_key", lambda p: lib.vc_gcm_key_free(ffi.cast("vc_gcm_key *", p))),
        "vc_gcm_stream_free": (
            "gcm_stream",
            lambda p: lib.vc_gcm_stream_free(ffi.cast("vc_gcm_stream *", p)),
        ),
        "vc_cfb_key_free": ("cfb_key", lambda p: lib.vc_cfb_key_free(ffi.cast("vc_cfb_key *", p))),
        "vc_cfb_stream_free": (
            "cfb_stream",
            lambda p: lib.vc_cfb_stream_free(ffi.cast("vc_cfb_stream *", p)),
        ),
    }
    kinds = ("gcm_key", "cfb_key", "gcm_stream", "cfb_stream")
    made, bad = 0, []
    for fn, (own, call) in entry.items():
        for kind in kinds:
            if kind == own:
                continue
            made += 1
            st = call(objs[kind])
            if st != lib.VC_ERR_OBJECT:
                bad.append(f"{fn}({kind}) -> {st}, not VC_ERR_OBJECT")
    for fn, (own, call) in frees.items():
        for kind in kinds:
            if kind != own:
                made += 1
                call(objs[kind])
    # the objects survived the foreign frees: each still works
    keep = objs["_keep"]
    made += 1
    g = keep["AESGCM"]
    if g.decrypt(NONCE, g.encrypt(NONCE, b"still here", None), None) != b"still here":
        bad.append("a GCM key changed after foreign free calls")
    enc = keep["GcmEncryptor"]
    enc.update(b"x")
    enc.finalize()
    keep["CfbStream"].update(b"x")
    return made, bad


def main() -> int:
    made_py, bad_py = sweep_python()
    made_c, bad_c = sweep_c()
    for line in bad_py + bad_c:
        print(f"misuse sweep: FAIL {line}")
    print(
        f"misuse sweep: {made_py} Python calls, {made_c} C calls, "
        f"{len(bad_py) + len(bad_c)} failures"
    )
    return 1 if bad_py or bad_c else 0


if __name__ == "__main__":
    sys.exit(main())
