"""The sharding arithmetic, once: an epoch is an *order* laid out over ranks by a *layout*.

Everything here is pure (no process group, no sampler state) and works on tensors, so
the samplers, the studies, ``unshard`` and resume all read the same answer from the same
code.

**Order**: position -> dataset index over ``[0, N)``, one epoch's permutation.

* :class:`IdentityOrder`: position ``p`` holds index ``p`` (no shuffling).
* :class:`RandpermOrder`: the stock sampler's permutation, ``torch.randperm(N)`` drawn
  from a CPU generator seeded with ``seed + epoch``.
* :class:`FeistelOrder`: a keyed bijection of ``[0, N)`` computed position by position
  (:mod:`samplers.feistel`), so no order is ever held: O(1) memory at any ``N``.
* :class:`ExplicitOrder`: any given sequence (the stream of a wrapped sampler).

**Layout**: which positions each rank receives, in what order or batches, beginning at a
global **start** position (0 for a fresh epoch; a resumed epoch starts after the prefix
the ranks already consumed). A position ``p >= N`` is padding and holds the index at
``p % N``: padding reads the epoch order again from its head.

* :class:`Strided`: rank ``r`` takes positions ``start + r, start + r + W, ...`` below
  ``stop``. The stock sampler is ``Strided(start=0, stop=total_size)``: padded up to a
  multiple of ``W`` (tail ``"pad"``) or trimmed down to one (tail ``"drop"``); tail
  ``"uneven"`` stops at ``N``, so every sample is taken exactly once and shares differ
  in length by at most one.
* :class:`Batched`: one batch per rank per step; step ``k`` consumes a contiguous range
  of positions and rank ``r`` takes the ``r``-th block of it.

In both layouts the positions consumed after any number of steps, over all ranks, are a
prefix ``[start, start + consumed)`` of the epoch's positions: progress is one number,
whatever the world size, which is what resume relies on.

Sizes use integer arithmetic only: ``math.ceil(N / W)`` in floating point, as the stock
sampler computes it, is wrong once ``N`` exceeds 2**53.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, get_args

import torch

__all__ = [
    "PERMUTATIONS",
    "TAILS",
    "Batched",
    "EpochPlan",
    "ExplicitOrder",
    "FeistelOrder",
    "IdentityOrder",
    "Order",
    "Permutation",
    "RandpermOrder",
    "ShardSizes",
    "Strided",
    "Tail",
    "epoch_order",
    "interleave",
    "make_order",
    "rank_positions",
    "unshard",
]

#: What happens to the last ``N mod W`` samples (or ``N mod (W * B)`` for batches).
Tail = Literal["pad", "drop", "uneven"]
TAILS: tuple[Tail, ...] = get_args(Tail)

#: How a shuffled epoch order is drawn: ``"randperm"`` is the stock sampler's (and needs
#: the whole order in memory); ``"feistel"`` computes any position on its own.
Permutation = Literal["randperm", "feistel"]
PERMUTATIONS: tuple[Permutation, ...] = get_args(Permutation)

#: ``torch.Generator.manual_seed`` accepts exactly this range.
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class ShardSizes:
    """How many samples the stock sampler hands out in total and per rank.

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
        the stock sampler raises, starting with its wording and then giving the reason
        (typically: the dataset or ``world_size`` changed after the sizes were computed).
        """
        natural = cls.of(dataset_size, world_size, drop_last)
        if (num_samples, total_size) == (natural.num_samples, natural.total_size):
            return natural
        if drop_last:
            fits = 0 <= total_size <= dataset_size
        else:
            fits = total_size >= dataset_size and (dataset_size > 0 or total_size == 0)
        received = len(rank_positions(total_size, world_size, rank)) if fits else None
        if not fits or received != num_samples:
            stock = (
                f"Number of subsampled indices ({received}) does not match num_samples "
                f"({num_samples})"
                if fits
                else _stock_length_message(dataset_size, drop_last, total_size)
            )
            raise AssertionError(
                f"{stock}: num_samples={num_samples} and total_size={total_size} do not fit "
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


def _stock_length_message(dataset_size: int, drop_last: bool, total_size: int) -> str:
    """The stock sampler's wording for a padded/trimmed order of the wrong length.

    Its list slicing gives, for sizes that do not fit, the lengths computed here (a
    negative padding slices from the end), so the message quotes the same numbers.
    """
    if drop_last:
        length = len(range(dataset_size)[:total_size])
    else:
        padding = total_size - dataset_size
        length = dataset_size + (
            len(range(dataset_size)[:padding]) if padding <= dataset_size else padding
        )
    return f"Number of indices ({length}) does not match total_size ({total_size})"


# Orders ---------------------------------------------------------------------------------


class Order:
    """One epoch's order: position ``p`` in ``[0, size)`` -> dataset index.

    Subclasses implement :meth:`at`; :meth:`materialise` is the whole order as int64.
    """

    size: int

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices (int64) at ``positions`` (int64, each in ``[0, size)``)."""
        raise NotImplementedError

    def materialise(self) -> torch.Tensor:
        """The whole order, ``size`` int64 indices."""
        return self.at(torch.arange(self.size, dtype=torch.int64))


