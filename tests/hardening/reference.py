"""Independent references for the hardening tests, built on `cryptography`.

GCM: cryptography's Cipher/GCM computes the full 16-byte tag for nonces of
8..128 bytes; a t-byte GCM tag is by definition MSB_t of that tag
(SP 800-38D 7.1 step 8), so truncation gives the reference for short tags.
Nonces of 1..7 bytes (legal in SP 800-38D, refused by cryptography) go through
gcm_seal_spec: GHASH written here from the spec, AES blocks from AES-ECB.

CFB1: written here from SP 800-38A 6.3 with AES-ECB as the block function,
one block encryption per bit, so it shares nothing with the library's CFB1.
"""

from __future__ import annotations

from cryptography.hazmat.decrepit.ciphers.modes import CFB, CFB8
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MASK128 = (1 << 128) - 1


def gcm_seal(key: bytes, nonce: bytes, aad: bytes, pt: bytes, tag_len: int) -> tuple[bytes, bytes]:
    """(ciphertext, tag truncated to tag_len bytes)."""
    if not 8 <= len(nonce) <= 128:  # outside what cryptography's GCM accepts
        return gcm_seal_spec(key, nonce, aad, pt, tag_len)
    enc = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    enc.authenticate_additional_data(aad)
    ct = enc.update(pt) + enc.finalize()
    return ct, enc.tag[:tag_len]


def cfb_bytes(segment: int, key: bytes, iv: bytes, data: bytes, encrypt: bool) -> bytes:
    """CFB128 (segment=128) or CFB8 (segment=8) through OpenSSL."""
    mode = CFB(iv) if segment == 128 else CFB8(iv)
    c = Cipher(algorithms.AES(key), mode)
    ctx = c.encryptor() if encrypt else c.decryptor()
    return ctx.update(data) + ctx.finalize()


def cfb1(key: bytes, iv: bytes, data: bytes, nbits: int, encrypt: bool) -> bytes:
    """CFB1 over the first nbits bits of data (MSB of each byte first).

    Per bit j:  O_j = E_K(I_j);  C_j = P_j xor MSB_1(O_j);
                I_{j+1} = LSB_127(I_j) || C_j   (the ciphertext bit, both ways).
    Output bytes carry the result bits MSB first; unused low bits are zero.
    """
    if not 0 <= nbits <= 8 * len(data):
        raise ValueError(f"nbits {nbits} out of range for {len(data)} bytes")
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    reg = int.from_bytes(iv, "big")
    out = bytearray((nbits + 7) // 8)
    for j in range(nbits):
        msb = ecb.update(reg.to_bytes(16, "big"))[0] >> 7
        shift = 7 - j % 8
        x = (data[j // 8] >> shift) & 1
        y = x ^ msb
        out[j // 8] |= y << shift
        cbit = y if encrypt else x
        reg = ((reg << 1) | cbit) & MASK128
    return bytes(out)


def cfb(
    mode: str, key: bytes, iv: bytes, data: bytes, encrypt: bool, nbits: int | None = None
) -> bytes:
    """Reference for mode "cfb128" / "cfb8" / "cfb1" (nbits only for cfb1)."""
    if mode == "cfb1":
        return cfb1(key, iv, data, 8 * len(data) if nbits is None else nbits, encrypt)
    if nbits is not None:
        raise ValueError("nbits is only meaningful for cfb1")
    return cfb_bytes(128 if mode == "cfb128" else 8, key, iv, data, encrypt)


# ---- GCM from SP 800-38D for nonces cryptography refuses -------------------
# Blocks are big-endian integers: the MSB of byte 0 is bit 0, the coefficient
# of x^0, so "multiply by x" is a right shift and the reduction constant
# R = 11100001 || 0^120 is added when x^127 (the integer's bit 0) falls off.

_R = 0xE1 << 120


def gf_mul(x: int, y: int) -> int:
    """X * Y in GF(2^128), SP 800-38D Algorithm 1."""
    z, v = 0, y
    for i in range(127, -1, -1):  # bit i of the integer is coefficient x^(127-i)
        if (x >> i) & 1:
            z ^= v
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    return z


def ghash(h: int, data: bytes) -> int:
    """GHASH_H over data whose length is a multiple of 16."""
    if len(data) % 16:
        raise ValueError("GHASH input must be whole blocks")
    y = 0
    for i in range(0, len(data), 16):
        y = gf_mul(y ^ int.from_bytes(data[i : i + 16], "big"), h)
    return y


def _pad16(b: bytes) -> bytes:
    return b + bytes(-len(b) % 16)


def gcm_seal_spec(
    key: bytes, nonce: bytes, aad: bytes, pt: bytes, tag_len: int
) -> tuple[bytes, bytes]:
    """GCM-AE_K(IV, P, A) straight from SP 800-38D 7.1, any nonce length >= 1."""
    if not nonce:
        raise ValueError("GCM nonce must be at least 1 byte")
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    h = int.from_bytes(ecb.update(bytes(16)), "big")
    if len(nonce) == 12:
        j0 = nonce + b"\x00\x00\x00\x01"
    else:
        lens = (8 * len(nonce)).to_bytes(16, "big")
        j0 = ghash(h, _pad16(nonce) + lens).to_bytes(16, "big")
    nblocks = (len(pt) + 15) // 16
    prefix, c0 = j0[:12], int.from_bytes(j0[12:], "big")
    counters = b"".join(
        prefix + ((c0 + i) % 2**32).to_bytes(4, "big") for i in range(1, nblocks + 1)
    )
    ks = ecb.update(counters)
    ct = bytes(a ^ b for a, b in zip(pt, ks))
    lens = (8 * len(aad)).to_bytes(8, "big") + (8 * len(ct)).to_bytes(8, "big")
    s = ghash(h, _pad16(aad) + _pad16(ct) + lens)
    tag = (s ^ int.from_bytes(ecb.update(j0), "big")).to_bytes(16, "big")
    return ct, tag[:tag_len]
