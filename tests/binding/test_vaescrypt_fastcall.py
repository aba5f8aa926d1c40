"""The C methods and key references (vaescrypt._fastcall) against the cffi path.

Positional calls with bytes / bytearray / memoryview arguments are answered
in C (each FastMethod counts them in `hits`); keyword calls, and everything
C refuses, take the complete Python method through cffi.  Comparing the two
on the same inputs checks the C side against the general path.
"""

from __future__ import annotations

import gc
import os
import random
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _vc_ref import cfb128
from vaescrypt._native import ffi, lib

import vaescrypt
from vaescrypt import _fastcall, gcm
from vaescrypt._names import path_id

SEED = 0x5EED_FA57
# Around the GIL-release thresholds, the 16-byte block, and the old scratch
# pool's limit (1 MiB), above which the cffi path allocates its own buffer.
SIZES = sorted(
    {
        0,
        1,
        15,
        16,
        17,
        63,
        64,
        255,
        256,
        1420,
        _fastcall.CFB_ENCRYPT_GIL_RELEASE_MIN - 1,
        _fastcall.CFB_ENCRYPT_GIL_RELEASE_MIN,
        _fastcall.GCM_GIL_RELEASE_MIN - 1,
        _fastcall.GCM_GIL_RELEASE_MIN,
        _fastcall.GCM_GIL_RELEASE_MIN + 17,
        _fastcall.CFB_DECRYPT_GIL_RELEASE_MIN - 1,
        _fastcall.CFB_DECRYPT_GIL_RELEASE_MIN,
        65536 + 5,
        (1 << 20) + 3,
    }
)
VC_ERR_TAG_LENGTH = int(lib.VC_ERR_TAG_LENGTH)


@pytest.fixture
def rng() -> random.Random:
    return random.Random(SEED)


def _error(fn: Callable[[], object]) -> tuple[type[BaseException], str]:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception itself is the result
        return type(e), str(e)
    raise AssertionError("no exception raised")


# ------------------------------------------------------------ agreement --


@pytest.mark.parametrize("path", vaescrypt.available("gcm", "encrypt"))
def test_gcm_fast_matches_cffi(path: str, rng: random.Random) -> None:
    # The C fast case (FastMethod) counts what it answers itself; a keyword
    # call always takes the Python method (cffi).
    seal, open_ = vaescrypt.AESGCM.encrypt, vaescrypt.AESGCM.decrypt
    for size in SIZES:
        if path == "generic" and size > 70000:
            continue  # ~70 MB/s: the big sizes add nothing but time
        key = rng.randbytes(rng.choice((16, 24, 32)))
        tl = rng.choice(gcm.TAG_LENGTHS)
        g = vaescrypt.AESGCM(key, tag_length=tl, impl=path)
        nonce = rng.randbytes(rng.choice((1, 8, 12, 13, 16, 60)))
        data = rng.randbytes(size)
        aad = rng.choice((None, b"", rng.randbytes(rng.randrange(1, 100))))
        s0, o0 = seal.hits, open_.hits
        fast = g.encrypt(nonce, data, aad)
        views = g.encrypt(
            bytearray(nonce), memoryview(data), None if aad is None else bytearray(aad)
        )
        assert seal.hits == s0 + 2  # bytes and views: C
        slow = g.encrypt(nonce, data, associated_data=aad)
        assert seal.hits == s0 + 2
        assert type(fast) is bytes and fast == slow == views and len(fast) == size + tl
        assert g.decrypt(nonce, fast, aad) == data == g.decrypt(memoryview(nonce), fast, aad)
        assert open_.hits == o0 + 2
        assert g.decrypt(nonce, fast, associated_data=aad) == data
        assert open_.hits == o0 + 2
        if tl == 16 and len(nonce) >= 8 and aad is not None:
            # An independent implementation, where it takes the parameters.
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            assert AESGCM(key).encrypt(nonce, data, aad) == fast


