"""One-shot GCM at every length around the wide paths' route boundaries.

The wide tiers split a one-shot message (12-byte IV) by size: one chunk of
VC_SHORT_V vectors, several chunks with one reduction each, the AAD hashed
alone when it is too long to share chunk 0's power run, and the main loop
plus a tail beyond VC_ONEPASS_BYTES.  The random differential test reaches
these boundaries only by chance; this one walks every data length from 0 to
1100 bytes (past two 512-byte chunks and into the main loop on every width)
and AAD lengths on both sides of the AAD-alone threshold, on every path,
both directions, against `cryptography`.
"""

from __future__ import annotations

import random

import pytest
from cryptography.exceptions import InvalidTag as RefInvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM as RefGCM
from vaescrypt._native import ffi, lib

import vaescrypt

# Short AADs share chunk 0's powers (1-16 B: one vector with the length
# block, 13 B as in TLS 1.2); 240/256 B sit at the threshold for a
# 16-block chunk (AAD blocks + 16 + 1 > 32); 600 B is hashed alone.
AAD_LENGTHS = (0, 1, 13, 16, 17, 63, 240, 241, 256, 600)


def _data_lengths(aad_len: int) -> range | list[int]:
    if aad_len in (0, 17):
        return range(1101)
    return [n for n in range(1101) if n % 16 in (0, 1, 15) or n % 64 == 63]


@pytest.mark.parametrize("impl", vaescrypt.available("gcm", "encrypt"))
def test_every_length_matches_reference(impl: str) -> None:
    r = random.Random(f"boundaries-{impl}")
    for aad_len in AAD_LENGTHS:
        key = r.randbytes(r.choice((16, 24, 32)))
        ours = vaescrypt.AESGCM(key, impl=impl)
        ref = RefGCM(key)
        aad = r.randbytes(aad_len)
        for n in _data_lengths(aad_len):
            nonce, pt = r.randbytes(12), r.randbytes(n)
            blob = ref.encrypt(nonce, pt, aad)
            assert ours.encrypt(nonce, pt, aad) == blob, (impl, len(key), aad_len, n)
            assert ours.decrypt(nonce, blob, aad) == pt, (impl, len(key), aad_len, n)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm", "decrypt"))
def test_tampered_tag_rejected_at_every_route(impl: str) -> None:
    """A flipped ciphertext bit in the first or the last block is caught on
    each route (one chunk, several, AAD alone, main loop + tail)."""
    r = random.Random(f"boundaries-tamper-{impl}")
    key = r.randbytes(32)
    ours, ref = vaescrypt.AESGCM(key, impl=impl), RefGCM(key)
    for aad_len in (0, 16, 600):
        aad = r.randbytes(aad_len)
        for n in (1, 64, 255, 256, 257, 300, 511, 512, 513, 700, 1024, 1100):
            nonce = r.randbytes(12)
            blob = bytearray(ref.encrypt(nonce, r.randbytes(n), aad))
            for pos in (0, n - 1):
                bad = bytearray(blob)
                bad[pos] ^= 1
                with pytest.raises(vaescrypt.InvalidTag):
                    ours.decrypt(nonce, bytes(bad), aad)
                with pytest.raises(RefInvalidTag):  # the reference agrees it is bad
                    ref.decrypt(nonce, bytes(bad), aad)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm", "decrypt"))
def test_truncated_tags_checked_byte_exact(impl: str) -> None:
    """Every truncated tag length: the right tag passes, a tag wrong in any
    one byte fails.  Many messages, so that the full tag's bytes beyond the
    truncation are sometimes zero (a check that compared them against a
    zero-filled load would then accept or reject wrongly)."""
    r = random.Random(f"boundaries-tags-{impl}")
    for tag_len in (4, 8, 12, 13, 14, 15, 16):
        key = r.randbytes(16)
        ours, ref = vaescrypt.AESGCM(key, tag_length=tag_len, impl=impl), RefGCM(key)
        for i in range(400):
            nonce, pt = r.randbytes(12), r.randbytes(r.randrange(0, 100))
            blob = ref.encrypt(nonce, pt, b"")
            ct, tag = blob[:-16], blob[-16 : -16 + tag_len] if tag_len < 16 else blob[-16:]
            assert ours.decrypt(nonce, ct + tag, b"") == pt, (tag_len, i)
            bad = bytearray(tag)
            bad[i % tag_len] ^= 1 << (i % 8)
            with pytest.raises(vaescrypt.InvalidTag):
                ours.decrypt(nonce, ct + bytes(bad), b"")


