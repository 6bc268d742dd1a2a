"""Each source's passes: a keyed permutation per ``(source, pass)``, evaluated for many
sources and passes in one tensor computation.

Guarantee: :meth:`Passes.items` maps ``(source, pass, item)`` to the item's sample in
that pass, a pure function of ``(seed, source's size, source, pass, item)``: for every
source and pass, ``item -> sample`` is a bijection of ``[0, size)``, so within a pass no
sample repeats. How the items of a chunk are grouped (which sources and passes share a
call, in what order) never changes a value, and a call costs O(1) tensor operations per
item, whatever the number of sources or passes it touches: no Python work per source or
per pass, and nothing held beyond one table of keys per source.

The permutation is the Feistel network of :mod:`samplers.feistel` (its round function
``F``, eight rounds, the halves' widths, cycle-walking), with its round keys derived per
pass in 32-bit arithmetic, so they too are tensors: with ``K[0..7]`` the round keys of
the source's key (:func:`samplers.feistel.round_keys` of ``(source_seed, 0)``) and the
pass ``q`` split into 32-bit halves ``lo, hi``, the pass words are
``m0 = F(K[0], F(K[1], lo) ^ hi)`` (distinct for distinct passes below ``2**32``) and
``m1 = F(K[2], m0)``, and round ``r`` is keyed by ``K[r] ^ m(r mod 2)`` (the pass is a
tweak of the source's key, as in tweakable block ciphers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch

from samplers.feistel import ROUNDS, _mix64, _round_function, round_keys

__all__ = ["Passes", "source_seed"]

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


def _mix(key: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``F(key, x)`` elementwise, for a tensor of keys: the round function's code serves a
    key tensor unchanged (``x ^ key`` and then operations on that tensor alone)."""
    return _round_function(cast(Any, key), x)


def source_seed(seed: int, source: int) -> int:
    """The 64-bit key of ``source``'s passes under ``seed`` (distinct per source)."""
    return _mix64((_mix64(seed & _MASK64) ^ (source + 1) * 0x9E3779B97F4A7C15) & _MASK64)


def _widths(size: int) -> tuple[int, int]:
    """The high and low halves' widths of the network over ``[0, size)``."""
    bits = (size - 1).bit_length() if size > 1 else 0
    return bits - bits // 2, bits // 2


class Passes:
    """The passes of sources of ``sizes`` under ``seed`` (see the module docstring)."""

    def __init__(self, sizes: Sequence[int], seed: int) -> None:
        self.sizes = torch.tensor(list(sizes), dtype=torch.int64)
        keys = [round_keys(source_seed(seed, d), 0) for d in range(len(sizes))]
        # One tensor per round (a gather of a chunk stays one element per position).
        self.keys = [torch.tensor([k[r] for k in keys], dtype=torch.int64) for r in range(ROUNDS)]
        widths = [_widths(size) for size in sizes]
        self.high = torch.tensor([a for a, _ in widths], dtype=torch.int64)
        self.low = torch.tensor([b for _, b in widths], dtype=torch.int64)

    def items(self, source: torch.Tensor, passes: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """The sample at ``item`` of pass ``passes`` of ``source`` (int64 tensors, one
        value per element; ``0 <= item < size``)."""
        keys = [k.index_select(0, source) for k in self.keys]
        low = passes & _MASK32
        high = (passes >> 32) & _MASK32
        word = _mix(keys[0], _mix(keys[1], low) ^ high)
        words = word, _mix(keys[2], word)
        round_keys_ = [k ^ words[r % 2] for r, k in enumerate(keys)]
        halves = self.high.index_select(0, source), self.low.index_select(0, source)
        size = self.sizes.index_select(0, source)
        result = self._network(item, round_keys_, *halves)
        # Cycle-walking: the values outside ``[0, size)`` step again, as their own subset
        # (measured faster than stepping the whole tensor while many walk).
        walking = (result >= size).nonzero()[:, 0]
        count = walking.numel()
        while count:
            keys_now = [k.index_select(0, walking) for k in round_keys_]
            high_now, low_now = (h.index_select(0, walking) for h in halves)
            value = self._network(result.index_select(0, walking), keys_now, high_now, low_now)
            result.index_copy_(0, walking, value)
            walking = walking.index_select(
                0, (value >= size.index_select(0, walking)).nonzero()[:, 0]
            )
            count = walking.numel()
        return result

    @staticmethod
    def _network(
        x: torch.Tensor, keys: list[torch.Tensor], high: torch.Tensor, low: torch.Tensor
    ) -> torch.Tensor:
        """The eight rounds on ``[0, 2**(high + low))``, per element widths and keys."""
        one = torch.ones_like(high)
        left_mask = (one << high) - 1
        right_mask = (one << low) - 1
        left = x >> low
        right = x & right_mask
        for key in keys:
            mixed = _mix(key, right) & left_mask
            left, right = right, left ^ mixed
            left_mask, right_mask = right_mask, left_mask
        return (left << low) | right
