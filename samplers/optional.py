"""numpy when it is installed, else ``None``: the samplers need only torch.

Where numpy is faster on the small arrays the planning runs on (compacting the values a
permutation still walks, sorting a window's 16-bit keys, a chunk's batch arithmetic),
the code asks this module and falls back to torch, with the same results.
"""

from __future__ import annotations

try:
    import numpy
except ImportError:  # pragma: no cover - exercised by a test that hides numpy
    numpy = None  # type: ignore[assignment]

__all__ = ["numpy"]