@dataclass(frozen=True)
class IdentityOrder(Order):
    """No shuffling: position ``p`` holds index ``p``. Never materialised."""

    size: int

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return positions


@dataclass(frozen=True, eq=False)
class ExplicitOrder(Order):
    """A given order (e.g. the stream of a wrapped sampler), held as int64."""

    indices: torch.Tensor

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.indices.numel()

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.indices[positions]

    def materialise(self) -> torch.Tensor:
        return self.indices


@dataclass(frozen=True)
class RandpermOrder(Order):
    """The stock sampler's permutation: ``torch.randperm(size)`` seeded with ``key``.

    Drawn on first use. Below 2**31 samples it is held as int32: the CPU ``randperm``
    gives the same permutation in int32 as in int64 (``tests/test_plan.py`` checks it
    at the sizes where its algorithm could differ), in half the memory and a third of
    the time. ``key`` is ``seed + epoch``; ``manual_seed`` accepts
    ``[-2**63, 2**64 - 1]`` and the error for anything outside names seed and epoch.
    """

    size: int
    seed: int
    epoch: int

    @cached_property
    def table(self) -> torch.Tensor:
        """The permutation itself (int32 below 2**31 samples, else int64)."""
        generator = torch.Generator()
        generator.manual_seed(checked_key(self.seed, self.epoch))
        dtype = torch.int32 if self.size < 2**31 else torch.int64
        return torch.randperm(self.size, generator=generator, dtype=dtype)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions].long()

    def materialise(self) -> torch.Tensor:
        return self.table.long()


@dataclass(frozen=True)
class FeistelOrder(Order):
    """A keyed bijection of ``[0, size)`` from ``(seed, epoch)``, evaluated on demand.

    Specified exactly in :mod:`samplers.feistel` (the same order on every platform and
    torch version); unlike :class:`RandpermOrder` nothing of size ``N`` is ever built,
    so a rank computes only the positions it takes, in chunks, and any position in O(1).
    """

    size: int
    seed: int
    epoch: int

    @cached_property
    def permutation(self) -> Any:
        from samplers.feistel import FeistelPermutation  # it imports the checks

        return FeistelPermutation(self.size, self.seed, self.epoch)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.permutation(positions)


def checked_key(seed: int, epoch: int) -> int:
    """``seed + epoch``, or the error ``manual_seed`` raises for it, naming both."""
    key = seed + epoch
    low, high = SEED_RANGE
    if not low <= key <= high:
        raise ValueError(
            "Overflow when unpacking long long: seed + epoch must be in "
            f"[-2**63, 2**64 - 1] (torch.Generator.manual_seed), got seed={seed} + "
            f"epoch={epoch} = {key}"
        )
    return key


def make_order(
    size: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    permutation: Permutation = "randperm",
) -> Order:
    """The epoch order a sampler with these settings uses."""
    if not shuffle:
        return IdentityOrder(size)
    if permutation == "randperm":
        return RandpermOrder(size, seed, epoch)
    if permutation == "feistel":
        return FeistelOrder(size, seed, epoch)
    raise ValueError(f"permutation must be one of {', '.join(PERMUTATIONS)}, got {permutation!r}")


