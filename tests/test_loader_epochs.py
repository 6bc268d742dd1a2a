"""``auto_epoch`` through loaders with workers: an iteration the loop never received from is
not an epoch.

torchdata's ``StatefulDataLoader`` with workers, restoring a state taken after an epoch's
loop ended, builds an iterator that prefetches from the sampler (the next epoch) and is then
discarded for a fresh one, since the restored epoch is finished. Counting that prefetch as
an epoch made the resumed run skip one (it resumed at epoch 3 instead of 2).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

stateful_dataloader = pytest.importorskip(
    "torchdata.stateful_dataloader",
    reason="torchdata is not installed (it is in the test extra: pip install torchdata)",
)
StatefulDataLoader = stateful_dataloader.StatefulDataLoader

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

SIZE = 40
BATCH = 2
KINDS = ("sampler", "batch", "wrapper", "tokens")


def build(kind: str, workers: int, loader_type: Any = StatefulDataLoader) -> tuple[Any, Any]:
    """A loader over rank 1 of 2 with ``auto_epoch=True``, and its sampler."""
    data = range(SIZE)
    sampler: Any
    if kind == "sampler":
        sampler = DistributedSampler(data, 2, 1, seed=5, auto_epoch=True)
    elif kind == "wrapper":
        inner = RandomSampler(data, generator=torch.Generator().manual_seed(9))
        sampler = DistributedSamplerWrapper(inner, 2, 1, seed=5, auto_epoch=True)
    elif kind == "batch":
        sampler = DistributedBatchSampler(data, BATCH, 2, 1, seed=5, auto_epoch=True)
        return loader_type(data, batch_sampler=sampler, num_workers=workers), sampler
    else:
        lengths = [1 + index % 5 for index in range(SIZE)]
        sampler = DistributedTokenBatchSampler(lengths, 8, 2, 1, seed=5, auto_epoch=True)
        return loader_type(data, batch_sampler=sampler, num_workers=workers), sampler
    return loader_type(data, batch_size=BATCH, sampler=sampler, num_workers=workers), sampler


def epoch(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_taken_after_an_epoch_ended_resumes_at_the_next_epoch(
    kind: str, workers: int
) -> None:
    loader, sampler = build(kind, workers)
    epochs = [epoch(loader), epoch(loader)]  # epochs 0 and 1
    state = loader.state_dict()
    epochs.append(epoch(loader))  # epoch 2
    assert sampler.epoch == 2
    resumed_loader, resumed = build(kind, workers)
    resumed_loader.load_state_dict(state)
    assert epoch(resumed_loader) == epochs[2], f"{kind}, {workers} workers: not epoch 2"
    assert resumed.epoch == 2
    assert epoch(resumed_loader) == epoch(loader)  # and on in step: epoch 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_dataloader_iterator_whose_prefetch_never_reached_the_loop_is_not_an_epoch(
    kind: str,
) -> None:
    loader, _ = build(kind, 2, DataLoader)
    expected, _ = build(kind, 0, DataLoader)
    unused = iter(loader)  # its workers prefetch epoch 0; nothing reaches a loop
    assert epoch(loader) == epoch(expected)  # epoch 0, not 1
    del unused
    assert epoch(loader) == epoch(expected)  # epoch 1


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["sampler", "tokens"])
def test_set_epoch_of_the_finished_epoch_then_the_next_with_auto_epoch(
    kind: str, workers: int
) -> None:
    """The usual loop (set_epoch before each epoch) on a sampler with auto_epoch=True:
    torchdata loads the state inside the loader's iter(), after set_epoch chose the
    saved, finished epoch; that pass is empty, the next is the next epoch (not twice)."""
    loader, sampler = build(kind, workers)
    for epoch_number in (0, 1):
        sampler.set_epoch(epoch_number)
        epoch(loader)
    state = loader.state_dict()
    sampler.set_epoch(2)
    expected = epoch(loader)
    resumed_loader, resumed = build(kind, workers)
    resumed_loader.load_state_dict(state)
    resumed.set_epoch(1)
    assert epoch(resumed_loader) == []  # the saved epoch was over
    resumed.set_epoch(2)
    assert epoch(resumed_loader) == expected


@pytest.mark.parametrize("persistent", [False, True])
def test_a_torch_loader_with_persistent_workers_moves_on_after_a_resumed_epoch(
    persistent: bool,
) -> None:
    """torch's DataLoader with persistent workers reuses its iterator and zeroes its counts
    before the next epoch: the resumed epoch's rest counts, and auto_epoch moves on."""
    first = DistributedSampler(range(23), num_replicas=3, rank=0, seed=0, auto_epoch=True)
    taken = iter(first)
    for _ in range(3):
        next(taken)
    state = first.state_dict()
    sampler = DistributedSampler(range(23), num_replicas=2, rank=0, seed=0, auto_epoch=True)
    sampler.load_state_dict(state)
    loader = DataLoader(
        range(23), batch_size=2, sampler=sampler, num_workers=2, persistent_workers=persistent
    )
    passes = [[i for batch in loader for i in batch.tolist()] for _ in range(3)]
    rest = DistributedSampler(range(23), num_replicas=2, rank=0, seed=0)
    rest.load_state_dict(state)
    assert passes[0] == list(rest)
    for epoch in (1, 2):
        fresh = DistributedSampler(range(23), num_replicas=2, rank=0, seed=0)
        fresh.set_epoch(epoch)
        assert passes[epoch] == list(fresh), f"epoch {epoch}"
