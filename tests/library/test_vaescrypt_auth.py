"""GCM rejects every tampered input and releases no plaintext."""

from __future__ import annotations

import random

import pytest
from vaescrypt._native import ffi, lib

import vaescrypt


def _flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(b)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm", "decrypt"))
@pytest.mark.parametrize("tag_len", [16, 12, 8, 4])
def test_tampering_detected(impl: str, tag_len: int) -> None:
    r = random.Random(f"auth-{impl}-{tag_len}")
    for _ in range(40):
        key = r.randbytes(r.choice((16, 24, 32)))
        nonce = r.randbytes(r.choice((12, 12, 8, 16, 33)))
        aad = r.randbytes(r.randrange(1, 50))
        pt = r.randbytes(r.randrange(1, 300))
        g = vaescrypt.AESGCM(key, tag_length=tag_len, impl=impl)
        blob = vaescrypt.AESGCM(key, tag_length=tag_len).encrypt(nonce, pt, aad)
        assert g.decrypt(nonce, blob, aad) == pt
        ct_bits = 8 * (len(blob) - tag_len)
        variants = {
            "ciphertext": (nonce, _flip(blob, r.randrange(ct_bits)), aad),
            "tag": (nonce, _flip(blob, ct_bits + r.randrange(8 * tag_len)), aad),
            "aad": (nonce, blob, _flip(aad, r.randrange(8 * len(aad)))),
            "nonce": (_flip(nonce, r.randrange(8 * len(nonce))), blob, aad),
            "truncated": (nonce, blob[:-1], aad),
            "aad dropped": (nonce, blob, None),
        }
        for what, (n, b, a) in variants.items():
            with pytest.raises(vaescrypt.InvalidTag):
                g.decrypt(n, b, a)
                pytest.fail(f"{what} tampering accepted")
            d = g.decryptor(n, a)
            d.update(b[:-tag_len])
            with pytest.raises(vaescrypt.InvalidTag):
                d.finalize(b[-tag_len:])


def test_failed_decrypt_zeroes_output_buffer() -> None:
    """C level: on VC_ERR_AUTH the caller's out buffer holds zeros, not plaintext."""
    key, nonce, pt = bytes(range(16)), bytes(12), bytes(range(1, 101))
    blob = vaescrypt.AESGCM(key).encrypt(nonce, pt, b"")
    for impl in vaescrypt.available("gcm", "decrypt"):
        kp = ffi.new("vc_gcm_key **")
        assert lib.vc_gcm_key_new(kp, key, 16, lib.vc_path_from_name(impl.encode())) == 0
        k = ffi.gc(kp[0], lib.vc_gcm_key_free)
        out = ffi.new("uint8_t[]", len(pt))
        bad_tag = _flip(blob[-16:], 3)
        st = lib.vc_gcm_decrypt(k, nonce, 12, ffi.NULL, 0, blob[:-16], out, len(pt), bad_tag, 16)
        assert st == lib.VC_ERR_AUTH
        assert bytes(ffi.buffer(out)) == bytes(len(pt)), impl
        st = lib.vc_gcm_decrypt(k, nonce, 12, ffi.NULL, 0, blob[:-16], out, len(pt), blob[-16:], 16)
        assert st == lib.VC_OK and bytes(ffi.buffer(out)) == pt
