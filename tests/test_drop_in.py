"""What makes ``samplers.DistributedSampler`` a drop-in: type, attributes, pickling, errors."""

from __future__ import annotations

import itertools
import pickle
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import Config, StockSampler, configs
from torch.utils.data import DataLoader

from samplers import DistributedSampler, SamplerWarning, SeedTypeError


class SizedOnly:
    """A dataset that only has a length: enough to plan, never indexed."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def test_is_a_stock_distributed_sampler() -> None:
    sampler = DistributedSampler(range(10), num_replicas=2, rank=0)
    assert isinstance(sampler, StockSampler)
    assert isinstance(sampler, torch.utils.data.Sampler)


def test_positional_signature_matches_stock() -> None:
    arguments = (range(11), 3, 2, True, 7, True)
    ours, stock = DistributedSampler(*arguments), StockSampler(*arguments)
    for name in ("num_replicas", "rank", "shuffle", "seed", "drop_last", "epoch"):
        assert getattr(ours, name) == getattr(stock, name), name
    assert list(ours) == list(stock)


@given(configs(max_size=500, max_world=16))
def test_public_attributes_match_stock(config: Config) -> None:
    ours, stock = config.build(), config.build(StockSampler)
    for name in (
        "dataset",
        "num_replicas",
        "rank",
        "epoch",
        "seed",
        "shuffle",
        "drop_last",
        "num_samples",
        "total_size",
    ):
        assert getattr(ours, name) == getattr(stock, name), name


@given(configs(max_size=300, max_world=8), st.data())
def test_writing_attributes_changes_iteration_as_in_stock(
    config: Config, data: st.DataObject
) -> None:
    """Writes to rank, seed, shuffle and epoch act on the next iteration in both."""
    ours, stock = config.build(), config.build(StockSampler)
    new_rank = data.draw(st.integers(0, config.world_size - 1))
    new_seed = data.draw(st.integers(0, 2**32))
    for sampler in (ours, stock):
        sampler.rank = new_rank
        sampler.seed = new_seed
        sampler.shuffle = not config.shuffle
        sampler.epoch = config.epoch + 3
    assert list(ours) == list(stock)


def test_overridden_sizes_pad_further_as_in_stock() -> None:
    """Subclasses that enlarge total_size (more padding) get the stock result."""
    ours, stock = DistributedSampler(range(10), 2, 1), StockSampler(range(10), 2, 1)
    for sampler in (ours, stock):
        sampler.num_samples, sampler.total_size = 8, 16
    assert list(ours) == list(stock)
    with pytest.warns(SamplerWarning, match="iterated again at epoch 0 without set_epoch"):
        assert len(list(ours)) == 8  # the same epoch again: the stock sampler's order


def test_stale_sizes_raise_the_stock_assertion_with_the_reason() -> None:
    ours, stock = DistributedSampler(range(10), 2, 0), StockSampler(range(10), 2, 0)
    for sampler in (ours, stock):
        sampler.dataset = range(30)  # sizes were computed for 10 samples
    with pytest.raises(AssertionError):
        list(stock)
    with pytest.raises(AssertionError, match=r"num_samples=5 and total_size=10 do not fit 30"):
        list(ours)


def test_set_epoch_can_be_replaced_on_the_instance() -> None:
    sampler = DistributedSampler(range(10), 2, 0)
    calls = []
    sampler.set_epoch = calls.append  # what frameworks that wrap set_epoch do
    sampler.set_epoch(4)
    assert calls == [4]
    assert sampler.epoch == 0


def test_iteration_reads_the_epoch_when_iter_is_called() -> None:
    """As with the stock sampler, the order is fixed by iter(), not by the first next()."""
    ours, stock = DistributedSampler(range(50), 2, 0), StockSampler(range(50), 2, 0)
    iterators = iter(ours), iter(stock)
    ours.set_epoch(9)
    stock.set_epoch(9)
    assert list(iterators[0]) == list(iterators[1])


@given(configs(max_size=300, max_world=8))
def test_pickles(config: Config) -> None:
    sampler = config.build()
    copy = pickle.loads(pickle.dumps(sampler))
    assert type(copy) is DistributedSampler
    assert list(copy) == list(sampler)
    assert copy.__dict__.keys() == sampler.__dict__.keys()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_under_fork_and_spawn(context: str) -> None:
    if context == "fork" and sys.platform != "linux":
        pytest.skip("fork is only the safe default on Linux")
    batches = {}
    for sampler_class in (DistributedSampler, StockSampler):
        sampler = sampler_class(range(37), num_replicas=3, rank=2, seed=5)
        sampler.set_epoch(2)
        loader = DataLoader(
            range(37),
            batch_size=4,
            sampler=sampler,
            num_workers=2,
            multiprocessing_context=context,
            timeout=60,
        )
        batches[sampler_class] = [batch.tolist() for batch in loader]
    assert batches[DistributedSampler] == batches[StockSampler]
    assert sum(map(len, batches[DistributedSampler])) == 13


# Huge datasets: checked without iterating the whole share.

exact_sizes = st.integers(0, 2**53)
huge_sizes = st.integers(2**53, 2**62)


@pytest.mark.filterwarnings("ignore:drop_last=True with")
@given(exact_sizes, st.integers(1, 64), st.booleans())
def test_sizes_match_stock_up_to_2_pow_53(size: int, world: int, drop_last: bool) -> None:
    ours = DistributedSampler(SizedOnly(size), world, 0, drop_last=drop_last)
    stock = StockSampler(SizedOnly(size), world, 0, drop_last=drop_last)
    assert (len(ours), ours.total_size) == (len(stock), stock.total_size)


@given(huge_sizes, st.integers(1, 64), st.booleans())
def test_sizes_are_exact_past_2_pow_53(size: int, world: int, drop_last: bool) -> None:
    sampler = DistributedSampler(SizedOnly(size), world, world - 1, drop_last=drop_last)
    expected = size // world if drop_last else (size + world - 1) // world
    assert len(sampler) == expected
    assert sampler.total_size == expected * world
    assert 0 <= sampler.total_size - size < world or drop_last


def test_stock_sizes_are_wrong_past_2_pow_53() -> None:
    """The stock float arithmetic loses the last sample; if torch fixes it, update the docs."""
    size = 2**53 + 1
    assert StockSampler(SizedOnly(size), 1, 0).num_samples == 2**53
    assert DistributedSampler(SizedOnly(size), 1, 0).num_samples == 2**53 + 1


def test_unshuffled_huge_dataset_yields_without_building_the_share() -> None:
    sampler = DistributedSampler(SizedOnly(10**15), num_replicas=8, rank=3, shuffle=False)
    assert list(itertools.islice(iter(sampler), 4)) == [3, 11, 19, 27]


# Bad input: clear errors naming the argument and the value.


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"num_replicas": 0, "rank": 0}, ValueError, "num_replicas must be at least 1, got 0"),
        ({"num_replicas": 2, "rank": 2}, ValueError, r"rank must be in \[0, 1\].* got 2"),
        ({"num_replicas": 2, "rank": -1}, ValueError, r"rank must be in \[0, 1\].* got -1"),
        (
            {"num_replicas": 2.5, "rank": 0},
            TypeError,
            "num_replicas must be an integer, got float 2.5",
        ),
        ({"num_replicas": 2, "rank": "0"}, TypeError, "rank must be an integer, got str '0'"),
        ({"num_replicas": True, "rank": 0}, TypeError, "num_replicas must be an integer, got bool"),
        (
            {"num_replicas": 2, "rank": 0, "seed": 1.5},
            SeedTypeError,
            "seed must be an integer, got float 1.5",
        ),
        (
            {"num_replicas": 2, "rank": 0, "drop_last": "no"},
            TypeError,
            "drop_last must be a bool, got str 'no'",
        ),
        (
            {"num_replicas": 2, "rank": 0, "shuffle": None},
            TypeError,
            "shuffle must be a bool, got NoneType",
        ),
        ({}, ValueError, r"num_replicas was not given, so it is read from the default process"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(
    arguments: dict, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        DistributedSampler(range(4), **arguments)


def test_seed_error_is_also_the_stock_runtime_error() -> None:
    with pytest.raises(RuntimeError):
        DistributedSampler(range(4), 2, 0, seed=1.5)


def test_dataset_without_length_is_named() -> None:
    with pytest.raises(TypeError, match=r"'generator' has no len\(\): dataset must have a length"):
        DistributedSampler((i for i in range(4)), 2, 0)


def test_set_epoch_rejects_non_integers() -> None:
    sampler = DistributedSampler(range(4), 2, 0)
    with pytest.raises(TypeError, match=r"epoch must be an integer, got float 1\.5"):
        sampler.set_epoch(1.5)


def test_integer_likes_are_accepted() -> None:
    sampler = DistributedSampler(range(9), torch.tensor(2), torch.tensor(1), seed=torch.tensor(3))
    assert (sampler.num_replicas, sampler.rank, sampler.seed) == (2, 1, 3)
    assert type(sampler.seed) is int


def test_drop_last_emptying_every_rank_warns() -> None:
    with pytest.warns(
        UserWarning, match="drop_last=True with 3 samples over 4 replicas gives every rank 0"
    ):
        sampler = DistributedSampler(range(3), 4, 0, drop_last=True)
    assert list(sampler) == []


def test_a_seed_out_of_range_written_later_fails_at_iter_naming_seed_and_epoch() -> None:
    """The stock sampler draws its permutation in iter(), so an attribute write fails there."""
    for sampler_class in (DistributedSampler, StockSampler):
        sampler = sampler_class(range(8), 2, 0, seed=2**64 - 1)
        sampler.epoch = 1
        with pytest.raises(ValueError):
            iter(sampler)
    ours = DistributedSampler(range(8), 2, 0, seed=2**64 - 1)
    ours.epoch = 1
    with pytest.raises(ValueError, match=r"got seed=18446744073709551615 \+ epoch=1"):
        iter(ours)


def test_flags_written_after_construction_are_checked_when_iterating() -> None:
    sampler = DistributedSampler(range(10), 2, 0)
    sampler.drop_last = "yes"
    with pytest.raises(TypeError, match="drop_last must be a bool, got str 'yes'"):
        iter(sampler)
