"""Build for the `sdematrix` distribution: the cffi extension vaescrypt._native,
the CPython extension vaescrypt._fastcall, the benchmark-only cffi extension
vaescrypt._bench and the helper executables sdematrix/_bin/{vc-probe,vc-tracer}.

vaescrypt._bench is the library objects again plus native/bench/*.c (C timing
loops, OpenSSL through dlopen, the zmm roof/floor loops); only
`python -m vaescrypt.bench` imports it, so the production extension and
`import vaescrypt` carry no benchmark code.

Our C is compiled with the project's strict flags (see src/vaescrypt/_buildinfo.py)
into objects that the cffi wrapper links as extra_objects; the generated wrapper
itself keeps the interpreter's default flags (it is not -Werror clean).

vaescrypt._fastcall (METH_FASTCALL one-shot entry points) is our C too, so it
gets the strict flags.  It links none of the library: at import the Python
layer hands it the addresses of the library functions inside _native, so the
process holds one copy of the library and of its dispatcher state.

The project URLs (pyproject's dynamic "urls") come from the repository that
builds the release, never from the tree: see _project_urls.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from cffi import FFI
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclass/typing machinery wants it registered
    spec.loader.exec_module(mod)
    return mod


bi = _load("_vaescrypt_buildinfo", ROOT / "src" / "vaescrypt" / "_buildinfo.py")


def _cffi_builder(module: str, cdef: str, headers: list[str], incs: list[Path]) -> FFI:
    builder = FFI()
    builder.cdef(cdef)
    builder.set_source(
        module, "".join(f'#include "{h}"\n' for h in headers), include_dirs=[str(d) for d in incs]
    )
    return builder


ffibuilder = _cffi_builder(
    "vaescrypt._native", bi.read_cdef(ROOT), ["vaescrypt.h"], bi.include_dirs(ROOT)
)
benchbuilder = _cffi_builder(
    "vaescrypt._bench", bi.read_bench_cdef(ROOT), ["vc_bench.h"], bi.bench_include_dirs(ROOT)
)

fastcall = Extension(
    "vaescrypt._fastcall",
    sources=["src/vaescrypt/_fastcall.c"],
    include_dirs=[str(d) for d in bi.include_dirs(ROOT)],
    extra_compile_args=bi.our_cflags(),
    extra_link_args=bi.link_flags(),
    depends=[str(ROOT / "native" / "include" / "vaescrypt.h")],
)


class BuildNative(build_ext):
    """Compile our objects first, hand them to the cffi extension, then build
    the helper executables next to the sdematrix package."""

    def run(self) -> None:
        work = Path(self.build_temp) / "vaescrypt-native"
        lib_srcs, bench_srcs = bi.library_sources(ROOT), bi.bench_sources(ROOT)
        objs = bi.compile_objects(lib_srcs, work / "lib", root=ROOT)
        bench_objs = bi.compile_objects(bench_srcs, work / "bench", root=ROOT)
        # cffi extension -> its objects
        linked = {"vaescrypt._native": objs, "vaescrypt._bench": [*objs, *bench_objs]}
        for ext in self.extensions:
            if ext.name in linked:
                ext.extra_objects = [str(o) for o in linked[ext.name]]
                ext.extra_link_args = [*ext.extra_link_args, *bi.link_flags()]
                # The link depends on the objects, which compile_objects
                # rebuilds on every run: any change, a header-only one
                # (native/vaes_common.h) included, is linked in.
                ext.depends = [*ext.depends, *ext.extra_objects]
        super().run()

        if self.inplace:
            build_py = self.get_finalized_command("build_py")
            bindir = Path(build_py.get_package_dir("sdematrix")) / "_bin"
        else:
            bindir = Path(self.build_lib) / "sdematrix" / "_bin"
        if bi.probe_sources(ROOT):
            bi.build_probe(bindir / "vc-probe", root=ROOT, work_dir=work / "probe")
        else:
            print("note: native/probe has no main() yet; vc-probe not built")
        if bi.tracer_sources(ROOT):
            bi.build_tracer(bindir / "vc-tracer", root=ROOT, work_dir=work / "tracer")
        else:
            print("note: src/sdematrix/tracer has no C sources; vc-tracer not built")


def _project_urls() -> dict[str, str]:
    urls, origin = _load("_sdematrix_project_urls", ROOT / "_project_urls.py").project_urls(ROOT)
    if not urls:
        print(f"note: no project URLs in the metadata: {origin}", file=sys.stderr)
    return urls


if __name__ == "__main__":
    setup(
        project_urls=_project_urls(),
        cffi_modules=["setup.py:ffibuilder", "setup.py:benchbuilder"],
        ext_modules=[fastcall],
        cmdclass={"build_ext": BuildNative},
    )
