"""Build the libFuzzer differential harnesses, one per mode family:
tests/fuzz/vc_fuzz_gcm.c (AES-GCM) and tests/fuzz/vc_fuzz_cfb.c (CFB128, CFB8,
CFB1), each comparing every code path with OpenSSL's libcrypto.

    python3 tests/fuzz/build_fuzzer.py OUT_DIR    # -> OUT_DIR/vc_fuzz_gcm, OUT_DIR/vc_fuzz_cfb

The library (native/*.c, dispatch/*.c) is compiled with clang and
-fsanitize=fuzzer-no-link,address,undefined (coverage feedback for libFuzzer,
ASan and UBSan inside every tier), the harness and the link with
-fsanitize=fuzzer,address,undefined, linked with -lcrypto (Debian:
libssl-dev; OpenSSL itself is not instrumented, it is only the reference).
UBSan does not recover: undefined behaviour aborts like a mismatch.  Standard
library only.

clang does not accept GCC's `prefer-vector-width=N` inside a target("...")
attribute, so native/tier_avx10_256.c writes it for GCC only; the library is
compiled here with -mprefer-vector-width=256 instead, the same code-generation
preference (the other tiers' zmm code is explicit intrinsics, unaffected).

Only the mode front-ends (native/gcm.c, cfb.c, front.c) keep libFuzzer's
comparison tracing; the tiers, the generic kernels and the dispatcher are
compiled with -fno-sanitize-coverage=trace-cmp: their comparisons are loop
counters and CPU features, and tracing them took a quarter of the run time
(perf) for nothing the fuzzer can use.  They keep the coverage counters, ASan
and UBSan.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ_DIR = Path(__file__).resolve().parent
HARNESSES = ("gcm", "cfb")
INSTALL_HINT = (
    "install Debian's clang, its libFuzzer runtime and OpenSSL's headers: "
    "apt-get install clang libclang-rt-14-dev libssl-dev (ci/bootstrap.sh does)"
)

SAN_LIB = ("-fsanitize=fuzzer-no-link,address,undefined",)
SAN_BIN = ("-fsanitize=fuzzer,address,undefined",)
COMMON = (
    "-std=c11",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pthread",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
)


class FuzzBuildError(RuntimeError):
    """clang/libFuzzer missing, or a compile or link failed (message says which)."""


def clang() -> list[str]:
    return shlex.split(os.environ.get("VAESCRYPT_FUZZ_CC", "clang"))


def _run(cmd: Sequence[str]) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise FuzzBuildError(f"{shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")


def check_toolchain(work: Path) -> str:
    """clang's version line; raises FuzzBuildError unless -fsanitize=fuzzer links."""
    cc = clang()
    if shutil.which(cc[0]) is None:
        raise FuzzBuildError(f"{cc[0]} not found: {INSTALL_HINT}")
    ver = subprocess.run([*cc, "--version"], capture_output=True, text=True, check=False)
    probe = work / "libfuzzer_probe.c"
    probe.write_text(
        "#include <stddef.h>\n#include <stdint.h>\n"
        "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
        "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
        " { (void)d; (void)n; return 0; }\n"
    )
    try:
        _run([*cc, *SAN_BIN, str(probe), "-o", str(work / "libfuzzer_probe")])
    except FuzzBuildError as e:
        raise FuzzBuildError(
            f"{cc[0]} cannot link -fsanitize=fuzzer ({INSTALL_HINT}):\n{e}"
        ) from None
    ossl = work / "openssl_probe.c"
    ossl.write_text(
        "#include <openssl/evp.h>\nint main(void) { return EVP_CIPHER_CTX_new() == 0; }\n"
    )
    try:
        _run([*cc, str(ossl), "-o", str(work / "openssl_probe"), "-lcrypto"])
    except FuzzBuildError as e:
        raise FuzzBuildError(
            f"cannot build against OpenSSL's libcrypto ({INSTALL_HINT}):\n{e}"
        ) from None
    return ver.stdout.splitlines()[0] if ver.stdout else cc[0]


def library_sources() -> list[Path]:
    return sorted((ROOT / "native").glob("*.c")) + sorted((ROOT / "dispatch").glob("*.c"))


def _includes() -> list[str]:
    return [f"-I{ROOT / d}" for d in ("native", "native/include", "dispatch/include")]


def _version_define() -> str:
    """native/front.c's VC_VERSION, as the production build defines it."""
    spec = importlib.util.spec_from_file_location(
        "_vc_buildinfo_for_fuzz", ROOT / "src" / "vaescrypt" / "_buildinfo.py"
    )
    assert spec is not None and spec.loader is not None
    bi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bi)
    return str(bi.version_define(ROOT))


def _keeps_cmp_tracing(src: Path) -> bool:
    """Comparison tracing only where the branches depend on the input: the
    mode front-ends (lengths, phases, partial blocks) and front.c.  In the
    tiers, the generic kernels and the dispatcher the comparisons are loop
    counters and CPU features; tracing them cost ~25 % of the run (perf)
    and gives libFuzzer nothing to steer by (coverage counters stay)."""
    return src.parent.name == "native" and src.name in ("gcm.c", "cfb.c", "front.c")


def _compile_cmd(src: Path, obj: Path, extra: Sequence[str]) -> list[str]:
    flags = ["-mprefer-vector-width=256"]  # see the module docstring
    if not _keeps_cmp_tracing(src):
        flags.append("-fno-sanitize-coverage=trace-cmp")
    return [
        *clang(),
        *COMMON,
        *extra,
        *flags,
        _version_define(),
        *_includes(),
        "-c",
        str(src),
        "-o",
        str(obj),
    ]


def build(out_dir: Path, harness: str = "gcm", *, teeth: bool = False, jobs: int = 2) -> Path:
    """Compile and link out_dir/vc_fuzz_<harness> (teeth: ...-teeth, which
    corrupts one path's output on purpose so a test can see the mismatch
    caught).  The library objects are shared by every harness in out_dir."""
    if harness not in HARNESSES:
        raise FuzzBuildError(f"unknown harness {harness!r} (one of {', '.join(HARNESSES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / "obj"
    work.mkdir(exist_ok=True)
    check_toolchain(work)
    lib_objs = [work / (f"{s.parent.name}__{s.stem}.o") for s in library_sources()]
    cmds = [
        _compile_cmd(s, o, SAN_LIB) for s, o in zip(library_sources(), lib_objs) if not o.exists()
    ]
    name = f"vc_fuzz_{harness}" + ("-teeth" if teeth else "")
    harness_obj = work / f"{name}.o"
    cmds.append(
        [
            *clang(),
            *COMMON,
            *SAN_LIB,
            *(["-DVC_FUZZ_TEETH"] if teeth else []),
            *_includes(),
            f"-I{FUZZ_DIR}",
            "-c",
            str(FUZZ_DIR / f"vc_fuzz_{harness}.c"),
            "-o",
            str(harness_obj),
        ]
    )
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for fut in [pool.submit(_run, c) for c in cmds]:
            fut.result()
    dest = out_dir / name
    _run(
        [
            *clang(),
            *SAN_BIN,
            "-pthread",
            str(harness_obj),
            *(str(o) for o in lib_objs),
            "-lcrypto",
            "-o",
            str(dest),
        ]
    )
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_fuzzer.py OUT_DIR", file=sys.stderr)
        return 2
    try:
        for h in HARNESSES:
            print(build(Path(argv[0]).resolve(), h))
    except FuzzBuildError as e:
        print(f"build_fuzzer: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
