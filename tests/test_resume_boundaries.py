"""Resume at its boundaries: the epoch's end, the ranks whose share ended first, what the
loop consumed, copies, threads, JSON, corrupt states and subclasses that skip __init__."""

from __future__ import annotations

import copy
import json
import pickle
import threading
import warnings
from collections import Counter
from itertools import islice
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    SamplerWarning,
)
from samplers.plan import TAILS

KINDS = ("sampler", "batch", "wrapper", "sampler-feistel", "batch-feistel")


def make(kind: str, size: int, world: int, rank: int, tail: str = "uneven", **options: Any):
    kind, _, permutation = kind.partition("-")
    extra = {"permutation": permutation} if permutation else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        if kind == "sampler":
            return DistributedSampler(range(size), world, rank, tail=tail, **extra, **options)
        if kind == "batch":
            return DistributedBatchSampler(
                range(size), 3, world, rank, tail=tail, **extra, **options
            )
        inner = RandomSampler(range(size)) if size else SequentialSampler(range(0))
        return DistributedSamplerWrapper(inner, world, rank, tail=tail, **options)


def flat(items: list[Any]) -> list[int]:
    return [i for item in items for i in (item if isinstance(item, list) else [item])]


def run_epoch(samplers: list[Any]) -> list[Any]:
    """Every rank iterates its whole share, as each rank's loop does."""
    return [item for sampler in samplers for item in sampler]


# The epoch's end ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("new_world", [4, 3, 5])
def test_a_checkpoint_after_an_epochs_last_step_replays_nothing(
    kind: str, tail: str, new_world: int
) -> None:
    """Saved after epoch 1's last step and resumed with the usual loop, epoch 1 yields
    nothing and epochs 2 and 3 are the uninterrupted run's (on the new world size)."""
    old = [make(kind, 10, 4, rank, tail, seed=3) for rank in range(4)]
    for epoch in range(2):
        for sampler in old:
            sampler.set_epoch(epoch)
        run_epoch(old)
    states = [sampler.state_dict() for sampler in old]
    assert all(state == states[0] for state in states)
    assert (states[0]["epoch"], states[0]["finished"]) == (1, True)
    checkpoint = json.dumps(states[0])

    uninterrupted = [make(kind, 10, new_world, rank, tail, seed=3) for rank in range(new_world)]
    resumed = [make(kind, 10, new_world, rank, tail, seed=0) for rank in range(new_world)]
    for sampler in resumed:
        sampler.load_state_dict(json.loads(checkpoint))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for epoch in range(1, 4):  # for epoch in range(saved_epoch, epochs)
            for sampler in resumed + uninterrupted:
                sampler.set_epoch(epoch)
            got = [list(sampler) for sampler in resumed]
            expected = [list(sampler) for sampler in uninterrupted]
            assert got == ([[]] * new_world if epoch == 1 else expected)


