"""Samplers used from several threads: a state read while the loop iterates, a shared iterator.

A checkpoint or monitoring thread may call ``state_dict()`` while the training loop
iterates; the position it reads must be one the loop's iterator reached during the call.
One iterator drained by two threads (the stock sampler's list iterator allows it) hands
out every item exactly once in total.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import composition  # every sampler we ship, built for a rank
import pytest
import torch
from torch.utils.data import RandomSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
    iterators,
)


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, so races show."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few items: a shared iterator computes thousands of them."""
    for name in ("FIRST_CHUNK", "CHUNK", "COMPUTED_CHUNK", "FEISTEL_CHUNK"):
        monkeypatch.setattr(iterators, name, 31)
    monkeypatch.setattr(iterators.BatchIterator, "STEPS", 4)


# A state read from another thread ---------------------------------------------------------


def test_a_token_sampler_state_read_while_the_loop_iterates_is_what_was_handed_out() -> None:
    """300,000 lengths, a budget of 256, one rank: the loop never dies, and every state
    read concurrently is a position the loop had reached by the end of the read, and not
    before what it had received when the read began."""
    lengths = torch.randint(1, 200, (300_000,), generator=torch.Generator().manual_seed(0))

    def build() -> DistributedTokenBatchSampler:
        return DistributedTokenBatchSampler(lengths, 256, 1, 0, seed=3)

    _, sizes = build().layout().items(0)  # every batch's size, planned at once
    ends = [0, *torch.cumsum(torch.tensor(sizes), 0).tolist()]  # after the first k batches
    sampler = build()
    received = [0]  # batches the loop has received
    done = threading.Event()
    reads: list[tuple[int, int, dict[str, Any]]] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            while not done.is_set():
                before = received[0]
                state = sampler.state_dict()
                reads.append((before, received[0], state))
                time.sleep(0.001)  # a read every millisecond, keeping the test fast
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    iterator = iter(sampler)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in iterator:
            received[0] += 1
    finally:
        done.set()
        reader.join(timeout=60)
    assert not failures, failures
    assert received[0] == len(ends) - 1
    assert len(reads) > 10
    for before, after, state in reads:
        # The loop's next() may have handed out one batch the loop had not counted yet.
        allowed = ends[before : after + 2]
        assert state["position"] in allowed, (before, after, state)
        assert state["finished"] == (state["position"] == ends[-1])


@pytest.mark.parametrize("kind", ["sampler", "batch", "tokens"])
def test_a_state_read_from_another_thread_never_exceeds_what_was_handed_out(
    kind: str, busy_switching: None, small_chunks: None
) -> None:
    if kind == "sampler":
        sampler: Any = DistributedSampler(range(20_000), 1, 0, permutation="feistel")
        unit = 1
    elif kind == "batch":
        sampler, unit = DistributedBatchSampler(range(20_000), 5, 1, 0), 5
    else:
        sampler, unit = DistributedTokenBatchSampler([4] * 20_000, 20, 1, 0), 5
    received = [0]
    done = threading.Event()
    bad: list[tuple[int, int, int]] = []

    def read() -> None:
        while not done.is_set():
            before = received[0]
            position = sampler.state_dict()["position"]
            after = received[0]
            if not before * unit <= position <= (after + 1) * unit:
                bad.append((before, position, after))

    reader = threading.Thread(target=read)
    iterator = iter(sampler)
    reader.start()
    try:
        for _ in iterator:
            received[0] += 1
    finally:
        done.set()
        reader.join(timeout=60)
    assert not bad, bad[:5]


# One iterator, two threads ------------------------------------------------------------------


def _makers() -> dict[str, Callable[[], Any]]:
    return {
        "randperm": lambda: DistributedSampler(range(12_000), 2, 1, seed=4),
        "feistel": lambda: DistributedSampler(range(12_000), 2, 1, permutation="feistel"),
        "unshuffled": lambda: DistributedSampler(range(12_000), 2, 1, shuffle=False),
        "batch": lambda: DistributedBatchSampler(range(12_000), 3, 2, 1, seed=4),
        "wrapper": lambda: DistributedSamplerWrapper(
            RandomSampler(range(12_000), generator=torch.Generator().manual_seed(1)), 2, 1
        ),
        "tokens": lambda: DistributedTokenBatchSampler([3, 5, 8, 2] * 3_000, 16, 2, 1, seed=4),
    }


@pytest.mark.parametrize("kind", list(_makers()))
def test_two_threads_draining_one_iterator_receive_every_item_exactly_once(
    kind: str, busy_switching: None, small_chunks: None
) -> None:
    make = _makers()[kind]
    expected = list(make())
    sampler = make()
    iterator = iter(sampler)
    parts: list[list[Any]] = [[], []]
    failures: list[BaseException] = []

    start = threading.Barrier(2)

    def drain(part: list[Any]) -> None:
        try:
            start.wait(timeout=60)
            for item in iterator:
                part.append(item)
                if len(part) % 64 == 0:
                    time.sleep(0)  # let the other thread in
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=drain, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert all(parts), "both threads should have received items"
    got = parts[0] + parts[1]
    key = (lambda item: tuple(item)) if isinstance(expected[0], list) else (lambda item: item)
    assert sorted(map(key, got)) == sorted(map(key, expected))
    assert iterator.taken == len(expected)
    state = sampler.state_dict()
    assert state["finished"]


# A state read while iter() takes up a loaded state ----------------------------------------


@pytest.mark.parametrize("kind", sorted(composition.SAMPLERS))
def test_a_state_read_while_iter_takes_up_a_loaded_state_is_the_loaded_position(
    kind: str,
) -> None:
    """``iter()`` of a sampler with a loaded state, a state read in the middle of it (as
    another thread would, here from the sampler's own hook that builds the iterator):
    the loaded position. ``iter()`` used up the loaded state before it kept the new
    iterator, and a read in between said position 0 of the epoch."""
    sampler = composition.SAMPLERS[kind](2, 1)
    sampler.set_epoch(composition.EPOCH)
    iterator = iter(sampler)
    next(iterator)
    saved = sampler.state_dict()
    assert saved["position"] > 0
    resumed = composition.SAMPLERS[kind](3, 2)
    resumed.load_state_dict(saved)
    build = resumed._new_iterator
    read: list[int] = []

    def building(plan: Any) -> Any:
        read.append(resumed.state_dict()["position"])
        return build(plan)

    resumed._new_iterator = building  # type: ignore[method-assign]
    iter(resumed)
    assert read == [saved["position"]]
    assert resumed.state_dict()["position"] == saved["position"]
