"""DistributedTokenBatchSampler in real processes: a per-step all-reduce never waits forever.

Three gloo ranks train on token-budgeted batches through a DataLoader with one all-reduce
per batch (as DDP does), for every tail policy, save a checkpoint part-way, and two ranks
resume it with the same per-step all-reduce. A rank with fewer batches would leave the
others waiting in that all-reduce: the launch's timeout turns that into a failure.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from samplers import DistributedTokenBatchSampler
from studies.engines.local_ranks import launch

SIZE = 600
MAX_TOKENS = 2048
SAVED_AFTER = 7
TAILS = ("uneven", "pad", "drop")


def lengths() -> list[int]:
    """Lognormal lengths, a few of them longer than the budget."""
    generator = torch.Generator().manual_seed(11)
    values = torch.exp(torch.randn(SIZE, generator=generator) * 0.9 + 5).long() + 1
    return values.tolist()


def _train(states: dict[str, Any] | None) -> dict[str, Any]:
    """Rank work: one epoch per tail (the rest of it, given saved states)."""
    values = lengths()
    result: dict[str, Any] = {}
    for tail in TAILS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the over-budget samples
            sampler = DistributedTokenBatchSampler(values, MAX_TOKENS, seed=3, tail=tail)
        sampler.check_consistent()
        if states is not None:
            sampler.load_state_dict(states[tail])
        sampler.set_epoch(2)
        loader = DataLoader(range(SIZE), batch_sampler=sampler)
        batches, state = [], None
        for step, batch in enumerate(loader):
            work = torch.tensor([float(max(values[i] for i in batch) * len(batch))])
            dist.all_reduce(work, op=dist.ReduceOp.MAX)  # the gradient all-reduce
            batches.append(batch.tolist())
            if step + 1 == SAVED_AFTER:
                state = sampler.state_dict()
        done = torch.tensor([1.0])
        dist.all_reduce(done)  # every rank got here
        result[tail] = {"batches": batches, "state": state, "done": float(done)}
    return result


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_per_step_all_reduce_never_hangs_and_resumes_on_fewer_ranks() -> None:
    first = launch(_train, None, 3, timeout=120)
    states = {tail: first[0][tail]["state"] for tail in TAILS}
    for tail in TAILS:
        assert len({len(rank[tail]["batches"]) for rank in first}) == 1, tail
        assert all(rank[tail]["done"] == 3 for rank in first)
        assert all(rank[tail]["state"] == states[tail] for rank in first), tail
        seen = Counter(i for rank in first for batch in rank[tail]["batches"] for i in batch)
        if tail == "uneven":
            assert seen == Counter(range(SIZE))
    resumed = launch(_train, states, 2, timeout=120)
    for tail in TAILS:
        assert len({len(rank[tail]["batches"]) for rank in resumed}) == 1, tail
        assert all(rank[tail]["done"] == 2 for rank in resumed)
        before = [b for rank in first for b in rank[tail]["batches"][:SAVED_AFTER]]
        after = [b for rank in resumed for b in rank[tail]["batches"]]
        seen = Counter(i for batch in before + after for i in batch)
        if tail == "uneven":
            assert seen == Counter(range(SIZE))
        elif tail == "drop":
            assert max(seen.values()) == 1
        else:
            assert set(seen) == set(range(SIZE))
