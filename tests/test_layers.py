"""The import graph of perfbisect. The layer contract itself — which package may import which, the one way into
the use cases, value modules on nothing but values, the engine without the store — is pyproject.toml's
``[tool.importlinter]`` contracts, run here with import-linter's ``lint-imports``. This file adds what those do not
say: no cycle between modules (lazy imports included, and modules the CLI loads by name) nor between packages,
and a top level of at most 15 modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "perfbisect"

# Who may import the use cases (app) and the command line (cli): the layers above them (the contracts say the same).
MAY_IMPORT_APP = {"cli", "demo.run", "check"}
MAY_IMPORT_CLI = {"__main__"}


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


def _package_of(module: str) -> str | None:
    """The package a module is in (``perfbisect.measure.trials`` → ``measure``); None for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def _collapsed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each package one node (its layer), each top-level module its own; the allowed entries into the
    use cases and the CLI (the hook's check enters the use cases; `python -m perfbisect`, the CLI) left out."""
    node = {m: _package_of(m) or m for m in graph}
    out: dict[str, set[str]] = {n: set() for n in node.values()}
    for m, targets in graph.items():
        out[node[m]] |= {node[t] for t in targets if node[t] != node[m] and not _allowed_upward(m, t)}
    return out


def test_no_cycles_between_packages() -> None:
    assert _cycles(_collapsed(import_graph())) == []


def test_the_top_level_holds_at_most_15_modules() -> None:
    assert len(list(PACKAGE.glob("*.py"))) <= 15


def test_the_layer_contracts_in_pyproject_hold() -> None:
    """pyproject.toml's import-linter contracts, checked as CI checks them (lazy imports included: grimp reads every
    import statement)."""
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), "import-linter is in the test dependency group: `uv run pytest` installs it"
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "BROKEN" not in proc.stdout
