"""A peek through a DataLoader in the middle of its loop: a side read, not the loop's.

Guarantee: when a loop over a DataLoader is in the middle of an epoch and another
DataLoader iterator over the same sampler begins and is dropped unfinished (a peek,
``batch = next(iter(loader))``, for logging), the peek gets what a new iteration gets
(as the stock sampler gives it), and the sampler's state, epoch and weights stay the
loop's: :meth:`~samplers.core.SamplerCore.state_dict` gives the loop's position (in the
loop, right after the peek, or after the loop's end), and ``auto_epoch`` does not count
the peek as an epoch.

How: an iteration begun by a DataLoader iterator while another, different one is still
alive and in the middle of the sampler's previous iteration is recorded as a
:class:`SideRead` (the loop's iteration, how far its loop had gone, and the bookkeeping
before the new one). Whenever the sampler reads its progress or its length, or begins
another iteration, :func:`back_to_loop` decides: the earlier iteration is the loop's
when its loop has gone on since the later one began (its DataLoader yielded more
batches), or when the later one's DataLoader iterator is gone before it finished while
the earlier one's is still alive; the sampler then takes the earlier one back, as if the
later one never began. Otherwise the later iteration is the loop's, as for any new ``iter()`` (a
loop left with ``break`` and begun again: the left one's DataLoader iterator is gone by
then, or stays where it was).

Left to the caller: a peek whose iterator is still alive (``peek = iter(loader)``; and
torchdata's ``StatefulDataLoader`` keeps its latest iterator) is the latest iteration
until the loop takes its next step; an abandoned loop's iterator kept alive, and the
next loop left with ``break`` before its end, makes that abandoned one the loop's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from samplers.epochs import EpochBook, Undo
from samplers.iterators import Progress, handed_out_all

__all__ = ["SideRead", "back_to_loop", "side_read"]


@dataclass(frozen=True)
class SideRead:
    """The loop's iteration when a later one began (see the module)."""

    #: The loop's iteration, in the middle of its epoch then.
    loop: Progress[Any]
    #: The later iteration (a side read, or the loop's next).
    later: Progress[Any]
    #: How far the loop had gone then (:func:`_advanced`).
    yielded: int
    #: The sampler's undo record for the loop's iteration.
    loop_undo: Undo | None
    #: The bookkeeping and the epoch before the later iteration began.
    before: Undo


class _Sampler(Protocol):
    """What of a sampler (:class:`~samplers.core.SamplerCore`) a side read changes."""

    epoch: int
    _book: EpochBook
    _iterator: Progress[Any] | None
    _undo: Undo | None
    _side: SideRead | None


def _advanced(iterator: Progress[Any]) -> int:
    """How far ``iterator``'s loop has gone: the batches the DataLoader iterator reading it
    has yielded, or, where its counts are not read, the items it handed out."""
    count = None if iterator.reader is None else iterator.reader.get("_num_yielded")
    return count if isinstance(count, int) else iterator.taken


def side_read(
    previous: Progress[Any] | None,
    later: Progress[Any],
    loader: object | None,
    loop_undo: Undo | None,
    before: Undo,
    replaced: SideRead | None,
) -> SideRead | None:
    """The record of ``later``, an iteration begun by the DataLoader iterator ``loader``
    while ``previous`` (the sampler's iteration before it) is in the middle of its epoch
    and read by another DataLoader iterator still alive; ``None`` otherwise. With
    ``previous`` ``None`` because the iteration before was undone (an ``iter()`` never
    advanced: a DataLoader with workers calls ``iter()`` on a batch sampler twice), the
    record ``replaced`` of that one carries over to ``later``."""
    if previous is None:
        if loader is None or replaced is None:
            return None
        return dataclasses.replace(replaced, later=later)
    if loader is None or not previous.started or previous.exhausted:
        return None
    reading = previous.loader()
    if reading is None or reading is loader or handed_out_all(previous):
        return None
    return SideRead(previous, later, _advanced(previous), loop_undo, before)


def back_to_loop(sampler: _Sampler) -> None:
    """Give ``sampler`` its loop's iteration back when its latest iteration was a side
    read, and forget the record once the loop's iteration cannot be the loop's any more
    (see the module)."""
    side, current = sampler._side, sampler._iterator
    if side is None:
        return
    went_on = _advanced(side.loop) > side.yielded
    alive = side.loop.loader() is not None
    if current is not side.later or current.exhausted or handed_out_all(current):
        sampler._side = None  # another iteration since, or the later one ran to its end
    elif went_on or (alive and current.loader() is None):
        sampler._iterator, sampler._undo = side.loop, side.loop_undo
        sampler._book, sampler.epoch = side.before.book.copy(), side.before.epoch_before
        sampler._side = None
    elif not alive and not went_on:
        sampler._side = None  # the earlier loop was left: the later one is the loop's
