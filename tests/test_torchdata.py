"""Resume through torchdata's ``StatefulDataLoader``: our samplers' state, not its fast-forward.

``StatefulDataLoader`` calls a sampler's ``state_dict()`` when it snapshots (with workers:
at the step the training loop has reached, not at what the workers prefetched), and on
restore ``load_state_dict()`` then ``iter()``. For a sampler without state it would
instead replay the epoch and skip what this rank had yielded.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from samplers import DistributedBatchSampler, DistributedSampler
from samplers.share import BatchIterator, ShareIterator

stateful_dataloader = pytest.importorskip(
    "torchdata.stateful_dataloader",
    reason="torchdata is not installed (it is in the test extra: pip install torchdata)",
)
StatefulDataLoader = stateful_dataloader.StatefulDataLoader

SIZE = 50
BATCH = 3
EPOCH = 2
WAYS = ("sampler", "batch_sampler")
WORKERS = (0, 2)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def loader(way: str, world: int, rank: int, workers: int, tail: str = "pad") -> tuple[Any, Any]:
    """A StatefulDataLoader over one rank's sampler, and the sampler, at epoch EPOCH."""
    if way == "sampler":
        sampler: Any = DistributedSampler(range(SIZE), world, rank, seed=7, tail=tail)
        made = StatefulDataLoader(
            range(SIZE), batch_size=BATCH, sampler=sampler, num_workers=workers
        )
    else:
        sampler = DistributedBatchSampler(range(SIZE), BATCH, world, rank, seed=7, tail=tail)
        made = StatefulDataLoader(range(SIZE), batch_sampler=sampler, num_workers=workers)
    sampler.set_epoch(EPOCH)  # as a training loop does before each epoch
    return made, sampler


def batches(iterable: Any) -> list[list[int]]:
    return [batch.tolist() for batch in iterable]


def take(iterator: Iterator[Any], steps: int) -> list[list[int]]:
    return [next(iterator).tolist() for _ in range(steps)]


def our_state(state: Any) -> dict[str, Any]:
    """The one sampler state (ours) nested in a StatefulDataLoader state dict."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if {"version", "sampler", "taken"} <= set(value):
                found.append(value)
            for item in value.values():
                walk(item)

    walk(state)
    assert len(found) == 1, state
    return found[0]


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many items our iterators hand out (the loader draws indices in this process)."""
    counts: Counter[str] = Counter()
    for cls in (ShareIterator, BatchIterator):

        def counting(self: Any, original: Callable[[Any], Any] = cls.__next__) -> Any:
            item = original(self)
            counts["items"] += 1
            return item

        monkeypatch.setattr(cls, "__next__", counting)
    return counts


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("way", WAYS)
def test_resume_on_the_same_world_size_continues_the_uninterrupted_run(
    way: str, workers: int, drawn: Counter[str]
) -> None:
    uninterrupted, uninterrupted_sampler = loader(way, 4, 1, workers)
    whole = batches(uninterrupted)
    steps = 2
    interrupted, _ = loader(way, 4, 1, workers)
    iterator = iter(interrupted)
    assert take(iterator, steps) == whole[:steps]
    state = interrupted.state_dict()
    del iterator

    saved = our_state(state)
    json.dumps(saved)
    # With workers the sampler has handed out more than the loop consumed; the snapshot
    # records what the loop consumed.
    assert saved["taken"] == (steps * BATCH if way == "sampler" else steps)
    assert saved["epoch"] == EPOCH

    resumed, resumed_sampler = loader(way, 4, 1, workers)
    resumed.load_state_dict(state)
    drawn.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no repeated-epoch warning
        rest = batches(resumed)
    assert rest == whole[steps:]
    # Only the rest was drawn: the loader did not replay and skip the first steps.
    rest_items = sum(len(batch) for batch in rest) if way == "sampler" else len(rest)
    assert drawn["items"] == rest_items

    for sampler in (resumed_sampler, uninterrupted_sampler):
        sampler.set_epoch(EPOCH + 1)
    assert batches(resumed) == batches(uninterrupted)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("way", WAYS)
def test_one_ranks_state_resumes_the_epoch_on_another_world_size(way: str, workers: int) -> None:
    steps = 2
    seen: Counter[int] = Counter()
    states = []
    for rank in range(4):
        old, _ = loader(way, 4, rank, workers, tail="uneven")
        iterator = iter(old)
        seen.update(index for batch in take(iterator, steps) for index in batch)
        states.append(old.state_dict())
        del iterator
    # Ranks in lockstep: every rank's state tells the same global position.
    state = states[2]
    for rank in range(3):
        new, _ = loader(way, 3, rank, workers, tail="uneven")
        new.load_state_dict(state)
        seen.update(index for batch in batches(new) for index in batch)
    assert seen == Counter(range(SIZE))  # every sample exactly once over the epoch
