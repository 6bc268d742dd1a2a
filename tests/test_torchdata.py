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

from samplers import DistributedBatchSampler, DistributedSampler, SamplerWarning
from samplers.iterators import BatchIterator, ShareIterator

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
            if {"version", "sampler", "position"} <= set(value):
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
    # Rank 1 of 4 took `steps` batches; in lockstep every rank did: steps * 4 batches' worth.
    assert saved["position"] == steps * BATCH * 4
    assert (saved["epoch"], saved["finished"]) == (EPOCH, False)

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


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("way", WAYS)
def test_a_state_saved_at_the_end_of_an_epoch_resumes_with_the_next_one(
    way: str, workers: int
) -> None:
    """The usual loop resumed from an end-of-epoch checkpoint replays nothing."""
    uninterrupted, uninterrupted_sampler = loader(way, 4, 1, workers)
    batches(uninterrupted)
    uninterrupted_sampler.set_epoch(EPOCH + 1)
    following = batches(uninterrupted)

    interrupted, _ = loader(way, 4, 1, workers)
    batches(interrupted)
    state = interrupted.state_dict()
    assert our_state(state)["finished"]

    resumed, resumed_sampler = loader(way, 4, 1, workers)
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # nor a repeated-epoch warning
        for epoch in (EPOCH, EPOCH + 1):  # for epoch in range(saved_epoch, ...)
            resumed_sampler.set_epoch(epoch)
            seen = batches(resumed)
            assert seen == ([] if epoch == EPOCH else following)


@pytest.mark.parametrize("kind", ["sampler", "batch"])
@pytest.mark.parametrize("midpoint", [0, 3])
def test_torchdata_nodes_sampler_wrapper_saves_and_loads_like_the_stock_sampler(
    kind: str, midpoint: int
) -> None:
    """``SamplerWrapper`` restores a stateful sampler with load_state_dict then iter():
    mid-epoch it continues; saved at the epoch's end it yields nothing more, and with
    ``restart_on_stop_iteration=True`` goes on with the next epoch, as for the stock
    sampler (whose epochs it counts itself)."""
    nodes = pytest.importorskip("torchdata.nodes", reason="torchdata is not installed")

    def node() -> Any:
        if kind == "sampler":
            return nodes.SamplerWrapper(DistributedSampler(range(20), 2, 1, seed=3))
        return nodes.SamplerWrapper(DistributedBatchSampler(range(20), 3, 2, 1, seed=3))

    loader = nodes.Loader(node())
    iterator = iter(loader)
    epoch_0 = [next(iterator) for _ in range(midpoint)]
    middle = loader.state_dict()
    epoch_0 += list(iterator)
    end = loader.state_dict()
    epoch_1 = list(loader)

    resumed = nodes.Loader(node())
    resumed.load_state_dict(middle)
    assert list(resumed) == epoch_0[midpoint:]
    assert list(resumed) == epoch_1

    stopped = nodes.Loader(node(), restart_on_stop_iteration=False)
    stopped.load_state_dict(end)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)  # the finished epoch's empty pass
        assert list(stopped) == []
    restarting = nodes.Loader(node())
    restarting.load_state_dict(end)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        assert list(restarting) == epoch_1
