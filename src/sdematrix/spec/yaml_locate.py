"""Where in a YAML file a problem is: the node at a key path, its line, and
jsonschema errors turned into one located line.  Shared by the matrix file
(:mod:`sdematrix.spec.matrix_file`), the models-only file
(:mod:`sdematrix.spec.models_file`) and exec's expectations
(:mod:`sdematrix.spec.exec_expect`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import jsonschema
import yaml

from ..errors import MatrixFileError

__all__ = [
    "Located",
    "control_message",
    "dotted_path",
    "fail",
    "find_node",
    "leaf_errors",
    "locate_schema_error",
    "mapping_items",
    "node_line",
    "shown",
]

_MAX_MSG = 300


class Located(Exception):
    """A semantic problem plus the YAML path (keys / indices) it is about."""

    def __init__(self, path: Sequence[str | int], message: str, *, key: bool = False) -> None:
        super().__init__(message)
        self.path = tuple(path)
        self.message = message
        self.key = key  # point at the key itself rather than its value


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MSG else text[: _MAX_MSG - 3] + "..."


def fail(source: Path, line: int | None, message: str) -> MatrixFileError:
    where = f"{source}:{line}" if line is not None else str(source)
    return MatrixFileError(f"{where}: {_one_line(message)}")


# ------------------------------------------------------------ node tree --


def node_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def mapping_items(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """Key/value node pairs, following YAML merge keys (``<<: *anchor``)."""
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:merge":
            merged = v.value if isinstance(v, yaml.SequenceNode) else [v]
            for m in merged:
                if isinstance(m, yaml.MappingNode):
                    yield from mapping_items(m)
        else:
            yield k, v


def find_node(root: yaml.Node, path: Sequence[str | int], *, key: bool = False) -> yaml.Node:
    """The node at `path` (or the deepest ancestor that exists).  With `key`,
    the last step returns the key node instead of its value."""
    node = root
    for i, step in enumerate(path):
        nxt: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for k, v in mapping_items(node):
                if isinstance(k, yaml.ScalarNode) and k.value == str(step):
                    nxt = k if (key and i == len(path) - 1) else v
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(step, int)
            and 0 <= step < len(node.value)
        ):
            nxt = node.value[step]
        if nxt is None:
            return node
        node = nxt
    return node


def dotted_path(path: Iterable[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{shown(p)}" if out else shown(p))
    return out or "(top level)"


def leaf_errors(err: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For oneOf/anyOf failures, the sub-errors that went deepest."""
    if err.context:
        best = jsonschema.exceptions.best_match(err.context)
        if best is not None and len(best.absolute_path) > len(err.absolute_path):
            return leaf_errors(best)
    return [err]


def shown(text: object) -> str:
    """A value as the error line may show it: printable text as is, anything
    else escaped (a title's escape character never reaches the terminal)."""
    t = str(text)
    return t if t.isprintable() else ascii(t)[1:-1]


def control_message(err: jsonschema.ValidationError) -> str | None:
    """The message for a `noControl` violation (jsonschema's would be
    "... should not be valid under {...}")."""
    if err.validator != "not" or not isinstance(err.instance, str):
        return None
    bad = next((c for c in err.instance if not c.isprintable() or c in "\r\n\t"), None)
    if bad is None:
        return None
    return (
        f"'{shown(err.instance)}' contains control character U+{ord(bad):04X} "
        "(names, titles and keys are printable text)"
    )


def locate_schema_error(err: jsonschema.ValidationError, root: yaml.Node) -> tuple[int, str, str]:
    path = list(err.absolute_path)
    message = control_message(err) or err.message
    if "propertyNames" in err.schema_path and isinstance(err.instance, str):
        node = find_node(root, [*path, err.instance], key=True)
        return (
            node_line(node),
            dotted_path(path),
            f"key '{shown(err.instance)}' is not allowed: {message}",
        )
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        patterns = list(err.schema.get("patternProperties", {}))
        extra = [
            k
            for k in err.instance
            if k not in allowed and not any(re.search(p, str(k)) for p in patterns)
        ]
        if extra:
            node = find_node(root, [*path, extra[0]], key=True)
            hint = f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""
            return node_line(node), dotted_path(path), f"unknown key '{shown(extra[0])}'{hint}"
    node = find_node(root, path)
    return node_line(node), dotted_path(path), message
