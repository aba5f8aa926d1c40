"""Backend names -> classes, and the per-model choice of backend.

``--backend NAME`` picks one backend for every cell; an explicitly named backend
that cannot run on this machine is a usage error
(:class:`~sdematrix.errors.BackendUnavailableError`, exit 2).  ``auto`` picks,
per CPU model, the first backend of ``matrix.backend_preference`` whose
``unavailable_reason()`` is None and whose ``cannot_run(model)`` is None; a model
that no backend can run becomes skipped cells carrying every backend's reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import BackendUnavailableError
from ..spec.choices import BACKEND_NAMES
from ..spec.models import CpuModel, Matrix
from ..verdict.reasons import Kind, Reason
from .base import Backend

__all__ = [
    "BACKEND_NAMES",
    "BackendChoice",
    "BackendSelector",
    "create_backend",
]

# name -> (module, class); modules are imported on first use so that a backend
# with heavy or missing dependencies does not break the others.
_CLASS_OF = {"sde": "SdeBackend", "ptrace": "PtraceBackend", "qemu": "QemuBackend"}
_CLASSES: dict[str, tuple[str, str]] = {
    name: (f"sdematrix.backends.{name}.backend", _CLASS_OF[name]) for name in BACKEND_NAMES
}


class _Missing:
    """Stands in for a backend whose module cannot be imported."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self._why = why

    def unavailable_reason(self) -> str | None:
        return Reason(f"backend module not importable: {self._why}", Kind.BACKEND_ERROR)

    def version(self) -> str | None:
        return None

    def cannot_run(self, model: CpuModel) -> str | None:
        return self.unavailable_reason()

    def run(self, *args: object, **kwargs: object) -> object:  # pragma: no cover - never chosen
        raise RuntimeError(self._why)


def create_backend(name: str, *, sde_path: str | None = None, cpuid_mode: str = "auto") -> Backend:
    """Instantiate one backend by name (ValueError for an unknown name).
    `cpuid_mode` (auto|fault|bp) is how the ptrace tracer makes the program
    see the model's CPUID; the other backends have no such choice."""
    if name not in _CLASSES:
        raise ValueError(f"unknown backend {name!r} (choose from auto, {', '.join(BACKEND_NAMES)})")
    mod_name, cls_name = _CLASSES[name]
    try:
        cls = getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as e:
        return _Missing(name, f"{mod_name}.{cls_name}: {e}")  # type: ignore[return-value]
    if name == "sde":
        return cls(sde_path=sde_path)  # type: ignore[no-any-return]
    if name == "ptrace":
        return cls(cpuid_mode=cpuid_mode)  # type: ignore[no-any-return]
    return cls()  # type: ignore[no-any-return]


@dataclass
class BackendChoice:
    backend: Backend | None  # None -> skip
    skip_reason: str | None = None


class BackendSelector:
    """Decides which backend runs each model's cells."""

    def __init__(
        self,
        matrix: Matrix,
        requested: str = "auto",
        *,
        sde_path: str | None = None,
        cpuid_mode: str = "auto",
        factory: Callable[[str], Backend] | None = None,
    ) -> None:
        self.requested = requested
        self.cpuid_mode = cpuid_mode
        make = factory or (lambda n: create_backend(n, sde_path=sde_path, cpuid_mode=cpuid_mode))
        if requested == "auto":
            names = [n for n in matrix.backend_preference if n in _CLASSES] or list(BACKEND_NAMES)
        elif requested in _CLASSES:
            names = [requested]
        else:
            raise BackendUnavailableError(
                f"unknown backend {requested!r} (choose from auto, {', '.join(BACKEND_NAMES)})"
            )
        self.backends: dict[str, Backend] = {n: make(n) for n in names}
        self.unavailable: dict[str, str] = {}
        for n, b in self.backends.items():
            why = b.unavailable_reason()
            if why is not None:
                self.unavailable[n] = why
        if requested != "auto" and requested in self.unavailable:
            raise BackendUnavailableError(
                f"backend {requested!r} is not available: {self.unavailable[requested]}"
            )
        self._cache: dict[str, BackendChoice] = {}

    def available(self) -> list[Backend]:
        return [b for n, b in self.backends.items() if n not in self.unavailable]

    def choose(self, model: CpuModel) -> BackendChoice:
        hit = self._cache.get(model.name)
        if hit is not None:
            return hit
        reasons: list[str] = []
        choice: BackendChoice | None = None
        for n, b in self.backends.items():
            if n in self.unavailable:
                reasons.append(f"{n}: {self.unavailable[n]}")
                continue
            why = b.cannot_run(model)
            if why is None:
                choice = BackendChoice(b)
                break
            reasons.append(f"{n}: {why}")
        if choice is None:
            if self.requested == "auto":
                msg = f"no backend can run {model.name}: " + "; ".join(reasons)
            else:
                msg = reasons[0].split(": ", 1)[1] if reasons else "cannot run"
            choice = BackendChoice(None, msg)
        self._cache[model.name] = choice
        return choice

    def versions(self) -> dict[str, str | None]:
        return {
            n: (None if n in self.unavailable else b.version()) for n, b in self.backends.items()
        }
