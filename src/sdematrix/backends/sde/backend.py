"""The Intel SDE backend: run the probe under ``sde64 -<chip> -mix ...``.

Discovery order: the ``--sde-path`` given to the constructor, then the ``SDE_PATH``
environment variable, then ``sde64`` on ``PATH``.  A path may name the ``sde64``
executable or the SDE kit directory that holds it.

One cell is one command::

    sde64 -<chip> -mix -omix <workdir>/<cell>.mix -iform \\
          -start_ssc_mark 111:repeat -stop_ssc_mark 222:repeat \\
          [-chip_check_exe_only] -- <probe argv>

SDE's chip check stops the program at the first instruction the chip lacks and
prints ``SDE-ERROR: Executed instruction not valid for specified chip (CHIP): ...``
followed by lines naming the image, function and instruction bytes; those become
:class:`~sdematrix.backends.base.Violation` rows (a verdict, not a crash).

Child processes run through :func:`sdematrix.backends.process.run_process`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import MixFileError, SdeMatrixError
from ...evidence.sde_mix import parse_mix_file
from ...spec.models import Cell, CpuModel
from ...verdict.reasons import Kind, Reason
from ..base import ProbeCommand, RunResult, Violation
from ..process import FLOOD_LIMIT, run_process, tail_lines

__all__ = ["SdeBackend", "parse_chip_check"]

SDE_EXE = "sde64"
START_MARK = "111:repeat"
STOP_MARK = "222:repeat"


def find_probe_json(stdout: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the probe's validated JSON report, None) or (None, why not)."""
    from ..probe import parse_probe_output

    try:
        return parse_probe_output(stdout), None
    except SdeMatrixError as e:
        return None, str(e)


# --------------------------------------------------------------------------
# Chip-check output
# --------------------------------------------------------------------------

_CHIP_ERR = re.compile(
    r"SDE-ERROR:\s*Executed instruction not valid for specified chip"
    r"(?:\s*\((?P<chip>[^)]*)\))?:?\s*(?P<rest>.*)$"
)
_ADDR = re.compile(r"\b0x([0-9a-fA-F]+)\b")
_IMAGE = re.compile(r"^\s*Image:\s*(?P<img>[^\s+(]+)(?:\+0x(?P<off>[0-9a-fA-F]+))?")
_FUNC = re.compile(r"^\s*Function:\s*(?P<fn>.+?)\s*$")
_BYTES = re.compile(r"^\s*Instruction bytes(?: are)?:\s*(?P<b>[0-9a-fA-F ]+)\s*$")
_MNEMONIC = re.compile(r"^(?:0x[0-9a-fA-F]+:?\s*)?(?P<m>[a-zA-Z][a-zA-Z0-9_.]*)")


def parse_chip_check(text: str) -> list[Violation]:
    """Every chip-check error in SDE's output, with what the following lines tell."""
    out: list[Violation] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _CHIP_ERR.search(line)
        if not m:
            continue
        chip = (m["chip"] or "").strip()
        rest = m["rest"].strip()
        address: int | None = None
        am = _ADDR.search(rest)
        if am:
            address = int(am.group(1), 16)
        mnemonic = None
        mm = _MNEMONIC.match(rest)
        if mm:
            mnemonic = mm["m"].upper()
        image = function = bytes_hex = None
        for follow in lines[i + 1 : i + 8]:
            if _CHIP_ERR.search(follow):
                break
            if image is None and (im := _IMAGE.match(follow)):
                image = im["img"]
            elif function is None and (fm := _FUNC.match(follow)):
                function = fm["fn"]
            elif bytes_hex is None and (bm := _BYTES.match(follow)):
                bytes_hex = " ".join(bm["b"].split()).lower()
            elif address is None and (am2 := _ADDR.search(follow)):
                address = int(am2.group(1), 16)
        reason = f"not valid for chip {chip}" if chip else "not valid for the specified chip"
        if rest:
            reason += f": {rest[:160]}"
        out.append(
            Violation(
                reason=reason,
                address=address,
                function=function,
                image=image,
                mnemonic=mnemonic,
                bytes_hex=bytes_hex,
            )
        )
    return out


# --------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------

_VERSION = re.compile(r"Version:\s*(?P<v>[0-9][^\s]*(?:\s+external)?)", re.IGNORECASE)
# One chip knob per line of `sde64 -help`, e.g.
#   "     -spr                Set chip-check and CPUID for Intel(R) Sapphire Rapids CPU"
_CHIP_KNOB = re.compile(
    r"^\s*-(?P<chip>[A-Za-z0-9_]+)\s+Set chip-check and CPUID for", re.MULTILINE
)


def parse_chip_knobs(help_text: str) -> set[str]:
    """The chip names an SDE's -help output offers (empty: none recognised)."""
    return {m["chip"] for m in _CHIP_KNOB.finditer(help_text)}


