"""sde_matrix.yaml -> :class:`~sdematrix.spec.models.Matrix`, checked three ways.

1. The file itself and its YAML (:mod:`sdematrix.inputs`): a regular file
   of bounded size, syntax (with line:column), control characters, nesting
   depth, an alias budget (an alias bomb is refused before anything expands
   it), recursive aliases, duplicate mapping keys (PyYAML silently keeps the
   last one, so they are found on the composed node tree).
2. The JSON schema (package data ``schema/sde_matrix.schema.json``); a
   violation is reported at the line of the offending key, found by walking
   the node tree along the error's JSON path.
3. Semantic rules the schema cannot express: every model has an expected path
   for every (mode, direction), expected paths have signatures, CPUID profiles
   agree with the XCR0, the isa list and the vector width they are declared
   with.  (An expectation the dispatch rule cannot meet, such as a VAES path
   for CFB8, is the run's business: it fails that cell, exit 1.)

Every failure is one :class:`~sdematrix.errors.MatrixFileError` whose message
is a single line ``FILE:LINE: what is wrong``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..errors import MatrixFileError, UnknownCpuError
from ..evidence.mix import Selector
from ..inputs import load_yaml, parse_yaml
from .choices import BACKEND_NAMES
from .models import DIRECTIONS, MODES, CpuidLeaf, CpuModel, Matrix, PathSignature, Workload
from .yaml_locate import (
    Located,
    fail,
    find_node,
    leaf_errors,
    locate_schema_error,
    node_line,
)

#: Paths that execute VAES instructions (never allowed for CFB8 / CFB1).
VAES_PATHS = frozenset({"vaes_avx2", "avx10_256", "avx512"})
#: Every (mode, direction) cell key, as written in the file: "gcm.encrypt".
CELL_KEYS = tuple(f"{m}.{d}" for m in MODES for d in DIRECTIONS)

_BRAND_LEAVES = (0x80000002, 0x80000003, 0x80000004)


def parse_matrix_yaml(text: str, source: Path) -> tuple[yaml.Node, Any]:
    """(root node, data): YAML syntax, control characters, depth, aliases,
    duplicate and non-string keys, each one line (see :mod:`sdematrix.inputs`)."""
    return parse_yaml(text, source, MatrixFileError)


# ---------------------------------------------------------------- schema --


@cache
def schema() -> dict[str, Any]:
    """The matrix file's JSON schema (draft 2020-12), from package data."""
    text = resources.files("sdematrix").joinpath("spec/schema/sde_matrix.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _validate_schema(data: Any, root: yaml.Node, source: Path) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    # (missing-key rank, line, where, message): an unknown key is reported in
    # preference to the "required" error a misspelt key also causes.
    located: list[tuple[int, int, str, str]] = []
    for err in validator.iter_errors(data):
        for leaf in leaf_errors(err):
            line, where, msg = locate_schema_error(leaf, root)
            located.append((int(leaf.validator == "required"), line, where, msg))
    if located:
        _rank, line, where, msg = min(located)
        more = f" (+{len(located) - 1} more)" if len(located) > 1 else ""
        raise fail(source, line, f"schema: {where}: {msg}{more}")


# -------------------------------------------------------------- semantics --

# CPUID bits the isa list and the vector width are cross-checked against:
# (leaf, subleaf, register, bit) -> iced-x86 CpuidFeature name.
_ISA_BITS: dict[str, tuple[int, int, str, int]] = {
    "SSSE3": (1, 0, "ecx", 9),
    "SSE4_1": (1, 0, "ecx", 19),
    "PCLMULQDQ": (1, 0, "ecx", 1),
    "AES": (1, 0, "ecx", 25),
    "AVX": (1, 0, "ecx", 28),
    "AVX2": (7, 0, "ebx", 5),
    "AVX512F": (7, 0, "ebx", 16),
    "AVX512BW": (7, 0, "ebx", 30),
    "AVX512VL": (7, 0, "ebx", 31),
    "VAES": (7, 0, "ecx", 9),
    "VPCLMULQDQ": (7, 0, "ecx", 10),
}


def _bit(
    leaves: Mapping[tuple[int, int], CpuidLeaf], leaf: int, sub: int, reg: str, bit: int
) -> bool:
    entry = leaves.get((leaf, sub))
    return entry is not None and bool((getattr(entry, reg) >> bit) & 1)


def _flatten(items: Iterable[Any]) -> Iterator[str]:
    for it in items:
        if isinstance(it, list):
            yield from _flatten(it)
        else:
            yield str(it)


@cache
def _iced_names() -> frozenset[str] | None:
    try:
        import iced_x86  # optional: only to check the spelling of isa names
    except ImportError:  # pragma: no cover - iced-x86 is a dependency
        return None
    return frozenset(n for n in dir(iced_x86.CpuidFeature) if n.isupper() or "_" in n)


def _brand_leaves(brand: str) -> list[CpuidLeaf]:
    raw = brand.encode("ascii").ljust(48, b"\0")
    out = []
    for i, leaf in enumerate(_BRAND_LEAVES):
        chunk = raw[16 * i : 16 * i + 16]
        regs = [int.from_bytes(chunk[j : j + 4], "little") for j in range(0, 16, 4)]
        out.append(CpuidLeaf(leaf, 0, *regs))
    return out


def _xsave_standard_size(leaves: Mapping[tuple[int, int], CpuidLeaf], mask: int) -> int:
    end = 576  # legacy region + XSAVE header
    for comp in range(2, 63):
        if mask >> comp & 1:
            sub = leaves.get((0xD, comp))
            if sub is not None and sub.eax:
                end = max(end, sub.ebx + sub.eax)
    return end


def _at(name: str, *p: str | int) -> tuple[str | int, ...]:
    """Where in the matrix file a fact about model ``name`` sits."""
    return ("models", name, *p)


def _model_leaves(name: str, cpuid_raw: Mapping[str, Any]) -> dict[tuple[int, int], CpuidLeaf]:
    """The model's CPUID leaves: the listed ones, then the brand string's."""
    leaves: dict[tuple[int, int], CpuidLeaf] = {}
    for i, lr in enumerate(cpuid_raw["leaves"]):
        key = (int(lr["leaf"]), int(lr.get("sub", 0)))
        if key in leaves:
            raise Located(
                _at(name, "cpuid", "leaves", i),
                f"model '{name}': CPUID leaf 0x{key[0]:x} sub-leaf {key[1]} given twice",
            )
        leaves[key] = CpuidLeaf(
            key[0], key[1], *(int(lr.get(r, 0)) for r in ("eax", "ebx", "ecx", "edx"))
        )
    brand = cpuid_raw.get("brand")
    if brand is not None:
        if not brand.isascii():
            raise Located(_at(name, "cpuid", "brand"), f"model '{name}': brand must be ASCII")
        for bl in _brand_leaves(brand):
            if (bl.leaf, 0) in leaves:
                raise Located(
                    _at(name, "cpuid", "brand"),
                    f"model '{name}': brand and an explicit leaf 0x{bl.leaf:x} both given",
                )
            leaves[(bl.leaf, 0)] = bl
    return leaves


def _check_leaf_range(
    name: str, raw: Mapping[str, Any], leaves: Mapping[tuple[int, int], CpuidLeaf]
) -> CpuidLeaf:
    """Leaf 0: vendor string and the highest basic leaf; 0x80000000: highest extended
    leaf.  Leaves 0 and 1 present, none above its maximum.  Returns leaf 0."""
    l0 = leaves.get((0, 0))
    if l0 is None:
        raise Located(_at(name, "cpuid", "leaves"), f"model '{name}': CPUID leaf 0 is missing")
    vendor = b"".join(r.to_bytes(4, "little") for r in (l0.ebx, l0.edx, l0.ecx)).decode("latin-1")
    if vendor != raw["vendor"]:
        raise Located(
            _at(name, "vendor"),
            f"model '{name}': leaf 0 spells vendor '{vendor}', not '{raw['vendor']}'",
        )
    if (1, 0) not in leaves:
        raise Located(_at(name, "cpuid", "leaves"), f"model '{name}': CPUID leaf 1 is missing")
    ext_max = leaves[(0x80000000, 0)].eax if (0x80000000, 0) in leaves else 0
    for lf, _sub in sorted(leaves):
        top = ext_max if lf >= 0x80000000 else l0.eax
        if lf > top and lf != 0x80000000:
            raise Located(
                _at(name, "cpuid", "leaves"),
                f"model '{name}': leaf 0x{lf:x} is above the maximum leaf 0x{top:x} "
                "the profile declares",
            )
    return l0


def _check_os_state(
    name: str, raw: Mapping[str, Any], leaves: Mapping[tuple[int, int], CpuidLeaf]
) -> int:
    """OSXSAVE iff the model's OS enables XSAVE; XCR0 within what 0xD.0 supports,
    and 0xD.0:EBX the size its components need.  Returns XCR0."""
    xcr0 = int(raw["xcr0"])
    osxsave = _bit(leaves, 1, 0, "ecx", 27)
    if osxsave != (xcr0 != 0):
        raise Located(
            _at(name, "xcr0"),
            f"model '{name}': xcr0 0x{xcr0:x} disagrees with CPUID.1:ECX.OSXSAVE={int(osxsave)}",
        )
    if not xcr0:
        return xcr0
    if xcr0 & 3 != 3:
        raise Located(
            _at(name, "xcr0"), f"model '{name}': xcr0 must enable x87 and SSE state (bits 0, 1)"
        )
    d0 = leaves.get((0xD, 0))
    if d0 is None:
        raise Located(
            _at(name, "cpuid", "leaves"),
            f"model '{name}': XSAVE enabled but leaf 0xD.0 is missing",
        )
    supported = d0.eax | (d0.edx << 32)
    if xcr0 & ~supported:
        raise Located(
            _at(name, "xcr0"),
            f"model '{name}': xcr0 0x{xcr0:x} enables state 0x{xcr0 & ~supported:x} "
            f"that CPUID.0xD.0 (0x{supported:x}) does not support",
        )
    want = _xsave_standard_size(leaves, xcr0)
    if d0.ebx != want:
        raise Located(
            _at(name, "cpuid", "leaves"),
            f"model '{name}': CPUID.0xD.0:EBX is {d0.ebx} but the enabled components "
            f"of xcr0 0x{xcr0:x} end at byte {want}",
        )
    return xcr0


def _check_avx10(
    name: str, leaves: Mapping[tuple[int, int], CpuidLeaf], max_basic: int
) -> tuple[bool, bool]:
    """AVX10 needs leaf 7 sub-leaf 1 reachable (7.0:EAX >= 1) and leaf 0x24.
    Returns (AVX10, AVX10 at 512 bits)."""
    avx10 = _bit(leaves, 7, 1, "edx", 19)
    avx10_512 = avx10 and _bit(leaves, 0x24, 0, "ebx", 18)
    l71 = leaves.get((7, 1))
    l70 = leaves.get((7, 0))
    if l71 is not None and (l71.eax or l71.edx) and (l70 is None or l70.eax < 1):
        raise Located(
            _at(name, "cpuid", "leaves"), f"model '{name}': leaf 7.1 is set but 7.0:EAX < 1"
        )
    # A profile whose max basic leaf reaches 0x24 must give it; one whose max
    # leaf stops below 0x24 (a hypervisor's `level=` cap) is a legal trap: the
    # AVX10 bit is set but its vector lengths are unreadable.
    if avx10 and max_basic >= 0x24 and (0x24, 0) not in leaves:
        raise Located(
            _at(name, "cpuid", "leaves"),
            f"model '{name}': AVX10 enumerated but leaf 0x24 is missing",
        )
    return avx10, avx10_512


def _check_isa(
    name: str, raw: Mapping[str, Any], leaves: Mapping[tuple[int, int], CpuidLeaf], avx10: bool
) -> frozenset[str]:
    """isa: known iced-x86 names; the dispatch-relevant ones agree with CPUID."""
    isa = frozenset(_flatten(raw["isa"]))
    known = _iced_names()
    if known is not None:
        unknown = sorted(isa - known)
        if unknown:
            raise Located(
                _at(name, "isa"),
                f"model '{name}': not iced-x86 CpuidFeature names: {', '.join(unknown)}",
            )
    for feat, (lf, sub, reg, bit) in _ISA_BITS.items():
        has = _bit(leaves, lf, sub, reg, bit)
        implied = avx10 and feat.startswith("AVX512")  # AVX10 implies them at its widths
        if (feat in isa) != (has or implied):
            state = "lists" if feat in isa else "lacks"
            raise Located(
                _at(name, "isa"),
                f"model '{name}': isa {state} {feat} but CPUID says {'yes' if has else 'no'}",
            )
    return isa


def _check_vector_bits(
    name: str,
    raw: Mapping[str, Any],
    leaves: Mapping[tuple[int, int], CpuidLeaf],
    avx10: bool,
    avx10_512: bool,
) -> None:
    """Widest vector register: zmm with AVX-512 (not an AVX10/256-only part), ymm with AVX."""
    if _bit(leaves, 7, 0, "ebx", 16) or avx10_512:
        widest = 512
    elif _bit(leaves, 1, 0, "ecx", 28) or avx10:
        widest = 256
    else:
        widest = 128
    if int(raw["max_vector_bits"]) != widest:
        raise Located(
            _at(name, "max_vector_bits"),
            f"model '{name}': max_vector_bits {raw['max_vector_bits']} "
            f"but its CPUID implies {widest}",
        )


def _check_address_sizes(
    name: str, raw: Mapping[str, Any], leaves: Mapping[tuple[int, int], CpuidLeaf]
) -> None:
    """0x80000008:EAX[15:8], the linear-address width, is 57 exactly when
    7.0:ECX.LA57 (bit 16) is set and 48 otherwise (SDM Vol. 3A 4.1.1;
    every public dump of an LA57 part reads 57: spr, emr, gnr, icx and the
    EPYC 9124 its profiles cite).  A width left zero is not checked."""
    e8 = leaves.get((0x80000008, 0))
    linear = (e8.eax >> 8) & 0xFF if e8 is not None else 0
    if not linear:
        return
    want = 57 if _bit(leaves, 7, 0, "ecx", 16) else 48
    if linear != want:
        at = next(i for i, lr in enumerate(raw["cpuid"]["leaves"]) if lr["leaf"] == 0x80000008)
        raise Located(
            _at(name, "cpuid", "leaves", at),
            f"model '{name}': CPUID.80000008H:EAX says {linear}-bit linear addresses "
            f"but 7.0:ECX.LA57={int(want == 57)} makes them {want}",
        )


def build_model(name: str, raw: Mapping[str, Any]) -> CpuModel:
    """One ``models:`` entry, its CPUID checked against its other facts in this order."""
    leaves = _model_leaves(name, raw["cpuid"])
    l0 = _check_leaf_range(name, raw, leaves)
    xcr0 = _check_os_state(name, raw, leaves)
    avx10, avx10_512 = _check_avx10(name, leaves, l0.eax)
    isa = _check_isa(name, raw, leaves, avx10)
    _check_vector_bits(name, raw, leaves, avx10, avx10_512)
    _check_address_sizes(name, raw, leaves)
    return CpuModel(
        name=name,
        title=str(raw["title"]),
        vendor=str(raw["vendor"]),
        sde_chip=raw["sde_chip"],
        qemu_model=raw["qemu_model"],
        chip_check_exe_only=bool(raw["chip_check_exe_only"]),
        cpuid=tuple(leaves[k] for k in sorted(leaves)),
        xcr0=xcr0,
        isa=isa,
        max_vector_bits=int(raw["max_vector_bits"]),
    )


def _build_signatures(raw: Mapping[str, Any]) -> dict[str, PathSignature]:
    out: dict[str, PathSignature] = {}
    for path, sr in raw.items():
        require = {
            key: tuple(Selector.parse(s) for s in sels)
            for key, sels in (sr.get("require") or {}).items()
        }
        forbid = tuple(Selector.parse(s) for s in (sr.get("forbid") or []))
        out[path] = PathSignature(path=path, scope=str(sr["scope"]), require=require, forbid=forbid)
    return out


def _build_expected(
    raw: Mapping[str, Any], models: Mapping[str, CpuModel], signatures: Mapping[str, PathSignature]
) -> dict[tuple[str, str, str], str]:
    classes: Mapping[str, list[str]] = raw["classes"]
    owner: dict[str, str] = {}
    for cls, cells in classes.items():
        for i, cell in enumerate(cells):
            if cell in owner:
                raise Located(
                    ("expected", "classes", cls, i),
                    f"cell '{cell}' is in class '{owner[cell]}' and in class '{cls}'",
                )
            owner[cell] = cls
    missing = [c for c in CELL_KEYS if c not in owner]
    if missing:
        raise Located(("expected", "classes"), f"no class holds cell(s) {', '.join(missing)}")

    per_model: Mapping[str, Mapping[str, str]] = raw["models"]
    for cpu in per_model:
        if cpu not in models:
            raise Located(
                ("expected", "models", cpu),
                f"expectations for undeclared model '{cpu}' (declared: {', '.join(models)})",
                key=True,
            )
    expected: dict[tuple[str, str, str], str] = {}
    for cpu in models:
        if cpu not in per_model:
            raise Located(
                ("models", cpu), f"model '{cpu}' has no entry under expected.models", key=True
            )
        entry = per_model[cpu]
        for cls in entry:
            if cls not in classes:
                raise Located(
                    ("expected", "models", cpu, cls),
                    f"model '{cpu}': unknown class '{cls}' (classes: {', '.join(classes)})",
                    key=True,
                )
        for cls, cells in classes.items():
            if cls not in entry:
                raise Located(
                    ("expected", "models", cpu), f"model '{cpu}' names no path for class '{cls}'"
                )
            for cell in cells:
                mode, direction = cell.split(".")
                expected[(cpu, mode, direction)] = entry[cls]

    for key, path in (raw.get("overrides") or {}).items():
        cpu, mode, direction = key.split(".")
        if cpu not in models:
            raise Located(
                ("expected", "overrides", key), f"override for undeclared model '{cpu}'", key=True
            )
        expected[(cpu, mode, direction)] = path

    for (cpu, mode, direction), path in expected.items():
        cell = f"{mode}.{direction}"
        override = f"{cpu}.{cell}"
        loc: tuple[str | int, ...] = (
            ("expected", "overrides", override)
            if override in (raw.get("overrides") or {})
            else ("expected", "models", cpu, owner[cell])
        )
        if path not in signatures:
            raise Located(loc, f"{cpu} {cell} expects path '{path}' which has no signature")
        # An expectation the dispatch rule cannot meet (e.g. a VAES path for
        # CFB8) is not a malformed file: the run reports it, exit 1, naming the
        # cell, the expected and actual path and the instructions seen.
    return expected


def _build(data: Mapping[str, Any], source: Path) -> Matrix:
    models = {name: build_model(name, raw) for name, raw in data["models"].items()}
    signatures = _build_signatures(data["signatures"])
    expected = _build_expected(data["expected"], models, signatures)
    workloads = {
        mode: tuple(Workload(int(w["key_bits"]), int(w["length"])) for w in data["workloads"][mode])
        for mode in MODES
    }
    return Matrix(
        source=source,
        models=models,
        signatures=signatures,
        expected=expected,
        workloads=workloads,
        seed=int(data.get("seed", 1)),
        backend_preference=tuple(data.get("backends", BACKEND_NAMES)),
        extra={
            "classes": {k: tuple(v) for k, v in data["expected"]["classes"].items()},
            "class_paths": {k: dict(v) for k, v in data["expected"]["models"].items()},
        },
    )


# ------------------------------------------------------------------- API --


def load_matrix(path: str | Path) -> Matrix:
    """Read, validate and build the matrix; MatrixFileError (one line) on any problem."""
    source = Path(path)
    root, data = load_yaml(source, what="the matrix file", error=MatrixFileError)
    if not isinstance(data, dict):
        raise fail(source, node_line(root), "the top level must be a mapping")
    _validate_schema(data, root, source)
    try:
        return _build(data, source)
    except Located as e:
        raise fail(source, node_line(find_node(root, e.path, key=e.key)), e.message) from None


def required_selectors(sig: PathSignature, mode: str, direction: str) -> tuple[Selector, ...]:
    """What `sig` requires for one cell: keys "*", "mode" and "mode.direction"
    (PathSignature.required_for knows only the first two)."""
    return sig.required_for(mode) + sig.require.get(f"{mode}.{direction}", ())


def select_cpus(matrix: Matrix, request: str | Sequence[str] | None) -> list[str]:
    """Resolve "spr,icl" | "all" | ["spr", "icl"] to model names (request
    order; "all" / empty = file order).  Unknown or repeated names raise
    UnknownCpuError naming the valid ones."""
    valid = list(matrix.models)
    if request is None:
        return valid
    items = (
        [s.strip() for s in request.split(",")]
        if isinstance(request, str)
        else [str(s).strip() for s in request]
    )
    if items in ([], ["all"]) or (len(items) == 1 and items[0] == ""):
        return valid
    if "" in items:
        raise UnknownCpuError(f"empty CPU name in {','.join(items)!r} (valid: {', '.join(valid)})")
    if "all" in items:
        raise UnknownCpuError("'all' cannot be combined with CPU names")
    unknown = [s for s in items if s not in matrix.models]
    if unknown:
        raise UnknownCpuError(
            f"unknown CPU {', '.join(repr(u) for u in unknown)} (valid: {', '.join(valid)})"
        )
    dups = sorted({s for s in items if items.count(s) > 1})
    if dups:
        raise UnknownCpuError(f"CPU named more than once: {', '.join(dups)}")
    return items
