"""Iterators over one rank's share of one epoch: lazy, picklable, and counting progress.

Guarantee: :class:`ShareIterator` yields exactly ``plan.rank_indices(rank)[taken:]`` as
Python ints and :class:`BatchIterator` exactly ``plan.rank_batches(rank)[taken:]``; both
turn indices into Python objects one chunk at a time. ``taken`` never counts more than
was handed out, even read from another thread while the iterator is being advanced. Like
the stock sampler's list iterator, one iterator may be drained by several threads at
once: together they receive every item exactly once.
Pickled or copied at any point, either stores only the plan's settings, the rank and its
progress (a few hundred bytes, whatever the dataset size; a wrapped sampler's stream is
the exception, it is carried along) and the copy yields exactly the rest.

``taken`` (items handed out), ``started`` (``next()`` was called) and ``exhausted``
(``next()`` raised ``StopIteration``) are what a sampler's state is computed from.
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from samplers.plan import EpochPlan, Layout, RandpermOrder

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CHUNK",
    "BatchIterator",
    "Progress",
    "ShareIterator",
    "handed_out_all",
    "held_elsewhere",
    "take_over",
]

#: How many indices of a held share are turned into Python ints at a time (after a first
#: chunk of FIRST_CHUNK, so the first index comes at once).
CHUNK = 1 << 16
#: Chunks computed on demand (the feistel and identity orders) start at FIRST_CHUNK
#: positions, so the first index comes at once. An identity order's chunks then double
#: up to COMPUTED_CHUNK: below torch's 32768-element threshold for intra-op parallelism,
#: whose start-up on busy cores costs more than the work. A feistel order's second chunk
#: (or any order that says it is ``blockwise``, as the mixture's)
#: is already FEISTEL_CHUNK: it evaluates a chunk ``_BLOCK`` positions at a time anyway,
#: and each chunk pays a fixed cost for walking its cycles (a dozen passes of tensor
#: operations whatever its length), so fewer, larger chunks cost less.
FIRST_CHUNK = 1 << 10
COMPUTED_CHUNK = (1 << 15) - 1
FEISTEL_CHUNK = (1 << 18) - 1

_Item = TypeVar("_Item")


class Progress(ABC, Generic[_Item]):
    """What both iterators share: chunked progress, ``taken``, pickling by settings.

    The iterators are ``itertools.chain`` objects over the chunks of the rank's sequence,
    so handing out an item runs in C, like the stock sampler's list iterator; the chunks
    come from :meth:`_feed`, which records where each begins. A subclass sets up its source
    in ``_prepare(plan)`` (returning the plan to keep) and hands out items
    ``[start, end)`` of the rank's sequence from ``_chunk(start)``.
    """

    rank: int
    started: bool
    exhausted: bool
    #: The torch DataLoader iterator's attributes when one reads this iterator (see
    #: :mod:`samplers.loader_progress`); never pickled.
    reader: dict[str, Any] | None
    #: The batches that DataLoader iterator had yielded when it began another iteration
    #: of its own (a persistent workers' iterator, which zeroes its count then), or
    #: ``None`` while it has not (see :func:`samplers.readers.watch_reset`).
    yielded_at_reset: int | None
    #: Called with the layout once the iterator is exhausted; never pickled.
    at_end: Callable[[Layout], None] | None
    #: The DataLoader iterator that began this iteration, if any and still alive (a weak
    #: reference: ``loader()``); never pickled.
    loader: Callable[[], object | None]
    #: A ``torchdata.nodes`` pipeline began this iteration (its prefetchers read ahead of
    #: the loop); never pickled.
    pipeline: bool
    #: Ray Train's loader wrapper iterating the DataLoader that began this iteration, if
    #: any and still alive (a weak reference: ``mover()``); never pickled.
    mover: Callable[[], object | None]
    #: A weak reference to what is called with this iterator at its first ``next()``,
    #: before anything is handed out (a sampler whose state was loaded after this
    #: ``iter()`` re-plans it); set on the few iterators that need it, never pickled.
    replan: Callable[[], Callable[[Progress[Any]], None] | None] | None = None
    _plan: EpochPlan
    _cursor: tuple[int, Iterator[_Item]]
    _feed: _Feed[_Item]

    @classmethod
    def of(
        cls,
        plan: EpochPlan,
        rank: int,
        taken: int = 0,
        *,
        started: bool = False,
        exhausted: bool = False,
    ) -> Self:
        """``rank``'s items of ``plan`` from item ``taken`` on."""
        feed: _Feed[Any] = _Feed()  # bound to the iterator once it exists
        chain: Any = cls  # a subclass of itertools.chain too (ShareIterator, BatchIterator)
        iterator = cast("Self", chain.from_iterable(feed))
        feed.bind(iterator)
        iterator._feed = feed  # kept alive while a thread may still be in its __next__
        iterator._setup(plan, rank, taken, started, exhausted)
        return iterator

    def _setup(
        self, plan: EpochPlan, rank: int, taken: int, started: bool, exhausted: bool
    ) -> None:
        self.rank = rank
        self._plan = self._prepare(plan)
        if taken and not 0 <= taken <= self.count:
            raise ValueError(f"taken must be in [0, {self.count}], got {taken}")
        # Where the current chunk ends and its iterator, replaced together so that
        # ``taken`` reads a consistent pair from any thread.
        self._cursor = (taken, iter(()))
        self.started = started
        self.exhausted = exhausted
        self.reader = None
        self.yielded_at_reset = None
        self.at_end = None
        self.loader = _nobody
        self.mover = _nobody
        self.pipeline = False

    @abstractmethod
    def _prepare(self, plan: EpochPlan) -> EpochPlan:
        """Set up the source of items; return the plan to keep."""

    @abstractmethod
    def _chunk(self, start: int) -> tuple[list[_Item], int]:
        """Items from ``start`` on and where they end (none at the share's end)."""

    def _finish(self) -> None:
        """Called once the sequence is exhausted."""

    @property
    def plan(self) -> EpochPlan:
        """The epoch plan this iterator walks."""
        return self._plan

    @functools.cached_property
    def count(self) -> int:
        """How many items the rank's share holds (asked only when needed: a layout that
        plans its epoch as it goes plans all of it to count)."""
        return self._plan.layout.count(self.rank)

    @property
    def taken(self) -> int:
        """How many items have been handed out."""
        end, current = self._cursor
        return end - operator.length_hint(current)

    def __length_hint__(self) -> int:
        return self.count - self.taken

    if TYPE_CHECKING:  # at run time ``itertools.chain`` provides both, in C

        def __iter__(self) -> Self: ...

        def __next__(self) -> _Item: ...

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _restored,
            (type(self), self._plan.undrawn(), self.rank, self.taken, self.started, self.exhausted),
        )

    def copy_at(self, taken: int, exhausted: bool) -> Progress[_Item]:
        """A copy (as :meth:`__reduce__` makes one) that has handed out ``taken`` items."""
        return _restored(type(self), self._plan.undrawn(), self.rank, taken, True, exhausted)


