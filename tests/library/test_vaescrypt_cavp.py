"""Every NIST CAVP GCM and CFB (1/8/128) vector in cryptography_vectors, on every path
this host can run for the mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from _vc_vectors import bits_to_bytes, cfb_files, cfb_segment, gcm_files, read_rsp

import vaescrypt

MODE_OF_SEGMENT = {128: "cfb128", 8: "cfb8", 1: "cfb1"}


def _cases(mode: str, files: list[Path]) -> list[tuple[Path, str]]:
    return [(f, p) for f in files for p in vaescrypt.available(mode)]


def _id(case: tuple[Path, str]) -> str:
    return f"{case[0].stem}-{case[1]}"


def test_vector_files_present() -> None:
    assert len(gcm_files()) == 6
    assert len(cfb_files()) == 45


@pytest.mark.parametrize("case", _cases("gcm", gcm_files()), ids=_id)
def test_gcm_cavp(case: tuple[Path, str]) -> None:
    path, impl = case
    direction = "decrypt" if "Decrypt" in path.name else "encrypt"
    if not vaescrypt.path_usable("gcm", direction, impl):
        pytest.skip(f"{impl} has no GCM {direction} in this build")
    checked = 0
    keys: dict[tuple[bytes, int], vaescrypt.AESGCM] = {}
    for rec in read_rsp(path):
        f = rec.fields
        key, iv = bytes.fromhex(f["KEY"]), bytes.fromhex(f["IV"])
        aad, tag = bytes.fromhex(f["AAD"]), bytes.fromhex(f["TAG"])
        ct = bytes.fromhex(f["CT"])
        g = keys.get((key, len(tag)))
        if g is None:
            g = keys[(key, len(tag))] = vaescrypt.AESGCM(key, tag_length=len(tag), impl=impl)
        if direction == "encrypt":
            assert g.encrypt(iv, bytes.fromhex(f["PT"]), aad) == ct + tag, f"COUNT {f['COUNT']}"
        elif rec.fail:
            with pytest.raises(vaescrypt.InvalidTag):
                g.decrypt(iv, ct + tag, aad)
        else:
            assert g.decrypt(iv, ct + tag, aad) == bytes.fromhex(f["PT"]), f"COUNT {f['COUNT']}"
        checked += 1
        if len(keys) > 64:
            keys.clear()
    assert checked == 7875


@pytest.mark.parametrize(
    "case",
    [
        c
        for seg in (128, 8, 1)
        for c in _cases(MODE_OF_SEGMENT[seg], [f for f in cfb_files() if cfb_segment(f) == seg])
    ],
    ids=_id,
)
def test_cfb_cavp(case: tuple[Path, str]) -> None:
    path, impl = case
    seg = cfb_segment(path)
    mode = MODE_OF_SEGMENT[seg]
    checked = 0
    for rec in read_rsp(path):
        f = rec.fields
        direction = rec.section.lower()
        if not vaescrypt.path_usable(mode, direction, impl):
            continue
        c = vaescrypt.AESCFB(bytes.fromhex(f["KEY"]), seg, impl=impl)
        iv = bytes.fromhex(f["IV"])
        if seg == 1:
            pt, nbits = bits_to_bytes(f["PLAINTEXT"])
            ct, _ = bits_to_bytes(f["CIPHERTEXT"])
            args = {"bits": nbits}
        else:
            pt, ct = bytes.fromhex(f["PLAINTEXT"]), bytes.fromhex(f["CIPHERTEXT"])
            args = {}
        if direction == "encrypt":
            assert c.encrypt(iv, pt, **args) == ct, f"{direction} COUNT {f['COUNT']}"
        else:
            assert c.decrypt(iv, ct, **args) == pt, f"{direction} COUNT {f['COUNT']}"
        checked += 1
    if checked == 0:
        pytest.skip(f"{impl} has no {mode} operation in this build")