@pytest.mark.parametrize("kind", KINDS)
def test_after_an_epoch_end_state_auto_epoch_starts_the_next_epoch(kind: str) -> None:
    saved = make(kind, 20, 2, 1, seed=4, auto_epoch=True)
    list(saved)
    list(saved)  # epoch 1 (auto)
    expected = list(saved)  # epoch 2
    state = make(kind, 20, 2, 1, seed=4, auto_epoch=True)
    list(state)
    list(state)
    resumed = make(kind, 20, 2, 1, seed=4, auto_epoch=True)
    resumed.load_state_dict(state.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert list(resumed) == expected
    assert resumed.epoch == 2


@pytest.mark.parametrize("kind", ["sampler", "batch", "wrapper"])
def test_iterating_a_finished_epoch_without_choosing_it_warns_once_and_yields_nothing(
    kind: str,
) -> None:
    saved = make(kind, 20, 2, 0)
    list(saved)
    resumed = make(kind, 20, 2, 0)
    resumed.load_state_dict(saved.state_dict())
    with pytest.warns(UserWarning, match=r"yields nothing: .* epoch 0, which is finished"):
        assert list(resumed) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert list(resumed) == []  # every pass of the finished epoch, warned once
        resumed.set_epoch(1)
        assert list(resumed) == _epoch_of(kind, 20, 1)


@pytest.mark.parametrize("kind", ["sampler", "batch", "wrapper"])
def test_moving_to_another_epoch_warns_when_it_skips_the_rest_of_a_loaded_one(kind: str) -> None:
    saved = make(kind, 40, 2, 0)
    list(islice(iter(saved), 3))
    resumed = make(kind, 40, 2, 0)
    resumed.load_state_dict(saved.state_dict())
    with pytest.warns(UserWarning, match=r"the rest of epoch 0 is skipped"):
        resumed.set_epoch(1)
    assert list(resumed) == _epoch_of(kind, 40, 1)
    finished = make(kind, 40, 2, 0)
    list(finished)
    quiet = make(kind, 40, 2, 0)
    quiet.load_state_dict(finished.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        quiet.set_epoch(1)  # nothing of epoch 0 was left: nothing skipped
    assert list(quiet) == _epoch_of(kind, 40, 1)


def _epoch_of(kind: str, size: int, epoch: int) -> list[Any]:
    sampler = make(kind, size, 2, 0)
    sampler.set_epoch(epoch)
    return list(sampler)


# One state for all ranks --------------------------------------------------------------------


def test_ranks_whose_share_ended_first_save_the_same_state_as_the_others() -> None:
    """10 samples on 4 ranks: ranks 2 and 3 have one sample fewer."""
    samplers = [DistributedSampler(range(10), 4, rank, tail="uneven") for rank in range(4)]
    run_epoch(samplers)
    states = [sampler.state_dict() for sampler in samplers]
    assert all(state == states[0] for state in states)
    assert states[0]["finished"]
    new = [DistributedSampler(range(10), 3, rank, tail="uneven") for rank in range(3)]
    for sampler in new:
        sampler.load_state_dict(states[2])
        sampler.set_epoch(0)
    assert run_epoch(new) == []


def test_per_rank_states_with_auto_epoch_keep_the_ranks_on_one_epoch() -> None:
    """Each rank loads its own state; with uneven shares they used to drift apart."""
    ranks = [
        DistributedSampler(range(10), 4, rank, tail="uneven", auto_epoch=True) for rank in range(4)
    ]
    seen_per_epoch = []
    for _ in range(3):
        seen = Counter(run_epoch(ranks))
        seen_per_epoch.append(seen)
        states = [json.loads(json.dumps(sampler.state_dict())) for sampler in ranks]
        ranks = [
            DistributedSampler(range(10), 4, rank, tail="uneven", auto_epoch=True)
            for rank in range(4)
        ]
        for sampler, state in zip(ranks, states, strict=True):
            sampler.load_state_dict(state)
    assert all(seen == Counter(range(10)) for seen in seen_per_epoch)
    iterators = [iter(sampler) for sampler in ranks]
    assert {sampler.epoch for sampler in ranks} == {3}
    del iterators


@given(
    st.sampled_from(KINDS),
    st.integers(0, 80),
    st.integers(1, 7),
    st.sampled_from(TAILS),
    st.data(),
)
def test_at_every_step_every_rank_saves_the_same_state(kind, size, world, tail, data) -> None:
    samplers = [make(kind, size, world, rank, tail) for rank in range(world)]
    iterators = [iter(sampler) for sampler in samplers]
    longest = max(len(sampler) for sampler in samplers)
    for _ in range(data.draw(st.integers(0, longest + 1))):
        for iterator in iterators:
            next(iterator, None)
    states = [sampler.state_dict() for sampler in samplers]
    assert all(state == states[0] for state in states)


# What the loop consumed --------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("way", ["sampler", "batch_sampler"])
def test_a_dataloader_with_workers_needs_no_consumed(way: str, workers: int) -> None:
    """The DataLoader fetched ahead; the state records the step the loop reached."""

    def build(seed: int) -> tuple[Any, DataLoader]:
        if way == "sampler":
            sampler: Any = DistributedSampler(range(100), 2, 1, seed=seed)
            return sampler, DataLoader(
                range(100), batch_size=4, sampler=sampler, num_workers=workers
            )
        sampler = DistributedBatchSampler(range(100), 4, 2, 1, seed=seed)
        return sampler, DataLoader(range(100), batch_sampler=sampler, num_workers=workers)

    _, whole = build(3)
    expected = [batch.tolist() for batch in whole]
    sampler, loader = build(3)
    for step, _ in enumerate(loader, start=1):
        if step == 4:
            break
    state = sampler.state_dict()  # after the loop was left: its workers have shut down
    assert state["position"] == 4 * 4 * 2
    resumed_sampler, resumed = build(0)
    resumed_sampler.load_state_dict(state)
    assert [batch.tolist() for batch in resumed] == expected[4:]
    # Taken inside the loop, at the last step, and after it ended.
    sampler, loader = build(3)
    inside = []
    for _ in loader:
        inside.append(sampler.state_dict())
    assert [s["position"] for s in inside[:-1]] == [8 * (k + 1) for k in range(len(inside) - 1)]
    assert inside[-1]["finished"] and sampler.state_dict()["finished"]


@pytest.mark.parametrize("way", ["sampler", "batch_sampler"])
def test_double_and_triple_resumes_on_4_then_3_then_5_ranks(way: str) -> None:
    """Each run saves mid-epoch with a DataLoader with workers; every sample once."""
    size, batch = 101, 4

    def ranks(world: int, state: dict[str, Any] | None) -> list[tuple[Any, Any]]:
        built = []
        for rank in range(world):
            if way == "sampler":
                sampler: Any = DistributedSampler(range(size), world, rank, seed=9, tail="uneven")
                loader = DataLoader(range(size), batch_size=batch, sampler=sampler, num_workers=2)
            else:
                sampler = DistributedBatchSampler(
                    range(size), batch, world, rank, seed=9, tail="uneven"
                )
                loader = DataLoader(range(size), batch_sampler=sampler, num_workers=2)
            if state is not None:
                sampler.load_state_dict(state)
            sampler.set_epoch(2)
            built.append((sampler, iter(loader)))
        return built

    seen: Counter[int] = Counter()
    state = None
    for world, steps in ((4, 2), (3, 3), (5, None)):
        built = ranks(world, state)
        for _, iterator in built:
            taken = list(islice(iterator, steps)) if steps is not None else list(iterator)
            seen.update(flat([b.tolist() for b in taken]))
        states = [sampler.state_dict() for sampler, _ in built]
        assert all(s == states[0] for s in states)
        state = json.loads(json.dumps(states[0]))
        del built
    assert seen == Counter(range(size))
    assert state is not None and state["finished"]


def test_consumed_counts_steps_times_the_batch_size_since_the_iteration_began() -> None:
    """A loop the sampler cannot see: consumed = steps x batch size of this iteration."""
    expected = list(DistributedSampler(range(100), 2, 1, seed=3))
    sampler = DistributedSampler(range(100), 2, 1, seed=3)
    iterator = iter(sampler)
    list(islice(iterator, 20))  # fetched 20 ...
    state = sampler.state_dict(consumed=12)  # ... the loop used 3 steps of 4
    resumed = DistributedSampler(range(100), 3, 1, seed=3)  # another world size
    resumed.load_state_dict(state)
    again = iter(resumed)
    list(islice(again, 10))  # fetched ...
    second = resumed.state_dict(consumed=8)  # ... used 2 steps of 4 since the resume
    assert second["position"] == 12 * 2 + 8 * 3
    third = DistributedSampler(range(100), 2, 1, seed=3)
    third.load_state_dict(second)
    assert list(third) == expected[(12 * 2 + 8 * 3) // 2 :]
    with pytest.raises(ValueError, match=r"consumed must be at most 20 .*got 21"):
        sampler.state_dict(consumed=21)
    with pytest.raises(ValueError, match=r"consumed must be at least 0, got -1"):
        sampler.state_dict(consumed=-1)


def test_consumed_past_a_short_share_means_the_step_count_every_rank_agrees_on() -> None:
    """7 samples on 2 ranks, batches of 2: rank 1's second batch holds 1 sample."""
    ranks = [
        DistributedSampler(range(7), 2, rank, tail="uneven", shuffle=False) for rank in range(2)
    ]
    for sampler in ranks:
        list(sampler)
    # After step 1 both ranks count 2; after step 2 both count 4, rank 1 included.
    states = [sampler.state_dict(consumed=2) for sampler in ranks]
    assert states[0] == states[1] and states[0]["position"] == 4 and not states[0]["finished"]
    done = [sampler.state_dict(consumed=4) for sampler in ranks]
    assert done[0] == done[1] and done[0]["finished"]


def test_consumed_before_any_iteration_raises() -> None:
    sampler = DistributedSampler(range(10), 2, 0)
    with pytest.raises(ValueError, match=r"consumed=1000000000, but this sampler has not"):
        sampler.state_dict(consumed=10**9)
    assert sampler.state_dict(consumed=0) == sampler.state_dict()


# Copies, threads, JSON -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["deepcopy", "pickle", "copy"])
def test_a_copy_taken_mid_epoch_behaves_like_the_original(kind: str, how: str) -> None:
    original = make(kind, 30, 2, 1, auto_epoch=True)
    list(original)  # epoch 0
    iterator = iter(original)  # epoch 1
    list(islice(iterator, 4))
    if how == "deepcopy":
        clone = copy.deepcopy(original)
    elif how == "pickle":
        clone = pickle.loads(pickle.dumps(original))
    else:
        clone = copy.copy(original)
    assert clone.state_dict() == original.state_dict()
    for _ in range(2):
        assert list(clone) == list(original)  # epochs 2 and 3, for both
        assert clone.epoch == original.epoch
    assert list(iterator) == _auto_epochs(kind, 2)[1][4:]  # undisturbed by the copies


def _auto_epochs(kind: str, count: int) -> list[list[Any]]:
    sampler = make(kind, 30, 2, 1, auto_epoch=True)
    return [list(sampler) for _ in range(count)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_copied_iterator_yields_exactly_the_rest(kind: str) -> None:
    sampler = make(kind, 50, 2, 0)
    iterator = iter(sampler)
    head = list(islice(iterator, 7))
    for clone in (copy.deepcopy(iterator), pickle.loads(pickle.dumps(iterator))):
        assert head + list(clone) == list(make(kind, 50, 2, 0))
    assert len(head) + len(list(iterator)) == len(sampler)


def test_state_dict_from_another_thread_never_counts_more_than_was_handed_out() -> None:
    sampler = DistributedSampler(range(400_000), 1, 0, shuffle=False, tail="uneven")
    iterator = iter(sampler)
    handed = [0]
    stop = threading.Event()
    overshoot = []

    def watch() -> None:
        while not stop.is_set():
            position = sampler.state_dict()["position"]
            seen = handed[0]
            if position > seen + 1:  # the item in flight may count already
                overshoot.append((position, seen))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in iterator:
            handed[0] += 1
    finally:
        stop.set()
        watcher.join()
    assert not overshoot


def test_the_state_holds_plain_json_types_after_any_accepted_attribute_write() -> None:
    sampler = DistributedSampler(range(10), 2, 0)
    sampler.epoch = np.int64(3)
    sampler.rank = torch.tensor(1)
    sampler.seed = np.int32(5)
    next(iter(sampler))
    state = sampler.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert all(type(value) in (int, bool, str) for value in state.values())
    assert (state["epoch"], state["seed"]) == (3, 5)


# Corrupt states --------------------------------------------------------------------------------


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
        (
            _state(version=3),
            "'version' is 3; this version of dsampler reads state versions 1 and 2",
        ),
        (_state(version=2.0), "'version' must be int, got 2.0"),
        (_state(version=True), "'version' must be int, got True"),
        (_state(position=11), r"'position' is 11, outside the epoch's positions \[0, 10\]"),
        (_state(position=-1), r"'position' is -1, outside"),
        (_state(position=10**6), r"'position' is 1000000, outside"),
        (_state(position="1"), "'position' must be int, got '1'"),
        (_state(finished="yes"), "'finished' must be bool"),
        (_state(shuffle="yes"), "'shuffle' must be bool"),
        (_state(sampler="DistributedBatchSampler"), "'sampler' is 'DistributedBatchSampler'"),
        (
            _state(permutation="feistel"),
            "'permutation' is 'feistel', this sampler draws 'randperm'",
        ),
        (_state(seed=2**64, epoch=1), "'seed' and 'epoch' do not fit"),
        (_state(world_size=10**12), "'world_size' is not one dsampler writes"),
        ({k: v for k, v in _state().items() if k != "position"}, "'position' is missing"),
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


def test_a_version_1_state_still_loads() -> None:
    """dsampler 0.1.0 wrote per-rank counts; they still resume their position."""
    expected = list(DistributedSampler(range(100), 4, 1, seed=2))
    version_1 = {
        "version": 1, "sampler": "DistributedSampler", "epoch": 0, "last_epoch": None,
        "seed": 2, "shuffle": True, "permutation": "randperm", "tail": "pad",
        "dataset_length": 100, "world_size": 4, "rank": 1, "batch_size": None,
        "start": 0, "stop": 100, "taken": 5,
    }  # fmt: skip
    resumed = DistributedSampler(range(100), 4, 1, seed=0)
    resumed.load_state_dict(version_1)
    assert list(resumed) == expected[5:]
    with pytest.raises(ValueError, match="version 1 state fields do not fit"):
        resumed.load_state_dict({**version_1, "stop": -3})


# Subclasses that skip __init__ ------------------------------------------------------------


class SkipsInit(DistributedSampler):
    """Written like transformers' DistributedLengthGroupedSampler: sets what it needs itself."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int) -> None:
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.num_samples = -(-len(dataset) // num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.seed = 0

    def __iter__(self):
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.dataset), generator=generator).tolist()
        order += order[: self.total_size - len(order)]
        return iter(order[self.rank : self.total_size : self.num_replicas])


def test_a_subclass_that_skips_init_gets_the_stock_behaviour() -> None:
    sampler = SkipsInit(range(10), 4, 1)
    sampler.set_epoch(3)
    assert sampler.epoch == 3
    assert len(sampler) == 3
    assert repr(sampler).startswith("<")
    assert len(list(sampler)) == 3
    assert list(sampler) != list(SkipsInit(range(10), 4, 1))  # the epoch reached __iter__
    with pytest.raises(TypeError, match="did not run SamplerCore's __init__"):
        sampler.state_dict()


def test_transformers_length_grouped_sampler_on_ours() -> None:
    """transformers' DistributedLengthGroupedSampler, its methods on our base class."""
    trainer_utils = pytest.importorskip(
        "transformers.trainer_pt_utils", reason="transformers is not installed (test extra)"
    )
    theirs = trainer_utils.DistributedLengthGroupedSampler
    namespace = {k: v for k, v in vars(theirs).items() if k not in ("__dict__", "__weakref__")}
    rebased = type(theirs.__name__, (DistributedSampler,), namespace)
    lengths = [(i * 7) % 23 + 1 for i in range(50)]
    sampler = rebased(4, lengths=lengths, num_replicas=2, rank=1)
    stock = theirs(4, lengths=lengths, num_replicas=2, rank=1)
    assert list(sampler) == list(stock)
    for each in (sampler, stock):
        each.set_epoch(1)
    assert sampler.epoch == 1
    assert list(sampler) == list(stock) != list(rebased(4, lengths=lengths, num_replicas=2, rank=1))
    assert len(sampler) == len(stock) == 25
    assert "DistributedLengthGroupedSampler" in repr(sampler)
