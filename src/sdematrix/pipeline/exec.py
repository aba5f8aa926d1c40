"""The ``sdematrix exec`` command: options parsed by :mod:`sdematrix.cli.main`
(shared with ``run`` through :mod:`sdematrix.cli.options`), runs by
:mod:`sdematrix.pipeline.exec_run`, verdicts by :mod:`sdematrix.verdict.exec_judge`, files by
:mod:`sdematrix.results.writer` (as ``run``'s) and reports by :mod:`sdematrix.report.exec_html`.

* ``--jobs N``: up to N models run at once (one traced process each; the
  images a run maps at run time are shared through the plan, under a lock);
* ``--allow-skip``: a model the backend cannot present on this host (the
  ptrace tracer on a host without the model's features, SDE without a chip
  for it) is skipped, named with the backend's reason; without it that model
  is an error (what you name must run);
* ``--models FILE``: the models come from a models-only YAML file
  (:mod:`sdematrix.spec.models_file`);
* ``--report DIR``: report.html and summary.md of the run (also
  ``$GITHUB_STEP_SUMMARY`` when set);
* ``--backend sde --print-command``: prints the SDE command lines, whether or
  not SDE is installed (``sde64`` stands for a missing one).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import EXIT_FAILED, EXIT_OK, BackendUnavailableError, SdeMatrixError
from ..spec.models import Matrix
from ..verdict.reasons import Kind, Reason

PROG = "sdematrix"


class ExecUsageError(SdeMatrixError):
    """Bad exec arguments (exit 2)."""


def _program(args: argparse.Namespace) -> list[str]:
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise ExecUsageError("exec: no program given (sdematrix exec --cpu MODELS -- PROG ARGS...)")
    return prog


def load_exec_matrix(args: argparse.Namespace) -> Matrix:
    """--models FILE (models only) or --matrix FILE (a whole matrix file)."""
    if args.models:
        if args.matrix:
            raise ExecUsageError("--models and --matrix exclude each other")
        from ..spec.models_file import load_models_matrix

        return load_models_matrix(args.models)
    from ..spec.matrix_arg import load_matrix_arg

    return load_matrix_arg(args.matrix)


def cmd_exec(args: argparse.Namespace) -> int:
    from ..spec.exec_expect import load_expectations
    from ..spec.matrix_file import select_cpus
    from .exec_run import parse_region

    prog = _program(args)
    if not args.cpu:
        raise ExecUsageError("exec: --cpu is required (model names, or all)")
    matrix = load_exec_matrix(args)
    cpus = select_cpus(matrix, args.cpu)
    regions = [parse_region(r) for r in args.region or []]
    exps = load_expectations(args.expect, matrix) if args.expect else []
    if args.backend == "sde":
        return _exec_sde(args, matrix, cpus, prog, regions)
    if args.print_command:
        raise ExecUsageError("--print-command prints SDE command lines: give --backend sde")
    return _exec_ptrace(args, matrix, cpus, prog, regions, exps)


def _print_overrides() -> None:
    """Once the run is sure to start, before any model: the variables of
    this environment (which the program inherits) that override a library's
    CPU dispatch.  They change no verdict -- the chip check judges what ran
    -- but a violation they cause has its reason here, not in the program's
    dispatcher."""
    from ..spec.dispatch_env import dispatch_overrides

    for o in dispatch_overrides(os.environ):
        print(f"{PROG} exec: note: {o.note()}", file=sys.stderr)


def _exec_ptrace(
    args: argparse.Namespace,
    matrix: Matrix,
    cpus: list[str],
    prog: list[str],
    regions: list[Any],
    exps: list[Any],
) -> int:
    from ..backends.ptrace.backend import PtraceBackend
    from ..verdict.exec_judge import ExecOutcome, judge_exec, summary_line
    from .exec_run import ExecError, ExecPlan, discover_images, parse_region, read_stdin, run_model
    from .exec_run import workdir as make_workdir

    plan = ExecPlan(
        argv=prog,
        regions=regions,
        cpuid_mode=args.cpuid_mode,
        timeout=args.timeout,
        jit_converge=args.jit_converge,
    )
    backend = PtraceBackend(cpuid_mode=args.cpuid_mode)
    why_not = {c: backend.cannot_run(matrix.models[c]) for c in cpus}
    runnable = [c for c in cpus if why_not[c] is None]
    missing = plan.missing_symbols()
    if missing and runnable:  # maybe in an image the program dlopens: run it once to see
        plan.stdin = read_stdin()
        discover_images(plan, matrix.models[runnable[0]], make_workdir(None))
        missing = plan.missing_symbols()
    if missing:
        raise ExecError(
            f"no image of {plan.exe} defines function {missing[0]!r} "
            f"(searched the {len(plan.images)} images it maps)"
        )
    if not regions:
        plan.regions = [parse_region("marks" if plan.has_marks() else "whole")]
    if plan.stdin is None:
        plan.stdin = read_stdin()
    out = Path(args.out) if args.out else None
    work = make_workdir(out)
    allow_exit = set(args.allow_exit or [])
    outcomes: dict[str, ExecOutcome] = {}
    lock = threading.Lock()

    def one(cpu: str) -> None:
        model = matrix.models[cpu]
        why = why_not[cpu]
        if why is not None:
            status = "skip" if args.allow_skip else "error"
            o = ExecOutcome(
                model=cpu,
                status=status,
                reasons=[Reason(f"cannot run here (ptrace): {why}", Kind.CANNOT_RUN)],
            )
        else:
            res = run_model(plan, model, work)
            o = judge_exec(res, model, exps, allow_exit)
        with lock:
            outcomes[cpu] = o
            if out is None and o.result is not None:
                sys.stdout.buffer.write(o.result.stdout)
                sys.stdout.flush()
                sys.stderr.buffer.write(o.result.stderr)
            print(f"{PROG} exec: " + summary_line(o), file=sys.stderr, flush=True)

    _print_overrides()  # after every check that can refuse the run (one-line errors)
    with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(cpus)))) as pool:
        for f in [pool.submit(one, c) for c in cpus]:
            f.result()
    ordered = [outcomes[c] for c in cpus]
    _write_outputs(args, out, ordered, prog, exps)
    return EXIT_OK if all(o.status in ("pass", "skip") for o in ordered) else EXIT_FAILED


def _write_outputs(
    args: argparse.Namespace,
    out: Path | None,
    outcomes: list[Any],
    prog: list[str],
    exps: list[Any],
) -> None:
    from ..report.exec_html import write_exec_reports
    from ..results.writer import write_exec_junit, write_exec_results

    junit = Path(args.junit) if args.junit else None
    if out is not None:  # the JUnit file is written once, at --junit if given
        write_exec_results(out, outcomes, prog, exps, junit_path=junit)
    elif junit is not None:
        write_exec_junit(junit, outcomes, prog)
    if args.report or os.environ.get("GITHUB_STEP_SUMMARY"):
        try:
            files = write_exec_reports(
                outcomes, prog, Path(args.report) if args.report else None, exps
            )
        except OSError as e:
            print(f"{PROG}: warning: report not written: {e.strerror or e}", file=sys.stderr)
            return
        if files:
            print(f"report: {files[0]}", file=sys.stderr)


def _print_only_sde(sde_path: str | None) -> Any:
    """An SdeBackend for --print-command whose missing sde64 is written as
    ``sde64`` (the command is shown, not run)."""
    from ..backends.sde.backend import SdeBackend

    class PrintOnlySde(SdeBackend):
        def executable(self) -> Path | None:
            return super().executable() or Path("sde64")

    return PrintOnlySde(sde_path=sde_path)


def _exec_sde(
    args: argparse.Namespace, matrix: Matrix, cpus: list[str], prog: list[str], regions: list[Any]
) -> int:
    """--backend sde: the same run under SDE (--print-command: only show it)."""
    from ..backends.sde.backend import SdeBackend
    from .exec_run import sde_command, workdir

    sde = SdeBackend(sde_path=args.sde_path)
    absent = sde.unavailable_reason()
    if absent and not args.print_command:
        raise BackendUnavailableError(absent)
    if absent:
        print(f"{PROG} exec: {absent}: printing the commands with 'sde64' for it", file=sys.stderr)
    builder: Any = _print_only_sde(args.sde_path) if absent else sde
    out = Path(args.out) if args.out else None
    work = workdir(out)
    allow_exit = set(args.allow_exit or [])
    cmds: list[tuple[str, list[str] | None, str | None]] = []
    for cpu in cpus:
        model = matrix.models[cpu]
        why = (
            sde.cannot_run(model)
            if not absent
            else (None if model.sde_chip else f"SDE has no chip model for {cpu}")
        )
        if why:
            if not args.allow_skip:
                raise BackendUnavailableError(why)
            cmds.append((cpu, None, why))
            continue
        cmds.append((cpu, sde_command(builder, model, prog, regions, work), None))
    _print_overrides()
    failed = False
    lock = threading.Lock()

    def one(item: tuple[str, list[str] | None, str | None]) -> None:
        nonlocal failed
        cpu, cmd, why = item
        if cmd is None:
            print(f"{PROG} exec: {cpu}: SKIP: {why}", file=sys.stderr, flush=True)
            return
        print(f"{PROG} exec: {cpu}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        if args.print_command:
            return
        rc = subprocess.run(cmd, check=False).returncode
        with lock:
            failed |= rc != 0 and rc not in allow_exit

    if args.print_command:
        for item in cmds:
            one(item)
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(cmds) or 1))) as pool:
            for f in [pool.submit(one, it) for it in cmds]:
                f.result()
    return EXIT_FAILED if failed else EXIT_OK
