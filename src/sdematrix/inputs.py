"""One loading layer for every file the CLI reads (and every path it writes).

Hostile or odd input must cost bounded time and memory and end in one line
``FILE[:LINE]: what is wrong`` with exit code 2, never a hang or a traceback:

* :func:`read_input` -- only regular files (a FIFO, a device or a directory
  is refused at once: opening is non-blocking and the type is checked on the
  open descriptor), at most a per-kind number of bytes;
* :func:`load_yaml` -- PyYAML's safe loader with control characters refused
  before parsing, nesting depth capped while composing (so the recursive
  composer never nears Python's recursion limit), a budget of alias uses and
  of *expanded* nodes (an alias bomb is a small node graph whose expansion is
  exponential: the expansion is counted on the graph, memoised, before any
  consumer walks it), recursive aliases, duplicate and non-string keys, and
  scalars PyYAML cannot construct (a 5,000-digit integer) -- each with the
  line of the node;
* :func:`load_json` -- ``json`` with integers bounded to 40 digits, depth
  capped, and every failure one line;
* :func:`check_xml` -- a streaming pre-pass (expat, linear) that refuses a
  DOCTYPE (no entity can be declared, so none can expand) and deep nesting,
  before ElementTree builds or serialises a tree recursively;
* :func:`bounded_int` -- decimal/hex text to int with a digit limit, for the
  line parsers (SDE mix, tracer output);
* :func:`check_output_path` -- an output path checked up front: no control
  character in its name, not a file where a directory is wanted (or the
  reverse), and a writable place to create it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import xml.parsers.expat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .errors import InputFileError, OutputDirError, SdeMatrixError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_MIX_BYTES",
    "MAX_XML_BYTES",
    "MAX_YAML_BYTES",
    "JsonProblem",
    "bounded_int",
    "check_output_args",
    "check_output_path",
    "check_xml",
    "decode_json",
    "load_json",
    "load_yaml",
    "parse_json",
    "parse_yaml",
    "read_input",
    "read_text_input",
]

ErrorClass = type[SdeMatrixError]

# Size limits per kind: each is ~10x the largest real file of that kind
# (the shipped 500-cell matrix is 168 KB; a results.json of 20,000 cells
# ~30 MB; SDE mixes of whole programs a few MB).
MAX_YAML_BYTES = 4 << 20
MAX_JSON_BYTES = 256 << 20
MAX_MIX_BYTES = 256 << 20
MAX_XML_BYTES = 256 << 20

#: YAML: deepest collection nesting (the matrix needs 7).
MAX_YAML_DEPTH = 64
#: YAML: alias uses (``*name``) per document (the shipped matrix has 310).
MAX_YAML_ALIASES = 2000
#: YAML: nodes after expanding every alias (the shipped matrix: 10,278).
MAX_YAML_EXPANDED = 200_000
#: JSON and XML: deepest nesting (results/cell/mix JSON need 6, JUnit 4).
MAX_JSON_DEPTH = 64
MAX_XML_DEPTH = 64
#: Digits of any integer a reader accepts (a u64 has 20 decimal digits).
MAX_INT_DIGITS = 40

_MAX_MSG = 300


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_MSG else text[: _MAX_MSG - 3] + "..."


def _fail(error: ErrorClass, source: object, line: int | None, message: str) -> SdeMatrixError:
    where = f"{source}:{line}" if line is not None else str(source)
    return error(f"{where}: {_one_line(message)}")


# ------------------------------------------------------------- raw files --

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_input(
    path: str | Path, *, what: str, limit: int, error: ErrorClass = InputFileError
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, else `error`
    (one line).  Never blocks on a FIFO or a device: the path is stat'ed
    first, opened non-blocking, and the descriptor's type checked again (a
    path swapped for a FIFO in between is still refused)."""
    p = Path(path)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise _fail(
                error, p, None, f"cannot read {what}: it is {_kind(st.st_mode)}, not a regular file"
            )
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise _fail(error, p, None, f"cannot read {what}: {e.strerror or e}") from None
    except ValueError as e:  # a NUL in the name
        raise _fail(error, ascii(str(p)), None, f"cannot read {what}: {e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _fail(
                error, p, None, f"cannot read {what}: it is {_kind(st.st_mode)}, not a regular file"
            )
        if st.st_size > limit:
            raise _fail(
                error,
                p,
                None,
                f"{what} is {st.st_size} bytes, more than the {limit} this reader accepts",
            )
        chunks: list[bytes] = []
        got = 0
        while True:  # read to EOF, but never more than limit + 1 (a growing file)
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise _fail(
                    error, p, None, f"{what} grew past the {limit} bytes this reader accepts"
                )
    except OSError as e:
        raise _fail(error, p, None, f"cannot read {what}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text_input(
    path: str | Path,
    *,
    what: str,
    limit: int,
    error: ErrorClass = InputFileError,
    strict: bool = True,
) -> str:
    """:func:`read_input` decoded as UTF-8; with `strict`, invalid UTF-8 is
    `error` naming the line, else it is replaced (U+FFFD)."""
    data = read_input(path, what=what, limit=limit, error=error)
    try:
        return data.decode("utf-8", errors="strict" if strict else "replace")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise _fail(
            error, path, line, f"cannot read {what}: not UTF-8 text (byte 0x{data[e.start]:02x})"
        ) from None


