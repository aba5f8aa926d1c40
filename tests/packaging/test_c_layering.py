"""The C units call one way: no two of them call each other, directly or
round a longer loop.

- The library: native/ calls dispatch/ (the pure policy and the CPU probe),
  never the reverse; dispatch/ includes nothing from native/.
- The tracer (src/sdematrix/tracer/): the units form a chain, tracer.c on
  top (nothing calls it), profile.c / whole.c / tzcnt.c ... below.

Read from the objects' symbol tables (`nm`): unit A depends on unit B when
an undefined symbol of A is defined by B.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from _by_path import buildinfo

ROOT = Path(__file__).resolve().parents[2]

Graph = dict[str, set[str]]


def _nm(obj: Path, *args: str) -> set[str]:
    nm = shutil.which("nm")
    assert nm is not None, "nm (binutils) is needed: ci/bootstrap.sh installs it"
    out = subprocess.run([nm, *args, str(obj)], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1] for ln in out.splitlines() if ln.strip()}


def _graph(objs: dict[str, Path]) -> Graph:
    defined = {u: _nm(o, "--defined-only", "--extern-only") for u, o in objs.items()}
    graph: Graph = {}
    for unit, obj in objs.items():
        undef = _nm(obj, "--undefined-only")
        graph[unit] = {other for other, syms in defined.items() if other != unit and undef & syms}
    return graph


def _cycle(graph: Graph) -> list[str] | None:
    """One dependency cycle (its units in order), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return [*stack[stack.index(v) :], v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.fixture(scope="module")
def bi() -> ModuleType:
    b = buildinfo()
    if not b.have_compiler():
        pytest.fail("no C compiler: the layering check compiles the units")
    return b


def test_library_calls_go_native_to_dispatch(bi: ModuleType, tmp_path: Path) -> None:
    srcs = bi.library_sources(ROOT)
    objs = bi.compile_objects(srcs, tmp_path, root=ROOT)
    units = {str(s.relative_to(ROOT)): o for s, o in zip(srcs, objs)}
    graph = _graph(units)
    assert graph["native/front.c"] >= {"native/select.c"}  # the check sees calls
    assert graph["native/select.c"] >= {"dispatch/policy.c", "native/tiers.c"}
    cycle = _cycle(graph)
    assert cycle is None, f"C units call each other: {' -> '.join(cycle)}"
    for unit, deps in graph.items():
        if unit.startswith("dispatch/"):
            assert not [d for d in deps if d.startswith("native/")], (unit, deps)
    native_headers = {p.name for p in (ROOT / "native").rglob("*.h")}
    for src in (ROOT / "dispatch").rglob("*.[ch]"):
        included = set(re.findall(r'^\s*#\s*include\s*"([^"]+)"', src.read_text(), re.MULTILINE))
        assert not included & native_headers, f"{src} includes from native/: {included}"
        assert "#pragma weak" not in src.read_text(), src


def test_tracer_units_form_a_chain(bi: ModuleType, tmp_path: Path) -> None:
    srcs = bi.tracer_sources(ROOT)
    assert srcs, "no tracer sources"
    objs = bi.compile_objects(srcs, tmp_path, root=ROOT, flags=list(bi.TRACER_FLAGS))
    graph = _graph({s.name: o for s, o in zip(srcs, objs)})
    assert "whole.c" in graph["tracer.c"]  # the check sees calls
    cycle = _cycle(graph)
    assert cycle is None, f"tracer units call each other: {' -> '.join(cycle)}"
    assert not [u for u, deps in graph.items() if "tracer.c" in deps], graph
