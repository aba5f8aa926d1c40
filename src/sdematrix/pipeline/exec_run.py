"""``sdematrix exec``: run any x86-64 Linux program as if on each CPU model.

Per model the program runs once under ``vc-tracer --whole`` (the ptrace
backend's tracer, :mod:`sdematrix.backends.ptrace.backend`): CPUID answers from the
model's profile (fault or bp mode, every image's sites armed), every distinct
instruction executed in any thread or child is recorded once (first-visit
breakpoints, tracer/whole.c, starts from :mod:`sdematrix.evidence.insn_bounds`) and
chip-checked with the one check every backend shares (the builder of
:mod:`sdematrix.evidence.mix_build`, through
:func:`sdematrix.evidence.exec_check.whole_checked_mix`).

Regions (the mix the expectations judge):

* ``marks``: the SSC-marked regions, stepped as for the probe (the default
  when some image holds marks);
* ``function:SYMBOL``: every call of SYMBOL (dynamic or static symbol, in any
  image the program maps), stepped from entry until it returns;
* ``whole``: every distinct instruction of the run, each counted once (the
  default otherwise).

Images mapped at run time (dlopen, the program a child execs) are not known
before the run: the tracer asks for each one when it is first mapped
executable (a pipe to :func:`_serve_images`, which sends the image's CPUID /
XGETBV / mark / function sites and its instruction starts), so one run
covers them.
"""

from __future__ import annotations

import bisect
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..backends.base import ExecResult
from ..backends.host_isa import host_lacks, sigill_reason
from ..backends.ptrace.backend import TracerOutput, parse_tracer_output
from ..backends.ptrace.profile import Site, image_sites, program_images, write_profile
from ..backends.ptrace.tracer_bin import tracer_path
from ..errors import SdeMatrixError
from ..evidence.exec_check import merge_versions, whole_checked_mix
from ..evidence.insn_bounds import bounds_file, fde_ranges
from ..evidence.mix import Mix
from ..evidence.mix_build import (
    Executed,
    Locate,
    as_bsf_meta,
    mix_from_executed,
    zero_source_as_bsf,
)
from ..evidence.symbols import Location, Symbolizer, load_image
from ..spec.choices import DEFAULT_TIMEOUT
from ..spec.models import CpuModel

__all__ = [
    "ExecError",
    "ExecResult",
    "Region",
    "find_function",
    "parse_region",
    "run_model",
]


class ExecError(SdeMatrixError):
    """Bad input to ``sdematrix exec`` (exit 2)."""


@dataclass(frozen=True)
class Region:
    kind: str  # "marks" | "whole" | "function"
    symbol: str = ""

    def __str__(self) -> str:
        return f"function:{self.symbol}" if self.kind == "function" else self.kind


def parse_region(text: str) -> Region:
    if text in ("marks", "whole"):
        return Region(text)
    if text.startswith("function:") and len(text) > len("function:"):
        return Region("function", text.split(":", 1)[1])
    raise ExecError(f"--region {text!r}: expected marks, whole or function:SYMBOL")


def find_function(symbol: str, images: Sequence[str]) -> list[Site]:
    """Entry sites (file offsets) of `symbol` in `images`: every STT_FUNC /
    STT_GNU_IFUNC definition in .symtab or .dynsym, once per address."""
    sites: list[Site] = []
    for path in images:
        img = load_image(path)
        if img is None:
            continue
        seen: set[int] = set()
        try:
            with open(path, "rb") as fh:
                elf = ELFFile(fh)
                for sec in elf.iter_sections():
                    if not isinstance(sec, SymbolTableSection):
                        continue
                    for sym in sec.get_symbol_by_name(symbol) or []:
                        if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                            continue
                        if sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
                            continue
                        off = img.offset_of_vaddr(int(sym["st_value"]))
                        if off is not None and off not in seen:
                            seen.add(off)
                            sites.append(Site("func", off, os.path.realpath(path)))
        except (OSError, ELFError, ValueError):
            continue
    return sites


