"""Verdicts on a host whose kernel probes the program (uprobes, as
observability and security agents attach them to libc and libssl): the
kernel takes the probe's int3 itself and runs the probed instruction out of
line, in its ``[uprobes]`` page.

Each test puts a real uprobe (tracefs) on a function of a program it built,
so no other process meets it; without root or uprobe support it skips,
saying which."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _uprobes import Uprobe, file_offset, tracefs_or_reason, uprobe
from doubles.sdematrix_cli import SHIPPED_MATRIX, read_models, skip_unless_ptrace_runs
from test_exec import build_c, mix, needs, needs_ptrace, sdematrix

from sdematrix.backends.probe import probe_path
from sdematrix.backends.qemu.backend import QemuBackend

# probed() starts with VPADDD (AVX2), the instruction the uprobe sits on,
# then VZEROUPPER (AVX).  argv[1] "jit" first calls probed() once more, so
# the [uprobes] page exists when the program makes memory executable, then
# runs VPADDD from anonymous memory made executable by mprotect (W^X), each
# time right after probed() returns: under a return probe, the last syscall
# before the JIT code is the kernel trampoline's.
UPROBED_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
__asm__(".text\n.globl probed\n.type probed,@function\nprobed:\n"
        "    vpaddd %ymm1, %ymm0, %ymm0\n    vzeroupper\n    ret\n"
        ".size probed, .-probed\n");
void probed(void);
int marker = 0x5eed5eed; /* in the data segment: its vaddr is not its offset */
int main(int argc, char **argv)
{
    void (*jit)(void) = NULL;
    if (argc > 1 && !strcmp(argv[1], "jit")) {
        static const unsigned char code[] = {0xc5, 0xfd, 0xfe, 0xc1, 0xc3};
        probed(); /* the kernel maps its [uprobes] page before the mprotect */
        unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 3;
        memcpy(p, code, sizeof code);
        if (mprotect(p, 4096, PROT_READ | PROT_EXEC))
            return 4;
        jit = (void (*)(void))p;
    }
    for (int i = 0; i < 3; i++) {
        probed();
        if (jit)
            jit();
    }
    printf("probed ran\n");
    return 0;
}
"""


def in_image(places: list[str], exe: Path) -> list[str]:
    """The PATH+OFFSET places (meta uprobed_at) in `exe`."""
    return [p for p in places if p.startswith(f"{exe}+")]


@pytest.fixture
def tracefs() -> Path:
    """The tracefs directory to put uprobes in (skips, saying why, where
    this host cannot)."""
    where = tracefs_or_reason()
    if isinstance(where, str):
        pytest.skip(where)
    return where


@pytest.fixture
def uprobed_exe(tmp_path: Path) -> Path:
    return build_c(tmp_path, "uprobed", UPROBED_C)


@pytest.fixture
def probed(tracefs: Path, uprobed_exe: Path) -> Iterator[tuple[Path, Uprobe]]:
    """UPROBED_C built, with a uprobe on probed()'s VPADDD."""
    with uprobe(tracefs, uprobed_exe, "probed") as probe:
        yield uprobed_exe, probe


@needs_ptrace
@needs("gcc")
@pytest.mark.parametrize("mode", ["fault", "bp"])
def test_a_stepped_instruction_under_a_uprobe_completes(
    tmp_path: Path, probed: tuple[Path, Uprobe], mode: str
) -> None:
    """Stepping onto a probed instruction: the kernel runs it out of line and
    reports the step with a SIGTRAP of its own (SI_USER), which the tracer
    used to deliver: the program died (exit 133).  Now the step completes,
    the probed VPADDD is counted and chip-checked like any other."""
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["nhm", "hsw"], mode)
    exe, probe = probed
    out = tmp_path / "out"
    p = sdematrix(
        "exec", "--cpu", "nhm,hsw", "--cpuid-mode", mode, "--region", "function:main",
        "--out", str(out), "--", str(exe),
    )  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    res = read_models(out)
    hsw, nhm = res["hsw"], res["nhm"]
    assert hsw["status"] == "pass" and hsw["exit_code"] == 0, hsw
    assert (out / "hsw" / "stdout").read_text() == "probed ran\n"
    assert [(v["mnemonic"], v["function"]) for v in nhm["violations"]] == [
        ("VPADDD", "probed"),
        ("VZEROUPPER", "probed"),
    ], nhm["violations"]
    assert nhm["exit_code"] == 0
    for r in (hsw, nhm):
        assert r["meta"]["uprobe_steps"] == 3, r["meta"]
        # stepped: nothing of the program's own left unseen (a host's agent
        # may probe its libraries: those are listed, whoever runs them)
        assert not in_image(r["meta"].get("uprobed_at", []), exe), r["meta"]["uprobed_at"]
    fn = {f["name"]: f["by_mnemonic"] for f in mix(out, "hsw")["functions"]}
    assert fn["probed"] == {"VPADDD": 3, "VZEROUPPER": 3, "RET": 3}, fn["probed"]
    assert probe.hits() == 6  # the kernel took the int3 in both runs