@pytest.mark.parametrize("segment", [128, 8])
def test_cfb_fast_matches_cffi(segment: int, rng: random.Random) -> None:
    enc, dec = vaescrypt.AESCFB.encrypt, vaescrypt.AESCFB.decrypt
    mode = "cfb128" if segment == 128 else "cfb8"
    for path in vaescrypt.available(mode):
        for size in SIZES:
            if segment == 8 and size > 70000 or path == "generic" and size > 70000:
                continue  # CFB8 and the generic path are slow: keep the test short
            key = rng.randbytes(rng.choice((16, 24, 32)))
            c = vaescrypt.AESCFB(key, segment_size=segment, impl=path)
            iv = rng.randbytes(16)
            data = rng.randbytes(size)
            e0, d0 = enc.hits, dec.hits
            ct = c.encrypt(iv, data)
            assert ct == c.encrypt(iv, data=data) == c.encrypt(bytearray(iv), bytearray(data))
            pt = c.decrypt(iv, ct)
            assert pt == data == c.decrypt(iv, data=ct) == c.decrypt(memoryview(iv), memoryview(ct))
            assert enc.hits == e0 + 2 and dec.hits == d0 + 2  # keywords: the Python method


def test_cfb1_keeps_the_bit_path() -> None:
    h0 = vaescrypt.AESCFB.encrypt.hits
    c = vaescrypt.AESCFB(bytes(16), segment_size=1)
    ct = c.encrypt(bytes(16), b"\xa5\x5a\xff")
    assert len(ct) == 3 and c.decrypt(bytes(16), ct) == b"\xa5\x5a\xff"
    assert len(c.encrypt(bytes(16), b"\xff\xff", bits=9)) == 2
    # CFB1 lengths are bit counts: never the byte-only fast path
    assert vaescrypt.AESCFB.encrypt.hits == h0


def test_argument_types_mean_the_same_either_way() -> None:
    """bytes, bytearray and memoryview are taken in C; whatever the Python
    method refuses (another buffer type, a non-contiguous view) is refused
    the same way, never accepted by C alone."""
    import array

    g = vaescrypt.AESGCM(bytes(range(32)))
    nonce, data, aad = bytes(12), bytes(range(200)), b"header"
    want = g.encrypt(nonce, data, aad)
    h = vaescrypt.AESGCM.encrypt.hits
    assert g.encrypt(memoryview(nonce), bytearray(data), memoryview(aad)) == want
    assert g.decrypt(bytearray(nonce), memoryview(want), aad) == data
    assert vaescrypt.AESGCM.encrypt.hits == h + 1
    with pytest.raises(ValueError, match="C-contiguous"):
        g.encrypt(nonce, memoryview(data)[::2], aad)
    with pytest.raises(TypeError, match="data must be bytes"):
        g.encrypt(nonce, "text", aad)
    with pytest.raises(TypeError, match="data must be bytes"):
        g.encrypt(nonce, array.array("B", data), aad)
    assert vaescrypt.AESGCM.encrypt.hits == h + 1
    c = vaescrypt.AESCFB(bytes(32))
    assert c.encrypt(bytearray(16), memoryview(data)) == c.encrypt(bytes(16), data)


# --------------------------------------------------------------- errors --


def _gcm_error_cases(g: vaescrypt.AESGCM) -> Iterator[tuple[str, Callable[[type], object]]]:
    """(name, call(kind)): kind is bytes or bytearray; both try C first."""
    tl = g.tag_length
    good = g.encrypt(bytes(12), b"some plaintext", b"aad")
    forged = bytearray(good)
    forged[0] ^= 1
    yield "empty nonce, encrypt", lambda k: g.encrypt(k(b""), k(b"data"), None)
    yield "empty nonce, decrypt", lambda k: g.decrypt(k(b""), k(good), k(b"aad"))
    yield "short data", lambda k: g.decrypt(k(bytes(12)), k(bytes(tl - 1)), None)
    yield "forged ciphertext", lambda k: g.decrypt(k(bytes(12)), k(bytes(forged)), k(b"aad"))
    yield "wrong aad", lambda k: g.decrypt(k(bytes(12)), k(good), k(b"other"))
    yield "wrong nonce", lambda k: g.decrypt(k(bytes(11)), k(good), k(b"aad"))
    yield "tag only, forged", lambda k: g.decrypt(k(bytes(12)), k(bytes(tl)), None)


