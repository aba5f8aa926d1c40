"""Property-based fuzzing (hypothesis) of every path against independent references.

References (tests/hardening/reference.py): GCM from `cryptography` (tag
truncated to 4/8/12..16 bytes; nonces of 1..7 bytes through a GHASH written
from SP 800-38D plus AES-ECB), CFB128/CFB8 from `cryptography`, CFB1 written
from SP 800-38A with AES-ECB.

Each example draws key size, lengths (bytes for GCM/CFB128/CFB8, bits for
CFB1), buffer offsets (memoryview slices of larger buffers), the call style
(one-shot; streaming with random split points, out-of-place or in-place;
one-shot in-place through the C API), GCM tag length and nonce length 1..64.
GCM forgeries (one bit flipped in ciphertext, AAD, tag or nonce) must always
raise vaescrypt.InvalidTag and release no plaintext.

Cases: VAESCRYPT_FUZZ_CASES examples per test and path (default 300).  Full
run (>= 100000 per path), see docs/HARDENING.md:

    VAESCRYPT_FUZZ_CASES=100000 python -m pytest -n 2 tests/hardening/test_hardening_fuzz.py
"""

from __future__ import annotations

import itertools
import os
import random
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vaescrypt._native import ffi, lib

import vaescrypt
from hardening import reference

FUZZ_CASES = int(os.environ.get("VAESCRYPT_FUZZ_CASES", "300"))
TAG_LENGTHS = (4, 8, 12, 13, 14, 15, 16)
STYLES = ("one_shot", "stream", "stream_in_place", "c_in_place")

