"""The names and defaults a user writes for how a model runs (the matrix file's backends,
``--backend``, ``--cpuid-mode``), spelled once for the spec, the backends and
the command line."""

from __future__ import annotations

__all__ = ["BACKEND_NAMES", "CPUID_MODES", "DEFAULT_TIMEOUT", "TRACER_CPUID_MODES"]

#: Every backend a matrix cell can run on, in the default order of preference
#: (the classes behind the names: :mod:`sdematrix.backends.registry`).
BACKEND_NAMES: tuple[str, ...] = ("sde", "ptrace", "qemu")
#: How the ptrace tracer presents CPUID (backends/ptrace): the modes it
#: implements, and ``auto`` (fault where the host has it, else bp); the
#: choices of create_backend's cpuid_mode and of --cpuid-mode.
TRACER_CPUID_MODES: tuple[str, ...] = ("fault", "bp")
CPUID_MODES: tuple[str, ...] = ("auto", *TRACER_CPUID_MODES)
#: One run's timeout in seconds: one cell (run, docker run, pytest) or one
#: model's run of the program (exec).
DEFAULT_TIMEOUT = 300.0