@needs_ptrace
@needs("gcc")
def test_a_return_probes_trampoline_is_stepped_through_not_checked(
    tmp_path: Path, tracefs: Path, uprobed_exe: Path
) -> None:
    """A return probe sends probed()'s return through the kernel's
    trampoline in the [uprobes] page, which the kernel maps unreadable: a
    region stepping through it recorded its instructions without bytes,
    and hsw failed a correct program on eight INVALIDs.  Now those steps
    are counted as the kernel's (meta uprobe_trampoline_steps) and the
    verdicts are the program's own."""
    exe = uprobed_exe
    out = tmp_path / "out"
    with uprobe(tracefs, exe, "probed", ret=True) as probe:
        p = sdematrix(
            "exec", "--cpu", "nhm,hsw", "--region", "function:main", "--out", str(out),
            "--", str(exe),
        )  # fmt: skip
        assert probe.hits() == 6
    assert p.returncode == 1, p.stdout + p.stderr
    res = read_models(out)
    assert res["hsw"]["status"] == "pass" and res["hsw"]["violations"] == [], res["hsw"]
    assert [v["mnemonic"] for v in res["nhm"]["violations"]] == ["VPADDD", "VZEROUPPER"]
    for r in res.values():
        assert r["meta"]["uprobe_trampoline_steps"] > 0 and r["meta"]["uprobe_steps"] == 3
    fn = {f["name"]: f["by_mnemonic"] for f in mix(out, "hsw")["functions"]}
    assert fn["probed"] == {"VPADDD": 3, "VZEROUPPER": 3, "RET": 3}, fn["probed"]
    assert "?" not in {f["image"] for f in mix(out, "hsw")["functions"]}


@needs_ptrace
@needs("gcc")
def test_a_function_region_whose_entry_is_probed_says_why_it_is_empty(
    tmp_path: Path, probed: tuple[Path, Uprobe]
) -> None:
    """The kernel's int3 on probed()'s entry leaves no room for the
    tracer's: the region is never entered.  The error says so, naming the
    probe, instead of a bare "never entered"."""
    exe, _probe = probed
    out = tmp_path / "out"
    p = sdematrix(
        "exec", "--cpu", "hsw", "--region", "function:probed", "--out", str(out), "--", str(exe)
    )
    assert p.returncode != 0
    hsw = read_models(out)["hsw"]
    assert hsw["status"] == "error"
    (why,) = hsw["reasons"]
    assert why.startswith(
        "empty region: function:probed never entered (no evidence is not a pass); the host"
        f" kernel probes its entry (a uprobe's int3 at probed in {exe}+0x"
    ), why
    assert "func " + why.split("int3 at ", 1)[1].split(")")[0] in hsw["meta"]["sites_probed"]


@needs_ptrace
@needs("gcc")
def test_whole_mode_names_the_probed_instructions_it_cannot_see(
    tmp_path: Path, probed: tuple[Path, Uprobe]
) -> None:
    """Whole mode sees an instruction by its first-visit int3; under a uprobe
    the kernel's int3 is there instead and the kernel keeps the stop.  The
    probed VPADDD used to go unseen, and nhm's verdict said nothing of it;
    now the run lists it, checked from the file's bytes: not proven on nhm,
    in the model on hsw."""
    exe, probe = probed
    out = tmp_path / "out"
    p = sdematrix("exec", "--cpu", "nhm,hsw", "--out", str(out), "--", str(exe))
    res = read_models(out)
    nhm, hsw = res["nhm"]["meta"], res["hsw"]["meta"]
    entry = f"{exe}+{file_offset(exe, 'probed'):#x}"
    for meta in (nhm, hsw):  # (a host's agent may probe the libraries too)
        assert in_image(meta["uprobed_at"], exe) == [entry], meta["uprobed_at"]
        assert meta["uprobed"] == len(meta["uprobed_at"])
    assert hsw["uprobed_outside_model"] == []
    (why,) = nhm["uprobed_outside_model"]
    assert why.startswith("VPADDD probed in uprobed at ") and "AVX2 not in model nhm" in why
    assert "1 not in nhm: VPADDD probed in uprobed" in p.stderr, p.stderr
    assert "all of them are in hsw" in p.stderr, p.stderr
    # the VZEROUPPER after it had a first-visit int3 of its own
    assert [v["mnemonic"] for v in res["nhm"]["violations"]] == ["VZEROUPPER"]
    assert probe.hits() == 6