@pytest.mark.parametrize("tag_length", [16, 12, 4])
def test_gcm_errors_identical(tag_length: int) -> None:
    """Every refusal: C answers none of them (hits unchanged) and the error
    is the same for bytes and bytearray arguments."""
    g = vaescrypt.AESGCM(bytes(range(32)), tag_length=tag_length)
    cases = list(_gcm_error_cases(g))  # makes its good ciphertext in C
    h = (vaescrypt.AESGCM.encrypt.hits, vaescrypt.AESGCM.decrypt.hits)
    for name, call in cases:
        with_bytes = _error(lambda: call(bytes))  # noqa: B023 - called at once
        with_views = _error(lambda: call(bytearray))  # noqa: B023
        assert with_bytes == with_views, name
        assert with_bytes[0] in (ValueError, vaescrypt.InvalidTag), name
    assert (vaescrypt.AESGCM.encrypt.hits, vaescrypt.AESGCM.decrypt.hits) == h
    # The length is checked before the nonce, for every argument type.
    for kind in (bytes, bytearray):
        assert _error(lambda: g.decrypt(kind(), kind(), None)) == (  # noqa: B023
            vaescrypt.InvalidTag,
            "AESGCM.decrypt: data shorter than the tag",
        )


def test_cfb_errors_identical() -> None:
    c = vaescrypt.AESCFB(bytes(32))
    h = vaescrypt.AESCFB.encrypt.hits
    for n in (0, 1, 15, 17, 32):
        for fn in (c.encrypt, c.decrypt):
            with_bytes = _error(lambda: fn(bytes(n), b"data"))  # noqa: B023 - called at once
            with_views = _error(lambda: fn(bytearray(n), bytearray(b"data")))  # noqa: B023
            assert with_bytes == with_views == (ValueError, f"CFB iv must be 16 bytes, got {n}")
    assert vaescrypt.AESCFB.encrypt.hits == h


def _empty_bytes_state() -> bytes:
    """The shared empty bytes object past its reference count and type:
    ob_size, the cached hash and ob_sval[0] (the terminating NUL)."""
    import ctypes

    head = 2 * ctypes.sizeof(ctypes.c_void_p)
    return ctypes.string_at(id(b"") + head, sys.getsizeof(b"") - head)


def test_empty_results_never_write_into_shared_empty_bytes() -> None:
    """A 0-byte result is CPython's shared b"": C must hand it back untouched."""
    before = _empty_bytes_state()
    g = vaescrypt.AESGCM(bytes(16))
    ct = g.encrypt(bytes(12), b"", None)
    h = vaescrypt.AESGCM.decrypt.hits
    assert g.decrypt(bytes(12), ct, None) == b"" == bytes(0)
    assert vaescrypt.AESGCM.decrypt.hits == h + 1
    with pytest.raises(vaescrypt.InvalidTag):
        g.decrypt(bytes(12), bytes(16), None)
    c = vaescrypt.AESCFB(bytes(16))
    assert c.decrypt(bytes(16), b"") == b"" == c.encrypt(bytes(16), b"")
    assert _empty_bytes_state() == before


def test_bind_is_set_once() -> None:
    names = [f"vc_gcm_{fn}" for fn in ("encrypt", "decrypt", "key_new", "key_free")]
    addrs = [int(ffi.cast("uintptr_t", ffi.addressof(lib, n))) for n in names]
    _fastcall.bind("gcm", *addrs)  # the same addresses again: a no-op
    with pytest.raises(RuntimeError, match="already bound"):
        _fastcall.bind("gcm", addrs[1], addrs[0], *addrs[2:])
    with pytest.raises(ValueError, match="NULL"):
        _fastcall.bind("cfb", 0, 0, 0, 0)
    with pytest.raises(ValueError, match="unknown mode"):
        _fastcall.bind("ctr", *addrs)
    with pytest.raises(TypeError):
        _fastcall.bind("cfb", addrs[0])
    g = vaescrypt.AESGCM(bytes(16))  # still bound to the right functions
    assert g.decrypt(bytes(12), g.encrypt(bytes(12), b"abc", None), None) == b"abc"


# ----------------------------------------------------------------- keys --

VC_ERR_KEY_LENGTH = int(lib.VC_ERR_KEY_LENGTH)
VC_ERR_UNSUPPORTED = int(lib.VC_ERR_UNSUPPORTED)
VC_ERR_INELIGIBLE = int(lib.VC_ERR_INELIGIBLE)


