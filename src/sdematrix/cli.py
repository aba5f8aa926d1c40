"""The ``sdematrix`` command line.

Sub-commands::

    sdematrix run [--matrix FILE] [--cpu spr,icl,...] [--backend auto|sde|ptrace|qemu]
                  [--cpuid-mode auto|fault|bp] [--allow-skip]
                  [--sde-path PATH] [--junit FILE] [--out DIR] [--jobs N]
                  [--timeout S] [--seed N]
    sdematrix list-cpus [--matrix FILE] [--github-matrix [--shards N]]
    sdematrix explain CPU [--matrix FILE]
    sdematrix doctor [--matrix FILE] [--json]   # backends usable here, CPUID mode
    sdematrix mix FILE              # an SDE mix file, normalised to JSON on stdout
    sdematrix exec --cpu MODELS [--region R] [--expect F] [--junit F] [--out DIR]
                   [--allow-exit N] [--backend auto|ptrace|sde] -- PROG ARGS...

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
import traceback
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from . import __version__, signals
from .backends.registry import CPUID_MODES
from .errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BackendUnavailableError,
    MatrixFileError,
    SdeMatrixError,
)
from .models import DIRECTIONS, MODES, Matrix

__all__ = ["EXIT_INTERNAL", "main"]

EXIT_INTERNAL = 3
PROG = "sdematrix"
DEFAULT_OUT = "sdematrix-results"
DEFAULT_TIMEOUT = 300.0


class _UsageError(SdeMatrixError):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _matrix_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    local = Path("sde_matrix.yaml")
    if local.is_file():
        return local
    shipped = resources.files("sdematrix").joinpath("sde_matrix.yaml")
    if shipped.is_file():
        return Path(str(shipped))
    raise MatrixFileError(
        "no sde_matrix.yaml in the current directory and none shipped with the package "
        "(give --matrix FILE)"
    )


def _load(arg: str | None) -> Matrix:
    from .matrix_cache import load_matrix_cached  # the full load when anything changed

    return load_matrix_cached(_matrix_path(arg))


def _number_arg(
    convert: Callable[[str], Any], ok: Callable[[Any], bool], rule: str, kind: str
) -> Callable[[str], Any]:
    """An argparse `type=` that converts, then checks a rule, each failure one
    line naming the text."""

    def parse(text: str) -> Any:
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"{rule}: {text!r}")
        return v

    return parse


_positive_int = _number_arg(int, lambda v: v >= 1, "must be at least 1", "an integer")
_positive_float = _number_arg(float, lambda v: v > 0, "must be positive", "a number")
_nonneg_float = _number_arg(float, lambda v: v >= 0, "must be >= 0", "a number")
_seed = _number_arg(
    lambda t: int(t, 0), lambda v: 0 <= v < 1 << 64, "must be a 64-bit unsigned integer",
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
        lines.append(f"could not run here ({what}): {n} cell{'s' if n != 1 else ''} "
                     f"of {', '.join(cpus)}: {why}")  # fmt: skip
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Sub-commands
# --------------------------------------------------------------------------


def _print_host_gaps(matrix: Any, cpus: list[str], selector: Any) -> None:
    """Run header: per model run natively (ptrace), what its CPUID advertises
    that this host cannot execute (sdematrix.host_isa)."""
    from .host_isa import host_lacks

    for cpu in cpus:
        ch = selector.choose(matrix.models[cpu])
        lacks = host_lacks(matrix.models[cpu]) if ch.backend and ch.backend.name == "ptrace" else []
        if lacks:
            print(f"{PROG} run: {cpu}: host cannot execute {', '.join(lacks)} (model {cpu} "
                  "advertises it; the probe needs none of them, a program that runs one dies "
                  "of SIGILL: an error)", file=sys.stderr)  # fmt: skip


def cmd_run(args: argparse.Namespace) -> int:
    from .backends.registry import BackendSelector
    from .junit import prepare_out_dir, write_junit, write_results
    from .matrix_file import select_cpus
    from .probe import probe_path
    from .progress import Progress
    from .runner import run_cells

    strict = _strict(args)
    matrix = _load(args.matrix)
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
    out = Path(args.out)
    prepare_out_dir(out)
    junit_path = _junit_path(args)

    cells = matrix.cells(cpus)
    progress = Progress(len(cells))
    report = run_cells(
        matrix,
        cells,
        selector,
        workdir=out / "work",
        jobs=args.jobs,
        timeout=args.timeout,
        seed=args.seed,
        progress=progress,
        strict=strict,
    )
    write_results(out, report)
    if junit_path is not None:
        write_junit(junit_path, report)
    _write_run_reports(out, args.report)
    sys.stdout.write(summary_table(report))
    sys.stdout.write(f"results: {out}/results.json  junit: {junit_path or out / 'junit.xml'}\n")
    sys.stdout.flush()
    if report.interrupted:
        print(f"{PROG}: error: interrupted; results for finished cells written", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if report.ok else EXIT_FAILED


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
    from .errors import OutputDirError

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


def _write_run_reports(out: Path, report_dir: str | None) -> None:
    """HTML + markdown after a run (and $GITHUB_STEP_SUMMARY when set).  A
    report problem is a warning: it never changes the run's exit code."""
    from .report import write_reports

    if report_dir is None and not os.environ.get("GITHUB_STEP_SUMMARY"):
        return
    try:
        files = write_reports(out, report_dir)
    except (SdeMatrixError, OSError) as e:
        print(f"{PROG}: warning: report not written: {e}", file=sys.stderr)
        return
    if report_dir is not None:
        print(f"report: {files.html}")


