"""The GitHub Actions job matrices: a few shards of models, not one job per
model -- the SDE models (those with an SDE chip) for the SDE job, every model
for the ptrace job (which runs on the runner's own CPU inside the project's
Docker image).

With ~40 SDE models one job each would spend most of the CI time installing
Python, the package and SDE again and again (and exceed what a free account
runs at once); a shard runs several models in one job (`sdematrix run --cpu
a,b,c`).  Models are dealt out largest-cost first to the least-loaded shard
(LPT), the cost being the model's cell count under SDE, where every cell is
one SDE start-up of roughly the same price; each shard then lists its models
in file order, so the same matrix always gives the same shards.

:func:`host_split` tells a shard which of its models this host cannot execute
under a backend (a hosted runner without AVX-512 cannot present an AVX-512
model through the ptrace tracer): the job names those and runs the rest
strictly, so that anything else that does not run fails it.
"""

from __future__ import annotations

from typing import Any

from ..errors import SdeMatrixError
from ..spec.models import Matrix

#: Default upper bound on the number of jobs (GitHub runs 20 jobs at once on a
#: free account; leave room for the setup, publish and host-test jobs).
DEFAULT_MAX_SHARDS = 16
#: The backends a CI matrix is sharded for (list-cpus --backend).
SHARD_BACKENDS = ("sde", "ptrace")


def sde_models(matrix: Matrix) -> list[str]:
    """Models SDE can emulate (an SDE chip), in file order."""
    return [n for n, m in matrix.models.items() if m.sde_chip]


def backend_models(matrix: Matrix, backend: str = "sde") -> list[str]:
    """The models a `backend` job runs, in file order: SDE needs an SDE chip;
    the ptrace tracer presents any model (what the host lacks is found per
    shard by :func:`host_split`)."""
    if backend == "sde":
        return sde_models(matrix)
    if backend == "ptrace":
        return list(matrix.models)
    raise SdeMatrixError(
        f"no CI shards for backend {backend!r} (choose from {', '.join(SHARD_BACKENDS)})"
    )


def shard_models(
    matrix: Matrix, shards: int | None = None, backend: str = "sde"
) -> list[list[str]]:
    """The `backend` job's models split into `shards` groups (default: as many
    as models, at most DEFAULT_MAX_SHARDS); never an empty group."""
    names = backend_models(matrix, backend)
    if shards is not None and shards < 1:
        raise SdeMatrixError(f"--shards must be at least 1, not {shards}")
    n = min(len(names), shards if shards is not None else DEFAULT_MAX_SHARDS)
    if n == 0:
        return []
    order = {name: i for i, name in enumerate(names)}
    cost = {name: len(matrix.cells([name])) for name in names}
    groups: list[list[str]] = [[] for _ in range(n)]
    load = [0] * n
    for name in sorted(names, key=lambda x: (-cost[x], order[x])):
        i = min(range(n), key=lambda k: (load[k], k))
        groups[i].append(name)
        load[i] += cost[name]
    return [sorted(g, key=order.__getitem__) for g in groups]


def github_matrix(
    matrix: Matrix, shards: int | None = None, backend: str = "sde"
) -> dict[str, Any]:
    """A `strategy.matrix` with one entry per shard: ``shard`` (a name for the
    job and its artifact, ``<backend>-<i>-of-<n>``), ``cpus`` (the --cpu
    value) and, for SDE, ``chips``."""
    groups = shard_models(matrix, shards, backend)
    width = len(str(len(groups)))
    include = []
    for i, g in enumerate(groups):
        entry = {"shard": f"{backend}-{i + 1:0{width}d}-of-{len(groups)}", "cpus": ",".join(g)}
        if backend == "sde":
            entry["chips"] = ",".join(str(matrix.models[c].sde_chip) for c in g)
        include.append(entry)
    return {"include": include}


def host_split(
    matrix: Matrix,
    cpus: list[str],
    backend: str,
    *,
    cpuid_mode: str = "auto",
    sde_path: str | None = None,
) -> dict[str, Any]:
    """Which of `cpus` `backend` can execute on this host: ``{"runnable":
    [names], "cannot": {name: reason}}`` (the backend's own reason, e.g.
    "host CPU lacks AVX512F, ... needed by model spr").  A backend that is not
    usable here at all is an error (BackendUnavailableError, exit 2), not a
    list of unrunnable models."""
    from ..backends.registry import BackendSelector

    selector = BackendSelector(matrix, backend, sde_path=sde_path, cpuid_mode=cpuid_mode)
    runnable: list[str] = []
    cannot: dict[str, str] = {}
    for name in cpus:
        choice = selector.choose(matrix.models[name])
        if choice.backend is None:
            cannot[name] = choice.skip_reason or "cannot run"
        else:
            runnable.append(name)
    return {"backend": backend, "runnable": runnable, "cannot": cannot}
