"""The sharding arithmetic, once: an epoch is an *order* laid out over ranks by a *layout*.

Everything here is pure (no process group, no sampler state) and works on tensors, so the
samplers, the studies, ``unshard``, resume and the guarantee kit read the same answer from
the same code.

**Order** (:mod:`samplers.plan.orders`): position -> dataset index over ``[0, N)``, one
epoch's permutation: identity, the stock ``randperm``, a Feistel permutation computed
position by position, or a given stream.

**Layout**: which positions each rank receives, in what order or batches, beginning at a
global **start** position (0 for a fresh epoch; a resumed epoch starts where the ranks
stopped). A position ``p >= N`` is padding and holds the index at ``p % N``: padding reads
the epoch order again from its head. Every layout has the same interface
(:class:`Layout`): ``count(rank)`` items (indices, or batches), ``positions(rank, lo, hi)``
as one flat int64 tensor, and ``position_after(steps)``.

* :class:`Strided`: rank ``r`` takes positions ``start + r, start + r + W, ...`` below
  ``stop``. The stock sampler is ``Strided(start=0, stop=total_size)``: padded up to a
  multiple of ``W`` (tail ``"pad"``) or trimmed down to one (tail ``"drop"``); tail
  ``"uneven"`` stops at ``N``, so every sample is taken exactly once and shares differ
  in length by at most one.
* :class:`Batched`: one batch per rank per step; step ``k`` consumes a contiguous range
  of positions and rank ``r`` takes the ``r``-th block of it.

In both layouts the positions consumed after any number of steps, over all ranks, are a
prefix ``[start, position_after(steps))`` of the epoch's positions: progress is one number,
whatever the world size, which is what resume relies on. The layout from ``start = p`` of
the same settings hands out exactly what the layout from 0 hands out after position ``p``.

Sizes use integer arithmetic only: ``math.ceil(N / W)`` in floating point, as the stock
sampler computes it, is wrong once ``N`` exceeds 2**53.
"""

from samplers.options import PERMUTATIONS, TAILS, Permutation, Tail
from samplers.plan.epoch import EpochPlan, interleave, interleave_truncated, rank_positions
from samplers.plan.layouts import Batched, Layout, Strided
from samplers.plan.orders import (
    FeistelOrder,
    IdentityOrder,
    Order,
    RandpermOrder,
    StreamOrder,
    make_order,
)
from samplers.plan.sizes import ShardSizes, ceil_div

__all__ = [
    "PERMUTATIONS",
    "TAILS",
    "Batched",
    "EpochPlan",
    "FeistelOrder",
    "IdentityOrder",
    "Layout",
    "Order",
    "Permutation",
    "RandpermOrder",
    "ShardSizes",
    "StreamOrder",
    "Strided",
    "Tail",
    "ceil_div",
    "interleave",
    "interleave_truncated",
    "make_order",
    "rank_positions",
]
