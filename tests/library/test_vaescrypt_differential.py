"""vaescrypt against `cryptography` on random inputs, on every path the host can run.

Case count: --vaescrypt-cases N or VAESCRYPT_DIFF_CASES=N (default 2000 per mode and
path; the full run uses 100000).  Each case draws key size, length (0..1 KiB, now and
then up to 64 KiB), buffer alignment (memoryview offsets), streaming split points and
in-place processing.
"""

from __future__ import annotations

import os
import random

import _vc_ref as ref
import pytest

import vaescrypt

SEED = int(os.environ.get("VAESCRYPT_SEED", "20240611"))


def _length(r: random.Random, big: int = 65536) -> int:
    """Mostly 0..1 KiB, biased to short tails; 2% up to `big` bytes."""
    x = r.random()
    if x < 0.02:
        return r.randrange(1024, big)
    if x < 0.3:
        return r.randrange(0, 64)
    return r.randrange(0, 1025)


def _misaligned(r: random.Random, data: bytes) -> memoryview:
    """data at a random offset inside a larger buffer."""
    off = r.randrange(0, 64)
    buf = bytearray(off + len(data) + r.randrange(0, 16))
    buf[off : off + len(data)] = data
    return memoryview(buf)[off : off + len(data)]


def _splits(r: random.Random, n: int) -> list[int]:
    cuts = sorted(r.randrange(0, n + 1) for _ in range(r.randrange(0, 6)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, n])]


def _stream(ctx: object, r: random.Random, data: bytes, in_place: bool) -> bytes:
    out = bytearray()
    pos = 0
    for n in _splits(r, len(data)):
        chunk = data[pos : pos + n]
        pos += n
        if in_place:
            buf = bytearray(chunk)
            ctx.update_into(buf, buf)  # type: ignore[attr-defined]
            out += buf
        else:
            out += ctx.update(_misaligned(r, chunk))  # type: ignore[attr-defined]
    return bytes(out)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm"))
def test_gcm_differential(impl: str, vaescrypt_cases: int) -> None:
    r = random.Random(f"{SEED}-gcm-{impl}")
    enc_ok = vaescrypt.path_usable("gcm", "encrypt", impl)
    dec_ok = vaescrypt.path_usable("gcm", "decrypt", impl)
    for case in range(vaescrypt_cases):
        key = r.randbytes(r.choice((16, 24, 32)))
        nonce = r.randbytes(12 if r.random() < 0.7 else r.randrange(8, 80))
        aad = r.randbytes(r.randrange(0, 80) if r.random() < 0.9 else r.randrange(0, 2000))
        pt = r.randbytes(_length(r))
        tag_len = r.choice((16, 16, 16, 4, 8, 12, 13, 14, 15))
        ct, tag = ref.gcm_encrypt(key, nonce, pt, aad)
        tag = tag[:tag_len]
        g = vaescrypt.AESGCM(key, tag_length=tag_len, impl=impl)
        where = f"case {case}: key {len(key)} nonce {len(nonce)} aad {len(aad)} len {len(pt)}"
        if enc_ok:
            assert (
                g.encrypt(_misaligned(r, nonce), _misaligned(r, pt), _misaligned(r, aad))
                == ct + tag
            ), where
            e = g.encryptor(nonce)
            pos = 0
            for n in _splits(r, len(aad)):
                e.update_aad(aad[pos : pos + n])
                pos += n
            assert _stream(e, r, pt, r.random() < 0.5) == ct, where + " (stream)"
            e.finalize()
            assert e.tag == tag, where + " (stream tag)"
        if dec_ok:
            assert g.decrypt(nonce, _misaligned(r, ct + tag), aad) == pt, where
            d = g.decryptor(nonce, aad)
            assert _stream(d, r, ct, r.random() < 0.5) == pt, where + " (stream)"
            d.finalize(tag)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm"))
@pytest.mark.parametrize("before_wrap", [0, 1, 2, 3, 7, 16])
def test_gcm_counter_wrap(impl: str, before_wrap: int) -> None:
    """The 32-bit counter wraps inside the message (front-end splits the tier calls)."""
    r = random.Random(f"{SEED}-wrap-{impl}-{before_wrap}")
    for _ in range(8):
        key = r.randbytes(r.choice((16, 32)))
        # first data counter = inc32(J0) = 2^32 - before_wrap (mod 2^32)
        low = (2**32 - before_wrap - 1) % 2**32
        j0 = r.randbytes(12) + low.to_bytes(4, "big")
        nonce = ref.nonce_for_j0(key, j0)
        pt = r.randbytes(r.randrange(before_wrap * 16, before_wrap * 16 + 600))
        aad = r.randbytes(r.randrange(0, 40))
        ct, tag = ref.gcm_encrypt(key, nonce, pt, aad)
        g = vaescrypt.AESGCM(key, impl=impl)
        if vaescrypt.path_usable("gcm", "encrypt", impl):
            assert g.encrypt(nonce, pt, aad) == ct + tag
            e = g.encryptor(nonce, aad)
            assert _stream(e, r, pt, False) == ct
            e.finalize()
            assert e.tag == tag
        if vaescrypt.path_usable("gcm", "decrypt", impl):
            assert g.decrypt(nonce, ct + tag, aad) == pt


