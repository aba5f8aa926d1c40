"""Shared pytest configuration (keep small: per-area fixtures live in the test modules)."""

from __future__ import annotations

import os

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
