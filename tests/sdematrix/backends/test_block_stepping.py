"""vc-tracer's block stepping (straight-line blocks run natively to an int3 on
their last instruction) records exactly what stepping every instruction
records: the same instructions, the same per-address counts, the same bytes.

Real probe cells run both ways (``--no-blocks``) with address-space
randomisation off, so both runs execute the same addresses and take the same
data-dependent paths (libc's memcpy picks its path from pointer alignment).
A program whose 40-instruction straight-line loop body is interrupted by a
1 ms SIGALRM hundreds of times checks the interrupted-block accounting; the
block-free fallbacks (several threads, a step budget) are checked too."""

from __future__ import annotations

import ctypes
import json
import platform
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from test_tracer import CFLAGS, _host_has, intel_model, matrix_model

from sdematrix.backends.ptrace.backend import TracerOutput, parse_tracer_output
from sdematrix.backends.ptrace.profile import (
    MIN_BLOCK_INSNS,
    image_blocks,
    image_sites,
    program_images,
    write_profile,
)
from sdematrix.evidence.decode import decode
from sdematrix.spec.models import Cell, CpuModel

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64" or not shutil.which("gcc"),
    reason="needs Linux x86-64 and gcc",
)

ADDR_NO_RANDOMIZE = 0x0040000
SEED = 1

# A loop whose body is one 41-instruction straight-line block (39 `add`s, the
# `dec`, and the `jnz` that ends it) run N times; with --alarm while a 1 ms
# interval timer fires, with --thread while a second thread lives.
STRAIGHT_SRC = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) { (void)sig; alarms = alarms + 1; }

#define ADD4 "add $1, %%eax\n\tadd $2, %%edx\n\tadd $3, %%esi\n\tadd $4, %%edi\n\t"
__attribute__((noinline)) static unsigned long body(unsigned n)
{
    unsigned a = 0, d = 0, s = 0, i = 0;
    __asm__ volatile("mov $0x111, %%ebx\n\t.byte 0x64, 0x67, 0x90\n\t"
                     "1:\n\t" ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4
                     "add $1, %%eax\n\tadd $2, %%edx\n\tadd $3, %%esi\n\t"
                     "dec %%ecx\n\tjnz 1b\n\t"
                     "mov $0x222, %%ebx\n\t.byte 0x64, 0x67, 0x90"
                     : "+a"(a), "+d"(d), "+S"(s), "+D"(i), "+c"(n) : : "rbx", "memory", "cc");
    return (unsigned long)a + d + s + i;
}

static int gate[2];
/* lives, blocked in read(), until the region is over */
static void *thread_main(void *arg)
{
    char c;
    (void)arg;
    return read(gate[0], &c, 1) == 1 ? NULL : arg;
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 1000;
    int with_thread = argc > 2 && !strcmp(argv[2], "--thread");
    int with_alarm = argc > 2 && !strcmp(argv[2], "--alarm");
    pthread_t th;
    if (with_thread) {
        /* a second live thread for the whole region: no block may be used */
        if (pipe(gate) || pthread_create(&th, NULL, thread_main, NULL))
            return 1;
    } else if (with_alarm) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    unsigned long r = body(n);
    if (with_thread) {
        if (write(gate[1], "x", 1) != 1)
            return 1;
    } else if (with_alarm) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
    }
    printf("{\"r\": %lu, \"alarms\": %d}\n", r, (int)alarms);
    if (with_thread)
        pthread_join(th, NULL);
    return 0;
}
"""


def _no_aslr() -> None:
    """preexec_fn: the tracer and (inherited through fork/exec) the traced
    program run without address-space randomisation."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ctypes.c_ulong(ADDR_NO_RANDOMIZE)) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE)")


