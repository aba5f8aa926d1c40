"""Build vaescrypt._native with VAESCRYPT_SANITIZE=1 (ASan + UBSan) away from the tree.

Everything is written under a scratch directory (the work tree, its build/
and its in-place extension are never touched): the library objects compiled
with the project's flags (src/vaescrypt/_buildinfo.py, which adds
-fsanitize=address,undefined when VAESCRYPT_SANITIZE=1), the cffi extension
linked from them, and a copy of the Python package next to it; the caller puts
<dest>/pkg first on PYTHONPATH.  Running it needs the gcc runtime of ASan
preloaded (the interpreter itself is not instrumented): see asan_env().
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG_SRC = REPO / "src" / "vaescrypt"


class SanitizerSetupError(RuntimeError):
    """The sanitized extension could not be built (message says why)."""


def libasan_path() -> Path | None:
    """gcc's libasan.so, or None when the compiler does not ship it."""
    cc = shutil.which(os.environ.get("CC", "gcc").split()[0]) or shutil.which("gcc")
    if not cc:
        return None
    out = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    ).stdout.strip()
    p = Path(out)
    return p.resolve() if p.is_absolute() and p.exists() else None


def build(dest: Path, timeout: float = 300) -> Path:
    """Build vaescrypt with VAESCRYPT_SANITIZE=1 under dest; return the directory
    to put first on PYTHONPATH (it holds a complete `vaescrypt` package)."""
    env = {**os.environ, "VAESCRYPT_SANITIZE": "1"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(dest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise SanitizerSetupError(f"sanitized build failed (exit {proc.returncode}):\n{tail}")
    return dest / "pkg"


def _build_here(dest: Path) -> None:
    """The child side of build(): setup.py's own build objects (cffi builder,
    CPython Extensions, _buildinfo flags) evaluated with VAESCRYPT_SANITIZE=1,
    built into dest.  Only the extensions are built (no probe/tracer)."""
    import importlib.util

    from cffi import FFI
    from setuptools import Distribution, Extension

    spec = importlib.util.spec_from_file_location("_vc_setup", REPO / "setup.py")
    assert spec and spec.loader
    setup_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_mod)  # not __main__: setup() does not run
    bi = setup_mod.bi
    if not bi.sanitize_enabled() or not any("sanitize" in f for f in bi.our_cflags()):
        raise SystemExit("VAESCRYPT_SANITIZE=1 did not add -fsanitize flags (_buildinfo)")

    pkg = dest / "pkg" / "vaescrypt"
    shutil.copytree(
        PKG_SRC, pkg, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )

    # the cffi extension, as setup.py's BuildNative makes it
    objs = bi.compile_objects(bi.library_sources(REPO), dest / "obj", root=REPO)
    module, source, _ext, kwds = setup_mod.ffibuilder._assigned_source
    ffi = FFI()
    ffi.cdef(bi.read_cdef(REPO))
    ffi.set_source(
        module,
        source,
        **{**kwds, "extra_objects": [str(o) for o in objs], "extra_link_args": bi.link_flags()},
    )
    so = Path(ffi.compile(tmpdir=str(dest / "ext")))
    shutil.copy2(so, pkg / so.name)

    # every plain CPython extension setup.py declares (e.g. vaescrypt._fastcall)
    exts = [v for v in vars(setup_mod).values() if isinstance(v, Extension)]
    if exts:
        dist = Distribution({"ext_modules": exts})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(dest / "pkg")
        cmd.build_temp = str(dest / "ext-tmp")
        cwd = os.getcwd()
        os.chdir(REPO)  # Extension sources are relative to the repository
        try:
            dist.run_command("build_ext")
        finally:
            os.chdir(cwd)


def asan_env(pkg_dir: Path, log_dir: Path) -> dict[str, str]:
    """Environment for a child Python that loads the sanitized extension."""
    lib = libasan_path()
    if lib is None:
        raise SanitizerSetupError("gcc -print-file-name=libasan.so found no libasan")
    env = dict(os.environ)
    env.pop("VAESCRYPT_CPU_MASK", None)
    env.update(
        {
            "LD_PRELOAD": str(lib),
            "PYTHONPATH": os.pathsep.join([str(pkg_dir), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            # Python leaks by design; every allocation through malloc so ASan sees
            # the bounds of the bytearrays handed to the library (pymalloc pools
            # would hide small over-reads).
            "PYTHONMALLOC": "malloc",
            "ASAN_OPTIONS": f"detect_leaks=0:halt_on_error=1:log_path={log_dir / 'asan'}",
            "UBSAN_OPTIONS": f"halt_on_error=1:print_stacktrace=1:log_path={log_dir / 'ubsan'}",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


if __name__ == "__main__":
    _build_here(Path(sys.argv[1]))
