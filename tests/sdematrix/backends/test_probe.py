"""vc-probe against the contract in docs/PROBE.md.

The probe is not built here: tests that need it use probe_path() and skip with
the reason when it is missing.  Its digests are compared with a reference
computed independently with `cryptography` (sdematrix.backends.probe.expected_digest).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sdematrix.backends.probe import (
    ProbeError,
    derive_inputs,
    expected_digest,
    expected_output,
    parse_probe_output,
    probe_command,
    probe_path,
    splitmix64_bytes,
)
from sdematrix.spec.models import DIRECTIONS, MODES, PATHS, Cell

LENGTHS = (0, 1, 15, 16, 17, 100)
KEY_BITS = (128, 192, 256)
SEED = 1


@pytest.fixture(scope="module")
def probe() -> Path:
    try:
        return probe_path()
    except ProbeError as e:
        pytest.skip(f"vc-probe not available: {e}")


def run(
    argv: tuple[str, ...] | list[str], env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    full_env = dict(os.environ)
    full_env.pop("VAESCRYPT_CPU_MASK", None)
    full_env.update(env or {})
    p = subprocess.run(
        list(argv),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
    )
    return p.returncode, p.stdout, p.stderr


def report_for(cell: Cell, seed: int = SEED, **kw: str) -> tuple[int, dict]:
    cmd = probe_command(cell, seed, **kw)
    rc, out, err = run(cmd.argv)
    assert out.count("\n") == 1, f"probe must print exactly one line: {out!r} {err!r}"
    return rc, parse_probe_output(out)


# ------------------------------------------------------------ pure Python --


def test_splitmix64_reference_value() -> None:
    # splitmix64 seeded with 0: first output 0xE220A8397B1DCDAF, second
    # 0x6E789E6AA1B965F4 (the published reference sequence).
    s = splitmix64_bytes(0, 16)
    assert int.from_bytes(s[:8], "little") == 0xE220A8397B1DCDAF
    assert int.from_bytes(s[8:], "little") == 0x6E789E6AA1B965F4


def test_derive_inputs_layout() -> None:
    g = derive_inputs(Cell("x", "gcm", "encrypt", 192, 5), 7)
    assert (len(g.key), len(g.iv), len(g.aad), len(g.data)) == (24, 12, 16, 5)
    stream = splitmix64_bytes(7, 24 + 12 + 16 + 5)
    assert g.key + g.iv + g.aad + g.data == stream
    c = derive_inputs(Cell("x", "cfb8", "decrypt", 128, 3), 7)
    assert (len(c.key), len(c.iv), len(c.aad), len(c.data)) == (16, 16, 0, 3)


def test_expected_output_shapes() -> None:
    assert len(expected_output(Cell("x", "gcm", "encrypt", 128, 10), 1)) == 26
    dec = derive_inputs(Cell("x", "gcm", "decrypt", 128, 10), 1).data
    assert expected_output(Cell("x", "gcm", "decrypt", 128, 10), 1) == dec
    # CFB decrypt of an encryption is the identity on the data.
    for mode in ("cfb128", "cfb8", "cfb1"):
        from sdematrix.backends import probe as P

        x = derive_inputs(Cell("x", mode, "encrypt", 256, 33), 3)
        ct = expected_output(Cell("x", mode, "encrypt", 256, 33), 3)
        assert ct != x.data
        if mode == "cfb1":
            assert P.cfb1(x.key, x.iv, ct, encrypt=False) == x.data


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "hello\n",
        "{not json\n",
        '{"probe": 2, "status": "ok"}\n',
        '{"probe": 1}\n',
        "[1, 2]\n",
    ],
)
def test_parse_rejects_junk(junk: str) -> None:
    with pytest.raises(ProbeError) as ei:
        parse_probe_output(junk)
    assert "\n" not in str(ei.value)


def test_probe_path_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDEMATRIX_PROBE", str(tmp_path / "missing"))
    with pytest.raises(ProbeError, match="SDEMATRIX_PROBE"):
        probe_path()
    exe = tmp_path / "vc-probe"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("SDEMATRIX_PROBE", str(exe))
    assert probe_path() == exe
    cmd = probe_command(Cell("x", "cfb8", "decrypt", 192, 9), 5, impl="aesni")
    assert cmd.argv == (
        str(exe),
        "--mode",
        "cfb8",
        "--dir",
        "decrypt",
        "--key-bits",
        "192",
        "--length",
        "9",
        "--seed",
        "5",
        "--impl",
        "aesni",
    )
    with pytest.raises(ProbeError):
        probe_command(Cell("x", "cfb9", "decrypt", 192, 9), 5)
    with pytest.raises(ProbeError):
        probe_command(Cell("x", "gcm", "decrypt", 192, 9), 5, impl="sse")


# ------------------------------------------------------------- the probe --


def _paths_for(probe_report: dict, mode: str, direction: str) -> list[str]:
    """auto, every path the probe says it can run for (mode, direction), and
    what the Python binding reports, if it imports."""
    paths = ["auto", *probe_report["available"][mode][direction]]
    try:
        import vaescrypt  # type: ignore[import-not-found]
    except ImportError:  # the binding is optional here
        return paths
    available = getattr(vaescrypt, "available", None)
    if available is None:  # binding still incomplete
        return paths
    return paths + [str(p) for p in available(mode) if str(p) not in paths]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("mode", MODES)
def test_digest_matches_reference(probe: Path, mode: str, direction: str) -> None:
    _, first = report_for(Cell("host", mode, direction, 128, 16))
    paths = _paths_for(first, mode, direction)
    assert paths[1:], f"probe reports no available path for {mode} {direction}"
    bad: list[str] = []
    runs = 0
    for key_bits in KEY_BITS:
        for length in LENGTHS:
            cell = Cell("host", mode, direction, key_bits, length)
            want = expected_digest(cell, SEED)
            for p in paths:
                for kind in ("impl", "force_tier"):
                    if kind == "force_tier" and p == "auto":
                        continue
                    rc, rep = report_for(cell, **{kind: p})
                    runs += 1
                    where = f"{cell.name} {kind}={p}"
                    if rc != 0 or rep["status"] != "ok":
                        bad.append(f"{where}: rc={rc} {rep['status']} {rep.get('message')}")
                        continue
                    if p != "auto" and rep["path"] != p:
                        bad.append(f"{where}: ran {rep['path']}")
                    if rep["digest"] != want:
                        bad.append(f"{where}: digest {rep['digest'][:16]} != {want[:16]}")
                    exp_len = length + (16 if (mode, direction) == ("gcm", "encrypt") else 0)
                    if rep["out_len"] != exp_len:
                        bad.append(f"{where}: out_len {rep['out_len']} != {exp_len}")
    assert not bad, f"{len(bad)}/{runs} runs wrong:\n" + "\n".join(bad[:20])


def test_report_fields(probe: Path) -> None:
    rc, rep = report_for(Cell("host", "gcm", "encrypt", 256, 64), seed=12345)
    assert rc == 0
    assert rep["seed"] == 12345 and rep["key_bits"] == 256 and rep["length"] == 64
    assert rep["forced"] is False
    assert rep["path"] == rep["selected"]["gcm"]["encrypt"]
    assert set(rep["selected"]) == set(MODES)
    assert all(set(v) == set(DIRECTIONS) for v in rep["selected"].values())
    assert all(p in PATHS for v in rep["selected"].values() for p in v.values())
    assert rep["xcr0"].startswith("0x") and rep["mask_error"] is None
    assert rep["digest"] == expected_digest(Cell("host", "gcm", "encrypt", 256, 64), 12345)


def test_repeat_gives_same_digest(probe: Path) -> None:
    cell = Cell("host", "cfb128", "decrypt", 192, 40)
    rc, rep = report_for(cell, repeat=5)
    assert rc == 0 and rep["repeat"] == 5 and rep["digest"] == expected_digest(cell, SEED)


def test_masked_path_is_unsupported(probe: Path) -> None:
    """--impl aesni with AES masked off: the library refuses, status unsupported,
    exit 3; the dispatcher then selects something else."""
    cmd = probe_command(Cell("host", "cfb8", "encrypt", 128, 16), SEED, impl="aesni")
    rc, out, _ = run(cmd.argv, env={"VAESCRYPT_CPU_MASK": "-aes"})
    rep = parse_probe_output(out)
    assert rc == 3 and rep["status"] == "unsupported" and rep["digest"] is None
    assert "aes" not in rep["features"]
    assert rep["selected"]["cfb8"]["encrypt"] != "aesni"


def test_bad_mask_reported(probe: Path) -> None:
    cmd = probe_command(Cell("host", "cfb8", "encrypt", 128, 16), SEED)
    _, out, _ = run(cmd.argv, env={"VAESCRYPT_CPU_MASK": "-nosuchfeature"})
    rep = parse_probe_output(out)
    assert "nosuchfeature" in (rep["mask_error"] or "")


BASE = "--mode gcm --dir encrypt --key-bits 128 --length 1"


@pytest.mark.parametrize(
    "args",
    [
        "",
        "--mode gcm",
        "--mode ecb --dir encrypt --key-bits 128 --length 1",
        "--mode gcm --dir up --key-bits 128 --length 1",
        "--mode gcm --dir encrypt --key-bits 64 --length 1",
        "--mode gcm --dir encrypt --key-bits 128 --length -1",
        "--mode gcm --dir encrypt --key-bits 128 --length 1x",
        f"{BASE} --impl sse",
        f"{BASE} --impl aesni --force-tier aesni",
        f"{BASE} --bogus 1",
        f"{BASE} --repeat 0",
        f"{BASE} --seed",
    ],
)
def test_usage_errors(probe: Path, args: str) -> None:
    rc, out, err = run([str(probe), *args.split()])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("vc-probe: ")


def test_ssc_marks_in_binary(probe: Path) -> None:
    """The marks are in the executable exactly as SDE expects them:
    mov ebx, 0x111 / 0x222 (BB imm32) directly followed by 64 67 90."""
    blob = probe.read_bytes()
    assert bytes.fromhex("bb11010000646790") in blob
    assert bytes.fromhex("bb22020000646790") in blob


def test_json_is_one_object(probe: Path) -> None:
    cmd = probe_command(Cell("host", "cfb1", "encrypt", 128, 3), SEED)
    _, out, _ = run(cmd.argv)
    assert isinstance(json.loads(out), dict)
