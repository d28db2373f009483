"""The package's layers, read from the source: no import circle between modules (imports
inside functions count: a lazy import is still a dependency), and none between the
first-level packages. (Private names and the entry points' layers: tests/test_imports.py.)

Imports under ``if TYPE_CHECKING:`` are left out (they never run); the root package
``urlsieve`` is the public facade every module may import from."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import urlsieve

ROOT = Path(urlsieve.__file__).parent


def _module_names() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _module_names()


def _runtime_nodes(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run. Left out: ``if TYPE_CHECKING:`` blocks, and a
    module-level ``__getattr__`` (PEP 562), where a module forwards the names that moved
    elsewhere for one release: an alias for old callers, not a dependency of the module."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            skipped.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
            yield node


def _imports(name: str) -> Iterator[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for each runtime import."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in MODULES:
                yield full, None, node.lineno
            else:
                yield base, alias.name, node.lineno


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _, _ in _imports(name):
            if target in MODULES and target not in (name, "urlsieve"):
                graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_graph_is_read() -> None:
    graph = _graph()
    assert len(graph) > 100
    assert "urlsieve.url.parse" in graph["urlsieve.filter"] or any(
        target.startswith("urlsieve.url") for target in graph["urlsieve.filter"]
    )


def test_the_circle_finder_finds_circles() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_import_circle() -> None:
    assert _circles(_graph()) == []


def test_no_package_import_circle() -> None:
    packages: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for name, targets in _graph().items():
        for target in targets:
            a, b = _package(name), _package(target)
            if a != b:
                packages.setdefault(a, set()).add(b)
                packages.setdefault(b, set())
                why.setdefault((a, b), f"{name} -> {target}")
    circles = _circles(packages)
    explained = [
        [why[(a, b)] for a in circle for b in circle if (a, b) in why] for circle in circles
    ]
    assert circles == [], explained
