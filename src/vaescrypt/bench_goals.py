"""Issue 23's GCM speed goals and the verdict on `vaescrypt.bench` runs.

The goals are C/EVP ratios (vaescrypt's C loop over OpenSSL EVP in the same
run, AES-256, 12-byte IV, 16-byte AAD) that the best public VAES GCM code
(Linux's aes-gcm-vaes-avx512.S, aes-gcm-vaes-avx2.S and the 256-bit variant
of aes-gcm-avx10-x86_64.S, assembled in user space) reached itself, measured
on an AMD EPYC Zen 4 KVM guest (family 0x19, model 0x11) against OpenSSL
3.0.19.  A ratio to a reference in the same run cancels most of the host's
clock and state, but not the microarchitecture: the goals belong to Zen 4,
and on any other CPU the table below is printed as information, not judged.

The issue is done when every wide path is at or above its goal at every
size, both directions, in two runs in a row:

    python -m vaescrypt.bench --modes gcm --key-bits 256 \\
        --paths avx512,avx10_256,vaes_avx2 \\
        --sizes 16,64,256,512,1420,4096,16384,65536 --json > run1.json
    (the same again > run2.json)
    python -m vaescrypt.bench_goals run1.json run2.json

Exit status of that command: 0 every goal met in every run, on Zen 4;
1 some cell below its goal (or not measured); 3 the runs were not taken on
Zen 4, so nothing is judged; 2 bad input (one line on stderr).  A run
whose CPUID was presented (the process traced, or the kernel reporting
another CPU: `sdematrix exec --cpu zen4 -- python -m vaescrypt.bench`
reads Zen 4 on any host) is not taken on Zen 4 either.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vaescrypt._cli import BenchError, run_cli

SIZES: tuple[int, ...] = (16, 64, 256, 512, 1420, 4096, 16384, 65536)
PATHS: tuple[str, ...] = ("avx512", "avx10_256", "vaes_avx2")
DIRECTIONS: tuple[str, ...] = ("encrypt", "decrypt")

# (direction, path) -> C/EVP to reach at each of SIZES (issue 23's table:
# the best public code's own C/EVP on Zen 4).
GOALS: dict[tuple[str, str], tuple[float, ...]] = {
    ("encrypt", "avx512"): (3.88, 4.11, 4.34, 3.93, 2.81, 2.73, 2.55, 2.48),
    ("encrypt", "avx10_256"): (4.31, 4.43, 3.98, 3.61, 2.69, 2.46, 2.20, 2.19),
    ("encrypt", "vaes_avx2"): (4.34, 4.57, 3.97, 3.44, 2.56, 2.22, 2.01, 1.96),
    ("decrypt", "avx512"): (6.80, 6.49, 5.24, 4.44, 3.20, 2.89, 2.53, 2.50),
    ("decrypt", "avx10_256"): (6.97, 6.08, 4.73, 4.04, 3.09, 2.55, 2.31, 2.29),
    ("decrypt", "vaes_avx2"): (6.68, 6.29, 4.64, 3.84, 2.87, 2.42, 2.16, 2.14),
}
GOAL_MACHINE = "AMD Zen 4"
GOAL_OPENSSL = "OpenSSL 3.0.19"

# AMD family 0x19 models that are Zen 4 (the rest of the family is Zen 3):
# the ranges Linux's arch/x86/kernel/cpu/amd.c uses for X86_FEATURE_ZEN4.
_ZEN4_MODELS: tuple[range, ...] = (range(0x10, 0x20), range(0x60, 0xB0))


class GoalsError(BenchError):
    """Bad input to the verdict: one line for the user, exit 2 (run_cli)."""


def _cpu_name(vendor: str | None, family: int | None, model: int | None) -> str:
    """ "GenuineIntel family 0x6, model 0xa7" ("?" for what is not known)."""
    fam = f"{family:#x}" if family is not None else "?"
    mod = f"{model:#x}" if model is not None else "?"
    return f"{vendor or 'unknown vendor'} family {fam}, model {mod}"


@dataclass(frozen=True)
class Machine:
    """A CPU's identity as the dispatcher reads it from CPUID (display
    family and model: the extended fields folded in), and what says whether
    that reading is the CPU the process ran on: the kernel's reading
    (/proc/cpuinfo, taken from CPUID at boot) and the process's tracer.  A
    process whose CPUID is presented to it (`sdematrix exec --cpu zen4`,
    Intel SDE, a debugger) reads a model it does not run on, and a run
    taken there says nothing about that model's speed."""

    vendor: str
    family: int | None
    model: int | None
    kernel_vendor: str | None = None
    kernel_family: int | None = None
    kernel_model: int | None = None
    tracer_pid: int | None = None

    @property
    def is_zen4(self) -> bool:
        return (
            self.vendor == "AuthenticAMD"
            and self.family == 0x19
            and self.model is not None
            and any(self.model in r for r in _ZEN4_MODELS)
        )

    @property
    def not_real(self) -> str | None:
        """Why the CPUID reading may not be the CPU the run was taken on
        (None: the kernel read the same CPU and no tracer was attached)."""
        if self.kernel_vendor is None or self.tracer_pid is None:
            return "the kernel's view of the CPU was not recorded"
        if self.tracer_pid != 0:
            return (
                f"the process was traced (TracerPid {self.tracer_pid}): its CPUID may be presented"
            )
        kernel = (self.kernel_vendor, self.kernel_family, self.kernel_model)
        if kernel != (self.vendor, self.family, self.model):
            return f"CPUID was presented: the kernel reports {_cpu_name(*kernel)}"
        return None

    @property
    def judged(self) -> bool:
        """A run on this machine is judged against the goals."""
        return self.is_zen4 and self.not_real is None

    def describe(self) -> str:
        what = "Zen 4" if self.is_zen4 else "not Zen 4"
        text = f"{_cpu_name(self.vendor, self.family, self.model)} ({what})"
        if self.is_zen4 and self.not_real is not None:
            text += f"; not judged: {self.not_real}"
        return text

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: Mapping[str, Any] | None) -> Machine | None:
        if not isinstance(d, Mapping):
            return None

        def num(key: str) -> int | None:
            v = d.get(key)
            return v if type(v) is int else None

        kv = d.get("kernel_vendor")
        return Machine(
            vendor=str(d.get("vendor") or ""),
            family=num("family"),
            model=num("model"),
            kernel_vendor=kv if isinstance(kv, str) else None,
            kernel_family=num("kernel_family"),
            kernel_model=num("kernel_model"),
            tracer_pid=num("tracer_pid"),
        )


