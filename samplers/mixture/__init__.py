"""Dataset mixtures: several sources drawn by weight, exactly, resumably, reweightably.

:mod:`~samplers.mixture.schedule` (which source each stream position draws from),
:mod:`~samplers.mixture.order` (the epoch order over ``ConcatDataset(datasets)``),
:mod:`~samplers.mixture.sampler` (the two samplers),
:mod:`~samplers.mixture.tokens` (the mixture under a token budget, weights in tokens),
:mod:`~samplers.mixture.packed` (the mixture packed into rows, documents optionally cut
into pieces) and :mod:`~samplers.mixture.checks` (their argument checks).
"""

from samplers.mixture.order import MixtureOrder
from samplers.mixture.packed import DistributedPackedMixtureSampler
from samplers.mixture.sampler import DistributedMixtureBatchSampler, DistributedMixtureSampler
from samplers.mixture.schedule import Schedule, parts
from samplers.mixture.tokens import DistributedMixtureTokenBatchSampler

__all__ = [
    "DistributedMixtureBatchSampler",
    "DistributedMixtureSampler",
    "DistributedMixtureTokenBatchSampler",
    "DistributedPackedMixtureSampler",
    "MixtureOrder",
    "Schedule",
    "parts",
]
