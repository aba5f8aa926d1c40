"""pytest plugin: check the dispatcher on chosen CPU models, from pytest.

    pytest --sde-cpu=spr,icl,snb [--sde-backend auto|sde|ptrace|qemu]
           [--sde-path PATH/sde64] [--sde-matrix sde_matrix.yaml]
           [--sde-cpuid-mode auto|fault|bp] [--sde-allow-skip] [--sde-timeout S]

(the options of `sdematrix run`, defined once in :mod:`sdematrix.cli.options`).

* Without ``--sde-cpu`` the plugin only registers its options and marker: it
  loads nothing and adds no tests.
* With it, the shipped module :mod:`sdematrix.testing.test_sde_matrix` is added
  to the run: per selected CPU, per cell of the matrix, one test per check
  (``dispatch``: the expected path ran; ``mix``: the path's instruction-mix
  signature holds; ``chip``: no instruction outside the model; ``answer``: the
  output digest equals ``cryptography``'s).  Each cell runs once per session
  (per xdist worker) and its four checks read the same result.
* Your own tests can take the ``sde_cpu`` fixture (parametrised over the
  selected CPUs) and call ``sde_cpu.run(mode, direction, key_bits, length)``.
* Properties ``cpu``, ``backend``, ``path`` and ``expected_path`` are recorded
  with ``record_property``, so ``--junitxml`` carries them.
* Unknown CPU names are a usage error listing the valid names.
* What you name must run: a cell of a ``--sde-cpu`` model that no backend can
  run on this host is an error (the test fails naming the reason), not a skip,
  unless ``--sde-allow-skip`` is given.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..verdict.reasons import Kind, Reason

SHIPPED_TESTS = Path(__file__).resolve().parent.parent / "testing" / "test_sde_matrix.py"
CHECKS = ("dispatch", "mix", "chip", "answer")


def pytest_addoption(parser: pytest.Parser) -> None:
    # the flags, defaults and help of `sdematrix run`, spelt --sde-* (cli/options.py)
    from ..cli.options import add_to_pytest

    add_to_pytest(parser.getgroup("sdematrix", "CPU-model matrix (sdematrix)"))


@dataclass
class SdeSession:
    """What one pytest process (controller or xdist worker) shares."""

    matrix: Any
    cpus: list[str]
    backend: str
    sde_path: str | None
    timeout: float
    workdir: Path
    cpuid_mode: str = "auto"
    allow_skip: bool = False
    _selector: Any = None
    _cache: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def selector(self) -> Any:
        from ..backends.registry import BackendSelector

        if self._selector is None:
            self._selector = BackendSelector(
                self.matrix, self.backend, sde_path=self.sde_path, cpuid_mode=self.cpuid_mode
            )
        return self._selector

    def run_cell(self, cell: Any) -> Any:
        """The CellRecord of `cell`, running it on first use."""
        from ..pipeline.run import run_cells

        with self._lock:
            rec = self._cache.get(cell.name)
            if rec is None:
                report = run_cells(
                    self.matrix,
                    [cell],
                    self.selector(),
                    workdir=self.workdir,
                    jobs=1,
                    timeout=self.timeout,
                    handle_signals=False,
                    strict=not self.allow_skip,
                )
                rec = report.records[0]
                self._cache[cell.name] = rec
            return rec


def _session(config: pytest.Config) -> SdeSession | None:
    return getattr(config, "_sdematrix_session", None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sde_cpu: test runs per CPU model chosen with --sde-cpu")
    spec = config.getoption("sde_cpu")
    if not spec:
        return
    from ..errors import SdeMatrixError
    from ..spec.matrix_arg import matrix_path
    from ..spec.matrix_file import load_matrix, select_cpus

    try:
        matrix = load_matrix(matrix_path(config.getoption("sde_matrix")))
        cpus = select_cpus(matrix, spec)
        backend = config.getoption("sde_backend")
        if backend != "auto":  # an explicitly named backend must exist: fail at start
            from ..backends.registry import BackendSelector

            BackendSelector(
                matrix,
                backend,
                sde_path=config.getoption("sde_path"),
                cpuid_mode=config.getoption("sde_cpuid_mode"),
            )
        from ..backends.probe import probe_path

        probe_path()  # a probe that cannot run: a usage error now, not 4 failures per cell
    except SdeMatrixError as e:
        raise pytest.UsageError(f"--sde-cpu: {e}") from None
    workdir = Path(tempfile.mkdtemp(prefix="sdematrix-pytest-"))
    config._sdematrix_session = SdeSession(  # type: ignore[attr-defined]
        matrix=matrix,
        cpus=cpus,
        backend=config.getoption("sde_backend"),
        sde_path=config.getoption("sde_path"),
        timeout=config.getoption("sde_timeout"),
        workdir=workdir,
        cpuid_mode=config.getoption("sde_cpuid_mode"),
        allow_skip=config.getoption("sde_allow_skip"),
    )
    config.args[:] = shipped_args(list(config.args))


def _mask_line(config: pytest.Config) -> str | None:
    """With --sde-cpu: the line saying that an inherited VAESCRYPT_CPU_MASK is
    not passed to the probe (as `sdematrix run` says it)."""
    from ..spec.dispatch_env import mask_not_passed

    said = mask_not_passed(os.environ) if _session(config) is not None else None
    return f"sdematrix: {said}" if said else None


def pytest_report_header(config: pytest.Config) -> list[str]:
    line = _mask_line(config)
    return [line] if line else []


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Under -q pytest shows no session header: the mask line goes at the end."""
    line = _mask_line(config)
    if line and not terminalreporter.showheader:
        terminalreporter.write_line(line)