@needs_ptrace
@needs("gcc")
@pytest.mark.parametrize("ret", [False, True], ids=["entry-probe", "return-probe"])
def test_the_kernels_uprobes_page_is_not_taken_for_jit_code(
    tmp_path: Path, tracefs: Path, uprobed_exe: Path, ret: bool
) -> None:
    """The [uprobes] page is executable and has no file: whole mode took it
    for JIT code and tried to take PROT_EXEC from it.  Kernels that seal
    their system mappings refuse (counted as an anonymous executable
    mapping left unchecked); others allow it, which broke the probe and
    counted a second JIT region.  Under a return probe, the trampoline's
    own `syscall` also became the one the tracer injects its mprotect
    through, which cannot be read: the JIT region after probed()'s return
    stayed closed and the program died of SIGSEGV.  The program's one JIT
    region is all, entered three times."""
    exe = uprobed_exe
    out = tmp_path / "out"
    with uprobe(tracefs, exe, "probed", ret=ret) as probe:
        p = sdematrix("exec", "--cpu", "nhm,hsw", "--out", str(out), "--", str(exe), "jit")
        assert probe.hits() == 8
    assert p.returncode == 1, p.stderr
    for name, r in read_models(out).items():
        meta = r["meta"]
        got = {
            k: meta[k] for k in ("jit_regions", "jit_entries", "jit_steps", "anon_exec_mappings")
        }
        assert got == {
            "jit_regions": 1,
            "jit_entries": 3,
            "jit_steps": 6,
            "anon_exec_mappings": 0,
        }, (
            name,
            got,
        )
        assert r["exit_code"] == 0 and meta["jit_failed"] == 0, (name, r["exit_code"], meta)
    assert (out / "hsw" / "stdout").read_text() == "probed ran\n"


