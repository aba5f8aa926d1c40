"""The QEMU backend: run the probe under ``qemu-x86_64 -cpu <Model>,enforce``.

What QEMU gives us:

* CPUID: QEMU's own CPU model (``CpuModel.qemu_model``, a ``-cpu`` spec such as
  ``"SandyBridge,-x2apic,-tsc-deadline"``); ``,enforce`` makes QEMU refuse to
  start when TCG cannot provide a feature of the model, so a run never sees a
  silently thinned CPU.  Features TCG lacks that are irrelevant to user code
  (x2apic, tsc-deadline, ...) are switched off in the matrix's spec.
* the chip check: a real SIGILL when the program executes an instruction the
  model lacks.  The fault is located by our TCG plugin (the last instruction
  of the last translation block entered, kept in a shared file that survives
  the signal), decoded and symbolised here.
* the instruction mix: the same plugin counts every instruction executed
  between the probe's SSC marks (``sdematrix/qemu_plugin/sdematrix_mix.c``).

What TCG can run is detected from the installed binary, never assumed:
``qemu-x86_64 --version`` names the version, ``-cpu help`` the models, and a
small static program (``qemu_plugin/tcg_probe.c``) run under ``-cpu max``
checks the wide instructions the library's tiers use -- AVX-512, ymm/zmm VAES
and VPCLMULQDQ -- for a SIGILL (TCG lacks it) or a wrong result (TCG runs it
wrongly: QEMU 7.2's ymm VAESENC computes the upper lane wrongly).  A model that
needs a capability this QEMU lacks is refused in :meth:`QemuBackend.cannot_run`,
naming the capability and the QEMU version.  The result is cached per QEMU
binary (path, size, mtime).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ...errors import MixFileError
from ...evidence.decode import chip_check, decode
from ...evidence.mix import Mix
from ...evidence.mix_build import Executed, Locate, checked_mix
from ...evidence.symbols import Location, Symbolizer, load_image
from ...qemu_plugin import (
    LastRecord,
    PluginBuildError,
    PluginOutput,
    build_plugin,
    build_tcg_probe,
    cache_dir,
    parse_last_file,
    parse_plugin_output,
)
from ...spec.models import Cell, CpuModel
from ...verdict.reasons import Kind, Reason
from ..base import ProbeCommand, RunResult, Violation
from ..probe import ProbeError, parse_probe_output
from ..process import ProcessOutcome, run_process, tail_lines

__all__ = ["TCG_TESTS", "QemuBackend", "mix_from_plugin", "sigill_violation", "tcg_tests_for"]

QEMU_EXE = "qemu-x86_64"
QEMU_ENV = "SDEMATRIX_QEMU"
PREFLIGHT_TIMEOUT = 30.0

# TCG capability tests (qemu_plugin/tcg_probe.c) and when a model needs each: a model
# feature (iced name) plus, for the 512-bit forms, AVX-512 with zmm vectors.
TCG_TESTS: dict[str, str] = {
    "avx512f": "AVX-512 (zmm)",
    "vaes256": "VAES on ymm",
    "vpclmulqdq256": "VPCLMULQDQ on ymm",
    "vaes512": "VAES on zmm",
    "vpclmulqdq512": "VPCLMULQDQ on zmm",
}
_VERSION_RE = re.compile(r"version (\d+\.\d+(?:\.\d+)?)")


def tcg_tests_for(model: CpuModel) -> list[str]:
    """The capability tests a model's tiers depend on."""
    wide = model.max_vector_bits > 256 or "AVX512F" in model.isa
    need = []
    if wide:
        need.append("avx512f")
    for feat, test in (("VAES", "vaes"), ("VPCLMULQDQ", "vpclmulqdq")):
        if feat in model.isa:
            need.append(f"{test}256")
            if model.max_vector_bits > 256:
                need.append(f"{test}512")
    return need


_TCG_MISSING = re.compile(r"TCG doesn't support requested feature: (\S+) \[bit")
_UNCAUGHT = re.compile(r"uncaught target signal (\d+)")


@dataclass(frozen=True)
class _Preflight:
    ok: bool
    reason: str | None = None


