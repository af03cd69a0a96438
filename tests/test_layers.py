"""The import graph of perfbisect: no cycles (lazy imports included), no cycle between packages and no
package importing a later one, nothing imports upward into the use cases or the CLI, and the value
modules stand on nothing but each other.

The packages and their order come from tools/restructure.py (``PACKAGES``, ``ORDER``, ``layer_of``),
which moves the flat modules into them: every rule here holds for both layouts, modules are named by
their last part (``trials`` is ``perfbisect.measure.trials`` or ``perfbisect.measure.trials``).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "perfbisect"
_spec = importlib.util.spec_from_file_location("perfbisect_restructure", ROOT / "tools" / "restructure.py")
restructure = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = restructure  # dataclasses look their module up there
_spec.loader.exec_module(restructure)

# Who may import the use cases (app) and the command line (cli): the layers above them.
MAY_IMPORT_APP = {"cli", "demo.run", "check"}
MAY_IMPORT_CLI = {"__main__"}
# Values every layer receives; they import nothing of perfbisect but each other.
VALUE_MODULES = {"settings", "model", "errors", "placeholders", "layout", "workload_kinds"}
# Deciding (engine) and measuring (measure) are siblings: neither imports the other. Until it moves, one
# module of measure still decides with the engine's statistics.
# The one exception left (issue #36): measure/noise_figures turns the stored noise figures into the engine's
# NoiseModel (with its variance-ratio test); run_allocation, under the trial runner, reads it for auto runs.
# It goes when the runner is handed its noise model by the use case.
MEASURE_MAY_IMPORT_ENGINE = {"noise_figures"}
# What each of them may import of the store: its public entry (``perfbisect.store``, whatever its __init__
# exposes), never one of its modules; the engine decides on values and needs none of it.
STORE_ENTRY = {"engine": set(), "measure": {"perfbisect.store"}}


def named(graph: dict[str, set[str]], short: str) -> str:
    """The dotted module whose name ends with ``short`` (``trials`` → ``perfbisect.measure.trials``)."""
    (found,) = [m for m in graph if m == f"perfbisect.{short}" or m.endswith(f".{short}")
                and m.count(".") <= short.count(".") + 2]
    return found


def _is(module: str, shorts: set[str]) -> bool:
    """``module`` is one of ``shorts`` (by its last parts), or inside one of them that is a package (``cli``)."""
    return any(module == f"perfbisect.{s}" or module.endswith(f".{s}") or module.startswith(f"perfbisect.{s}.")
               for s in shorts)


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
    assert named(graph, "app.bisection") in graph["perfbisect.cli.options"]  # loaded lazily, named in a string
    assert named(graph, "launch_checks") in graph[named(graph, "doctor")]  # imported inside a function
    assert "perfbisect.store.trial_queries" in graph["perfbisect.store.database"]  # `from . import trial_queries`
    assert named(graph, "settings") in graph[named(graph, "config")]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def _allowed_upward(name: str, target: str) -> bool:
    """The layers above the use cases and the CLI that enter them (the rules of the last tests)."""
    return ((_is(target, {"app"}) and _is(name, MAY_IMPORT_APP))
            or (_is(target, {"cli"}) and _is(name, MAY_IMPORT_CLI)))


def _collapsed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each package one node (its layer), each top-level module its own; the allowed entries into the
    use cases and the CLI (the hook's check enters the use cases; `python -m perfbisect`, the CLI) left out."""
    node = {m: restructure.layer_of(m) or m for m in graph}
    out: dict[str, set[str]] = {n: set() for n in node.values()}
    for m, targets in graph.items():
        out[node[m]] |= {node[t] for t in targets if node[t] != node[m] and not _allowed_upward(m, t)}
    return out


def test_no_cycles_between_packages() -> None:
    assert _cycles(_collapsed(import_graph())) == []


def test_no_package_imports_a_later_one() -> None:
    order = {layer: i for i, layer in enumerate(restructure.ORDER)}
    upward = sorted(
        (name, target)
        for name, targets in import_graph().items()
        for target in targets
        if (a := restructure.layer_of(name)) and (b := restructure.layer_of(target)) and order[b] > order[a]
    )
    assert upward == []


def test_every_module_has_a_place() -> None:
    """Each top-level module is placed in a package by tools/restructure.py or kept at the top on purpose;
    a new one must be given a place there (and in docs/architecture.md)."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    unplaced = [m for m in top if restructure.package_of(m) is None and m not in restructure.KEPT_AT_TOP]
    assert unplaced == [], "give these a package in tools/restructure.py's PACKAGES (or add them to KEPT_AT_TOP)"


def test_the_top_level_holds_at_most_15_modules() -> None:
    if (PACKAGE / "trials.py").exists():
        pytest.skip("flat layout: tools/restructure.py moves the modules into their packages")
    assert len(list(PACKAGE.glob("*.py"))) <= 15


def test_nothing_imports_upward_into_the_use_cases_or_the_cli() -> None:
    graph = import_graph()
    upward = sorted(
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if (_is(target, {"app"}) and not _is(name, {"app"} | MAY_IMPORT_APP))
        or (_is(target, {"cli"}) and not _is(name, {"cli"} | MAY_IMPORT_CLI))
    )
    assert upward == []


def test_value_modules_stand_on_nothing_but_values() -> None:
    graph = import_graph()
    values = {f"perfbisect.{v}" for v in VALUE_MODULES}
    assert {name: sorted(graph[name] - values) for name in values} == {name: [] for name in values}


def test_engine_and_measure_never_import_each_other_nor_the_stores_modules() -> None:
    graph = import_graph()
    crossing = sorted(
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if {restructure.layer_of(name), restructure.layer_of(target)} == {"engine", "measure"}
        and not (restructure.layer_of(name) == "measure" and name.rpartition(".")[2] in MEASURE_MAY_IMPORT_ENGINE)
    )
    assert crossing == []
    into_store = sorted(
        (name, target)
        for name, targets in graph.items()
        if (layer := restructure.layer_of(name)) in STORE_ENTRY
        for target in targets
        if restructure.layer_of(target) == "store" and target not in STORE_ENTRY[layer]
    )
    assert into_store == []
