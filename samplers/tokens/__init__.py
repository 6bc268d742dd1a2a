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
* :mod:`samplers.tokens.pieces`: :class:`Pieces`, documents cut into pieces of at most
  a row (``split=``), and :class:`PieceDataset`, the dataset of pieces;
* :mod:`samplers.tokens.collate`: :func:`packed_collate`, a packed batch as
  ``input_ids``, ``position_ids`` and ``cu_seqlens``;
* :mod:`samplers.tokens.cost`: :class:`TokenCost`, the cost models of a batch;
* :mod:`samplers.tokens.fit`: :func:`fit_cost`, a :class:`FittedCost` fitted to measured
  step times, usable as the cost (:class:`FittedTokenCost`);
* :mod:`samplers.tokens.checks`: its argument checks.
"""

from samplers.tokens.collate import packed_collate
from samplers.tokens.cost import TokenCost
from samplers.tokens.fit import FittedCost, FittedTokenCost, HeldOutCheck, fit_cost
from samplers.tokens.layout import TokenLayout
from samplers.tokens.order import TokenOrder
from samplers.tokens.packed import DistributedPackedBatchSampler
from samplers.tokens.packing import PackedOrder
from samplers.tokens.pieces import PieceDataset, Pieces
from samplers.tokens.sampler import DistributedTokenBatchSampler

__all__ = [
    "DistributedPackedBatchSampler",
    "DistributedTokenBatchSampler",
    "FittedCost",
    "FittedTokenCost",
    "HeldOutCheck",
    "PackedOrder",
    "PieceDataset",
    "Pieces",
    "TokenCost",
    "TokenLayout",
    "TokenOrder",
    "fit_cost",
    "packed_collate",
]