def run_traced(
    tracer: Path,
    tmp: Path,
    argv: list[str],
    model: CpuModel,
    *,
    blocks: bool,
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], TracerOutput]:
    tag = "blocks" if blocks else "steps"
    profile, out = tmp / f"profile-{tag}.txt", tmp / f"out-{tag}.txt"
    images = program_images(argv[0])
    write_profile(profile, model, [s for p in images for s in image_sites(p)], images, images[:1])
    cmd = [str(tracer), "--profile", str(profile), "--out", str(out), *extra]
    if not blocks:
        cmd.append("--no-blocks")
    proc = subprocess.run(
        [*cmd, "--", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=_no_aslr,
    )
    assert out.exists(), proc.stderr
    return proc, parse_tracer_output(out.read_text())


def records(t: TracerOutput) -> list[tuple[int, int, int, bytes]]:
    return sorted(t.insns)


@pytest.fixture(scope="module")
def probe_exe() -> Path:
    from sdematrix.backends.probe import probe_path

    p = Path(probe_path())
    if not p.exists():
        pytest.fail(f"probe not built ({p}): run python3 setup.py build_ext --inplace")
    return p


# (model, cell, the path the dispatcher must take there)
PROBE_CELLS = [
    ("p4p", Cell("p4p", "gcm", "encrypt", 128, 100), "generic"),
    ("p4p", Cell("p4p", "cfb1", "decrypt", 128, 2), "generic"),
    ("wsm", Cell("wsm", "cfb128", "encrypt", 256, 300), "aesni"),
    ("wsm", Cell("wsm", "cfb1", "encrypt", 128, 4), "aesni"),
    ("spr", Cell("spr", "gcm", "decrypt", 256, 512), "avx512"),
]


@pytest.mark.parametrize(
    ("model_name", "cell", "path"), PROBE_CELLS, ids=[c.name for _m, c, _p in PROBE_CELLS]
)
def test_probe_cell_records_identical(
    built: dict[str, Path],
    probe_exe: Path,
    tmp_path: Path,
    model_name: str,
    cell: Cell,
    path: str,
) -> None:
    from sdematrix.backends.probe import probe_command

    model = matrix_model(model_name)
    if model.max_vector_bits >= 512 and not _host_has("avx512f"):
        pytest.skip(f"host CPU has no AVX-512F (model {model_name} runs the avx512 tier)")
    argv = list(probe_command(cell, SEED).argv)
    p_steps, steps = run_traced(built["tracer"], tmp_path, argv, model, blocks=False)
    p_blocks, blocks = run_traced(built["tracer"], tmp_path, argv, model, blocks=True)
    for proc in (p_steps, p_blocks):
        assert proc.returncode == 0, proc.stderr
    report = json.loads(p_blocks.stdout.splitlines()[-1])
    assert p_steps.stdout == p_blocks.stdout
    assert path in json.dumps(report)
    assert steps.blocks_entered == 0 and blocks.blocks_entered > 0 and blocks.block_insns > 0
    assert records(blocks) == records(steps)
    assert (blocks.steps, blocks.regions, blocks.cpuid_stepped, blocks.xgetbv_stepped) == (
        steps.steps,
        steps.regions,
        steps.cpuid_stepped,
        steps.xgetbv_stepped,
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("straight")
    src, exe = d / "straight.c", d / "straight"
    src.write_text(STRAIGHT_SRC)
    subprocess.run(["gcc", *CFLAGS, "-pthread", str(src), "-o", str(exe)], check=True)
    return exe


def _loop_counts(t: TracerOutput) -> Counter[str]:
    c: Counter[str] = Counter()
    for _s, addr, n, code in t.insns:
        c[decode(code, addr).mnemonic] += n
    return c


def test_straight_block_is_listed(straight: Path) -> None:
    """The loop body is one block: 40 instructions ending with the jnz."""
    lengths = [b.lengths for b in image_blocks(str(straight))]
    assert all(len(ls) >= MIN_BLOCK_INSNS for ls in lengths)
    assert any(len(ls) == 41 for ls in lengths), sorted(len(ls) for ls in lengths)


def test_interrupted_blocks_count_exactly(
    built: dict[str, Path],
    straight: Path,
    tmp_path: Path,
) -> None:
    """SIGALRM lands inside the running block hundreds of times: every loop
    instruction is still counted exactly N times, and the handler's code
    once per call that ran inside the region."""
    n = 200_000
    argv = [str(straight), str(n), "--alarm"]
    proc, t = run_traced(built["tracer"], tmp_path, argv, intel_model(), blocks=True)
    assert proc.returncode == 0, proc.stderr
    assert t.regions == 1 and t.blocks_entered > 0
    assert t.blocks_interrupted > 0, "no alarm landed inside a block (the test means nothing)"
    rows = [(a, decode(code, a).mnemonic, cnt) for _s, a, cnt, code in t.insns]
    # the loop body: the 41 consecutive rows ending with the only JNE
    end = next(i for i, (_a, mn, _c) in enumerate(rows) if mn == "JNE")
    body = rows[end - 40 : end + 1]
    assert [mn for _a, mn, _c in body] == ["ADD"] * 39 + ["DEC", "JNE"]
    assert all(cnt == n for _a, _mn, cnt in body), body
    # the handler ran inside the region, each of its instructions once per call
    alarms = json.loads(proc.stdout.splitlines()[-1])["alarms"]
    handler = {cnt for _a, _mn, cnt in rows if cnt not in (1, n)}
    assert len(handler) == 1 and 1 < handler.pop() <= alarms
    total = sum(cnt for _a, _mn, cnt in rows)
    assert t.steps == total


def test_second_thread_disables_blocks(
    built: dict[str, Path],
    straight: Path,
    tmp_path: Path,
) -> None:
    """With a second live thread no block is used (a temporary int3 would be
    met by it), and the counts are what stepping gives."""
    argv = [str(straight), "300", "--thread"]
    proc, t = run_traced(built["tracer"], tmp_path, argv, intel_model(), blocks=True)
    assert proc.returncode == 0, proc.stderr
    assert t.blocks_entered == 0
    assert _loop_counts(t)["ADD"] == 39 * 300


def test_max_steps_counts_instructions(
    built: dict[str, Path],
    straight: Path,
    tmp_path: Path,
) -> None:
    """--max-steps truncates after exactly that many instructions, blocks or
    not, with the same records."""
    argv = [str(straight), "1000"]
    runs = [
        run_traced(
            built["tracer"], tmp_path, argv, intel_model(), blocks=b, extra=("--max-steps", "1234")
        )
        for b in (True, False)
    ]
    (_pb, tb), (_ps, ts) = runs
    assert tb.truncated and ts.truncated and tb.steps == ts.steps == 1234
    assert tb.blocks_entered > 0
    assert records(tb) == records(ts)