# ------------------------------------------------------------------ numbers --


def bounded_int(text: str, base: int = 10, *, digits: int = MAX_INT_DIGITS) -> int:
    """int(text, base), refusing more than `digits` digits (ValueError), so
    no parser ever meets Python's 4,300-digit conversion limit or spends
    quadratic time converting a huge number."""
    body = text.strip().lstrip("+-")
    if base == 16 and body[:2] in ("0x", "0X"):
        body = body[2:]
    if len(body.lstrip("0")) > digits:
        raise ValueError(f"number of {len(body)} digits is out of range")
    return int(text, base)


# --------------------------------------------------------------------- YAML --

# Characters YAML 1.1 does not allow in a stream (tab, LF, CR, NEL and the
# printable planes are allowed); PyYAML's reader refuses them with an
# exception that has no line, and surrogates can only come from an odd decode.
_YAML_BAD_CHAR = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]"
)


class _YamlLimit(yaml.MarkedYAMLError):
    """A limit of this loader, raised while composing (with the node's mark)."""


# libyaml's scanner and parser (C, non-recursive: a state stack) when PyYAML
# was built with it, ~10x faster than the pure-Python ones; the composer is
# always PyYAML's Python one, so the depth cap and the alias count below see
# every node before it is built.
try:
    from yaml.cyaml import CParser as _EventSource

    _HAVE_CPARSER = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _EventSource = yaml.parser.Parser  # type: ignore[assignment,misc]
    _HAVE_CPARSER = False


class _BoundedLoader(
    yaml.composer.Composer, _EventSource, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
):
    """A safe loader whose composer caps depth and counts alias uses, and
    whose constructor turns a value error of one scalar into a marked error."""

    def __init__(self, stream: str) -> None:
        if _HAVE_CPARSER:
            _EventSource.__init__(self, stream)
        else:  # pragma: no cover - PyYAML without libyaml
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                ev = self.peek_event()
                raise _YamlLimit(
                    None,
                    None,
                    f"more than {MAX_YAML_ALIASES} alias uses (an alias bomb?)",
                    ev.start_mark,
                )
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                ev = self.peek_event()
                raise _YamlLimit(
                    None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", ev.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except Exception as e:  # noqa: BLE001 - PyYAML's constructors raise
            # ValueError (int('9' * 5000), a 13th month), AttributeError (a
            # !!timestamp its regex does not match), TypeError, ...: all are
            # a value this file cannot hold
            shown = node.value[:40] if isinstance(node.value, str) else node.tag
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"cannot read the value {shown!r}: {type(e).__name__}: {e}",
                node.start_mark,
            ) from None


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