class _Feed(Generic[_Item]):
    """The chunks of one iterator, each an iterator, recording progress as they start.

    The chain asks for a chunk whenever its current one is used up. Two threads sharing
    the iterator can both ask while one chunk is being computed (the computation releases
    the GIL), and the chain keeps whichever chunk it was given last. So chunks are computed
    under a lock, one thread at a time, and a request made while the current chunk still
    has items gets that chunk again (the chain then keeps the same one): no chunk is lost,
    computed twice or handed out twice. It refers to its iterator weakly, so an iterator
    nobody iterates any more is freed at once (no reference cycle).
    """

    def __init__(self) -> None:
        self._owner: Callable[[], Progress[_Item] | None] = _nobody
        self._lock = threading.Lock()
        self._done = False

    def bind(self, iterator: Progress[_Item]) -> None:
        """Feed ``iterator`` (the chain this feed is the source of)."""
        self._owner = weakref.ref(iterator)

    def __iter__(self) -> _Feed[_Item]:
        return self

    def __next__(self) -> Iterator[_Item]:
        with self._lock:
            iterator = self._owner()
            if iterator is None or self._done:
                raise StopIteration
            replan = iterator.__dict__.pop("replan", None)
            method = None if replan is None or iterator.started else replan()
            if method is not None:
                method(iterator)  # before anything is handed out: it may re-plan it
            iterator.started = True  # the chain asks for its first chunk at the first next()
            end, current = iterator._cursor
            if operator.length_hint(current):
                return current  # another thread's chunk, not used up: share it
            items, end = iterator._chunk(end)
            if items:
                current = iter(items)
                iterator._cursor = (end, current)
                return current
            self._done = True
            iterator.exhausted = True
            iterator._finish()
        if iterator.at_end is not None:
            iterator.at_end(iterator.plan.layout)
        raise StopIteration


def _nobody() -> None:
    """The ``loader`` of an iterator no DataLoader began."""


def _restored(
    cls: type[Progress[Any]],
    plan: EpochPlan,
    rank: int,
    taken: int,
    started: bool,
    exhausted: bool,
) -> Progress[Any]:
    return cls.of(plan, rank, taken, started=started, exhausted=exhausted)