# Makes its own text page writable and executable again (as hot patchers
# do): the maps line of its text splits and comes back, the same memory,
# with the tracer's int3s already in it.
RESPLIT_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
/* two more pages of text, so that twice's page is a part of the mapping */
__asm__(".text\n.p2align 12\npadding:\n.fill 8192, 1, 0xc3\n");
int twice(int x) { return 2 * x; }
int main(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)&twice & ~(uintptr_t)(pg - 1));
    if (mprotect(page, pg, PROT_READ | PROT_WRITE | PROT_EXEC) ||
        mprotect(page, pg, PROT_READ | PROT_EXEC))
        return 3;
    printf("%d\n", twice(21));
    return 0;
}
"""


@needs_ptrace
@needs("gcc")
@pytest.mark.parametrize("mode", ["fault", "bp"])
def test_the_tracers_own_int3s_are_never_taken_for_a_uprobes(tmp_path: Path, mode: str) -> None:
    """Whole mode plants a mapping again when its maps line changes shape
    (an mprotect split it); the memory then holds the tracer's own int3s,
    which the first uprobe listing took for the kernel's: unseen starts of
    the image were "probed" (and the list's quadratic bookkeeping made
    `sdematrix exec --cpu spr -- python3 -c "import numpy"` outlast a
    120 s timeout; 20 s before and after).  Only memory fresh from the
    file is looked at, also for the later lines of a split mapping, and
    never at a CPUID / XGETBV site (bp mode arms ld.so's CPUIDs before the
    first plant)."""
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["hsw"], mode)
    exe = build_c(tmp_path, "resplit", RESPLIT_C)
    out = tmp_path / "out"
    p = sdematrix("exec", "--cpu", "hsw", "--cpuid-mode", mode, "--out", str(out), "--", str(exe))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "hsw" / "stdout").read_text() == "42\n"
    meta = read_models(out)["hsw"]["meta"]
    # a host's agent may probe libc: none of these can be a real uprobe
    sites = set()
    for line in (out / "work" / "hsw.profile").read_text().splitlines():
        if line.startswith("site "):
            _site, _kind, off, path = line.split(" ", 3)
            sites.add(f"{path}+{int(off, 16):#x}")
    at = meta.get("uprobed_at", [])
    assert sites and not in_image(at, exe) and not sites & set(at), at
    assert "sites_probed" not in meta, meta["sites_probed"]


def test_uprobe_helper_offsets_are_file_offsets(uprobed_exe: Path) -> None:
    """A uprobe names a file offset: the symbol's bytes in the file, also in
    a segment whose address is not its offset (the data segment here)."""
    data = uprobed_exe.read_bytes()
    off = file_offset(uprobed_exe, "probed")
    assert data[off : off + 4] == bytes.fromhex("c5fdfec1")
    off = file_offset(uprobed_exe, "marker")
    assert data[off : off + 4] == (0x5EED5EED).to_bytes(4, "little")


@pytest.fixture
def probe_copy(tmp_path: Path, tracefs: Path) -> tuple[Path, Path]:
    """vc-probe copied into tmp_path (its own inode: a uprobe on it reaches
    no other test's probe) and the tracefs directory to probe it with."""
    probe = tmp_path / "vc-probe"
    shutil.copy2(probe_path(), probe)
    return probe, tracefs


def run_hsw(out: Path, probe: Path, backend: str) -> subprocess.CompletedProcess[str]:
    return sdematrix(
        "run", "--backend", backend, "--cpu", "hsw", "--out", str(out),
        env={"SDEMATRIX_PROBE": str(probe)},
    )  # fmt: skip


@needs_ptrace
def test_a_probed_function_in_the_probes_regions_is_counted_as_itself(
    tmp_path: Path, probe_copy: tuple[Path, Path]
) -> None:
    """`sdematrix run`'s regions run straight-line blocks natively: a block
    through a probed instruction reaches the kernel's int3, and the block's
    count read that instruction's bytes from memory: vc_gcm_decrypt's first
    PUSH was counted as an INT3.  Its mix under the probe is now the mix
    without it, in every decrypt cell."""
    skip_unless_ptrace_runs(SHIPPED_MATRIX, ["hsw"], "bp")
    probe, where = probe_copy

    def decrypt_mixes(out: Path) -> dict[str, dict[str, int]]:
        p = run_hsw(out, probe, "ptrace")
        assert p.returncode == 0, p.stdout + p.stderr
        got = {}
        for f in sorted((out / "mix").glob("hsw.gcm.decrypt.*.mix.json")):
            doc = json.loads(f.read_text())
            assert "INT3" not in doc["overall"]["by_mnemonic"], f.name
            (fn,) = [x for x in doc["functions"] if x["name"] == "vc_gcm_decrypt"]
            got[f.name] = fn["by_mnemonic"]
        return got

    plain = decrypt_mixes(tmp_path / "plain")
    with uprobe(where, probe, "vc_gcm_decrypt") as up:
        probed = decrypt_mixes(tmp_path / "probed")
        assert up.hits() == len(probed) > 0
    assert probed == plain


_qemu_why = QemuBackend().unavailable_reason()


@pytest.mark.skipif(_qemu_why is not None, reason=f"QEMU backend unavailable here: {_qemu_why}")
def test_qemu_names_a_host_uprobe_as_why_the_probe_died(
    tmp_path: Path, probe_copy: tuple[Path, Path]
) -> None:
    """QEMU translates the guest's code from host memory, where the kernel
    wrote the uprobe's int3, so the guest runs it and dies of SIGTRAP.  The
    cell is an error that names the probe and the function, not a bare
    "died of SIGTRAP"; the cells that never call the function pass."""
    probe, where = probe_copy
    out = tmp_path / "out"
    with uprobe(where, probe, "vc_gcm_decrypt"):
        p = run_hsw(out, probe, "qemu")
    assert p.returncode != 0, p.stdout
    cells = {c["cell"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    dec = {k: c for k, c in cells.items() if k.startswith("hsw.gcm.decrypt.")}
    assert dec and all(c["status"] == "error" for c in dec.values()), dec
    for c in dec.values():
        (why,) = c["reasons"]
        assert why.startswith(
            "the probe died of SIGTRAP under QEMU: the host kernel probes vc_gcm_decrypt"
            " in vc-probe (a uprobe's int3 where the file holds 41)"
        ), why
    rest = [c["status"] for k, c in cells.items() if k not in dec]
    assert rest and set(rest) == {"pass"}, rest