def _check_graph(root: yaml.Node, source: object, error: ErrorClass) -> None:
    """One iterative walk of the composed node graph: recursive aliases,
    the expanded size (memoised per node: an alias bomb's graph is small),
    integers too long to convert, duplicate and non-string mapping keys."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    # (node, children iterator state): an explicit stack, no recursion
    stack: list[tuple[yaml.Node, list[yaml.Node], int]] = []

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            _check_keys(node, source, error)
            return [x for kv in node.value for x in kv]
        return []

    def enter(node: yaml.Node) -> None:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
                raise _fail(
                    error,
                    source,
                    _line(node),
                    f"number of {len(node.value)} characters is out of range",
                )
            size[id(node)] = 1
            return
        on_path.add(id(node))
        stack.append((node, children(node), 0))

    enter(root)
    while stack:
        node, kids, i = stack[-1]
        if i < len(kids):
            stack[-1] = (node, kids, i + 1)
            kid = kids[i]
            if id(kid) in on_path:
                raise _fail(error, source, _line(kid), "recursive alias: a node contains itself")
            if id(kid) not in size:
                enter(kid)
            continue
        stack.pop()
        on_path.discard(id(node))
        total = 1 + sum(size[id(k)] for k in kids)
        if total > MAX_YAML_EXPANDED:
            raise _fail(
                error,
                source,
                _line(node),
                f"expands to more than {MAX_YAML_EXPANDED} nodes through aliases (an alias bomb?)",
            )
        size[id(node)] = total


def _check_keys(node: yaml.MappingNode, source: object, error: ErrorClass) -> None:
    names: dict[str, yaml.Node] = {}
    for k, _v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag == _MERGE_TAG:
            continue
        if not isinstance(k, yaml.ScalarNode) or k.tag != _STR_TAG:
            shown = k.value if isinstance(k, yaml.ScalarNode) else "a collection"
            raise _fail(
                error, source, _line(k), f"mapping key {shown!r} must be a string (quote it)"
            )
        if k.value in names:
            raise _fail(
                error,
                source,
                _line(k),
                f"duplicate key '{k.value}' (first defined at line {_line(names[k.value])})",
            )
        names[k.value] = k


def parse_yaml(
    text: str, source: object, error: ErrorClass = InputFileError
) -> tuple[yaml.Node, Any]:
    """(root node, constructed data) of one YAML document, every problem one
    line ``SOURCE:LINE[:COL]: ...`` as `error`."""
    bad = _YAML_BAD_CHAR.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise _fail(
            error,
            source,
            line,
            f"control character U+{ord(bad.group()):04X} "
            "is not allowed in YAML (write it as an escape in a quoted string)",
        )
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise _fail(error, source, None, "the file is empty")
        _check_graph(node, source, error)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = e.problem or e.context or "malformed YAML"
        kind = "" if isinstance(e, _YamlLimit) else "YAML syntax error: "
        if isinstance(e, yaml.constructor.ConstructorError):
            kind = ""
        if mark is None:
            raise _fail(error, source, None, f"{kind}{what}") from None
        raise error(
            f"{source}:{mark.line + 1}:{mark.column + 1}: {kind}{_one_line(what)}"
        ) from None
    except yaml.YAMLError as e:
        raise _fail(error, source, None, f"YAML error: {e}") from None
    except RecursionError:  # pragma: no cover - the depth cap comes first
        raise _fail(error, source, None, "nested too deeply") from None
    finally:
        loader.dispose()
    return node, data


def load_yaml(
    path: str | Path,
    *,
    what: str = "YAML file",
    error: ErrorClass = InputFileError,
    limit: int = MAX_YAML_BYTES,
) -> tuple[yaml.Node, Any]:
    """:func:`read_text_input` then :func:`parse_yaml`."""
    text = read_text_input(path, what=what, limit=limit, error=error)
    return parse_yaml(text, path, error)


# --------------------------------------------------------------------- JSON --


class _JsonNumber(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonNumber(text)
    return int(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_walk(obj: Any, strings: bool) -> str | None:
    """Why `obj` is refused (too deep; with `strings`, a lone surrogate,
    which no UTF-8 writer can encode), or None -- iteratively."""
    todo: list[tuple[Any, int]] = [(obj, 1)]
    while todo:
        o, d = todo.pop()
        if d > MAX_JSON_DEPTH:
            return f"nested more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(o, dict):
            if strings and any(_SURROGATE.search(k) for k in o):
                return "a key holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
            todo.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            todo.extend((v, d + 1) for v in o)
        elif strings and isinstance(o, str) and _SURROGATE.search(o):
            return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
    return None


class JsonProblem(ValueError):
    """Why a JSON text was refused: `msg`, and `line` when it is known."""

    def __init__(self, msg: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {msg}" if line is not None else msg)
        self.msg = msg
        self.line = line


def decode_json(text: str) -> Any:
    """json.loads with integers of at most MAX_INT_DIGITS digits and at most
    MAX_JSON_DEPTH levels; any failure is :class:`JsonProblem`."""
    try:
        obj = json.loads(text, parse_int=_json_int)
    except _JsonNumber as e:
        pos = text.find(e.text)
        line = text.count("\n", 0, pos) + 1 if pos >= 0 else None
        raise JsonProblem(f"number of {len(e.text)} digits is out of range", line) from None
    except json.JSONDecodeError as e:
        raise JsonProblem(e.msg, e.lineno) from None
    except RecursionError:
        raise JsonProblem("nested too deeply") from None
    except ValueError as e:  # a number the scanner cannot hold
        raise JsonProblem(str(e)) from None
    # strings are walked only when the text has a \\uD8xx-style escape
    why = _json_walk(obj, strings=bool(re.search(r"\\[uU][dD][89a-fA-F]", text)))
    if why is not None:
        raise JsonProblem(why)
    return obj


def parse_json(text: str, source: object, error: ErrorClass = InputFileError) -> Any:
    """:func:`decode_json`, a failure one line ``SOURCE:LINE: ...`` as `error`."""
    try:
        return decode_json(text)
    except JsonProblem as e:
        raise _fail(error, source, e.line, f"not valid JSON: {e.msg}") from None


def load_json(
    path: str | Path,
    *,
    what: str = "JSON file",
    error: ErrorClass = InputFileError,
    limit: int = MAX_JSON_BYTES,
) -> Any:
    """A JSON file through :func:`read_text_input` and :func:`parse_json`."""
    return parse_json(read_text_input(path, what=what, limit=limit, error=error), path, error)


# ---------------------------------------------------------------------- XML --


def check_xml(data: bytes, source: object, error: ErrorClass = InputFileError) -> None:
    """Refuse, in one linear expat pass, what ElementTree would expand or
    recurse on: any DOCTYPE (entities come only from one) and nesting deeper
    than MAX_XML_DEPTH; malformed XML is `error` with its line."""
    parser = xml.parsers.expat.ParserCreate()
    depth = 0

    class _Refused(Exception):
        pass

    def doctype(*_args: object) -> None:
        raise _Refused("a DOCTYPE is not allowed (JUnit needs none; entities are refused)")

    def start(_name: str, _attrs: object) -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_XML_DEPTH:
            raise _Refused(f"elements nested more than {MAX_XML_DEPTH} levels deep")

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = doctype
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except (LookupError, ValueError) as e:  # an encoding= expat/Python does not know
        raise _fail(error, source, None, f"not well-formed XML: {type(e).__name__}: {e}") from None
    except _Refused as e:
        raise _fail(error, source, parser.CurrentLineNumber, str(e)) from None
    except xml.parsers.expat.ExpatError as e:
        msg = xml.parsers.expat.errors.messages.get(e.code, str(e)) if e.code else str(e)
        raise _fail(error, source, e.lineno, f"not well-formed XML: {msg}") from None


# ------------------------------------------------------------------ outputs --

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_output_path(
    path: str | Path, *, what: str, want_dir: bool, error: ErrorClass = OutputDirError
) -> None:
    """Refuse, before any work, an output path that cannot be written: a
    control character (a newline) in its name, an existing entry of the
    wrong type, or no writable directory to create it in.  Writing itself
    (a full disk) stays the writer's business.  One line: "DIR is not
    writable: why" for a directory, "cannot write FILE: why" for a file."""
    text = str(path)

    def bad(why: str) -> SdeMatrixError:
        shown = text if text.isprintable() else ascii(text)
        if want_dir:
            return error(f"{what} {shown} is not writable: {why}")
        return error(f"cannot write {what} {shown}: {why}")

    ctl = _CONTROL.search(text)
    if ctl:
        raise bad(f"the name contains control character U+{ord(ctl.group()):04X}")
    if not text:
        raise bad("empty path")
    try:
        _check_place(Path(path), want_dir, bad)
    except OSError as e:  # a stat that fails (EACCES, ELOOP, ENAMETOOLONG)
        raise bad(e.strerror or str(e)) from None


