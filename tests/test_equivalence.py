"""Ours yields exactly what the installed torch's stock sampler yields."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import Config, StockSampler, configs
from torch.utils.data import DataLoader

from samplers import DistributedSampler


@given(configs())
def test_same_indices_and_sizes_as_stock(config: Config) -> None:
    ours = config.build(DistributedSampler)
    stock = config.build(StockSampler)
    assert list(ours) == list(stock)
    assert len(ours) == len(stock)
    assert (ours.num_samples, ours.total_size) == (stock.num_samples, stock.total_size)


@given(configs(max_size=300, max_world=8))
def test_every_rank_matches_stock(config: Config) -> None:
    for rank in range(config.world_size):
        assert list(config.for_rank(rank).build()) == list(
            config.for_rank(rank).build(StockSampler)
        )


@given(configs(max_size=3_000, max_world=8), st.data())
def test_a_partly_consumed_iterator_pickles_and_yields_the_rest(
    config: Config, data: st.DataObject
) -> None:
    ours, stock = config.build(), config.build(StockSampler)
    stock_iterator = iter(stock)
    iterator = iter(ours)
    consumed = data.draw(st.integers(0, len(ours)))
    head = [next(iterator) for _ in range(consumed)]
    assert head == [next(stock_iterator) for _ in range(consumed)]
    copy = pickle.loads(pickle.dumps(iterator))
    rest = list(stock_iterator)
    assert list(copy) == rest
    assert list(iterator) == rest  # the original is unaffected


def _loader_batches(sampler, batch_size: int, drop_last: bool, num_workers: int) -> list:
    loader = DataLoader(
        range(len(sampler.dataset)),
        batch_size=batch_size,
        sampler=sampler,
        drop_last=drop_last,
        num_workers=num_workers,
    )
    return [batch.tolist() for batch in loader]


@given(configs(max_size=2_000), st.integers(1, 64), st.booleans())
def test_same_batches_through_a_dataloader(config: Config, batch_size: int, drop: bool) -> None:
    ours = _loader_batches(config.build(DistributedSampler), batch_size, drop, 0)
    stock = _loader_batches(config.build(StockSampler), batch_size, drop, 0)
    assert ours == stock


@settings(max_examples=max(3, settings.default.max_examples // 8))
@given(configs(max_size=500, max_world=8), st.integers(1, 16), st.booleans())
def test_same_batches_with_worker_processes(config: Config, batch_size: int, drop: bool) -> None:
    ours = _loader_batches(config.build(DistributedSampler), batch_size, drop, 2)
    stock = _loader_batches(config.build(StockSampler), batch_size, drop, 2)
    assert ours == stock


@given(configs(max_size=200, max_world=8), st.integers(1, 5))
def test_repeated_epochs_match_stock(config: Config, epochs: int) -> None:
    ours, stock = config.build(DistributedSampler), config.build(StockSampler)
    for epoch in range(epochs):
        ours.set_epoch(epoch)
        stock.set_epoch(epoch)
        assert list(ours) == list(stock)


def _raised(make):
    try:
        sampler = make()
        list(sampler)
    except Exception as error:  # the type is what is compared
        return error
    return None


@pytest.mark.parametrize(
    ("arguments", "dataset"),
    [
        pytest.param({"num_replicas": 0, "rank": 0}, range(4), id="num_replicas=0"),
        pytest.param({"num_replicas": -2, "rank": 0}, range(4), id="num_replicas<0"),
        pytest.param({"num_replicas": 2, "rank": 2}, range(4), id="rank=W"),
        pytest.param({"num_replicas": 2, "rank": -1}, range(4), id="rank<0"),
        pytest.param({"num_replicas": 2.0, "rank": 0}, range(5), id="float num_replicas"),
        pytest.param({"num_replicas": 2, "rank": 1.0}, range(5), id="float rank"),
        pytest.param({"num_replicas": 2, "rank": 0, "seed": 1.5}, range(4), id="float seed"),
        pytest.param({"num_replicas": 2, "rank": 0, "seed": 2**64}, range(4), id="seed too big"),
        pytest.param({"num_replicas": 2, "rank": 0, "seed": -(2**63) - 1}, range(4), id="seed<min"),
        pytest.param({"num_replicas": 2, "rank": 0}, iter(range(4)), id="no __len__"),
        pytest.param({}, range(4), id="no process group"),
    ],
)
def test_raises_the_stock_exception_type(arguments: dict, dataset) -> None:
    stock_error = _raised(lambda: StockSampler(dataset, **arguments))
    ours_error = _raised(lambda: DistributedSampler(dataset, **arguments))
    assert stock_error is not None, "the stock sampler accepted this input: update the test"
    assert isinstance(ours_error, type(stock_error)), (ours_error, stock_error)


def test_seed_plus_epoch_beyond_manual_seed_raises_like_stock() -> None:
    config = Config(8, 2, 0, True, 2**64 - 1, False, 1)
    stock_error = _raised(lambda: config.build(StockSampler))
    ours_error = _raised(lambda: config.build(DistributedSampler))
    assert stock_error is not None
    assert type(ours_error) is type(stock_error)


def test_unshuffled_sampler_ignores_an_out_of_range_seed_like_stock() -> None:
    config = Config(8, 2, 1, False, 2**70, False, 3)
    assert (
        list(config.build(DistributedSampler)) == list(config.build(StockSampler)) == [1, 3, 5, 7]
    )


def test_negative_seeds_match_stock() -> None:
    config = Config(50, 3, 2, True, -12345, False, 7)
    assert list(config.build(DistributedSampler)) == list(config.build(StockSampler))
