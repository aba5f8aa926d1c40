"""AES-256 CFB through the OpenSSL inside the `cryptography` wheel.

    python3 cfb.py cfb128-decrypt|cfb128-encrypt|cfb8-decrypt|cfb8-encrypt [BYTES]

Encrypts/decrypts BYTES (default 4096) of a fixed pattern with a fixed key and
IV, checks the round trip, prints the CRC-32 of the output.  OpenSSL picks
its AES code from CPUID: under `sdematrix exec` that is the model's CPUID, so
the expectations files next to this script judge OpenSSL's dispatcher, not
ours.
"""

from __future__ import annotations

import sys
import zlib

from cryptography.hazmat.decrepit.ciphers.modes import CFB, CFB8
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

KEY = bytes(range(32))
IV = bytes(range(16, 32))


def run(mode_name: str, direction: str, n: int) -> bytes:
    mode = {"cfb128": CFB, "cfb8": CFB8}[mode_name]
    cipher = Cipher(algorithms.AES(KEY), mode(IV))
    data = bytes(i * 7 % 251 for i in range(n))
    if direction == "encrypt":
        enc = cipher.encryptor()
        out = enc.update(data) + enc.finalize()
    else:
        dec = cipher.decryptor()
        out = dec.update(data) + dec.finalize()  # decrypt the pattern as if ciphertext
    # the other direction must give the input back (both directions are checked)
    other = cipher.decryptor() if direction == "encrypt" else cipher.encryptor()
    if other.update(out) + other.finalize() != data:
        raise SystemExit(f"{mode_name} {direction}: round trip failed")
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[1].count("-") != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    mode_name, direction = argv[1].split("-")
    if mode_name not in ("cfb128", "cfb8") or direction not in ("encrypt", "decrypt"):
        print(f"unknown operation {argv[1]!r}", file=sys.stderr)
        return 2
    n = int(argv[2]) if len(argv) == 3 else 4096
    print(argv[1], n, f"{zlib.crc32(run(mode_name, direction, n)):08x}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
