"""The planning layer: sizes, positions, slices and their inverse."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import StockSampler, dataset_sizes, seeds

from samplers.plan import (
    TAILS,
    Batched,
    EpochPlan,
    IdentityOrder,
    ShardSizes,
    Strided,
    interleave,
    interleave_truncated,
    rank_positions,
)


@st.composite
def plans(draw: st.DrawFn) -> EpochPlan:
    sizes = ShardSizes.of(draw(dataset_sizes(2_000)), draw(st.integers(1, 64)), draw(st.booleans()))
    return EpochPlan.stock(sizes, draw(st.booleans()), draw(seeds), draw(st.integers(0, 1000)))


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
    order = plan.order.materialise().tolist()
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
    plan = EpochPlan.stock(ShardSizes.of(10**15, 4, False), shuffle=False, seed=0, epoch=0)
    assert plan.rank_indices(1, 0, 3).tolist() == [1, 5, 9]
    assert isinstance(plan.order, IdentityOrder)


def test_interleave_rejects_ragged_or_missing_shares() -> None:
    with pytest.raises(ValueError, match="same length, got \\[1, 2\\]"):
        interleave([torch.tensor([1]), torch.tensor([1, 2])])
    with pytest.raises(ValueError, match="one tensor per rank, got none"):
        interleave([])


def test_negative_share_bounds_are_rejected() -> None:
    plan = EpochPlan.stock(ShardSizes.of(10, 2, False), shuffle=True, seed=0, epoch=0)
    with pytest.raises(ValueError, match="lo=-1, hi=None"):
        plan.rank_indices(1, -1)
    with pytest.raises(ValueError, match="lo=0, hi=-1"):
        plan.rank_indices(1, 0, -1)


@given(plans())
def test_unshard_returns_each_sample_once_in_epoch_order(plan: EpochPlan) -> None:
    sizes = plan.sizes
    shares = [plan.rank_indices(rank) for rank in range(sizes.world_size)]
    restored = interleave_truncated(shares, sizes.dataset_size)
    order = plan.order.materialise()
    if sizes.drop_last:
        assert restored.tolist() == order[: sizes.total_size].tolist()
    else:
        assert restored.tolist() == order.tolist()


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
        plan = EpochPlan.stock(sizes, shuffle=False, seed=0, epoch=0)
        assert plan.rank_indices(rank).tolist() == expected


@st.composite
def layouts(draw: st.DrawFn) -> Strided | Batched:
    size, world = draw(st.integers(0, 300)), draw(st.integers(1, 12))
    tail = draw(st.sampled_from(TAILS))
    if draw(st.booleans()):
        return Strided.of(size, world, tail)
    return Batched(size, world, draw(st.integers(1, 9)), tail)


def _layout_from(layout: Strided | Batched, start: int) -> Strided | Batched:
    if isinstance(layout, Batched):
        return Batched(
            layout.dataset_size, layout.world_size, layout.batch_size, layout.tail, start
        )
    tail = "uneven" if layout.stop == max(layout.dataset_size, 0) else None
    if tail is None:
        tail = "pad" if layout.stop >= layout.dataset_size else "drop"
    return Strided.of(layout.dataset_size, layout.world_size, tail, start)


@given(layouts(), st.data())
def test_the_layout_from_a_reached_position_hands_out_exactly_the_rest(
    layout: Strided | Batched, data: st.DataObject
) -> None:
    """Resume rests on this: after k steps the ranks consumed [start, position_after(k)),
    and the same settings' layout from that position hands out what follows, per rank."""
    longest = max(layout.counts())
    steps = data.draw(st.integers(0, longest))
    reached = layout.position_after(steps)
    taken = [layout.positions(rank, 0, steps) for rank in range(layout.world_size)]
    before = torch.cat(taken) if taken else torch.empty(0, dtype=torch.int64)
    assert sorted(before.tolist()) == list(range(layout.start, reached))
    resumed = _layout_from(layout, reached)
    for rank in range(layout.world_size):
        assert resumed.positions(rank).tolist() == layout.positions(rank, steps).tolist()
        assert resumed.batch_sizes(rank) == layout.batch_sizes(rank, steps)
    assert resumed.stop == layout.stop


@given(layouts(), st.data())
def test_flat_positions_and_batch_sizes_describe_the_same_items(
    layout: Strided | Batched, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, layout.world_size - 1))
    lo = data.draw(st.integers(0, layout.count(rank) + 1))
    hi = data.draw(st.none() | st.integers(0, layout.count(rank) + 1))
    flat = layout.positions(rank, lo, hi)
    sizes = layout.batch_sizes(rank, lo, hi)
    assert sum(sizes) == flat.numel()
    if isinstance(layout, Batched):
        count = layout.count(rank)
        last = count if hi is None else min(hi, count)
        expected = [
            p for step in range(min(lo, last), last) for p in range(*layout.bounds(step, rank))
        ]
        assert flat.tolist() == expected
