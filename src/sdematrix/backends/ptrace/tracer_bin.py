"""Where the ptrace tracer executable is: ``$SDEMATRIX_TRACER``, else the
package's ``_bin/vc-tracer``.  Used by the ptrace backend, ``sdematrix exec``
and the host probe (:mod:`sdematrix.backends.host_isa`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TRACER_ENV", "tracer_path"]

TRACER_ENV = "SDEMATRIX_TRACER"


def tracer_path() -> Path | None:
    """$SDEMATRIX_TRACER, else the package's _bin/vc-tracer."""
    env = os.environ.get(TRACER_ENV)
    if env:
        return Path(env)
    p = Path(__file__).resolve().parent.parent.parent / "_bin" / "vc-tracer"
    return p if p.exists() else None