def test_key_new_statuses_and_ownership() -> None:
    auto = int(lib.VC_PATH_AUTO)
    gcm_, cfb_ = _fastcall.KEY_GCM, _fastcall.KEY_CFB
    assert _fastcall.key_new(gcm_, bytes(15), auto, 16) == VC_ERR_KEY_LENGTH
    for tl in (0, -1, 17):  # the C methods take the tag length from the key
        assert _fastcall.key_new(gcm_, bytes(16), auto, tl) == VC_ERR_TAG_LENGTH
    with pytest.raises(OverflowError):
        _fastcall.key_new(gcm_, bytes(16), auto, 1 << 40)
    assert _fastcall.key_new(cfb_, bytes(33), auto, 128) == VC_ERR_KEY_LENGTH
    # CFB8 may never take a VAES path: refused here as in the cffi binding.
    assert _fastcall.key_new(cfb_, bytes(16), path_id("avx512"), 8) in (
        VC_ERR_INELIGIBLE,
        VC_ERR_UNSUPPORTED,
    )
    with pytest.raises(ValueError, match="unknown key kind"):
        _fastcall.key_new(7, bytes(16), auto, 16)
    ref = _fastcall.key_new(gcm_, bytearray(32), auto, 16)  # any buffer is accepted
    assert type(ref) is _fastcall.KeyRef and ref.addr != 0
    with pytest.raises(TypeError):
        _fastcall.KeyRef()  # made only by key_new
    with pytest.raises(TypeError):
        _fastcall.key_new(gcm_, bytes(16), auto)
    g = vaescrypt.AESGCM(bytes(32))
    assert g._ref.addr == int(ffi.cast("uintptr_t", g._key))


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="under ASan freed memory sits in its quarantine: RSS says nothing",
)
def test_dropped_keys_are_freed() -> None:
    """A native key is ~3 KiB: 60000 leaked keys would add ~180 MiB."""
    keys = [bytes([i % 251]) * 32 for i in range(64)]
    for k in keys:  # warm up the allocator
        vaescrypt.AESGCM(k)
    before = _rss_kib()
    for i in range(30000):
        vaescrypt.AESGCM(keys[i % 64])
        vaescrypt.AESCFB(keys[i % 64])
    grown = _rss_kib() - before
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB over 60000 dropped keys"


def test_stream_keeps_its_key_alive() -> None:
    """A stream borrows the key of the object that made it: dropping that
    object must not free the key under the stream."""
    key = bytes(range(32))
    enc = vaescrypt.AESGCM(key).encryptor(bytes(12))  # the AESGCM is dropped
    cfb_enc = vaescrypt.AESCFB(key).encryptor(bytes(16))
    gc.collect()
    for _ in range(200):  # reuse the freed memory, if it was freed
        vaescrypt.AESGCM(bytes(32))
        vaescrypt.AESCFB(bytes(32))
    ct = enc.update(b"m" * 100) + enc.finalize()
    assert ct + enc.tag == vaescrypt.AESGCM(key).encrypt(bytes(12), b"m" * 100, None)
    assert cfb_enc.update(b"m" * 50) == vaescrypt.AESCFB(key).encrypt(bytes(16), b"m" * 50)


def test_fast_method_behaves_like_the_python_method() -> None:
    import inspect

    enc = vaescrypt.AESGCM.encrypt
    assert type(enc) is _fastcall.FastMethod
    assert list(inspect.signature(enc).parameters) == ["self", "nonce", "data", "associated_data"]
    assert enc.__name__ == "encrypt" and enc.__qualname__ == "AESGCM.encrypt"
    assert enc.__doc__ == "Ciphertext || tag."
    g = vaescrypt.AESGCM(bytes(16), tag_length=12)
    n, d = bytes(12), b"payload"
    want = g.encrypt(bytearray(n), d, None)  # the Python method (cffi)
    assert len(want) == len(d) + 12
    h = enc.hits
    assert g.encrypt(n, d, None) == want  # C
    assert enc.hits == h + 1
    # Keywords, the unbound form and a bound method object all agree.
    assert g.encrypt(n, d, associated_data=None) == want
    assert g.encrypt(nonce=n, data=d, associated_data=None) == want
    assert vaescrypt.AESGCM.encrypt(g, n, d, None) == want
    bound = g.encrypt
    assert bound(n, d, None) == want and bound.__self__ is g
    assert enc.hits == h + 3  # unbound and bound: positional bytes, so C

    class Sub(vaescrypt.AESGCM):
        pass

    assert Sub(bytes(16), tag_length=12).encrypt(n, d, None) == want
    # Not an AESGCM: the Python method reports it (a TypeError naming both
    # classes since issue 27; it was an AttributeError), nothing crashes.
    with pytest.raises(TypeError, match="expected AESGCM, got object"):
        vaescrypt.AESGCM.encrypt(object(), n, d, None)
    with pytest.raises(TypeError):
        g.encrypt(n, d)  # missing argument: the Python method's TypeError
    # Refusals are worded by the Python method, identically.
    with pytest.raises(ValueError, match="nonce must be at least 1 byte"):
        g.encrypt(b"", d, None)
    with pytest.raises(vaescrypt.InvalidTag, match="shorter than the tag"):
        g.decrypt(n, b"short", None)


