"""Checkpoint on 4 gloo ranks mid-epoch, resume on 3 from one rank's state (real processes).

Each rank trains as a DDP job does, minus the model: a DataLoader with two workers over
its sampler, one ``all_reduce`` per step (here: the step's sample count, summed over
ranks). The workers fetch ahead, so each rank saves ``state_dict(consumed=...)``, the
count its loop actually used.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from samplers import DistributedBatchSampler, DistributedSampler
from studies.distributed.local_ranks import launch

SIZE = 101
BATCH = 4
STEPS = 3
EPOCH = 1
SEED = 5
#: What each run checks: the batch sampler with tail "uneven" (every rank the same
#: number of steps, every sample once) and the index sampler with tail "pad".
RUNS = ("uneven batches", "padded samples")


def _build(run: str) -> tuple[Any, DataLoader]:
    """This rank's sampler and DataLoader (two workers) for ``run``, world size from the group."""
    if run == "uneven batches":
        sampler: Any = DistributedBatchSampler(range(SIZE), BATCH, seed=SEED, tail="uneven")
        return sampler, DataLoader(range(SIZE), batch_sampler=sampler, num_workers=2)
    sampler = DistributedSampler(range(SIZE), seed=SEED, tail="pad")
    return sampler, DataLoader(range(SIZE), batch_size=BATCH, sampler=sampler, num_workers=2)


def _step(batch: torch.Tensor, seen: list[int]) -> int:
    """One training step: record the batch, all_reduce its size (as DDP reduces gradients)."""
    seen.extend(batch.tolist())
    count = torch.tensor([batch.numel()])
    dist.all_reduce(count)
    return int(count.item())


def _train_and_checkpoint(_: object) -> dict[str, Any]:
    """Rank work: STEPS steps of epoch EPOCH, then this rank's checkpoint, per run."""
    result: dict[str, Any] = {}
    for run in RUNS:
        sampler, loader = _build(run)
        sampler.set_epoch(EPOCH)
        seen: list[int] = []
        reduced = 0
        iterator = iter(loader)
        for _ in range(STEPS):
            reduced += _step(next(iterator), seen)
        consumed = STEPS if run == "uneven batches" else STEPS * BATCH
        result[run] = {
            "seen": seen,
            "reduced": reduced,
            "without consumed": sampler.state_dict(),
            "state": sampler.state_dict(consumed=consumed),
        }
        del iterator  # shuts the workers down
    return result


def _resume(states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Rank work: load the saved state, then the rest of epoch EPOCH, per run."""
    result: dict[str, Any] = {}
    for run in RUNS:
        sampler, loader = _build(run)
        sampler.load_state_dict(states[run])
        sampler.set_epoch(EPOCH)  # the loop's usual call: the same epoch continues
        seen: list[int] = []
        reduced = sum(_step(batch, seen) for batch in loader)
        result[run] = {"seen": seen, "reduced": reduced}
    return result


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_four_ranks_checkpoint_and_three_resume_the_epoch() -> None:
    before = launch(_train_and_checkpoint, None, 4, timeout=120)
    # A checkpoint file holds JSON; one rank's state is enough for every new rank.
    states = {run: json.loads(json.dumps(before[2][run]["state"])) for run in RUNS}
    after = launch(_resume, states, 3, timeout=120)

    for run in RUNS:
        for rank in before:
            # The workers fetched ahead of the loop: without `consumed` the state records
            # what was fetched (here possibly the whole epoch), not what the steps used.
            assert rank[run]["state"]["taken"] == (
                STEPS if run == "uneven batches" else STEPS * BATCH
            )
            assert rank[run]["without consumed"] != rank[run]["state"], run
        seen = Counter(i for ranks in (before, after) for r in ranks for i in r[run]["seen"])
        # Every step's all_reduce counted what all ranks consumed at that step.
        assert sum(r[run]["reduced"] for r in (before[0], after[0])) == sum(seen.values())
        assert set(seen) == set(range(SIZE)), run  # nothing lost
        repeated = sum(seen.values()) - SIZE
        if run == "uneven batches":
            assert repeated == 0
        else:
            assert 0 <= repeated < 3  # the padding of the resumed epoch, under 3 ranks
