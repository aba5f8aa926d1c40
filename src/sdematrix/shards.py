"""The GitHub Actions job matrix for the SDE models: a few shards, not one job
per model.

With ~40 SDE models one job each would spend most of the CI time installing
Python, the package and SDE again and again (and exceed what a free account
runs at once); a shard runs several models in one job (`sdematrix run --cpu
a,b,c`).  Models are dealt out largest-cost first to the least-loaded shard
(LPT), the cost being the model's cell count under SDE, where every cell is
one SDE start-up of roughly the same price; each shard then lists its models
in file order, so the same matrix always gives the same shards.
"""

from __future__ import annotations

from typing import Any

from .errors import SdeMatrixError
from .models import Matrix

#: Default upper bound on the number of jobs (GitHub runs 20 jobs at once on a
#: free account; leave room for the setup, publish and host-test jobs).
DEFAULT_MAX_SHARDS = 16


def sde_models(matrix: Matrix) -> list[str]:
    """Models SDE can emulate (an SDE chip), in file order."""
    return [n for n, m in matrix.models.items() if m.sde_chip]


def shard_models(matrix: Matrix, shards: int | None = None) -> list[list[str]]:
    """The SDE models split into `shards` groups (default: as many as models,
    at most DEFAULT_MAX_SHARDS); never an empty group."""
    names = sde_models(matrix)
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


def github_matrix(matrix: Matrix, shards: int | None = None) -> dict[str, Any]:
    """A `strategy.matrix` with one entry per shard: ``shard`` (a name for the
    job and its artifact), ``cpus`` (the --cpu value) and ``chips``."""
    groups = shard_models(matrix, shards)
    width = len(str(len(groups)))
    include = [
        {
            "shard": f"{i + 1:0{width}d}-of-{len(groups)}",
            "cpus": ",".join(g),
            "chips": ",".join(str(matrix.models[c].sde_chip) for c in g),
        }
        for i, g in enumerate(groups)
    ]
    return {"include": include}
