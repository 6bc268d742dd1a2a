"""The code's map (ARCHITECTURE.md) matches the code; modules stay small; no import circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "samplers"
MAP = (ROOT / "ARCHITECTURE.md").read_text()


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _mapped() -> set[str]:
    """The modules the map's tree lists, as paths relative to ``samplers/``.

    A line opens with one or more names (``core.py``, ``plan/``, or ``a.py, b.py``); a
    name indented under a folder lies in it, and one indented under a module lies beside it.
    """
    tree = MAP.split("```")[1]
    listed: set[str] = set()
    scopes: list[tuple[int, str]] = []  # (indent, folder) of the enclosing entries
    for line in tree.splitlines()[2:]:  # below "samplers/"
        entry = re.match(r"( *)((?:[a-z_]+(?:\.py|/)(?:, )?)+)", line)
        if not entry:
            continue  # a description continued on its own line
        indent = len(entry.group(1))
        while scopes and scopes[-1][0] >= indent:
            scopes.pop()
        folder = scopes[-1][1] if scopes else ""
        names = [name for name in entry.group(2).split(", ") if name]
        for name in names:
            if name.endswith(".py"):
                listed.add(folder + name)
        last = names[-1]
        scopes.append((indent, folder + last if last.endswith("/") else folder))
    return listed


def test_every_module_is_on_the_map_and_every_module_on_it_exists() -> None:
    listed = _mapped()
    present = {
        path.relative_to(PACKAGE).as_posix() for path in _modules() if path.name != "__init__.py"
    }
    assert present <= listed, sorted(present - listed)
    assert listed <= present, sorted(listed - present)


def test_the_hooks_the_map_names_are_the_cores() -> None:
    core = (PACKAGE / "core.py").read_text()
    for hook in re.findall(r"`(_[a-z_]+)\(", MAP):
        assert f"def {hook}(" in core or any(
            f"def {hook}(" in path.read_text() for path in _modules()
        ), hook


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules()
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert not long


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("samplers"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("samplers"))
    return found


def test_the_package_has_no_import_circle() -> None:
    names = {}
    for path in _modules():
        relative = path.relative_to(ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        names[".".join(parts)] = path
    graph = {
        name: {imported for imported in _imports(path) if imported in names and imported != name}
        for name, path in names.items()
    }
    # A package's __init__ re-exports its modules; only module-to-module edges count.
    packages = {name for name, path in names.items() if path.name == "__init__.py"}
    graph = {name: edges - packages for name, edges in graph.items() if name not in packages}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, " -> ".join([*visiting, name])
        visiting.append(name)
        for edge in graph.get(name, ()):
            visit(edge)
        visiting.pop()
        done.add(name)

    for name in graph:
        visit(name)