def epoch_order(dataset_size: int, *, shuffle: bool, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's order of dataset indices, before padding or trimming (int64).

    With ``shuffle`` this is exactly the stock sampler's permutation: ``torch.randperm``
    drawn from a CPU generator seeded with ``seed + epoch``.
    """
    return make_order(dataset_size, shuffle=shuffle, seed=seed, epoch=epoch).materialise()


# Layouts --------------------------------------------------------------------------------


def _check_count(name: str, value: int, minimum: int = 0) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def strided_stop(dataset_size: int, world_size: int, tail: Tail, start: int = 0) -> int:
    """Where a strided layout from ``start`` ends: padded, trimmed, or at ``N``."""
    remaining = max(dataset_size - start, 0)
    if tail == "pad":
        return start + -(-remaining // world_size) * world_size
    if tail == "drop":
        return start + remaining // world_size * world_size
    if tail == "uneven":
        return max(dataset_size, start)
    raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {tail!r}")


@dataclass(frozen=True)
class Strided:
    """Rank ``r`` takes the positions ``start + r + k * W`` below ``stop``, in order.

    With ``stop - start`` a multiple of ``W`` (tails ``"pad"`` and ``"drop"``) every
    rank takes the same number; otherwise (``"uneven"``) the first ``(stop - start) % W``
    ranks take one more.
    """

    dataset_size: int
    world_size: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        _check_count("dataset_size", self.dataset_size)
        _check_count("world_size", self.world_size, 1)
        _check_count("start", self.start)
        _check_count("stop", self.stop, self.start)

    @classmethod
    def of(cls, dataset_size: int, world_size: int, tail: Tail, start: int = 0) -> Strided:
        """The layout of ``tail`` over the positions from ``start`` on."""
        stop = strided_stop(dataset_size, world_size, tail, start)
        return cls(dataset_size, world_size, start, stop)

    @classmethod
    def stock(cls, sizes: ShardSizes) -> Strided:
        """The stock sampler's layout for ``sizes`` (which may be overridden ones)."""
        return cls(sizes.dataset_size, sizes.world_size, 0, sizes.total_size)

    def count(self, rank: int) -> int:
        """How many positions ``rank`` takes."""
        first = self.start + rank
        return max(-(-(self.stop - first) // self.world_size), 0)

    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """Positions of ``rank``'s share ``[lo:hi]`` (non-negative bounds), int64."""
        if lo < 0 or (hi is not None and hi < 0):
            raise ValueError(f"lo and hi must be at least 0, got lo={lo}, hi={hi}")
        first = self.start + rank
        last = self.stop if hi is None else min(self.stop, first + hi * self.world_size)
        begin = min(first + lo * self.world_size, last)
        return torch.arange(begin, max(begin, last), self.world_size, dtype=torch.int64)

    def all_positions(self) -> torch.Tensor:
        """Every position of the layout, in epoch order."""
        return torch.arange(self.start, self.stop, dtype=torch.int64)

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank that takes each position."""
        return (positions - self.start) % self.world_size

    def slot(self, positions: torch.Tensor) -> torch.Tensor:
        """Where in its rank's share each position lands (0: the rank's first)."""
        return (positions - self.start) // self.world_size

    def consumed(self, taken: int) -> int:
        """The global position reached when every rank has taken ``taken`` positions."""
        return min(self.start + taken * self.world_size, self.stop)


@dataclass(frozen=True)
class Batched:
    """One batch per rank per step, every rank the same number of steps.

    Step ``k`` consumes the contiguous positions ``[step_start(k), step_start(k + 1))``
    and rank ``r`` takes the ``r``-th block of them, so after ``k`` steps the ranks have
    consumed exactly the prefix ``[start, step_start(k))``. From ``R = max(N - start, 0)``
    remaining positions and ``S`` steps:

    * ``"pad"``: ``S = ceil(R / (W * B))``, every batch holds ``B`` positions and those
      past ``N`` repeat the head of the order (fewer than ``W * B`` of them);
    * ``"drop"``: ``S = floor(R / (W * B))``, every batch holds ``B``; fewer than
      ``W * B`` positions at the tail are never taken;
    * ``"uneven"``: ``S = ceil(R / (W * B))`` and the ``R`` positions are spread over the
      ``W * S`` batches as evenly as possible (sizes differ by at most one, in batch
      order ``k * W + r``; the larger ones first). Every position is taken exactly once.
      With ``R >= W`` and ``B >= 2`` no batch is empty; with ``B = 1`` that needs
      ``W`` to divide ``R``: otherwise the last step's batches that would be empty are
      not handed out, so those ranks take one batch fewer (an empty batch would break a
      DataLoader's collate). With ``R >= W * B`` no batch is smaller than ``B // 2``.
    """

    dataset_size: int
    world_size: int
    batch_size: int
    tail: Tail
    start: int = 0
    steps: int = field(init=False)

    def __post_init__(self) -> None:
        _check_count("dataset_size", self.dataset_size)
        _check_count("world_size", self.world_size, 1)
        _check_count("batch_size", self.batch_size, 1)
        _check_count("start", self.start)
        if self.tail not in TAILS:
            raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {self.tail!r}")
        per_step = self.world_size * self.batch_size
        remaining = self.remaining
        steps = remaining // per_step if self.tail == "drop" else -(-remaining // per_step)
        object.__setattr__(self, "steps", steps)

    @property
    def remaining(self) -> int:
        """Positions of the order from ``start`` on: ``max(N - start, 0)``."""
        return max(self.dataset_size - self.start, 0)

    @property
    def batches(self) -> int:
        """Batches in the epoch, over all ranks."""
        return self.steps * self.world_size

    def _before(self, batch: int) -> int:
        """Positions in the batches numbered below ``batch`` (numbered ``k * W + r``)."""
        if self.tail != "uneven":
            return batch * self.batch_size
        base, extra = divmod(self.remaining, self.batches) if self.batches else (0, 0)
        return batch * base + min(batch, extra)

    def step_start(self, step: int) -> int:
        """The global position where step ``step`` begins (``steps`` gives the end)."""
        return self.start + self._before(min(step, self.steps) * self.world_size)

    @property
    def stop(self) -> int:
        """The global position where the layout ends."""
        return self.step_start(self.steps)

    def count(self, rank: int) -> int:
        """How many batches ``rank`` takes: ``steps``, except for empty ones (see above)."""
        if self.tail != "uneven" or not self.batches or self.remaining >= self.batches:
            return self.steps
        # Fewer positions than batches (only with B = 1): batches numbered from R on
        # would be empty and are not handed out.
        return max(-(-(self.remaining - rank) // self.world_size), 0)

    def bounds(self, step: int, rank: int) -> tuple[int, int]:
        """The global positions ``[lo, hi)`` of ``rank``'s batch at ``step``."""
        batch = step * self.world_size + rank
        return self.start + self._before(batch), self.start + self._before(batch + 1)

    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> list[torch.Tensor]:
        """``rank``'s batches ``[lo:hi]`` as position tensors, in step order."""
        if lo < 0 or (hi is not None and hi < 0):
            raise ValueError(f"lo and hi must be at least 0, got lo={lo}, hi={hi}")
        count = self.count(rank)
        last = count if hi is None else min(hi, count)
        return [
            torch.arange(*self.bounds(step, rank), dtype=torch.int64) for step in range(lo, last)
        ]

    def all_positions(self) -> torch.Tensor:
        """Every position of the layout, in epoch order."""
        return torch.arange(self.start, self.stop, dtype=torch.int64)

    def consumed(self, taken: int) -> int:
        """The global position reached when every rank has taken ``taken`` batches."""
        return self.step_start(taken)


Layout = Strided | Batched


# The plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of one sampler configuration: its order and its layout.

    ``sizes`` are the stock sampler's sizes; without an explicit ``layout`` the plan is
    the stock one for them (``Strided.stock(sizes)``, which also describes a sampler
    whose ``total_size`` was overridden, see :meth:`ShardSizes.given`). The epoch order
    is drawn lazily, on first use.

    Example::

        >>> plan = EpochPlan(ShardSizes.of(5, 2, drop_last=False), shuffle=False, seed=0, epoch=0)
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

    sizes: ShardSizes
    shuffle: bool
    seed: int
    epoch: int
    layout: Layout = None  # type: ignore[assignment]
    permutation: Permutation = "randperm"
    #: A given order (a wrapped sampler's stream) instead of one drawn from the settings.
    order_given: Order | None = None

    def __post_init__(self) -> None:
        if self.layout is None:
            object.__setattr__(self, "layout", Strided.stock(self.sizes))
        if self.layout.dataset_size != self.sizes.dataset_size:
            raise ValueError(
                f"layout is for {self.layout.dataset_size} samples, sizes for "
                f"{self.sizes.dataset_size}"
            )

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

    def without_order(self) -> EpochPlan:
        """The same plan without its drawn order (it is drawn again on first use)."""
        return EpochPlan(
            self.sizes,
            self.shuffle,
            self.seed,
            self.epoch,
            self.layout,
            self.permutation,
            self.order_given,
        )

    def __getstate__(self) -> dict[str, object]:
        # A pickled plan carries its settings, not a drawn order of N indices.
        state = dict(self.__dict__)
        state.pop("ordering", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    @cached_property
    def ordering(self) -> Order:
        """The epoch order as an :class:`Order` (drawn lazily)."""
        if self.order_given is not None:
            return self.order_given
        return make_order(
            self.sizes.dataset_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            permutation=self.permutation,
        )

    @property
    def order(self) -> torch.Tensor:
        """The epoch order of all ``dataset_size`` indices (int64)."""
        return self.ordering.materialise()

    def indices_at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices at ``positions`` of the epoch (padding wraps to the head)."""
        if positions.numel() == 0:
            return positions.clone()
        size = self.sizes.dataset_size
        if int(positions.max()) >= size:
            positions = positions % size
        return self.ordering.at(positions)

    def global_indices(self) -> torch.Tensor:
        """Every position of the layout in epoch order: what all ranks share out."""
        return self.indices_at(self.layout.all_positions())

    def rank_indices(self, rank: int, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """The dataset indices ``rank`` receives this epoch, in the order it receives them.

        ``start``/``stop`` select ``share[start:stop]`` (batches, for a batched layout)
        without building the rest.
        """
        _check_bounds(start, stop)
        positions = self.layout.positions(rank, start, stop)
        if isinstance(positions, list):
            positions = torch.cat(positions) if positions else torch.empty(0, dtype=torch.int64)
        return self.indices_at(positions)

    def rank_batches(self, rank: int, start: int = 0, stop: int | None = None) -> list[list[int]]:
        """``rank``'s batches ``[start:stop]`` as lists of dataset indices (batched layout)."""
        if not isinstance(self.layout, Batched):
            raise TypeError("rank_batches needs a Batched layout; use rank_indices")
        _check_bounds(start, stop)
        positions = self.layout.positions(rank, start, stop)
        if not positions:
            return []
        sizes = [len(batch) for batch in positions]
        flat = self.indices_at(torch.cat(positions)).tolist()
        batches, offset = [], 0
        for size in sizes:
            batches.append(flat[offset : offset + size])
            offset += size
        return batches

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank that receives each position (strided layouts)."""
        if not isinstance(self.layout, Strided):
            raise TypeError("owner needs a Strided layout")
        return self.layout.owner(positions)

    def slot(self, positions: torch.Tensor) -> torch.Tensor:
        """Where in its rank's share each position lands (strided layouts)."""
        if not isinstance(self.layout, Strided):
            raise TypeError("slot needs a Strided layout")
        return self.layout.slot(positions)

    def is_padding(self, positions: torch.Tensor) -> torch.Tensor:
        """Whether each position repeats an earlier sample (it lies past ``dataset_size``)."""
        return positions >= self.sizes.dataset_size


def _check_bounds(start: int, stop: int | None) -> None:
    if start < 0 or (stop is not None and stop < 0):
        raise ValueError(f"start and stop must be at least 0, got start={start}, stop={stop}")


def rank_positions(
    total_size: int, world_size: int, rank: int, start: int = 0, stop: int | None = None
) -> torch.Tensor:
    """Positions of the stock padded/trimmed order that ``rank`` receives, in order.

    Rank ``rank`` receives positions ``rank, rank + W, ...`` below ``total_size``;
    ``start``/``stop`` (non-negative) select ``[start:stop]`` of that sequence.
    """
    _check_bounds(start, stop)
    return Strided(total_size, world_size, 0, total_size).positions(rank, start, stop)


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
    For any layout and tail, in dataset order, see :func:`samplers.unshard`.
    """
    if dataset_size < 0:
        raise ValueError(f"dataset_size must be at least 0, got {dataset_size}")
    return interleave(shares)[:dataset_size]
