"""sdematrix: run the vaescrypt library as if on a matrix of CPU models and prove
from instruction mixes which code path ran."""

from ._version import __version__

__all__ = ["__version__"]