class ShareIterator(Progress[int], itertools.chain[int]):
    """``rank``'s indices of an index plan, from ``taken`` on.

    The epoch order is drawn when the iterator is created (as the stock sampler draws it
    in ``iter()``). A drawn permutation is then cut down to this rank's share
    (:meth:`EpochPlan.rank_share`), so the rest of the order is freed: the iterator holds
    ``N / W`` indices, in int32 below 2**31 samples. An order computed position by
    position (unshuffled, or feistel) is not materialised: each chunk is computed from
    its positions, so any dataset size runs in constant memory. The exception is a
    feistel order of at most ``2**WHOLE_BITS`` samples of which this rank takes at least
    half (one or two ranks): it is held, as the whole order costs less to compute at once
    (:meth:`FeistelOrder.held`).
    """

    def _prepare(self, plan: EpochPlan) -> EpochPlan:
        if plan.layout.batched:
            raise TypeError("ShareIterator needs a plan with an index layout")
        self._share = plan.rank_share(self.rank)
        self._length = FIRST_CHUNK  # the next chunk's length
        if self._share is not None:
            self._largest = self._growth = CHUNK
        elif plan.order.blockwise:
            self._largest = self._growth = FEISTEL_CHUNK
            self._length = plan.order.first_chunk or FIRST_CHUNK
        else:
            self._largest, self._growth = COMPUTED_CHUNK, 2
        # Keep the settings, not a drawn order: the share holds what is still needed.
        return plan if self._share is None else plan.undrawn()

    def _chunk(self, start: int) -> tuple[list[int], int]:
        if start >= self.count:
            return [], start
        end = min(start + self._length, self.count)
        self._length = min(self._length * self._growth, self._largest)
        if self._share is not None:
            held: list[int] = self._share[start:end].tolist()
            return held, end
        computed: list[int] = self._plan.rank_indices(self.rank, start, end).tolist()
        return computed, end

    def _finish(self) -> None:
        self._share = None  # done: the sampler may keep this iterator, not its share


class BatchIterator(Progress[list[int]], itertools.chain[list[int]]):
    """``rank``'s batches of a batched plan, from batch ``taken`` on, as lists of ints."""

    #: Batches turned into lists at a time: from FIRST_STEPS, doubling up to STEPS, so the
    #: first batch of a layout that plans as it goes comes at once.
    FIRST_STEPS = 4
    STEPS = 256

    def _prepare(self, plan: EpochPlan) -> EpochPlan:
        if not plan.layout.batched:
            raise TypeError("BatchIterator needs a plan with a batched layout")
        self._steps = self.FIRST_STEPS // 2
        order = plan.order
        if isinstance(order, RandpermOrder):
            order.held()  # drawn now: a bad seed raises here, as in the stock iter()
        return plan

    def _chunk(self, start: int) -> tuple[list[list[int]], int]:
        self._steps = min(self._steps * 2, self.STEPS)
        batches = self._plan.rank_batches(self.rank, start, start + self._steps)
        return batches, start + len(batches)


#: References to an iterator of the sampler's while :func:`held_elsewhere` counts them.
_OWN_REFERENCES = 3


def held_elsewhere(iterator: Progress[Any]) -> bool:
    """Whether someone besides the sampler holds ``iterator``: more references than the
    sampler's attribute, the caller's local name and this parameter
    (:data:`_OWN_REFERENCES`), getrefcount's argument aside. Held elsewhere, it may still
    be the loop's; nobody iterates it any more otherwise."""
    if iterator.reader is not None:
        gc.collect()  # a DataLoader iterator and ours refer to each other
        if iterator.loader() is None:
            # The DataLoader iterator that read it is gone: what still refers to it (its
            # batch sampler's generator, say) is reached only through this iterator.
            return False
    return sys.getrefcount(iterator) > _OWN_REFERENCES + 1  # + getrefcount's argument


def handed_out_all(iterator: Progress[Any]) -> bool:
    """Whether ``iterator`` handed out its rank's whole share (as a sampler's ``state_dict()``
    counts a finished epoch)."""
    layout = iterator.plan.layout
    return layout.position_after(iterator.taken) >= layout.stop


def take_over(iterator: Progress[Any], fresh: Progress[Any]) -> None:
    """``iterator`` re-planned in place to what ``fresh`` (a new iteration, not yet
    advanced) hands out, still the iterator of whoever holds it: its chain, reader,
    loader, mover, pipeline flag and count at a reset kept, every other attribute
    ``fresh``'s."""
    feed = iterator._feed  # bound to ``iterator``: it feeds the chain ``iterator`` is
    kept = iterator.reader, iterator.loader, iterator.mover, iterator.pipeline
    reset = iterator.yielded_at_reset
    stale = set(iterator.__dict__) - set(fresh.__dict__)
    iterator.__dict__.update(fresh.__dict__)  # every attribute there at every moment
    for name in stale:  # nothing of the old plan stays (a cached count, say)
        del iterator.__dict__[name]
    iterator._feed = feed
    iterator.reader, iterator.loader, iterator.mover, iterator.pipeline = kept
    iterator.yielded_at_reset = reset
