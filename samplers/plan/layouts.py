"""Layouts: which positions of the epoch order each rank takes, from a global start."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from samplers.options import TAILS, Tail
from samplers.plan.sizes import ShardSizes, ceil_div

__all__ = ["Batched", "Layout", "Strided"]


def _check_count(name: str, value: int, minimum: int = 0) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


#: Positions are int64 in the plans' tensors: a layout ends at most here.
POSITION_LIMIT = 2**63 - 1


def _check_stop(layout: Layout, batch_size: int = 1) -> None:
    """Refuse a layout whose positions int64 cannot hold (padding past ``N`` with a huge
    ``num_replicas``, say), naming the sizes, rather than wrap them."""
    if layout.stop > POSITION_LIMIT:
        batch = f", batch_size={batch_size}" if batch_size > 1 else ""
        raise ValueError(
            f"num_replicas={layout.world_size}{batch} over dataset_size="
            f"{layout.dataset_size} lays the epoch out to position {layout.stop}, past what "
            "int64 positions hold (2**63 - 1): use fewer replicas"
        )


def _share_range(lo: int, hi: int | None, count: int) -> tuple[int, int]:
    """Items ``[lo:hi]`` of a share of ``count`` items, as clamped bounds ``lo <= hi``."""
    if lo < 0 or (hi is not None and hi < 0):
        raise ValueError(f"lo and hi must be at least 0, got lo={lo}, hi={hi}")
    last = count if hi is None else min(hi, count)
    return min(lo, last), last


class Layout(ABC):
    """Which positions of the epoch each rank takes, as ``count(rank)`` items.

    An item is one position (index layouts) or a batch of positions (``batched``).
    """

    #: Whether an item is a batch of positions (else one position).
    batched: ClassVar[bool] = False

    dataset_size: int
    world_size: int
    start: int

    @property
    @abstractmethod
    def stop(self) -> int:
        """The global position where the layout ends (past ``N`` only with padding)."""

    @abstractmethod
    def count(self, rank: int) -> int:
        """How many items ``rank`` takes."""

    @abstractmethod
    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """The positions of ``rank``'s items ``[lo:hi]``, flat, int64, in the order taken."""

    @abstractmethod
    def position_after(self, steps: int) -> int:
        """The global position reached when every rank has taken ``steps`` items (or all
        of its share): the positions before it are exactly those handed out."""

    def batch_sizes(self, rank: int, lo: int = 0, hi: int | None = None) -> list[int]:
        """How many positions each of ``rank``'s items ``[lo:hi]`` holds."""
        lo, hi = _share_range(lo, hi, self.count(rank))
        return [1] * (hi - lo)

    def items(
        self, rank: int, lo: int = 0, hi: int | None = None
    ) -> tuple[torch.Tensor, list[int]]:
        """:meth:`positions` and :meth:`batch_sizes` of the same items, together."""
        return self.positions(rank, lo, hi), self.batch_sizes(rank, lo, hi)

    @property
    def remaining(self) -> int:
        """Positions of the order from ``start`` on: ``max(N - start, 0)``."""
        return max(self.dataset_size - self.start, 0)

    def all_positions(self) -> torch.Tensor:
        """Every position of the layout, in epoch order."""
        return torch.arange(self.start, self.stop, dtype=torch.int64)

    def counts(self) -> list[int]:
        """Every rank's :meth:`count` (O(world size): see :meth:`count_range`)."""
        return [self.count(rank) for rank in range(self.world_size)]

    def count_range(self) -> tuple[int, int]:
        """The fewest and the most items a rank takes, in O(1) of the world size: every
        layout gives lower ranks at least as many items as higher ones, so these are the
        last rank's and the first's."""
        return self.count(self.world_size - 1), self.count(0)


