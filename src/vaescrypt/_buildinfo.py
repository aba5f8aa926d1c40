"""How the native code is built: source lists, flags and small compile helpers.

Importable on its own (setup.py loads it by file path, before the package
exists) and by tests that build fault-injected variants of the probe.  Only the
standard library is used here.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# src/vaescrypt/_buildinfo.py -> repository root
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Flags for our own C (library, dispatcher, probe).  The cffi-generated
#: wrapper is compiled separately with the interpreter's default flags.
C_STD_FLAGS: tuple[str, ...] = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC")
#: The tracer is Linux ptrace code and needs GNU extensions.
TRACER_FLAGS: tuple[str, ...] = (
    "-std=gnu11",
    "-D_GNU_SOURCE",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
)
SANITIZE_FLAGS: tuple[str, ...] = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")
THREAD_FLAGS: tuple[str, ...] = ("-pthread",)

CDEF_RELPATH = Path("src/vaescrypt/_cdef.h")
#: The one place the version is written; vc_version() returns it too.
VERSION_RELPATH = Path("src/sdematrix/_version.py")
BENCH_CDEF_RELPATH = Path("src/vaescrypt/_bench_cdef.h")


class BuildError(RuntimeError):
    """A compiler or linker invocation failed (message holds the command and output)."""


def sanitize_enabled() -> bool:
    """VAESCRYPT_SANITIZE=1 builds our objects and executables with ASan + UBSan."""
    return os.environ.get("VAESCRYPT_SANITIZE", "") == "1"


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def include_dirs(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "native", root / "native" / "include", root / "dispatch" / "include"]


def library_sources(root: Path = REPO_ROOT) -> list[Path]:
    """Every C file of the library: mode front-ends, tiers, dispatcher."""
    return sorted((root / "native").glob("*.c")) + sorted((root / "dispatch").glob("*.c"))


def bench_sources(root: Path = REPO_ROOT) -> list[Path]:
    """native/bench/*.c: the benchmark loops, built only into vaescrypt._bench."""
    return sorted((root / "native" / "bench").glob("*.c"))


def bench_include_dirs(root: Path = REPO_ROOT) -> list[Path]:
    return [*include_dirs(root), root / "native" / "bench"]


def _has_main(paths: Iterable[Path]) -> bool:
    return any("main(" in p.read_text(errors="replace") for p in paths)


def probe_sources(root: Path = REPO_ROOT) -> list[Path]:
    """native/probe/*.c, or [] while that directory has no main()."""
    srcs = sorted((root / "native" / "probe").glob("*.c"))
    return srcs if srcs and _has_main(srcs) else []


def tracer_sources(root: Path = REPO_ROOT) -> list[Path]:
    """src/sdematrix/tracer/*.c, or [] when absent."""
    srcs = sorted((root / "src" / "sdematrix" / "tracer").glob("*.c"))
    return srcs if srcs and _has_main(srcs) else []


def read_cdef(root: Path = REPO_ROOT) -> str:
    return (root / CDEF_RELPATH).read_text()


def read_bench_cdef(root: Path = REPO_ROOT) -> str:
    return (root / BENCH_CDEF_RELPATH).read_text()


def version(root: Path = REPO_ROOT) -> str:
    """__version__ of src/sdematrix/_version.py, read without importing it."""
    path = root / VERSION_RELPATH
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__version__"
        ]:
            value = ast.literal_eval(node.value)
            if isinstance(value, str) and re.fullmatch(r"[0-9A-Za-z.+-]+", value):
                return value
    raise BuildError(f"{path}: no __version__ = '<version>' to build vc_version() from")


def version_define(root: Path = REPO_ROOT) -> str:
    """-DVC_VERSION="x.y.z": native/front.c's vc_version() returns it."""
    return f'-DVC_VERSION="{version(root)}"'


def our_cflags(defines: Sequence[str] = ()) -> list[str]:
    flags = [*C_STD_FLAGS, *THREAD_FLAGS, version_define(), *defines]
    if sanitize_enabled():
        flags += SANITIZE_FLAGS
    return flags


def link_flags() -> list[str]:
    flags = list(THREAD_FLAGS)
    if sanitize_enabled():
        flags += SANITIZE_FLAGS
    return flags


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")


def _object_name(src: Path, root: Path) -> str:
    try:
        rel = src.resolve().relative_to(root.resolve())
    except ValueError:
        rel = Path(src.name)
    return "__".join(rel.with_suffix("").parts) + ".o"


def compile_objects(
    sources: Sequence[Path],
    out_dir: Path,
    *,
    root: Path = REPO_ROOT,
    flags: Sequence[str] | None = None,
    defines: Sequence[str] = (),
    jobs: int | None = None,
) -> list[Path]:
    """Compile each source to out_dir/<relpath>.o in parallel; return the objects."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cflags = list(flags) if flags is not None else our_cflags(defines)
    if flags is not None:
        cflags += list(defines)
    incs = [f"-I{d}" for d in include_dirs(root)]
    objs = [out_dir / _object_name(s, root) for s in sources]
    cmds = [
        [*compiler(), *cflags, *incs, "-c", str(s), "-o", str(o)] for s, o in zip(sources, objs)
    ]
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        for fut in [pool.submit(_run, c) for c in cmds]:
            fut.result()
    return objs


def link_executable(objects: Sequence[Path], dest: Path, *, extra: Sequence[str] = ()) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    _run([*compiler(), *(str(o) for o in objects), *link_flags(), *extra, "-o", str(tmp)])
    os.replace(tmp, dest)  # atomic: a running test never sees half a binary
    return dest


def build_probe(
    dest: Path,
    defines: Sequence[str] = (),
    *,
    root: Path = REPO_ROOT,
    work_dir: Path | None = None,
    extra_sources: Sequence[Path] = (),
    link_args: Sequence[str] = (),
) -> Path:
    """Build vc-probe (library + dispatcher + native/probe) into dest.

    defines: extra compiler arguments.  extra_sources and link_args: more
    objects and linker arguments (the test suite's mutation builds link a
    test-only source with -Wl,--wrap=...).  Raises BuildError when the probe
    has no sources yet.
    """
    srcs = probe_sources(root)
    if not srcs:
        raise BuildError(f"no probe sources with a main() under {root / 'native' / 'probe'}")
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="vc-probe-") as tmp:
            return build_probe(
                dest,
                defines,
                root=root,
                work_dir=Path(tmp),
                extra_sources=extra_sources,
                link_args=link_args,
            )
    objs = compile_objects(
        [*library_sources(root), *srcs, *extra_sources], work_dir, root=root, defines=defines
    )
    # -z now: resolve every symbol at start-up, so no lazy PLT binding (ld.so
    # code) runs inside the probe's marked region and inflates traced mixes.
    return link_executable(objs, dest, extra=["-Wl,-z,now", *link_args])


def build_tracer(dest: Path, *, root: Path = REPO_ROOT, work_dir: Path) -> Path:
    srcs = tracer_sources(root)
    if not srcs:
        raise BuildError(f"no tracer sources under {root / 'src' / 'sdematrix' / 'tracer'}")
    flags = [*TRACER_FLAGS, *(SANITIZE_FLAGS if sanitize_enabled() else ())]
    objs = compile_objects(srcs, work_dir, root=root, flags=flags)
    return link_executable(objs, dest)


def have_compiler() -> bool:
    return shutil.which(compiler()[0]) is not None
