"""Checkpoint and resume mid-epoch on the same or another world size (samplers.resume)."""

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

from samplers import DistributedBatchSampler, DistributedSampler, DistributedSamplerWrapper
from samplers.plan import TAILS

#: Sampler kinds; "-feistel" draws the epoch order with permutation="feistel".
KINDS = ("sampler", "batch", "wrapper", "sampler-feistel", "batch-feistel")


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
        warnings.simplefilter("ignore", UserWarning)
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
    lengths = [range(len(make(kind, size, world, rank, tail))) for rank in range(world)]
    for rank in range(world):
        whole = make(kind, size, world, rank, tail, seed)
        whole.set_epoch(epoch)
        expected = list(whole)
        interrupted = make(kind, size, world, rank, tail, seed)
        interrupted.set_epoch(epoch)
        taken = data.draw(st.integers(0, len(expected)), label=f"taken by rank {rank}")
        iterator = iter(interrupted)
        assert list(islice(iterator, taken)) == expected[:taken]
        state = json.loads(json.dumps(interrupted.state_dict()))
        assert len(json.dumps(state)) < 600
        resumed = make(kind, size, world, rank, tail, seed=12345)  # the state's seed wins
        resumed.load_state_dict(state)
        resumed.set_epoch(epoch)  # the usual loop calls it again: same epoch, continues
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            rest = list(resumed)
        # Once all ranks (in lockstep) have had everything, the state is a fresh iteration.
        fresh = state["taken"] == 0 and taken > 0
        assert fresh == (0 < taken == len(expected) and all(len(e) <= taken for e in lengths))
        assert rest == (expected if fresh else expected[taken:])
        resumed.set_epoch(epoch + 1)
        whole.set_epoch(epoch + 1)
        assert list(resumed) == list(whole)


@pytest.mark.parametrize("kind", KINDS)
def test_at_an_epoch_boundary_the_next_epoch_is_the_uninterrupted_one(kind: str) -> None:
    whole, interrupted = make(kind, 50, 3, 1, "pad"), make(kind, 50, 3, 1, "pad")
    list(whole)
    list(interrupted)
    state = interrupted.state_dict()
    assert (state["taken"], state["start"]) == (0, 0)
    resumed = make(kind, 50, 3, 1, "pad")
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the repeated-epoch warning, in both
        assert list(resumed) == list(whole)  # no set_epoch: the same order again, as uninterrupted
    for sampler in (resumed, whole):
        sampler.set_epoch(1)
    assert list(resumed) == list(whole)


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
    iterators = [iter(sampler) for sampler in old]
    steps = data.draw(st.integers(0, min(len(s) for s in old)), label="steps in lockstep")
    seen = Counter(flat([x for it in iterators for x in islice(it, steps)]))
    if all(sampler.state_dict()["taken"] == 0 for sampler in old):
        seen = Counter()  # the epoch is over: the state starts a fresh one
    state = old[data.draw(st.integers(0, old_world - 1), label="rank saved")].state_dict()
    new = [make(kind, size, new_world, r, new_tail, seed=999, batch=2) for r in range(new_world)]
    for sampler in new:
        sampler.load_state_dict(state)
    rest = [flat(list(sampler)) for sampler in new]
    seen.update(i for part in rest for i in part)
    order = make(kind, size, 1, 0, "uneven", seed)
    universe = Counter(flat(list(order)))  # the epoch's stream (a wrapper's may repeat)
    extra, missing = seen - universe, universe - seen
    new_step = new_world * (2 if kind.startswith("batch") else 1)
    if new_tail == "uneven":
        assert seen == universe
    elif new_tail == "pad":
        assert not missing and sum(extra.values()) < new_step, (missing, extra)
    else:
        assert not extra and sum(missing.values()) < new_step, (missing, extra)


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


def test_consumed_records_what_the_loop_used_not_what_was_fetched() -> None:
    sampler = DistributedSampler(range(100), 2, 1, seed=3)
    expected = list(DistributedSampler(range(100), 2, 1, seed=3))
    iterator = iter(sampler)
    list(islice(iterator, 20))  # a DataLoader fetched 20 ...
    state = sampler.state_dict(consumed=12)  # ... the training loop used 12
    resumed = DistributedSampler(range(100), 2, 1, seed=3)
    resumed.load_state_dict(state)
    assert list(resumed) == expected[12:]
    with pytest.raises(ValueError, match=r"consumed must be in \[0, 20\].*got 21"):
        sampler.state_dict(consumed=21)
    with pytest.raises(ValueError, match=r"consumed must be in \[0, 20\].*got -1"):
        sampler.state_dict(consumed=-1)


