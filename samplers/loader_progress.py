"""How far a training loop got, when a torch ``DataLoader`` reads a sampler ahead of it.

Guarantee: for a sampler of this package read by a ``torch.utils.data.DataLoader`` (any
``num_workers``, as its ``sampler`` or its ``batch_sampler``), :func:`loop_progress` gives
what the loop has received: the batches the DataLoader yielded to it, in the sampler's
units (indices: batches times the batch size; batches: batches), and whether the loop has
received its last batch. A DataLoader with workers fetches ahead (``prefetch_factor``
batches per worker), so what the sampler handed out is more than the loop used; this is
what lets ``state_dict()`` record the loop's step instead.

How: when the sampler's ``iter()`` is called, :func:`find_loader` looks a few frames up the
call stack for the DataLoader iterator that called it (``_SingleProcessDataLoaderIter`` or
``_MultiProcessingDataLoaderIter``) and keeps a reference to that iterator's attribute
dictionary, not to the iterator: the DataLoader's workers shut down as usual when the loop
ends or is left with ``break``, and the counts stay readable afterwards. It reads two
attributes torch's DataLoader iterators have had since torch 1.x (``_num_yielded``,
``_index_sampler``); a DataLoader without them is not recognised, and the sampler's own
count is used.

torchdata's ``StatefulDataLoader`` is not a reader here: it asks the sampler for its state
itself, at the right moments. Any DataLoader iterator (torch's or torchdata's) is still
remembered, weakly, as the iteration's *loader*: :func:`received_nothing` tells whether the
loop has received anything from it, which decides whether an iteration that workers only
prefetched from counts as an epoch (see :mod:`samplers.epochs`).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from samplers.callers import callers
from samplers.plan import ceil_div

__all__ = [
    "LoopProgress",
    "find_loader",
    "loop_progress",
    "prefetched_only",
    "reader_of",
    "received_nothing",
    "unit_of",
]

#: How many frames above ``iter()`` a DataLoader iterator may be: the sampler's
#: ``__iter__`` and its core, a ``BatchSampler`` generator, ``_next_index``,
#: ``_try_put_index`` and ``_reset``.
_DEPTH = 8

_READERS = (_SingleProcessDataLoaderIter, _MultiProcessingDataLoaderIter)

#: (indices or batches the loop received, whether it received the last batch)
LoopProgress = tuple[int, bool]


def find_loader(skip: int = 1) -> _BaseDataLoaderIter | None:
    """The DataLoader iterator (torch's or torchdata's) calling ``iter()`` on a sampler now
    (directly, or through the ``BatchSampler`` the DataLoader built around it), or ``None``;
    ``skip``: frames above the caller to start from."""
    for owner in callers(skip + 1, _DEPTH):
        if isinstance(owner, _BaseDataLoaderIter):
            return owner
    return None


def reader_of(loader: object | None, sampler: object) -> dict[str, Any] | None:
    """The attribute dictionary of ``loader`` when it is a torch DataLoader iterator whose
    counts tell what the loop received of ``sampler``, else ``None``."""
    if isinstance(loader, _READERS):
        attributes: dict[str, Any] = loader.__dict__
        return attributes if unit_of(attributes, sampler) is not None else None
    return None


def received_nothing(loader: object | None) -> bool:
    """Whether ``loader``, a DataLoader iterator with workers (torch's or torchdata's), has
    given the loop nothing since its iteration began: what its workers fetched was never
    used. ``False`` when it cannot be told (no workers, or not a DataLoader iterator)."""
    if not isinstance(loader, _BaseDataLoaderIter):
        return False
    received = loader.__dict__.get("_rcvd_idx")
    return isinstance(received, int) and received == 0


def prefetched_only(previous: object | None, current: object | None) -> bool:
    """Whether an iteration read by the DataLoader iterator ``previous`` was only fetched
    ahead by workers, never received by the loop, now that ``current`` (the DataLoader
    iterator calling ``iter()`` again, or ``None``) starts another.

    torch's own DataLoader with persistent workers reuses its iterator and zeroes its
    counts before it asks for the next epoch, so when torch's iterator asks again, its
    previous iteration was the loop's (counted as an epoch); torchdata's iterators count
    what they prefetched while restoring a finished epoch and threw away."""
    if previous is current and type(current) in _READERS:
        return False
    return received_nothing(previous)


def unit_of(reader: dict[str, Any], sampler: object) -> int | None:
    """Items of ``sampler`` per DataLoader batch: 1 when it is the batch sampler, the batch
    size when the DataLoader batches it with a ``BatchSampler``; else ``None``."""
    index_sampler = reader.get("_index_sampler")
    if index_sampler is sampler:
        return 1
    # Exactly torch's BatchSampler: a subclass (accelerate's BatchSamplerShard) may not
    # batch the sampler's items in order, so its batches are not the loop's progress.
    if type(index_sampler) is BatchSampler and index_sampler.sampler is sampler:
        return int(index_sampler.batch_size)
    return None


def loop_progress(reader: dict[str, Any], sampler: object, count: int) -> LoopProgress | None:
    """What the loop reading ``sampler`` through the DataLoader iterator ``reader`` has
    received of an iteration of ``count`` items, or ``None`` if it cannot be told.

    Received items are counted as the DataLoader counts them (batches times the batch size
    for an index sampler, even when the last batch was smaller), which is the count every
    rank agrees on at the same step.
    """
    unit = unit_of(reader, sampler)
    batches = reader.get("_num_yielded")
    if unit is None or not isinstance(batches, int):
        return None
    drop_last = bool(getattr(reader.get("_index_sampler"), "drop_last", False)) and unit > 1
    total = count // unit if drop_last else ceil_div(count, unit)
    return batches * unit, batches >= total
