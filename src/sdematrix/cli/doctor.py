"""``sdematrix doctor``: which backends work on this host, why not, and how the
ptrace tracer would present CPUID here.

The answers come from the backends themselves (their ``unavailable_reason``,
``version`` and ``cannot_run``), so the doctor and ``sdematrix run`` never
disagree.  For ptrace both CPUID modes are tried: ``fault`` (kernel CPUID
faulting; Intel hosts, where ld.so itself sees the model) and ``bp``
(breakpoints on every CPUID/XGETBV site; everywhere ptrace works).

Per model run natively (ptrace), the features its CPUID advertises that this
host's CPUID lacks (:mod:`sdematrix.backends.host_isa`): the model runs, but a program
that uses one dies of SIGILL, which is reported as an error of the cell.

A reason is either a *host limit* (not x86-64 Linux, ptrace forbidden by the
kernel or a seccomp policy, no CPUID faulting, a CPU lacking the model's ISA):
something this host really cannot do; or anything else, which means the tool
is broken here.  The backends say which (their reasons are
:class:`~sdematrix.verdict.reasons.Reason` of kind host-limit or backend-error) and
the doctor reads that kind.  What has only text -- a test's skip message,
quoting a backend's reason after its own words -- is classified by
:func:`is_host_limit`: the test suite uses it to decide whether a skip is
honest.
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends.host_isa import host_lacks
from ..backends.registry import BackendSelector, create_backend
from ..spec.choices import BACKEND_NAMES, TRACER_CPUID_MODES
from ..spec.models import Matrix
from ..verdict.reasons import Kind, Reason

__all__ = ["BackendReport", "Diagnosis", "diagnose", "is_host_limit", "render"]

# What a host may honestly lack.  Anything else that stops a backend is a
# defect of the tool (a tracer that cannot trace, a corrupt output file).
_HOST_LIMITS = re.compile(
    r"needs Linux x86-64"
    r"|Operation not permitted|EPERM|ptrace_scope|seccomp"
    r"|CPUID faulting not available|no CPUID faulting|ENODEV"
    r"|host CPU lacks|host CPU has no|host has no"
    r"|SDE not installed|set SDE_PATH|install Debian's qemu-user"
    r"|SDE has no chip|no QEMU CPU model|has no CPU model|QEMU .*(lacks|has no|cannot)",
    re.IGNORECASE,
)

# How the ptrace backend itself says its tracer does not work (test skips
# quote these after their own prefix).
_BROKEN = ("tracer broken", "tracer binary not found", "cannot run the tracer")


def is_host_limit(reason: str) -> bool:
    """Whether `reason` (a backend's or a test's) names something this host
    lacks, as opposed to the tool being broken here.  What the ptrace backend
    itself calls broken stays broken, whatever error text it quotes."""
    return not any(b in reason for b in _BROKEN) and bool(_HOST_LIMITS.search(reason))


@dataclass
class BackendReport:
    name: str
    usable: bool
    reason: str | None
    version: str | None
    host_limit: bool  # unusable for a reason the host really has
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diagnosis:
    host: str
    backends: list[BackendReport]
    cpuid_mode: str | None  # what ptrace's auto mode uses here: fault | bp | None
    cpuid_modes: dict[str, str | None]  # mode -> None (works) or why not
    models: dict[str, dict[str, Any]]  # model -> {backend, reason}

    @property
    def runnable(self) -> int:
        return sum(1 for m in self.models.values() if m["backend"])

    def backend(self, name: str) -> BackendReport:
        return next(b for b in self.backends if b.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "backends": [asdict(b) for b in self.backends],
            "cpuid_mode": self.cpuid_mode,
            "cpuid_modes": self.cpuid_modes,
            "models": self.models,
            "runnable_models": self.runnable,
        }


def _host() -> str:
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}" + (f", {name}" if name else "")


def diagnose(matrix: Matrix, *, sde_path: str | None = None) -> Diagnosis:
    backends: list[BackendReport] = []
    for name in BACKEND_NAMES:
        b = create_backend(name, sde_path=sde_path)
        why = b.unavailable_reason()
        backends.append(
            BackendReport(
                name=name,
                usable=why is None,
                reason=why,
                version=b.version() if why is None else None,
                host_limit=isinstance(why, Reason) and why.kind is Kind.HOST_LIMIT,
            )
        )
    modes: dict[str, str | None] = {}
    for mode in TRACER_CPUID_MODES:
        modes[mode] = create_backend("ptrace", cpuid_mode=mode).unavailable_reason()
    in_use = "fault" if modes["fault"] is None else ("bp" if modes["bp"] is None else None)
    pt = next(b for b in backends if b.name == "ptrace")
    pt.detail = {"cpuid_modes": modes, "cpuid_mode_auto": in_use}
    selector = BackendSelector(matrix, "auto", sde_path=sde_path)
    models: dict[str, dict[str, Any]] = {}
    for name, model in matrix.models.items():
        ch = selector.choose(model)
        backend = ch.backend.name if ch.backend else None
        models[name] = {
            "backend": backend,
            "reason": ch.skip_reason,
            # what the model's CPUID advertises and this host cannot execute:
            # only the native backend (ptrace) runs the program on the host
            "host_lacks": host_lacks(model) if backend == "ptrace" else [],
        }
    return Diagnosis(_host(), backends, in_use, modes, models)


def render(d: Diagnosis) -> str:
    lines = [f"host: {d.host}"]
    for b in d.backends:
        if b.usable:
            lines.append(f"backend {b.name:<7} usable ({b.version or 'version unknown'})")
        else:
            kind = "not on this host" if b.host_limit else "BROKEN"
            lines.append(f"backend {b.name:<7} {kind}: {b.reason}")
    for mode, why in d.cpuid_modes.items():
        lines.append(f"ptrace cpuid mode {mode:<5} " + ("works" if why is None else f"no: {why}"))
    lines.append(f"ptrace --cpuid-mode auto uses: {d.cpuid_mode or 'nothing (ptrace unusable)'}")
    by_backend: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for name, m in d.models.items():
        if m["backend"]:
            by_backend.setdefault(m["backend"], []).append(name)
        else:
            missing.setdefault(str(m["reason"]), []).append(name)
    total = len(d.models)
    ran = ", ".join(f"{k} {len(v)}" for k, v in by_backend.items()) or "none"
    lines.append(f"models runnable here: {d.runnable} of {total} (auto: {ran})")
    for why, names in missing.items():
        lines.append(f"  cannot run {', '.join(names)}: {why}")
    gaps = {n: m["host_lacks"] for n, m in d.models.items() if m.get("host_lacks")}
    if gaps:
        lines.append(
            f"models whose CPUID advertises what this host cannot execute: {len(gaps)} of "
            f"{total} (a program that runs one dies of SIGILL: the model's cell is an error)"
        )
        for name, lacks in gaps.items():
            lines.append(f"  {name}: host cannot execute {', '.join(lacks)}")
    return "\n".join(lines) + "\n"
