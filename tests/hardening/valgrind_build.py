"""Build the executables run under valgrind: vg-driver (tests/hardening/vg_driver.c
linked with the library) and the project's vc-probe.

Valgrind cannot run ASan binaries, so the build runs in a child process with
VAESCRYPT_SANITIZE removed from its environment; flags and sources come from
the project's own src/vaescrypt/_buildinfo.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRIVER_SRC = Path(__file__).resolve().parent / "vg_driver.c"


class ValgrindSetupError(RuntimeError):
    """The executables for the valgrind test could not be built."""


def build(dest: Path, timeout: float = 300) -> tuple[Path, Path | None]:
    """(vg-driver, vc-probe or None when the probe has no sources) under dest."""
    env = {k: v for k, v in os.environ.items() if k != "VAESCRYPT_SANITIZE"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(dest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise ValgrindSetupError(
            f"build failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    probe = dest / "vc-probe"
    return dest / "vg-driver", probe if probe.exists() else None


def _build_here(dest: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_vc_buildinfo", REPO / "src" / "vaescrypt" / "_buildinfo.py"
    )
    assert spec and spec.loader
    bi = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bi
    spec.loader.exec_module(bi)
    assert not bi.sanitize_enabled()
    # -g: valgrind reports then name file:line in the library
    flags = [*bi.our_cflags(), "-g"]
    objs = bi.compile_objects(
        [*bi.library_sources(REPO), DRIVER_SRC], dest / "obj", root=REPO, flags=flags
    )
    bi.link_executable(objs, dest / "vg-driver")
    if bi.probe_sources(REPO):
        bi.build_probe(dest / "vc-probe", root=REPO, work_dir=dest / "probe-obj")


if __name__ == "__main__":
    _build_here(Path(sys.argv[1]))