def cmd_report(args: argparse.Namespace) -> int:
    from .report import emit_step_summary, write_html, write_markdown

    results = Path(args.results_dir)
    dest = Path(args.html) if args.html else results / "report.html"
    path = write_html(results, dest)
    if args.markdown is not None:
        text = write_markdown(results)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:
            Path(args.markdown).write_text(text)
    if args.step_summary:
        emit_step_summary(results)
    print(f"report: {path}", file=sys.stderr if args.markdown == "-" else sys.stdout)
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from .report import diff, render_text

    rep = diff(args.old, args.new, threshold=args.threshold, min_abs=args.min_abs)
    sys.stdout.write(render_text(rep))
    return int(rep.exit_code)


def cmd_merge_junit(args: argparse.Namespace) -> int:
    from .merge import merge_junit

    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise MatrixFileError(f"merge-junit: no such file: {', '.join(missing)}")
    merge_junit(files, Path(args.out))
    print(f"merged {len(files)} file(s) into {args.out}")
    return EXIT_OK


def cmd_merge_results(args: argparse.Namespace) -> int:
    from .merge import merge_results

    dirs = [Path(d) for d in args.dirs]
    data = merge_results(dirs, Path(args.out))  # OutputDirError (exit 2) for a bad dir
    print(f"merged {len(dirs)} results dir(s) ({len(data['cells'])} cells) into {args.out}")
    return EXIT_OK