CFB_REF = {"cfb128": (128, ref.cfb128), "cfb8": (8, ref.cfb8)}


@pytest.mark.parametrize(
    ("mode", "impl"), [(m, p) for m in ("cfb128", "cfb8") for p in vaescrypt.available(m)]
)
def test_cfb_differential(mode: str, impl: str, vaescrypt_cases: int) -> None:
    seg, fn = CFB_REF[mode]
    r = random.Random(f"{SEED}-{mode}-{impl}")
    for direction in ("encrypt", "decrypt"):
        if not vaescrypt.path_usable(mode, direction, impl):
            continue
        enc = direction == "encrypt"
        for case in range(vaescrypt_cases):
            key = r.randbytes(r.choice((16, 24, 32)))
            iv = r.randbytes(16)
            # CFB8 runs one AES block per byte: keep its long cases shorter
            data = r.randbytes(_length(r, 65536 if seg == 128 else 4096))
            want = fn(key, iv, data, enc)
            c = vaescrypt.AESCFB(key, seg, impl=impl)
            where = f"{direction} case {case}: key {len(key)} len {len(data)}"
            op = c.encrypt if enc else c.decrypt
            assert op(_misaligned(r, iv), _misaligned(r, data)) == want, where
            ctx = c.encryptor(iv) if enc else c.decryptor(iv)
            assert _stream(ctx, r, data, r.random() < 0.5) == want, where + " (stream)"
            ctx.finalize()


@pytest.mark.parametrize("impl", vaescrypt.available("cfb1"))
def test_cfb1_differential(impl: str, vaescrypt_cases: int) -> None:
    """CFB1 against the bit-by-bit SP 800-38A definition (short messages: it is slow)."""
    r = random.Random(f"{SEED}-cfb1-{impl}")
    for direction in ("encrypt", "decrypt"):
        if not vaescrypt.path_usable("cfb1", direction, impl):
            continue
        enc = direction == "encrypt"
        for case in range(max(vaescrypt_cases // 10, 20)):
            key = r.randbytes(r.choice((16, 24, 32)))
            iv = r.randbytes(16)
            nbytes = r.randrange(0, 40)
            nbits = r.randrange(max(0, 8 * nbytes - 7), 8 * nbytes + 1)
            data = bytearray(r.randbytes(nbytes))
            if nbits % 8:  # unused low bits of the last byte must not matter
                data[-1] |= (1 << (8 - nbits % 8)) - 1
            want = ref.cfb1(key, iv, bytes(data), nbits, enc)
            c = vaescrypt.AESCFB(key, 1, impl=impl)
            op = c.encrypt if enc else c.decrypt
            where = f"{direction} case {case}: {nbits} bits"
            assert op(iv, _misaligned(r, bytes(data)), bits=nbits) == want, where
            # stream: whole bytes, then the partial byte last
            ctx = c.encryptor(iv) if enc else c.decryptor(iv)
            whole = nbits // 8
            cut = r.randrange(0, whole + 1)
            got = ctx.update(data[:cut]) + ctx.update(data[cut:whole])
            if nbits % 8:
                got += ctx.update(data[whole:], bits=nbits % 8)
            assert got == want, where + " (stream)"


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 13, 3 * 65536 + 1])
def test_large_messages_all_paths_agree(size: int) -> None:
    r = random.Random(f"{SEED}-large-{size}")
    key, nonce, iv = r.randbytes(32), r.randbytes(12), r.randbytes(16)
    data = r.randbytes(size)
    ct, tag = ref.gcm_encrypt(key, nonce, data, b"hdr")
    for impl in vaescrypt.available("gcm"):
        g = vaescrypt.AESGCM(key, impl=impl)
        if vaescrypt.path_usable("gcm", "encrypt", impl):
            assert g.encrypt(nonce, data, b"hdr") == ct + tag, impl
        if vaescrypt.path_usable("gcm", "decrypt", impl):
            assert g.decrypt(nonce, ct + tag, b"hdr") == data, impl
    want = ref.cfb128(key, iv, data, True)
    for impl in vaescrypt.available("cfb128"):
        c = vaescrypt.AESCFB(key, 128, impl=impl)
        if vaescrypt.path_usable("cfb128", "encrypt", impl):
            assert c.encrypt(iv, data) == want, impl
        if vaescrypt.path_usable("cfb128", "decrypt", impl):
            assert c.decrypt(iv, want) == data, impl
