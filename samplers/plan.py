"""The sharding arithmetic, once: sizes and flags in, epoch order and rank shares out.

Everything here is pure (no process group, no sampler state) and works on tensors, so
the sampler, the studies and any later resume or unshard logic all read the same
answer from the same code.

The layout it describes is the stock ``DistributedSampler``'s:

1. The *epoch order* is ``torch.randperm(N)`` from a generator seeded with
   ``seed + epoch`` (or ``arange(N)`` without shuffling).
2. The order is *padded* to ``total_size`` by wrapping around to its head, or
   *trimmed* to ``total_size`` when ``drop_last`` is set. Either way, position ``p``
   of the padded/trimmed order holds ``order[p % N]``.
3. Rank ``r`` takes positions ``r, r + W, r + 2W, ...`` (a stride, not a block).

Sizes use integer arithmetic only: ``math.ceil(N / W)`` in floating point, as the
stock sampler computes it, is wrong once ``N`` exceeds 2**53.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

__all__ = [
    "EpochPlan",
    "ShardSizes",
    "epoch_order",
    "interleave",
    "rank_positions",
    "unshard",
]


@dataclass(frozen=True)
class ShardSizes:
    """How many samples an epoch has in total and per rank.

    ``num_samples`` is each rank's share and ``total_size = num_samples * world_size``.
    Without ``drop_last`` the order is padded up to ``ceil(N / W) * W``; with it, the
    order is trimmed down to ``floor(N / W) * W``.
    """

    dataset_size: int
    world_size: int
    drop_last: bool
    num_samples: int
    total_size: int

    @classmethod
    def of(cls, dataset_size: int, world_size: int, drop_last: bool) -> ShardSizes:
        """Compute the sizes the stock sampler computes, in exact integer arithmetic."""
        if drop_last:
            num_samples = dataset_size // world_size
        else:
            num_samples = -(-dataset_size // world_size)
        return cls(dataset_size, world_size, drop_last, num_samples, num_samples * world_size)

    @classmethod
    def given(
        cls,
        dataset_size: int,
        world_size: int,
        drop_last: bool,
        *,
        rank: int,
        num_samples: int,
        total_size: int,
    ) -> ShardSizes:
        """Sizes as a sampler's ``num_samples``/``total_size`` attributes hold them.

        The stock sampler computes both at construction and trusts them when iterating,
        so a subclass may override them. Such an override works there when it pads
        (``total_size >= N`` without ``drop_last``) or trims (``total_size <= N`` with
        it) to a length that gives ``rank`` exactly ``num_samples`` positions, and the
        same overrides are accepted here. Any other pair raises the ``AssertionError``
        the stock sampler raises, with the reason (typically: the dataset or
        ``world_size`` changed after the sizes were computed).
        """
        natural = cls.of(dataset_size, world_size, drop_last)
        if (num_samples, total_size) == (natural.num_samples, natural.total_size):
            return natural
        if drop_last:
            fits = 0 <= total_size <= dataset_size
        else:
            fits = total_size >= dataset_size and (dataset_size > 0 or total_size == 0)
        if not fits or len(rank_positions(total_size, world_size, rank)) != num_samples:
            raise AssertionError(
                f"num_samples={num_samples} and total_size={total_size} do not fit "
                f"{dataset_size} samples over num_replicas={world_size} with "
                f"drop_last={drop_last} (expected num_samples={natural.num_samples}, "
                f"total_size={natural.total_size}); they are computed when the sampler is "
                "built, so build a new sampler after changing the dataset or num_replicas"
            )
        return cls(dataset_size, world_size, drop_last, num_samples, total_size)

    @property
    def padding(self) -> int:
        """Positions filled by repeating the head of the epoch order."""
        return max(self.total_size - self.dataset_size, 0)

    @property
    def dropped(self) -> int:
        """Samples at the tail of the epoch order that no rank receives."""
        return max(self.dataset_size - self.total_size, 0)


def epoch_order(dataset_size: int, *, shuffle: bool, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's order of dataset indices, before padding or trimming (int64).

    With ``shuffle`` this is exactly the stock sampler's permutation: ``torch.randperm``
    drawn from a CPU generator seeded with ``seed + epoch``. ``manual_seed`` accepts
    ``[-2**63, 2**64 - 1]`` and raises for anything outside, as in the stock sampler.
    """
    if not shuffle:
        return torch.arange(dataset_size, dtype=torch.int64)
    generator = torch.Generator()
    try:
        generator.manual_seed(seed + epoch)
    except (RuntimeError, ValueError) as error:
        # Same exception type as torch raises, with the arguments that caused it.
        raise type(error)(
            f"seed + epoch must be in [-2**63, 2**64 - 1] (torch.Generator.manual_seed), "
            f"got seed={seed} + epoch={epoch} = {seed + epoch}"
        ) from error
    return torch.randperm(dataset_size, generator=generator)


