"""Every module imports on its own in a fresh interpreter: no import cycle hides behind the
order in which the package happens to load its modules."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urlsieve

OPTIONAL = ("urlsieve.integrations.scrapy", "urlsieve.service", "urlsieve.seen.valkey")


def _modules() -> list[str]:
    names = [urlsieve.__name__]
    for info in pkgutil.walk_packages(urlsieve.__path__, prefix="urlsieve."):
        if info.name != "urlsieve.__main__":  # runs the command line when imported
            names.append(info.name)
    return sorted(names)


def _import_alone(name: str) -> tuple[str, int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, check=False
    )
    return name, proc.returncode, proc.stderr[-2000:]


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = _modules()
    assert len(modules) > 50  # the walk found the package, not an empty directory
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_import_alone, modules))
    failed = [
        (name, err)
        for name, code, err in results
        if code != 0 and not (name.startswith(OPTIONAL) and "ModuleNotFoundError" in err)
    ]
    assert not failed, failed


# -- the layers: who may import whom (read from the source, function-level imports too) --

SRC = Path(urlsieve.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """``(module, names imported from it, line)`` for every import in the file at ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return _imports_in(path.read_text("utf-8"), package)


def _imports_in(source: str, package: str) -> list[tuple[str, tuple[str, ...], int]]:
    """Every import at any depth, but those of a module-level ``__getattr__`` (PEP 562),
    where a module forwards names that moved elsewhere, for one release."""
    tree = ast.parse(source)
    forwarding = {
        id(inner)
        for top in tree.body
        if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
        for inner in ast.walk(top)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in forwarding:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((base, tuple(a.name for a in node.names), node.lineno))
    return found


def _sources() -> list[tuple[str, Path]]:
    return [(_module_name(p), p) for p in sorted(SRC.rglob("*.py"))]


def _subpackage(module: str) -> str | None:
    """``urlsieve.gateway.squid`` → ``gateway``; None for a module of the root package."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "urlsieve" or not (SRC / parts[1]).is_dir():
        return None
    return parts[1]


def test_no_module_imports_another_packages_private_names() -> None:
    """A subpackage's ``_private`` modules and names are its own: another subpackage uses
    what it exports. (The root package's ``urlsieve._accel``, ``_lines``… are shared by
    every subpackage: they are the package's own internals.)"""
    wrong = []
    for name, path in _sources():
        own = _subpackage(name)
        for target, names, line in _imports(path):
            theirs = _subpackage(target)
            if theirs is None or theirs == own:
                continue
            private = [p for p in target.split(".")[2:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(SRC)}:{line}: {target} {private}")
    assert not wrong, wrong


#: Subpackage → subpackages (or modules) it must not import. The entry points (the
#: command line, the Squid helper and service of ``gateway``, the Scrapy integration)
#: build what they run in the assembly room (``urlsieve.config``) and import nothing of
#: each other; the room builds from the parts and imports no entry point.
FORBIDDEN = {
    "cli": ("urlsieve.integrations", "urlsieve.gateway.config", "urlsieve.gateway.ruleset"),
    "gateway": ("urlsieve.cli", "urlsieve.integrations", "urlsieve.service", "urlsieve.config"),
    "service": ("urlsieve.cli", "urlsieve.integrations"),
    "console": (
        "urlsieve.cli",
        "urlsieve.integrations",
        "urlsieve.service",
        "urlsieve.gateway",
        "urlsieve.config",
    ),
    "integrations": ("urlsieve.cli", "urlsieve.gateway", "urlsieve.console"),
    "config": (
        "urlsieve.cli",
        "urlsieve.integrations",
        "urlsieve.console",
        "urlsieve.service",
        "urlsieve.gateway.ruleset",
    ),
    "policy": ("urlsieve.cli", "urlsieve.integrations", "urlsieve.gateway", "urlsieve.config"),
    "learn": ("urlsieve.cli", "urlsieve.integrations", "urlsieve.config"),
}
#: Forwarders (a module ``__getattr__``) are left out by :func:`_imports_in`: nothing else
#: is exempt.
FORBIDDEN_LEFT: set[str] = set()


def test_entry_points_build_in_the_assembly_room_and_not_from_each_other() -> None:
    wrong = []
    for name, path in _sources():
        for target, names, line in _imports(path):
            forbidden = () if name in FORBIDDEN_LEFT else FORBIDDEN.get(_subpackage(name) or "", ())
            full = [target, *(f"{target}.{n}" for n in names)]
            if any(t == f or t.startswith(f + ".") for t in full for f in forbidden):
                wrong.append(f"{path.relative_to(SRC)}:{line}: imports {target}")
    assert not wrong, wrong


def test_the_forbidden_imports_are_found() -> None:
    """The check above reads imports at any depth, relative ones too."""
    code = "def f():\n    from ..cli import main\n    import urlsieve.gateway.ruleset\n"
    found = {t for t, _, _ in _imports_in(code, "urlsieve.integrations")}
    assert found == {"urlsieve.cli", "urlsieve.gateway.ruleset"}
    forwarder = "def __getattr__(name):\n    import urlsieve.learn\n" + code
    found = {t for t, _, _ in _imports_in(forwarder, "urlsieve.integrations")}
    assert found == {"urlsieve.cli", "urlsieve.gateway.ruleset"}  # f's, not the forwarder's


def _private_attributes(tree: ast.AST) -> set[str]:
    """The ``_names`` a module defines: functions, classes, ``self._x`` and module names."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return {n for n in found if n.startswith("_")}


def test_the_policy_uses_the_matchers_public_interface_only() -> None:
    """``urlsieve.policy`` reads the compiled rules through :class:`SnapshotMatcher`'s
    public methods: no ``obj._name`` it reads (other than ``self``'s) is one the matchers
    (:mod:`urlsieve.match`) define and the policy does not."""
    trees = {p: ast.parse(p.read_text("utf-8")) for p in (SRC / "policy").glob("*.py")}
    own = set().union(*(_private_attributes(t) for t in trees.values()))
    matchers = set().union(
        *(
            _private_attributes(ast.parse(p.read_text("utf-8")))
            for p in (SRC / "match").glob("*.py")
        )
    )
    assert len(matchers) > 10  # the matchers were read (their private names found)
    wrong = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and node.attr in matchers - own
            ):
                wrong.append(f"{path.name}:{node.lineno}: ._{node.attr.lstrip('_')}")
    assert not wrong, wrong
