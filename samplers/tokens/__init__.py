"""Batches of variable-length samples under a token budget.

* :mod:`samplers.tokens.order`: :class:`TokenOrder`, an epoch's order cut into batches
  under the budget (windows sorted by length), the same on every world size;
* :mod:`samplers.tokens.layout`: :class:`TokenLayout`, those batches dealt one per rank per
  step, planned lazily;
* :mod:`samplers.tokens.sampler`: :class:`DistributedTokenBatchSampler`, the sampler over
  both (hooks of :mod:`samplers.core` only);
* :mod:`samplers.tokens.packing`: :class:`PackedOrder`, windows packed best-fit
  decreasing into rows of ``max_length``, rows into batches;
* :mod:`samplers.tokens.packed`: :class:`DistributedPackedBatchSampler`, the sampler
  over it and :class:`TokenLayout`;
* :mod:`samplers.tokens.collate`: :func:`packed_collate`, a packed batch as
  ``input_ids``, ``position_ids`` and ``cu_seqlens``;
* :mod:`samplers.tokens.cost`: :class:`TokenCost`, the cost models of a batch;
* :mod:`samplers.tokens.checks`: its argument checks.
"""

from samplers.tokens.collate import packed_collate
from samplers.tokens.cost import TokenCost
from samplers.tokens.layout import TokenLayout
from samplers.tokens.order import TokenOrder
from samplers.tokens.packed import DistributedPackedBatchSampler
from samplers.tokens.packing import PackedOrder
from samplers.tokens.sampler import DistributedTokenBatchSampler

__all__ = [
    "DistributedPackedBatchSampler",
    "DistributedTokenBatchSampler",
    "PackedOrder",
    "TokenCost",
    "TokenLayout",
    "TokenOrder",
    "packed_collate",
]
