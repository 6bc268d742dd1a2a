"""A factory whose sampler raises on part of the configurations (for tests/test_kit.py)."""

from __future__ import annotations

from typing import Any

from samplers import DistributedSampler


def crashing(dataset: Any, num_replicas: int, rank: int, seed: int) -> DistributedSampler[int]:
    """Refuses every dataset that the world size does not divide."""
    if len(dataset) % num_replicas:
        raise RuntimeError("refused")
    return DistributedSampler(dataset, num_replicas, rank, seed=seed)
