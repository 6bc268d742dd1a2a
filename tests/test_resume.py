"""Checkpoint and resume on the same or another world size (samplers.state, samplers.core)."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from itertools import islice
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from strategies import dataset_sizes, seeds
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    SamplerWarning,
)
from samplers.plan import TAILS

#: Sampler kinds; "-feistel" draws the epoch order with permutation="feistel".
KINDS = ("sampler", "batch", "wrapper", "sampler-feistel", "batch-feistel")

# These configurations reach, on purpose, states the samplers warn about (a finished
# epoch's state, unequal batch counts of tail="uneven", a share emptied by drop): each
# warning is asserted where it is the subject (tests/test_resume_boundaries.py, the
# batch_shares helper of tests/test_beyond_torch.py, tests/test_warnings.py), not here.
INCIDENTAL = pytest.mark.filterwarnings("ignore::samplers.SamplerWarning")


def make(
    kind: str,
    size: int,
    world: int,
    rank: int,
    tail: str,
    seed: int = 0,
    batch: int = 3,
):
    """A sampler of ``kind`` (see KINDS)."""
    kind, _, permutation = kind.partition("-")
    permutation = permutation or "randperm"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        if kind == "sampler":
            return DistributedSampler(
                range(size), world, rank, seed=seed, tail=tail, permutation=permutation
            )
        if kind == "batch":
            return DistributedBatchSampler(
                range(size), batch, world, rank, seed=seed, tail=tail, permutation=permutation
            )
        inner = RandomSampler(range(size)) if size else SequentialSampler(range(0))
        return DistributedSamplerWrapper(inner, world, rank, seed=seed, tail=tail)


def flat(items: list[Any]) -> list[int]:
    return [i for item in items for i in (item if isinstance(item, list) else [item])]


def lockstep(samplers: list[Any], steps: int) -> tuple[list[Any], list[Any]]:
    """Every rank takes ``steps`` items (a rank whose share ended takes none and has seen
    its end, as a loop that ended); returns the iterators and what they took."""
    iterators = [iter(sampler) for sampler in samplers]
    taken: list[Any] = []
    for _ in range(steps):
        for iterator in iterators:
            item = next(iterator, None)
            if item is not None:
                taken.append(item)
    return iterators, taken


@given(
    st.sampled_from(KINDS),
    dataset_sizes(600),
    st.integers(1, 8),
    st.sampled_from(TAILS),
    seeds,
    st.integers(0, 5),
    st.data(),
)
def test_same_world_size_continues_exactly(kind, size, world, tail, seed, epoch, data) -> None:
    wholes = [make(kind, size, world, rank, tail, seed) for rank in range(world)]
    for sampler in wholes:
        sampler.set_epoch(epoch)
    expected = [list(sampler) for sampler in wholes]
    longest = max(len(items) for items in expected)
    steps = data.draw(st.integers(0, longest + 1), label="steps in lockstep")
    interrupted = [make(kind, size, world, rank, tail, seed) for rank in range(world)]
    for sampler in interrupted:
        sampler.set_epoch(epoch)
    _, _ = lockstep(interrupted, steps)
    states = [json.loads(json.dumps(sampler.state_dict())) for sampler in interrupted]
    assert all(state == states[0] for state in states)  # one state for every rank
    assert len(json.dumps(states[0])) < 400
    assert states[0]["finished"] == (steps > longest or (steps == longest and longest > 0))
    for rank in range(world):
        resumed = make(kind, size, world, rank, tail, seed=12345)  # the state's seed wins
        resumed.load_state_dict(states[rank])
        resumed.set_epoch(epoch)  # the usual loop calls it again: same epoch, continues
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # and no repeated-epoch warning
            rest = list(resumed)
        assert rest == expected[rank][steps:]
        resumed.set_epoch(epoch + 1)
        wholes[rank].set_epoch(epoch + 1)
        assert list(resumed) == list(wholes[rank])


@INCIDENTAL
@given(
    st.sampled_from(KINDS),
    dataset_sizes(500),
    st.integers(1, 8),
    st.integers(1, 8),
    st.sampled_from(TAILS),
    st.sampled_from(TAILS),
    seeds,
    st.data(),
)
def test_another_world_size_shares_out_exactly_the_rest(
    kind, size, old_world, new_world, old_tail, new_tail, seed, data
) -> None:
    old = [make(kind, size, old_world, r, old_tail, seed) for r in range(old_world)]
    longest = max(len(sampler) for sampler in old)
    steps = data.draw(st.integers(0, longest + 1), label="steps in lockstep")
    _, taken = lockstep(old, steps)
    state = old[data.draw(st.integers(0, old_world - 1), label="rank saved")].state_dict()
    new = [make(kind, size, new_world, r, new_tail, seed=999, batch=2) for r in range(new_world)]
    for sampler in new:
        sampler.load_state_dict(state)
    rest = [flat(list(sampler)) for sampler in new]
    seen = Counter(flat(taken))
    seen.update(i for part in rest for i in part)
    universe = Counter(flat(list(make(kind, size, 1, 0, "uneven", seed))))
    if state["finished"]:
        assert not any(rest)  # the epoch was over: nothing more of it
        return
    extra, missing = seen - universe, universe - seen
    new_step = new_world * (2 if kind.startswith("batch") else 1)
    old_step = old_world * (3 if kind.startswith("batch") else 1)
    if old_tail == new_tail == "uneven":
        assert seen == universe
    if new_tail != "pad" and old_tail != "pad":
        assert not extra, extra
    if new_tail != "drop" and old_tail != "drop":
        assert not missing, missing
    assert sum(extra.values()) < new_step + old_step
    assert sum(missing.values()) < new_step


def test_seed_none_jobs_resume_with_their_real_seed() -> None:
    # seed=None agrees a seed over the process group; each job draws another one (here
    # written out, as there is no process group), and the state brings the first job's.
    first = DistributedSampler(range(40), 2, 0, seed=2**40 + 3)
    expected = list(first)
    saved = DistributedSampler(range(40), 2, 0, seed=first.seed)
    iterator = iter(saved)
    next(iterator)
    resumed = DistributedSampler(range(40), 2, 0, seed=2**40 + 7)
    resumed.load_state_dict(saved.state_dict())
    assert resumed.seed == first.seed
    assert list(resumed) == expected[1:]


@pytest.mark.parametrize("kind", KINDS)
def test_an_iterator_never_advanced_does_not_start_the_epoch(kind: str) -> None:
    """A second iter() before any next() replaces the first: the state and epoch stay."""
    expected = list(make(kind, 50, 3, 1, "pad"))
    saved = make(kind, 50, 3, 1, "pad")
    list(islice(iter(saved), 2))
    resumed = make(kind, 50, 3, 1, "pad")
    resumed.load_state_dict(saved.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no repeated-epoch warning either
        iter(resumed)
        assert list(iter(resumed)) == expected[2:]
    if kind == "wrapper":
        return
    cls = DistributedSampler if kind == "sampler" else DistributedBatchSampler
    args = (range(50),) if kind == "sampler" else (range(50), 3)
    auto = cls(*args, num_replicas=3, rank=1, seed=0, auto_epoch=True)
    for epoch in range(3):
        iter(auto)
        first = next(iter(auto))
        assert auto.epoch == epoch
        stepped = cls(*args, num_replicas=3, rank=1, seed=0)
        stepped.set_epoch(epoch)
        assert first == next(iter(stepped))


def test_a_dataloader_with_workers_resumes_a_batch_sampler_and_steps_its_epochs() -> None:
    """Regression: its two iter() calls per epoch lost the state and doubled auto_epoch."""
    expected = list(make("batch", 50, 3, 1, "pad"))
    saved = make("batch", 50, 3, 1, "pad")
    list(islice(iter(saved), 2))
    resumed = make("batch", 50, 3, 1, "pad")
    resumed.load_state_dict(saved.state_dict())
    loader = DataLoader(range(50), batch_sampler=resumed, num_workers=2)
    assert [batch.tolist() for batch in loader] == expected[2:]
    auto = DistributedBatchSampler(range(50), 3, 3, 1, seed=0, auto_epoch=True)
    loader = DataLoader(range(50), batch_sampler=auto, num_workers=2)
    for epoch in range(2):
        stepped = DistributedBatchSampler(range(50), 3, 3, 1, seed=0)
        stepped.set_epoch(epoch)
        assert [batch.tolist() for batch in loader] == list(stepped)
        assert auto.epoch == epoch


class Resuming(RuleBasedStateMachine):
    """Iterate in lockstep, save, resume on a random world size and tail, move to the next
    epoch; check the tail policies' guarantees over each epoch and that every rank's state
    is the same."""

    @initialize(
        size=st.integers(0, 60),
        world=st.integers(1, 6),
        tail=st.sampled_from(TAILS),
        seed=st.integers(0, 100),
        kind=st.sampled_from(KINDS),
    )
    def start(self, size: int, world: int, tail: str, seed: int, kind: str) -> None:
        self.size, self.kind, self.seed = size, kind, seed
        self.epoch = 0
        self._build(world, tail, state=None)

    def _build(self, world: int, tail: str, state: dict | None) -> None:
        self.world, self.tail = world, tail
        self.samplers = [
            make(self.kind, self.size, world, r, tail, self.seed) for r in range(world)
        ]
        for sampler in self.samplers:
            if state is not None:
                sampler.load_state_dict(state)
            sampler.set_epoch(self.epoch)
        self.iterators = [iter(sampler) for sampler in self.samplers]
        if state is None:
            self.consumed: Counter[int] = Counter()
            self.tails = {tail}
            self.max_step = 0
        self.tails.add(tail)
        self.max_step = max(self.max_step, world * (3 if self.kind.startswith("batch") else 1))
        self.exhausted = False

    @rule(steps=st.integers(1, 5))
    def step(self, steps: int) -> None:
        for _ in range(steps):
            batch = [next(iterator, None) for iterator in self.iterators]
            if all(item is None for item in batch):
                self.exhausted = True
                return
            self.consumed.update(flat([item for item in batch if item is not None]))

    @rule(world=st.integers(1, 6), tail=st.sampled_from(TAILS), rank=st.integers(0, 5))
    def save_and_resume(self, world: int, tail: str, rank: int) -> None:
        states = [sampler.state_dict() for sampler in self.samplers]
        assert all(state == states[0] for state in states)
        state = json.loads(json.dumps(states[rank % self.world]))
        self._build(world, tail, state)
        if state["finished"]:
            assert all(next(iterator, None) is None for iterator in self.iterators)
            self.exhausted = True

    @rule()
    def next_epoch(self) -> None:
        for iterator in self.iterators:
            for _ in iterator:
                pass
        self.epoch += 1
        self._build(self.world, self.tail, state=None)

    @invariant()
    def guarantees_hold(self) -> None:
        extra = sum((self.consumed - Counter(range(self.size))).values())
        if self.kind == "wrapper":
            return  # a random sampler's stream may repeat indices: checked elsewhere
        if "pad" not in self.tails:
            assert extra == 0
        if self.exhausted and "drop" not in self.tails:
            assert set(self.consumed) == set(range(self.size))


Resuming.TestCase.settings = settings(settings.default, stateful_step_count=12)
test_resuming_state_machine = INCIDENTAL(Resuming.TestCase)


@pytest.mark.parametrize("kind", ["sampler", "batch"])
def test_a_state_saved_before_anything_was_consumed_resumes_that_epoch(kind: str) -> None:
    def build():
        if kind == "sampler":
            return DistributedSampler(range(8), 2, 0, auto_epoch=True)
        return DistributedBatchSampler(range(8), 2, 2, 0, auto_epoch=True)

    sampler = build()
    list(sampler)  # epoch 0
    iterator = iter(sampler)  # auto_epoch: epoch 1
    expected = [next(iterator), *iterator]
    state = sampler.state_dict(consumed=0)
    assert (state["epoch"], state["position"], state["finished"]) == (1, 0, False)
    resumed = build()
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "iterated again" warning either
        assert list(resumed) == expected
    assert resumed.epoch == 1


@pytest.mark.parametrize("kind", KINDS)
def test_len_is_what_the_resumed_epoch_yields(kind: str) -> None:
    sampler = make(kind, 100, 4, 1, "pad", seed=3)
    iterator = iter(sampler)
    list(islice(iterator, 5))
    resumed = make(kind, 100, 2, 1, "uneven", seed=3)
    resumed.load_state_dict(sampler.state_dict())
    assert len(resumed) == len(list(resumed))
    assert len(resumed) == len(make(kind, 100, 2, 1, "uneven", seed=3))  # fresh again


def test_a_sampler_with_overridden_sizes_loads_its_own_state() -> None:
    sampler = DistributedSampler(range(10), 2, 1)
    sampler.num_samples, sampler.total_size = 8, 16  # pads further, as a subclass may
    expected = list(sampler)
    with pytest.warns(SamplerWarning, match="is iterated again at epoch 0 without set_epoch"):
        iterator = iter(sampler)
    list(islice(iterator, 3))
    resumed = DistributedSampler(range(10), 2, 1)
    resumed.num_samples, resumed.total_size = 8, 16
    resumed.load_state_dict(sampler.state_dict())
    assert list(resumed) == expected[3:]
    list(iterator)
    finished = DistributedSampler(range(10), 2, 1)
    finished.num_samples, finished.total_size = 8, 16
    finished.load_state_dict(sampler.state_dict())
    with pytest.warns(SamplerWarning, match="yields nothing: it continues the loaded state"):
        assert list(finished) == []  # the padded epoch was over