# Messages the main loop takes whole (a multiple of its step: 256 bytes on
# every wide tier), where the one-shot encrypt (on avx512 the decrypt too)
# has the loop finish the tag (E(J0) and the length block inside it), and a
# non-multiple beside each.
WHOLE_LOOP_LENGTHS = (512, 768, 1024, 1280, 1536, 2048, 2304, 4096, 4352, 8192, 513, 1279, 4111)


@pytest.mark.parametrize("impl", vaescrypt.available("gcm", "encrypt"))
def test_whole_loop_messages_every_tag_length(impl: str) -> None:
    """Long messages the main loop ends exactly: every key size, short and
    long AAD, full and truncated tags (the tag stored from a register), the
    decryption of each, and a flipped bit in the first or last block or in
    the tag rejected with no plaintext released."""
    r = random.Random(f"boundaries-whole-{impl}")
    for n in WHOLE_LOOP_LENGTHS:
        for aad_len in (0, 16, 600):
            key = r.randbytes(r.choice((16, 24, 32)))
            tag_len = r.choice((4, 8, 12, 13, 14, 15, 16))
            ours, ref = vaescrypt.AESGCM(key, tag_length=tag_len, impl=impl), RefGCM(key)
            nonce, pt, aad = r.randbytes(12), r.randbytes(n), r.randbytes(aad_len)
            full = ref.encrypt(nonce, pt, aad)
            blob = full[:n] + full[n : n + tag_len]
            where = (impl, len(key), n, aad_len, tag_len)
            assert ours.encrypt(nonce, pt, aad) == blob, where
            assert ours.decrypt(nonce, blob, aad) == pt, where
            for pos in (0, n - 1, n + tag_len - 1):
                bad = bytearray(blob)
                bad[pos] ^= 0x80
                with pytest.raises(vaescrypt.InvalidTag):
                    ours.decrypt(nonce, bytes(bad), aad)
            # in place through the C API (in == out): the loop hashes each
            # block before it overwrites it; a bad tag leaves zeros
            for good in (True, False):
                buf, tbuf = bytearray(blob[:n]), bytearray(blob[n:])
                if not good:
                    tbuf[0] ^= 1
                p = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
                st = lib.vc_gcm_decrypt(
                    ours._key, nonce, 12, aad, aad_len, p, p, n, bytes(tbuf), tag_len
                )
                assert (st, bytes(buf)) == ((0, pt) if good else (lib.VC_ERR_AUTH, bytes(n))), where


@pytest.mark.parametrize("impl", vaescrypt.available("gcm"))
def test_stream_call_starting_at_every_counter_low_byte(impl: str) -> None:
    """A call that starts at each of the 256 low bytes of the counter, 2 KiB
    long, so it crosses the low byte's wrap (the main loop's slow counter
    path) from every phase.  The wide tiers step the counters by adding to
    byte 15 while no block of a batch carries out of it, and then rebuild
    the exact form from lane 0 (gcm_crypt's ctr_lane0), whose neighbours
    may have carried out: one-shot messages with a 12-byte IV never start
    a batch there (their low bytes run 2, 18, ...), a stream can."""
    r = random.Random(f"boundaries-ctr-phase-{impl}")
    key, nonce, aad = r.randbytes(32), r.randbytes(12), r.randbytes(20)
    g, ref = vaescrypt.AESGCM(key, impl=impl), RefGCM(key)
    # first data counter = 2: a lead of n blocks starts the second call at
    # low byte 2 + n (mod 256)
    pt = r.randbytes(256 * 16 + 2048)
    blob = ref.encrypt(nonce, pt, aad)
    for lead in range(256):
        cut = lead * 16
        end = cut + 2048
        if vaescrypt.path_usable("gcm", "encrypt", impl):
            e = g.encryptor(nonce, aad)
            assert e.update(pt[:cut]) + e.update(pt[cut:end]) == blob[:end], (impl, lead)
        if vaescrypt.path_usable("gcm", "decrypt", impl):
            d = g.decryptor(nonce, aad)
            assert d.update(blob[:cut]) + d.update(blob[cut:end]) == pt[:end], (impl, lead)
