"""The code's map (ARCHITECTURE.md) matches the code; modules stay small; no import circle;
no import in ``studies/`` runs up its layers (as the map lists them)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "samplers"
STUDIES = ROOT / "studies"
MAP = (ROOT / "ARCHITECTURE.md").read_text()


def _modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(package.rglob("*.py"))


def _mapped(package: Path = PACKAGE) -> set[str]:
    """The modules the map's tree of ``package`` lists, as paths relative to it.

    The tree is the map's code block that opens with ``samplers/`` (or ``studies/``). A
    line opens with one or more names (``core.py``, ``plan/``, or ``a.py, b.py``); a name
    indented under a folder lies in it, and one indented under a module lies beside it.
    """
    (tree,) = [
        block for block in MAP.split("```")[1::2] if block.startswith(f"\n{package.name}/\n")
    ]
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


@pytest.mark.parametrize("package", [PACKAGE, STUDIES], ids=lambda path: path.name)
def test_every_module_is_on_the_map_and_every_module_on_it_exists(package: Path) -> None:
    listed = _mapped(package)
    present = {
        path.relative_to(package).as_posix()
        for path in _modules(package)
        if path.name != "__init__.py"
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


def _imports(path: Path, package: str = "samplers") -> set[str]:
    """What ``path`` imports from ``package``, anywhere in it (inside functions too): each
    module, and each name taken from one as ``module.name``; relative imports resolved."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative to the package that holds ``path``
                parts = path.relative_to(ROOT).parent.parts
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if module.split(".")[0] == package:
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == package)
    return found


@pytest.mark.parametrize("package", [PACKAGE, STUDIES], ids=lambda path: path.name)
def test_the_package_has_no_import_circle(package: Path) -> None:
    names = {}
    for path in _modules(package):
        relative = path.relative_to(ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        names[".".join(parts)] = path
    graph = {
        name: {
            imported
            for imported in _imports(path, package.name)
            if imported in names and imported != name
        }
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


def _layers() -> list[set[str]]:
    """The layers of ``studies/``, bottom first, as the map lists them: the backticked
    names (``core/``, ``report.py``) that open each item of the numbered list under
    "The layers of `studies/`"."""
    section = MAP.split("**The layers of `studies/`**", 1)[1]
    layers: list[set[str]] = []
    for line in section.splitlines():
        item = re.match(r"(\d+)\. ((?:`[a-z_]+(?:\.py|/)`(?:, )?)+)", line)
        if item:
            assert int(item.group(1)) == len(layers) + 1, line
            layers.append(set(re.findall(r"`([^`]+)`", item.group(2))))
        elif layers and not line.startswith(" "):
            break  # the list ended
    return layers


def _top(module: str) -> str | None:
    """The package or module at the top of ``studies/`` that holds the dotted ``module``
    (``"core/"`` for ``studies.core.cases``, ``"report.py"`` for ``studies.report``), or
    None for ``studies`` itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return f"{parts[1]}/" if (STUDIES / parts[1]).is_dir() else f"{parts[1]}.py"


def test_every_package_and_module_at_the_top_of_studies_is_in_one_layer() -> None:
    listed = [name for layer in _layers() for name in layer]
    assert len(listed) == len(set(listed)), listed
    tops = {f"{path.parent.name}/" for path in STUDIES.glob("*/__init__.py")}
    tops |= {path.name for path in STUDIES.glob("*.py") if path.name != "__init__.py"}
    assert set(listed) == tops, (sorted(tops - set(listed)), sorted(set(listed) - tops))


def test_no_import_in_studies_runs_up_its_layers() -> None:
    layer_of = {name: number for number, layer in enumerate(_layers()) for name in layer}
    upward = set()
    for path in _modules(STUDIES):
        relative = path.relative_to(STUDIES)
        if relative.name == "__init__.py" and len(relative.parts) == 1:
            continue  # studies/__init__.py: a docstring, in no layer
        own = f"{relative.parts[0]}/" if len(relative.parts) > 1 else relative.name
        for imported in _imports(path, "studies"):
            other = _top(imported)
            if other is not None and layer_of[other] > layer_of[own]:
                upward.add(f"{relative} ({own}) imports {imported} ({other})")
    assert not upward, sorted(upward)