def _exe(argv0: str) -> str:
    exe = argv0 if os.sep in argv0 else (shutil.which(argv0) or "")
    if not exe or not os.path.isfile(exe):
        raise ExecError(f"program not found: {argv0}")
    if not os.access(exe, os.X_OK):
        raise ExecError(f"program not executable: {exe}")
    return exe


@dataclass
class ExecPlan:
    """What every model's run shares: the program, its images, the regions."""

    argv: list[str]
    regions: list[Region]
    cpuid_mode: str = "auto"
    stdin: bytes | None = None
    timeout: float = DEFAULT_TIMEOUT  # one model's run (options: --timeout)
    # --jit-converge: 0 steps JIT code for as long as it runs (exact); N > 0
    # lets a thread that stepped N instructions in a row without a new one
    # run natively in that region, unchecked (tracer/whole.c)
    jit_converge: int = 0
    exe: str = ""
    images: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.exe = _exe(self.argv[0])
        self.images = program_images(self.exe)
        if tracer_path() is None:
            raise ExecError("vc-tracer not built (python3 setup.py build_ext --inplace)")

    def sites(self, images: Sequence[str] | None = None) -> list[Site]:
        """The CPUID/XGETBV sites, marks (when a region wants them) and
        function entries of `images` (default: the program's)."""
        imgs = self.images if images is None else images
        marks = not self.regions or any(r.kind == "marks" for r in self.regions)
        out = [s for img in imgs for s in image_sites(img) if s.kind != "mark" or marks]
        for r in self.regions:
            if r.kind == "function":
                out += find_function(r.symbol, imgs)
        return out

    def image_records(self, path: str) -> list[str]:
        """The profile records of one image the tracer asks about (an image
        mapped at run time: dlopen, a child's exec): `image`, its sites and
        its instruction starts.  Remembered for the next models' profiles."""
        real = os.path.realpath(path)
        out = [f"image {real}"]
        if not os.path.isfile(real):
            return out
        if real not in self.images:
            self.images.append(real)
        out += [
            f"site {s.kind} {s.offset:x} {s.path}" for s in self.sites([real]) if "\n" not in s.path
        ]
        try:
            b = bounds_file(real)
            out.append(f"bounds {b.file} {b.path}")
        except OSError:
            pass
        return out

    def has_marks(self) -> bool:
        return any(s.kind == "mark" for img in self.images for s in image_sites(img))

    def missing_symbols(self) -> list[str]:
        return [
            r.symbol
            for r in self.regions
            if r.kind == "function" and not find_function(r.symbol, self.images)
        ]


def discover_images(plan: ExecPlan, model: CpuModel, work: Path) -> None:
    """Run the program once (output discarded) to learn the images it maps
    beyond its DT_NEEDED closure (dlopen: the image server adds every image
    the tracer asks about to ``plan.images``), for resolving function
    regions whose symbol no DT_NEEDED image defines."""
    regions, plan.regions = plan.regions, [Region("whole")]
    try:
        _trace_once(plan, model, work)
    except (TimeoutError, RuntimeError, OSError):
        pass
    finally:
        plan.regions = regions


def _serve_images(plan: ExecPlan, req: int, resp: int) -> None:
    """The tracer's image server (tracer/whole.c, `ask`): one path per line
    in, that image's profile records and `end` out, until the tracer exits."""
    with os.fdopen(req, "rb") as rf, os.fdopen(resp, "wb") as wf:
        for raw in rf:
            path = raw.rstrip(b"\n").decode(errors="surrogateescape")
            try:
                lines = plan.image_records(path)
            except Exception:  # noqa: BLE001 - the tracer must get its `end`
                lines = [f"image {path}"]
            try:
                wf.write(
                    "".join(f"{ln}\n" for ln in lines).encode(errors="surrogateescape") + b"end\n"
                )
                wf.flush()
            except OSError:
                return


