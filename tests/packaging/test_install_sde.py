"""ci/install-sde.sh against what Intel's mirror really hands non-browser
clients (an HTML challenge page, an empty 202 body), a truncated download and
a wrong-hash archive: each is refused before unpacking with ONE stderr line
that says what came back and how to proceed, and a distinct exit code
(1 nothing fetched, 3 not the archive, 2 wrong SHA-256).  Downloads are file://
URLs (curl reads them like http), so no network is used.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SDE = ROOT / "ci" / "install-sde.sh"
PIN_FILE = ROOT / "ci" / "sde-version.env"


def _pin() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in PIN_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def _kit(path: Path, payload: bytes = b"") -> str:
    """An SDE-shaped xz tarball (top dir + runnable sde64); returns its SHA-256.
    `payload` pads it with an incompressible file to reach a given size."""
    script = b"#!/bin/sh\necho 'Intel(R) SDE fake'\n"
    with tarfile.open(path, "w:xz", preset=0) as tar:
        for name, data, mode in (("sde64", script, 0o755), ("pad.bin", payload, 0o644)):
            info = tarfile.TarInfo(f"sde-external-fake-lin/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SDE_")}
    dest = tmp / "sde"
    return subprocess.run(
        ["bash", str(INSTALL_SDE), str(dest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**base, "HOME": str(tmp), **env},
    )


def _one_line(p: subprocess.CompletedProcess[str]) -> str:
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert p.stdout == ""
    line = lines[0]
    assert line.startswith("install-sde: ")
    # every failure says how to proceed, with the pin it will be held to
    assert "SDE_TARBALL=path" in line and "SDE_MIRROR_URL" in line and "cache" in line
    assert _pin()["SDE_SHA256"] in line
    return line


def test_pin_names_two_sources_and_a_plausible_floor() -> None:
    pin = _pin()
    assert pin["SDE_VERSION"] == "10.13.1-2026-07-28"
    assert pin["SDE_URL"].endswith(f"/sde-external-{pin['SDE_VERSION']}-lin.tar.xz")
    assert int(pin["SDE_MIN_BYTES"]) >= 1_000_000
    text = PIN_FILE.read_text()
    assert "1. the Arch User Repository" in text and "2. a public Nix flake" in text


def test_html_page_from_intel_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "challenge.html"
    page.write_text("<!DOCTYPE html><html><body>Access Denied</body></html>\n")
    p = _run(tmp_path, SDE_URL_OVERRIDE=page.as_uri())
    assert p.returncode == 3
    line = _one_line(p)
    assert f"{page.as_uri()}: the file is an HTML page" in line
    assert not (tmp_path / "sde").exists()


def test_empty_answer_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.tar.xz"
    empty.write_bytes(b"")
    p = _run(tmp_path, SDE_URL_OVERRIDE=empty.as_uri())
    assert p.returncode == 3
    assert "empty file (0 bytes)" in _one_line(p)


def test_truncated_xz_is_refused_before_hashing(tmp_path: Path) -> None:
    small = tmp_path / "small.tar.xz"
    _kit(small)
    p = _run(tmp_path, SDE_URL_OVERRIDE=small.as_uri())
    assert p.returncode == 3
    line = _one_line(p)
    assert "truncated" in line and "SHA-256 mismatch" not in line


def test_wrong_hash_xz_of_plausible_size_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.tar.xz"
    _kit(big, os.urandom(64 * 1024))
    p = _run(tmp_path, SDE_URL_OVERRIDE=big.as_uri(), SDE_MIN_BYTES_OVERRIDE="4096")
    assert p.returncode == 2
    line = _one_line(p)
    assert (
        "an xz archive with a SHA-256 mismatch: got " + hashlib.sha256(big.read_bytes()).hexdigest()
        in line
    )
    assert not (tmp_path / "sde" / "sde64").exists()


def test_unreachable_url_is_exit_1(tmp_path: Path) -> None:
    p = _run(tmp_path, SDE_URL_OVERRIDE=(tmp_path / "nowhere.tar.xz").as_uri())
    assert p.returncode == 1
    assert "download failed" in _one_line(p)


def test_mirror_is_tried_first_and_held_to_the_same_pin(tmp_path: Path) -> None:
    good = tmp_path / "mirror.tar.xz"
    sha = _kit(good, os.urandom(8 * 1024))
    page = tmp_path / "intel.html"
    page.write_text("<html>403</html>")
    env = {"SDE_URL_OVERRIDE": page.as_uri(), "SDE_SHA256_OVERRIDE": sha}
    p = _run(tmp_path, SDE_MIRROR_URL=good.as_uri(), **env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(tmp_path / "sde" / "sde64")
    # a mirror serving anything else is refused and Intel is tried next; the
    # line reports both sources
    other = tmp_path / "other.tar.xz"
    _kit(other, b"x")
    shutil.rmtree(tmp_path / "sde")
    p = _run(tmp_path, SDE_MIRROR_URL=other.as_uri(), **env)
    assert p.returncode == 2
    line = p.stderr.strip()
    assert len(p.stderr.splitlines()) == 1
    assert f"{other.as_uri()}: the file is an xz archive with a SHA-256 mismatch" in line
    assert f"{page.as_uri()}: the file is an HTML page" in line


def test_tarball_that_is_not_xz_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "sde-external-x-lin.tar.xz"
    fake.write_bytes(lzma.compress(b"x", format=lzma.FORMAT_ALONE))  # .lzma, not .xz
    p = _run(tmp_path, SDE_TARBALL=str(fake))
    assert p.returncode == 2
    assert "is not an xz archive" in _one_line(p)


def test_missing_sde_tarball_is_one_line(tmp_path: Path) -> None:
    p = _run(tmp_path, SDE_TARBALL=str(tmp_path / "nope.tar.xz"))
    assert p.returncode == 2
    assert "does not exist" in _one_line(p)
