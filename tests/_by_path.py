"""Load a repository Python file by its path, not as a package module.

The build helpers (src/vaescrypt/_buildinfo.py, _project_urls.py, the fuzz
build script) are standard-library-only files that setup.py loads this way;
importing them through the vaescrypt package would load its compiled
extension, which some tests must not depend on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def buildinfo() -> ModuleType:
    """src/vaescrypt/_buildinfo.py (compiler, flags, sources of the library)."""
    return load_by_path("_vc_buildinfo_for_tests", ROOT / "src" / "vaescrypt" / "_buildinfo.py")