def _trace_once(plan: ExecPlan, model: CpuModel, work: Path) -> tuple[TracerOutput, bytes, bytes]:
    profile, out = work / f"{model.name}.profile", work / f"{model.name}.trace"
    out.unlink(missing_ok=True)
    write_profile(profile, model, plan.sites(), plan.images)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    with profile.open("a") as fh:
        for img in plan.images:
            try:
                b = bounds_file(img)
            except OSError:
                continue
            if "\n" not in b.path:
                fh.write(f"bounds {b.file} {b.path}\n")
        fh.write(f"ask {req_w} {resp_r}\n")
    argv = [
        str(tracer_path()),
        "--profile",
        str(profile),
        "--out",
        str(out),
        "--cpuid-mode",
        plan.cpuid_mode,
        "--whole",
        *(["--jit-converge", str(plan.jit_converge)] if plan.jit_converge else []),
        "--",
        plan.exe,
        *plan.argv[1:],
    ]
    server = threading.Thread(target=_serve_images, args=(plan, req_r, resp_w), daemon=True)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if plan.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(req_w, resp_r),
        )
    finally:
        os.close(req_w)
        os.close(resp_r)
    server.start()
    try:
        stdout, stderr = proc.communicate(input=plan.stdin, timeout=plan.timeout)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        proc.communicate()
        raise TimeoutError(f"timed out after {plan.timeout:g} s") from e
    finally:
        server.join(timeout=5)
    try:
        text = out.read_text()
        traced = parse_tracer_output(text)
    except (OSError, ValueError) as e:
        last = (stderr.decode(errors="replace").strip().splitlines() or [str(e)])[-1]
        raise RuntimeError(f"tracer failed (exit {proc.returncode}): {last}") from e
    for line in text.splitlines():
        if line.startswith("whole_") and not line.startswith("whole_nobounds"):
            key, _, val = line.partition(" ")
            if val.isdigit():
                traced.whole[key[len("whole_") :]] = int(val)
    return traced, stdout, stderr


Locator = Callable[[int], Locate]


def _locator(traced: TracerOutput) -> Locator:
    """Address space -> its symboliser (:func:`unwind_named`), made once each."""
    symbolizers = {sid: Symbolizer(text) for sid, text in traced.maps.items()}
    empty = Symbolizer("")
    locators: dict[int, Locate] = {}

    def locate_in(space: int) -> Locate:
        if space not in locators:
            locators[space] = unwind_named(symbolizers.get(space, empty))
        return locators[space]

    return locate_in


def _chip_check(
    res: ExecResult, traced: TracerOutput, model: CpuModel, locate_in: Locator
) -> tuple[Mix, int, list[dict[str, Any]]]:
    """The whole-run mix and chip check of every distinct instruction,
    whole-run and stepped alike; (mix, how many, the TZCNTs of zero the
    tracer ran as BSF for the model: :func:`zero_source_as_bsf`)."""
    stepped = {(s, a) for s, a, _n, _c in traced.insns}
    recorded = [(s, a, c, 1) for s, a, c in traced.seen if (s, a) not in stepped]
    recorded += merge_versions([(s, a, c, n) for s, a, n, c in traced.insns], locate_in)
    whole, res.violations, distinct = whole_checked_mix(
        "ptrace", recorded, locate_in, model, isa_in_reason=True
    )
    codes: dict[tuple[int, int], list[bytes]] = {}
    for s, a, c, _n in recorded:
        codes.setdefault((s, a), []).append(c)
    as_bsf = zero_source_as_bsf(
        traced.tzcnt_zero, lambda s, a: codes.get((s, a), []), locate_in, model
    )
    return whole, distinct, as_bsf


def _probed_check(traced: TracerOutput, model: CpuModel, locate_in: Locator) -> dict[str, Any]:
    """What kernel uprobes hid from the tracer.  Instruction starts under a
    uprobe that no stop saw run: the kernel takes the probe's int3 itself
    and runs the probed instruction out of line, so whole mode cannot tell
    whether they ran; their file bytes are checked against the model
    instead (meta ``uprobed_at``, each as PATH+OFFSET, ``uprobed`` how many,
    and ``uprobed_outside_model``: then the verdict is not proven).  Sites
    under a uprobe (``sites_probed``)."""
    meta: dict[str, Any] = {}
    if traced.sites_probed:
        # sites the tracer could not break on (a function region's entry,
        # a CPUID or XGETBV in bp mode): "KIND FUNCTION in IMAGE+OFFSET"
        meta["sites_probed"] = [
            f"{kind} {locate_in(s)(a).function} in {path}+{off:#x}"
            for s, kind, a, off, path in traced.sites_probed
        ]
    if traced.probed:
        _mix, outside, _n = whole_checked_mix(
            "ptrace",
            [(s, a, c, 1) for s, a, c, _off, _path in traced.probed],
            locate_in,
            model,
            isa_in_reason=True,
        )
        # one place per file offset, whichever processes mapped the file
        at = sorted({f"{path}+{off:#x}" for _s, _a, _c, off, path in traced.probed})
        meta["uprobed"], meta["uprobed_at"] = len(at), at
        meta["uprobed_outside_model"] = [v.describe() for v in outside]
    return meta