@dataclass(frozen=True)
class Strided(Layout):
    """Rank ``r`` takes the positions ``start + r + k * W`` below ``stop``, in order.

    With ``stop - start`` a multiple of ``W`` (tails ``"pad"`` and ``"drop"``) every
    rank takes the same number; otherwise (``"uneven"``) the first ``(stop - start) % W``
    ranks take one more.
    """

    dataset_size: int
    world_size: int
    start: int
    end: int

    def __post_init__(self) -> None:
        _check_count("dataset_size", self.dataset_size)
        _check_count("world_size", self.world_size, 1)
        _check_count("start", self.start)
        if self.end < self.start:
            raise ValueError(f"stop must be at least start={self.start}, got {self.end}")
        _check_stop(self)

    @property
    def stop(self) -> int:
        return self.end

    @classmethod
    def of(cls, dataset_size: int, world_size: int, tail: Tail, start: int = 0) -> Strided:
        """The layout of ``tail`` over the positions from ``start`` on: padded up to a
        multiple of ``W``, trimmed down to one, or ending at ``N``."""
        remaining = max(dataset_size - start, 0)
        if tail == "pad":
            stop = start + ceil_div(remaining, world_size) * world_size
        elif tail == "drop":
            stop = start + remaining // world_size * world_size
        elif tail == "uneven":
            stop = max(dataset_size, start)
        else:
            raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {tail!r}")
        return cls(dataset_size, world_size, start, stop)

    @classmethod
    def stock(cls, sizes: ShardSizes) -> Strided:
        """The stock sampler's layout for ``sizes`` (which may be overridden ones)."""
        return cls(sizes.dataset_size, sizes.world_size, 0, sizes.total_size)

    def count(self, rank: int) -> int:
        return max(ceil_div(self.end - self.start - rank, self.world_size), 0)

    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        lo, hi = _share_range(lo, hi, self.count(rank))
        first = self.start + rank
        step = self.world_size
        if hi <= lo:
            return torch.empty(0, dtype=torch.int64)
        # The stop just past the last position: ``first + hi * step`` may pass int64 where
        # every position fits (2**62 + 1 ranks).
        last = first + (hi - 1) * step
        return torch.arange(first + lo * step, last + 1, step, dtype=torch.int64)

    def below_size(self, rank: int) -> slice:
        """``rank``'s positions below ``N`` (not padding) as a slice of the epoch order;
        its remaining positions are ``positions(rank, lo=<that slice's length>)``."""
        size = self.dataset_size
        return slice(min(self.start + rank, size), min(self.end, size), self.world_size)

    def position_after(self, steps: int) -> int:
        return min(self.start + steps * self.world_size, self.end)

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank that takes each position."""
        return (positions - self.start) % self.world_size

    def slot(self, positions: torch.Tensor) -> torch.Tensor:
        """Where in its rank's share each position lands (0: the rank's first)."""
        return (positions - self.start) // self.world_size


@dataclass(frozen=True)
class Batched(Layout):
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

    batched: ClassVar[bool] = True

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
        if self.tail == "drop":
            steps = remaining // per_step
        else:
            steps = ceil_div(remaining, per_step)
        object.__setattr__(self, "steps", steps)
        _check_stop(self, self.batch_size)

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
        return self.step_start(self.steps)

    def count(self, rank: int) -> int:
        """How many batches ``rank`` takes: ``steps``, except for empty ones (see above)."""
        if self.tail != "uneven" or not self.batches or self.remaining >= self.batches:
            return self.steps
        # Fewer positions than batches (only with B = 1): batches numbered from R on
        # would be empty and are not handed out.
        return max(ceil_div(self.remaining - rank, self.world_size), 0)

    def bounds(self, step: int, rank: int) -> tuple[int, int]:
        """The global positions ``[lo, hi)`` of ``rank``'s batch at ``step``."""
        batch = step * self.world_size + rank
        return self.start + self._before(batch), self.start + self._before(batch + 1)

    def _starts_and_sizes(self, rank: int, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        batch = torch.arange(lo, hi, dtype=torch.int64) * self.world_size + rank
        if self.tail != "uneven":
            starts = batch * self.batch_size
            sizes = torch.full_like(batch, self.batch_size)
        else:
            base, extra = divmod(self.remaining, self.batches) if self.batches else (0, 0)
            starts = batch * base + batch.clamp(max=extra)
            sizes = base + (batch < extra).to(torch.int64)
        return self.start + starts, sizes

    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        lo, hi = _share_range(lo, hi, self.count(rank))
        starts, sizes = self._starts_and_sizes(rank, lo, hi)
        if sizes.numel() == 0:
            return torch.empty(0, dtype=torch.int64)
        # Every batch's positions as a row from its start, the widest batch wide; the
        # narrower batches (one shorter, with "uneven") leave out their last column.
        width = int(sizes.max())
        grid = starts.unsqueeze(1) + torch.arange(width, dtype=torch.int64)
        if int(sizes.min()) == width:
            return grid.reshape(-1)
        return grid[torch.arange(width).unsqueeze(0) < sizes.unsqueeze(1)]

    def batch_sizes(self, rank: int, lo: int = 0, hi: int | None = None) -> list[int]:
        lo, hi = _share_range(lo, hi, self.count(rank))
        sizes: list[int] = self._starts_and_sizes(rank, lo, hi)[1].tolist()
        return sizes

    def position_after(self, steps: int) -> int:
        return self.step_start(steps)
