"""Environment variables that override a library's CPU dispatch.

A program run under ``sdematrix exec`` inherits the caller's environment,
and several widely used libraries let a variable decide their code path
instead of CPUID: ``OPENBLAS_CORETYPE=Haswell`` makes OpenBLAS run its
Haswell kernels (AVX2, FMA) on any model, so the model's chip check fails
the run -- rightly, the program did execute AVX on it, but the reason is in
the environment, not in the dispatcher.  :func:`dispatch_overrides` names
the variables of this table that are set, so that ``exec`` can say so beside
its verdicts (it changes no verdict), and ``run`` can keep vaescrypt's own
mask away from the probe (the matrix judges the dispatcher on each model's
CPUID, unmasked).

Each entry is a fact about the library, from its source or its manual:

* OpenBLAS (DYNAMIC_ARCH builds): ``OPENBLAS_CORETYPE`` names the kernel set
  (driver/others/dynamic.c, ``force_coretype``); CPUID is not asked.
* OpenSSL: ``OPENSSL_ia32cap`` replaces the capability vector CPUID filled
  (OPENSSL_ia32cap(3)).
* glibc: the tunables ``glibc.cpu.hwcaps`` (masks features for the ifunc
  selectors) and ``glibc.cpu.hwcap_mask`` (library subdirectories), inside
  ``GLIBC_TUNABLES``; both strings are in Debian 12's ld.so.
* NumPy: ``NPY_DISABLE_CPU_FEATURES`` / ``NPY_ENABLE_CPU_FEATURES`` restrict
  the dispatched targets (strings in ``_multiarray_umath``).
* libjpeg-turbo: ``JSIMD_FORCEAVX2``, ``JSIMD_FORCESSE2``,
  ``JSIMD_FORCENONE`` (... ``JSIMD_FORCE*``: strings in Debian 12's libjpeg).
* oneMKL: ``MKL_ENABLE_INSTRUCTIONS`` caps the ISA, ``MKL_CBWR`` picks a
  code path for reproducibility.
* oneDNN: ``ONEDNN_MAX_CPU_ISA`` (and its old name ``DNNL_MAX_CPU_ISA``).
* PyTorch: ``ATEN_CPU_CAPABILITY`` (default / avx2 / avx512 kernels).
* BLIS: ``BLIS_ARCH_TYPE`` overrides the hardware detection.
* simdjson: ``SIMDJSON_FORCE_IMPLEMENTATION``.
* Go: ``GODEBUG`` items ``cpu.<feature>=off`` (internal/cpu).
* .NET: ``DOTNET_Enable<ISA>`` and the older ``COMPlus_Enable<ISA>``
  (``EnableAVX2=0`` ...) switch hardware intrinsics off.
* vaescrypt: ``VAESCRYPT_CPU_MASK`` removes detected features
  (dispatch/cpuid.c).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["PROBE_MASK", "Override", "dispatch_overrides", "mask_not_passed"]

PROBE_MASK = "VAESCRYPT_CPU_MASK"
NOTE = "the environment overrides CPU dispatch on every model: "  # exec's line, report's line


@dataclass(frozen=True)
class _Rule:
    name: str  # the variable; a trailing '*' matches any name it starts with
    library: str
    effect: str
    within: tuple[str, ...] = ()  # the value must contain one of these (else any value)

    def matches(self, var: str, value: str) -> bool:
        named = var.startswith(self.name[:-1]) if self.name.endswith("*") else var == self.name
        return named and (not self.within or any(w in value for w in self.within))


_RULES = (
    _Rule("OPENBLAS_CORETYPE", "OpenBLAS", "kernel set chosen by name, CPUID not asked"),
    _Rule("OPENSSL_ia32cap", "OpenSSL", "capability vector replaces CPUID's"),
    _Rule(
        "GLIBC_TUNABLES",
        "glibc",
        "glibc.cpu.hwcaps / hwcap_mask change the ifunc and library-directory choice",
        ("glibc.cpu.hwcaps", "glibc.cpu.hwcap_mask"),
    ),
    _Rule("NPY_DISABLE_CPU_FEATURES", "NumPy", "dispatched targets switched off"),
    _Rule("NPY_ENABLE_CPU_FEATURES", "NumPy", "dispatched targets limited to these"),
    _Rule("JSIMD_FORCE*", "libjpeg-turbo", "SIMD extension forced"),
    _Rule("MKL_ENABLE_INSTRUCTIONS", "oneMKL", "instruction set capped"),
    _Rule("MKL_CBWR", "oneMKL", "code path fixed for reproducibility"),
    _Rule("ONEDNN_MAX_CPU_ISA", "oneDNN", "instruction set capped"),
    _Rule("DNNL_MAX_CPU_ISA", "oneDNN", "instruction set capped"),
    _Rule("ATEN_CPU_CAPABILITY", "PyTorch", "kernel capability chosen by name"),
    _Rule("BLIS_ARCH_TYPE", "BLIS", "hardware detection overridden"),
    _Rule("SIMDJSON_FORCE_IMPLEMENTATION", "simdjson", "implementation chosen by name"),
    _Rule("GODEBUG", "Go runtime", "cpu.<feature>=off switches features off", ("cpu.",)),
    _Rule("DOTNET_Enable*", ".NET runtime", "hardware intrinsics switched"),
    _Rule("COMPlus_Enable*", ".NET runtime", "hardware intrinsics switched"),
    _Rule(PROBE_MASK, "vaescrypt", "detected features removed before its dispatch"),
)


@dataclass(frozen=True)
class Override:
    """One variable of `env` that overrides a library's CPU dispatch."""

    variable: str
    value: str
    library: str
    effect: str

    def describe(self) -> str:
        return f"{self.variable}={self.value} ({self.library}: {self.effect})"

    def note(self) -> str:
        """The line exec prints before its verdicts and the report shows."""
        return NOTE + self.describe()

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def dispatch_overrides(env: Mapping[str, str]) -> list[Override]:
    """The variables of `env` that override CPU dispatch, by name."""
    out = []
    for var in sorted(env):
        rule = next((r for r in _RULES if r.matches(var, env[var])), None)
        if rule is not None:
            out.append(Override(var, env[var], rule.library, rule.effect))
    return out


def mask_not_passed(env: Mapping[str, str]) -> str | None:
    """What ``run`` and the pytest plugin say when `env` holds vaescrypt's
    mask, which the probe never inherits (ProbeCommand.environment); None
    when it does not."""
    if PROBE_MASK not in env:
        return None
    return (
        f"{PROBE_MASK}={env[PROBE_MASK]} in the environment is not passed to the probe: "
        "the matrix judges the dispatcher on each model's CPUID (a masked CPU is a model "
        "of its own)"
    )
