"""Reference computations for the vaescrypt tests, built on `cryptography`."""

from __future__ import annotations

from cryptography.hazmat.decrepit.ciphers.modes import CFB, CFB8
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def gcm_encrypt(key: bytes, nonce: bytes, pt: bytes, aad: bytes) -> tuple[bytes, bytes]:
    out = AESGCM(key).encrypt(nonce, pt, aad)
    return out[:-16], out[-16:]


def cfb128(key: bytes, iv: bytes, data: bytes, encrypt: bool) -> bytes:
    c = Cipher(algorithms.AES(key), CFB(iv))
    ctx = c.encryptor() if encrypt else c.decryptor()
    return ctx.update(data) + ctx.finalize()


def cfb8(key: bytes, iv: bytes, data: bytes, encrypt: bool) -> bytes:
    c = Cipher(algorithms.AES(key), CFB8(iv))
    ctx = c.encryptor() if encrypt else c.decryptor()
    return ctx.update(data) + ctx.finalize()


def aes_block(key: bytes) -> object:
    return Cipher(algorithms.AES(key), modes.ECB()).encryptor()


def cfb1(key: bytes, iv: bytes, data: bytes, nbits: int, encrypt: bool) -> bytes:
    """CFB1 straight from SP 800-38A: one AES call per bit, MSB first."""
    enc = aes_block(key)
    reg = int.from_bytes(iv, "big")
    out = bytearray((nbits + 7) // 8)
    for i in range(nbits):
        ks = enc.update(reg.to_bytes(16, "big"))[0] >> 7  # type: ignore[attr-defined]
        x = (data[i // 8] >> (7 - i % 8)) & 1
        y = x ^ ks
        out[i // 8] |= y << (7 - i % 8)
        c = y if encrypt else x
        reg = ((reg << 1) | c) & ((1 << 128) - 1)
    return bytes(out)


# ---- GF(2^128) as GCM defines it (bit 0 = MSB of byte 0 = coefficient of x^0) ----

_R = 0xE1 << 120


def gf_mul(x: int, y: int) -> int:
    z, v = 0, y
    for i in range(127, -1, -1):
        if (x >> i) & 1:
            z ^= v
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    return z


def gf_inv(a: int) -> int:
    """a^(2^128 - 2) = a^-1 in GF(2^128)."""
    result, base, e = 1 << 127, a, (1 << 128) - 2  # 1 << 127 is the field's "1"
    while e:
        if e & 1:
            result = gf_mul(result, base)
        base = gf_mul(base, base)
        e >>= 1
    return result


def nonce_for_j0(key: bytes, j0: bytes) -> bytes:
    """A 16-byte nonce whose pre-counter block is j0.

    For a one-block IV, J0 = GHASH_H(IV || [0]_64 || [128]_64) = IV*H^2 ^ L*H,
    so IV = (J0 ^ L*H) * H^-2.  Lets a test start the 32-bit counter next to
    its wrap.
    """
    h = int.from_bytes(aes_block(key).update(bytes(16)), "big")  # type: ignore[attr-defined]
    length_block = 128  # [0]_64 || [len(IV) in bits]_64
    t = int.from_bytes(j0, "big") ^ gf_mul(length_block, h)
    return gf_mul(t, gf_inv(gf_mul(h, h))).to_bytes(16, "big")
