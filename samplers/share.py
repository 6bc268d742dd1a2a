"""Iterators over one rank's share of one epoch: lazy, picklable, and counting progress.

Guarantee: :class:`ShareIterator` yields exactly ``plan.rank_indices(rank)[taken:]`` as
Python ints and :class:`BatchIterator` exactly ``plan.rank_batches(rank)[taken:]``; both
turn indices into Python objects one chunk at a time. Pickled at any point, either
stores only the plan's settings, the rank and how far it got (a few hundred bytes,
whatever the dataset size; a wrapped sampler's stream is the exception, it is carried
along) and, unpickled, yields exactly the rest.

``taken`` is the count of indices (batches) handed out so far: the progress a
checkpoint records.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any, TypeVar

import torch

from samplers.plan import Batched, EpochPlan, ExplicitOrder, RandpermOrder, Strided

__all__ = ["CHUNK", "BatchIterator", "ShareIterator"]

#: How many indices of a held share are turned into Python ints at a time.
CHUNK = 1 << 16
#: Chunks computed on demand (the feistel and identity orders) start at FIRST_CHUNK
#: positions, so the first index comes at once, and double up to COMPUTED_CHUNK: below
#: torch's 32768-element threshold for intra-op parallelism, whose start-up on busy
#: cores costs more than the work.
FIRST_CHUNK = 1 << 10
COMPUTED_CHUNK = (1 << 15) - 1

_Item = TypeVar("_Item")


class _Chunked(Iterator[_Item]):
    """What both iterators share: chunked progress, ``taken``, pickling by settings.

    A subclass sets up its source in ``_prepare(plan, rank)`` (returning the plan to keep)
    and hands out items ``[start, end)`` of the rank's sequence from ``_chunk``.
    """

    def __init__(self, plan: EpochPlan, rank: int, taken: int = 0) -> None:
        self._setup(plan, rank, taken)

    def _setup(self, plan: EpochPlan, rank: int, taken: int) -> None:
        self.rank = rank
        self.count = plan.layout.count(rank)
        if not 0 <= taken <= self.count:
            raise ValueError(f"taken must be in [0, {self.count}], got {taken}")
        self._plan = self._prepare(plan, rank)
        self._end = taken  # where the current chunk ends
        self._current: Iterator[_Item] = iter(())
        #: Whether ``next()`` has been called (see ``Resumable._begin_iteration``).
        self.started = False

    def _prepare(self, plan: EpochPlan, rank: int) -> EpochPlan:
        raise NotImplementedError

    def _chunk(self, start: int) -> list[_Item]:
        """Items from ``start`` on (at least one); advances ``self._end`` past them."""
        raise NotImplementedError

    def _finish(self) -> None:
        """Called once the sequence is exhausted."""

    @property
    def plan(self) -> EpochPlan:
        """The epoch plan this iterator walks."""
        return self._plan

    @property
    def taken(self) -> int:
        """How many items have been yielded."""
        return self._end - operator.length_hint(self._current)

    def __iter__(self) -> _Chunked[_Item]:
        return self

    def __next__(self) -> _Item:
        try:
            return next(self._current)
        except StopIteration:
            pass
        self.started = True  # the first call always gets here: the first chunk is empty
        if self._end >= self.count:
            self._finish()
            raise StopIteration
        self._current = iter(self._chunk(self._end))
        return next(self._current)

    def __length_hint__(self) -> int:
        return self.count - self.taken

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self._plan.without_order(), "rank": self.rank, "taken": self.taken}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(state["plan"], state["rank"], state["taken"])


class ShareIterator(_Chunked[int]):
    """``rank``'s indices of a strided plan, from ``taken`` on.

    The epoch order is drawn when the iterator is created (as the stock sampler draws it
    in ``iter()``). A drawn permutation is then cut down to this rank's share, so the
    rest of the order is freed: the iterator holds ``N / W`` indices, in int32 below
    2**31 samples. An order computed position by position (unshuffled, or feistel) is
    never materialised: each chunk is computed from its positions, so any dataset size
    runs in constant memory.
    """

    def __init__(self, plan: EpochPlan, rank: int, taken: int = 0) -> None:
        if not isinstance(plan.layout, Strided):
            raise TypeError("ShareIterator needs a plan with a Strided layout")
        super().__init__(plan, rank, taken)

    def _prepare(self, plan: EpochPlan, rank: int) -> EpochPlan:
        self._share = _share(plan, rank)
        self._step = FIRST_CHUNK // 2  # chunk size computed on demand, doubling
        # Keep the settings, not a drawn order: the share holds what is still needed.
        return plan if self._share is None else plan.without_order()

    def _chunk(self, start: int) -> list[int]:
        if self._share is not None:
            self._end = min(start + CHUNK, self.count)
            return self._share[start : self._end].tolist()  # type: ignore[no-any-return]
        self._step = min(self._step * 2, COMPUTED_CHUNK)
        self._end = min(start + self._step, self.count)
        return self._plan.rank_indices(self.rank, start, self._end).tolist()  # type: ignore[no-any-return]

    def _finish(self) -> None:
        self._share = None  # done: the sampler may keep this iterator, not its share


def _share(plan: EpochPlan, rank: int) -> torch.Tensor | None:
    """The rank's whole share cut from a drawn order, or None to compute chunks lazily."""
    ordering = plan.ordering
    if isinstance(ordering, RandpermOrder):
        table = ordering.table
    elif isinstance(ordering, ExplicitOrder):
        table = ordering.indices
    else:
        return None
    layout = plan.layout
    assert isinstance(layout, Strided)
    size = plan.sizes.dataset_size
    first = layout.start + rank
    inside = table[min(first, size) : min(layout.stop, size) : layout.world_size]
    padded = layout.positions(rank, inside.numel())
    if padded.numel() == 0:
        # A view of the whole table when it is all this rank's; otherwise a copy, so the
        # table itself can be freed.
        return inside if inside.numel() == table.numel() else inside.clone()
    return torch.cat([inside, plan.indices_at(padded).to(inside.dtype)])


class BatchIterator(_Chunked[list[int]]):
    """``rank``'s batches of a batched plan, from batch ``taken`` on, as lists of ints."""

    #: Batches turned into lists at a time.
    STEPS = 256

    def __init__(self, plan: EpochPlan, rank: int, taken: int = 0) -> None:
        if not isinstance(plan.layout, Batched):
            raise TypeError("BatchIterator needs a plan with a Batched layout")
        super().__init__(plan, rank, taken)

    def _prepare(self, plan: EpochPlan, rank: int) -> EpochPlan:
        _draw(plan)
        return plan

    def _chunk(self, start: int) -> list[list[int]]:
        self._end = min(start + self.STEPS, self.count)
        return self._plan.rank_batches(self.rank, start, self._end)


def _draw(plan: EpochPlan) -> None:
    """Draw a shuffled order now (a bad seed raises here, as in the stock ``iter()``)."""
    ordering = plan.ordering
    if isinstance(ordering, RandpermOrder):
        _ = ordering.table