def _kernel_cpu(cpuinfo: str) -> tuple[str | None, int | None, int | None]:
    """vendor_id, cpu family and model of the first processor in
    /proc/cpuinfo's text (None for a field it lacks)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block ends
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def num(key: str) -> int | None:
        v = fields.get(key, "")
        return int(v) if v.isdigit() else None

    return fields.get("vendor_id"), num("cpu family"), num("model")


def _tracer_pid(status: str) -> int | None:
    """TracerPid from /proc/self/status's text."""
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "TracerPid" and value.strip().isdigit():
            return int(value.strip())
    return None


def this_machine() -> Machine:
    """The CPU this process runs on (vaescrypt.cpu_info(): the dispatcher's
    own CPUID reading), with the kernel's reading and the tracer beside it."""
    from vaescrypt._dispatch import cpu_info

    info = cpu_info()
    try:
        kv, kf, km = _kernel_cpu(Path("/proc/cpuinfo").read_text())
    except OSError:
        kv, kf, km = None, None, None
    try:
        tracer = _tracer_pid(Path("/proc/self/status").read_text())
    except OSError:
        tracer = None
    return Machine(info.vendor, info.family, info.model, kv, kf, km, tracer)


@dataclass
class Cell:
    direction: str
    path: str
    size: int
    goal: float
    values: list[float | None] = field(default_factory=list)  # C/EVP per run

    @property
    def runs_below(self) -> int:
        """Runs in which the cell missed its goal (not measured counts)."""
        return sum(1 for v in self.values if v is None or v < self.goal)

    @property
    def worst(self) -> float | None:
        got = [v for v in self.values if v is not None]
        return min(got) if len(got) == len(self.values) and got else None


@dataclass
class Verdict:
    cells: list[Cell]
    runs: int
    machines: list[Machine | None]
    matched: bool  # some row was one of the goal cells (quiet or not)

    @property
    def judged(self) -> bool:
        """Every run was taken on the goals' machine class (really: see
        Machine.not_real)."""
        return bool(self.machines) and all(m is not None and m.judged for m in self.machines)

    @property
    def below(self) -> list[Cell]:
        return [c for c in self.cells if c.runs_below]

    @property
    def met(self) -> bool:
        return not self.below

    def exit_code(self) -> int:
        if not self.judged:
            return 3
        return 0 if self.met else 1

    def as_json(self) -> dict[str, Any]:
        """The verdict in bench's --json ("goals")."""
        return {
            "judged": self.judged,
            "met": self.met,
            "below": [
                {
                    "direction": c.direction,
                    "path": c.path,
                    "size": c.size,
                    "goal": c.goal,
                    "c_vs_evp": c.worst,
                }
                for c in self.below
            ],
        }