class QemuBackend:
    """qemu-user with an optional mix plugin (see the module docstring)."""

    name = "qemu"

    def __init__(
        self,
        qemu: str | None = None,
        *,
        use_plugin: bool = True,
        cache: Path | None = None,
    ) -> None:
        self._qemu_arg = qemu
        self._use_plugin = use_plugin
        self._cache = cache
        self._plugin_lock = threading.Lock()
        self._qemu: str | None = None
        self._version: str | None = None
        self._cpu_names: frozenset[str] | None = None
        self._preflight: dict[str, _Preflight] = {}
        self._plugin: Path | None = None
        self._plugin_reason: str | None = None
        self._plugin_checked = False
        self._tcg: dict[str, str] | None = None
        self._tcg_lock = threading.Lock()

    # -------------------------------------------------------- discovery --
    def qemu_path(self) -> str | None:
        if self._qemu is None:
            cand = self._qemu_arg or os.environ.get(QEMU_ENV) or QEMU_EXE
            found = shutil.which(cand)
            self._qemu = found or ""
        return self._qemu or None

    def unavailable_reason(self) -> str | None:
        if self.qemu_path() is None:
            cand = self._qemu_arg or os.environ.get(QEMU_ENV) or QEMU_EXE
            return Reason(
                f"{cand} not found (install Debian's qemu-user, or set {QEMU_ENV})", Kind.HOST_LIMIT
            )
        return None

    def _query(self, *args: str, no_core: bool = False) -> subprocess.CompletedProcess[str] | None:
        """Run qemu with `args`; `no_core` without core files (for runs where
        a SIGILL is an expected answer)."""
        qemu = self.qemu_path()
        if qemu is None:
            return None
        argv = [qemu, *args]
        if no_core:
            argv = ["/bin/sh", "-c", 'ulimit -c 0; exec "$@"', "qemu", *argv]
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=PREFLIGHT_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def version_number(self) -> str | None:
        """ "7.2.22" from ``qemu-x86_64 version 7.2.22 (Debian ...)``."""
        m = _VERSION_RE.search(self.version() or "")
        return m.group(1) if m else None

    def _qemu_label(self) -> str:
        return f"QEMU {self.version_number() or '(unknown version)'}"

    def tcg_support(self) -> dict[str, str]:
        """test name -> "ok" | "missing" (SIGILL under -cpu max) | "wrong"
        (ran, wrong result) | "unknown: why" for every TCG_TESTS entry, measured
        on this QEMU binary; cached in memory and in the cache directory per
        binary path, size and mtime."""
        with self._tcg_lock:
            if self._tcg is not None:
                return self._tcg
            self._tcg = self._measure_tcg()
            return self._tcg

    def _measure_tcg(self) -> dict[str, str]:
        qemu = self.qemu_path()
        if qemu is None:
            return {t: "unknown: no qemu" for t in TCG_TESTS}
        try:
            probe = build_tcg_probe(self._cache)
        except PluginBuildError as e:
            return {t: f"unknown: {e}" for t in TCG_TESTS}
        st = os.stat(qemu)
        key = f"{os.path.realpath(qemu)}:{st.st_size}:{st.st_mtime_ns}:{probe.name}"
        store = (self._cache or cache_dir()) / "qemu-tcg-support.json"
        try:
            known = json.loads(store.read_text())
        except (OSError, ValueError):
            known = {}
        if isinstance(known, dict) and isinstance(known.get(key), dict):
            return {t: str(known[key].get(t, "unknown: not measured")) for t in TCG_TESTS}
        out: dict[str, str] = {}
        for test in TCG_TESTS:
            p = self._query("-cpu", "max", str(probe), test, no_core=True)
            if p is None:
                out[test] = "unknown: did not run"
            elif p.returncode == 0 and p.stdout.strip() == "ok":
                out[test] = "ok"
            elif p.returncode == 1 and p.stdout.strip() == "wrong":
                out[test] = "wrong"
            elif _death_signal(p.returncode, p.stderr) == signal.SIGILL:
                out[test] = "missing"
            else:
                out[test] = f"unknown: exit {p.returncode}"
        if not any(v.startswith("unknown") for v in out.values()):
            known = known if isinstance(known, dict) else {}
            known[key] = out
            try:
                store.parent.mkdir(parents=True, exist_ok=True)
                tmp = store.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
                os.replace(tmp, store)
            except OSError:
                pass
        return out

    def version(self) -> str | None:
        if self._version is None:
            p = self._query("--version")
            first = p.stdout.splitlines()[0].strip() if p and p.stdout else ""
            self._version = first
        return self._version or None

    def cpu_names(self) -> frozenset[str]:
        """The names ``qemu-x86_64 -cpu help`` lists."""
        if self._cpu_names is None:
            p = self._query("-cpu", "help")
            names = set()
            for line in (p.stdout if p else "").splitlines():
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "x86":
                    names.add(parts[1])
            self._cpu_names = frozenset(names)
        return self._cpu_names

    # ------------------------------------------------------------ models --
    @staticmethod
    def cpu_spec(model: CpuModel) -> str:
        assert model.qemu_model
        return f"{model.qemu_model},enforce"

    def cannot_run(self, model: CpuModel) -> str | None:
        why = self.unavailable_reason()
        if why:
            return why
        need = tcg_tests_for(model)
        if need:
            support = self.tcg_support()
            how = {"missing": "lacks", "wrong": "computes wrongly"}
            bad = [
                f"{TCG_TESTS[t]} ({how.get(support[t], support[t])})"
                for t in need
                if support[t] != "ok"
            ]
            if bad:
                return (
                    f"{model.title} needs {', '.join(bad)}: measured on {self._qemu_label()} "
                    f"TCG under -cpu max ({self.qemu_path()})"
                )
        if not model.qemu_model:
            return f"no QEMU CPU model is configured for {model.title} (qemu_model: null)"
        base = model.qemu_model.split(",", 1)[0]
        names = self.cpu_names()
        if names and base not in names:
            return f"{QEMU_EXE} has no CPU model {base!r} (see `{QEMU_EXE} -cpu help`)"
        pf = self._preflight_for(model)
        return None if pf.ok else pf.reason

    def _preflight_for(self, model: CpuModel) -> _Preflight:
        """Does QEMU start with this spec and ``enforce``?  (TCG refuses a model
        feature it cannot emulate; the warnings name them.)"""
        spec = self.cpu_spec(model)
        pf = self._preflight.get(spec)
        if pf is not None:
            return pf
        true = shutil.which("true") or "/bin/true"
        p = self._query("-cpu", spec, true)
        if p is None:
            pf = _Preflight(False, f"{QEMU_EXE} -cpu {spec} did not start")
        elif p.returncode == 0:
            pf = _Preflight(True)
        else:
            missing = _TCG_MISSING.findall(p.stderr)
            if missing:
                names = [m.rsplit(".", 1)[-1] for m in missing]
                pf = _Preflight(
                    False,
                    f"QEMU TCG cannot provide {', '.join(names)} of -cpu {model.qemu_model} "
                    "(enforce); switch the irrelevant ones off in qemu_model, e.g. "
                    f"{model.qemu_model},-{names[0]}",
                )
            else:
                err = next((ln for ln in p.stderr.splitlines() if ln.strip()), "")
                pf = _Preflight(False, f"{QEMU_EXE} -cpu {spec} failed: {err[:200]}")
        self._preflight[spec] = pf
        return pf

    # ------------------------------------------------------------ plugin --
    def plugin(self) -> Path | None:
        """The mix plugin, built and smoke-tested once; None (see
        :meth:`plugin_problem`) when it cannot work here."""
        # Cells run on several threads: the first builds and smoke-tests the
        # plugin while the others wait, rather than seeing "checked" with no
        # plugin yet and running without a mix.
        with self._plugin_lock:
            if self._plugin_checked:
                return self._plugin
            if not self._use_plugin:
                self._plugin_reason = "mix plugin disabled"
            else:
                try:
                    so = build_plugin(self._cache)
                except PluginBuildError as e:
                    self._plugin_reason = str(e)
                else:
                    self._plugin_reason = self._smoke_test(so)
                    self._plugin = None if self._plugin_reason else so
            self._plugin_checked = True
            return self._plugin

    def plugin_problem(self) -> str | None:
        self.plugin()
        return self._plugin_reason

    def _smoke_test(self, so: Path) -> str | None:
        true = shutil.which("true") or "/bin/true"
        with tempfile.TemporaryDirectory(prefix="sdematrix-qemu-") as td:
            prefix = Path(td) / "smoke"
            p = self._query("-plugin", f"{so},out={prefix}", true)
            if p is None or p.returncode != 0:
                err = (p.stderr.strip().splitlines() or [""])[-1] if p else "did not start"
                return f"{QEMU_EXE} rejects the mix plugin: {err[:200]}"
            outs = [f for f in Path(td).glob("smoke.*") if not f.name.endswith(".last")]
            if not outs:
                return "the mix plugin wrote no output under qemu"
            try:
                parse_plugin_output(outs[0])
            except MixFileError as e:
                return f"the mix plugin's output is unreadable: {e}"
        return None

    # --------------------------------------------------------------- run --
    def command(self, model: CpuModel, probe: ProbeCommand, prefix: Path | None) -> list[str]:
        qemu = self.qemu_path()
        if qemu is None:
            raise RuntimeError(self.unavailable_reason() or "qemu missing")
        argv = [qemu, "-cpu", self.cpu_spec(model)]
        if prefix is not None and self.plugin() is not None:
            # QEMU's option syntax: a literal comma in a value is written ",,".
            so, out = (str(x).replace(",", ",,") for x in (self._plugin, prefix))
            argv += ["-plugin", f"{so},out={out}"]
        return argv + list(probe.argv)

    def _launch(
        self,
        result: RunResult,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> tuple[ProcessOutcome, Path, bool] | None:
        """Run the probe under QEMU, with the mix plugin when it works: (the
        process, the plugin's output prefix, whether the plugin ran); None (the
        reason in `result`) when QEMU cannot start."""
        workdir.mkdir(parents=True, exist_ok=True)
        prefix = workdir / f"{cell.name}.qemu"
        for stale in workdir.glob(f"{prefix.name}.*"):
            stale.unlink(missing_ok=True)
        argv = self.command(model, probe, prefix)
        plugin_on = "-plugin" in argv
        if not plugin_on:
            result.artifacts["plugin"] = f"not used: {self.plugin_problem()}"
        result.artifacts["command"] = " ".join(argv)
        env = probe.environment(os.environ)
        # No core files from a guest that dies of SIGILL (QEMU writes them).
        wrapped = ["/bin/sh", "-c", 'ulimit -c 0; exec "$@"', "qemu", *argv]
        try:
            proc = run_process(wrapped, env=env, cwd=workdir, timeout=timeout)
        except OSError as e:
            result.reason = f"cannot start {argv[0]}: {e.strerror or e}"
            return None
        return proc, prefix, plugin_on

    @staticmethod
    def _ended_by_exit(
        result: RunResult,
        proc: ProcessOutcome,
        model: CpuModel,
        probe: ProbeCommand,
        lasts: list[Path],
        plugin_on: bool,
        probe_problem: str | None,
    ) -> bool:
        """How the guest ended, when that settles the cell: a SIGILL (a chip-check
        violation, status ok), another fatal signal, or no probe report (the
        reason in `result`).  False when the run goes on to its mix."""
        sig = _death_signal(proc.returncode, proc.stderr)
        if sig == signal.SIGILL:
            last = _read_last(lasts)
            result.violations = [
                sigill_violation(model, last, probe.argv[0] if probe.argv else None, plugin_on)
            ]
            result.status = "ok"  # a chip-check verdict, not a crash
            return True
        if sig is not None:
            result.reason = f"the probe died of {signal.Signals(sig).name} under QEMU"
            if sig == signal.SIGTRAP and probe.argv:
                probed = host_uprobe(_read_last(lasts), probe.argv[0])
                if probed:
                    result.reason += f": {probed}"
            return True
        if result.probe is None:
            result.reason = f"{probe_problem} (exit code {proc.returncode})"
            return True
        return False

    def _plugin_mix(self, result: RunResult, model: CpuModel, outputs: list[Path]) -> bool:
        """The mix and chip check from the plugin's output files, into `result`;
        False (the reason in `result`) when they are unreadable, missing, or
        show an empty region."""
        try:
            runs = [parse_plugin_output(p) for p in outputs]
        except MixFileError as e:
            result.reason = f"bad QEMU plugin output: {e}"
            return False
        if not runs:
            result.reason = "the QEMU mix plugin wrote no output file"
            return False
        # The same chip check as ptrace: TCG runs some instructions a
        # model lacks without a fault (LZCNT as BSR on Westmere), so a
        # clean exit proves nothing; the executed bytes are checked.
        result.mix, result.violations = mix_from_plugin(
            runs, model=model, cpu_spec=self.cpu_spec(model)
        )
        if result.mix.meta["regions_started"] == 0:
            # An empty region is never evidence: the mix (total 0) is
            # kept for the report, the cell is an error.
            result.reason = (
                "the QEMU plugin saw no SSC start mark: the marked region is empty (scoped total 0)"
            )
            return False
        return True

    def run(
        self,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> RunResult:
        result = RunResult(backend=self.name, status="error", backend_version=self.version())
        why = self.cannot_run(model)
        if why:
            result.status = "skip"
            result.reason = why
            return result
        started = self._launch(result, cell, model, probe, workdir, timeout)
        if started is None:
            return result
        proc, prefix, plugin_on = started
        result.duration_s = proc.duration_s
        result.exit_code = proc.returncode
        result.stdout_tail = tail_lines(proc.stdout)
        result.stderr_tail = tail_lines(proc.stderr)
        try:
            result.probe = parse_probe_output(proc.stdout)
        except ProbeError as e:
            result.probe = None
            probe_problem: str | None = str(e)
        else:
            probe_problem = None

        if proc.timed_out:
            result.status = "timeout"
            result.reason = f"timed out after {timeout:g}s under {QEMU_EXE} -cpu {model.qemu_model}"
            return result
        if proc.flooded:
            result.reason = "output flood: the process was killed"
            return result

        outputs = sorted(p for p in workdir.glob(f"{prefix.name}.*") if p.suffix != ".last")
        lasts = sorted(workdir.glob(f"{prefix.name}.*.last"))
        for p in outputs + lasts:
            result.artifacts[p.name] = str(p)

        if self._ended_by_exit(result, proc, model, probe, lasts, plugin_on, probe_problem):
            return result
        if plugin_on and not self._plugin_mix(result, model, outputs):
            return result
        result.status = "ok"
        return result


# ---------------------------------------------------------------------------


def _death_signal(returncode: int | None, stderr: str) -> int | None:
    """The signal the guest died of: QEMU re-raises it on itself (negative
    return code); 128+N when a shell reports it; its message as a fallback."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    m = _UNCAUGHT.search(stderr)
    if m:
        return int(m.group(1))
    if returncode > 128 and returncode - 128 in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS):
        return returncode - 128
    return None


def _read_last(paths: Iterable[Path]) -> LastRecord | None:
    for p in paths:
        try:
            rec = parse_last_file(p)
        except MixFileError:
            continue
        if rec.insns:
            return rec
    return None


def sigill_violation(
    model: CpuModel, last: LastRecord | None, probe_exe: str | None, plugin_on: bool
) -> Violation:
    """Describe a SIGILL: the faulting instruction, decoded and located, and
    which of its features the model lacks."""
    base = f"SIGILL under {QEMU_EXE} -cpu {model.qemu_model}"
    if last is None:
        why = "fault location unknown: " + (
            "the plugin recorded none" if plugin_on else "the mix plugin is not in use"
        )
        return Violation(reason=f"{base} ({why})")
    li = last.insns[0]
    code = li.code
    image: str | None = None
    function = li.symbol
    in_probe = bool(probe_exe) and last.start_code <= li.address < last.end_code
    if in_probe:
        assert probe_exe is not None
        image = probe_exe
        if function is None:
            function = _elf_function(probe_exe, li.address, last.start_code)
    insn = decode(code, li.address)
    if in_probe and (insn.mnemonic == "INVALID" or insn.length > len(code)):
        # QEMU stops decoding where the model's ISA ends (an EVEX instruction
        # on a model without AVX-512 is one byte, 62, to it): read the whole
        # instruction from the executable instead.
        assert probe_exe is not None
        whole = _elf_bytes(probe_exe, li.address, last.start_code)
        if whole and whole.startswith(code):
            full = decode(whole, li.address)
            if full.mnemonic != "INVALID":
                insn, code = full, whole[: full.length]
    explain = chip_check(insn, model)
    return Violation(
        reason=f"{base}: {explain}" if explain else base,
        address=li.address,
        function=function,
        image=image,
        mnemonic=insn.mnemonic,
        bytes_hex=code.hex(" "),
    )


def host_uprobe(last: LastRecord | None, probe_exe: str) -> str | None:
    """Why a guest died of SIGTRAP when the host's kernel probes the probe
    (a uprobe: observability and security agents attach them): the kernel
    writes an int3 on the probed instruction into every mapping of the
    file, host and QEMU guest alike, and QEMU translates the guest's code
    from that memory, so the guest runs the kernel's int3.  None unless the
    last instruction run is an INT3 in the probe whose file holds another
    byte there."""
    if last is None or not last.insns or not last.insns[0].code.startswith(b"\xcc"):
        return None
    li = last.insns[0]
    if not last.start_code <= li.address < last.end_code:
        return None
    held = _elf_bytes(probe_exe, li.address, last.start_code, 1)
    if not held or held == b"\xcc":
        return None
    where = _elf_function(probe_exe, li.address, last.start_code) or f"{li.address:#x}"
    return (
        f"the host kernel probes {where} in {Path(probe_exe).name} (a uprobe's int3 where the"
        f" file holds {held.hex()}); QEMU runs the guest's code from that memory, so this host"
        " cannot run the probe under QEMU while the uprobe is attached"
    )


def _load_bias(path: str, start_code: int) -> int | None:
    """Run-time minus link-time address of the main image (a PIE's load
    address; 0 for a fixed-address executable).  QEMU's start_code is the
    relocated start of the lowest executable PT_LOAD segment.  (Its entry
    point is no help: for a dynamic executable it is the interpreter's.)"""
    try:
        with open(path, "rb") as fh:
            lows = [
                int(seg["p_vaddr"])
                for seg in ELFFile(fh).iter_segments()
                if seg["p_type"] == "PT_LOAD" and int(seg["p_flags"]) & 1  # PF_X
            ]
    except (OSError, ValueError, ELFError):
        return None
    return start_code - min(lows) if lows else None


def _elf_function(path: str, addr: int, start_code: int) -> str | None:
    img = load_image(path)
    bias = _load_bias(path, start_code)
    if img is None or bias is None:
        return None
    fn = img.function_at(addr - bias)
    return fn[0] if fn else None


def _elf_bytes(path: str, addr: int, start_code: int, n: int = 15) -> bytes | None:
    img = load_image(path)
    bias = _load_bias(path, start_code)
    if img is None or bias is None:
        return None
    off = img.offset_of_vaddr(addr - bias)
    if off is None:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(off)
            return fh.read(n)
    except OSError:
        return None


def _plugin_locator(run: PluginOutput) -> Locate:
    """Name an address of one guest process: its maps snapshot, else the
    symbol the plugin itself recorded for it."""
    sym = Symbolizer(run.maps)

    def locate(addr: int, code: bytes = b"") -> Location:
        loc = sym.locate(addr, code)
        if loc.image == "?" and run.symbols.get(addr):
            loc = Location("?", run.symbols[addr])
        return loc

    return locate


def _mapped_bytes(sym: Symbolizer, addr: int, n: int = 15) -> bytes | None:
    """Up to `n` bytes at guest address `addr`, read from the file mapped
    there (following the next mapping when it continues the same file)."""
    m = sym.mapping_at(addr)
    if m is None or not m.path.startswith("/"):
        return None
    end = m.hi
    nxt = sym.mapping_at(m.hi)
    if nxt is not None and nxt.path == m.path and nxt.offset == m.offset + (m.hi - m.lo):
        end = nxt.hi
    try:
        with open(m.path, "rb") as fh:
            fh.seek(m.offset + (addr - m.lo))
            return fh.read(min(n, end - addr))
    except OSError:
        return None


def _whole_code(sym: Symbolizer, addr: int, code: bytes) -> bytes:
    """The instruction's complete bytes.  QEMU 7.2 hands a plugin only the
    first page's part of an instruction that crosses a page boundary (e.g.
    ``0f`` of a ``0f 38 dc``...): such a record decodes as INVALID or as
    longer than its bytes, so it is re-read from the mapped file, when the
    file agrees with what QEMU saw."""
    insn = decode(code, addr)
    if insn.mnemonic != "INVALID" and insn.length <= len(code):
        return code
    whole = _mapped_bytes(sym, addr)
    if whole and whole.startswith(code):
        full = decode(whole, addr)
        if full.mnemonic != "INVALID" and full.length <= len(whole):
            return whole[: full.length]
    return code


def mix_from_plugin(
    runs: list[PluginOutput], *, model: CpuModel | None = None, cpu_spec: str = ""
) -> tuple[Mix, list[Violation]]:
    """Decode and symbolise the plugin's counts into a Mix (source "qemu"),
    chip-checked against `model` by the check ptrace uses
    (:func:`sdematrix.evidence.mix_build.checked_mix`)."""
    executed: list[Executed] = []
    for run in runs:
        locate = _plugin_locator(run)
        sym = Symbolizer(run.maps)
        executed += (
            Executed(addr, _whole_code(sym, addr, code), count, locate)
            for (addr, code), count in sorted(run.counts.items())
        )
    mix, violations = checked_mix("qemu", executed, model)
    starts = sum(r.starts for r in runs)
    stops = sum(r.stops for r in runs)
    mix.meta = {
        "backend": "qemu",
        "cpu": cpu_spec,
        "pids": [r.pid for r in runs],
        "regions_started": starts,
        "regions_stopped": stops,
        "warnings": [w for r in runs for w in r.warnings],
    }
    return mix, violations
