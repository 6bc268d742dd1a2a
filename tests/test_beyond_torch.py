"""The guarantees ours adds: tail policies, batch-aware sharding, safe epochs and seeds,
wrapping any sampler, and exact unsharding. Each is a property over dataset size, world
size and batch size (hypothesis), plus the edge cases the docstrings promise."""

from __future__ import annotations

import pickle
import random
import warnings
from collections import Counter
from itertools import islice
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import StockSampler, dataset_sizes, seeds
from torch.utils.data import (
    DataLoader,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    SamplerWarning,
    SeedTypeError,
    unshard,
)
from samplers.consistency import compare_settings
from samplers.iterators import FEISTEL_CHUNK, FIRST_CHUNK
from samplers.plan import PERMUTATIONS, TAILS, EpochPlan

tails = st.sampled_from(TAILS)
permutations = st.sampled_from(PERMUTATIONS)
worlds = st.integers(1, 16)
batches = st.integers(1, 16)


def _quiet(make: Any, *arguments: Any, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        return make(*arguments, **options)


def shares(size: int, world: int, tail: str, seed: int = 0, epoch: int = 0, shuffle=True):
    samplers_ = [
        DistributedSampler(range(size), world, rank, shuffle=shuffle, seed=seed, tail=tail)
        for rank in range(world)
    ]
    for sampler in samplers_:
        sampler.set_epoch(epoch)
    return samplers_, [list(sampler) for sampler in samplers_]


def batch_shares(
    size: int,
    world: int,
    batch: int,
    tail: str,
    seed: int = 0,
    epoch: int = 0,
    permutation: str = "randperm",
):
    samplers_ = [
        DistributedBatchSampler(
            range(size), batch, world, rank, seed=seed, tail=tail, permutation=permutation
        )
        for rank in range(world)
    ]
    for sampler in samplers_:
        sampler.set_epoch(epoch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        received = [list(sampler) for sampler in samplers_]
    # Every rank warns, once, exactly when the ranks' batch counts differ (tail="uneven").
    unequal = len({len(batches) for batches in received}) > 1
    assert [w.category for w in caught] == [SamplerWarning] * (world if unequal else 0)
    assert all("batches this epoch" in str(w.message) for w in caught)
    return samplers_, received


# Tail policies of DistributedSampler.


@given(dataset_sizes(3_000), worlds, seeds, st.integers(0, 100), st.booleans())
def test_uneven_takes_every_sample_exactly_once_in_the_stock_order(
    size: int, world: int, seed: int, epoch: int, shuffle: bool
) -> None:
    samplers_, received = shares(size, world, "uneven", seed, epoch, shuffle)
    assert sorted(i for share in received for i in share) == list(range(size))
    lengths = [len(share) for share in received]
    assert max(lengths) - min(lengths) <= 1
    assert lengths == [len(sampler) for sampler in samplers_]
    stock = _quiet(StockSampler, range(size), 1, 0, shuffle=shuffle, seed=seed)
    stock.set_epoch(epoch)
    order = list(stock)  # one rank: the stock epoch order itself
    assert received == [order[rank::world] for rank in range(world)]


@given(dataset_sizes(3_000), worlds, tails, seeds, st.integers(0, 100))
def test_feistel_order_is_a_permutation_laid_out_like_randperm(
    size: int, world: int, tail: str, seed: int, epoch: int
) -> None:
    received = []
    for rank in range(world):
        sampler = _quiet(
            DistributedSampler,
            range(size),
            world,
            rank,
            seed=seed,
            tail=tail,
            permutation="feistel",
        )
        sampler.set_epoch(epoch)
        received.append(list(sampler))
        assert len(received[-1]) == len(sampler)
    plan = EpochPlan.of(
        size, world, tail=tail, shuffle=True, seed=seed, epoch=epoch, permutation="feistel"
    )
    order = plan.order.materialise().tolist()
    assert sorted(order) == list(range(size))
    stock_layout = EpochPlan.of(size, world, tail=tail, shuffle=False, seed=0, epoch=0)
    assert received == [
        [order[p] for p in stock_layout.rank_indices(rank).tolist()] for rank in range(world)
    ]


def test_a_feistel_share_is_computed_in_few_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank taking less than half of the order computes its share in chunks: the first
    small, so the first index comes at once, every later one FEISTEL_CHUNK positions, as
    each chunk pays a fixed cost for walking its cycles. A copy pickled inside the second
    chunk yields exactly the rest."""
    share = FIRST_CHUNK + FEISTEL_CHUNK + 1000
    calls: list[tuple[int, int | None]] = []
    original = EpochPlan.rank_indices

    def recording(plan: EpochPlan, rank: int, lo: int = 0, hi: int | None = None) -> Any:
        calls.append((lo, hi))
        return original(plan, rank, lo, hi)

    monkeypatch.setattr(EpochPlan, "rank_indices", recording)
    sampler = DistributedSampler(range(3 * share), 3, 1, seed=3, permutation="feistel")
    iterator = iter(sampler)
    head = list(islice(iterator, FIRST_CHUNK + 5))
    copy = pickle.loads(pickle.dumps(iterator))
    rest = list(iterator)
    second = FIRST_CHUNK + FEISTEL_CHUNK
    assert calls[:3] == [(0, FIRST_CHUNK), (FIRST_CHUNK, second), (second, share)]
    plan = EpochPlan.of(3 * share, 3, shuffle=True, seed=3, epoch=0, permutation="feistel")
    assert head + rest == plan.order.materialise()[1::3].tolist()
    assert list(copy) == rest


@pytest.mark.parametrize(("size", "world", "held"), [(100_000, 1, True), (70_000, 1, True),
    (100_000, 2, False), (50_000, 2, False), (2**20, 1, True), (2**20 + 1, 1, False)])  # fmt: skip
def test_a_rank_taking_most_of_a_small_feistel_order_holds_it(
    size: int, world: int, held: bool
) -> None:
    """Computing the whole order at once costs less than walking its chunks' cycles when
    the rank takes at least half of a domain of at most 2**WHOLE_BITS values; then the
    order is held (int32) like a drawn one. Either way a rank receives the same indices,
    and a copy pickled mid-epoch carries settings, not the order."""
    plan = EpochPlan.of(size, world, shuffle=True, seed=8, epoch=2, permutation="feistel")
    share = plan.rank_share(world - 1)
    assert (share is not None) == held
    if share is not None:
        assert share.dtype == torch.int32
    sampler = DistributedSampler(range(size), world, world - 1, seed=8, permutation="feistel")
    sampler.set_epoch(2)
    iterator = iter(sampler)
    head = list(islice(iterator, 5000))
    copy = pickle.loads(pickle.dumps(iterator))
    assert len(pickle.dumps(iterator)) < 2000
    rest = list(iterator)
    assert head + rest == plan.rank_indices(world - 1).tolist()
    assert list(copy) == rest


@given(dataset_sizes(2_000), worlds, seeds, st.booleans())
def test_pad_and_drop_are_the_stock_drop_last(size, world, seed, shuffle) -> None:
    for tail, drop_last in (("pad", False), ("drop", True)):
        for rank in range(world):
            arguments = (range(size), world, rank, shuffle, seed)
            ours = _quiet(DistributedSampler, *arguments, tail=tail)
            stock = _quiet(StockSampler, *arguments, drop_last)
            assert list(ours) == list(stock)
            assert (len(ours), ours.total_size, ours.drop_last) == (
                len(stock),
                stock.total_size,
                drop_last,
            )


def test_contradictory_or_unknown_tails_raise() -> None:
    for tail in ("pad", "uneven"):
        with pytest.raises(ValueError, match=f"drop_last=True contradicts tail='{tail}'"):
            DistributedSampler(range(5), 2, 0, drop_last=True, tail=tail)  # type: ignore[arg-type]
    assert DistributedSampler(range(5), 2, 0, drop_last=True, tail="drop").drop_last
    for bad in ("even", 1, True):
        with pytest.raises(ValueError, match=f"tail must be one of .*got {bad!r}"):
            DistributedSampler(range(5), 2, 0, tail=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="tail must be one of"):
            DistributedBatchSampler(range(5), 2, 2, 0, tail=bad)  # type: ignore[arg-type]


# Batch-aware sharding.


@given(dataset_sizes(3_000), worlds, batches, tails, seeds, st.integers(0, 50), permutations)
def test_batch_sampler_guarantees(size, world, batch, tail, seed, epoch, permutation) -> None:
    samplers_, received = batch_shares(size, world, batch, tail, seed, epoch, permutation)
    counts = [len(rank_batches) for rank_batches in received]
    assert counts == [len(sampler) for sampler in samplers_]
    flat = Counter(i for rank_batches in received for b in rank_batches for i in b)
    handed = sum(flat.values())
    sizes = [len(b) for rank_batches in received for b in rank_batches]
    if tail == "uneven" and batch == 1 and size % world:
        pass  # the documented exception: see the test below
    elif size >= world:
        assert len(set(counts)) == 1, counts
    if tail == "pad":
        assert all(s == batch for s in sizes)
        assert set(flat) == set(range(size))
        assert handed - size < world * batch
    elif tail == "drop":
        assert all(s == batch for s in sizes)
        assert max(flat.values(), default=1) == 1
        assert size - handed < world * batch
    else:
        assert sorted(flat.elements()) == list(range(size))
        assert max(sizes, default=0) - min(sizes, default=0) <= 1
        if size >= world * batch:
            assert min(sizes) >= batch // 2


@given(dataset_sizes(2_000), worlds, batches, tails, seeds, permutations)
def test_after_k_steps_the_ranks_consumed_a_prefix_of_the_epoch_order(
    size, world, batch, tail, seed, permutation
) -> None:
    samplers_, received = batch_shares(size, world, batch, tail, seed, 0, permutation)
    order = samplers_[0].plan().order.materialise().tolist()
    steps = len(received[0])
    consumed: list[int] = []
    for step in range(steps):
        consumed += [
            i for rank in range(world) if step < len(received[rank]) for i in received[rank][step]
        ]
        padded = [order[p % size] for p in range(len(consumed))]
        assert consumed == padded


@given(st.integers(1, 300), st.integers(2, 16))
def test_uneven_batch_size_one_is_equal_only_when_the_world_divides(size, world) -> None:
    samplers_, received = batch_shares(size, world, 1, "uneven")
    counts = [len(rank_batches) for rank_batches in received]
    assert counts == [len(sampler) for sampler in samplers_]
    assert all(batch for rank_batches in received for batch in rank_batches)  # none empty
    assert (len(set(counts)) == 1) == (size % world == 0)
    assert max(counts) - min(counts) <= 1
    assert sorted(i for r in received for b in r for i in b) == list(range(size))
    samplers_[-1].set_epoch(0)  # epoch 0 again, on purpose (no "iterated again" warning)
    loader = DataLoader(range(size), batch_sampler=samplers_[-1])
    assert [b.tolist() for b in loader] == received[-1]  # default collate: no empty batch


def test_batch_sampler_in_a_dataloader_and_its_length() -> None:
    sampler = DistributedBatchSampler(range(23), 4, num_replicas=3, rank=2, seed=1, tail="pad")
    loader = DataLoader(range(23), batch_sampler=sampler)
    assert len(loader) == len(sampler) == 2
    from_loader = [b.tolist() for b in loader]
    sampler.set_epoch(0)  # epoch 0 again, on purpose
    assert from_loader == list(sampler)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"batch_size": 0}, ValueError, "batch_size must be at least 1, got 0"),
        ({"batch_size": True}, TypeError, "batch_size must be an integer, got bool True"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an integer, got float 2.0"),
        ({"rank": 3}, ValueError, r"Invalid rank 3, rank should be in the interval \[0, 2\]"),
        ({"num_replicas": 1.5}, TypeError, "num_replicas must be an integer, got float 1.5"),
        ({"shuffle": "no"}, TypeError, "shuffle must be a bool, got str 'no'"),
        ({"seed": 1.5}, TypeError, "seed must be an integer, got float 1.5"),
        ({"auto_epoch": "yes"}, TypeError, "auto_epoch must be a bool, got str 'yes'"),
    ],
)
def test_batch_sampler_bad_arguments(arguments: dict, error: type, message: str) -> None:
    values = {"batch_size": 2, "num_replicas": 3, "rank": 0, **arguments}
    with pytest.raises(error, match=message):
        DistributedBatchSampler(range(10), **values)


def test_a_dataset_without_length_is_named() -> None:
    for make in (
        lambda: DistributedBatchSampler(iter(range(3)), 2, 2, 0),
        lambda: DistributedSampler(iter(range(3)), 2, 0, tail="uneven"),
    ):
        with pytest.raises(TypeError, match="'range_iterator' has no len"):
            make()


# Safe epochs.


def test_a_repeated_shuffled_epoch_warns_once_with_the_fix() -> None:
    for make in (
        lambda: DistributedSampler(range(10), 2, 0),
        lambda: DistributedBatchSampler(range(10), 2, 2, 0),
    ):
        sampler = make()
        first = list(sampler)
        with pytest.warns(UserWarning, match=r"without set_epoch.*set_epoch\(epoch\)"):
            again = list(sampler)
        assert again == first  # the order stays the stock one
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            list(sampler)  # once only
            sampler.set_epoch(1)
            list(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unshuffled = DistributedSampler(range(10), 2, 0, shuffle=False)
        assert list(unshuffled) == list(unshuffled)


def test_auto_epoch_advances_on_each_new_iteration() -> None:
    sampler = DistributedSampler(range(50), 2, 1, seed=3, auto_epoch=True)
    stock = StockSampler(range(50), 2, 1, seed=3)
    for epoch in range(3):
        stock.set_epoch(epoch)
        assert list(sampler) == list(stock)
        assert sampler.epoch == epoch
    sampler.set_epoch(10)  # an explicit epoch wins
    stock.set_epoch(10)
    assert list(sampler) == list(stock)


# Seeds and consistency.


@pytest.mark.parametrize(
    "build",
    [
        lambda: DistributedSampler(range(4), 2, 0, seed=None),
        lambda: DistributedSampler(range(4), 2, 0, shuffle=False, seed=None),
        lambda: DistributedBatchSampler(range(4), 2, 2, 0, seed=None),
        lambda: DistributedSamplerWrapper(SequentialSampler(range(4)), 2, 0, seed=None),
    ],
    ids=["sampler", "unshuffled", "batch-sampler", "wrapper"],
)
def test_seed_none_without_a_process_group_says_to_pass_a_seed(build) -> None:
    # Each process would draw its own seed: the ranks would shard different orders.
    with pytest.raises(TypeError, match=r"^seed=None .* pass seed=<an integer>") as raised:
        build()
    assert isinstance(raised.value, SeedTypeError)


def test_compare_settings_names_the_ranks_and_values() -> None:
    same = {"dataset length": 10, "seed": 0}
    assert compare_settings([{**same, "rank": 0}, {**same, "rank": 1}]) is None
    problem = compare_settings(
        [{**same, "rank": 0}, {**same, "rank": 1, "seed": 7}, {**same, "rank": 2}]
    )
    assert problem == "seed differs (ranks [0, 2]: 0; ranks [1]: 7)"
    twice = compare_settings([{**same, "rank": 0}, {**same, "rank": 0}])
    assert twice == "the samplers on ranks [0, 1] have ranks [0, 0], expected each of 0..1 once"


def test_check_consistent_without_a_process_group_has_nothing_to_compare() -> None:
    DistributedSampler(range(4), 2, 0).check_consistent()
    DistributedBatchSampler(range(4), 2, 2, 0).check_consistent()


# Wrapping any sampler.


class RecordingSampler(SequentialSampler):
    """A sequential sampler that records the epochs it is given."""

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class GlobalRandomSampler:
    """A custom sampler that draws from Python's global random module."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):
        return iter(random.sample(range(self.size), self.size))

    def __len__(self) -> int:
        return self.size


INNER = {
    "random": lambda: RandomSampler(range(37)),
    "weighted": lambda: WeightedRandomSampler([0.5, 2.0, 1.0, 0.1] * 5, num_samples=37),
    "subset": lambda: SubsetRandomSampler(list(range(0, 74, 2))),
    "custom, global RNG": lambda: GlobalRandomSampler(37),
}


@pytest.mark.parametrize("name", INNER)
@given(st.integers(1, 8), tails, st.integers(0, 10))
def test_wrapper_ranks_take_disjoint_parts_of_one_stream(name, world, tail, epoch) -> None:
    parts, streams = [], []
    for rank in range(world):
        torch.manual_seed(1000 + rank)  # ranks' global RNGs differ, as without seeding
        random.seed(1000 + rank)
        wrapper = DistributedSamplerWrapper(INNER[name](), world, rank, seed=5, tail=tail)
        wrapper.set_epoch(epoch)
        parts.append(list(wrapper))
        streams.append(wrapper.stream().tolist())
        assert len(parts[-1]) == len(wrapper)
    assert all(stream == streams[0] for stream in streams)
    plan = EpochPlan.of(len(streams[0]), world, tail=tail, shuffle=False, seed=0, epoch=0)
    expected = [[streams[0][p] for p in plan.rank_indices(r).tolist()] for r in range(world)]
    assert parts == expected


def test_wrapper_leaves_the_callers_rng_alone_and_reshuffles_by_epoch() -> None:
    torch.manual_seed(7)
    random.seed(7)
    expected_torch, expected_python = torch.rand(3), random.random()
    torch.manual_seed(7)
    random.seed(7)
    wrapper = DistributedSamplerWrapper(RandomSampler(range(100)), 2, 0, seed=1)
    first = wrapper.stream().tolist()
    wrapper.set_epoch(1)
    second = wrapper.stream().tolist()
    assert torch.equal(torch.rand(3), expected_torch)
    assert random.random() == expected_python
    assert first != second and sorted(first) == sorted(second) == list(range(100))


def test_wrapper_leaves_the_accelerators_queued_seeds_alone() -> None:
    """Seeding the wrapped sampler touches the CPU generator only: torch.manual_seed
    would queue a seed for CUDA (applied when CUDA starts) that fork_rng never restores."""
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is initialised: seeds are applied at once, not queued")
    tracker = torch.cuda._lazy_seed_tracker
    torch.manual_seed(7)  # the caller's seed, queued for CUDA
    queued = list(tracker.get_calls())
    wrapper = DistributedSamplerWrapper(RandomSampler(range(10)), 2, 0, seed=1)
    for epoch in range(2):
        wrapper.set_epoch(epoch)
        list(wrapper)
    assert tracker.get_calls() == queued


def test_wrapper_passes_set_epoch_on_and_checks_what_it_wraps() -> None:
    inner = RecordingSampler(range(6))
    wrapper = DistributedSamplerWrapper(inner, 2, 1, tail="uneven")
    wrapper.set_epoch(3)
    assert inner.epochs == [3]
    assert list(wrapper) == [1, 3, 5]
    with pytest.raises(TypeError, match=r"must yield dataset indices.*not a batch sampler"):
        list(DistributedSamplerWrapper(DistributedBatchSampler(range(6), 2, 1, 0), 2, 0))
    with pytest.raises(TypeError, match="sampler must have a length"):
        DistributedSamplerWrapper(iter(range(3)), 2, 0)


# Exact unsharding.


def _sampler_set(
    kind: str, size: int, world: int, batch: int, tail: str, seed: int, permutation="randperm"
):
    if kind == "sampler":
        return [
            _quiet(
                DistributedSampler,
                range(size),
                world,
                r,
                seed=seed,
                tail=tail,
                permutation=permutation,
            )
            for r in range(world)
        ]
    if kind == "batch":
        return [
            DistributedBatchSampler(
                range(size), batch, world, r, seed=seed, tail=tail, permutation=permutation
            )
            for r in range(world)
        ]
    # Indices beyond the stream's length, and repeated: the stream is not a permutation.
    weights = [1.0] * max(size, 1)
    inner = (
        WeightedRandomSampler(weights, num_samples=size, replacement=True)
        if size
        else (SubsetRandomSampler([]))
    )
    return [DistributedSamplerWrapper(inner, world, r, seed=seed, tail=tail) for r in range(world)]


@given(
    st.sampled_from(["sampler", "batch", "wrapper"]),
    dataset_sizes(1_000),
    worlds,
    batches,
    tails,
    seeds,
    permutations,
)
def test_unshard_returns_each_result_once_in_dataset_order(
    kind, size, world, batch, tail, seed, permutation
) -> None:
    samplers_ = _sampler_set(kind, size, world, batch, tail, seed, permutation)
    received = [
        [i for item in sampler for i in (item if isinstance(item, list) else [item])]
        for sampler in samplers_
    ]
    parts = [[{"index": i} for i in share] for share in received]
    restored = unshard(parts, samplers_[0])
    if kind == "wrapper":  # back in stream order, whatever indices the stream holds
        stream = samplers_[0].stream().tolist()
        handed = {p for p in samplers_[0].plan().layout.all_positions().tolist() if p < size}
        assert restored == [{"index": stream[p]} if p in handed else None for p in range(size)]
        assert len(handed) == size or tail == "drop"
        return
    seen = {i for share in received for i in share}
    assert restored == [{"index": i} if i in seen else None for i in range(size)]
    if tail != "drop":
        assert None not in restored


def test_unshard_rejects_parts_that_do_not_fit() -> None:
    samplers_ = _sampler_set("sampler", 10, 3, 1, "uneven", 0)
    with pytest.raises(ValueError, match=r"one sequence per rank \(3\), got 2"):
        unshard([[1], [2]], samplers_[0])
    with pytest.raises(ValueError, match=r"parts\[1\] must hold one result per sample rank 1"):
        unshard([[0] * 4, [0] * 2, [0] * 3], samplers_[0])
    with pytest.raises(TypeError, match="sampler must be one of this package's samplers"):
        unshard([[0] * 10], StockSampler(range(10), 1, 0))


def test_a_resumed_uneven_epoch_with_fewer_samples_left_than_ranks_warns() -> None:
    old = DistributedBatchSampler(range(10), 4, 1, 0, shuffle=False, tail="uneven")
    iterator = iter(old)
    next(iterator), next(iterator)  # batches of 4 and 3 (balanced): 7 of 10 consumed
    state = old.state_dict()
    counts = []
    for rank in range(4):
        new = DistributedBatchSampler(range(10), 4, 4, rank, shuffle=False, tail="uneven")
        new.load_state_dict(state)
        with pytest.warns(UserWarning, match=r"gives ranks 0 or 1 batches this epoch"):
            batches = list(new)
        counts.append(len(batches))
        assert all(batches)  # never an empty batch
    assert counts == [1, 1, 1, 0]  # the 3 samples left, one per rank, exactly once


class CurriculumSampler(Sampler[int]):
    """An epoch-aware sampler: epoch e draws from the first 4 + 2e samples."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 8

    def __iter__(self):
        return iter(torch.randint(4 + 2 * self.epoch, (8,)).tolist())


def test_the_wrapped_sampler_gets_every_epoch_also_from_auto_epoch_and_a_state() -> None:
    wrapper = DistributedSamplerWrapper(CurriculumSampler(), 1, 0, auto_epoch=True)
    for epoch in range(3):
        list(wrapper)
        assert wrapper.sampler.epoch == wrapper.epoch == epoch
    saved = DistributedSamplerWrapper(CurriculumSampler(), 1, 0)
    saved.set_epoch(3)
    iterator = iter(saved)
    list(islice(iterator, 3))
    state, rest = saved.state_dict(), list(iterator)
    resumed = DistributedSamplerWrapper(CurriculumSampler(), 1, 0)
    resumed.load_state_dict(state)
    assert list(resumed) == rest
    assert resumed.sampler.epoch == 3


def test_padded_shares_stay_int32() -> None:
    for rank in range(4):
        iterator = iter(DistributedSampler(range(10), 4, rank))
        assert iterator._share is not None and iterator._share.dtype == torch.int32
