"""The epoch plan: one epoch's order and layout, and the shares it gives each rank."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import torch

from samplers.options import Permutation, Tail
from samplers.plan.layouts import Batched, Layout, Strided
from samplers.plan.orders import Order, make_order
from samplers.plan.sizes import ShardSizes

__all__ = ["EpochPlan", "interleave", "interleave_truncated", "rank_positions"]


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of one sampler configuration: its order and its layout.

    ``sizes`` are the stock sampler's sizes; :meth:`stock` is the stock plan for them
    (``Strided.stock(sizes)``, which also describes a sampler whose ``total_size`` was
    overridden, see :meth:`ShardSizes.given`). The epoch order (:attr:`order`) follows
    from ``shuffle``, ``seed``, ``epoch`` and ``permutation``, or is a ``given`` one (a
    wrapped sampler's stream, a token-budgeted order), and is drawn lazily, on first use.

    Example::

        >>> plan = EpochPlan.stock(ShardSizes.of(5, 2, drop_last=False), False, 0, 0)
        >>> plan.global_indices().tolist()     # position 5 repeats the head of the order
        [0, 1, 2, 3, 4, 0]
        >>> plan.rank_indices(1).tolist()
        [1, 3, 0]
        >>> uneven = EpochPlan.of(5, 2, tail="uneven", shuffle=False, seed=0, epoch=0)
        >>> uneven.rank_indices(0).tolist(), uneven.rank_indices(1).tolist()
        ([0, 2, 4], [1, 3])
        >>> feistel = EpochPlan.of(10, 2, shuffle=True, seed=0, epoch=0, permutation="feistel")
        >>> feistel.rank_indices(0).tolist()   # positions 0, 2, ... of its epoch order
        [8, 2, 3, 5, 1]
    """

    #: The stock sampler's sizes: the dataset size, world size and shares.
    sizes: ShardSizes
    #: Whether the epoch order is shuffled (else it is ``0 .. N - 1``).
    shuffle: bool
    #: The seed the shuffled order is drawn from, with :attr:`epoch`.
    seed: int
    #: The epoch the shuffled order is drawn for, with :attr:`seed` (``set_epoch``'s).
    epoch: int
    #: Which positions of the epoch order each rank takes, as items or batches.
    layout: Layout
    #: How a shuffled order is drawn: ``"randperm"`` (the stock sampler's) or ``"feistel"``.
    permutation: Permutation = "randperm"
    #: A given order (a wrapped sampler's stream, a token-budgeted order) instead of one
    #: drawn from the settings.
    given: Order | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.layout.dataset_size != self.sizes.dataset_size:
            raise ValueError(
                f"layout is for {self.layout.dataset_size} samples, sizes for "
                f"{self.sizes.dataset_size}"
            )

    @classmethod
    def stock(
        cls,
        sizes: ShardSizes,
        shuffle: bool,
        seed: int,
        epoch: int,
        permutation: Permutation = "randperm",
    ) -> EpochPlan:
        """The stock sampler's plan for ``sizes``."""
        return cls(sizes, shuffle, seed, epoch, Strided.stock(sizes), permutation)

    @classmethod
    def of(
        cls,
        dataset_size: int,
        world_size: int,
        *,
        tail: Tail = "pad",
        shuffle: bool,
        seed: int,
        epoch: int,
        start: int = 0,
        batch_size: int | None = None,
        permutation: Permutation = "randperm",
    ) -> EpochPlan:
        """The plan of a tail policy from ``start``; batched when ``batch_size`` is given."""
        sizes = ShardSizes.of(dataset_size, world_size, drop_last=tail == "drop")
        layout: Layout
        if batch_size is None:
            layout = Strided.of(dataset_size, world_size, tail, start)
        else:
            layout = Batched(dataset_size, world_size, batch_size, tail, start)
        return cls(sizes, shuffle, seed, epoch, layout, permutation)

    @cached_property
    def order(self) -> Order:
        """The epoch order (a drawn permutation is drawn on first use of its indices)."""
        if self.given is not None:
            return self.given
        return make_order(
            self.sizes.dataset_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            permutation=self.permutation,
        )

    def undrawn(self) -> EpochPlan:
        """The same plan without its drawn order (drawn again on first use)."""
        return replace(self)

    def indices_at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices at ``positions`` of the epoch (padding wraps to the head)."""
        if positions.numel() == 0:
            return positions.clone()
        size = self.sizes.dataset_size
        if int(positions.max()) >= size:
            positions = positions % size
        return self.order.at(positions)

    def global_indices(self) -> torch.Tensor:
        """Every position of the layout in epoch order: what all ranks share out."""
        return self.indices_at(self.layout.all_positions())

    def rank_indices(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """The dataset indices of ``rank``'s items ``[lo:hi]`` (all of them, flat, for a
        batched layout), in the order ``rank`` receives them, without building the rest."""
        return self.indices_at(self.layout.positions(rank, lo, hi))

    def rank_batches(self, rank: int, lo: int = 0, hi: int | None = None) -> list[list[int]]:
        """``rank``'s batches ``[lo:hi]`` as lists of dataset indices (batched layout)."""
        if not self.layout.batched:
            raise TypeError("rank_batches needs a batched layout; use rank_indices")
        positions, sizes = self.layout.items(rank, lo, hi)
        flat = self.indices_at(positions).tolist()  # one conversion, then list slices
        ends = list(itertools.accumulate(sizes))
        return [flat[end - size : end] for end, size in zip(ends, sizes, strict=True)]

    def rank_share(self, rank: int) -> torch.Tensor | None:
        """``rank``'s whole share cut from a held order (``None`` when the order is computed
        position by position): a view when the share is the whole order, else a copy in the
        order's dtype, so the rest of the order can be freed."""
        layout = self.layout
        if not isinstance(layout, Strided):
            return None
        table = self.order.held(taking=layout.count(rank))
        if table is None:
            return None
        inside = table[layout.below_size(rank)]
        padding = layout.positions(rank, inside.numel())
        if padding.numel() == 0:
            return inside if inside.numel() == table.numel() else inside.clone()
        return torch.cat([inside, self.indices_at(padding).to(inside.dtype)])

    def _strided(self, what: str) -> Strided:
        if not isinstance(self.layout, Strided):
            raise TypeError(f"{what} needs a Strided layout")
        return self.layout

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank that receives each position (strided layouts)."""
        return self._strided("owner").owner(positions)

    def slot(self, positions: torch.Tensor) -> torch.Tensor:
        """Where in its rank's share each position lands (strided layouts)."""
        return self._strided("slot").slot(positions)

    def is_padding(self, positions: torch.Tensor) -> torch.Tensor:
        """Whether each position repeats an earlier sample (it lies past ``dataset_size``)."""
        return positions >= self.sizes.dataset_size


