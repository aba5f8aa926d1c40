"""The library's dispatcher decoding a CPU model: the model's CPUID profile and
XCR0 go through the library's own C decoder (``vc_features_from_cpuid``) via
the cffi module ``vaescrypt._native``, never a re-implementation.  Used by
``sdematrix explain`` (:mod:`sdematrix.cli.explain`) and the CPUID-seen check
(:mod:`sdematrix.evidence.cpuid_seen`)."""

from __future__ import annotations

from typing import Any

from ..errors import SdeMatrixError
from ..spec.models import CpuModel

__all__ = ["dispatcher_features", "feature_names", "native"]


def native() -> tuple[Any, Any]:
    """(ffi, lib) of vaescrypt._native, or SdeMatrixError when it is not built."""
    try:
        from vaescrypt._native import ffi, lib
    except ImportError as e:
        raise SdeMatrixError(
            f"explain needs the library's dispatcher (vaescrypt._native): {e}; "
            "build the package first (pip install -e .)"
        ) from None
    return ffi, lib


def dispatcher_features(model: CpuModel) -> tuple[Any, Any, Any]:
    """The library's own decoding of `model`'s CPUID profile and XCR0:
    (ffi, lib, vc_cpu_features *)."""
    ffi, lib = native()
    leaves = ffi.new("vc_cpuid_leaf[]", len(model.cpuid))
    for i, c in enumerate(model.cpuid):
        leaves[i].leaf = c.leaf
        leaves[i].subleaf = c.subleaf
        leaves[i].eax = c.eax
        leaves[i].ebx = c.ebx
        leaves[i].ecx = c.ecx
        leaves[i].edx = c.edx
    feats = ffi.new("vc_cpu_features *")
    lib.vc_features_from_cpuid(feats, leaves, len(model.cpuid), model.xcr0)
    return ffi, lib, feats


def feature_names(ffi: Any, lib: Any, f: Any) -> tuple[str, ...]:
    """The names of the feature bits set in a vc_cpu_features."""
    return tuple(
        ffi.string(lib.vc_feature_name(i)).decode()
        for i in range(lib.VC_F_COUNT)
        if (f.bits >> i) & 1
    )