def _region_mix(
    res: ExecResult,
    plan: ExecPlan,
    traced: TracerOutput,
    model: CpuModel,
    whole: Mix,
    locate_in: Locator,
) -> Mix:
    """The mix the expectations judge: the stepped regions', else the whole
    run's (`whole`); sets ``res.region`` and ``res.entered``."""
    stepping = [r for r in plan.regions if r.kind != "whole"]
    if not stepping:
        res.region, res.entered = "whole", {}
        return whole
    mix = mix_from_executed(
        "ptrace",
        (Executed(a, c, n, locate_in(s)) for s, a, n, c in traced.insns),
        model=model,
    )
    res.region = ",".join(str(r) for r in stepping)
    res.entered = {res.region: traced.regions}
    # legacy forms (TZCNT run as BSF) anywhere in the process, not only in
    # the regions: the whole-run check passed them, the reader sees it
    mix.legacy_forms = whole.legacy_forms.copy()
    return mix


def _meta(
    res: ExecResult, traced: TracerOutput, model: CpuModel, whole: Mix, distinct: int
) -> dict[str, Any]:
    """The run's coverage figures (results.json ``meta``, JUnit ``coverage.*``)."""
    meta = {
        "model": model.name,
        "cpuid_mode": traced.cpuid_mode,
        "cpuid_answered": traced.cpuid_answered,
        "xgetbv_emulated": traced.xgetbv_emulated,
        "regions": traced.regions,
        "steps": traced.steps,
        "truncated": traced.truncated,
        "distinct_instructions": distinct,
        "traps": traced.whole.get("traps", 0),
        "planted": traced.whole.get("planted", 0),
        "anon_exec_mappings": traced.whole.get("anon_exec", 0),
        "images_asked": traced.whole.get("asked", 0),
        "jit_regions": traced.whole.get("jit_regions", 0),
        "jit_entries": traced.whole.get("jit_entries", 0),
        "jit_steps": traced.whole.get("jit_steps", 0),
        "jit_failed": traced.whole.get("jit_failed", 0),
        "jit_unchecked": traced.whole.get("jit_unchecked", 0),
        "pushf_run": traced.pushf_run,
        "popf_reset": traced.popf_reset,
        "syscall_r11_mended": traced.syscall_r11_mended,
        "syscall_steps_undone": traced.syscall_steps_undone,
        "uprobe_steps": traced.uprobe_steps,
        "uprobe_trampoline_steps": traced.uprobe_trampoline_steps,
        "images_without_bounds": list(traced.nobounds),
        "images": sorted(whole.images),
        "region": res.region,
        "duration_s": round(res.duration_s, 3),
    }
    lacks = host_lacks(model)
    if lacks:
        meta["host_lacks"] = lacks
    return meta


def _host_sigill(traced: TracerOutput, model: CpuModel, locate_in: Locator) -> str | None:
    """A SIGILL on an instruction the model advertises but this host lacks
    is the host's limit, not the program's: why the model's cell is an error."""
    if traced.exit_kind != "signal" or traced.exit_value != signal.SIGILL or not traced.sigill:
        return None
    space, addr, code = traced.sigill
    loc = locate_in(space)(addr, code)
    return sigill_reason(model, code, f"{loc.function} in {loc.image} at {addr:#x}")


