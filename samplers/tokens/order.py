"""The epoch order of a token-budgeted sampler: shuffled, bucketed by length, cut into batches.

:class:`TokenOrder` maps a position of the epoch to a dataset index, like the orders of
:mod:`samplers.plan`, and also says where the order's **batches** begin. It depends on the
lengths, ``max_tokens``, the cost, the window, the permutation, ``seed`` and ``epoch``,
and never on the world size, so a run resumed on another world size knows which samples
the saved ranks consumed (a prefix of this order) and which remain.

How the order is made, window by window (a window is ``window`` consecutive positions of
the shuffled epoch, the last one shorter):

1. the window's samples are those the epoch permutation puts there (``randperm`` or
   ``feistel`` from ``(seed, epoch)``, as the other samplers draw it; no permutation
   without shuffling), so every window is a random sample of the dataset; or, with a
   ``stream`` order given, those it holds there (e.g. a mixture's draws);
2. they are sorted by length, longest first (ties in permutation order);
3. they are cut greedily into batches: a batch takes the next samples as long as its cost
   stays within ``max_tokens``. Cost ``"padded"`` is the longest length times the count
   (a batch padded to its longest sample); ``"sum"`` is the sum of the lengths (packed
   sequences); a :class:`~samplers.tokens.cost.TokenCost` counts each sample as
   ``d + d² / q`` or by a named function, padded or summed. A sample costing more than
   ``max_tokens`` alone is a batch of its own;
4. the window's batches are put in order of cost, grouped in :data:`LEVELS` levels of
   ``max_tokens / LEVELS`` each (over-budget batches above them), rising in even windows
   and falling in odd ones, ties in random order (the permutation position of each
   batch's first sample). Consecutive batches therefore cost about the same, also
   across a window boundary, which is what lets a layout deal each step's batches to
   the ranks with balanced work.

The window's positions then hold its batches one after another. Windows are independent
of each other, so the order is computed lazily, a chunk of whole windows at a time: the
first batch of an epoch needs only the first chunk (and the permutation), at any dataset
size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import torch

from samplers.plan import Order, Permutation, ceil_div, make_order
from samplers.tokens.arrays import (
    RADIX_LONGEST,
    by_cost_level,
    capped_sums,
    follow,
    longest_first,
    reach_within,
    repeat,
)
from samplers.tokens.cost import BUDGET_LIMIT, COSTS, Cost, CostLike, TokenCost, as_cost
from samplers.tokens.held import length_sum

__all__ = [
    "CHUNK_SAMPLES",
    "COSTS",
    "LEVELS",
    "MIN_WINDOWS",
    "RADIX_LONGEST",
    "WINDOW_BATCHES",
    "Cost",
    "LengthSource",
    "Span",
    "TokenOrder",
    "batch_costs",
    "default_window",
    "length_sum",
    "locked",
    "repeat",
]

#: Cost levels a window's batches are sorted by (each ``max_tokens / LEVELS`` wide).
LEVELS = 64
#: The default window holds about this many batches' worth of samples at the mean length.
WINDOW_BATCHES = 64
#: The default window leaves at least this many windows in the epoch.
MIN_WINDOWS = 4
#: Whole windows are planned together in chunks: the first of about this many samples
#: (all the first batch waits for), each later one of about :data:`CHUNK_GROWTH` times as
#: many (fewer, larger chunks: each chunk's planning has a fixed cost of a few hundred
#: tensor operations, a sixth of the whole epoch's time at 10**7 samples in chunks of 2**16).
CHUNK_SAMPLES = 1 << 16
#: How many times the first chunk's samples each later chunk holds (in whole windows).
CHUNK_GROWTH = 4
#: Chunks kept planned (their indices): this many, the most recently used (:meth:`TokenOrder.span`).
CACHED_CHUNKS = 4


class _Locked(Protocol):
    @property
    def lock(self) -> Any: ...


_P = ParamSpec("_P")
_Index = TypeVar("_Index", int, torch.Tensor)
_R = TypeVar("_R")
_S = TypeVar("_S", bound=_Locked)


def locked(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """``method`` run holding its object's ``lock``: planning as it goes mutates caches,
    and a state read from another thread while the loop iterates must see them whole."""

    def run(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.lock:
            return method(self, *args, **kwargs)

    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


def default_window(
    lengths: torch.Tensor,
    max_tokens: int,
    total: int | None = None,
    model: TokenCost | None = None,
) -> int:
    """Samples per window: :data:`WINDOW_BATCHES` batches at the mean length, but at most
    ``N //`` :data:`MIN_WINDOWS`, and at least two batches' worth (and 1); never more
    than ``N`` (a budget far above the data makes one window of the whole dataset).

    A batch holds ``max_tokens`` over the mean length samples, for the linear and
    quadratic costs (whose ``max_tokens`` counts tokens); under a named per-sample
    function (``model``, whose ``max_tokens`` is in the function's units, e.g. FLOPs),
    the budget over the mean length's cost.

    A window holding the whole dataset would give the same batches every epoch (sorted
    by length), so a small dataset gets a few windows; a window of fewer samples than a
    batch holds would cut batches short, hence the floor. Integer arithmetic on the
    lengths alone (``total`` is their sum, when known), so every rank computes the same
    window.
    """
    size = lengths.numel()
    if total is None:
        total = length_sum(lengths)
    if model is not None and model.per_sample is not None:
        mean = total // max(size, 1)
        per_batch = max(1, max_tokens // max(model.cost_of(mean), 1))
    else:
        per_batch = max(1, max_tokens * size // max(total, 1))
    window = max(1, 2 * per_batch, min(WINDOW_BATCHES * per_batch, size // MIN_WINDOWS))
    return min(window, max(size, 1))


def batch_costs(lengths: torch.Tensor, sizes: torch.Tensor, cost: CostLike) -> torch.Tensor:
    """The cost of consecutive batches of ``lengths`` (int64) with ``sizes`` samples each,
    in the cost model's units (:attr:`TokenCost.scale` per token)."""
    if sizes.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    batch = repeat(torch.arange(sizes.numel()), sizes)
    return as_cost(cost).costs(lengths, batch, sizes.numel())


class LengthSource(Protocol):
    """Lengths read once before they are copied (:class:`~samplers.tokens.held.HeldLengths`)."""

    def read(self, indices: torch.Tensor) -> torch.Tensor:
        """The lengths at ``indices``."""

    def owned(self) -> torch.Tensor:
        """All the lengths, copied."""


@dataclass(frozen=True, eq=False)
class Span:
    """A planned chunk of whole windows: positions ``[lo, hi)`` of the order.

    ``indices[p - lo]`` is the dataset index at position ``p``; ``starts`` are the global
    positions where the chunk's batches begin, in order (int64).
    """

    lo: int
    hi: int
    indices: torch.Tensor
    starts: torch.Tensor


class TokenOrder(Order):
    """One epoch's order over ``N`` samples and where its batches begin.

    Guarantee: the order is a permutation of ``[0, N)``; its batches are consecutive
    ranges of positions that together cover ``[0, N)``, each within one window, each
    non-empty and each costing at most ``max_tokens`` unless it is a single sample
    longer than that; and all of it is a function of the lengths, ``max_tokens``,
    ``cost``, ``window``, ``shuffle``, ``permutation``, ``seed`` and ``epoch`` only (the
    same on every rank, whatever the world size, without communication).

    With ``stream`` (an :class:`~samplers.plan.Order`) the windows hold its positions
    instead of the permutation's: the order is the stream's values rearranged within
    each window (every window holds exactly the stream's positions there), ``N`` is
    ``stream.size`` and ``lengths`` has one length per value the stream gives.

    ``lengths`` must be a 1-D integer tensor of non-negative lengths (the sampler checks
    its arguments; this class trusts them). With ``source`` (a
    :class:`~samplers.tokens.held.HeldLengths`), the first chunk of an epoch of several
    reads its lengths through ``source.read`` and everything else plans from
    ``source.owned()`` (the sampler's own copy of the caller's lengths), which replaces
    ``lengths``.
    """

    def __init__(
        self,
        lengths: torch.Tensor,
        max_tokens: int,
        cost: CostLike,
        window: int,
        *,
        shuffle: bool,
        seed: int,
        epoch: int,
        permutation: Permutation = "randperm",
        stream: Order | None = None,
        source: LengthSource | None = None,
    ) -> None:
        self.lengths = lengths
        #: Where the first chunk reads its lengths and what replaces ``lengths`` before
        #: any other chunk is planned (the sampler's own copy of them), or ``None``.
        self._source = source
        self.max_tokens = max_tokens
        self.cost = cost
        #: The cost model (``cost`` as a :class:`~samplers.tokens.cost.TokenCost`).
        self.model: TokenCost = as_cost(cost)
        #: Samples per window, at most the epoch's (a larger one is the same single window).
        self.window = min(window, max(lengths.numel() if stream is None else stream.size, 1))
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        self.permutation: Permutation = permutation
        #: The order the windows take their samples from instead of the epoch permutation
        #: (e.g. a :class:`~samplers.mixture.order.MixtureOrder`); its size is the epoch's.
        self.stream = stream
        self.permutes = stream is None or stream.permutes
        #: ``(lo, hi) ->`` each position's phase in its window, in order in the batches.
        self.phases: Callable[[int, int], torch.Tensor | None] | None = None
        self.length = lengths.numel() if stream is None else stream.size
        #: Whole windows in the first planned chunk, and in each later one (about
        #: :data:`CHUNK_GROWTH` times as many samples; one window when windows are larger).
        self.chunk_windows = max(1, CHUNK_SAMPLES // window)
        self.later_windows = max(self.chunk_windows, CHUNK_GROWTH * CHUNK_SAMPLES // window)
        self._spans: OrderedDict[int, Span] = OrderedDict()
        self._starts: dict[int, torch.Tensor] = {}
        self._aranged: torch.Tensor | None = None  # :meth:`_local`
        #: Held while planning (by this order and by its layouts): one thread plans at a time.
        self.lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"TokenOrder(size={self.size}, max_tokens={self.max_tokens}, cost={self.cost!r}, "
            f"window={self.window}, shuffle={self.shuffle}, seed={self.seed}, "
            f"epoch={self.epoch}, permutation={self.permutation!r})"
        )

    def __getstate__(self) -> dict[str, object]:
        # Pickled with its settings and lengths; plans are computed again on demand.
        with self.lock:  # not while a chunk is planned from the caller's lengths
            self._own_lengths()
            state = dict(self.__dict__)
        state.pop("permuted", None)
        state["_spans"], state["_starts"], state["_aranged"] = OrderedDict(), {}, None
        state.pop("lock", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        for name in ("_aranged", "phases"):  # not in orders pickled before them
            self.__dict__.setdefault(name, None)
        self.lock = threading.RLock()

    @property
    def size(self) -> int:
        """The number of positions (the dataset's length)."""
        return self.length

    @cached_property
    def permuted(self) -> Order:
        """The epoch permutation the windows are cut from (or the ``stream`` given)."""
        if self.stream is not None:
            return self.stream
        return make_order(
            self.size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            permutation=self.permutation,
        )

    @property
    def chunks(self) -> int:
        """How many chunks of whole windows the order is planned in."""
        if self.size == 0:
            return 0
        return int(self._chunk_of(ceil_div(self.size, self.window) - 1)) + 1

    def chunk_of(self, position: int) -> int:
        """The chunk holding ``position`` (in ``[0, N)``)."""
        return int(self._chunk_of(position // self.window))

    def _chunk_of(self, windows: _Index) -> _Index:
        """The chunk holding each window number (an int or an int64 tensor)."""
        first, later = self.chunk_windows, self.later_windows
        return (windows + (later - first)) // later

    def chunk_bounds(self, chunk: int) -> tuple[int, int]:
        """The positions ``[lo, hi)`` of chunk ``chunk``."""
        first, later = self.chunk_windows, self.later_windows
        lo = 0 if chunk == 0 else first + (chunk - 1) * later
        hi = first if chunk == 0 else lo + later
        return min(lo * self.window, self.size), min(hi * self.window, self.size)

    @locked
    def span(self, chunk: int) -> Span:
        """Chunk ``chunk`` planned (the last :data:`CACHED_CHUNKS` are kept)."""
        if chunk in self._spans:
            self._spans.move_to_end(chunk)
            return self._spans[chunk]
        planned = self._plan(chunk)
        self._spans[chunk] = planned
        self._starts.setdefault(chunk, _compact(planned.starts, self.size))
        while len(self._spans) > CACHED_CHUNKS:
            self._spans.popitem(last=False)
        return planned

    @locked
    def starts(self, chunk: int) -> torch.Tensor:
        """Where chunk ``chunk``'s batches begin (global positions, int64), kept once computed.

        Kept for every chunk asked for: one int32 per batch below 2**31 samples.
        """
        if chunk not in self._starts:
            self.span(chunk)
        return self._starts[chunk].to(torch.int64)

    @locked
    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices (int64) at ``positions``; position ``p >= N`` holds ``order[p % N]``."""
        if positions.numel() == 0:
            return torch.zeros(0, dtype=torch.int64)
        positions = positions.to(torch.int64)  # the chunk arithmetic below needs 64 bits
        if int(positions.max()) >= self.size:
            positions = positions % self.size
        chunk = self._chunk_of(positions // self.window)
        first, last = int(chunk.min()), int(chunk.max())
        if first == last:  # the common case: a rank's next batches, within one chunk
            planned = self.span(first)
            return planned.indices.index_select(0, positions - planned.lo).to(torch.int64)
        result = torch.empty(positions.numel(), dtype=torch.int64)
        for value in torch.unique(chunk).tolist():
            where = chunk == value
            planned = self.span(value)
            result[where] = planned.indices[positions[where] - planned.lo].to(torch.int64)
        return result

    # Planning one chunk ---------------------------------------------------------------

    def _plan(self, chunk: int) -> Span:
        lo, hi = self.chunk_bounds(chunk)
        count = hi - lo
        window = self.window
        if count == 0:
            empty = torch.zeros(0, dtype=torch.int64)
            return Span(lo, hi, empty, empty)
        if chunk or hi == self.size:  # only a first chunk with more to come reads ``lengths``
            self._own_lengths()
        # In int32 when they fit: read twice below, and kept in int32.
        indices = self.permuted.between(lo, hi, narrow=True)
        if self._source is None:
            drawn = self.lengths.index_select(0, indices)
        else:
            drawn = self._source.read(indices)
        # Where each sample of the sorted windows comes from: longest first within each
        # window; ties keep the permutation order.
        source = longest_first(drawn, ceil_div(count, window), window, count)
        local = self._local(count)
        phases = None if self.phases is None else self.phases(lo, hi)
        arranged, lengths, starts = self._batches(
            drawn.index_select(0, source),
            local,
            count,
            None if phases is None else phases.index_select(0, source),
        )
        if arranged is not None:
            source = source.index_select(0, arranged)
        sizes = torch.diff(starts, append=torch.tensor([count]))
        costs = self._costs(lengths, starts, sizes)
        # Each batch's first sample's place in its window of the permutation.
        firsts = source.index_select(0, starts) - starts // window * window
        groups = None if phases is None else phases.index_select(0, source.index_select(0, starts))
        moved, new_sizes, new_starts = by_cost_level(
            costs, starts, sizes, firsts, lo // window, window, self._level_budget(), LEVELS, groups
        )
        # Position q of the new order's batch j is position starts[j'] + (q - new_starts[j])
        # of the cut order, j' = sequence[j]; that one holds the permutation's source[...].
        taken = repeat(moved.to(local.dtype), new_sizes)
        taken += local
        dtype = torch.int32 if max(self.size, self.lengths.numel()) < 2**31 else torch.int64
        ordered = indices.index_select(0, source.index_select(0, taken)).to(dtype)
        return Span(lo, hi, ordered, new_starts + lo)

    def _local(self, count: int) -> torch.Tensor:
        """``arange(count)`` (int32 below ``2**31``, read only): a view of one kept for
        the order's chunks (every chunk holds at most ``largest`` samples), when they
        hold at most :data:`CHUNK_GROWTH` x :data:`CHUNK_SAMPLES` samples (larger windows
        make larger chunks: theirs is made each time)."""
        largest = min(max(self.chunk_windows, self.later_windows) * self.window, self.size)
        if largest > CHUNK_GROWTH * CHUNK_SAMPLES:
            return torch.arange(count, dtype=torch.int32 if count < 2**31 else torch.int64)
        if self._aranged is None:
            self._aranged = torch.arange(largest, dtype=torch.int32)
        return self._aranged[:count]

    def _own_lengths(self) -> None:
        """Plan from the sampler's own copy of the lengths from now on (if given)."""
        if self._source is not None:
            self.lengths, self._source = self._source.owned(), None

    def _batches(
        self,
        lengths: torch.Tensor,
        local: torch.Tensor,
        count: int,
        phases: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """A chunk's windows, each sorted longest first (``lengths``; ``local``:
        ``arange(count)``; ``phases``: :attr:`phases` so sorted), cut into batches: how the
        samples are rearranged in their windows first (positions of ``lengths``; ``None``:
        not rearranged), the lengths so rearranged, and the batch starts (local, int64)."""
        return None, lengths, self._cut(lengths, local, count)

    def _budget(self) -> int:
        """The budget in the model's units, at most ``BUDGET_LIMIT - 1``: a larger one
        was let through only when no batch can cost that much (see
        :meth:`~samplers.tokens.cost.TokenCost.checked_budget`), so it cuts the same
        batches, each window one batch."""
        return min(self.model.budget(self.max_tokens), BUDGET_LIMIT - 1)

    def _level_budget(self) -> int:
        """The cost (in the model's units) the :data:`LEVELS` levels divide."""
        return self._budget()

    def halves(self, lows: torch.Tensor, highs: torch.Tensor) -> torch.Tensor:
        """Where a layout cuts batches ``[lows, highs)`` (two samples or more) in two: the
        first part holds ``ceil(n / 2)`` samples."""
        return lows + (highs - lows + 1) // 2

    def _cut(self, lengths: torch.Tensor, local: torch.Tensor, count: int) -> torch.Tensor:
        """Greedy batch starts (local positions) of the windows of sorted ``lengths``.

        A batch starting at ``i`` ends where its window ends or at ``after[i]``, whichever
        is first (:func:`~samplers.tokens.arrays.follow`): for the linear padded cost,
        ``i`` plus a table's batch size for ``lengths[i]``, read at batch starts only.
        With many windows, every window's chain of batch starts is followed at once, one
        batch per iteration (as many iterations as the window with the most batches has,
        never one per sample); with few, the chains are followed in Python.
        """
        budget = self._budget()
        window = self.window
        if self.model.kind == "padded" and self.model.linear:
            # Longest first: each window's longest is its first, and a batch starting at
            # i holds max(1, budget // length[i]) samples (at most a window's worth).
            longest = int(lengths[::window].max())
            if longest <= count:
                # From a table of every length up to the longest (lengths are at least
                # 0): one integer division per possible length rather than one per
                # sample (divisions are slow), read only where batches start.
                budget = min(budget, max(longest, 1) * window)
                costs = torch.clamp(torch.arange(longest + 1), min=1)
                table = torch.clamp(budget // costs, min=1, max=window)
                return follow(table, count, window, lengths)
        # Each cost capped at the budget plus one (the same cut, no int64 overflow).
        each = self.model.capped_costs(lengths, budget)
        if self.model.kind == "padded":
            # A batch starting at i holds max(1, budget // cost[i]) samples; at most a
            # window's worth, so that ``local + fits`` cannot overflow.
            budget = min(budget, max(int(each.max()), 1) * window)
            fits = torch.clamp(budget // torch.clamp(each, min=1), min=1, max=window)
            after = local + fits
        else:
            after = torch.maximum(reach_within(each, budget), local + 1)
        return follow(after, count, window)

    def _costs(
        self, lengths: torch.Tensor, starts: torch.Tensor, sizes: torch.Tensor
    ) -> torch.Tensor:
        # Capped as the cut is (a batch over the budget is one sample, at the top level).
        budget = self._level_budget()
        if self.model.kind == "padded":
            # The longest is the first.
            return self.model.capped_costs(lengths[starts], budget) * sizes
        return capped_sums(self.model.capped_costs(lengths, budget), starts, budget + 1)


def _compact(starts: torch.Tensor, size: int) -> torch.Tensor:
    """Batch starts in int32 when every position fits."""
    return starts.to(torch.int32) if size < 2**31 else starts
