"""The samplers' option vocabulary: tail policies and permutations, each named once."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["PERMUTATIONS", "TAILS", "Permutation", "Tail"]

#: What happens to the last ``N mod W`` samples (``N mod (W * B)`` for batches):
#: ``"pad"`` repeats the head of the epoch order, ``"drop"`` leaves the tail out,
#: ``"uneven"`` hands every sample out exactly once.
Tail = Literal["pad", "drop", "uneven"]
TAILS: tuple[Tail, ...] = get_args(Tail)

#: How a shuffled epoch order is drawn: ``"randperm"`` is the stock sampler's (the whole
#: order in memory); ``"feistel"`` computes any position on its own.
Permutation = Literal["randperm", "feistel"]
PERMUTATIONS: tuple[Permutation, ...] = get_args(Permutation)
