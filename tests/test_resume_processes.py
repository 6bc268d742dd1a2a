"""Checkpoint and resume in real processes: gloo ranks, DataLoaders with workers.

Each rank trains as a DDP job does, minus the model: a DataLoader with two workers over
its sampler, one ``all_reduce`` per step (here: the step's sample count, summed over
ranks). The workers fetch ahead of the loop; ``state_dict()`` records the step the loop
reached, and every rank's state is the same.
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
from studies.engines.local_ranks import launch

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
            "state": sampler.state_dict(),
            "with consumed": sampler.state_dict(consumed=consumed),
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
            # The workers fetched ahead of the loop; the state is the loop's step, the
            # same on every rank, and what `consumed` says.
            assert rank[run]["state"] == before[0][run]["state"] == rank[run]["with consumed"]
            assert not rank[run]["state"]["finished"]
        seen = Counter(i for ranks in (before, after) for r in ranks for i in r[run]["seen"])
        # Every step's all_reduce counted what all ranks consumed at that step.
        assert sum(r[run]["reduced"] for r in (before[0], after[0])) == sum(seen.values())
        assert set(seen) == set(range(SIZE)), run  # nothing lost
        repeated = sum(seen.values()) - SIZE
        if run == "uneven batches":
            assert repeated == 0
        else:
            assert 0 <= repeated < 3  # the padding of the resumed epoch, under 3 ranks


#: The 3-epoch job: it runs on each world size in turn until its stop, (epoch, step) or
#: (epoch, "end"), saves every rank's state and exits; the next run loads rank 0's.
EPOCHS = 3
JOB_SIZE = 53
JOB_RUNS = ((4, (0, 2)), (3, (1, "end")), (5, (2, 1)), (2, None))


def _job(payload: tuple[str, dict[str, Any] | None, Any]) -> dict[str, Any]:
    """Rank work: the usual loop from the state's epoch, until the stop."""
    way, state, stop = payload
    if way == "batch_sampler":
        sampler: Any = DistributedBatchSampler(range(JOB_SIZE), BATCH, seed=SEED, tail="uneven")
        loader = DataLoader(range(JOB_SIZE), batch_sampler=sampler, num_workers=2)
    else:
        sampler = DistributedSampler(range(JOB_SIZE), seed=SEED, tail="uneven")
        loader = DataLoader(range(JOB_SIZE), batch_size=BATCH, sampler=sampler, num_workers=2)
    first = 0
    if state is not None:
        sampler.load_state_dict(state)
        first = state["epoch"]
    seen: dict[int, list[int]] = {}
    for epoch in range(first, EPOCHS):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            seen.setdefault(epoch, []).extend(batch.tolist())
            if way == "batch_sampler":
                _step(batch, [])  # every rank the same number of steps: never hangs
            if stop == (epoch, step):
                return {"seen": seen, "state": sampler.state_dict()}
        if stop == (epoch, "end"):
            return {"seen": seen, "state": sampler.state_dict()}
    return {"seen": seen, "state": sampler.state_dict()}


@pytest.mark.processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("way", ["batch_sampler", "sampler"])
def test_a_three_epoch_job_resumed_on_other_world_sizes_sees_every_sample_once(
    way: str,
) -> None:
    """Stops mid-epoch and at an epoch's end, restarts on 3, 5 and 2 ranks."""
    per_epoch: list[Counter[int]] = [Counter() for _ in range(EPOCHS)]
    state = None
    for world, stop in JOB_RUNS:
        ranks = launch(_job, (way, state, stop), world, timeout=180)
        for rank in ranks:
            for epoch, indices in rank["seen"].items():
                per_epoch[int(epoch)].update(indices)
        states = [rank["state"] for rank in ranks]
        assert all(each == states[0] for each in states)  # one state for every rank
        state = json.loads(json.dumps(states[0]))
    assert all(seen == Counter(range(JOB_SIZE)) for seen in per_epoch)
    assert state is not None and (state["epoch"], state["finished"]) == (EPOCHS - 1, True)
