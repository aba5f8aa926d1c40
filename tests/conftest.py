"""Shared pytest configuration (keep small: per-area fixtures live in the test modules)."""

from __future__ import annotations

import functools
import os
import re

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--vaescrypt-cases",
        type=int,
        default=int(os.environ.get("VAESCRYPT_DIFF_CASES", "2000")),
        help="random differential cases per (mode, path) for vaescrypt "
        "(env VAESCRYPT_DIFF_CASES; default 2000, full run 100000)",
    )


@pytest.fixture(scope="session")
def vaescrypt_cases(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--vaescrypt-cases"))


# A skip is a claim that this host cannot do something.  A test skipped
# because the ptrace tracer does not work here, for any reason other than one
# the host really has (not x86-64 Linux, ptrace forbidden, no CPUID faulting,
# a CPU without the model's ISA: sdematrix.cli.doctor.is_host_limit), is turned
# into a failure: "the tool is broken here" must never read as green.
_TRACER_WORDS = re.compile(r"\bptrace\b|tracer", re.IGNORECASE)
# A host-limit skip that says ptrace cannot run at all (as opposed to one
# model's ISA): a lie where the doctor finds ptrace usable.
_UNAVAILABLE = re.compile(r"unavailable|not permitted", re.IGNORECASE)


def _skip_reason(rep: pytest.TestReport) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])
    return str(lr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    rep: pytest.TestReport = outcome.get_result()
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = _skip_reason(rep)
    if not _TRACER_WORDS.search(reason):
        return
    from sdematrix.cli.doctor import is_host_limit

    if not is_host_limit(reason):
        rep.outcome = "failed"
        rep.longrepr = (
            f"skipped for a reason that is not a limit of this host (the tracer is "
            f"broken here, which is a failure): {reason}"
        )
    elif _UNAVAILABLE.search(reason) and _ptrace_usable():
        rep.outcome = "failed"
        rep.longrepr = (
            f"skipped as if ptrace could not run here, but `sdematrix doctor` reports "
            f"the ptrace backend usable on this host: {reason}"
        )


@functools.cache
def _ptrace_usable() -> bool:
    """What `sdematrix doctor` says of ptrace on this host (once per worker)."""
    from sdematrix.backends.ptrace.backend import PtraceBackend

    return PtraceBackend().unavailable_reason() is None
