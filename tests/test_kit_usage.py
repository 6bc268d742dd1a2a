"""The guarantees around the loop (``samplers.testing.usage``) hold for each of our samplers.

``tests/test_kit.py`` checks that the kit finds a deliberately wrong sampler for each; here
every sampler of ours is run through each check on configurations with uneven shares,
batches and resumed epochs.
"""

from __future__ import annotations

from typing import Any

import kit_samplers
import pytest
import torch
from torch.utils.data import RandomSampler

from samplers import DistributedBatchSampler, DistributedSamplerWrapper
from samplers import testing as kit

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def batches(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    return DistributedBatchSampler(
        dataset, batch_size, num_replicas, rank, seed=seed, tail="uneven", auto_epoch=True
    )


def wrapper(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    inner = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DistributedSamplerWrapper(inner, num_replicas, rank, seed=seed, auto_epoch=True)


FACTORIES = {
    "sampler": kit_samplers.ours_uneven,
    "sampler-auto": kit_samplers.ours_auto_epoch,
    "batch": batches,
    "wrapper": wrapper,
    "tokens": kit_samplers.ours_tokens,
}
CONFIGURATIONS = [
    kit.Configuration(dataset_size=23, world_size=4, batch_size=3, taken=4, epoch=1),
    kit.Configuration(dataset_size=50, world_size=3, batch_size=4, taken=9, seed=7),
]
FAST = ("state-read-concurrently", "second-iterator", "bool-like-attributes")


@pytest.mark.parametrize("configuration", CONFIGURATIONS, ids=["23-over-4", "50-over-3"])
@pytest.mark.parametrize("guarantee", FAST)
@pytest.mark.parametrize("name", list(FACTORIES))
def test_our_samplers_hold_the_guarantees_around_the_loop(
    name: str, guarantee: str, configuration: kit.Configuration
) -> None:
    try:
        kit.CHECKS[guarantee](FACTORIES[name], configuration)
    except kit.Unsupported:
        assert guarantee == "bool-like-attributes" and name == "wrapper"  # no bool to write


@pytest.mark.parametrize("name", ["batch", "wrapper", "tokens"])
def test_our_samplers_resume_epochs_through_a_loader_with_workers(name: str) -> None:
    kit.loader_epochs(FACTORIES[name], CONFIGURATIONS[0])
