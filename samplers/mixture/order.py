"""The mixture's epoch order: position -> (source, its draw) -> its pass -> a ConcatDataset index.

Guarantee: :class:`MixtureOrder` is an :class:`~samplers.plan.Order` over one epoch's
window ``[epoch * length, (epoch + 1) * length)`` of the stream, a pure function of its
settings. Position ``p`` of the stream draws from the source the
:class:`~samplers.mixture.schedule.Schedule` says, and that source's ``j``-th draw is
item ``j mod n_d`` of its pass ``j // n_d``: each pass is a permutation of the source's
``n_d`` samples seeded from ``(seed, source, pass)``, so within a pass no sample repeats,
and a source that runs out starts its next pass. The index returned is the sample's
index in ``ConcatDataset(datasets)`` (the source's offset plus its index in the source).
Any position costs O(1) tensor operations; a chunk of positions costs its own length plus
the passes it touches (whole passes only for sources of at most :data:`SMALL` samples).

Passes: a source of more than :data:`SMALL` samples uses
:class:`~samplers.feistel.FeistelPermutation` keyed by the source's seed and the pass
(O(1) memory); a smaller one is ordered by a keyed hash of each sample (the Feistel
round function), all passes a chunk touches at once. Without shuffling a pass is
``0, 1, ..., n_d - 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from samplers.feistel import FeistelPermutation, _mix64, _round_function, round_keys
from samplers.mixture.schedule import Schedule
from samplers.plan import Order

__all__ = ["FEW", "SMALL", "MixtureOrder", "source_seed"]

#: Sources of at most this many samples order their passes by a keyed hash (see above).
SMALL = 1 << 14
#: A pass of a larger source evaluated at this many items or fewer is evaluated in pure
#: Python (``FeistelPermutation.at``, the same values), which costs less than the tensor
#: path's fixed cost per call.
FEW = 32
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1


def source_seed(seed: int, source: int) -> int:
    """The 64-bit key of ``source``'s passes under ``seed`` (distinct per source)."""
    return _mix64((_mix64(seed & _MASK64) ^ (source + 1) * 0x9E3779B97F4A7C15) & _MASK64)


def small_passes(size: int, key: int, passes: torch.Tensor) -> torch.Tensor:
    """Each of ``passes``' permutation of ``[0, size)``, one row each: the samples
    sorted by a 62-bit hash keyed by ``key`` and the pass (ties in sample order)."""
    first, second = round_keys(key, 0)[:2]
    low = passes & _MASK32
    high = (passes >> 32) & _MASK32
    pass_key = _round_function(first, _round_function(second, low) ^ high)
    samples = torch.arange(size, dtype=torch.int64).unsqueeze(0)
    upper = _round_function(0, samples ^ pass_key.unsqueeze(1))
    lower = _round_function(first, upper ^ samples ^ (pass_key.unsqueeze(1) >> 1))
    hashed = (upper << 30) | (lower >> 2)
    return torch.argsort(hashed, dim=1, stable=True)


@dataclass(frozen=True)
class MixtureOrder(Order):
    """Epoch ``epoch`` of the stream (``length`` positions from ``epoch * length``)."""

    sizes: tuple[int, ...]
    schedule: Schedule
    seed: int
    shuffle: bool
    epoch: int
    length: int
    offsets: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ends = torch.tensor(self.sizes, dtype=torch.int64).cumsum(0)
        object.__setattr__(self, "offsets", ends - torch.tensor(self.sizes, dtype=torch.int64))

    @property
    def size(self) -> int:
        return self.length

    @property
    def first(self) -> int:
        """The stream position of the epoch's position 0."""
        return self.epoch * self.length

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.stream_at(positions + self.first)

    def stream_at(self, positions: torch.Tensor) -> torch.Tensor:
        """ConcatDataset indices at stream positions."""
        source, drawn = self.schedule.locate(positions)
        return self.offsets[source] + self.within(source, drawn)

    def passes(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(source, pass, item of the pass) at stream positions."""
        source, drawn = self.schedule.locate(positions)
        sizes = torch.tensor(self.sizes, dtype=torch.int64)[source]
        return source, torch.div(drawn, sizes, rounding_mode="floor"), drawn % sizes

    def within(self, source: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
        """The index within its source of each source's ``drawn``-th draw."""
        result = torch.empty_like(drawn)
        for d in torch.unique(source).tolist():
            mask = source == d
            size = self.sizes[d]
            draws = drawn[mask]
            pass_number = torch.div(draws, size, rounding_mode="floor")
            item = draws - pass_number * size
            if not self.shuffle or size <= 1:
                result[mask] = item
                continue
            key = source_seed(self.seed, d)
            unique, inverse = torch.unique(pass_number, return_inverse=True)
            if size <= SMALL:
                result[mask] = small_passes(size, key, unique)[inverse, item]
                continue
            permuted = torch.empty_like(item)
            for i, number in enumerate(unique.tolist()):
                chosen = inverse == i
                permutation = FeistelPermutation(size, key, number)
                items = item[chosen]
                if items.numel() <= FEW:  # pure Python costs less than tensor passes
                    values = [permutation.at(int(j)) for j in items.tolist()]
                    permuted[chosen] = torch.tensor(values, dtype=torch.int64)
                else:
                    permuted[chosen] = permutation(items)
            result[mask] = permuted
        return result


def concat_offsets(sizes: Sequence[int]) -> list[int]:
    """Where each source begins in ``ConcatDataset``."""
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += size
    return offsets
