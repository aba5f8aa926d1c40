"""sdematrix: run the vaescrypt library as if on a matrix of CPU models and prove
from instruction mixes which code path ran."""

__version__ = "0.1.0"
