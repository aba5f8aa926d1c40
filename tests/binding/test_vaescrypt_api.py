"""The Python API's argument handling, errors and streaming rules."""

from __future__ import annotations

import pytest

import vaescrypt
from vaescrypt import _buildinfo

KEY = bytes(range(32))


@pytest.mark.parametrize("n", [0, 1, 15, 17, 31, 33, 64])
def test_bad_key_lengths(n: int) -> None:
    with pytest.raises(ValueError, match="key must be 16, 24 or 32 bytes"):
        vaescrypt.AESGCM(bytes(n))
    with pytest.raises(ValueError, match="key must be 16, 24 or 32 bytes"):
        vaescrypt.AESCFB(bytes(n))


@pytest.mark.parametrize("bad", ["0123456789abcdef", 12345, None, [0] * 16])
def test_bad_types(bad: object) -> None:
    with pytest.raises(TypeError):
        vaescrypt.AESGCM(bad)  # type: ignore[arg-type]
    g = vaescrypt.AESGCM(KEY[:16])
    with pytest.raises(TypeError):
        g.encrypt(bytes(12), bad if bad is not None else 1, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        vaescrypt.AESCFB(KEY[:16]).encrypt(bad, b"x")  # type: ignore[arg-type]


def test_bytes_like_inputs_agree() -> None:
    g = vaescrypt.AESGCM(bytearray(KEY))
    base = g.encrypt(bytes(12), b"hello world", b"aad")
    assert (
        g.encrypt(memoryview(bytes(12)), bytearray(b"hello world"), memoryview(b"xaad")[1:]) == base
    )
    assert g.encrypt(bytes(12), None, None) == g.encrypt(bytes(12), b"", b"")


@pytest.mark.parametrize("t", [0, 1, 3, 5, 7, 9, 10, 11, 17, 32])
def test_bad_tag_length(t: int) -> None:
    with pytest.raises(ValueError, match="tag_length"):
        vaescrypt.AESGCM(KEY, tag_length=t)


def test_gcm_nonce_and_tag_checks() -> None:
    g = vaescrypt.AESGCM(KEY, tag_length=12)
    with pytest.raises(ValueError, match="nonce"):
        g.encrypt(b"", b"data", None)
    assert len(g.encrypt(b"\x01", b"data", None)) == 4 + 12  # 1-byte IVs are legal GCM
    with pytest.raises(vaescrypt.InvalidTag):
        g.decrypt(bytes(12), b"short", None)
    d = g.decryptor(bytes(12))
    with pytest.raises(ValueError, match="tag must be 12 bytes"):
        d.finalize(bytes(16))


def test_cfb_checks() -> None:
    with pytest.raises(ValueError, match="segment_size"):
        vaescrypt.AESCFB(KEY, 64)
    c = vaescrypt.AESCFB(KEY, 128)
    with pytest.raises(ValueError, match="iv must be 16 bytes"):
        c.encrypt(bytes(15), b"x")
    with pytest.raises(TypeError, match="bits"):
        c.encrypt(bytes(16), b"x", bits=3)
    c1 = vaescrypt.AESCFB(KEY, 1)
    with pytest.raises(ValueError, match="bits must be"):
        c1.encrypt(bytes(16), b"x", bits=9)
    assert c1.encrypt(bytes(16), b"\xff", bits=3)[0] & 0x1F == 0  # unused bits zero


def test_impl_names() -> None:
    with pytest.raises(ValueError, match="unknown code path"):
        vaescrypt.AESGCM(KEY, impl="sse9")
    for impl in vaescrypt.available("gcm"):
        g = vaescrypt.AESGCM(KEY, impl=impl)
        for d in vaescrypt.DIRECTIONS:
            if vaescrypt.path_usable("gcm", d, impl):
                assert g.path(d) == impl
    auto = vaescrypt.AESGCM(KEY)
    for d in vaescrypt.DIRECTIONS:
        assert auto.path(d) == vaescrypt.selected("gcm", d)


def test_gcm_stream_order() -> None:
    g = vaescrypt.AESGCM(KEY)
    e = g.encryptor(bytes(12), b"a")
    e.update_aad(b"b")
    e.update(b"data")
    with pytest.raises(vaescrypt.StreamStateError):
        e.update_aad(b"late")
    with pytest.raises(vaescrypt.StreamStateError):
        _ = g.encryptor(bytes(12)).tag
    e.finalize()
    assert e.tag == g.encrypt(bytes(12), b"data", b"ab")[-16:]
    with pytest.raises(vaescrypt.StreamStateError):
        e.update(b"more")


def test_cfb1_stream_ends_after_partial_byte() -> None:
    c = vaescrypt.AESCFB(KEY, 1)
    s = c.encryptor(bytes(16))
    s.update(b"\xaa", bits=5)
    with pytest.raises(vaescrypt.StreamStateError):
        s.update(b"\x00")


def test_in_place_update_into() -> None:
    c = vaescrypt.AESCFB(KEY, 128)
    data = bytearray(range(100))
    want = c.encrypt(bytes(16), bytes(data))
    s = c.encryptor(bytes(16))
    assert s.update_into(data, data) == 100
    assert bytes(data) == want


def test_features_and_version() -> None:
    feats = vaescrypt.cpu_features()
    assert feats <= set(vaescrypt.FEATURES)
    assert vaescrypt.__version__ == "0.1.0"
    for m in vaescrypt.MODES:
        assert set(vaescrypt.available(m)) <= set(vaescrypt.PATHS)
    assert "->" in vaescrypt.explain("gcm", "encrypt")


def test_buildinfo_flags_and_sources() -> None:
    assert {"-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"} <= set(_buildinfo.C_STD_FLAGS)
    srcs = {p.name for p in _buildinfo.library_sources()}
    assert {"gcm.c", "cfb.c", "front.c", "util.c", "cpuid.c", "policy.c"} <= srcs
