"""Who reads an iteration: the DataLoader iterator (or pipeline) that called ``iter()``,
attached to the iteration so that its state can be the loop's.

Guarantee: :func:`attach` gives a new iteration everything
:mod:`samplers.loader_progress` reads later to tell what the loop received: the
DataLoader iterator's counts (``reader``), a weak reference to that iterator and to Ray
Train's wrapper around it, and whether a ``torchdata.nodes`` pipeline began it; and the
count survives the reset of a persistent workers' DataLoader iterator.

A DataLoader with ``persistent_workers=True`` keeps one iterator and, at the next
``iter(loader)``, zeroes its count before it asks a sampler it batches itself
(``sampler=``) for the next iteration: that ``iter()`` comes from the ``BatchSampler``
generator it has just made, after the reset. So :func:`watch_reset` watches the generator
feeding the iteration (which the reset drops, in the same statement, before it zeroes the
count) and keeps the count the loop had received then (``yielded_at_reset``), which
stands for what the loop received of that iteration from then on.
"""

from __future__ import annotations

import weakref
from types import GeneratorType
from typing import Any

from torch.utils.data.dataloader import (
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from samplers import loader_progress
from samplers.iterators import Progress

__all__ = ["attach", "watch_reset"]

#: torch's own DataLoader iterators (torchdata's count their progress otherwise).
_TORCH_READERS = (_SingleProcessDataLoaderIter, _MultiProcessingDataLoaderIter)


def attach(iterator: Progress[Any], loader: object | None, sampler: object) -> None:
    """Tell ``iterator``, a new iteration of ``sampler``, who reads it: ``loader``, the
    DataLoader iterator calling ``iter()`` (``None`` if none; its counts, and Ray's
    wrapper around it), or a ``torchdata.nodes`` pipeline. Called by the sampler core's
    ``iter()`` (the callers are looked for above that one's caller)."""
    iterator.reader = loader_progress.reader_of(loader, sampler)
    watch_reset(loader, iterator)
    iterator.pipeline = loader is None and loader_progress.find_pipeline(2)
    if loader is not None:
        iterator.loader = weakref.ref(loader)
        mover = loader_progress.find_mover(2)
        if mover is not None:
            iterator.mover = weakref.ref(mover)


def watch_reset(loader: object | None, iterator: Progress[Any]) -> None:
    """Keep in ``iterator.yielded_at_reset`` the batches torch's DataLoader iterator
    ``loader`` had yielded when it drops the generator that feeds it ``iterator`` (a
    ``BatchSampler``'s, made by the DataLoader): a persistent workers' iterator dropping
    it for its next iteration, right before it zeroes that count. Nothing to watch when
    ``loader``'s counts are not the loop's (``iterator.reader`` is ``None``), when it
    reads the sampler itself (a batch sampler: its next ``iter()`` comes before the
    count is zeroed) or when it is not torch's (torchdata's counts are read otherwise).
    """
    if iterator.reader is None or type(loader) not in _TORCH_READERS:
        return
    feeding = loader.__dict__.get("_sampler_iter")
    # A generator (its BatchSampler's) feeds it; else it iterates a batch sampler itself,
    # and ``feeding`` is an iteration the sampler has replaced, dropped in a moment.
    if isinstance(feeding, GeneratorType):
        watch = weakref.finalize(feeding, _keep_count, weakref.ref(iterator))
        watch.atexit = False


def _keep_count(iterator_ref: weakref.ref[Progress[Any]]) -> None:
    """:func:`watch_reset`'s callback: the count the iterator's reader holds now."""
    iterator = iterator_ref()
    reader = None if iterator is None else iterator.reader
    if iterator is not None and reader is not None:
        count = reader.get("_num_yielded")
        if isinstance(count, int):
            iterator.yielded_at_reset = count