def cmd_docker_run(args: argparse.Namespace) -> int:
    import shutil

    from .docker_runner import run_in_docker
    from .matrix_file import select_cpus

    strict = _strict(args)
    matrix = _load(args.matrix)
    cpus = select_cpus(matrix, args.cpu) if args.cpu else list(matrix.models)
    junit_path = _junit_path(args)
    # Each container runs `sdematrix run --cpu <one>`: it names its CPU, so
    # it is strict unless this run is not (a default run, or --allow-skip).
    tail = ["--cpuid-mode", args.cpuid_mode, *([] if strict else ["--allow-skip"])]
    out = Path(args.out)
    code = run_in_docker(
        cpus,
        out=out,
        jobs=args.jobs,
        image=args.image,
        context=Path(args.context),
        rebuild=args.build,
        base_image=args.base_image,
        backend=args.backend or "auto",
        timeout=args.timeout,
        extra_args=tail,
        matrix_file=_matrix_path(args.matrix),
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

    matrix = _load(args.matrix)
    if args.github_matrix:
        # one line, for `echo "matrix=$(sdematrix list-cpus --github-matrix)" >> $GITHUB_OUTPUT`
        from .shards import github_matrix

        gm = github_matrix(matrix, args.shards)
        sys.stdout.write(json.dumps(gm, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(_table(ex.list_cpus(matrix)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from . import explain as ex

    matrix = _load(args.matrix)
    if args.features:
        from .isa_names import features_text
        from .matrix_file import select_cpus

        for cpu in select_cpus(matrix, args.cpu):
            sys.stdout.write(features_text(matrix.models[cpu]))
        return EXIT_OK
    _emit(ex.explain(matrix, args.cpu))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose, render

    d = diagnose(_load(args.matrix), sde_path=args.sde_path)
    if args.json:
        _emit(d.to_json())
    else:
        sys.stdout.write(render(d))
    return EXIT_OK if d.runnable else EXIT_FAILED


def cmd_mix(args: argparse.Namespace) -> int:
    from .sde_mix import parse_mix_file

    mix = parse_mix_file(args.file)
    indent = None if args.compact else 1
    sys.stdout.write(json.dumps(mix.to_json(), indent=indent) + "\n")
    return EXIT_OK


def cmd_exec(args: argparse.Namespace) -> int:
    """``sdematrix exec``: see :mod:`sdematrix.exec_run`."""
    from .exec_expect import load_expectations
    from .exec_report import judge_exec, summary_line, write_exec_junit, write_exec_results
    from .exec_run import (
        ExecError,
        ExecPlan,
        discover_images,
        parse_region,
        read_stdin,
        run_model,
        workdir,
    )
    from .matrix_file import select_cpus

    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise _UsageError("exec: no program given (sdematrix exec --cpu MODELS -- PROG ARGS...)")
    matrix = _load(args.matrix)
    cpus = select_cpus(matrix, args.cpu)
    regions = [parse_region(r) for r in args.region or []]
    exps = load_expectations(args.expect, matrix) if args.expect else []
    backend = args.backend or "auto"
    if backend == "qemu":
        raise ExecError("exec --backend qemu is not implemented (use ptrace or sde)")
    if backend == "sde":
        return _exec_sde(args, matrix, cpus, prog, regions)
    plan = ExecPlan(argv=prog, regions=regions, cpuid_mode=args.cpuid_mode,
                    timeout=args.timeout)  # fmt: skip
    missing = plan.missing_symbols()
    if missing:  # maybe in an image the program dlopens: run it once to see
        plan.stdin = read_stdin()
        discover_images(plan, matrix.models[cpus[0]], workdir(None))
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
    work = workdir(out)
    outcomes = []
    for cpu in cpus:
        model = matrix.models[cpu]
        res = run_model(plan, model, work)
        outcome = judge_exec(res, model, exps, set(args.allow_exit or []))
        outcomes.append(outcome)
        if out is None:
            sys.stdout.buffer.write(res.stdout)
            sys.stdout.flush()
            sys.stderr.buffer.write(res.stderr)
        print(f"{PROG} exec: " + summary_line(outcome), file=sys.stderr, flush=True)
    if out is not None:
        write_exec_results(out, outcomes, prog)
    if args.junit:
        write_exec_junit(Path(args.junit), outcomes, prog)
    return EXIT_OK if all(o.status == "pass" for o in outcomes) else EXIT_FAILED


def _exec_sde(args: argparse.Namespace, matrix: Matrix, cpus: list[str], prog: list[str],
              regions: list[Any]) -> int:  # fmt: skip
    """--backend sde: the same run under SDE (--print-command: only show it)."""
    import shlex
    import subprocess

    from .backends.sde import SdeBackend
    from .exec_run import sde_command, workdir

    sde = SdeBackend()
    if sde.unavailable_reason():
        raise BackendUnavailableError(sde.unavailable_reason() or "SDE unavailable")
    out = Path(args.out) if args.out else None
    work = workdir(out)
    failed = False
    for cpu in cpus:
        model = matrix.models[cpu]
        why = sde.cannot_run(model)
        if why:
            raise BackendUnavailableError(why)
        cmd = sde_command(sde, model, prog, regions, work)
        print(f"{PROG} exec: {cpu}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        if args.print_command:
            continue
        rc = subprocess.run(cmd, check=False).returncode
        failed |= rc != 0 and rc not in (args.allow_exit or [])
    return EXIT_FAILED if failed else EXIT_OK


def _run_options(p: argparse.ArgumentParser) -> None:
    """Options `run` and `docker run` share, with one meaning."""
    p.add_argument("--backend", default=None, choices=["auto", "sde", "ptrace", "qemu"],
                   help="backend for every cell (default: auto, per model)")  # fmt: skip
    p.add_argument("--cpuid-mode", default="auto", choices=list(CPUID_MODES),
                   help="how the ptrace tracer presents CPUID: fault (kernel CPUID "
                   "faulting), bp (breakpoints on every CPUID/XGETBV site), auto "
                   "(fault where the host has it)")  # fmt: skip
    p.add_argument("--allow-skip", action="store_true",
                   help="with --cpu/--backend: skip cells this host cannot run instead "
                   "of failing them")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run vaescrypt across a matrix of CPU models.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    matrix_help = "matrix file (default: ./sde_matrix.yaml, else the packaged copy)"
    r = sub.add_parser("run", help="run the matrix and judge every cell")
    r.add_argument("--matrix", help=matrix_help)
    r.add_argument("--cpu", help="comma-separated CPU names (default: all)")
    _run_options(r)
    r.add_argument(
        "--sde-path", help="sde64 executable or SDE kit directory (else $SDE_PATH, PATH)"
    )
    r.add_argument("--junit", help="also write the JUnit XML here")
    r.add_argument("--out", default=DEFAULT_OUT, help=f"results directory (default: {DEFAULT_OUT})")
    r.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="cells run concurrently (default: CPU count)")  # fmt: skip
    r.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT,
                   help=f"per-cell timeout in seconds (default: {DEFAULT_TIMEOUT:g})")  # fmt: skip
    r.add_argument(
        "--seed", type=_seed, default=None, help="probe input seed (default: the matrix's)"
    )
    r.add_argument("--report", metavar="DIR",
                   help="also write report.html and summary.md into DIR")  # fmt: skip
    r.set_defaults(func=cmd_run)

    rp = sub.add_parser("report", help="write the HTML report (and markdown) of a results dir")
    rp.add_argument("results_dir")
    rp.add_argument("--html", metavar="FILE", help="HTML file (default: RESULTS_DIR/report.html)")
    rp.add_argument("--markdown", metavar="FILE", nargs="?", const="-",
                    help="also write the markdown summary to FILE (or stdout)")  # fmt: skip
    rp.add_argument("--step-summary", action="store_true",
                    help="append the markdown summary to $GITHUB_STEP_SUMMARY")  # fmt: skip
    rp.set_defaults(func=cmd_report)

    d = sub.add_parser("diff", help="what changed between two results dirs")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument("--threshold", type=_nonneg_float, default=0.10,
                   help="relative mix change worth reporting (default 0.10)")  # fmt: skip
    d.add_argument("--min-abs", type=_positive_int, default=16,
                   help="absolute instruction-count change worth reporting (default 16)")  # fmt: skip
    d.set_defaults(func=cmd_diff)

    mj = sub.add_parser("merge-junit", help="merge JUnit files into one")
    mj.add_argument("files", nargs="+")
    mj.add_argument("--out", required=True)
    mj.set_defaults(func=cmd_merge_junit)

    mr = sub.add_parser("merge-results", help="merge per-CPU results dirs into one")
    mr.add_argument("dirs", nargs="+", metavar="DIR")
    mr.add_argument("--out", required=True, help="directory for the merged results.json")
    mr.set_defaults(func=cmd_merge_results)

    dk = sub.add_parser("docker", help="run the matrix in Docker containers")
    dsub = dk.add_subparsers(dest="docker_command", metavar="ACTION", parser_class=_Parser)
    dsub.required = True
    dr = dsub.add_parser("run", help="one container per CPU model, merged JUnit")
    dr.add_argument("--matrix", help=matrix_help)
    dr.add_argument("--cpu", help="comma-separated CPU names (default: all)")
    _run_options(dr)
    dr.add_argument("--jobs", type=_positive_int, default=2, help="containers at once")
    dr.add_argument("--out", default=DEFAULT_OUT + "-docker", help="results directory")
    dr.add_argument("--junit", help="also write the merged JUnit XML here")
    dr.add_argument("--report", metavar="DIR",
                    help="also write report.html and summary.md into DIR")  # fmt: skip
    dr.add_argument("--image", default="sdematrix:latest", help="image tag")
    dr.add_argument("--context", default=".", help="build context with the Dockerfile")
    dr.add_argument("--build", action="store_true", help="rebuild the image even if present")
    dr.add_argument("--base-image", default=None,
                    help="BASE_IMAGE build arg (e.g. sdematrix-base:bookworm)")  # fmt: skip
    dr.add_argument("--timeout", type=_positive_float, default=900.0,
                    help="per-container timeout in seconds")  # fmt: skip
    dr.set_defaults(func=cmd_docker_run)

    lc = sub.add_parser("list-cpus", help="list the CPU models of the matrix")
    lc.add_argument("--matrix", help=matrix_help)
    lc.add_argument("--github-matrix", action="store_true",
                    help="print a GitHub Actions strategy matrix (JSON): shards of SDE models")  # fmt: skip
    lc.add_argument("--shards", type=_positive_int, default=None,
                    help="number of jobs for --github-matrix (default: at most 16)")  # fmt: skip
    lc.set_defaults(func=cmd_list_cpus)

    e = sub.add_parser("explain", help="explain the expected paths of one CPU model")
    e.add_argument("cpu")
    e.add_argument("--matrix", help=matrix_help)
    e.add_argument("--features", action="store_true",
                   help="list the model's feature and ISA-set names (for --expect files); "
                   "CPU may be a comma-separated list")  # fmt: skip
    e.set_defaults(func=cmd_explain)

    dc = sub.add_parser("doctor", help="which backends work on this host, and why not")
    dc.add_argument("--matrix", help=matrix_help)
    dc.add_argument("--sde-path", help="sde64 executable or SDE kit directory")
    dc.add_argument("--json", action="store_true", help="machine-readable output")
    dc.set_defaults(func=cmd_doctor)

    x = sub.add_parser("exec", help="run any program as if on each CPU model: whole-process "
                       "chip check, region mixes, expectations")  # fmt: skip
    x.add_argument("--cpu", required=True, help="comma-separated CPU names (or all)")
    x.add_argument("--matrix", help=matrix_help)
    x.add_argument("--backend", default="auto", choices=["auto", "ptrace", "sde", "qemu"])
    x.add_argument("--cpuid-mode", default="auto", choices=list(CPUID_MODES))
    x.add_argument("--region", action="append", metavar="REGION",
                   help="marks | whole | function:SYMBOL (repeatable; default: marks "
                   "when an image has SSC marks, else whole)")  # fmt: skip
    x.add_argument("--expect", metavar="FILE", help="expectations (YAML)")
    x.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    x.add_argument("--out", metavar="DIR", help="capture output and write results per model")
    x.add_argument("--allow-exit", type=int, action="append", metavar="N",
                   help="a non-zero exit status that does not fail the verdict")  # fmt: skip
    x.add_argument("--timeout", type=_positive_float, default=600.0,
                   help="per-model timeout in seconds")  # fmt: skip
    x.add_argument("--print-command", action="store_true",
                   help="--backend sde: print the SDE command lines, run nothing")  # fmt: skip
    x.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS...")
    x.set_defaults(func=cmd_exec)

    m = sub.add_parser("mix", help="normalise an SDE mix file to JSON on stdout")
    m.add_argument("file")
    m.add_argument("--compact", action="store_true", help="one-line JSON")
    m.set_defaults(func=cmd_mix)
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
