"""Distributed samplers that say exactly what each rank receives.

:class:`DistributedSampler` is a drop-in replacement for
``torch.utils.data.distributed.DistributedSampler``; :mod:`samplers.plan` holds the
sharding arithmetic every part of the project shares.
"""

from samplers.checks import EpochTypeError, SeedTypeError
from samplers.plan import EpochPlan, ShardSizes
from samplers.sampler import DistributedSampler

__all__ = ["DistributedSampler", "EpochPlan", "EpochTypeError", "SeedTypeError", "ShardSizes"]