def test_key_lookup_follows_getattr() -> None:
    """C reads _ref straight from its __slots__ slot (offset cached per type
    version): every call must still use the key getattr(owner, "_ref") gives,
    however the class or the instance is changed, and what is not an owner
    gets the Python method's error."""
    n, d, a = bytes(12), b"payload", b"aad"
    mine, other = vaescrypt.AESGCM(bytes(16)), vaescrypt.AESGCM(bytes(range(16)))
    want_mine, want_other = mine.encrypt(n, d, a), other.encrypt(n, d, a)
    assert want_mine != want_other
    enc = vaescrypt.AESGCM.encrypt
    h = enc.hits

    class Sub(vaescrypt.AESGCM):
        pass

    s = Sub(bytes(16))
    assert s.encrypt(n, d, a) == want_mine  # the slot, offset now cached for Sub
    Sub._ref = property(lambda self: other._ref)  # type: ignore[assignment]
    assert s.encrypt(n, d, a) == want_other  # the class changed: the property
    del Sub._ref
    assert s.encrypt(n, d, a) == want_mine

    class Redirect(vaescrypt.AESGCM):
        def __getattribute__(self, name: str) -> Any:
            return other._ref if name == "_ref" else super().__getattribute__(name)

    assert Redirect(bytes(16)).encrypt(n, d, a) == want_other
    # The slot is a data descriptor: an instance __dict__ entry never shadows it.
    mine.__dict__["_ref"] = other._ref
    assert mine._ref is not other._ref
    assert mine.encrypt(n, d, a) == want_mine == mine.encrypt(n, d, associated_data=a)
    mine.__init__(bytes(range(16)))  # re-keyed: the slot's new value
    assert mine.encrypt(n, d, a) == want_other
    assert enc.hits == h + 6  # all of the above but the keyword call: C
    # No key in the slot, or not an AESGCM at all: the Python method's error.
    with pytest.raises(AttributeError):
        vaescrypt.AESGCM.__new__(vaescrypt.AESGCM).encrypt(n, d, a)

    class Foreign:  # the slot's descriptor on a class with another layout
        __slots__ = ("x",)
        _ref = vaescrypt.AESGCM.__dict__["_ref"]

    f = Foreign()
    f.x = mine._ref  # where AESGCM keeps _ref: must not be read as if it were
    with pytest.raises(TypeError, match="doesn't apply to a 'Foreign' object"):
        vaescrypt.AESGCM.encrypt(f, n, d, a)
    assert enc.hits == h + 6
    # AESCFB keeps _ref in a slot too: its C method reads it there.
    cenc, key, iv = vaescrypt.AESCFB.encrypt, bytes(range(16)), bytes(range(16, 32))
    ch = cenc.hits
    assert vaescrypt.AESCFB(key).encrypt(iv, d) == cfb128(key, iv, d, encrypt=True)
    assert cenc.hits == ch + 1


def test_fast_method_constructor_checks() -> None:
    with pytest.raises(ValueError, match="unknown or unbound kind"):
        _fastcall.FastMethod("ctr_encrypt", lambda *a: None)
    with pytest.raises(TypeError, match="callable"):
        _fastcall.FastMethod("gcm_encrypt", 3)


# ----------------------------------------------------------- InvalidTag --


def test_invalid_tag_releases_nothing() -> None:
    g = vaescrypt.AESGCM(bytes(range(32)))
    secret = b"attack at dawn! " * 64
    ct = bytearray(g.encrypt(bytes(12), secret, b"hdr"))
    ct[-1] ^= 0x80
    forged = bytes(ct)
    # C answers nothing (it freed the object it decrypted into); the
    # Python method raises.
    h = vaescrypt.AESGCM.decrypt.hits
    with pytest.raises(vaescrypt.InvalidTag) as info:
        g.decrypt(bytes(12), forged, b"hdr")
    assert vaescrypt.AESGCM.decrypt.hits == h
    e = info.value
    assert e.args == ("AESGCM.decrypt: authentication tag mismatch",)
    assert e.__cause__ is None and e.__context__ is None
    assert not any(isinstance(v, bytes) and secret[:16] in v for v in vars(e).values())


