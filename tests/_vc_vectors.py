"""Readers for the NIST CAVP .rsp files shipped in cryptography_vectors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cryptography_vectors

VECTORS_ROOT = Path(cryptography_vectors.__file__).parent
GCM_DIR = VECTORS_ROOT / "ciphers" / "AES" / "GCM"
CFB_DIR = VECTORS_ROOT / "ciphers" / "AES" / "CFB"


@dataclass
class Record:
    section: str  # "ENCRYPT" / "DECRYPT" for CFB; header params for GCM
    fields: dict[str, str] = field(default_factory=dict)
    fail: bool = False


def read_rsp(path: Path) -> Iterator[Record]:
    """Records of an .rsp file; [SECTION] lines set the section of the records that follow."""
    section = ""
    cur: Record | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            if cur is not None and cur.fields:
                yield cur
                cur = None
            continue
        if line.startswith("["):
            if cur is not None and cur.fields:
                yield cur
                cur = None
            inner = line.strip("[]")
            if "=" not in inner:
                section = inner
            continue
        if line == "FAIL":
            assert cur is not None
            cur.fail = True
            continue
        key, _, value = line.partition("=")
        if cur is None:
            cur = Record(section)
        cur.fields[key.strip().upper()] = value.strip()
    if cur is not None and cur.fields:
        yield cur


def bits_to_bytes(bits: str) -> tuple[bytes, int]:
    """'101' -> (b'\\xa0', 3): most significant bit first."""
    n = len(bits)
    padded = bits + "0" * (-n % 8)
    return bytes(int(padded[i : i + 8], 2) for i in range(0, len(padded), 8)), n


def gcm_files() -> list[Path]:
    return sorted(GCM_DIR.glob("*.rsp"))


def cfb_files() -> list[Path]:
    return sorted(CFB_DIR.glob("CFB*.rsp"))


def cfb_segment(path: Path) -> int:
    name = path.name
    if name.startswith("CFB128"):
        return 128
    if name.startswith("CFB8"):
        return 8
    if name.startswith("CFB1"):
        return 1
    raise ValueError(name)
