"""CPUID seen = CPUID profiled: did the program see the CPU model it was run as?

The probe reports what its dispatcher detected (``features``, ``vendor``,
``family``, ``model``, ``xcr0``).  The same detection run on the model's CPUID
profile -- by the library's own decoder, ``vc_features_from_cpuid``, through
:mod:`sdematrix.cli.explain` -- says what it should have seen.  Any difference
means the backend did not present the model faithfully: a CPUID the tracer did
not intercept, an XGETBV answered by the host, an emulator whose chip CPUID
differs from the matrix's profile (SDE, QEMU).  The verdict fails such a cell
naming each differing feature, on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import SdeMatrixError
from ..spec.models import CpuModel

__all__ = ["ProfiledCpu", "cpuid_differences", "profiled"]


@dataclass(frozen=True)
class ProfiledCpu:
    """What the dispatcher decodes from a model's CPUID profile and XCR0."""

    features: frozenset[str]
    vendor: str
    family: int
    model: int
    xcr0: int


@lru_cache(maxsize=256)
def profiled(model: CpuModel) -> ProfiledCpu:
    """The dispatcher's view of `model` (raises SdeMatrixError without the library)."""
    from .dispatcher_features import dispatcher_features, feature_names

    ffi, lib, f = dispatcher_features(model)
    return ProfiledCpu(
        features=frozenset(feature_names(ffi, lib, f)),
        vendor=ffi.string(f.vendor).decode("latin-1"),
        family=int(f.family),
        model=int(f.model),
        xcr0=int(f.xcr0),
    )


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def cpuid_differences(probe: dict[str, Any], model: CpuModel) -> list[str]:
    """One reason line per way the probe's detected CPU differs from `model`'s
    profile ([] when it saw exactly the model).  A probe report without the
    fields is itself a difference: the check must not pass by absence."""
    try:
        want = profiled(model)
    except SdeMatrixError as e:
        return [f"cpuid: cannot decode the model's profile: {e}"]
    seen_raw = probe.get("features")
    if not isinstance(seen_raw, list) or not all(isinstance(x, str) for x in seen_raw):
        return ["cpuid: the probe did not report the features its dispatcher detected"]
    seen = frozenset(seen_raw)
    out: list[str] = []
    extra = sorted(seen - want.features)
    missing = sorted(want.features - seen)
    if extra:
        out.append(
            f"cpuid: the program saw {', '.join(extra)} which the {model.name} profile lacks "
            "(the backend did not present the model's CPUID)"
        )
    if missing:
        out.append(
            f"cpuid: the program did not see {', '.join(missing)} which the {model.name} "
            "profile has (the backend did not present the model's CPUID)"
        )
    vendor = probe.get("vendor")
    if isinstance(vendor, str) and vendor != want.vendor:
        out.append(f"cpuid: vendor seen {vendor!r}, profile {want.vendor!r}")
    fam, mod = _as_int(probe.get("family")), _as_int(probe.get("model"))
    if fam is not None and mod is not None and (fam, mod) != (want.family, want.model):
        out.append(
            f"cpuid: family/model seen {fam:#x}/{mod:#x}, profile {want.family:#x}/{want.model:#x}"
        )
    xcr0 = _as_int(probe.get("xcr0"))
    if xcr0 is not None and xcr0 != want.xcr0:
        out.append(f"cpuid: XCR0 seen {xcr0:#x}, profile {want.xcr0:#x}")
    return out
