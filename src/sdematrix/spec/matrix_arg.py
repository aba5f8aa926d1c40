"""The matrix file a command uses: ``--matrix FILE``, else ``./sde_matrix.yaml``,
else the one shipped with the package.  Shared by the CLI's commands, ``sdematrix
exec`` and the pytest plugin."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..errors import MatrixFileError
from .models import Matrix

__all__ = ["load_matrix_arg", "matrix_path"]


def matrix_path(arg: str | None) -> Path:
    """--matrix FILE, else ./sde_matrix.yaml, else the one shipped with the package."""
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


def load_matrix_arg(arg: str | None) -> Matrix:
    """The matrix `arg` (a --matrix value or None) names, built or from the cache."""
    from .matrix_cache import load_matrix_cached  # the full load when anything changed

    return load_matrix_cached(matrix_path(arg))
