"""The ``sdematrix`` command line.

Sub-commands::

    sdematrix run [--matrix FILE] [--cpu spr,icl,...] [--backend auto|sde|ptrace|qemu]
                  [--cpuid-mode auto|fault|bp] [--allow-skip]
                  [--sde-path PATH] [--junit FILE] [--out DIR] [--jobs N]
                  [--timeout S] [--seed N]
    sdematrix list-cpus [--matrix FILE] [--github-matrix [--shards N]]
    sdematrix explain CPU [--matrix FILE]
    sdematrix doctor [--matrix FILE] [--sde-path PATH] [--json]   # backends usable here
    sdematrix mix FILE [--json]     # an SDE mix file: a summary (--json: all, normalised)
    sdematrix exec --cpu MODELS [--models FILE] [--region R] [--expect F] [--junit F]
                   [--out DIR] [--report DIR] [--jobs N] [--allow-skip] [--allow-exit N]
                   [--jit-converge N]
                   [--backend auto|ptrace|sde] [--sde-path P] [--print-command]
                   -- PROG ARGS...

The options run, exec, docker run and the pytest plugin share are defined
once, in :mod:`sdematrix.cli.options` (same spelling, default and help).

``--matrix`` defaults to ``./sde_matrix.yaml`` when it exists, else the copy
shipped inside the package.

What you name must run: with ``--cpu`` or ``--backend`` given, a cell that no
backend can run on this host is an error (exit 1), unless ``--allow-skip``; a
default run skips it and the summary says, one line per reason, how many cells
could not run and why.

Exit codes: 0 every cell passed (skips allowed); 1 some cell failed or errored;
2 bad input (unreadable/invalid YAML, unknown CPU, unavailable backend, a
probe that cannot run -- ``$SDEMATRIX_PROBE`` missing, a directory or not
executable --, unwritable output, bad arguments, corrupt mix file); 130
interrupted (SIGINT / SIGTERM, in any phase; once cells have run, JUnit and
results for the finished cells are still written); 3 an unexpected internal
error (one line; set ``SDEMATRIX_DEBUG=1`` for the traceback).  Every error is
one line ``sdematrix: error: ...`` on stderr.

``list-cpus`` shows per model the expected path of each mode: one column when
both directions expect the same path on every model, else one per direction
(``cfb128/enc``, ``cfb128/dec``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .. import __version__
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BackendUnavailableError,
    MatrixFileError,
    SdeMatrixError,
)
from ..spec.matrix_arg import load_matrix_arg, matrix_path
from ..spec.models import DIRECTIONS, MODES, Matrix
from . import options, signals

if TYPE_CHECKING:
    from ..backends.registry import BackendSelector
    from ..pipeline.run import CellRecord, RunReport
    from ..results.writer import ResultsWriter

__all__ = ["EXIT_INTERNAL", "main"]

EXIT_INTERNAL = 3
PROG = "sdematrix"
DEFAULT_OUT = "sdematrix-results"
DEFAULT_TIMEOUT = options.DEFAULT_TIMEOUT


class _UsageError(SdeMatrixError):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


_number_arg = options.number_arg  # one definition of the number checks
_positive_int = options.positive_int
_positive_float = options.positive_float
_nonneg_float = _number_arg(float, lambda v: v >= 0, "must be >= 0", "a number")
_seed = _number_arg(
    lambda t: int(t, 0),
    lambda v: 0 <= v < 1 << 64,
    "must be a 64-bit unsigned integer",
    "an integer",
)


def _table(rows: list[dict[str, Any]]) -> str:
    """Rows of dicts as an aligned text table (columns in first-seen order)."""
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    cells = [[("-" if r.get(c) is None else str(r.get(c, ""))) for c in cols] for r in rows]
    widths = [max(len(x) for x in [c, *(row[i] for row in cells)]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def _emit(value: Any) -> None:
    if isinstance(value, str):
        sys.stdout.write(value if value.endswith("\n") else value + "\n")
    else:
        sys.stdout.write(json.dumps(value, indent=1) + "\n")


# --------------------------------------------------------------------------
# Summary table
# --------------------------------------------------------------------------

_RANK = {"error": 3, "fail": 2, "pass": 1, "skip": 0}


def _symbols() -> dict[str, str]:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    if "utf" in enc:
        return {"pass": "✓", "fail": "✗", "error": "!", "skip": "-"}
    return {"pass": "ok", "fail": "X", "error": "!", "skip": "-"}


def summary_table(report: Any) -> str:
    """CPU x (mode, direction): the path that ran and a pass/fail symbol,
    worst status over the cell's workloads."""
    sym = _symbols()
    cols = [(m, d) for m in MODES for d in DIRECTIONS]
    heads = [f"{m}/{d[:3]}" for m, d in cols]
    grid: dict[tuple[str, str, str], list[Any]] = {}
    for rec in report.records:
        c = rec.cell
        grid.setdefault((c.cpu, c.mode, c.direction), []).append(rec.outcome)
    cpus = list(dict.fromkeys(c.cpu for c in report.cells))
    rows: list[list[str]] = []
    for cpu in cpus:
        row = [cpu]
        for m, d in cols:
            outs = grid.get((cpu, m, d), [])
            if not outs:
                row.append("")
                continue
            worst = max(outs, key=lambda o: _RANK[o.status])
            ran = [o.path for o in outs if o.path]
            path = ran[0] if ran else (worst.expected_path or "")
            if worst.status == "fail" and worst.path and worst.path != worst.expected_path:
                path = f"{worst.path}!={worst.expected_path}"
            row.append(f"{sym[worst.status]} {path}".rstrip())
        rows.append(row)
    header = ["cpu", *heads]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    counts = {s: report.count(s) for s in ("pass", "fail", "error", "skip")}
    tail = (
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors, "
        f"{counts['skip']} skipped"
    )
    if report.not_run:
        tail += f", {len(report.not_run)} not run (interrupted)"
    lines.append(tail + f" in {report.duration_s:.1f}s")
    for why, cpus, n in report.unrunnable():
        what = "error" if report.strict else "skipped"
        lines.append(
            f"could not run here ({what}): {n} cell{'s' if n != 1 else ''} "
            f"of {', '.join(cpus)}: {why}"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Sub-commands
# --------------------------------------------------------------------------


def _print_host_gaps(matrix: Any, cpus: list[str], selector: Any) -> None:
    """Run header: per model run natively (ptrace), what its CPUID advertises
    that this host cannot execute (sdematrix.backends.host_isa)."""
    from ..backends.host_isa import host_lacks

    for cpu in cpus:
        ch = selector.choose(matrix.models[cpu])
        lacks = host_lacks(matrix.models[cpu]) if ch.backend and ch.backend.name == "ptrace" else []
        if lacks:
            print(
                f"{PROG} run: {cpu}: host cannot execute {', '.join(lacks)} (model {cpu} "
                "advertises it; the probe needs none of them, a program that runs one dies "
                "of SIGILL: an error)",
                file=sys.stderr,
            )


def _print_mask_dropped() -> None:
    """Run header: a VAESCRYPT_CPU_MASK in the caller's environment is not
    passed to the probe (ProbeCommand.environment); say so, once."""
    from ..spec.dispatch_env import mask_not_passed

    said = mask_not_passed(os.environ)
    if said:
        print(f"{PROG} run: {said}", file=sys.stderr)


@dataclass
class _RunPlan:
    """What `run` settled before any cell: the matrix, the models, the backends
    and where the results go."""

    strict: bool
    matrix: Matrix
    cpus: list[str]
    selector: BackendSelector
    out: Path
    junit_path: Path | None


def _plan_run(args: argparse.Namespace) -> _RunPlan:
    """Every check a run can fail before it starts (exit 2), in this order."""
    from ..backends.probe import probe_path
    from ..backends.registry import BackendSelector
    from ..results.junit import prepare_out_dir
    from ..spec.matrix_file import select_cpus

    strict = _strict(args)
    matrix = load_matrix_arg(args.matrix)
    cpus = select_cpus(matrix, args.cpu) if args.cpu else list(matrix.models)
    selector = BackendSelector(
        matrix, args.backend or "auto", sde_path=args.sde_path, cpuid_mode=args.cpuid_mode
    )
    if args.sde_path and "sde" in selector.unavailable:
        raise BackendUnavailableError(f"--sde-path: {selector.unavailable['sde']}")
    # A probe that cannot run would make every cell an error: refuse the run
    # now (ProbeError, exit 2) instead, naming $SDEMATRIX_PROBE and what is wrong.
    probe_path()
    _print_host_gaps(matrix, cpus, selector)
    _print_mask_dropped()
    out = Path(args.out)
    prepare_out_dir(out)
    return _RunPlan(strict, matrix, cpus, selector, out, _junit_path(args))


class _RunHooks:
    """run_cells' hooks for `run`: the results writer, made once the report's
    metadata is known, fed every finished cell; and the signals deferred
    meanwhile, raised at the first hook call after they came."""

    def __init__(
        self, out: Path, junit_path: Path | None, keep_work: bool, pending: list[int]
    ) -> None:
        self.out = out
        self.junit_path = junit_path
        self.keep_work = keep_work
        self.pending = pending
        self.writer: ResultsWriter | None = None

    def start(self, rep: RunReport) -> None:
        from ..results.writer import ResultsWriter

        w = ResultsWriter(self.out, rep, junit_path=self.junit_path, keep_work=self.keep_work)
        w.begin()
        self.writer = w
        signals.raise_pending(self.pending)  # a signal before the first cell: stop now

    def idle(self) -> None:
        signals.raise_pending(self.pending)  # one that came before the runner's handler
        assert self.writer is not None  # start() came first
        self.writer.maybe_flush()

    def record(self, rec: CellRecord) -> None:
        assert self.writer is not None  # start() came first
        self.writer.add(rec)
        if rec.result is not None:
            rec.result.mix = None  # written: 500 full mixes held to the end cost ~0.5 GB


def _print_run_end(out: Path, report: RunReport, junit_path: Path | None) -> int:
    """The summary table, where the results are, and the exit code."""
    sys.stdout.write(summary_table(report))
    sys.stdout.write(f"results: {out}/results.json  junit: {junit_path or out / 'junit.xml'}\n")
    sys.stdout.flush()
    if report.interrupted:
        print(f"{PROG}: error: interrupted; results for finished cells written", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    from ..pipeline.progress import Progress
    from ..pipeline.run import run_cells

    plan = _plan_run(args)
    cells = plan.matrix.cells(plan.cpus)
    progress = Progress(len(cells))

    # Every finished cell is written as it finishes; a signal from here to
    # the end of the final write is only recorded (the runner has its own
    # handler while cells run), so results.json and the JUnit file always
    # end up complete for the cells that finished.
    with signals.deferred() as pending:
        hooks = _RunHooks(plan.out, plan.junit_path, getattr(args, "keep_work", False), pending)
        try:
            report = run_cells(
                plan.matrix,
                cells,
                plan.selector,
                workdir=plan.out / "work",
                jobs=args.jobs,
                timeout=args.timeout,
                seed=args.seed,
                progress=progress,
                strict=plan.strict,
                on_start=hooks.start,
                on_record=hooks.record,
                on_idle=hooks.idle,
            )
        except KeyboardInterrupt:
            if hooks.writer is not None:
                hooks.writer.report.interrupted = True
                hooks.writer.finish()
            raise
        t0 = time.monotonic()
        assert hooks.writer is not None  # run_cells calls on_start before any cell
        hooks.writer.finish()
        progress.note(f"{PROG}: results written ({time.monotonic() - t0:.1f} s)")
    if pending and not report.interrupted:
        signals.raise_pending(pending)
    _write_run_reports(plan.out, args.report, progress)
    return _print_run_end(plan.out, report, plan.junit_path)


def _junit_path(args: argparse.Namespace) -> Path | None:
    """--junit, proven writable now: fail before the run, not after it."""
    if not args.junit:
        return None
    path = Path(args.junit)
    write_probe = path.parent / f".{path.name}.write-test"
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_probe.write_text("")
        write_probe.unlink()
    except OSError as e:
        _junit_error(path, e)
    return path


def _junit_error(path: Path, e: OSError) -> NoReturn:
    from ..errors import OutputDirError

    raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def _strict(args: argparse.Namespace) -> bool:
    """Whether cells no backend can run are errors: the user named CPUs or a
    backend (what you name must run) and did not say --allow-skip.  A default
    run may skip what this host cannot run; --allow-skip there has nothing to
    allow and is refused (exit 2)."""
    named = bool(args.cpu) or args.backend not in (None, "auto")
    if args.allow_skip and not named:
        raise _UsageError(
            "--allow-skip has nothing to allow without --cpu or --backend "
            "(a default run already skips what this host cannot run)"
        )
    return named and not args.allow_skip


def _write_run_reports(out: Path, report_dir: str | None, progress: Any = None) -> None:
    """HTML + markdown after a run (and $GITHUB_STEP_SUMMARY when set).  A
    report problem is a warning: it never changes the run's exit code."""
    from ..report import write_reports

    if report_dir is None and not os.environ.get("GITHUB_STEP_SUMMARY"):
        return
    t0 = time.monotonic()
    if progress is not None:
        progress.note(f"{PROG}: writing the report ...")
    try:
        files = write_reports(out, report_dir)
    except (SdeMatrixError, OSError) as e:
        print(f"{PROG}: warning: report not written: {e}", file=sys.stderr)
        return
    if progress is not None:
        progress.note(f"{PROG}: report written ({time.monotonic() - t0:.1f} s)")
    if report_dir is not None:
        print(f"report: {files.html}")


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import emit_step_summary, load_results, write_html, write_markdown
    from ..results.load import is_exec_results

    results_dir = Path(args.results_dir)
    if is_exec_results(results_dir):
        return _report_exec(args, results_dir)
    results = load_results(results_dir)  # read once for every report
    dest = Path(args.html) if args.html else results_dir / "report.html"
    path = write_html(results, dest)
    if args.markdown is not None:
        text = write_markdown(results)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:
            Path(args.markdown).write_text(text)
    if args.step_summary and emit_step_summary(results) is None:
        _no_step_summary()
    print(f"report: {path}", file=sys.stderr if args.markdown == "-" else sys.stdout)
    return EXIT_OK


def _no_step_summary() -> None:
    print(
        f"{PROG}: --step-summary: $GITHUB_STEP_SUMMARY is not set (not on GitHub "
        "Actions?): no step summary written",
        file=sys.stderr,
    )


def _report_exec(args: argparse.Namespace, results: Path) -> int:
    """`sdematrix report` on an `exec --out` directory."""
    from ..report.exec_html import render_html, render_markdown, step_summary
    from ..results.load import load_exec_results

    data = load_exec_results(results)
    dest = Path(args.html) if args.html else results / "report.html"
    try:
        dest.write_text(render_html(data), encoding="utf-8")
        if args.markdown not in (None, "-"):
            Path(args.markdown).write_text(render_markdown(data), encoding="utf-8")
    except OSError as e:
        from ..errors import OutputDirError

        raise OutputDirError(f"cannot write the report: {e.strerror or e}") from None
    if args.markdown == "-":
        sys.stdout.write(render_markdown(data))
    if args.step_summary and step_summary(data) is None:
        _no_step_summary()
    print(f"report: {dest}", file=sys.stderr if args.markdown == "-" else sys.stdout)
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from ..report import diff, render_text

    rep = diff(args.old, args.new, threshold=args.threshold, min_abs=args.min_abs)
    sys.stdout.write(render_text(rep))
    return int(rep.exit_code)


def cmd_merge_junit(args: argparse.Namespace) -> int:
    from ..results.merge import merge_junit

    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.exists()]  # the loader says what else is wrong
    if missing:
        raise MatrixFileError(f"merge-junit: no such file: {', '.join(missing)}")
    merge_junit(files, Path(args.out))
    print(f"merged {len(files)} file(s) into {args.out}")
    return EXIT_OK


def cmd_merge_results(args: argparse.Namespace) -> int:
    from ..results.merge import merge_results

    dirs = [Path(d) for d in args.dirs]
    data = merge_results(dirs, Path(args.out))  # OutputDirError (exit 2) for a bad dir
    print(f"merged {len(dirs)} results dir(s) ({len(data['cells'])} cells) into {args.out}")
    return EXIT_OK


def cmd_docker_run(args: argparse.Namespace) -> int:
    import shutil

    from ..integrations.docker_runner import run_in_docker
    from ..spec.matrix_file import select_cpus

    strict = _strict(args)
    matrix = load_matrix_arg(args.matrix)
    cpus = select_cpus(matrix, args.cpu) if args.cpu else list(matrix.models)
    junit_path = _junit_path(args)
    # Each container runs `sdematrix run --cpu <one>`: it names its CPU, so
    # it is strict unless this run is not (a default run, or --allow-skip).
    tail = [
        "--cpuid-mode",
        args.cpuid_mode,
        "--timeout",
        f"{args.timeout:g}",
        *([] if strict else ["--allow-skip"]),
    ]
    out = Path(args.out)
    # --timeout is per cell, as for `run`; a container runs one model's cells
    per_cpu = max((len(matrix.cells([c])) for c in cpus), default=1)
    code = run_in_docker(
        cpus,
        out=out,
        jobs=args.jobs,
        image=args.image,
        context=Path(args.context),
        rebuild=args.build,
        base_image=args.base_image,
        backend=args.backend or "auto",
        timeout=args.timeout,  # per cell, as for `run`
        cells_per_cpu=per_cpu,  # a container runs one model's cells
        extra_args=tail,
        matrix_file=matrix_path(args.matrix),
        sde_path=args.sde_path,
    )
    merged = out / "junit.xml"
    if merged.is_file():
        if junit_path is not None and junit_path.resolve() != merged.resolve():
            try:
                shutil.copyfile(merged, junit_path)
            except OSError as e:
                _junit_error(junit_path, e)
        print(f"junit: {junit_path or merged}")
    if (out / "results.json").is_file():
        _write_run_reports(out, args.report)
    return code


def cmd_list_cpus(args: argparse.Namespace) -> int:
    from . import explain as ex

    matrix = load_matrix_arg(args.matrix)
    if args.github_matrix and args.host_split:
        raise _UsageError("--github-matrix and --host-split exclude each other")
    if args.github_matrix:
        # one line, for `echo "matrix=$(sdematrix list-cpus --github-matrix)" >> $GITHUB_OUTPUT`
        from ..integrations.github_shards import github_matrix

        gm = github_matrix(matrix, args.shards, args.backend)
        sys.stdout.write(json.dumps(gm, separators=(",", ":")) + "\n")
    elif args.host_split:
        # one line of JSON: which of --cpu this host can run under --backend
        from ..integrations.github_shards import host_split
        from ..spec.matrix_file import select_cpus

        split = host_split(matrix, select_cpus(matrix, args.cpu), args.backend)
        sys.stdout.write(json.dumps(split, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(_table(ex.list_cpus(matrix)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from . import explain as ex

    matrix = load_matrix_arg(args.matrix)
    if args.features:
        from ..spec.isa_names import features_text
        from ..spec.matrix_file import select_cpus

        for cpu in select_cpus(matrix, args.cpu):
            sys.stdout.write(features_text(matrix.models[cpu]))
        return EXIT_OK
    _emit(ex.explain(matrix, ex.resolve_cpu(matrix, args.cpu)))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose, render

    d = diagnose(load_matrix_arg(args.matrix), sde_path=args.sde_path)
    if args.json:
        _emit(d.to_json())
    else:
        sys.stdout.write(render(d))
    return EXIT_OK if d.runnable else EXIT_FAILED


def cmd_mix(args: argparse.Namespace) -> int:
    from ..evidence.sde_mix import parse_mix_file

    mix = parse_mix_file(args.file)
    if args.json or args.compact:
        indent = None if args.compact else 1
        sys.stdout.write(json.dumps(mix.to_json(), indent=indent) + "\n")
    else:
        from ..report.mix_summary import summary_text

        sys.stdout.write(summary_text(mix, args.file))
    return EXIT_OK


def cmd_exec(args: argparse.Namespace) -> int:
    """``sdematrix exec``: see :mod:`sdematrix.pipeline.exec`."""
    from ..pipeline.exec import cmd_exec as run_exec

    return run_exec(args)


# list-cpus and explain take --matrix alone (no metavar): its help as the shared one
_MATRIX_HELP = next(o for o in options.OPTIONS if o.flag == "--matrix").kwargs["help"]


def _add_run(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``run``: the shared run options, --out and --seed."""
    r = sub.add_parser("run", help="run the matrix and judge every cell")
    options.add_to_argparse(r, "run")
    r.add_argument("--out", default=DEFAULT_OUT, help=f"results directory (default: {DEFAULT_OUT})")
    r.add_argument(
        "--seed", type=_seed, default=None, help="probe input seed (default: the matrix's)"
    )
    r.set_defaults(func=cmd_run)


def _add_report(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``report RESULTS_DIR``: HTML and markdown of a results dir."""
    rp = sub.add_parser("report", help="write the HTML report (and markdown) of a results dir")
    rp.add_argument("results_dir")
    rp.add_argument("--html", metavar="FILE", help="HTML file (default: RESULTS_DIR/report.html)")
    rp.add_argument(
        "--markdown",
        metavar="FILE",
        nargs="?",
        const="-",
        help="also write the markdown summary to FILE (or stdout)",
    )
    rp.add_argument(
        "--step-summary",
        action="store_true",
        help="append the markdown summary to $GITHUB_STEP_SUMMARY",
    )
    rp.set_defaults(func=cmd_report)


def _add_diff(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``diff OLD NEW``: what changed, and the thresholds worth reporting."""
    d = sub.add_parser("diff", help="what changed between two results dirs")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument(
        "--threshold",
        type=_nonneg_float,
        default=0.10,
        help="relative mix change worth reporting (default 0.10)",
    )
    d.add_argument(
        "--min-abs",
        type=_positive_int,
        default=16,
        help="absolute instruction-count change worth reporting (default 16)",
    )
    d.set_defaults(func=cmd_diff)


def _add_merge_junit(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``merge-junit FILES --out``."""
    mj = sub.add_parser("merge-junit", help="merge JUnit files into one")
    mj.add_argument("files", nargs="+")
    mj.add_argument("--out", required=True)
    mj.set_defaults(func=cmd_merge_junit)


def _add_merge_results(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``merge-results DIRS --out``."""
    mr = sub.add_parser("merge-results", help="merge per-CPU results dirs into one")
    mr.add_argument("dirs", nargs="+", metavar="DIR")
    mr.add_argument("--out", required=True, help="directory for the merged results.json")
    mr.set_defaults(func=cmd_merge_results)


def _add_docker(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``docker run``: the shared run options, and the image to run them in."""
    dk = sub.add_parser("docker", help="run the matrix in Docker containers")
    dsub = dk.add_subparsers(dest="docker_command", metavar="ACTION", parser_class=_Parser)
    dsub.required = True
    dr = dsub.add_parser("run", help="one container per CPU model, merged JUnit")
    options.add_to_argparse(dr, "docker")
    dr.add_argument("--out", default=DEFAULT_OUT + "-docker", help="results directory")
    dr.add_argument("--image", default="sdematrix:latest", help="image tag")
    dr.add_argument("--context", default=".", help="build context with the Dockerfile")
    dr.add_argument("--build", action="store_true", help="rebuild the image even if present")
    dr.add_argument(
        "--base-image", default=None, help="BASE_IMAGE build arg (e.g. sdematrix-base:bookworm)"
    )
    dr.set_defaults(func=cmd_docker_run)


def _add_list_cpus(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``list-cpus``: the table, --github-matrix shards or --host-split."""
    lc = sub.add_parser("list-cpus", help="list the CPU models of the matrix")
    lc.add_argument("--matrix", help=_MATRIX_HELP)
    lc.add_argument(
        "--github-matrix",
        action="store_true",
        help="print a GitHub Actions strategy matrix (JSON): shards of SDE models",
    )
    lc.add_argument(
        "--shards",
        type=_positive_int,
        default=None,
        help="number of jobs for --github-matrix (default: at most 16)",
    )
    from ..integrations.github_shards import SHARD_BACKENDS

    lc.add_argument(
        "--backend",
        default="sde",
        choices=SHARD_BACKENDS,
        help="--github-matrix: shards of the SDE models (sde, default) or of every "
        "model (ptrace); --host-split: the backend to ask",
    )
    lc.add_argument(
        "--host-split",
        action="store_true",
        help="print (JSON) which of --cpu this host can run under --backend, and "
        "why not the others",
    )
    lc.add_argument("--cpu", default=None, help="--host-split: the models (default: all)")
    lc.set_defaults(func=cmd_list_cpus)


def _add_explain(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``explain CPU``: the expected paths (or --features) of a model."""
    e = sub.add_parser("explain", help="explain the expected paths of one CPU model")
    e.add_argument("cpu")
    e.add_argument("--matrix", help=_MATRIX_HELP)
    e.add_argument(
        "--features",
        action="store_true",
        help="list the model's feature and ISA-set names (for --expect files); "
        "CPU may be a comma-separated list",
    )
    e.set_defaults(func=cmd_explain)


def _add_doctor(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``doctor``: which backends work here."""
    dc = sub.add_parser("doctor", help="which backends work on this host, and why not")
    options.add_to_argparse(dc, "doctor")
    dc.add_argument("--json", action="store_true", help="machine-readable output")
    dc.set_defaults(func=cmd_doctor)


def _add_exec(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``exec -- PROG ARGS...``: the shared exec options, regions, expectations."""
    x = sub.add_parser(
        "exec",
        help="run any program as if on each CPU model: whole-process "
        "chip check, region mixes, expectations",
    )
    options.add_to_argparse(x, "exec")
    x.add_argument(
        "--region",
        action="append",
        metavar="REGION",
        help="marks | whole | function:SYMBOL (repeatable; default: marks "
        "when an image has SSC marks, else whole)",
    )
    x.add_argument("--expect", metavar="FILE", help="expectations (YAML)")
    x.add_argument("--out", metavar="DIR", help="capture output and write results per model")
    x.add_argument(
        "--allow-exit",
        type=int,
        action="append",
        metavar="N",
        help="a non-zero exit status that does not fail the verdict",
    )
    x.add_argument(
        "--jit-converge",
        type=options.nonnegative_int,
        default=0,
        metavar="N",
        help="JIT code (V8, a JVM): a thread that has stepped N instructions in a row in "
        "one JIT region without meeting a new one runs on natively there, and that region "
        "stays unchecked until the program maps or protects it again (default 0: step "
        "JIT code for as long as it runs; exact, at single-step speed)",
    )
    x.add_argument(
        "--print-command",
        action="store_true",
        help="--backend sde: print the SDE command lines, run nothing (SDE need not be installed)",
    )
    x.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS...")
    x.set_defaults(func=cmd_exec)


def _add_mix(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``mix FILE``: an SDE mix file, summarised or as JSON."""
    m = sub.add_parser("mix", help="summarise an SDE mix file (--json: normalised JSON)")
    m.add_argument("file")
    m.add_argument(
        "--json", action="store_true", help="the whole normalised mix as JSON (default: a summary)"
    )
    m.add_argument("--compact", action="store_true", help="the whole mix as one-line JSON")
    m.set_defaults(func=cmd_mix)


#: The sub-commands, in the order ``--help`` lists them.
_SUBCOMMANDS = (
    _add_run,
    _add_report,
    _add_diff,
    _add_merge_junit,
    _add_merge_results,
    _add_docker,
    _add_list_cpus,
    _add_explain,
    _add_doctor,
    _add_exec,
    _add_mix,
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run vaescrypt across a matrix of CPU models.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # For the whole command: SIGTERM ends it like SIGINT (exit 130, one line,
    # no traceback), whatever phase it lands in -- loading the matrix file,
    # probing backends, writing results.  While cells run, run_cells installs
    # its own SIGINT/SIGTERM handler (stop, kill the children, report the
    # finished cells) and puts this one back afterwards.  Both dispositions
    # are restored on the way out, for callers of main() in the same process.
    with signals.sigterm_as_interrupt():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        from ..inputs import check_output_args

        check_output_args(args)  # every --out/--junit/--html/... path, before any work
        code = int(args.func(args))
    except SdeMatrixError as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt as e:
        signals.ignore()
        how = " (SIGTERM)" if isinstance(e, signals.Terminated) else ""
        print(f"{PROG}: error: interrupted{how}", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = EXIT_OK
    except Exception as e:  # noqa: BLE001 - the CLI never shows a traceback by default
        if os.environ.get("SDEMATRIX_DEBUG"):
            traceback.print_exc()
        msg = " ".join(str(e).split())
        print(f"{PROG}: error: internal error: {type(e).__name__}: {msg}", file=sys.stderr)
        code = EXIT_INTERNAL
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
