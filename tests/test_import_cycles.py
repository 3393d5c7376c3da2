"""No two modules of ``reconciler`` import each other, directly or around a longer circle.

The layers contract (``[tool.importlinter]`` in pyproject.toml) orders the packages; this test
orders the modules inside each package too. A circle means neither module can be read, tested
or moved without the other: the piece they share belongs in one place both import.

Every import counts, wherever it is written:

- imports inside functions, put off until the function runs (to keep start-up fast), are
  dependencies all the same, only loaded later;
- imports under ``if TYPE_CHECKING:`` count too. A type a module names is part of what it
  depends on: mypy reads both modules together, a reader has to, and the circle is one
  annotation used at run time away from an ImportError. The shared type belongs in the module
  that owns it, or the module that needs it states what it needs (a Protocol).

The graph is grimp's (the one import-linter checks the contracts on), built from the source
each time (no cache: an edit is seen at once).
"""

from __future__ import annotations

from collections.abc import Mapping

import grimp

PACKAGE = "reconciler"


def import_graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def circles(imports: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion):
    each is a set of modules every one of which reaches every other through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            step = next(todo, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(imports.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    """The circle's modules, and each import that joins two of them, with its line."""
    inside = set(component)
    lines = [" <-> ".join(component)]
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & inside):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"    {importer}:{detail['line_number']}: {detail['line_contents']}")
    return "\n".join(lines)


def test_no_module_of_the_package_imports_another_that_imports_it_back() -> None:
    graph = import_graph()
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    found = circles(imports)
    assert not found, "modules that import each other (move what they share to one of them):\n" + (
        "\n".join(describe(graph, c) for c in found)
    )


def test_circles_finds_pairs_longer_circles_and_nothing_else() -> None:
    imports = {
        "a": {"b"},
        "b": {"a", "c"},  # a <-> b
        "c": {"d"},
        "d": {"e"},
        "e": {"c", "f"},  # c -> d -> e -> c
        "f": set(),
        "g": {"f", "a"},  # imports into a circle without being in one
        "h": {"h"},  # a module's own name: not a circle between modules
    }
    assert circles(imports) == [["a", "b"], ["c", "d", "e"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
