"""The stock sampler's behaviour, stated as properties and checked on both samplers.

These are written from the documented algorithm, not from our planning layer, so a
torch release that changes what ranks receive fails here loudly (and ours with it).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import IMPLEMENTATIONS, Config, configs
from torch.utils.data import DataLoader

implementations = pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))


def _shares(config: Config, name: str) -> list[list[int]]:
    """What every rank receives for the configuration."""
    return [list(config.for_rank(r).build(IMPLEMENTATIONS[name])) for r in range(config.world_size)]


def _global_received(config: Config, name: str) -> list[int]:
    """Every rank's share put back in position order (rank r holds r, r + W, ...)."""
    shares = _shares(config, name)
    total = sum(map(len, shares))
    return [shares[p % config.world_size][p // config.world_size] for p in range(total)]


def _epoch_order(config: Config) -> list[int]:
    """The documented epoch order: randperm seeded with seed + epoch, or 0..N-1."""
    if not config.shuffle:
        return list(range(config.dataset_size))
    generator = torch.Generator()
    generator.manual_seed(config.seed + config.epoch)
    return torch.randperm(config.dataset_size, generator=generator).tolist()


small_configs = configs(max_size=400, max_world=16)


@implementations
@given(configs())
def test_length_is_ceil_or_floor_of_n_over_w(name: str, config: Config) -> None:
    sampler = config.build(IMPLEMENTATIONS[name])
    n, w = config.dataset_size, config.world_size
    expected = n // w if config.drop_last else -(-n // w)
    assert len(sampler) == sampler.num_samples == expected
    assert sampler.total_size == expected * w


@implementations
@given(small_configs)
def test_every_rank_receives_num_samples(name: str, config: Config) -> None:
    shares = _shares(config, name)
    assert {len(share) for share in shares} == {len(config.build(IMPLEMENTATIONS[name]))}


@implementations
@given(small_configs)
def test_padding_repeats_the_head_of_the_epoch_order(name: str, config: Config) -> None:
    order = _epoch_order(config)
    received = _global_received(config, name)
    n = config.dataset_size
    if config.drop_last:
        assert received == order[: len(received)]
        assert len(received) == config.world_size * (n // config.world_size)
    else:
        padding = len(received) - n
        assert 0 <= padding < config.world_size or n == 0
        assert received[:n] == order
        assert received[n:] == (order * (padding // max(n, 1) + 1))[:padding]


@implementations
@given(small_configs.filter(lambda c: not c.drop_last and c.dataset_size % c.world_size))
def test_padded_copies_are_the_last_samples_of_the_highest_ranks(name: str, config: Config) -> None:
    shares = _shares(config, name)
    n, w = config.dataset_size, config.world_size
    order = _epoch_order(config)
    padding = len(shares[0]) * w - n
    # Ranks below n % W end on a sample of their own; the others end on a copy of the
    # head of the order, in rank order.
    assert [share[-1] for share in shares[n % w :]] == (order * w)[:padding]
    assert len(shares[n % w :]) == padding
    received = [index for share in shares for index in share]
    assert len(received) - len(set(received)) == padding


@implementations
@given(small_configs)
def test_coverage(name: str, config: Config) -> None:
    received = [index for share in _shares(config, name) for index in share]
    n, w = config.dataset_size, config.world_size
    if config.drop_last:
        assert len(set(received)) == len(received) == w * (n // w)
    else:
        assert set(received) == set(range(n))
        assert len(received) - len(set(received)) == -(-n // w) * w - n


@implementations
@given(small_configs.filter(lambda c: c.dataset_size % c.world_size == 0))
def test_disjoint_shards_when_n_divides(name: str, config: Config) -> None:
    shares = [set(share) for share in _shares(config, name)]
    assert sum(map(len, shares)) == len(set().union(*shares)) == config.dataset_size


@implementations
@given(small_configs, st.integers(2, 4))
def test_same_order_every_epoch_without_set_epoch(name: str, config: Config, epochs: int) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = config.build(IMPLEMENTATIONS[name])
        first = list(sampler)
        assert all(list(sampler) == first for _ in range(epochs - 1))
    # Ours says so, once, when it shuffles; the stock sampler repeats silently. (Ours also
    # warns when its drop_last leaves every rank empty.)
    said = [str(w.message) for w in caught]
    repeated = [m for m in said if "is iterated again at epoch" in m]
    assert len(repeated) == (name == "samplers" and config.shuffle)
    assert all(m in repeated or "gives every rank 0 samples" in m for m in said)


@implementations
@given(
    small_configs.filter(
        lambda c: c.shuffle and c.dataset_size >= 8 and c.dataset_size >= c.world_size
    )
)
def test_set_epoch_changes_the_order(name: str, config: Config) -> None:
    following = Config(**{**config.__dict__, "epoch": config.epoch + 1})
    # With 8! or more permutations, equal orders would mean the epoch is ignored.
    assert _global_received(config, name) != _global_received(following, name)


@implementations
@given(small_configs, st.integers(1, 32), st.booleans())
def test_dataloader_batch_counts(name: str, config: Config, batch_size: int, drop: bool) -> None:
    sampler = config.build(IMPLEMENTATIONS[name])
    loader = DataLoader(
        range(config.dataset_size), batch_size=batch_size, sampler=sampler, drop_last=drop
    )
    batches = [len(batch) for batch in loader]
    per_rank = len(sampler)
    assert len(batches) == (per_rank // batch_size if drop else math.ceil(per_rank / batch_size))
    assert sum(batches) == (len(batches) * batch_size if drop else per_rank)