def test_invalid_tag_frees_the_output() -> None:
    """A rejected message's would-be plaintext object is freed, not kept."""
    g = vaescrypt.AESGCM(bytes(range(32)))
    size = 256 * 1024
    forged = bytes(size + 16)
    for _ in range(3):  # warm up allocator, caches and the scratch pool
        with pytest.raises(vaescrypt.InvalidTag):
            g.decrypt(bytes(12), forged, None)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(50):
            with pytest.raises(vaescrypt.InvalidTag):
                g.decrypt(bytes(12), forged, None)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < size, f"{grown} bytes still allocated after 50 rejected messages"


# ------------------------------------------------------------------ GIL --


def _overlap(call: Callable[[], object]) -> tuple[float, float]:
    """Run call() while a second thread spins in Python; return (call seconds,
    seconds of the call during which the spinner demonstrably ran).

    Holding the GIL through C code means the spinner cannot run at all while
    the call is inside C (the interpreter's switch request is only honoured
    between bytecodes), so the covered share is then near zero: only the
    spinner's turn between the end of the C call and the caller reading the
    clock, about one switch interval, which is made short here (1 ms)."""
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        return _overlap_once(call)
    finally:
        sys.setswitchinterval(old_interval)


def _overlap_once(call: Callable[[], object]) -> tuple[float, float]:
    ticks: list[int] = []
    started = threading.Event()
    stop = threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            ticks.append(time.perf_counter_ns())

    t = threading.Thread(target=spin)
    t.start()
    started.wait()
    t0 = time.perf_counter_ns()
    call()
    t1 = time.perf_counter_ns()
    stop.set()
    t.join()
    inside = [x for x in ticks if t0 < x < t1]
    covered = (inside[-1] - inside[0]) if len(inside) > 1 else 0
    return (t1 - t0) / 1e9, covered / 1e9


def _gil_cases() -> dict[str, tuple[Any, Callable[[], object]]]:
    """name -> (the FastMethod that must answer, call)."""
    # The generic path (~70 MB/s GCM, ~20-90 MB/s CFB) makes a few MiB last
    # tens of milliseconds: long enough to see another thread run, cheap in memory.
    data = bytes(range(256)) * (16 * 1024)  # 4 MiB
    g = vaescrypt.AESGCM(bytes(32), impl="generic")
    ct = g.encrypt(bytes(12), data, None)
    c = vaescrypt.AESCFB(bytes(32), impl="generic")
    return {
        "gcm encrypt": (vaescrypt.AESGCM.encrypt, lambda: g.encrypt(bytes(12), data, None)),
        "gcm decrypt": (vaescrypt.AESGCM.decrypt, lambda: g.decrypt(bytes(12), ct, None)),
        "cfb128 encrypt": (vaescrypt.AESCFB.encrypt, lambda: c.encrypt(bytes(16), data[: 1 << 20])),
        "cfb128 decrypt": (vaescrypt.AESCFB.decrypt, lambda: c.decrypt(bytes(16), data)),
    }


def _best_overlap(call: Callable[[], object], tries: int = 3) -> float:
    """The largest share of the call during which the other thread ran."""
    best = 0.0
    for _ in range(tries):  # a loaded host may starve the spinner once
        total, covered = _overlap(call)
        assert total > 0.005, f"{total * 1e3:.1f} ms is too short to observe"
        best = max(best, covered / total)
        if best > 0.5:
            break
    return best


def test_gil_probe_detects_a_held_gil() -> None:
    """Control: builtin sum() over a range stays in C holding the GIL, so the
    probe must see (almost) no overlap: it can tell the two cases apart."""
    total, covered = _overlap(lambda: sum(range(3_000_000)))
    assert total > 0.005 and covered / total < 0.5


@pytest.mark.parametrize("name", list(_gil_cases()))
def test_gil_released_for_large_inputs(name: str) -> None:
    method, call = _gil_cases()[name]
    h0 = method.hits
    best = _best_overlap(call)
    assert best > 0.5, f"{name}: the other thread ran during only {best:.0%} of the call"
    assert method.hits > h0, "the call did not take the fast path"
