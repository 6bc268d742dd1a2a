"""The mixture's epoch order: position -> (source, its draw) -> its pass -> a ConcatDataset index.

Guarantee: :class:`MixtureOrder` is an :class:`~samplers.plan.Order` over one epoch's
window ``[epoch * length, (epoch + 1) * length)`` of the stream, a pure function of its
settings. Position ``p`` of the stream draws from the source the
:class:`~samplers.mixture.schedule.Schedule` says, and that source's ``j``-th draw is
item ``j mod n_d`` of its pass ``j // n_d``: each pass is a permutation of the source's
``n_d`` samples seeded from ``(seed, source, pass)``, so within a pass no sample repeats,
and a source that runs out starts its next pass. The index returned is the sample's
index in ``ConcatDataset(datasets)`` (the source's offset plus its index in the source).
Any position costs O(1) tensor operations, and a chunk of positions O(1) per position,
whatever the sources and passes it touches, once the mixing period is computed as far as
the position (:class:`~samplers.mixture.schedule.Period`: the first position past its
first piece computes the rest of the period, once). Iterators compute a small first
chunk (:attr:`MixtureOrder.first_chunk`), so the first index needs only the start of the
period, then large chunks evaluated a block at a time (:attr:`MixtureOrder.blockwise`).

Passes: :class:`~samplers.mixture.passes.Passes`, a keyed Feistel permutation per
``(seed, source, pass)`` (O(1) memory), evaluated for a whole chunk at once. Without
shuffling a pass is ``0, 1, ..., n_d - 1``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from samplers.cycle_walk import _BLOCK
from samplers.mixture.merge import TokenMerge
from samplers.mixture.passes import Passes, drawn_items, source_seed
from samplers.mixture.schedule import Schedule
from samplers.plan import Order

__all__ = ["MixtureOrder", "source_seed"]


@dataclass(frozen=True)
class MixtureOrder(Order):
    """Epoch ``epoch`` of the stream (``length`` positions from ``epoch * length``)."""

    blockwise = True
    permutes = False  # a source drawn in several passes repeats its samples
    #: The first chunk is small: it may compute the start of the mixing period
    #: (:class:`~samplers.mixture.schedule.Period`), ``W`` positions per index.
    first_chunk = 1 << 7

    sizes: tuple[int, ...]
    schedule: Schedule | TokenMerge
    seed: int
    shuffle: bool
    epoch: int
    length: int
    offsets: torch.Tensor = field(init=False, repr=False, compare=False)
    sizes_tensor: torch.Tensor = field(init=False, repr=False, compare=False)
    #: The last :meth:`between`'s ``(lo, hi, source, drawn)``, which :meth:`window_phases`
    #: of the same positions reads instead of locating them again (kept only for an
    #: order :meth:`phased` was asked of: 16 bytes a position, until that read).
    _located: tuple[int, int, torch.Tensor, torch.Tensor] | None = field(
        init=False, repr=False, compare=False, default=None
    )
    _keeps_located: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        sizes = torch.tensor(self.sizes, dtype=torch.int64)
        object.__setattr__(self, "sizes_tensor", sizes)
        object.__setattr__(self, "offsets", sizes.cumsum(0) - sizes)

    def __getstate__(self) -> dict[str, Any]:
        """The settings only: the tensors derived from them are rebuilt on unpickling."""
        derived = ("offsets", "sizes_tensor", "pass_orders", "_located")
        return {k: v for k, v in self.__dict__.items() if k not in derived}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_located", None)
        self.__post_init__()

    @functools.cached_property
    def pass_orders(self) -> Passes:
        """The sources' passes (their permutations and tables), built when first read: an
        order whose merge by tokens hands back the items it drew never reads them."""
        return Passes(self.sizes, self.seed)

    @property
    def size(self) -> int:
        return self.length

    @property
    def first(self) -> int:
        """The stream position of the epoch's position 0."""
        return self.epoch * self.length

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.stream_at(positions + self.first)

    def between(self, lo: int, hi: int, *, narrow: bool = False) -> torch.Tensor:
        positions = torch.arange(lo, hi, dtype=torch.int64) + self.first
        source, drawn, items = self._locate(positions)
        if self._keeps_located:
            object.__setattr__(self, "_located", (lo, hi, source, drawn))
        return self._indices(source, drawn, items)

    def stream_at(self, positions: torch.Tensor) -> torch.Tensor:
        """ConcatDataset indices at stream positions."""
        return self._indices(*self._locate(positions))

    def _locate(
        self, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Each stream position's source, that source's draws before it, and (a merge by
        tokens over this order's passes reads them) the item of its pass drawn, else
        ``None``; a large call is evaluated :data:`~samplers.cycle_walk._BLOCK` positions
        at a time, below torch's threshold for intra-op parallelism."""
        schedule, merged = self.schedule, False
        locate: Any = schedule.locate
        if isinstance(schedule, TokenMerge):
            merged = schedule.sizes == self.sizes
            merged = merged and schedule.with_passes(self.seed, self.shuffle) is schedule
            locate = schedule.locate_items if merged else locate
        found = [torch.empty_like(positions) for _ in range(3 if merged else 2)]
        for lo in range(0, positions.numel(), _BLOCK):
            for column, values in zip(found, locate(positions[lo : lo + _BLOCK]), strict=True):
                column[lo : lo + _BLOCK] = values
        return found[0], found[1], found[2] if merged else None

    def _indices(
        self, source: torch.Tensor, drawn: torch.Tensor, items: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The ConcatDataset index of each source's ``drawn``-th draw (``items``: the
        draws' items, when known; else the passes' tables serve the whole call)."""
        result = self.within(source, drawn) if items is None else items  # our own copy
        for lo in range(0, source.numel(), _BLOCK):
            result[lo : lo + _BLOCK] += self.offsets.index_select(0, source[lo : lo + _BLOCK])
        return result

    def passes(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(source, pass, item of the pass) at stream positions."""
        source, drawn = self.schedule.locate(positions)
        sizes = self.sizes_tensor.index_select(0, source)
        return source, torch.div(drawn, sizes, rounding_mode="floor"), drawn % sizes

    def phased(self, window: int) -> Callable[[int, int], torch.Tensor | None]:
        """:meth:`window_phases` of ``window``, for a packed order that asks it of each
        chunk right after :meth:`between` (which keeps the draws it located for it)."""
        object.__setattr__(self, "_keeps_located", True)
        return functools.partial(self.window_phases, window=window)

    def window_phases(self, lo: int, hi: int, window: int) -> torch.Tensor | None:
        """Each of the epoch's positions ``[lo, hi)`` (``lo`` a multiple of ``window``):
        for a source whose pass ends within the position's window, how many of its passes
        began in the window before the position (from 0, its first in the window); -1 for
        the others, and for a source of one sample, whose passes are alike. A window
        handed out phase after phase gives each source's passes in order; the positions at
        -1 may go anywhere in it. ``None`` when no pass ends inside ``[lo, hi)``."""
        sizes = self.sizes_tensor
        located = self._located
        object.__setattr__(self, "_located", None)  # read once: not kept past its chunk
        if located is not None and located[:2] == (lo, hi):
            source, drawn = located[2], located[3]
        else:
            positions = torch.arange(lo, hi, dtype=torch.int64) + self.first
            source, drawn, _ = self._locate(positions)
        # Each source's draws before and after the positions: its draws among them are
        # consecutive (none for a source not drawn, whose bounds stay equal).
        count = len(self.sizes)
        before = torch.zeros(count, dtype=torch.int64).scatter_reduce(
            0, source, drawn, "amin", include_self=False
        )
        after = torch.zeros(count, dtype=torch.int64).scatter_reduce(
            0, source, drawn + 1, "amax", include_self=False
        )
        ending = (after - 1).div(sizes, rounding_mode="floor") > before.div(
            sizes, rounding_mode="floor"
        )
        ending &= (after > before) & (sizes > 1)
        if not bool(ending.any()):
            return None
        passes = drawn.div(sizes.index_select(0, source), rounding_mode="floor")
        marked = torch.nonzero(ending.index_select(0, source)).squeeze(1)
        source, passes = source.index_select(0, marked), passes.index_select(0, marked)
        key = (marked // window) * len(self.sizes) + source  # (window, source)
        groups, inverse = torch.unique(key, return_inverse=True)
        first = torch.full_like(groups, torch.iinfo(torch.int64).max)
        first = first.scatter_reduce(0, inverse, passes, "amin")
        last = torch.full_like(groups, -1).scatter_reduce(0, inverse, passes, "amax")
        phases = passes - first.index_select(0, inverse)
        ends = (last > first).index_select(0, inverse)  # a pass ends in the window
        found = torch.full((hi - lo,), -1, dtype=torch.int64)
        found[marked] = torch.where(ends, phases, -1)
        return found

    def within(self, source: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
        """The index within its source of each source's ``drawn``-th draw."""
        return drawn_items(self.pass_orders, self.sizes_tensor, self.shuffle, source, drawn)


def concat_offsets(sizes: Sequence[int]) -> list[int]:
    """Where each source begins in ``ConcatDataset``."""
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += size
    return offsets
