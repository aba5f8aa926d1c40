"""XSAVE sizes the traced program is shown are never smaller than what the
host's hardware writes (sdematrix.backends.ptrace.xsave_room).

The failure this guards against: under a model with XSAVEC but a smaller
state than the host (glm, snb, hsw, skl on an AVX-512 host), glibc's
lazy-binding trampoline sized its XSAVEC stack area from the model's CPUID
leaf 0DH and the hardware wrote the host's larger state past it.  With a
small environment and no ASLR (the room above the first frame is what a
Docker container has), the probe died of SIGSEGV in ld.so's XSAVEC on every
run (20 of 20 with the model's own sizes on an Emerald Rapids host; 0 of 20
with the raised sizes).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sdematrix.backends.host_isa import host_cpuid, host_xcr0
from sdematrix.backends.ptrace.backend import cpuid_faulting_available
from sdematrix.backends.ptrace.profile import image_sites, program_images, write_profile
from sdematrix.backends.ptrace.tracer_bin import tracer_path
from sdematrix.backends.ptrace.xsave_room import xsave_safe_cpuid
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import CpuidLeaf

ROOT = Path(__file__).resolve().parent.parent.parent.parent
PROBE = ROOT / "src" / "sdematrix" / "_bin" / "vc-probe"

# An AVX-512 + AMX host's leaf 0DH (an Emerald Rapids guest, XCR0 0x602e7).
HOST = {
    (0xD, 0): (0x602E7, 0x2B00, 0x2B00, 0),
    (0xD, 1): (0x1F, 0x2A00, 0x1800, 0),
    (0xD, 2): (0x100, 0x240, 0, 0),
    (0xD, 5): (0x40, 0x440, 0, 0),
    (0xD, 6): (0x200, 0x480, 0, 0),
    (0xD, 7): (0x400, 0x680, 0, 0),
    (0xD, 9): (0x8, 0xA80, 0, 0),
    (0xD, 0x11): (0x40, 0xAC0, 2, 0),
    (0xD, 0x12): (0x2000, 0xB00, 6, 0),
}
HOST_XCR0 = 0x602E7

# Goldmont's leaf 0DH (x87, SSE, MPX; no AVX) and its other leaves.
GLM = [
    CpuidLeaf(0, 0, 0x15, 0x756E6547, 0x6C65746E, 0x49656E69),
    CpuidLeaf(1, 0, 0x506C9, 0x400800, 0x4FF8E3BF, 0xBFEBFBFF),
    CpuidLeaf(0xD, 0, 0x1B, 0x440, 0x440, 0),
    CpuidLeaf(0xD, 1, 0xF, 0x2C0, 0, 0),
    CpuidLeaf(0xD, 3, 0x40, 0x3C0, 0, 0),
    CpuidLeaf(0xD, 4, 0x40, 0x400, 0, 0),
]


def _by_key(leaves: list[CpuidLeaf]) -> dict[tuple[int, int], CpuidLeaf]:
    return {(c.leaf, c.subleaf): c for c in leaves}


def test_sizes_raised_to_the_hosts_features_kept() -> None:
    out = _by_key(xsave_safe_cpuid(GLM, HOST, HOST_XCR0))
    # subleaf 0: the model's supported components (EAX/EDX) stay, sizes grow
    assert out[(0xD, 0)] == CpuidLeaf(0xD, 0, 0x1B, 0x2B00, 0x2B00, 0)
    assert out[(0xD, 1)] == CpuidLeaf(0xD, 1, 0xF, 0x2A00, 0, 0)
    # every component the host's XCR0 enables gets the host's size/offset/alignment
    for sub in (2, 5, 6, 7, 9, 0x11, 0x12):
        h = HOST[(0xD, sub)]
        assert out[(0xD, sub)] == CpuidLeaf(0xD, sub, h[0], h[1], h[2], 0)
    # the model's own MPX components (not in the host's XCR0) are untouched
    assert out[(0xD, 3)] == GLM[4] and out[(0xD, 4)] == GLM[5]
    # leaves other than 0DH are untouched
    assert out[(0, 0)] == GLM[0] and out[(1, 0)] == GLM[1]


def test_larger_model_sizes_kept_and_no_xsave_model_unchanged() -> None:
    big = [CpuidLeaf(0xD, 0, 0x602E7, 0x3000, 0x3000, 0), CpuidLeaf(0xD, 2, 0x100, 0x240, 0, 0)]
    out = _by_key(xsave_safe_cpuid(big, HOST, HOST_XCR0))
    assert out[(0xD, 0)].ebx == 0x3000 and out[(0xD, 0)].ecx == 0x3000
    no_xsave = GLM[:2]  # no leaf 0DH: FXSAVE's fixed 512 bytes
    assert xsave_safe_cpuid(no_xsave, HOST, HOST_XCR0) == no_xsave
    assert xsave_safe_cpuid(GLM, None, None) == GLM


def _modes() -> list[str]:
    return ["fault", "bp"]


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("cpu", ["glm", "snb", "hsw", "skl"])
def test_probe_survives_a_tight_stack(cpu: str, mode: str, tmp_path: Path) -> None:
    """The real probe under real models, with an empty environment and ASLR
    off (`setarch -R`): the room above the first frame is as small as in a
    container, so an XSAVE area smaller than the hardware's write kills it."""
    tracer = tracer_path()
    if tracer is None or not PROBE.exists():
        pytest.fail("vc-tracer / vc-probe not built (python3 setup.py build_ext --inplace)")
    if mode == "fault":
        ok = cpuid_faulting_available()
        if ok is not True:
            pytest.skip(f"host has no CPUID faulting ({ok})")
    if shutil.which("setarch") is None:
        pytest.skip("setarch (util-linux) not installed")
    if host_cpuid() is None or host_xcr0() is None:
        pytest.fail("vc-tracer --host-profile gave no leaves / XCR0")
    model = load_matrix(ROOT / "sde_matrix.yaml").models[cpu]
    images = program_images(str(PROBE))
    profile, out = tmp_path / "profile.txt", tmp_path / "out.txt"
    write_profile(profile, model, [s for p in images for s in image_sites(p)], images, images[:1])
    argv = [
        "env",
        "-i",
        "setarch",
        "-R",
        str(tracer),
        "--profile",
        str(profile),
        "--out",
        str(out),
        "--cpuid-mode",
        mode,
        "--",
        str(PROBE),
        "--mode",
        "gcm",
        "--dir",
        "decrypt",
        "--key-bits",
        "128",
        "--length",
        "100",
        "--seed",
        "1",
    ]
    for _ in range(3):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if "Operation not permitted" in proc.stderr and "personality" in proc.stderr:
            pytest.skip("setarch -R refused here (personality(2) not permitted)")
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:], out.read_text()[-400:])