FUZZ = settings(
    max_examples=FUZZ_CASES,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the work tree
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

GCM_PATHS = vaescrypt.available("gcm")
CFB_CASES = [(m, p) for m in ("cfb128", "cfb8", "cfb1") for p in vaescrypt.available(m)]


# ----------------------------------------------------------------- cases --
# One example = one strategy draw (hypothesis costs ~1 ms per example however
# little it draws, so everything is drawn in a single NamedTuple and the bytes
# come from a drawn seed: cheap for long inputs and still shrinkable).
def _length(top: int) -> st.SearchStrategy[int]:
    """Lengths near block boundaries are the interesting ones; mix in the rest."""
    edges = sorted(
        {x for b in (0, 16, 32, 48, 64, 128, 256, 512) for x in (b - 1, b, b + 1) if 0 <= x <= top}
    )
    return st.one_of(st.sampled_from(edges), st.integers(0, min(top, 64)), st.integers(0, top))


_OFFSETS = st.tuples(*[st.integers(0, 63)] * 4)
_CUTS = st.lists(st.integers(0, 2**16), max_size=5)


class GcmCase(NamedTuple):
    key_size: int
    nonce_len: int
    aad_len: int
    pt_len: int
    tag_len: int
    seed: int
    enc_style: str
    dec_style: str
    forge_style: str
    forge_target: str
    forge_bit: int
    offsets: tuple[int, int, int, int]  # nonce, aad, input, output
    aad_cuts: list[int]
    data_cuts: list[int]


GCM_CASES = st.builds(
    GcmCase,
    st.sampled_from((16, 24, 32)),
    st.one_of(st.just(12), st.integers(1, 64)),
    _length(300),
    _length(1100),
    st.sampled_from(TAG_LENGTHS),
    st.integers(0, 2**32 - 1),
    st.sampled_from(STYLES),
    st.sampled_from(STYLES),
    st.sampled_from(STYLES),
    st.sampled_from(("ct", "aad", "tag", "nonce")),
    st.integers(0, 2**16),
    _OFFSETS,
    _CUTS,
    _CUTS,
)


class CfbCase(NamedTuple):
    key_size: int
    nbytes: int
    short_bits: int  # CFB1: drop this many bits of the last byte (0..7)
    seed: int
    enc_style: str
    dec_style: str
    offsets: tuple[int, int, int, int]  # iv, input, output, tail
    cuts: list[int]


def _cfb_cases(top: int) -> st.SearchStrategy[CfbCase]:
    return st.builds(
        CfbCase,
        st.sampled_from((16, 24, 32)),
        _length(top),
        st.integers(0, 7),
        st.integers(0, 2**32 - 1),
        st.sampled_from(STYLES),
        st.sampled_from(STYLES),
        _OFFSETS,
        _CUTS,
    )


def _placed(content: bytes, off: int) -> memoryview:
    """content as a memoryview at offset off inside a larger buffer."""
    buf = bytearray(off + len(content) + 7)
    buf[off : off + len(content)] = content
    return memoryview(buf)[off : off + len(content)]


def _splits(cuts: list[int], n: int, unit: int = 1) -> list[int]:
    """Chunk lengths summing to n, cut at multiples of unit (cuts taken mod n)."""
    pos = [0, *sorted((c % (n // unit + 1)) * unit for c in cuts), n]
    return [b - a for a, b in itertools.pairwise(pos)]


def _stream(ctx: Any, src: bytes, chunks: list[int], in_place: bool, out_off: int) -> bytes:
    out = bytearray()
    pos = 0
    for n in chunks:
        piece = bytearray(src[pos : pos + n])
        pos += n
        if in_place:
            assert ctx.update_into(piece, piece) == n
            out += piece
        else:
            buf = bytearray(out_off + n + 3)
            ctx.update_into(piece, memoryview(buf)[out_off:])
            out += buf[out_off : out_off + n]
    return bytes(out)


def _ptr(view: memoryview | bytearray) -> Any:
    return ffi.from_buffer("uint8_t[]", view, require_writable=True)


# ------------------------------------------------------------------- GCM --
def _gcm_call(
    g: vaescrypt.AESGCM,
    c: GcmCase,
    style: str,
    encrypt: bool,
    src: bytes,
    tag: bytes,
    nonce: bytes,
    aad: bytes,
) -> tuple[bytes, bytes | None]:
    """(output, tag) of one call style; decrypt returns tag None and raises
    InvalidTag on a forgery."""
    n = len(src)
    o_nonce, o_aad, o_in, o_out = c.offsets
    if style == "one_shot":
        nv, av = _placed(nonce, o_nonce), _placed(aad, o_aad)
        if encrypt:
            out = g.encrypt(nv, _placed(src, o_in), av)
            return out[:n], out[n:]
        return g.decrypt(nv, _placed(src + tag, o_in), av), None
    if style == "c_in_place":
        buf = _placed(src, o_in)
        tbuf = bytearray(tag) if not encrypt else bytearray(c.tag_len)
        fn = lib.vc_gcm_encrypt if encrypt else lib.vc_gcm_decrypt
        st_ = fn(
            g._key, nonce, len(nonce), aad, len(aad), _ptr(buf), _ptr(buf), n, _ptr(tbuf), len(tbuf)
        )
        if st_ == lib.VC_ERR_AUTH:
            assert bytes(buf) == bytes(n), "failed in-place decrypt left plaintext behind"
            raise vaescrypt.InvalidTag("in-place")
        assert st_ == 0, ffi.string(lib.vc_status_message(st_)).decode()
        return bytes(buf), (bytes(tbuf) if encrypt else None)
    ctx: Any = g.encryptor(nonce) if encrypt else g.decryptor(nonce)
    pos = 0
    for k in _splits(c.aad_cuts, len(aad)):
        ctx.update_aad(_placed(aad[pos : pos + k], o_aad))
        pos += k
    out = _stream(ctx, src, _splits(c.data_cuts, n), style == "stream_in_place", o_out)
    if encrypt:
        ctx.finalize()
        return out, ctx.tag
    ctx.finalize(tag)
    return out, None


def _flip(b: bytes, bit: int) -> bytes:
    out = bytearray(b)
    i = bit % (8 * len(b))
    out[i // 8] ^= 0x80 >> (i % 8)
    return bytes(out)


@pytest.mark.parametrize("path", GCM_PATHS)
@FUZZ
@given(c=GCM_CASES)
def test_gcm_fuzz(path: str, c: GcmCase) -> None:
    """Encrypt and decrypt match the reference; a one-bit forgery is rejected."""
    rnd = random.Random(c.seed)
    key, nonce = rnd.randbytes(c.key_size), rnd.randbytes(c.nonce_len)
    aad, pt = rnd.randbytes(c.aad_len), rnd.randbytes(c.pt_len)
    ct, tag = reference.gcm_seal(key, nonce, aad, pt, c.tag_len)
    g = vaescrypt.AESGCM(key, tag_length=c.tag_len, impl=path)
    if vaescrypt.path_usable("gcm", "encrypt", path):
        out, got_tag = _gcm_call(g, c, c.enc_style, True, pt, b"", nonce, aad)
        assert out == ct, "ciphertext differs from reference"
        assert got_tag == tag, "tag differs from reference"
    if not vaescrypt.path_usable("gcm", "decrypt", path):
        return
    out, _ = _gcm_call(g, c, c.dec_style, False, ct, tag, nonce, aad)
    assert out == pt, "plaintext differs from reference"

    target = c.forge_target
    if (target == "ct" and not ct) or (target == "aad" and not aad):
        target = "tag"
    f_ct = _flip(ct, c.forge_bit) if target == "ct" else ct
    f_tag = _flip(tag, c.forge_bit) if target == "tag" else tag
    f_nonce = _flip(nonce, c.forge_bit) if target == "nonce" else nonce
    f_aad = _flip(aad, c.forge_bit) if target == "aad" else aad
    with pytest.raises(vaescrypt.InvalidTag):
        _gcm_call(g, c, c.forge_style, False, f_ct, f_tag, f_nonce, f_aad)


# ------------------------------------------------------------------- CFB --
SEGMENT = {"cfb128": 128, "cfb8": 8, "cfb1": 1}


def _cfb_call(
    ciph: vaescrypt.AESCFB,
    c: CfbCase,
    style: str,
    enc: bool,
    iv: bytes,
    src: bytes,
    nbits: int | None,
) -> bytes:
    o_iv, o_in, o_out, o_tail = c.offsets
    nbytes = len(src)
    if style == "one_shot":
        op = ciph.encrypt if enc else ciph.decrypt
        kw: dict[str, int] = {"bits": nbits} if nbits is not None else {}
        return op(_placed(iv, o_iv), _placed(src, o_in), **kw)
    if style == "c_in_place":
        buf = _placed(src, o_in)
        fn = lib.vc_cfb_encrypt if enc else lib.vc_cfb_decrypt
        st_ = fn(ciph._key, iv, _ptr(buf), _ptr(buf), nbytes if nbits is None else nbits)
        assert st_ == 0, ffi.string(lib.vc_status_message(st_)).decode()
        return bytes(buf)
    ctx = ciph.encryptor(iv) if enc else ciph.decryptor(iv)
    in_place = style == "stream_in_place"
    if nbits is None:
        return _stream(ctx, src, _splits(c.cuts, nbytes), in_place, o_out)
    # CFB1 streams: whole bytes, the partial byte only in the last call
    whole = nbits // 8
    got = _stream(ctx, src[:whole], _splits(c.cuts, whole), in_place, o_out)
    if nbits % 8:
        got += ctx.update(_placed(src[whole:], o_tail), bits=nbits % 8)
    return got


def _cfb_check(mode: str, path: str, c: CfbCase) -> None:
    rnd = random.Random(c.seed)
    key, iv = rnd.randbytes(c.key_size), rnd.randbytes(16)
    nbits = max(0, 8 * c.nbytes - c.short_bits) if mode == "cfb1" else None
    ciph = vaescrypt.AESCFB(key, SEGMENT[mode], impl=path)
    checked = 0
    for direction, style in (("encrypt", c.enc_style), ("decrypt", c.dec_style)):
        if not vaescrypt.path_usable(mode, direction, path):
            continue
        enc = direction == "encrypt"
        src = bytearray(rnd.randbytes(c.nbytes))
        if nbits is not None and nbits % 8:  # unused low bits must not matter
            src[-1] |= rnd.randrange(1 << (8 - nbits % 8))
        want = reference.cfb(mode, key, iv, bytes(src), enc, nbits)
        got = _cfb_call(ciph, c, style, enc, iv, bytes(src), nbits)
        assert got == want, f"{direction} ({style}): output differs from reference"
        checked += 1
    assert checked, f"{mode}/{path} usable in no direction"


CFB_BYTE_CASES = [(m, p) for m, p in CFB_CASES if m != "cfb1"]
CFB1_PATHS = [p for m, p in CFB_CASES if m == "cfb1"]


@pytest.mark.parametrize(
    ("mode", "path"), CFB_BYTE_CASES, ids=[f"{m}-{p}" for m, p in CFB_BYTE_CASES]
)
@FUZZ
@given(c=_cfb_cases(1100))
def test_cfb_fuzz(mode: str, path: str, c: CfbCase) -> None:
    """CFB128 / CFB8, both directions, lengths 0..1100 bytes."""
    _cfb_check(mode, path, c)


@pytest.mark.parametrize("path", CFB1_PATHS)
@FUZZ
@given(c=_cfb_cases(48))
def test_cfb1_fuzz(path: str, c: CfbCase) -> None:
    """CFB1, both directions, 0..384 bits (the reference is one AES call per bit)."""
    _cfb_check("cfb1", path, c)


# ------------------------------------------- the references themselves --
@settings(max_examples=min(FUZZ_CASES, 200), deadline=None, database=None)
@given(c=GCM_CASES)
def test_reference_spec_gcm_agrees_with_cryptography(c: GcmCase) -> None:
    """The from-the-spec GCM used for 1..7-byte nonces equals OpenSSL's on 8..64."""
    rnd = random.Random(c.seed)
    key, nonce = rnd.randbytes(c.key_size), rnd.randbytes(max(8, c.nonce_len))
    aad, pt = rnd.randbytes(c.aad_len), rnd.randbytes(c.pt_len % 300)
    assert reference.gcm_seal_spec(key, nonce, aad, pt, c.tag_len) == reference.gcm_seal(
        key, nonce, aad, pt, c.tag_len
    )


def _cavp_cfb1_records(limit: int) -> list[dict[str, str]]:
    import cryptography_vectors

    path = Path(cryptography_vectors.__file__).parent / "ciphers" / "AES" / "CFB" / "CFB1MMT256.rsp"
    recs: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line in ("[ENCRYPT]", "[DECRYPT]"):
            section = line[1:-1]
        m = re.fullmatch(r"(\w+) = (\w*)", line)
        if m:
            cur[m.group(1)] = m.group(2)
            if m.group(1) == ("CIPHERTEXT" if section == "ENCRYPT" else "PLAINTEXT"):
                recs.append({**cur, "DIR": section})
                cur = {}
    return recs[:limit]


def _bits_to_bytes(bits: str) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for i, ch in enumerate(bits):
        out[i // 8] |= int(ch) << (7 - i % 8)
    return bytes(out)


def test_reference_cfb1_matches_cavp() -> None:
    """The hand-written CFB1 reference reproduces NIST's CFB1MMT256 vectors."""
    recs = _cavp_cfb1_records(40)
    assert len(recs) >= 20
    for r in recs:
        key, iv = bytes.fromhex(r["KEY"]), bytes.fromhex(r["IV"])
        pt, ct = r["PLAINTEXT"], r["CIPHERTEXT"]
        enc = r["DIR"] == "ENCRYPT"
        src, want = (pt, ct) if enc else (ct, pt)
        got = reference.cfb1(key, iv, _bits_to_bytes(src), len(src), enc)
        assert got == _bits_to_bytes(want), r
