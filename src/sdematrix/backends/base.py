"""The one protocol every backend implements, and what a run returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ..evidence.mix import Mix
from ..spec.dispatch_env import PROBE_MASK
from ..spec.models import Cell, CpuModel

RunStatus = Literal["ok", "error", "timeout", "skip"]


@dataclass(frozen=True)
class ProbeCommand:
    """The probe invocation for one cell (argv[0] is the probe executable)."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The probe's environment: `base` (the caller's) without
        VAESCRYPT_CPU_MASK, then the cell's own variables.  An inherited mask
        would take features from the dispatcher the matrix judges, and every
        cell of a model with them would fail as a wrong path; a masked CPU is
        a model (a profile) of its own instead."""
        env = {k: v for k, v in base.items() if k != PROBE_MASK}
        env.update(self.env)
        return env


@dataclass(frozen=True)
class Violation:
    """One chip-check failure: an instruction the model does not have."""

    reason: str  # e.g. "AVX512F not in model" / "SIGILL" / SDE's message
    address: int | None = None
    function: str | None = None
    image: str | None = None
    mnemonic: str | None = None
    bytes_hex: str | None = None

    def describe(self) -> str:
        where = f"{self.function or '?'}"
        if self.image:
            where += f" in {self.image.rsplit('/', 1)[-1]}"
        addr = f" at {self.address:#x}" if self.address is not None else ""
        what = f"{self.mnemonic} " if self.mnemonic else ""
        byt = f" [{self.bytes_hex}]" if self.bytes_hex else ""
        return f"{what}{where}{addr}{byt}: {self.reason}"


@dataclass
class RunResult:
    backend: str
    status: RunStatus
    exit_code: int | None = None
    probe: dict[str, Any] | None = None  # the probe's JSON report
    mix: Mix | None = None
    violations: list[Violation] = field(default_factory=list)
    reason: str | None = None  # skip / error reason (one line)
    # an error because no backend can run a cell the user named (the reason
    # says why): judged a cannot-run-here reason, not a backend error
    cannot_run: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    backend_version: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> file path


@runtime_checkable
class Backend(Protocol):
    name: str

    def unavailable_reason(self) -> str | None:
        """None when this backend can run on this machine, else why not."""

    def version(self) -> str | None:
        """Emulator/tracer version string, for reports."""

    def cannot_run(self, model: CpuModel) -> str | None:
        """None when `model` can be run here by this backend, else the skip reason."""

    def run(
        self,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> RunResult:
        """Run the probe for one cell; never raises for emulator/probe failures
        (those are status "error"/"timeout" with a reason).  `workdir` is an
        absolute path (the runner resolves it): backends hand it to tracers and
        emulators running in other working directories."""


@dataclass
class ExecResult:
    """One model's run of a program under ``sdematrix exec`` (the ptrace or SDE
    backend), before expectations are judged: what the verdict reads."""

    model: str
    exit_code: int | None = None
    error: str | None = None
    violations: list[Violation] = field(default_factory=list)
    mix: Mix | None = None  # the regions' mix (sdematrix.pipeline.exec_run's module doc)
    region: str = "whole"
    entered: dict[str, int] = field(default_factory=dict)  # region -> times entered
    meta: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    stdout: bytes = b""
    stderr: bytes = b""
