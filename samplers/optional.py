"""numpy when it is installed, else ``None``: the samplers need only torch.

Where numpy is faster on the small arrays the planning runs on (compacting the values a
permutation still walks, sorting a window's 16-bit keys, a chunk's batch arithmetic),
the code asks this module and falls back to torch, with the same results.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["numpy"]


def _imported(name: str) -> ModuleType | None:
    """The module ``name``, or ``None`` when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - exercised by a test that hides numpy
        return None


#: numpy, or ``None`` (its attributes read as ``Any``: the callers check for ``None``).
numpy: ModuleType | None = _imported("numpy")
