"""Deterministic memory measurements of one pass over a sampler.

Guarantee: for the same sampler, torch and Python, :func:`tensor_bytes` and the bytes held
that :func:`python_heap` reports are the same on every run; so are its peaks, except that
a name CPython's type attribute cache keeps alive in one run and not in another (67 bytes
for torch's ``"__torch_function__"``; see :func:`python_heap`) can raise one. Both count
requested sizes, not what the operating system hands out:

* :func:`python_heap` uses :mod:`tracemalloc`, which sees every allocation made through
  Python's allocators (ints, lists, ...) but not torch's tensor storage.
* :func:`tensor_bytes` intercepts every aten operator call (``TorchDispatchMode``) and
  adds up the storage of each output that does not alias an input. It does not see
  scratch memory a kernel allocates and frees internally, nor allocator overhead, and
  it does not track frees, so it reports bytes allocated, not a peak.

Neither is a timing: wall-clock and resident-set numbers are machine- and run-dependent
and are measured by ``dsampler bench`` (:mod:`studies.bench`).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["HeapUse", "TensorUse", "python_heap", "tensor_bytes"]


@dataclass(frozen=True)
class HeapUse:
    """Python-heap bytes (tracemalloc) during one pass over a sampler."""

    #: Highest traced total between ``iter()`` and the first index.
    peak_to_first: int
    #: Traced total right after the first index, while the iterator is alive, less the
    #: names CPython's type attribute cache keeps (see :func:`python_heap`).
    held_at_first: int
    #: Highest traced total over the whole pass.
    peak_epoch: int


@dataclass(frozen=True)
class TensorUse:
    """Tensor storage allocated by aten operators during one pass over a sampler."""

    #: Bytes allocated between ``iter()`` and the first index.
    to_first: int
    #: Bytes allocated over the whole pass.
    epoch: int
    #: The largest single allocation over the whole pass.
    largest: int


def python_heap(sampler: Iterable[Any]) -> HeapUse:
    """Trace Python allocations while taking the first index, then the rest of the epoch.

    The garbage collector is paused during the pass so that when it runs cannot move the
    peak. CPython's type attribute cache is emptied before the pass and again before the
    bytes held at the first index are read: the cache keeps a reference to the name of
    each attribute lookup, in a slot chosen by the name's address, so a name made during
    the pass (torch makes ``"__torch_function__"`` anew for each argument it checks, 67
    bytes) stays alive or is evicted by a later lookup depending on where the allocator
    put it. That is the interpreter's memory, not the sampler's, and it made the cost
    finding's held bytes differ by 67 between runs. A peak can still include such a name
    (a few dozen bytes, by run). Raises ``RuntimeError`` if tracemalloc is already
    tracing (the numbers would include the caller's allocations).
    """
    if tracemalloc.is_tracing():
        raise RuntimeError("tracemalloc is already tracing; stop it before measuring")
    gc.collect()
    _clear_type_cache()
    collecting = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        iterator = iter(sampler)
        next(iterator, None)
        _clear_type_cache()  # the names it holds are not the sampler's; the peak stays
        held, peak_to_first = tracemalloc.get_traced_memory()
        _drain(iterator)
        _, peak_epoch = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        if collecting:
            gc.enable()
    return HeapUse(peak_to_first, held, peak_epoch)


def tensor_bytes(sampler: Iterable[Any]) -> TensorUse:
    """Tensor storage that aten operators allocate while the sampler yields one epoch."""
    counter = _AllocationCounter()
    with counter:
        iterator = iter(sampler)
        next(iterator, None)
        to_first = counter.total
        _drain(iterator)
    return TensorUse(to_first, counter.total, counter.largest)


#: Empties CPython's type attribute cache (``sys._clear_internal_caches`` from 3.13 on,
#: which deprecates ``sys._clear_type_cache``); looked up once, as a failed lookup allocates.
_clear_type_cache: Callable[[], None] = (
    getattr(sys, "_clear_internal_caches", None) or sys._clear_type_cache
)


def _drain(iterator: Iterator[Any]) -> None:
    for _ in iterator:
        pass


class _AllocationCounter(TorchDispatchMode):
    """Adds up the storage bytes of every non-aliasing operator output."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.largest = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        outputs, _ = tree_flatten(out)
        for returned, value in zip(func._schema.returns, outputs, strict=False):
            if isinstance(value, torch.Tensor) and returned.alias_info is None:
                size = value.untyped_storage().nbytes()
                self.total += size
                self.largest = max(self.largest, size)
        return out
