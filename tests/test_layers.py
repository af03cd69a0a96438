"""The import graph of perfbisect: no cycles (lazy imports included), nothing imports upward into the
use cases or the CLI, and the value modules stand on nothing but each other."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "perfbisect"
# Who may import the use cases (app) and the command line (cli): the layers above them.
MAY_IMPORT_APP = {"perfbisect.cli", "perfbisect.demo.run", "perfbisect.check"}
MAY_IMPORT_CLI = {"perfbisect.__main__", "perfbisect.hookworker"}
# Values every layer receives; they import nothing of perfbisect but each other.
VALUE_MODULES = {"perfbisect.settings", "perfbisect.model", "perfbisect.errors", "perfbisect.placeholders",
                 "perfbisect.layout"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the perfbisect modules it imports anywhere in its body (lazy imports too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                targets = [f"{full}.{a.name}" if f"{full}.{a.name}" in modules else full for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_import_lazily"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                targets = [node.args[0].value]  # cli's lazily loaded modules
            else:
                continue
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name and target.startswith("perfbisect"):
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_of_every_kind() -> None:
    graph = import_graph()
    assert "perfbisect.app" in graph["perfbisect.cli"]  # loaded lazily, named in a string
    assert "perfbisect.trials" in graph["perfbisect.doctor"]  # imported inside a function
    assert "perfbisect.store.queries" in graph["perfbisect.store.database"]  # `from . import queries`
    assert "perfbisect.settings" in graph["perfbisect.config"]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def test_nothing_imports_upward_into_the_use_cases_or_the_cli() -> None:
    graph = import_graph()
    upward = sorted(
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if (target == "perfbisect.app" and name not in MAY_IMPORT_APP)
        or (target == "perfbisect.cli" and name not in MAY_IMPORT_CLI)
    )
    assert upward == []


def test_value_modules_stand_on_nothing_but_values() -> None:
    graph = import_graph()
    assert {name: sorted(graph[name] - VALUE_MODULES) for name in VALUE_MODULES} == {name: [] for name in VALUE_MODULES}