def judge(
    runs: Sequence[Iterable[Mapping[str, Any]]], machines: Sequence[Machine | None]
) -> Verdict:
    """Each run's result rows (bench's --json "results", or Row.as_json())
    against the goals.  A row counts if it is GCM, AES-256, a wide path and
    one of SIZES, and was measured in the quiet state (bench marks a point
    none of whose rounds was quiet with "quiet": false: its ratio is from
    the host's slow state and does not count); a cell is met only if it is
    at or above its goal in every run."""
    cells = {
        (d, p, s): Cell(d, p, s, goal)
        for (d, p), goals in GOALS.items()
        for s, goal in zip(SIZES, goals, strict=True)
    }
    matched = False
    for rows in runs:
        got: dict[tuple[str, str, int], float | None] = {}
        for r in rows:
            if r.get("mode") != "gcm" or r.get("key_bits") != 256:
                continue
            d, p, size = r.get("direction"), r.get("path"), r.get("size")
            if not (isinstance(d, str) and isinstance(p, str) and type(size) is int):
                continue  # not a row of bench's making
            key = (d, p, size)
            if key not in cells:
                continue
            matched = True
            v = r.get("c_vs_evp")
            quiet = r.get("quiet", True) is not False
            got[key] = float(v) if quiet and isinstance(v, (int, float)) else None
        for key, cell in cells.items():
            cell.values.append(got.get(key))
    return Verdict(
        cells=list(cells.values()), runs=len(runs), machines=list(machines), matched=matched
    )


def render(v: Verdict) -> list[str]:
    """The goals table: the worst C/EVP over the runs per cell, "<goal"
    after a cell below its goal (with k/n when below in only some runs)."""
    head = f"C/EVP goals of issue 23 (the best public VAES GCM code on {GOAL_MACHINE}, {GOAL_OPENSSL} EVP)"
    lines = [head + f", {v.runs} run(s):"]
    for i, m in enumerate(v.machines, 1):
        lines.append(f"  run {i}: {m.describe() if m else 'machine not recorded'}")
    width = 13
    lines.append("  " + "path       dir".ljust(15) + "".join(str(s).rjust(width) for s in SIZES))
    for d in DIRECTIONS:
        for p in PATHS:
            row = [c for c in v.cells if c.direction == d and c.path == p]
            txt = []
            for c in row:
                shown = min((x for x in c.values if x is not None), default=None)
                t = "-" if shown is None else f"{shown:.2f}"
                if shown is not None and c.runs_below and t == f"{c.goal:.2f}":
                    t = f"{shown:.3f}"  # below, though it rounds to the goal
                if c.runs_below:
                    t += f"<{c.goal:.2f}"
                    if 0 < c.runs_below < v.runs:
                        t += f"({c.runs_below}/{v.runs})"
                txt.append(t.rjust(width))
            lines.append("  " + f"{p:<10} {d[:3]}".ljust(15) + "".join(txt))
    n = len(v.cells)
    summary = f"  {n - len(v.below)} of {n} cells at or above their goal in every run"
    if not v.judged:
        lines.append(
            summary + f"; not a verdict: the goals were measured on {GOAL_MACHINE} "
            "and not every run was taken there."
        )
    elif v.met:
        lines.append(summary + ": MET.")
    else:
        lines.append(summary + f": NOT MET ({len(v.below)} below).")
    return lines


def _load_run(path: str) -> tuple[list[Mapping[str, Any]], Machine | None]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise GoalsError(f"{path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GoalsError(f"{path}: not JSON from 'vaescrypt.bench --json' ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise GoalsError(f"{path}: not the output of 'vaescrypt.bench --json' (no results list)")
    rows = [r for r in data["results"] if isinstance(r, dict)]
    return rows, Machine.from_json(data.get("machine"))


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("vaescrypt.bench_goals", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vaescrypt.bench_goals",
        description="Judge vaescrypt.bench --json runs against issue 23's C/EVP goals.",
    )
    ap.add_argument("runs", nargs="+", help="files written by 'python -m vaescrypt.bench --json'")
    opts = ap.parse_args(argv)
    loaded = [_load_run(p) for p in opts.runs]
    verdict = judge([rows for rows, _ in loaded], [m for _, m in loaded])
    print("\n".join(render(verdict)))
    return verdict.exit_code()


if __name__ == "__main__":
    sys.exit(main())