def rank_positions(
    total_size: int, world_size: int, rank: int, start: int = 0, stop: int | None = None
) -> torch.Tensor:
    """Positions of the padded/trimmed order that ``rank`` receives, in order.

    Rank ``rank`` receives positions ``rank, rank + W, ...`` below ``total_size``;
    ``start``/``stop`` (non-negative) select ``[start:stop]`` of that sequence.
    """
    if start < 0 or (stop is not None and stop < 0):
        raise ValueError(f"start and stop must be at least 0, got start={start}, stop={stop}")
    last = total_size if stop is None else min(total_size, rank + stop * world_size)
    first = min(rank + start * world_size, last)
    return torch.arange(first, max(first, last), world_size, dtype=torch.int64)


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


def unshard(shares: Sequence[torch.Tensor], dataset_size: int) -> torch.Tensor:
    """Per-rank results of a padded epoch back in epoch order, each sample exactly once.

    The inverse of padded strided sharding: :func:`interleave` restores the padded order
    and the positions from ``dataset_size`` on, which are the padding, are dropped. With
    ``drop_last`` there is no padding and the result is the ``total_size`` samples seen.
    """
    if dataset_size < 0:
        raise ValueError(f"dataset_size must be at least 0, got {dataset_size}")
    return interleave(shares)[:dataset_size]


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of one sampler configuration: its sizes and its (lazily drawn) order.

    ``sizes.total_size`` is taken as given, so a plan can also describe a sampler whose
    ``total_size`` was overridden (see :meth:`ShardSizes.given`).

    Example::

        >>> plan = EpochPlan(ShardSizes.of(5, 2, drop_last=False), shuffle=False, seed=0, epoch=0)
        >>> plan.global_indices().tolist()     # position 5 repeats the head of the order
        [0, 1, 2, 3, 4, 0]
        >>> plan.rank_indices(1).tolist()
        [1, 3, 0]
    """

    sizes: ShardSizes
    shuffle: bool
    seed: int
    epoch: int

    @cached_property
    def order(self) -> torch.Tensor:
        """The epoch order of all ``dataset_size`` indices (int64)."""
        return epoch_order(
            self.sizes.dataset_size, shuffle=self.shuffle, seed=self.seed, epoch=self.epoch
        )

    def indices_at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices at ``positions`` of the padded/trimmed order.

        Without shuffling the order is the identity and is never materialised.
        """
        if positions.numel() == 0:
            return positions.clone()
        wrapped = positions % self.sizes.dataset_size
        return wrapped if not self.shuffle else self.order[wrapped]

    def global_indices(self) -> torch.Tensor:
        """The whole padded/trimmed order, ``total_size`` long: what all ranks share out."""
        return self.indices_at(torch.arange(self.sizes.total_size, dtype=torch.int64))

    def rank_indices(self, rank: int, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """The dataset indices ``rank`` receives this epoch, in the order it receives them.

        ``start``/``stop`` select ``share[start:stop]`` without building the rest.
        """
        sizes = self.sizes
        return self.indices_at(
            rank_positions(sizes.total_size, sizes.world_size, rank, start, stop)
        )

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank that receives each position of the padded/trimmed order."""
        return positions % self.sizes.world_size

    def slot(self, positions: torch.Tensor) -> torch.Tensor:
        """Where in its rank's share each position lands (0 for the rank's first sample)."""
        return positions // self.sizes.world_size

    def is_padding(self, positions: torch.Tensor) -> torch.Tensor:
        """Whether each position repeats an earlier sample (it lies past ``dataset_size``)."""
        return positions >= self.sizes.dataset_size
