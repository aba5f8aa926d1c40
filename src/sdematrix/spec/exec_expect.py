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

Selectors are the signatures' (:class:`sdematrix.evidence.mix.Selector`); counts come
from the region mix, limited to the functions whose image and name match the
scope globs.  A model an entry does not apply to is not judged by it.

The file fails closed: every feature (``has``/``lacks``), model name or glob
and selector value (``isa_set``, ``isa_ext``, ``mnemonic``, ``encoding``,
``width``) must name something that exists (:mod:`sdematrix.spec.isa_names`),
else ``FILE:LINE: ...`` with a suggestion, exit 2; ``category`` (only SDE's
mixes have categories) is refused.  ``has``/``lacks`` judge the features the
model's XCR0 lets software use (:func:`sdematrix.spec.isa_names.effective_features`).
A ``require`` whose scope matched no function of the mix fails saying so.
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

from ..errors import MatrixFileError
from ..evidence.mix import Mix, MixCounts, Selector, format_form
from ..inputs import load_yaml
from ..verdict.reasons import Kind, Reason
from . import isa_names
from .models import CpuModel, Matrix
from .yaml_locate import find_node, leaf_errors, locate_schema_error, node_line

__all__ = ["Expectation", "applied", "judge_expectations", "load_expectations"]

_GLOB = frozenset("*?[")


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
        usable = isa_names.effective_features(model)
        return all(f in usable for f in self.has) and not any(f in usable for f in self.lacks)

    def scope_text(self) -> str:
        parts = [f"image {self.image}"] if self.image else []
        parts += [f"function {self.function}"] if self.function else []
        return " in " + ", ".join(parts) if parts else ""


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("sdematrix").joinpath("spec/schema/exec_expect.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _check_name(
    value: str,
    vocab: frozenset[str],
    what: str,
    aliases: dict[str, str] | None = None,
    *,
    glob: bool = True,
) -> str | None:
    """Why `value` names nothing in `vocab` (None: it does).  A glob must
    match at least one name."""
    if glob and _GLOB & set(value):
        if any(fnmatch.fnmatchcase(v, value) for v in vocab):
            return None
        return f"{what} pattern {value!r} matches no {what}" + isa_names.suggest(
            value, vocab, aliases
        )
    if value in vocab:
        return None
    return f"unknown {what} {value!r}" + isa_names.suggest(value, vocab, aliases)


def _name_errors(e: dict[str, Any], matrix: Matrix | None) -> list[tuple[list[str | int], str]]:
    """(path in the entry, message) for every name in the entry that names nothing."""
    out: list[tuple[list[str | int], str]] = []
    feats = isa_names.feature_names()
    for key in ("has", "lacks"):
        for j, f in enumerate(e.get(key, ())):
            why = _check_name(f, feats, "feature", glob=False)
            if why:
                out.append(
                    (
                        [key, j],
                        (
                            f"{key}: {why} (iced-x86 CpuidFeature names, "
                            "as `sdematrix explain MODEL --features` lists them)"
                        ),
                    )
                )
    if matrix is not None:
        names = frozenset(matrix.models)
        aliases = {m.title.lower(): n for n, m in matrix.models.items()}
        for j, m in enumerate(e.get("models", ())):
            why = _check_name(m, names, "model", aliases)
            if why:
                out.append((["models", j], f"models: {why}"))
    vocab = {
        "isa_set": isa_names.isa_sets(),
        "isa_ext": isa_names.isa_exts(),
        "mnemonic": isa_names.mnemonics(),
        "encoding": frozenset(isa_names.ENCODINGS),
        "width": frozenset(isa_names.WIDTHS),
    }
    for kind in ("require", "forbid"):
        for j, sel in enumerate(e.get(kind, ())):
            for field, value in sel.items():
                path: list[str | int] = [kind, j, field]
                if field == "category":
                    out.append(
                        (
                            path,
                            (
                                f"{kind}: category selectors match only SDE mixes; "
                                "exec's mixes have isa_set / isa_ext, not categories"
                            ),
                        )
                    )
                    continue
                text = str(value).upper() if field == "mnemonic" else str(value)
                why = _check_name(text, vocab[field], field.replace("_", " "))
                if why:
                    out.append((path, f"{kind}: {why}"))
    return out


def load_expectations(path: str | Path, matrix: Matrix | None = None) -> list[Expectation]:
    """Parse and check an expectations file (MatrixFileError, exit 2): the
    schema, then every name (features, models when `matrix` is given, selector
    values) against what exists."""
    source = Path(path)
    root, data = load_yaml(source, what="the expectations file", error=MatrixFileError)
    errors = []
    for err in jsonschema.Draft202012Validator(_schema()).iter_errors(data):
        for leaf in leaf_errors(err):
            line, where, msg = locate_schema_error(leaf, root)
            errors.append((int(leaf.validator == "required"), line, where, msg))
    if errors:
        _rank, line, where, msg = min(errors)
        raise MatrixFileError(f"{source}:{line}: schema: {where}: {msg}")
    out: list[Expectation] = []
    for i, e in enumerate(data["expectations"]):
        if not e.get("require") and not e.get("forbid"):
            line = node_line(find_node(root, ["expectations", i]))
            raise MatrixFileError(f"{source}:{line}: expectations[{i}]: needs require or forbid")
        for where, msg in _name_errors(e, matrix):
            line = node_line(find_node(root, ["expectations", i, *where]))
            raise MatrixFileError(f"{source}:{line}: expectations[{i}].{msg}")
        scope = e.get("scope", {})
        out.append(
            Expectation(
                name=e.get("name")
                or f"expectations[{i}] (line {node_line(find_node(root, ['expectations', i]))})",
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


def applied(model: CpuModel, exps: list[Expectation]) -> list[Expectation]:
    """The expectations that judge `model`'s run."""
    return [e for e in exps if e.applies_to(model)]


def _scope_matched(mix: Mix, exp: Expectation) -> bool:
    if exp.image is None and exp.function is None:
        return True
    return any(
        _match(exp.image, fm.image) and _match(exp.function, fm.name) for fm in mix.functions
    )


def judge_expectations(mix: Mix | None, model: CpuModel, exps: list[Expectation]) -> list[str]:
    """One reason (of kind expectation) per broken rule (empty: every applicable
    rule holds)."""
    reasons: list[str] = []  # Reason each
    for exp in applied(model, exps):
        if mix is None:
            reasons.append(Reason(f"{exp.name}: no mix to judge", Kind.EXPECTATION))
            continue
        counts = scoped_counts(mix, exp.image, exp.function)
        where = exp.scope_text()
        if exp.require and not _scope_matched(mix, exp):
            reasons.append(
                Reason(
                    f"{exp.name}: required {', '.join(s.describe() for s in exp.require)}{where}, "
                    f"but the scope matched nothing: no function of the {mix.meta.get('region', 'run')}"
                    " mix is in it",
                    Kind.EXPECTATION,
                )
            )
            continue
        for sel in exp.require:
            if sel.count(counts) == 0:
                reasons.append(
                    Reason(
                        f"{exp.name}: required but not executed{where}: "
                        f"{sel.describe()} (the selector matched none of the "
                        f"scope's {counts.total} instructions)",
                        Kind.EXPECTATION,
                    )
                )
        for sel in exp.forbid:
            n = sel.count(counts)
            if n:
                detail = _offenders(mix, sel, exp)
                reasons.append(
                    Reason(
                        f"{exp.name}: forbidden but executed {n}x{where}: {sel.describe()}"
                        + (f" -- {detail}" if detail else ""),
                        Kind.EXPECTATION,
                    )
                )
    return reasons
