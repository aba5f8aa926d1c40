"""One exception class per exit code (the CLI maps them; nothing else exits)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # some cell failed or errored
EXIT_USAGE = 2  # bad input: YAML, schema, unknown CPU, missing backend, ...
EXIT_INTERRUPTED = 130


class SdeMatrixError(Exception):
    """Base class; `exit_code` is what the CLI returns; str() is one line."""

    exit_code = EXIT_USAGE


class MatrixFileError(SdeMatrixError):
    """sde_matrix.yaml is unreadable, not YAML, or violates the schema."""


class UnknownCpuError(SdeMatrixError):
    """A CPU name that the matrix does not declare."""


class BackendUnavailableError(SdeMatrixError):
    """An explicitly requested backend cannot run here (no SDE, no qemu, ...)."""


class MixFileError(SdeMatrixError):
    """A mix file that is corrupt or truncated."""


class OutputDirError(SdeMatrixError):
    """The output directory cannot be created or written."""


class InputFileError(SdeMatrixError):
    """An input file that is not a regular file, too large, or hostile
    (alias bomb, deep nesting, control characters, out-of-range numbers)."""
