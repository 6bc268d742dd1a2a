"""seed=None, check_consistent and gather_unsharded in real processes (3 gloo ranks)."""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed as dist

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    InconsistentRanksError,
    gather_unsharded,
)
from studies.engines.local_ranks import launch

WORLD_SIZE = 3
SIZE = 23


def _collectives(_: object) -> dict[str, Any]:
    """Rank work: every collective of the samplers, with its result on this rank."""
    rank = dist.get_rank()
    result: dict[str, Any] = {}
    agreed = DistributedSampler(range(SIZE), seed=None)
    result["seed"] = agreed.seed
    agreed.check_consistent()  # agrees: no error

    for name, sampler in (
        ("seed", DistributedSampler(range(SIZE), seed=rank)),
        ("dataset length", DistributedSampler(range(SIZE + (rank == 2)))),
        ("batch_size", DistributedBatchSampler(range(SIZE), 2 + (rank == 1))),
    ):
        try:
            sampler.check_consistent()
        except InconsistentRanksError as error:
            result[f"inconsistent {name}"] = str(error)
        else:
            result[f"inconsistent {name}"] = None

    exact = DistributedSampler(range(SIZE), seed=4, tail="uneven")
    local = [{"index": index, "score": index / 2} for index in exact]
    result["gathered everywhere"] = gather_unsharded(local, exact)
    result["gathered on rank 1"] = gather_unsharded(local, exact, dst=1)

    batched = DistributedBatchSampler(range(SIZE), 4, seed=None, tail="uneven")
    result["batch seed"] = batched.seed
    result["batches"] = len(batched)
    local = [index for batch in batched for index in batch]
    result["batch gathered"] = gather_unsharded(local, batched)

    wrapper = DistributedSamplerWrapper(DistributedSampler(range(SIZE), 1, 0), tail="uneven")
    result["wrapper gathered"] = gather_unsharded(list(wrapper), wrapper)
    result["wrapper stream"] = wrapper.stream().tolist()

    # Sampler ranks numbered against the processes': each part goes to its sampler's rank.
    reversed_ranks = DistributedSampler(range(SIZE), WORLD_SIZE, WORLD_SIZE - 1 - rank, seed=4)
    local = [("result of", index) for index in reversed_ranks]
    result["reversed ranks gathered"] = gather_unsharded(local, reversed_ranks)
    for name, sampler in (
        ("not the group", DistributedSampler(range(SIZE), 1, 0)),
        ("a rank twice", DistributedSampler(range(SIZE), WORLD_SIZE, min(rank, 1))),
    ):
        try:
            gather_unsharded(list(sampler), sampler)
        except ValueError as error:
            result[f"gathered over {name}"] = str(error)
    return result


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_agreed_seeds_consistency_checks_and_exact_gathering() -> None:
    results = launch(_collectives, None, WORLD_SIZE, timeout=120)
    assert len({result["seed"] for result in results}) == 1
    assert len({result["batch seed"] for result in results}) == 1
    assert len({result["batches"] for result in results}) == 1
    expected = {
        "inconsistent seed": "seed differs (ranks [0]: 0; ranks [1]: 1; ranks [2]: 2)",
        "inconsistent dataset length": "dataset length differs (ranks [0, 1]: 23; ranks [2]: 24)",
        "inconsistent batch_size": "batch_size differs (ranks [0, 2]: 2; ranks [1]: 3)",
    }
    exact = [{"index": index, "score": index / 2} for index in range(SIZE)]
    for rank, result in enumerate(results):
        for key, problem in expected.items():
            assert result[key] == f"the ranks' samplers disagree: {problem}", (rank, key)
        assert result["gathered everywhere"] == exact
        assert result["gathered on rank 1"] == (exact if rank == 1 else None)
        assert result["batch gathered"] == list(range(SIZE))
        # A wrapper's results come back in stream order: here the inner sampler's order.
        assert result["wrapper gathered"] == result["wrapper stream"]
        assert sorted(result["wrapper stream"]) == list(range(SIZE))
        assert result["reversed ranks gathered"] == [("result of", i) for i in range(SIZE)]
        assert result["gathered over not the group"] == (
            "group has 3 processes but the sampler shards over num_replicas=1: pass the group "
            "it shards over (its group=, or the data-parallel group, a DeviceMesh's "
            "mesh['dp'], say)"
        )
        assert result["gathered over a rank twice"].startswith(
            "group holds samplers of ranks [0, 1, 1], in the group's order; expected each of "
            "0..2 once"
        )
