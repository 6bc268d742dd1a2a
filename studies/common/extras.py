"""Which optional extra provides which module, and one error that names what to install.

The sampler (``samplers``) needs torch alone. The ``dsampler`` command and the studies
need the ``study`` extra; ``dsampler report`` also needs the ``peers`` extra, whose
samplers the guarantee matrix checks. :func:`require` checks, before any work starts,
that every module of the given extras imports, and raises :class:`MissingExtra` naming
the missing modules, the extras that provide them and the command that installs them
(:func:`install_command`: dsampler is installed from a clone, not from a package index,
so the command is ``pip install -e '.[study]'`` in the clone, or the clone's path).

Guarantee: :func:`missing` only looks modules up (``importlib.util.find_spec``); it
imports none of them, so checking is quick and has no side effects.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["EXTRAS", "MissingExtra", "clone", "install_command", "missing", "require"]

#: Top-level modules each extra of ``pyproject.toml`` provides, as imported.
EXTRAS: dict[str, tuple[str, ...]] = {
    "study": ("pandas", "matplotlib", "tabulate", "tqdm", "psutil", "hypothesis"),
    "peers": (
        "torchdata",
        "lightning",
        "accelerate",
        "mmengine",
        "transformers",
        "ray",
        "lhotse",
        "datasets",
        "trl",
    ),
}


def clone() -> Path | None:
    """The clone these modules run from (an editable install, or the source tree), or
    None when they were installed elsewhere."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def install_command(extras: list[str]) -> str:
    """The pip command that installs ``extras`` where dsampler came from: in the clone,
    ``pip install -e '.[extras]'``, or the clone's path from anywhere; installed
    elsewhere, the path of its clone."""
    wanted = ",".join(extras)
    root = clone()
    if root is None:
        return f"pip install '/path/to/dsampler[{wanted}]' (the clone dsampler was installed from)"
    return (
        f"pip install -e '.[{wanted}]' in the clone, or pip install -e '{root}[{wanted}]' "
        "from anywhere"
    )


class MissingExtra(ModuleNotFoundError):
    """Modules of an optional extra are not installed; the message says what to install."""

    def __init__(self, modules: list[str], extras: list[str]) -> None:
        names = ", ".join(modules)
        super().__init__(
            f"{names} {'is' if len(modules) == 1 else 'are'} not installed: install the "
            f"{' and '.join(extras)} extra{'s' if len(extras) > 1 else ''}: "
            f"{install_command(extras)}"
        )
        self.modules = modules
        self.extras = extras


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here, in :data:`EXTRAS` order."""
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {sorted(EXTRAS)}, got {extra!r}")
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require(*extras: str) -> None:
    """Raise :class:`MissingExtra` unless every module of every extra is installed."""
    absent = {extra: missing(extra) for extra in extras}
    modules = [name for names in absent.values() for name in names]
    if modules:
        raise MissingExtra(modules, [extra for extra, names in absent.items() if names])
