"""No import circle inside `sdk` or `local_backend`: each module's imports of its own package form a DAG.

Imports are read from the source (every `import` and `from ... import`, at any depth, under
`TYPE_CHECKING` too: a type-only circle is still a circle to the reader), so nothing is executed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sdk", "local_backend")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's own modules that `path` imports (`from package import submodule` names the submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph(package: str) -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in (ROOT / package).rglob("*.py")}
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def folder_of(module: str) -> str:
    """`package.<folder>` for a module in a folder of its package, the module itself at the root."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph as a path that returns to its start, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_find_cycle_reports_a_circle_and_passes_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_relative_type_only_and_nested_imports():
    graph = import_graph("local_backend")
    assert "local_backend.engine.sequence" in graph["local_backend.engine.scheduler"]
    assert "local_backend.server.app" in graph
    assert all(target.startswith("local_backend") for targets in graph.values() for target in targets)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_has_no_import_circle(package):
    assert find_cycle(import_graph(package)) is None


LOCAL_BACKEND_LAYERS = ("kernels", "model", "sampling", "engine", "server")
"""local_backend's folders, lowest first: each imports only those before it (and the root's `_constants`)."""


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> set[tuple[str, str]]:
    """(importer, imported) pairs where a module of one layer imports a module of a later layer."""

    def layer(module: str) -> int | None:
        folder = folder_of(module).partition(".")[2]
        return layers.index(folder) if folder in layers else None

    return {
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if (low := layer(source)) is not None and (high := layer(target)) is not None and high > low
    }


def test_upward_imports_finds_a_lower_layer_importing_a_higher_one():
    graph = {"p.low.a": {"p.high.b", "p.low.c"}, "p.high.b": {"p.low.a"}, "p.low.c": set()}
    assert upward_imports(graph, ("low", "high")) == {("p.low.a", "p.high.b")}


def test_local_backend_folders_are_layers():
    assert upward_imports(import_graph("local_backend"), LOCAL_BACKEND_LAYERS) == set()
