"""AES-256-GCM through the four crypto libraries Debian 12 ships beside
OpenSSL, each with its own CPUID dispatcher: libgcrypt 1.10, nettle 3.8,
GnuTLS 3.7 and libsodium 1.0.18.

    python3 gcm_libs.py [BYTES] [--ignore-availability]

Each library encrypts BYTES (default 4096) of a fixed pattern under a fixed
key, nonce and AAD, then decrypts its own output and checks the tag.  One JSON
object goes to stdout: per library, what its dispatcher says it found (its
own words, not ours) and the ciphertext || tag in hex.

  libgcrypt  ``gcry_get_config(0, "hwflist")`` (src/hwf-x86.c decides)
  nettle     the lines its fat-library constructor prints with
             NETTLE_FAT_VERBOSE=1 (fat-x86_64.c decides)
  GnuTLS     the "... was detected" lines its constructor logs with
             GNUTLS_DEBUG_LEVEL=2 (lib/accelerated/x86/x86-common.c decides)
  libsodium  ``sodium_runtime_has_*`` and
             ``crypto_aead_aes256gcm_is_available()`` (sodium/runtime.c)

libsodium's AES-GCM is AES-NI code, and its documentation makes the caller
ask ``crypto_aead_aes256gcm_is_available()`` first: where it answers 0 the
script skips libsodium's GCM ("ct": null), as a correct caller does.
``--ignore-availability`` calls it anyway: the misuse a CPU without AES-NI
dies of (SIGILL), which the chip check reports.

GnuTLS also gets AES-128-GCM with a 32-byte key ("aes128_with_32_byte_key"):
its accelerated x86 GCM ciphers (SSSE3, AES-NI) take the key size from the
key's length and run AES-256-GCM, while its generic (nettle) cipher, the one
a CPU without SSSE3 or AES-NI gets, rejects the key (-50, "The request is
invalid"): the same call succeeds or fails by CPU.

The libraries are loaded with ctypes (no compiler needed) and nothing else
in the process does AES: the mix of each library image is its own
dispatcher's choice.  Under ``sdematrix exec`` every CPUID and XGETBV these
libraries execute answers as the model, so gcm_libs.expect.yaml (next to this
script) judges their dispatchers, and tests/integration/test_examples_peers.py
holds each self-report to what the model's CPUID says by that library's rule.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile

KEY = bytes(range(32))
NONCE = bytes(range(100, 112))
AAD = b"sdematrix distro_gcm example"
TAG_LEN = 16


def pattern(n: int) -> bytes:
    return bytes((i * 7 + 3) % 251 for i in range(n))


def _buf(data: bytes) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, len(data) or 1)


# ------------------------------------------------------------- libgcrypt --

GCRY_CIPHER_AES256 = 9
GCRY_CIPHER_MODE_GCM = 9
GCRYCTL_DISABLE_SECMEM = 37
GCRYCTL_INITIALIZATION_FINISHED = 38


def gcrypt(pt: bytes) -> dict[str, object]:
    g = ctypes.CDLL("libgcrypt.so.20")
    g.gcry_check_version.restype = ctypes.c_char_p
    version = g.gcry_check_version(None).decode()  # initialises, detects the CPU
    g.gcry_control(GCRYCTL_DISABLE_SECMEM, 0)
    g.gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0)
    g.gcry_get_config.restype = ctypes.c_void_p
    g.gcry_get_config.argtypes = [ctypes.c_int, ctypes.c_char_p]
    g.gcry_free.argtypes = [ctypes.c_void_p]
    raw = g.gcry_get_config(0, b"hwflist")  # "hwflist:intel-cpu:intel-aesni:...:"
    hwf = [f for f in ctypes.string_at(raw).decode().strip().split(":")[1:] if f]
    g.gcry_free(raw)

    def run(data: bytes, encrypt: bool, tag: bytes | None) -> tuple[bytes, bytes]:
        hd = ctypes.c_void_p()
        ok = g.gcry_cipher_open(ctypes.byref(hd), GCRY_CIPHER_AES256, GCRY_CIPHER_MODE_GCM, 0)
        if ok:
            raise SystemExit(f"libgcrypt: gcry_cipher_open failed ({ok})")
        try:
            g.gcry_cipher_setkey(hd, KEY, len(KEY))
            g.gcry_cipher_setiv(hd, NONCE, len(NONCE))
            g.gcry_cipher_authenticate(hd, AAD, len(AAD))
            out = _buf(bytes(len(data)))
            fn = g.gcry_cipher_encrypt if encrypt else g.gcry_cipher_decrypt
            if fn(hd, out, len(data), data, len(data)):
                raise SystemExit("libgcrypt: en/decrypt failed")
            if tag is None:
                t = _buf(bytes(TAG_LEN))
                g.gcry_cipher_gettag(hd, t, TAG_LEN)
                return out.raw[: len(data)], t.raw
            if g.gcry_cipher_checktag(hd, tag, len(tag)):
                raise SystemExit("libgcrypt: its own tag did not verify")
            return out.raw[: len(data)], tag
        finally:
            g.gcry_cipher_close(hd)

    ct, tag = run(pt, True, None)
    if run(ct, False, tag)[0] != pt:
        raise SystemExit("libgcrypt: round trip failed")
    return {"version": version, "hwflist": hwf, "ct": (ct + tag).hex()}


# ---------------------------------------------------------------- nettle --

NETTLE_CTX_BYTES = 1 << 14  # struct gcm_aes256_ctx is ~4.4 KiB (its 4 KiB GHASH table)


def _load_saying(soname: str, env: dict[str, str], prefix: str) -> tuple[ctypes.CDLL, list[str]]:
    """Load a library with `env` set, keeping the lines starting with
    `prefix` that its constructor prints to stderr (its dispatcher's choice,
    in its own words)."""
    os.environ.update(env)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            lib = ctypes.CDLL(soname)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        lines = tmp.read().decode(errors="replace").splitlines()
    return lib, [ln.removeprefix(prefix) for ln in lines if ln.startswith(prefix)]


def nettle(pt: bytes) -> dict[str, object]:
    n, said = _load_saying("libnettle.so.8", {"NETTLE_FAT_VERBOSE": "1"}, "libnettle: ")
    if not said:
        raise SystemExit("nettle: its fat constructor printed nothing (not a fat build?)")

    def run(data: bytes, encrypt: bool) -> tuple[bytes, bytes]:
        ctx = _buf(bytes(NETTLE_CTX_BYTES))
        n.nettle_gcm_aes256_set_key(ctx, KEY)
        n.nettle_gcm_aes256_set_iv(ctx, ctypes.c_size_t(len(NONCE)), NONCE)
        n.nettle_gcm_aes256_update(ctx, ctypes.c_size_t(len(AAD)), AAD)
        out = _buf(bytes(len(data)))
        fn = n.nettle_gcm_aes256_encrypt if encrypt else n.nettle_gcm_aes256_decrypt
        fn(ctx, ctypes.c_size_t(len(data)), out, data)
        t = _buf(bytes(TAG_LEN))
        n.nettle_gcm_aes256_digest(ctx, ctypes.c_size_t(TAG_LEN), t)
        return out.raw[: len(data)], t.raw

    ct, tag = run(pt, True)
    back, tag2 = run(ct, False)
    if back != pt or tag2 != tag:
        raise SystemExit("nettle: round trip or tag failed")
    return {"said": said, "ct": (ct + tag).hex()}


# ---------------------------------------------------------------- GnuTLS --

GNUTLS_CIPHER_AES_128_GCM = 10
GNUTLS_CIPHER_AES_256_GCM = 11


class _Datum(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("size", ctypes.c_uint)]


def gnutls(pt: bytes) -> dict[str, object]:
    # loads nettle too (already loaded above: its constructor does not run twice)
    t, logged = _load_saying("libgnutls.so.30", {"GNUTLS_DEBUG_LEVEL": "2"}, "gnutls[2]: ")
    if t.gnutls_global_init():
        raise SystemExit("GnuTLS: gnutls_global_init failed")
    said = [ln for ln in logged if ln.endswith(" was detected")]

    def run(algo: int, key: bytes, data: bytes, encrypt: bool) -> tuple[int, bytes]:
        hd = ctypes.c_void_p()
        rc = t.gnutls_aead_cipher_init(ctypes.byref(hd), algo, ctypes.byref(_Datum(key, len(key))))
        if rc:
            return rc, b""
        try:
            out = _buf(bytes(len(data) + TAG_LEN))
            olen = ctypes.c_size_t(len(out))
            fn = t.gnutls_aead_cipher_encrypt if encrypt else t.gnutls_aead_cipher_decrypt
            rc = fn(
                hd, NONCE, ctypes.c_size_t(len(NONCE)), AAD, ctypes.c_size_t(len(AAD)),
                ctypes.c_size_t(TAG_LEN), data, ctypes.c_size_t(len(data)), out, ctypes.byref(olen),
            )  # fmt: skip
            return rc, out.raw[: olen.value]
        finally:
            t.gnutls_aead_cipher_deinit(hd)

    rc, ct = run(GNUTLS_CIPHER_AES_256_GCM, KEY, pt, True)
    if rc:
        raise SystemExit(f"GnuTLS: AES-256-GCM encrypt failed ({rc})")
    rc, back = run(GNUTLS_CIPHER_AES_256_GCM, KEY, ct, False)
    if rc or back != pt:
        raise SystemExit(f"GnuTLS: its own ciphertext did not decrypt ({rc})")
    rc, odd = run(GNUTLS_CIPHER_AES_128_GCM, KEY, pt, True)  # a 32-byte key for AES-128
    mismatch = f"rejected {rc}" if rc else f"accepted, ciphered as AES-{256 if odd == ct else '?'}"
    return {"said": said, "ct": ct.hex(), "aes128_with_32_byte_key": mismatch}


# ------------------------------------------------------------- libsodium --


def sodium(pt: bytes, ignore_availability: bool) -> dict[str, object]:
    s = ctypes.CDLL("libsodium.so.23")
    if s.sodium_init() < 0:
        raise SystemExit("libsodium: sodium_init failed")
    has = {
        f: bool(getattr(s, f"sodium_runtime_has_{f}")())
        for f in ("sse2", "sse3", "ssse3", "sse41", "avx", "avx2", "avx512f", "pclmul", "aesni")
    }
    available = bool(s.crypto_aead_aes256gcm_is_available())
    out: dict[str, object] = {"has": has, "aes256gcm_available": available, "ct": None}
    if not available and not ignore_availability:
        return out
    c = _buf(bytes(len(pt) + TAG_LEN))
    clen = ctypes.c_ulonglong()
    if s.crypto_aead_aes256gcm_encrypt(
        c, ctypes.byref(clen), pt, ctypes.c_ulonglong(len(pt)), AAD,
        ctypes.c_ulonglong(len(AAD)), None, NONCE, KEY,
    ):  # fmt: skip
        raise SystemExit("libsodium: encrypt failed")
    ct = c.raw[: clen.value]
    m = _buf(bytes(len(pt)))
    mlen = ctypes.c_ulonglong()
    if s.crypto_aead_aes256gcm_decrypt(
        m, ctypes.byref(mlen), None, ct, ctypes.c_ulonglong(len(ct)), AAD,
        ctypes.c_ulonglong(len(AAD)), NONCE, KEY,
    ) or m.raw[: mlen.value] != pt:  # fmt: skip
        raise SystemExit("libsodium: its own ciphertext did not decrypt")
    out["ct"] = ct.hex()
    return out


def main(argv: list[str]) -> None:
    ignore = "--ignore-availability" in argv
    args = [a for a in argv if a != "--ignore-availability"]
    n = int(args[0]) if args else 4096
    pt = pattern(n)
    report = {
        "bytes": n,
        "nettle": nettle(pt),
        "gcrypt": gcrypt(pt),
        "gnutls": gnutls(pt),
        "sodium": sodium(pt, ignore),
    }
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
