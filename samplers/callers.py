"""Who is iterating a sampler: the objects whose methods are on the call stack above it.

Guarantee: :func:`callers` yields the ``self`` of at most ``limit`` frames above the frame
that called it, nearest first, and touches nothing else of them (no attribute of a
foreign object is read). Where frames are not available (a Python without
``sys._getframe``) it yields nothing. The samplers use it at ``iter()`` to find the
DataLoader that reads them (:mod:`samplers.loader_progress`) and anything that shards them
a second time (:mod:`samplers.resharding`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType

__all__ = ["callers"]


def callers(skip: int, limit: int) -> Iterator[object]:
    """The ``self`` of each of ``limit`` frames, starting ``skip`` frames above the caller
    (``skip=0``: the caller's own frame)."""
    get_frame = getattr(sys, "_getframe", None)
    if get_frame is None:
        return
    frame: FrameType | None = get_frame(skip + 1)
    for _ in range(limit):
        if frame is None:
            return
        owner = frame.f_locals.get("self")
        if owner is not None:
            yield owner
        frame = frame.f_back