def run_model(plan: ExecPlan, model: CpuModel, work: Path) -> ExecResult:
    """Run the program under `model` once (images it maps at run time are
    served to the tracer while it runs, see :func:`_serve_images`): trace,
    chip check, the region's mix, the coverage figures, a host SIGILL."""
    res = ExecResult(model=model.name)
    t0 = time.monotonic()
    try:
        traced, res.stdout, res.stderr = _trace_once(plan, model, work)
    except (TimeoutError, RuntimeError, OSError) as e:
        res.error = str(e)
        res.duration_s = time.monotonic() - t0
        return res
    res.duration_s = time.monotonic() - t0
    res.exit_code = traced.exit_code
    if not traced.complete:
        res.error = "tracer output incomplete"
        return res
    locate_in = _locator(traced)
    whole, distinct, as_bsf = _chip_check(res, traced, model, locate_in)
    res.mix = mix = _region_mix(res, plan, traced, model, whole, locate_in)
    res.meta = _meta(res, traced, model, whole, distinct)
    res.meta.update(as_bsf_meta(as_bsf))
    res.meta.update(_probed_check(traced, model, locate_in))
    mix.meta.update(res.meta)
    why = _host_sigill(traced, model, locate_in)
    if why is not None:
        res.error = why
    return res


def unwind_named(sym: Symbolizer) -> Locate:
    """`sym.locate`, except that an address no symbol covers is named by the
    function its image's unwind table (.eh_frame FDE) puts it in,
    ``image+0xSTART`` with that range, instead of by its own address: the
    stripped assembler functions of a distribution's libcrypto (aesni_*,
    gcm_ghash_*) then appear as one function each in the mix."""
    cache: dict[str, tuple[list[int], tuple[tuple[int, int], ...]]] = {}

    def locate(addr: int, code: bytes = b"") -> Location:
        loc = sym.locate(addr, code)
        if loc.lo is not None or not loc.image.startswith("/"):
            return loc
        m = sym.mapping_at(addr, code)
        img = load_image(loc.image)
        if m is None or img is None:
            return loc
        vaddr = img.vaddr_of_offset(m.offset + (addr - m.lo))
        if vaddr is None:
            return loc
        if loc.image not in cache:
            ranges = fde_ranges(loc.image)
            cache[loc.image] = ([r[0] for r in ranges], ranges)
        starts, ranges = cache[loc.image]
        i = bisect.bisect_right(starts, vaddr) - 1
        if i < 0 or not ranges[i][0] <= vaddr < ranges[i][1]:
            return loc
        lo, hi = ranges[i]
        bias = addr - vaddr
        name = f"{os.path.basename(loc.image)}+{lo:#x}"
        at = (lo + bias, hi + bias)
        return Location(loc.image, name, *at, shared=sym.overlapped(*at))

    return locate


def read_stdin() -> bytes | None:
    """The program's stdin, read once for every model's run (None: a
    terminal or nothing to read; the programs then get /dev/null)."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        return sys.stdin.buffer.read()
    except (OSError, ValueError):
        return None


def workdir(out: Path | None) -> Path:
    if out is not None:
        d = out / "work"
        d.mkdir(parents=True, exist_ok=True)
        return d
    return Path(tempfile.mkdtemp(prefix="sdematrix-exec-"))


def sde_command(
    sde: Any, model: CpuModel, argv: Sequence[str], regions: Sequence[Region], workdir: Path
) -> list[str]:
    """The SDE command line for the same run, built by the SDE backend
    (:meth:`sdematrix.backends.sde.backend.SdeBackend.command`: chip knob, -mix,
    -omix, SSC marks, chip-check options).  Regions map as: ``marks`` keeps
    the SSC marks; ``whole`` and ``function:SYMBOL`` drop them (SDE's mix is
    then the whole program's, listed per function, so function scopes of
    the expectations apply to it)."""
    from ..backends.base import ProbeCommand
    from ..spec.models import Cell

    cell = Cell(cpu=model.name, mode="exec", direction="run", key_bits=0, length=0)
    cmd = sde.command(cell, model, ProbeCommand(argv=tuple(argv)), workdir)
    if regions and not any(r.kind == "marks" for r in regions):
        for knob in ("-start_ssc_mark", "-stop_ssc_mark"):
            if knob in cmd:
                i = cmd.index(knob)
                del cmd[i : i + 2]
    return cmd