def rank_positions(
    total_size: int, world_size: int, rank: int, lo: int = 0, hi: int | None = None
) -> torch.Tensor:
    """Positions of the stock padded/trimmed order that ``rank`` receives, in order.

    Rank ``rank`` receives positions ``rank, rank + W, ...`` below ``total_size``;
    ``lo``/``hi`` (non-negative) select ``[lo:hi]`` of that sequence.
    """
    return Strided(total_size, world_size, 0, total_size).positions(rank, lo, hi)


def interleave(shares: Sequence[torch.Tensor]) -> torch.Tensor:
    """Undo strided sharding: rank shares back into padded/trimmed-order positions.

    ``shares[r]`` is what rank ``r`` received (all the same length, as every rank of a
    distributed sampler receives ``num_samples``); the result holds position ``p`` of
    the padded/trimmed order at index ``p``. Truncating it to the dataset size drops
    the padding, so each sample appears exactly once.
    """
    if not shares:
        raise ValueError("shares must hold one tensor per rank, got none")
    lengths = {len(share) for share in shares}
    if len(lengths) != 1:
        raise ValueError(f"every rank's share must have the same length, got {sorted(lengths)}")
    return torch.stack(list(shares), dim=1).reshape(-1)


def interleave_truncated(shares: Sequence[torch.Tensor], dataset_size: int) -> torch.Tensor:
    """Per-rank results of a padded epoch back in epoch order, each sample exactly once.

    The inverse of padded strided sharding: :func:`interleave` restores the padded order
    and the positions from ``dataset_size`` on, which are the padding, are dropped. With
    ``drop_last`` there is no padding and the result is the ``total_size`` samples seen.
    For any layout and tail, in dataset order, see :func:`samplers.unshard`.
    """
    if dataset_size < 0:
        raise ValueError(f"dataset_size must be at least 0, got {dataset_size}")
    return interleave(shares)[:dataset_size]
