"""A models-only matrix file (``sdematrix exec --models FILE``): custom CPU
models without vaescrypt's paths, signatures and expectations.

    version: 1            # optional
    models:
      mychip:
        title: ...
        vendor: intel
        isa: [SSE4_2, AVX2, ...]
        ...               # every model key sde_matrix.yaml takes

Each model is checked against the same schema and the same semantic checks
as a model of sde_matrix.yaml (errors one line ``FILE:LINE: ...``, exit 2);
the rest of the matrix (unused by exec) is the packaged one's.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from ..errors import MatrixFileError
from .matrix_file import build_model, load_matrix, parse_matrix_yaml, schema
from .models import Matrix
from .yaml_locate import Located, fail, find_node, leaf_errors, locate_schema_error, node_line

__all__ = ["load_models_matrix"]


def _models_schema() -> dict[str, Any]:
    full = schema()
    return {
        "$schema": full.get("$schema", "https://json-schema.org/draft/2020-12/schema"),
        "$defs": full.get("$defs", {}),
        "type": "object",
        "required": ["models"],
        "additionalProperties": False,
        "patternProperties": full.get("patternProperties", {}),
        "properties": {
            "version": full["properties"]["version"],
            "models": full["properties"]["models"],
        },
    }


def load_models_matrix(path: str | Path) -> Matrix:
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MatrixFileError(f"{source}: cannot read the models file: {e}") from None
    root, data = parse_matrix_yaml(text, source)
    if not isinstance(data, dict):
        raise fail(source, node_line(root), "the top level must be a mapping with a `models:` key")
    located = []
    for err in jsonschema.Draft202012Validator(_models_schema()).iter_errors(data):
        for leaf in leaf_errors(err):
            line, where, msg = locate_schema_error(leaf, root)
            located.append((int(leaf.validator == "required"), line, where, msg))
    if located:
        _rank, line, where, msg = min(located)
        raise fail(source, line, f"schema: {where}: {msg}")
    models = {}
    for name, raw in data["models"].items():
        try:
            models[name] = build_model(name, raw)
        except Located as e:
            raise fail(source, node_line(find_node(root, e.path, key=e.key)), e.message) from None
    shipped = Path(str(resources.files("sdematrix").joinpath("sde_matrix.yaml")))
    base = load_matrix(shipped)
    return dataclasses.replace(base, source=source, models=models)