def _state(**changes: Any) -> dict[str, Any]:
    sampler = DistributedSampler(range(10), 2, 0)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    state.update(changes)
    return state


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (_state(dataset_length=11), "'dataset_length' is 11, but the dataset now has 10"),
        (_state(version=2), "'version' is 2; this version of dsampler reads state version 1"),
        (_state(taken=-1), "'taken' must be at least 0, got -1"),
        (_state(taken=9), "'taken' is 9, more than the 5 the saved rank"),
        (_state(taken="1"), "'taken' must be an integer, got '1'"),
        (_state(shuffle="yes"), "'shuffle' must be a bool"),
        (_state(sampler="DistributedBatchSampler"), "'sampler' is 'DistributedBatchSampler'"),
        (_state(tail="even"), "'tail' must be one of"),
        (_state(rank=2), "'rank' is 2, outside world_size=2"),
        (_state(world_size=0), "'world_size' must be at least 1, got 0"),
        (
            _state(permutation="feistel"),
            "'permutation' is 'feistel', this sampler draws 'randperm'",
        ),
        (_state(stop=0), "'taken' is 1, more than the 0"),
        ({k: v for k, v in _state().items() if k != "taken"}, "'taken' is missing"),
        ([1, 2], "state must be a dict from state_dict"),
    ],
)
def test_a_state_that_does_not_fit_raises_naming_the_field(state: Any, message: str) -> None:
    sampler = DistributedSampler(range(10), 2, 0)
    with pytest.raises(ValueError, match=message):
        sampler.load_state_dict(state)


def test_a_state_of_an_unshuffled_sampler_does_not_load_into_a_shuffled_one() -> None:
    saved = DistributedSampler(range(10), 2, 0, shuffle=False)
    next(iter(saved))
    with pytest.raises(ValueError, match="'shuffle' is False, this sampler's shuffle is True"):
        DistributedSampler(range(10), 2, 0).load_state_dict(saved.state_dict())


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
    """Iterate, save, resume on a random world size and tail, set_epoch; check the epoch.

    The model keeps, per epoch, the multiset of what the ranks consumed in lockstep; after
    every step it checks the tail policy's guarantee over what the epoch has consumed.
    """

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
        if self.exhausted or any(it.taken != self.iterators[0].taken for it in self.iterators):
            return  # lockstep only: uneven shares may end one step apart
        complete = all(it.taken == it.count for it in self.iterators)
        state = json.loads(json.dumps(self.samplers[rank % self.world].state_dict()))
        # Saved after the last index, a state describes a fresh iteration of the epoch.
        self._build(world, tail, None if complete else state)

    @rule()
    def next_epoch(self) -> None:
        for _ in self.iterators[0]:
            pass
        self.epoch += 1
        self._build(self.world, self.tail, state=None)

    @invariant()
    def guarantees_hold(self) -> None:
        extra = sum((self.consumed - Counter(range(self.size))).values())
        if self.kind == "wrapper":
            return  # a random sampler's stream may repeat indices: checked elsewhere
        if self.tails == {"uneven"}:
            assert extra == 0
        if "pad" not in self.tails:
            assert extra == 0
        if self.exhausted and "drop" not in self.tails:
            assert set(self.consumed) == set(range(self.size))


Resuming.TestCase.settings = settings(settings.default, stateful_step_count=12)
test_resuming_state_machine = Resuming.TestCase


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


def test_a_stop_that_the_other_fields_do_not_give_is_corrupted() -> None:
    sampler = DistributedSampler(range(100), 4, 1)
    list(islice(iter(sampler), 5))
    state = sampler.state_dict()
    for field, value in (("stop", 40), ("stop", 104)):
        broken = {**state, field: value}
        with pytest.raises(ValueError, match=f"'stop' is {value}, but 100 samples .* end at 100"):
            DistributedSampler(range(100), 4, 1).load_state_dict(broken)
    batched = DistributedBatchSampler(range(100), 3, 4, 1)
    next(iter(batched))
    with pytest.raises(ValueError, match="'stop' is 7, but the batches it describes end at"):
        DistributedBatchSampler(range(100), 3, 4, 1).load_state_dict(
            {**batched.state_dict(), "stop": 7}
        )


def test_a_sampler_with_overridden_sizes_loads_its_own_state() -> None:
    sampler = DistributedSampler(range(10), 2, 1)
    sampler.num_samples, sampler.total_size = 8, 16  # pads further, as a subclass may
    expected = list(sampler)
    iterator = iter(sampler)
    list(islice(iterator, 3))
    resumed = DistributedSampler(range(10), 2, 1)
    resumed.num_samples, resumed.total_size = 8, 16
    resumed.load_state_dict(sampler.state_dict())
    assert list(resumed) == expected[3:]
