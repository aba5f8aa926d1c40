"""The package's import structure, read with `ast` from src/sdematrix (nothing is imported).

* No module takes a private name (``_x``, not ``__x__``) from another module
  with ``from M import _x``: what a module shares it names without the underscore.
* No import cycle among sdematrix modules.  Every ``import``/``from ... import``
  counts, at module level and inside functions alike: an import deferred into a
  function still makes the importer depend on the imported module, and deferring
  it is the usual way a cycle gets hidden rather than removed.  Imports under
  ``if TYPE_CHECKING:`` do not count (they never run).  Names given as strings
  (``importlib.import_module("sdematrix...")``) are not followed.
* ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
  module, else of ``pkg``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "sdematrix"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from X import` names."""
    if not node.level:
        return node.module or ""
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    parts = pkg.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _edges(module: str) -> list[tuple[str, str, int]]:
    """(imported module, name taken, line) of each import in `module`."""
    path = MODULES[module]
    out = []
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
            continue
        base = _base(module, path, node)
        for a in node.names:
            sub = f"{base}.{a.name}"
            out.append((sub, "", node.lineno) if sub in MODULES else (base, a.name, node.lineno))
    return [(m, n, line) for m, n, line in out if m in MODULES]


GRAPH: dict[str, dict[str, int]] = {}
for _m in MODULES:
    GRAPH[_m] = {}
    for _dep, _name, _line in _edges(_m):
        if _dep != _m:
            GRAPH[_m].setdefault(_dep, _line)


def private_imports() -> list[str]:
    found = []
    for module, path in MODULES.items():
        for dep, name, line in _edges(module):
            if dep != module and name.startswith("_") and not name.startswith("__"):
                found.append(f"{path.relative_to(PKG.parent)}:{line}: {name} from {dep}")
    return found


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    return sorted(sccs)


def _describe(comp: list[str]) -> str:
    members = set(comp)
    arrows = [
        f"{a} -> {b} (line {line})"
        for a in comp
        for b, line in sorted(GRAPH[a].items())
        if b in members
    ]
    return "; ".join(arrows)


def test_the_checks_see_the_package() -> None:
    assert "sdematrix" in MODULES and len(MODULES) > 30, sorted(MODULES)
    assert any(GRAPH.values()), "no import between sdematrix modules found"


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports()
    assert found == [], "private names imported from another module:\n" + "\n".join(found)


def test_no_import_cycle() -> None:
    cycles = import_cycles()
    assert cycles == [], "import cycles:\n" + "\n".join(_describe(c) for c in cycles)


@pytest.mark.parametrize(
    ("a_source", "b_source", "expect_private", "expect_cycle"),
    [
        ("from .b import _x\n", "_x = 1\n", True, False),
        ("from .b import __version__, y\n", "__version__ = y = 1\n", False, False),
        ("from . import b\n", "from . import a\n", False, True),
        ("def f():\n    from .b import y\n", "from .a import f\ny = 1\n", False, True),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import y\n",
            "from .a import TYPE_CHECKING\ny = 1\n",
            False,
            False,
        ),
    ],
)
def test_the_checks_catch_what_they_claim(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    a_source: str,
    b_source: str,
    expect_private: bool,
    expect_cycle: bool,
) -> None:
    """Both checks, run on a two-module package written here."""
    pkg = tmp_path / "sdematrix"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(a_source)
    (pkg / "b.py").write_text(b_source)
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "PKG", pkg)
    monkeypatch.setattr(this, "MODULES", {_module_name(p): p for p in sorted(pkg.rglob("*.py"))})
    graph = {m: {d: line for d, _, line in _edges(m) if d != m} for m in this.MODULES}
    monkeypatch.setattr(this, "GRAPH", graph)
    assert bool(private_imports()) is expect_private
    assert bool(import_cycles()) is expect_cycle
