"""The planning layer: sizes, positions, slices and their inverse."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import StockSampler, dataset_sizes, seeds

from samplers.plan import EpochPlan, ShardSizes, interleave, rank_positions, unshard


@st.composite
def plans(draw: st.DrawFn) -> EpochPlan:
    sizes = ShardSizes.of(draw(dataset_sizes(2_000)), draw(st.integers(1, 64)), draw(st.booleans()))
    return EpochPlan(sizes, draw(st.booleans()), draw(seeds), draw(st.integers(0, 1000)))


@given(dataset_sizes(), st.integers(1, 64), st.booleans())
def test_sizes(size: int, world: int, drop_last: bool) -> None:
    sizes = ShardSizes.of(size, world, drop_last)
    assert sizes.total_size == sizes.num_samples * world
    assert sizes.total_size % world == 0
    if drop_last:
        assert sizes.padding == 0 and 0 <= sizes.dropped < world
        assert sizes.total_size == size - sizes.dropped
    else:
        assert sizes.dropped == 0 and 0 <= sizes.padding < world
        assert sizes.total_size == size + sizes.padding


@given(plans())
def test_rank_shares_interleave_back_into_the_global_order(plan: EpochPlan) -> None:
    world = plan.sizes.world_size
    shares = [plan.rank_indices(rank) for rank in range(world)]
    assert torch.equal(interleave(shares), plan.global_indices())


@given(plans())
def test_global_order_is_the_epoch_order_padded_from_its_head(plan: EpochPlan) -> None:
    n, total = plan.sizes.dataset_size, plan.sizes.total_size
    order = plan.order.tolist()
    expected = [order[p % n] for p in range(total)] if n else []
    assert plan.global_indices().tolist() == expected


@given(plans(), st.data())
def test_share_slices(plan: EpochPlan, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, plan.sizes.world_size - 1))
    start = data.draw(st.integers(0, plan.sizes.num_samples + 2))
    stop = data.draw(st.none() | st.integers(0, plan.sizes.num_samples + 2))
    whole = plan.rank_indices(rank).tolist()
    assert plan.rank_indices(rank, start, stop).tolist() == whole[start:stop]


@given(plans())
def test_positions_owner_and_padding_flags(plan: EpochPlan) -> None:
    sizes = plan.sizes
    for rank in range(sizes.world_size):
        positions = rank_positions(sizes.total_size, sizes.world_size, rank)
        assert len(positions) == sizes.num_samples
        assert bool((plan.owner(positions) == rank).all())
    every = torch.arange(sizes.total_size)
    assert int(plan.is_padding(every).sum()) == sizes.padding


def test_unshuffled_plan_never_draws_the_order() -> None:
    plan = EpochPlan(ShardSizes.of(10**15, 4, False), shuffle=False, seed=0, epoch=0)
    assert plan.rank_indices(1, 0, 3).tolist() == [1, 5, 9]
    assert "order" not in plan.__dict__


def test_interleave_rejects_ragged_or_missing_shares() -> None:
    with pytest.raises(ValueError, match="same length, got \\[1, 2\\]"):
        interleave([torch.tensor([1]), torch.tensor([1, 2])])
    with pytest.raises(ValueError, match="one tensor per rank, got none"):
        interleave([])


def test_negative_share_bounds_are_rejected() -> None:
    plan = EpochPlan(ShardSizes.of(10, 2, False), shuffle=True, seed=0, epoch=0)
    with pytest.raises(ValueError, match="start=-1, stop=None"):
        plan.rank_indices(1, -1)
    with pytest.raises(ValueError, match="start=0, stop=-1"):
        plan.rank_indices(1, 0, -1)


@given(plans())
def test_unshard_returns_each_sample_once_in_epoch_order(plan: EpochPlan) -> None:
    sizes = plan.sizes
    shares = [plan.rank_indices(rank) for rank in range(sizes.world_size)]
    restored = unshard(shares, sizes.dataset_size)
    if sizes.drop_last:
        assert restored.tolist() == plan.order[: sizes.total_size].tolist()
    else:
        assert restored.tolist() == plan.order.tolist()


@given(st.integers(0, 300), st.integers(1, 16), st.booleans(), st.data())
def test_given_sizes_accept_what_the_stock_sampler_accepts(
    size: int, world: int, drop_last: bool, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    total = data.draw(st.integers(0, 2 * size + world))
    num_samples = data.draw(st.integers(0, total // world + 1))
    stock = StockSampler(range(size), world, rank, drop_last=drop_last, shuffle=False)
    stock.num_samples, stock.total_size = num_samples, total
    try:
        expected = list(stock)
    except (AssertionError, ZeroDivisionError):
        expected = None
    try:
        sizes = ShardSizes.given(
            size, world, drop_last, rank=rank, num_samples=num_samples, total_size=total
        )
    except AssertionError:
        assert expected is None
    else:
        plan = EpochPlan(sizes, shuffle=False, seed=0, epoch=0)
        assert plan.rank_indices(rank).tolist() == expected