class SdeBackend:
    name = "sde"

    def __init__(
        self,
        sde_path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._explicit = str(sde_path) if sde_path else None
        self._environ = dict(os.environ if environ is None else environ)
        self._answers: dict[str, str | None] = {}  # "-version" / "-help" -> output

    # discovery ------------------------------------------------------------
    def executable(self) -> Path | None:
        """The sde64 to use, or None."""
        for cand in (self._explicit, self._environ.get("SDE_PATH")):
            if cand:
                p = Path(cand).expanduser()
                if p.is_dir():
                    p = p / SDE_EXE
                return p if (p.is_file() and os.access(p, os.X_OK)) else None
        found = shutil.which(SDE_EXE, path=self._environ.get("PATH", os.defpath))
        return Path(found) if found else None

    def unavailable_reason(self) -> str | None:
        exe = self.executable()
        if exe is not None:
            return None
        for label, cand in (
            ("--sde-path", self._explicit),
            ("SDE_PATH", self._environ.get("SDE_PATH")),
        ):
            if cand:
                return Reason(  # a path the user gave that is wrong: not the host's limit
                    f"Intel SDE not found at {cand} (from {label}): no executable {SDE_EXE} there",
                    Kind.BACKEND_ERROR,
                )
        return Reason(
            f"Intel SDE not installed (set SDE_PATH or put {SDE_EXE} on PATH)", Kind.HOST_LIMIT
        )

    def _ask(self, flag: str) -> str | None:
        """stdout + stderr of `sde64 <flag>`, run once per backend object;
        None without an SDE or when it cannot be started."""
        if flag not in self._answers:
            exe = self.executable()
            try:
                res = (
                    run_process([str(exe), flag], env=self._environ, timeout=60)
                    if exe is not None
                    else None
                )
            except OSError:
                res = None
            self._answers[flag] = None if res is None else res.stdout + "\n" + res.stderr
        return self._answers[flag]

    def version(self) -> str | None:
        text = self._ask("-version")
        if text is None:
            return None
        m = _VERSION.search(text)
        if m:
            return m["v"]
        first = text.strip().splitlines()
        return first[0][:80] if first else None

    def chip_knobs(self) -> set[str] | None:
        """The chip knobs this SDE offers, from its -help; None when the list
        cannot be read (no SDE, or help text in an unknown format): then
        nothing is refused up front and SDE itself has the last word."""
        text = self._ask("-help")
        return (parse_chip_knobs(text) or None) if text is not None else None

    def cannot_run(self, model: CpuModel) -> str | None:
        if model.sde_chip is None:
            return f"SDE has no chip model for {model.name} ({model.title})"
        chips = self.chip_knobs()
        if chips is not None and model.sde_chip not in chips:
            # An older SDE than the matrix expects (e.g. no -dmr): say so
            # instead of letting every cell of the model die on "unknown knob".
            return (
                f"SDE {self.version() or '(unknown version)'} has no -{model.sde_chip} chip "
                f"knob for {model.name} ({model.title}); its -help lists {len(chips)} chips"
            )
        return None

    # one cell ------------------------------------------------------------
    def mix_path(self, cell: Cell, workdir: Path) -> Path:
        return workdir / f"{cell.name}.mix"

    def command(self, cell: Cell, model: CpuModel, probe: ProbeCommand, workdir: Path) -> list[str]:
        exe = self.executable()
        if exe is None:
            raise RuntimeError(self.unavailable_reason() or "SDE unavailable")
        if model.sde_chip is None:
            raise ValueError(f"model {model.name} has no SDE chip")
        argv = [
            str(exe),
            f"-{model.sde_chip}",
            "-mix",
            "-omix",
            str(self.mix_path(cell, workdir)),
            "-iform",
            "-start_ssc_mark",
            START_MARK,
            "-stop_ssc_mark",
            STOP_MARK,
        ]
        if model.chip_check_exe_only:
            argv.append("-chip_check_exe_only")
        argv.append("--")
        argv.extend(probe.argv)
        return argv

    def run(
        self,
        cell: Cell,
        model: CpuModel,
        probe: ProbeCommand,
        workdir: Path,
        timeout: float,
    ) -> RunResult:
        version = self.version()
        result = RunResult(backend=self.name, status="error", backend_version=version)
        try:
            argv = self.command(cell, model, probe, workdir)
        except (RuntimeError, ValueError) as e:
            result.status = "skip"
            result.reason = str(e)
            return result
        mix_file = self.mix_path(cell, workdir)
        try:
            mix_file.unlink()
        except FileNotFoundError:
            pass
        env = probe.environment(self._environ)
        result.artifacts["command"] = " ".join(argv)
        try:
            proc = run_process(argv, env=env, cwd=workdir, timeout=timeout)
        except OSError as e:
            result.reason = f"cannot start {argv[0]}: {e.strerror or e}"
            return result
        result.duration_s = proc.duration_s
        result.exit_code = proc.returncode
        result.stdout_tail = tail_lines(proc.stdout)
        result.stderr_tail = tail_lines(proc.stderr)
        result.probe, probe_problem = find_probe_json(proc.stdout)
        result.violations = parse_chip_check(proc.stderr + "\n" + proc.stdout)

        if proc.timed_out:
            result.status = "timeout"
            result.reason = f"timed out after {timeout:g}s under SDE -{model.sde_chip}"
            return result
        if proc.flooded:
            result.reason = (
                f"output flood: more than {FLOOD_LIMIT >> 20} MiB on one stream, process killed"
            )
            return result
        if mix_file.exists():
            result.artifacts["mix"] = str(mix_file)
            try:
                result.mix = parse_mix_file(mix_file)
            except MixFileError as e:
                if not result.violations:
                    result.reason = f"bad mix file: {e}"
                    return result
        if result.violations:
            # The chip check aborted the program: a verdict, not a crash.
            result.status = "ok"
            return result
        if result.probe is None:
            rc = proc.returncode
            how = f"exit code {rc}" if rc is not None and rc >= 0 else f"signal {-(rc or 0)}"
            result.reason = f"{probe_problem} ({how})"
            return result
        if result.mix is None:
            result.reason = f"SDE wrote no mix file ({mix_file.name})"
            return result
        if result.mix.overall.total == 0:
            # The marks never ran (or nothing ran between them): an empty
            # region is no evidence.  The mix (total 0) stays for the report.
            result.reason = (
                f"SDE counted no instruction between the marks ({START_MARK} .. {STOP_MARK}): "
                "the marked region is empty (scoped total 0)"
            )
            return result
        result.status = "ok"
        return result
