"""Fixtures shared by the backend tests.

`built` is session-scoped here, in one place: a fixture that each test module
re-exports (``from test_tracer import built``) is a separate fixture per
module, and each rebuilt the tracer and its samples -- three builds per run,
each a minute or more inside the TCG fault VM (ci/fault-vm.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_tracer import CFLAGS, EVENTS_SRC, SAMPLE_SRC, TRACER_SRC


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tracer (from source, as setup.py builds it) and the sample, dynamic
    and static-PIE."""
    d = tmp_path_factory.mktemp("tracer")
    tracer = d / "vc-tracer"
    srcs = sorted(str(p) for p in TRACER_SRC.glob("*.c"))
    subprocess.run(["gcc", *CFLAGS, "-D_GNU_SOURCE", *srcs, "-o", str(tracer)], check=True)
    out = {"tracer": tracer}
    for kind, extra in (("dyn", ["-Wl,-z,now"]), ("spie", ["-static-pie"])):
        exe = d / f"sample_{kind}"
        cmd = ["gcc", *CFLAGS, "-maes", "-pthread", *extra, str(SAMPLE_SRC), "-o", str(exe)]
        if subprocess.run(cmd, capture_output=True, check=False).returncode == 0:
            out[kind] = exe
    assert "dyn" in out
    events = d / "events"
    subprocess.run(["gcc", *CFLAGS, "-pthread", str(EVENTS_SRC), "-o", str(events)], check=True)
    out["events"] = events
    return out
