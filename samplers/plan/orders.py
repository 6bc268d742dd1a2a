"""Epoch orders: position ``p`` in ``[0, N)`` -> dataset index, one epoch's permutation.

Guarantee: each order is a pure function of its settings; ``at(positions)`` gives the same
indices however the positions are split into calls, and a pickled order carries only its
settings (a drawn permutation is drawn again when needed).

* :class:`IdentityOrder`: position ``p`` holds index ``p`` (no shuffling).
* :class:`RandpermOrder`: the stock sampler's permutation, ``torch.randperm(N)`` drawn from
  a CPU generator seeded with ``seed + epoch``; held whole once drawn.
* :class:`FeistelOrder`: a keyed bijection computed position by position
  (:mod:`samplers.feistel`): O(1) memory at any ``N``; held only when a caller takes
  most of a small order (4 MB at most), where that costs less.
* :class:`StreamOrder`: a given sequence (the stream of a wrapped sampler), held whole.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from samplers import checks
from samplers.feistel import FeistelPermutation
from samplers.options import Permutation

__all__ = [
    "FeistelOrder",
    "IdentityOrder",
    "Order",
    "RandpermOrder",
    "StreamOrder",
    "make_order",
]


class Order(ABC):
    """One epoch's order over ``[0, size)``."""

    #: Whether :meth:`at` evaluates a large call a block at a time itself (below torch's
    #: intra-op threshold) and costs less per position in fewer, larger calls: the
    #: iterators then compute its chunks in large pieces.
    blockwise = False
    #: How many positions an iterator computes first (``None``: the iterator's default),
    #: for an order whose first positions cost more than the next ones.
    first_chunk: int | None = None
    #: Whether each dataset index of ``[0, size)`` is at exactly one position (a
    #: permutation). A stream (a wrapped sampler's, a mixture's) may repeat or skip
    #: indices: results over it are kept per position (:func:`samplers.unshard`).
    permutes = True

    @property
    @abstractmethod
    def size(self) -> int:
        """The number of positions (the dataset's length)."""

    @abstractmethod
    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Dataset indices (int64) at ``positions`` (int64, each in ``[0, size)``)."""

    def held(self, taking: int | None = None) -> torch.Tensor | None:
        """The whole order as it is held in memory (drawn now if needed), or ``None`` for
        an order computed position by position. Its dtype may be narrower than int64.

        ``taking``: how many of its positions the caller is about to take. An order
        computed position by position may then hold itself, where computing the whole
        order costs less than computing those positions one chunk at a time."""
        return None

    def between(self, lo: int, hi: int, *, narrow: bool = False) -> torch.Tensor:
        """Dataset indices (int64) at positions ``[lo, hi)`` (``0 <= lo <= hi <= size``);
        with ``narrow``, in whichever of int32 and int64 the order computes them in
        (int32 only below ``2**31``), for a caller that reads them rather than keeps them."""
        return self.at(torch.arange(lo, hi, dtype=torch.int64))

    def materialise(self) -> torch.Tensor:
        """The whole order, ``size`` int64 indices."""
        return self.between(0, self.size)


@dataclass(frozen=True)
class IdentityOrder(Order):
    """No shuffling: position ``p`` holds index ``p``. Never materialised."""

    length: int

    @property
    def size(self) -> int:
        return self.length

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return positions


@dataclass(frozen=True, eq=False)
class StreamOrder(Order):
    """A given order (e.g. the stream of a wrapped sampler), held as int64."""

    permutes = False

    indices: torch.Tensor

    @property
    def size(self) -> int:
        return self.indices.numel()

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.indices[positions]

    def held(self, taking: int | None = None) -> torch.Tensor:
        return self.indices

    def materialise(self) -> torch.Tensor:
        return self.indices


@dataclass(frozen=True)
class RandpermOrder(Order):
    """The stock sampler's permutation: ``torch.randperm(size)`` seeded with ``seed + epoch``.

    Drawn on first use. Below 2**31 samples it is held as int32: the CPU ``randperm`` gives
    the same permutation in int32 as in int64 (``tests/test_randperm_int32.py`` checks it
    at the sizes where its algorithm could differ), in half the memory and a third of the
    time. ``manual_seed`` accepts ``[-2**63, 2**64 - 1]``; the error for a key outside
    names seed and epoch.
    """

    length: int
    seed: int
    epoch: int

    @property
    def size(self) -> int:
        return self.length

    @cached_property
    def table(self) -> torch.Tensor:
        """The permutation itself (int32 below 2**31 samples, else int64)."""
        generator = torch.Generator()
        generator.manual_seed(checks.checked_key(self.seed, self.epoch))
        dtype = torch.int32 if self.length < 2**31 else torch.int64
        return torch.randperm(self.length, generator=generator, dtype=dtype)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions].long()

    def held(self, taking: int | None = None) -> torch.Tensor:
        return self.table

    def materialise(self) -> torch.Tensor:
        return self.table.long()

    def __getstate__(self) -> dict[str, Any]:
        # A pickled order carries its settings, not a drawn permutation of N indices.
        return {name: getattr(self, name) for name in ("length", "seed", "epoch")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass(frozen=True)
class FeistelOrder(Order):
    """A keyed bijection of ``[0, size)`` from ``(seed, epoch)``, evaluated on demand.

    Specified exactly in :mod:`samplers.feistel` (the same order on every platform and
    torch version); nothing of size ``N`` is built, so a rank computes only the
    positions it takes, in chunks, and any position in O(1), except for a caller that
    takes most of a small order (:meth:`held`).
    """

    blockwise = True
    length: int
    seed: int
    epoch: int
    permutation: FeistelPermutation = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "permutation", FeistelPermutation(self.length, self.seed, self.epoch)
        )

    @property
    def size(self) -> int:
        return self.length

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.permutation(positions)

    def between(self, lo: int, hi: int, *, narrow: bool = False) -> torch.Tensor:
        return self.permutation.range(lo, hi, narrow=narrow)

    def held(self, taking: int | None = None) -> torch.Tensor | None:
        """Held (:meth:`FeistelPermutation.table`, int32) only for a caller taking at
        least half of a small domain (:meth:`FeistelPermutation.whole_pays`: at most
        ``2**WHOLE_BITS`` values, so 4 MB at most), which costs less than walking its
        chunks' cycles one by one; otherwise computed position by position."""
        if taking is None or not self.permutation.whole_pays(taking):
            return None
        return self.permutation.table()


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
    if checks.permutation(permutation) == "feistel":
        return FeistelOrder(size, seed, epoch)
    return RandpermOrder(size, seed, epoch)