def _check_place(p: Path, want_dir: bool, bad: Callable[[str], SdeMatrixError]) -> None:
    if p.exists():
        st = os.stat(p)
        if want_dir and not stat.S_ISDIR(st.st_mode):
            raise bad(f"it exists and is {_describe(st.st_mode)}, not a directory")
        if not want_dir and stat.S_ISDIR(st.st_mode):
            raise bad("Is a directory")
        _probe_writable(p if want_dir else p.absolute().parent, bad)
        return
    if p.is_symlink():
        raise bad("a dangling symbolic link")
    # the nearest existing ancestor must be a directory we can write in
    anc = p.absolute().parent
    while not anc.exists():
        if anc.is_symlink():
            raise bad(f"{anc} is a dangling symbolic link")
        anc = anc.parent
    if not anc.is_dir():
        raise bad(f"{anc} is {_describe(os.stat(anc).st_mode)}, not a directory")
    _probe_writable(anc, bad)


def _probe_writable(directory: Path, bad: Callable[[str], SdeMatrixError]) -> None:
    """Create and remove a file in `directory`: the only honest test (root
    passes os.access on a read-only file system)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".sdematrix-write-test-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise bad(f"cannot create files in {directory}: {e.strerror or e}") from None


def _describe(mode: int) -> str:
    return "a regular file" if stat.S_ISREG(mode) else _kind(mode)


#: (command, attribute, what, wants a directory) of the CLI's output options.
_OUTPUT_ARGS: tuple[tuple[str | None, str, str, bool], ...] = (
    ("merge-junit", "out", "merged JUnit file", False),
    (None, "out", "output directory", True),
    (None, "junit", "JUnit file", False),
    (None, "html", "HTML report", False),
    (None, "markdown", "markdown summary", False),
    (None, "report", "report directory", True),
)


def check_output_args(args: Any, check: Callable[..., None] = check_output_path) -> None:
    """Every output path option the parsed command line carries, checked by
    :func:`check_output_path` (``--markdown -`` is stdout)."""
    command = getattr(args, "command", None)
    done: set[str] = set()
    for cmd, attr, what, want_dir in _OUTPUT_ARGS:
        if attr in done or (cmd is not None and cmd != command):
            continue
        value = getattr(args, attr, None)
        if not isinstance(value, str) or (attr == "markdown" and value == "-"):
            continue
        done.add(attr)
        check(value, what=what, want_dir=want_dir)
