"""``sdematrix exec --expect FILE``: what each model's run must (not) execute.

The file (YAML, schema ``schema/exec_expect.schema.json``, errors one line
``FILE:LINE: ...`` as for sde_matrix.yaml)::

    expectations:
      - name: AES-NI used where the model has it
        has: [AES]                    # model class: features in model.isa
        models: ["*"]                 # names or globs (default: every model)
        scope: {image: "libcrypto*", function: "aesni_*"}   # default: whole mix
        require: [{mnemonic: AESENC}]
        forbid:  [{isa_set: "VAES*"}]

Selectors are the signatures' (:class:`sdematrix.mix.Selector`); counts come
from the region mix, limited to the functions whose image and name match the
scope globs.  A model an entry does not apply to is not judged by it.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from .errors import MatrixFileError
from .inputs import load_yaml
from .matrix_file import _find, _leaf_errors, _line, _locate_schema_error
from .mix import Mix, MixCounts, Selector, format_form
from .models import CpuModel

__all__ = ["Expectation", "judge_expectations", "load_expectations"]


@dataclass(frozen=True)
class Expectation:
    name: str
    models: tuple[str, ...]
    has: tuple[str, ...]
    lacks: tuple[str, ...]
    image: str | None
    function: str | None
    require: tuple[Selector, ...]
    forbid: tuple[Selector, ...]

    def applies_to(self, model: CpuModel) -> bool:
        if self.models and not any(fnmatch.fnmatchcase(model.name, p) for p in self.models):
            return False
        return all(f in model.isa for f in self.has) and not any(f in model.isa for f in self.lacks)

    def scope_text(self) -> str:
        parts = [f"image {self.image}"] if self.image else []
        parts += [f"function {self.function}"] if self.function else []
        return " in " + ", ".join(parts) if parts else ""


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("sdematrix").joinpath("schema/exec_expect.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def load_expectations(path: str | Path) -> list[Expectation]:
    """Parse and schema-check an expectations file (MatrixFileError, exit 2)."""
    source = Path(path)
    root, data = load_yaml(source, what="the expectations file", error=MatrixFileError)
    errors = []
    for err in jsonschema.Draft202012Validator(_schema()).iter_errors(data):
        for leaf in _leaf_errors(err):
            line, where, msg = _locate_schema_error(leaf, root)
            errors.append((int(leaf.validator == "required"), line, where, msg))
    if errors:
        _rank, line, where, msg = min(errors)
        raise MatrixFileError(f"{source}:{line}: schema: {where}: {msg}")
    out: list[Expectation] = []
    for i, e in enumerate(data["expectations"]):
        if not e.get("require") and not e.get("forbid"):
            line = _line(_find(root, ["expectations", i]))
            raise MatrixFileError(f"{source}:{line}: expectations[{i}]: needs require or forbid")
        scope = e.get("scope", {})
        out.append(
            Expectation(
                name=e.get("name") or f"expectations[{i}] (line {_line(_find(root, ['expectations', i]))})",
                models=tuple(e.get("models", ())),
                has=tuple(e.get("has", ())),
                lacks=tuple(e.get("lacks", ())),
                image=scope.get("image"),
                function=scope.get("function"),
                require=tuple(Selector.parse(s) for s in e.get("require", ())),
                forbid=tuple(Selector.parse(s) for s in e.get("forbid", ())),
            )
        )
    return out


def _match(pattern: str | None, text: str) -> bool:
    if pattern is None:
        return True
    return fnmatch.fnmatch(text, pattern) or fnmatch.fnmatch(text.rsplit("/", 1)[-1], pattern)


def scoped_counts(mix: Mix, image: str | None, function: str | None) -> MixCounts:
    """The counts of the functions whose image and name match the globs."""
    if image is None and function is None:
        return mix.overall
    out = MixCounts()
    for fm in mix.functions:
        if _match(image, fm.image) and _match(function, fm.name):
            out.merge(fm.counts)
    return out


def _offenders(mix: Mix, sel: Selector, exp: Expectation, limit: int = 3) -> str:
    rows = []
    for fm in mix.functions:
        if not (_match(exp.image, fm.image) and _match(exp.function, fm.name)):
            continue
        n = sel.count(fm.counts)
        if n:
            forms = sel.matching_forms(fm.counts).most_common(1) if sel.is_form() else []
            what = format_form(forms[0][0]) if forms else sel.describe()
            rows.append((n, f"{what} x{n} in {fm.name} ({fm.image.rsplit('/', 1)[-1]})"))
    rows.sort(key=lambda r: -r[0])
    return "; ".join(r[1] for r in rows[:limit])


def judge_expectations(mix: Mix | None, model: CpuModel, exps: list[Expectation]) -> list[str]:
    """One reason per broken rule (empty: every applicable rule holds)."""
    reasons: list[str] = []
    for exp in exps:
        if not exp.applies_to(model):
            continue
        if mix is None:
            reasons.append(f"{exp.name}: no mix to judge")
            continue
        counts = scoped_counts(mix, exp.image, exp.function)
        where = exp.scope_text()
        for sel in exp.require:
            if sel.count(counts) == 0:
                reasons.append(f"{exp.name}: required but not executed{where}: {sel.describe()}")
        for sel in exp.forbid:
            n = sel.count(counts)
            if n:
                detail = _offenders(mix, sel, exp)
                reasons.append(
                    f"{exp.name}: forbidden but executed {n}x{where}: {sel.describe()}"
                    + (f" -- {detail}" if detail else "")
                )
    return reasons
