"""A disk cache of the built matrix, for the commands that start often.

:func:`sdematrix.spec.matrix_file.load_matrix` composes the YAML node by node (for
the line numbers of its error messages) and validates it against the JSON
schema: about a second of pure Python for the shipped 50-model file, paid by
every ``sdematrix exec`` before the program even starts -- a third of the
warm-cache wall time of a short program.  A file that loaded once loads the
same way again, so the built :class:`~sdematrix.spec.models.Matrix` is pickled
under ``$XDG_CACHE_HOME/sdematrix`` keyed by the SHA-256 of the file's text
and of the code and schema that build it: any edit of either misses the
cache and goes through the full, checked load.  A file that fails to load is
never cached (its error is raised by the full load, every time).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path

from .models import Matrix

__all__ = ["load_matrix_cached"]

_PKG = Path(__file__).resolve().parent.parent
# the modules and data the built Matrix depends on
_BUILDERS = (
    "spec/matrix_file.py",
    "spec/models.py",
    "evidence/mix.py",
    "spec/matrix_cache.py",
    "inputs.py",
)


@cache
def _code_key() -> bytes:
    h = hashlib.sha256()
    files = [_PKG / f for f in _BUILDERS] + sorted((_PKG / "spec" / "schema").glob("*"))
    for f in files:
        try:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        except OSError:
            h.update(f.name.encode() + b"\0missing")
    try:
        import iced_x86  # isa names are checked against iced's feature names

        h.update(str(getattr(iced_x86, "__version__", len(dir(iced_x86.CpuidFeature)))).encode())
    except ImportError:  # pragma: no cover - iced-x86 is a dependency
        h.update(b"no-iced")
    return h.digest()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sdematrix"


def load_matrix_cached(path: str | Path) -> Matrix:
    """:func:`sdematrix.spec.matrix_file.load_matrix`, from the cache when the file
    and the code that builds it are unchanged."""
    from ..errors import SdeMatrixError
    from ..inputs import MAX_YAML_BYTES, read_input
    from .matrix_file import load_matrix

    source = Path(path)
    try:  # the input layer's read: never blocks on a FIFO, bounded in size
        text = read_input(source, what="the matrix file", limit=MAX_YAML_BYTES)
    except SdeMatrixError:
        return load_matrix(source)  # the full load says what is wrong
    key = hashlib.sha256(_code_key() + str(source).encode() + b"\0" + text).hexdigest()
    entry = _cache_dir() / f"matrix-{key[:32]}.pickle"
    try:
        with entry.open("rb") as fh:
            got = pickle.load(fh)
        if isinstance(got, Matrix):
            return got
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass
    matrix = load_matrix(source)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".matrix-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(matrix, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, entry)
    except OSError:
        pass  # no cache then: the next run loads it in full again
    return matrix
