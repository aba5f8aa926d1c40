"""The options `sdematrix run`, `sdematrix exec`, `sdematrix docker run` and
the pytest plugin share (and `sdematrix doctor`, its --matrix and --sde-path):
one spelling, one default and one help text each.

Each option is written once here (:data:`OPTIONS`) and added to a command by
:func:`add_to_argparse` (the CLI) or :func:`add_to_pytest` (the plugin, whose
flags carry an ``--sde-`` prefix: ``--cpu`` is ``--sde-cpu``, ``--sde-path``
stays ``--sde-path``).  Which command takes which option is the ``where`` of
its spec; a command that takes an option takes it with the same meaning.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..spec.choices import BACKEND_NAMES, CPUID_MODES, DEFAULT_TIMEOUT

__all__ = [
    "BACKEND_CHOICES",
    "EXEC_BACKENDS",
    "OPTIONS",
    "add_to_argparse",
    "add_to_pytest",
    "pytest_flag",
]

#: What ``--backend`` takes: one of them for every model, or ``auto`` per model.
BACKEND_CHOICES: tuple[str, ...] = ("auto", *BACKEND_NAMES)
#: What `exec` runs programs on: no qemu until exec has a qemu backend
#: (whole-process chip check and region mixes exist for ptrace and SDE only).
EXEC_BACKENDS: tuple[str, ...] = tuple(b for b in BACKEND_CHOICES if b != "qemu")

ALL = frozenset({"run", "exec", "docker", "pytest"})


def number_arg(
    convert: Callable[[str], Any], ok: Callable[[Any], bool], rule: str, kind: str
) -> Callable[[str], Any]:
    """An argparse `type=` that converts, then checks a rule; each failure is
    one line naming the text."""

    def parse(text: str) -> Any:
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"{rule}: {text!r}")
        return v

    return parse


positive_int = number_arg(int, lambda v: v >= 1, "must be at least 1", "an integer")
nonnegative_int = number_arg(int, lambda v: v >= 0, "must be 0 or more", "an integer")
positive_float = number_arg(float, lambda v: v > 0, "must be positive", "a number")


@dataclass(frozen=True)
class Option:
    flag: str  # the CLI spelling, e.g. "--cpuid-mode"
    kwargs: dict[str, Any]
    where: frozenset[str] = ALL
    # per-command overrides of choices (exec's backends): written once above
    choices_for: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "--matrix",
        {
            "metavar": "FILE",
            "default": None,
            "help": "matrix file (default: ./sde_matrix.yaml, else the packaged copy)",
        },
        where=ALL | {"doctor"},
    ),
    Option(
        "--models",
        {
            "metavar": "FILE",
            "default": None,
            "help": "a models-only YAML file (`models:` as in sde_matrix.yaml): "
            "custom CPU models for exec, without a whole matrix file",
        },
        where=frozenset({"exec"}),
    ),
    Option(
        "--cpu",
        {
            "metavar": "CPUS",
            "default": None,
            "help": "comma-separated CPU models (or 'all'; default for run: all)",
        },
    ),
    Option(
        "--backend",
        {
            "default": "auto",
            "choices": BACKEND_CHOICES,
            "help": "backend for every model (default: auto, per model)",
        },
        choices_for={"exec": EXEC_BACKENDS},
    ),
    Option(
        "--cpuid-mode",
        {
            "default": "auto",
            "choices": CPUID_MODES,
            "help": "how the ptrace tracer presents CPUID: fault (kernel CPUID "
            "faulting), bp (breakpoints on every CPUID/XGETBV site), auto "
            "(fault where the host has it)",
        },
    ),
    Option(
        "--allow-skip",
        {
            "action": "store_true",
            "default": False,
            "help": "with --cpu/--backend: skip models this host cannot run "
            "instead of failing them",
        },
    ),
    Option(
        "--sde-path",
        {
            "metavar": "PATH",
            "default": None,
            "help": "sde64 executable or SDE kit directory (else $SDE_PATH, PATH; "
            "docker run: on this host, mounted into the containers, else the "
            "image's)",
        },
        where=ALL | {"doctor"},
    ),
    Option(
        "--timeout",
        {
            "type": positive_float,
            "default": DEFAULT_TIMEOUT,
            "metavar": "S",
            "help": "seconds one cell (exec: one model's run) may take "
            f"(default: {DEFAULT_TIMEOUT:g})",
        },
    ),
    Option(
        "--jobs",
        {
            "type": positive_int,
            "default": os.cpu_count() or 1,
            "metavar": "N",
            "help": "models' cells (docker run: containers; exec: models) run at "
            "once (default: CPU count)",
        },
        where=frozenset({"run", "exec", "docker"}),
    ),
    Option(
        "--junit",
        {"metavar": "FILE", "default": None, "help": "also write JUnit XML here"},
        where=frozenset({"run", "exec", "docker"}),
    ),
    Option(
        "--report",
        {
            "metavar": "DIR",
            "default": None,
            "help": "also write report.html and summary.md into DIR",
        },
        where=frozenset({"run", "exec", "docker"}),
    ),
    Option(
        "--keep-work",
        {
            "action": "store_true",
            "default": False,
            "help": "keep the backend's raw output (OUT/work/) for passing cells "
            "too (default: only for cells that failed or errored)",
        },
        where=frozenset({"run"}),
    ),
)


def _spec(command: str, opt: Option) -> dict[str, Any]:
    kw = dict(opt.kwargs)
    if command in opt.choices_for:
        kw["choices"] = opt.choices_for[command]
    return kw


def add_to_argparse(
    parser: argparse.ArgumentParser, command: str, skip: Iterable[str] = ()
) -> None:
    """Add every shared option `command` takes (minus `skip` flags)."""
    skipped = set(skip)
    for opt in OPTIONS:
        if command in opt.where and opt.flag not in skipped:
            parser.add_argument(opt.flag, **_spec(command, opt))


def pytest_flag(opt: Option) -> str:
    """The plugin's spelling: ``--sde-`` + the CLI name (``--sde-path`` as is)."""
    name = opt.flag[2:]
    return f"--{name}" if name.startswith("sde-") else f"--sde-{name}"


def add_to_pytest(group: Any) -> None:
    """Add the plugin's options to a pytest option group."""
    for opt in OPTIONS:
        if "pytest" in opt.where:
            group.addoption(pytest_flag(opt), **_spec("pytest", opt))
