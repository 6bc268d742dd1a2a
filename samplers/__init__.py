"""Distributed samplers that say exactly what each rank receives.

* :class:`DistributedSampler`: a drop-in replacement for
  ``torch.utils.data.distributed.DistributedSampler`` (bit-identical by default), with
  ``tail="uneven"`` for exactly-once epochs;
* :class:`DistributedBatchSampler`: batch-aware sharding, the same number of batches on
  every rank for every tail policy;
* :class:`DistributedSamplerWrapper`: shards the stream of any sampler;
* :class:`DistributedTokenBatchSampler`: batches of variable-length samples under a token
  budget, the same number on every rank, with balanced work per step, under a cost model
  (:class:`TokenCost`: padded or summed, linear, quadratic or a named function; or
  :func:`fit_cost`: a :class:`FittedCost` fitted to measured step times);
* :class:`DistributedPackedBatchSampler`: samples packed whole into rows of at most
  ``max_length`` tokens (best-fit decreasing), batches of rows dealt like the token
  sampler's, documents longer than a row optionally cut into pieces (``split=``);
  :func:`packed_collate` turns a batch into ``input_ids``, ``position_ids`` and
  ``cu_seqlens``;
* :class:`DistributedMixtureSampler` / :class:`DistributedMixtureBatchSampler`: several
  datasets mixed by weight, exact at every prefix, each source once per pass, resumable
  on any world size and reweightable mid-run; :class:`DistributedMixtureTokenBatchSampler`:
  a mixture under a token budget, its weights counted in tokens;
  :class:`DistributedPackedMixtureSampler`: a mixture packed into rows, its weights in
  tokens or samples, long documents cut into pieces (``split=``), resumable on any world
  size and reweightable between phases of a curriculum;
* :func:`unshard` / :func:`gather_unsharded`: every sample's result exactly once, for
  exact distributed evaluation.

:mod:`samplers.plan` holds the sharding arithmetic every part of the project shares: an
epoch is an order laid out over ranks from a global start position. ``ARCHITECTURE.md``
maps the modules on one screen.
"""

from samplers.batch_sampler import DistributedBatchSampler
from samplers.checks import EpochTypeError, SamplerWarning, SeedTypeError
from samplers.consistency import InconsistentRanksError, RankFailedError
from samplers.gather import gather_unsharded, unshard
from samplers.mixture import (
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedMixtureSampler,
)
from samplers.plan import EpochPlan, ShardSizes
from samplers.sampler import DistributedSampler
from samplers.tokens.collate import packed_collate
from samplers.tokens.cost import TokenCost
from samplers.tokens.fit import FittedCost, HeldOutCheck, fit_cost
from samplers.tokens.packed import DistributedPackedBatchSampler
from samplers.tokens.sampler import DistributedTokenBatchSampler
from samplers.wrapper import DistributedSamplerWrapper

__all__ = [
    "DistributedBatchSampler",
    "DistributedMixtureBatchSampler",
    "DistributedMixtureSampler",
    "DistributedMixtureTokenBatchSampler",
    "DistributedPackedBatchSampler",
    "DistributedPackedMixtureSampler",
    "DistributedSampler",
    "DistributedSamplerWrapper",
    "DistributedTokenBatchSampler",
    "EpochPlan",
    "EpochTypeError",
    "FittedCost",
    "HeldOutCheck",
    "InconsistentRanksError",
    "RankFailedError",
    "SamplerWarning",
    "SeedTypeError",
    "ShardSizes",
    "TokenCost",
    "fit_cost",
    "gather_unsharded",
    "packed_collate",
    "unshard",
]
