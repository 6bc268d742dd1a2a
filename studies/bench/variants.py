"""What the benchmark measures: the samplers and the bare permutations, side by side.

Guarantee: every variant is built for the same dataset size, world size, rank and seed,
and draws its epoch order from a ``torch.Generator`` seeded with ``seed + epoch`` (the
stock sampler's rule), so their costs are compared on the same permutation.

The variants:

``stock``
    ``torch.utils.data.distributed.DistributedSampler``.
``ours``
    ``samplers.DistributedSampler`` in identical-output mode (its default).
``randperm int64`` and ``randperm int32``
    The floor: only ``torch.randperm(N, generator=g)`` (``dtype=torch.int32`` for the
    second), drawn at ``iter()`` as the samplers draw theirs; iterating then yields the
    rank's positions ``rank, rank + W, ...`` of it as Python ints, a chunk at a time,
    without padding. ``randperm int64`` is *the floor* the ratios divide by.
``feistel``
    ``samplers.DistributedSampler(..., permutation="feistel")``. Where that argument is
    not (yet) accepted, building it raises and the benchmark reports the error.

:func:`estimated_bytes` is what a variant is expected to hold at its peak, computed
from the sizes alone, so that a size that cannot fit the machine is skipped rather than
attempted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler

__all__ = [
    "EPOCH",
    "FLOOR",
    "REFERENCE",
    "SEED",
    "VARIANTS",
    "BarePermutation",
    "Variant",
    "estimated_bytes",
    "variant",
]

#: The sampler seed and epoch every variant uses (its generator is seeded with their sum).
SEED = 0
EPOCH = 0

#: How many positions the bare permutations turn into Python ints at a time.
_CHUNK = 1 << 16

#: Bytes per sample the stock sampler holds at its peak: the int64 permutation (8), then
#: ``tolist()``: a list slot (8) and an int object in a 32-byte block (32) per sample.
_STOCK_BYTES_PER_SAMPLE = 8 + 8 + 32


class BarePermutation:
    """Iterates the rank's strided positions of ``torch.randperm(N)``; nothing else.

    Guarantee: ``iter()`` draws ``torch.randperm(N, generator=g, dtype=dtype)`` with ``g``
    seeded ``seed + epoch``, as the stock sampler does; the iterator yields positions
    ``rank, rank + W, ...`` of that permutation as Python ints, at most 65,536 converted
    at a time, and holds nothing else. It does not pad, so it yields ``ceil((N - rank) /
    W)`` indices, one fewer than a padded sampler on some ranks.
    """

    def __init__(
        self, dataset: Sized, world_size: int, rank: int, seed: int, dtype: torch.dtype
    ) -> None:
        self.dataset_size = len(dataset)
        self.world_size = world_size
        self.rank = rank
        self.seed = seed
        self.epoch = EPOCH
        self.dtype = dtype

    def __len__(self) -> int:
        return len(range(self.rank, self.dataset_size, self.world_size))

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.dataset_size, generator=generator, dtype=self.dtype)
        return self._share(order)

    def _share(self, order: torch.Tensor) -> Iterator[int]:
        step = self.world_size * _CHUNK
        for start in range(self.rank, self.dataset_size, step):
            yield from order[start : start + step : self.world_size].tolist()


@dataclass(frozen=True)
class Variant:
    """One thing to measure: a name, how to build it, and its peak bytes per sample."""

    name: str
    build: Callable[[Sized, int, int, int], Any]
    #: Expected peak bytes held per dataset sample (0: bounded, independent of N).
    bytes_per_sample: int


def _stock(dataset: Sized, world_size: int, rank: int, seed: int) -> Any:
    return StockDistributedSampler(
        dataset,  # type: ignore[arg-type]
        num_replicas=world_size,
        rank=rank,
        seed=seed,
    )


def _ours(dataset: Sized, world_size: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)


def _randperm_int64(dataset: Sized, world_size: int, rank: int, seed: int) -> Any:
    return BarePermutation(dataset, world_size, rank, seed, torch.int64)


def _randperm_int32(dataset: Sized, world_size: int, rank: int, seed: int) -> Any:
    return BarePermutation(dataset, world_size, rank, seed, torch.int32)


def _feistel(dataset: Sized, world_size: int, rank: int, seed: int) -> Any:
    return DistributedSampler(  # type: ignore[call-arg]
        dataset, num_replicas=world_size, rank=rank, seed=seed, permutation="feistel"
    )


#: Every variant, in the order the tables list them.
VARIANTS: tuple[Variant, ...] = (
    Variant("stock", _stock, _STOCK_BYTES_PER_SAMPLE),
    Variant("ours", _ours, 8),
    Variant("randperm int64", _randperm_int64, 8),
    Variant("randperm int32", _randperm_int32, 4),
    Variant("feistel", _feistel, 0),
)

#: The variant every ratio "/ stock" divides by.
REFERENCE = "stock"
#: The variant every ratio "/ floor" divides by.
FLOOR = "randperm int64"


def variant(name: str) -> Variant:
    """The variant called ``name``; ``KeyError`` naming the known ones otherwise."""
    for candidate in VARIANTS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"variant must be one of {[v.name for v in VARIANTS]}, got {name!r}")


def estimated_bytes(name: str, dataset_size: int) -> int:
    """Bytes the variant is expected to hold at its peak for ``dataset_size`` samples."""
    return variant(name).bytes_per_sample * dataset_size