def shipped_args(args: list[str]) -> list[str]:
    """The collection arguments with the shipped test module added, once.

    The shipped module lies outside the user's rootdir, so pytest prints its
    tests' node IDs without a usable path (``::test_cell[spr.gcm...-chip]``,
    or a path relative to somewhere else); such an argument -- a selection
    whose path is empty or names a test_sde_matrix.py that does not exist
    here -- is rewritten to the shipped file, and then the whole module is
    not added as well, so rerunning one test by its node ID runs that test."""
    shipped = str(SHIPPED_TESTS)
    out: list[str] = []
    targeted = False
    for arg in args:
        path, sep, selection = arg.partition("::")
        if sep and (
            path == "" or (Path(path).name == SHIPPED_TESTS.name and not Path(path).exists())
        ):
            out.append(f"{shipped}::{selection}")
            targeted = True
            continue
        if path and Path(path).exists() and Path(path).resolve() == SHIPPED_TESTS:
            targeted = True
        out.append(arg)
    if not targeted:
        out.append(shipped)
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    sess = _session(metafunc.config)
    if "sde_cpu" in metafunc.fixturenames:
        if sess is None:
            metafunc.parametrize(
                "sde_cpu",
                [pytest.param(None, marks=pytest.mark.skip(reason="no --sde-cpu given"))],
                indirect=True,
            )
        else:
            metafunc.parametrize("sde_cpu", sess.cpus, indirect=True, ids=sess.cpus)
    if "sde_cell" in metafunc.fixturenames and "sde_check" in metafunc.fixturenames:
        if sess is None:
            metafunc.parametrize(
                ("sde_cell", "sde_check"),
                [pytest.param(None, None, marks=pytest.mark.skip(reason="no --sde-cpu given"))],
            )
            return
        params = []
        for cell in sess.matrix.cells(sess.cpus):
            for check in CHECKS:
                params.append(pytest.param(cell, check, id=f"{cell.name}-{check}"))
        metafunc.parametrize(("sde_cell", "sde_check"), params)


@dataclass
class SdeCpu:
    """The `sde_cpu` fixture's value: one CPU model and a way to run cells on it."""

    name: str
    model: Any
    session: SdeSession
    record_property: Any

    def run(self, mode: str, direction: str, key_bits: int = 256, length: int = 64) -> Any:
        """Run one cell; returns the runner's CellRecord (outcome, result)."""
        from ..spec.models import Cell

        rec = self.session.run_cell(Cell(self.name, mode, direction, key_bits, length))
        record(self.record_property, rec)
        return rec


def record(record_property: Any, rec: Any) -> None:
    o = rec.outcome
    record_property("cpu", o.cell.cpu)
    record_property("backend", o.backend or "")
    record_property("path", o.path or "")
    record_property("expected_path", o.expected_path or "")


@pytest.fixture
def sde_cpu(request: pytest.FixtureRequest, record_property: Any) -> SdeCpu:
    sess = _session(request.config)
    if sess is None or request.param is None:
        pytest.skip("no --sde-cpu given")
    return SdeCpu(request.param, sess.matrix.models[request.param], sess, record_property)


@pytest.fixture
def sde_session(request: pytest.FixtureRequest) -> SdeSession:
    sess = _session(request.config)
    if sess is None:
        pytest.skip("no --sde-cpu given")
    return sess


#: the check each kind of fail reason is filed under (every other kind: "mix")
_CHECK_OF = {Kind.DISPATCH: "dispatch", Kind.CHIP: "chip", Kind.ANSWER: "answer"}


def classify(reason: Reason) -> str:
    """Which check a verdict reason belongs to (by the kind its judge gave it)."""
    return _CHECK_OF.get(reason.kind, "mix")
