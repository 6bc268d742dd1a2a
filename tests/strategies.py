"""Hypothesis strategies for sampler configurations, shared by the test modules."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedSampler, SamplerWarning

IMPLEMENTATIONS = {"torch": StockSampler, "samplers": DistributedSampler}


@dataclass(frozen=True)
class Config:
    """One sampler configuration: what a rank passes to the constructor, plus the epoch."""

    dataset_size: int
    world_size: int
    rank: int
    shuffle: bool
    seed: int
    drop_last: bool
    epoch: int

    def build(self, sampler_class: type[StockSampler] = DistributedSampler, **changes: Any):
        """A sampler of ``sampler_class`` for this configuration, ``set_epoch`` applied."""
        arguments = {
            "num_replicas": self.world_size,
            "rank": self.rank,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            **changes,
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SamplerWarning)  # ours warns on empty shards
            sampler = sampler_class(range(self.dataset_size), **arguments)
        sampler.set_epoch(self.epoch)
        return sampler

    def for_rank(self, rank: int) -> Config:
        return Config(
            self.dataset_size,
            self.world_size,
            rank,
            self.shuffle,
            self.seed,
            self.drop_last,
            self.epoch,
        )


def dataset_sizes(max_size: int = 10_000) -> st.SearchStrategy[int]:
    """Sizes biased towards the interesting small ones (0, fewer than the ranks, odd)."""
    return st.one_of(st.integers(0, 130), st.integers(0, max_size))


seeds = st.one_of(st.integers(0, 1000), st.integers(0, 2**63 - 1))


@st.composite
def configs(draw: st.DrawFn, max_size: int = 10_000, max_world: int = 64) -> Config:
    world_size = draw(st.integers(1, max_world))
    return Config(
        dataset_size=draw(dataset_sizes(max_size)),
        world_size=world_size,
        rank=draw(st.integers(0, world_size - 1)),
        shuffle=draw(st.booleans()),
        seed=draw(seeds),
        drop_last=draw(st.booleans()),
        epoch=draw(st.integers(0, 10**6)),
    )
