"""vaescrypt: AES-128/192/256 in GCM and CFB (CFB128, CFB8, CFB1) with CPUID dispatch.

>>> from vaescrypt import AESGCM, selected
>>> selected("gcm", "encrypt")      # e.g. 'avx512'
"""

from vaescrypt._dispatch import (
    FEATURES,
    CpuInfo,
    available,
    cpu_features,
    cpu_info,
    explain,
    explain_for_cpuid,
    features_from_cpuid,
    path_eligible,
    path_implemented,
    path_supported,
    path_usable,
    select_for_cpuid,
    selected,
)
from vaescrypt._errors import (
    ConcurrentUseError,
    CpuMaskError,
    InvalidTag,
    StreamStateError,
    UnsupportedImplementation,
    VaescryptError,
)
from vaescrypt._names import DIRECTIONS, MODES, PATHS
from vaescrypt._native import ffi as _ffi
from vaescrypt._native import lib as _lib
from vaescrypt.cfb import AESCFB, CfbStream
from vaescrypt.gcm import AESGCM, GcmDecryptor, GcmEncryptor

__version__: str = _ffi.string(_lib.vc_version()).decode()

__all__ = [
    "AESCFB",
    "AESGCM",
    "DIRECTIONS",
    "FEATURES",
    "MODES",
    "PATHS",
    "CfbStream",
    "ConcurrentUseError",
    "CpuInfo",
    "CpuMaskError",
    "GcmDecryptor",
    "GcmEncryptor",
    "InvalidTag",
    "StreamStateError",
    "UnsupportedImplementation",
    "VaescryptError",
    "available",
    "cpu_features",
    "cpu_info",
    "explain",
    "explain_for_cpuid",
    "features_from_cpuid",
    "path_eligible",
    "path_implemented",
    "path_supported",
    "path_usable",
    "select_for_cpuid",
    "selected",
]
