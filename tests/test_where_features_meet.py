"""Where the features meet: each fix of the round that found data lost between mixtures,
costs, packing and the loaders, at its boundary (each test fails without its fix).

1. a mixture source with a positive weight is always drawn (or the limit is named);
2. the sampler's own state under ``StatefulDataLoader(num_workers=2)`` is the loop's step;
3. a cost in FLOPs is exact (no int64 wrap), every batch within the budget, and its
   default window counts the function's units;
6. ``set_weights`` inside a loop that runs on leaves an exact epoch-end state;
7. ``packed_collate`` takes what the sampler takes and refuses what does not fit;
8. an explicit window is capped at the epoch;
9. the messages name what is wrong; int64 limits are refused, never wrapped.
"""

from __future__ import annotations

import bisect
import operator
import random
import sys
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
    SamplerWarning,
    TokenCost,
    packed_collate,
)
from samplers.mixture.schedule import MAX_PERIOD, fraction, parts, period
from samplers.tokens.arrays import capped_sums, level_thresholds, reach_within
from samplers.tokens.cost import BUDGET_LIMIT

# 1. Every positive weight is drawn ---------------------------------------------------------


def test_zipf_weights_over_a_thousand_sources_draw_every_source() -> None:
    weights = [1 / d**2 for d in range(1, 1001)]
    found = parts(weights)
    assert sum(found) == MAX_PERIOD
    assert min(found) == 1  # 407 sources had 0 before
    drawn = Counter(period(found).source.tolist())
    assert sorted(drawn) == list(range(1000))
    # The parts the minimum of 1 added were taken back from the sources above 1, one at a
    # time from the one furthest above its exact share: they end up within one part of
    # each other below their shares.
    total = sum(map(fraction, weights))
    exact = [fraction(w) / total * MAX_PERIOD for w in weights]
    below = [e - a for a, e in zip(found, exact, strict=True) if a > 1]
    assert min(below) > 0 and max(below) - min(below) < 1


def test_more_positive_weights_than_the_period_are_refused_naming_the_limit() -> None:
    assert set(parts([1] * MAX_PERIOD)) == {1}
    with pytest.raises(
        ValueError, match="70000 sources have a positive weight, more than the 65536"
    ):
        parts([1] * 70_000)
    # Zeros do not count: 70,000 sources of which 3 are drawn.
    assert parts([0] * 69_997 + [1, 2, 3])[-3:] == (1, 2, 3)
    sources = [range(1)] * (MAX_PERIOD + 1)
    with pytest.raises(ValueError, match="more than the 65536"):
        DistributedMixtureSampler(sources, [1] * (MAX_PERIOD + 1), 1, 0)


@given(
    st.lists(
        st.one_of(st.just(0), st.integers(1, 10**9), st.floats(1e-9, 1e9)),
        min_size=1,
        max_size=300,
    ).filter(any)
)
def test_every_positive_weight_gets_a_positive_part(weights: list[float]) -> None:
    found = parts(weights)
    assert all((a > 0) == (w > 0) for a, w in zip(found, weights, strict=True))
    assert sum(found) <= MAX_PERIOD


# 2. The sampler's own state under StatefulDataLoader with workers --------------------------

stateful = pytest.importorskip("torchdata.stateful_dataloader")
SIZE, WORLD, BATCH = 250, 2, 4


def _loader(kind: str, rank: int, workers: int) -> tuple[Any, Any]:
    if kind == "indices":
        sampler: Any = DistributedSampler(range(SIZE), WORLD, rank, tail="uneven")
        return sampler, stateful.StatefulDataLoader(
            range(SIZE), batch_size=BATCH, sampler=sampler, num_workers=workers
        )
    if kind == "batches":
        sampler = DistributedBatchSampler(range(SIZE), BATCH, WORLD, rank, tail="uneven")
        return sampler, stateful.StatefulDataLoader(
            range(SIZE), batch_sampler=sampler, num_workers=workers
        )
    sampler = DistributedMixtureSampler(
        [range(100), range(150)], [2, 3], WORLD, rank, tail="uneven"
    )
    # The ConcatDataset's indices are 0 .. 249: read them through range(SIZE).
    return sampler, stateful.StatefulDataLoader(
        range(SIZE), batch_size=BATCH, sampler=sampler, num_workers=workers
    )


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("kind", ["indices", "batches", "mixture"])
def test_the_samplers_state_under_a_stateful_loader_with_workers_is_the_loops(kind: str) -> None:
    seen: Counter[int] = Counter()
    states = []
    for rank in range(WORLD):
        sampler, loader = _loader(kind, rank, 2)
        for step, batch in enumerate(loader):
            seen.update(batch.tolist())
            if step == 2:
                states.append(sampler.state_dict())  # the workers have fetched ahead
                break
    assert states[0] == states[1]
    assert states[0]["position"] == 3 * BATCH * WORLD  # was 56: the prefetch position
    for rank in range(WORLD):
        sampler, loader = _loader(kind, rank, 2)
        sampler.load_state_dict(states[0])
        for batch in loader:
            seen.update(batch.tolist())
    assert seen == Counter(range(SIZE))  # was 218 of 250


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("kind", ["indices", "batches"])
def test_after_a_loader_restore_the_samplers_state_still_counts_the_loop(kind: str) -> None:
    """The loader's own state (exact, as before), restored; then the sampler's own state,
    read in the restored loop, is that loop's step, not the restored loader's counts."""
    seen: Counter[int] = Counter()
    loader_states, sampler_states = [], []
    for rank in range(WORLD):
        _, loader = _loader(kind, rank, 2)
        iterator = iter(loader)
        for _ in range(2):
            seen.update(next(iterator).tolist())
        loader_states.append(loader.state_dict())
    for rank in range(WORLD):
        sampler, loader = _loader(kind, rank, 2)
        loader.load_state_dict(loader_states[rank])
        iterator = iter(loader)
        for _ in range(3):
            seen.update(next(iterator).tolist())
        sampler_states.append(sampler.state_dict())
    assert sampler_states[0] == sampler_states[1]
    assert sampler_states[0]["position"] == 5 * BATCH * WORLD
    for rank in range(WORLD):
        sampler, loader = _loader(kind, rank, 0)
        sampler.load_state_dict(sampler_states[0])
        for batch in loader:
            seen.update(batch.tolist())
    assert seen == Counter(range(SIZE))


# 3. Costs in FLOPs: exact integers ---------------------------------------------------------

FLOPS_PER_TOKEN = 6 * 70_000_000_000
LENGTHS = torch.randint(1, 2049, (150_000,), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("kind", ["sum", "padded"])
def test_a_cost_in_flops_cuts_the_batches_its_tokens_would(kind: str) -> None:
    flops = TokenCost(kind, per_sample=lambda t: FLOPS_PER_TOKEN * t, name="flops")
    budget = 16 * 2048
    in_flops = DistributedTokenBatchSampler(LENGTHS, budget * FLOPS_PER_TOKEN, 1, 0, cost=flops)
    # The default window counts batches in the function's units: not the whole dataset.
    assert in_flops.window < LENGTHS.numel() // 4
    in_tokens = DistributedTokenBatchSampler(
        LENGTHS, budget, 1, 0, cost=kind, window=in_flops.window
    )
    batches = list(in_flops)
    assert batches == list(in_tokens)
    assert max(TokenCost(kind).batch(LENGTHS[b].tolist()) for b in batches) <= budget


def test_budgets_int64_cannot_sum_are_refused_unless_no_batch_can_reach_them() -> None:
    flops = TokenCost("sum", per_sample=lambda t: FLOPS_PER_TOKEN * t, name="flops")
    with pytest.raises(ValueError, match=r"max_tokens=4611686018427387904 cost units .* 2\*\*62"):
        DistributedTokenBatchSampler(LENGTHS[:10], BUDGET_LIMIT, 1, 0, cost=flops)
    with pytest.raises(ValueError, match=r"x quadratic=4 = \d+ cost units is too large"):
        DistributedTokenBatchSampler([1] * 3 + [2**40], 2**61, 1, 0, cost=TokenCost(quadratic=4))
    # "No limit" for tokens: every window is one batch, as before.
    (batch,) = list(DistributedTokenBatchSampler([5, 1, 3], sys.maxsize, 1, 0, cost="sum"))
    assert sorted(batch) == [0, 1, 2]


def test_costs_near_int64_are_cut_exactly() -> None:
    """Per-sample costs of up to 2**62 and a budget just below the limit: the batches are
    the greedy cut computed with Python's integers (one window, longest first)."""
    rng = random.Random(5)
    values = [rng.choice([0, 1, 2**40, 2**61, 2**62 - 1]) for _ in range(400)]
    table = dict(enumerate(values))
    cost = TokenCost("sum", per_sample=lambda t: t.clone().apply_(table.__getitem__), name="t")
    budget = BUDGET_LIMIT - 1
    sampler = DistributedTokenBatchSampler(
        list(range(400)), budget, 1, 0, cost=cost, shuffle=False, window=400
    )
    expected, batch, used = [], [], 0
    for index in range(399, -1, -1):  # the lengths are the indices: longest first
        if batch and used + values[index] > budget:
            expected.append(batch)
            batch, used = [], 0
        batch.append(index)
        used += values[index]
    expected.append(batch)
    assert sorted(map(sorted, sampler)) == sorted(map(sorted, expected))


@pytest.mark.parametrize("quadratic", [None, 1, 32])
@pytest.mark.parametrize("kind", ["padded", "sum"])
def test_a_batchs_reported_cost_is_exact_past_int64(kind: str, quadratic: int | None) -> None:
    """TokenCost.batch sums in Python integers: costs whose sum passes 2**63 (it wrapped
    to a negative cost in int64) are exact up to the final float."""
    model = TokenCost(kind, quadratic=quadratic)
    lengths = [2**62, 3, 2**31, 2**62 - 1]
    scale = quadratic or 1

    def cost(length: int) -> int:
        return length if quadratic is None else quadratic * length + length * length

    each = [cost(max(lengths))] * len(lengths) if kind == "padded" else map(cost, lengths)
    assert model.batch(lengths) == sum(each) / scale > 2**63
    assert model.batch(np.array([5, 7])) == model.batch([5, 7]) and model.batch([]) == 0.0


@pytest.mark.parametrize(
    ("lengths", "error", "said"),
    [
        ([4, -5], ValueError, r"lengths must be at least 0, got lengths\[1\] = -5"),
        ([1.7, 2], TypeError, r"lengths\[0\] must be an integer, got float 1.7"),
        ([True], TypeError, r"lengths\[0\] must be an integer, got bool True"),
    ],
)
def test_a_batchs_reported_cost_names_a_length_that_is_not_one(
    lengths: list[Any], error: type, said: str
) -> None:
    with pytest.raises(error, match=said):
        TokenCost("sum").batch(lengths)


@given(
    st.lists(st.sampled_from([0, 1, 3, 2**31 - 1, 2**31, 2**40, 2**61, 2**62]), max_size=40),
    st.sampled_from([0, 5, 2**31, 2**61, 2**62 - 1]),
)
def test_reach_is_exact_at_the_int64_boundaries(each: list[int], budget: int) -> None:
    capped = [min(c, budget + 1) for c in each]
    found = reach_within(torch.tensor(capped, dtype=torch.int64), budget).tolist()
    for i, reach in enumerate(found):
        assert sum(each[i:reach]) <= budget
        assert reach == len(each) or sum(each[i : reach + 1]) > budget
    starts = list(range(0, len(each), 3))
    sums = capped_sums(torch.tensor(capped, dtype=torch.int64), torch.tensor(starts), budget + 1)
    ends = [*starts[1:], len(each)] if starts else []
    expected = [min(sum(capped[a:b]), budget + 1) for a, b in zip(starts, ends, strict=True)]
    assert sums.tolist() == expected


@given(st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_cost_levels_from_thresholds_are_the_multiplied_ones(budget: int, cost: int) -> None:
    cost = cost % (budget + 1)
    assert bisect.bisect_right(level_thresholds(budget, 64), cost) == cost * 64 // budget


# 6. set_weights in a loop that runs on -----------------------------------------------------


def test_set_weights_in_a_loop_that_runs_to_the_end_leaves_an_exact_epoch_end_state() -> None:
    sources = [range(20), range(20)]
    sampler = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=40, auto_epoch=True)
    handed = []
    for step, index in enumerate(sampler):
        handed.append(index)
        if step == 3:
            with pytest.warns(SamplerWarning, match="keeps the old weights to where it stops"):
                sampler.set_weights([1, 3])
    assert len(handed) == 40
    state = sampler.state_dict()
    assert state["finished"] and state["position"] == 40  # was position 4, not finished
    assert state["schedule"][-1] == [40, [1, 3]]  # the new weights from the epoch's end
    assert sampler.proportions == (Fraction(1, 4), Fraction(3, 4))
    # Epoch 0 under the old weights: each source's 20 samples once.
    assert Counter(i >= 20 for i in handed) == {False: 20, True: 20}
    resumed = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=40)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # this empty pass is intended
    assert list(resumed) == []  # nothing of epoch 0 replayed
    following = list(sampler)  # auto_epoch: epoch 1, not the rest of epoch 0 again
    assert sampler.epoch == 1 and len(following) == 40
    assert Counter(i >= 20 for i in following) == {False: 10, True: 30}


def test_set_weights_in_a_loop_that_is_left_applies_from_where_it_was_left() -> None:
    sources = [range(20), range(20)]
    sampler = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=40)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(4)]
    with pytest.warns(SamplerWarning, match="stream position 4"):
        sampler.set_weights([0, 1])
    head += [next(iterator) for _ in range(2)]  # the loop goes on two more steps
    del iterator  # and is left there
    assert sampler.state_dict()["schedule"][-1] == [6, [0, 1]]
    rest = list(sampler)
    assert len(head) + len(rest) == 40
    assert all(i >= 20 for i in rest)


# 7. packed_collate -------------------------------------------------------------------------


def test_packed_collate_takes_empty_samples_and_batches() -> None:
    packed = packed_collate([[1, 2], []], 4)
    assert packed["seq_lens"].tolist() == [2, 0]
    assert packed["input_ids"].tolist() == [[1, 2, 0, 0]]
    empty = packed_collate([], 4)
    assert empty["input_ids"].shape == (0, 4) and empty["cu_seqlens"].tolist() == [0]
    assert packed_collate([], 4, rows=False)["input_ids"].shape == (1, 0)


@pytest.mark.parametrize(
    ("max_length", "error", "said"),
    [
        (2.5, TypeError, "max_length must be an integer, got float 2.5"),
        (None, TypeError, "max_length must be an integer, got NoneType None"),
        (0, ValueError, "max_length must be at least 1, got 0"),
    ],
)
def test_packed_collate_names_a_bad_max_length(max_length: Any, error: type, said: str) -> None:
    with pytest.raises(error, match=said):
        packed_collate([[1]], max_length)


@pytest.mark.parametrize(
    ("samples", "options", "error", "said"),
    [
        ([[1]], {"rows": "no"}, TypeError, "rows must be a bool, got str 'no'"),
        ([[1]], {"pad_id": 1.5}, TypeError, "pad_id must be an integer, got float 1.5"),
        ([[1]], {"pad_id": None}, TypeError, "pad_id must be an integer, got NoneType None"),
        ([[1]], {"pad_id": 2**63}, ValueError, "pad_id must fit int64"),
        ([np.array([2**64 - 1], dtype=np.uint64)], {}, ValueError, "token id of 2\\*\\*63"),
        (
            [[True, False]],
            {},
            ValueError,
            "1-D sequence of token ids, got shape \\(2,\\) of torch.bool",
        ),
        (
            [{"input_ids": [1], "document": 1.7, "start": 0}],
            {},
            TypeError,
            "a sample's 'document' must be an integer, got float 1.7",
        ),
    ],
)
def test_packed_collate_names_a_bad_option_or_token(
    samples: list[Any], options: dict[str, Any], error: type, said: str
) -> None:
    """Nothing silently converted: a string flag, a float pad id or piece origin, a token
    id int64 cannot hold (it wrapped to -1), boolean tokens."""
    with pytest.raises(error, match=said):
        packed_collate(samples, 4, **options)
    assert packed_collate([[1, 2]], 4, rows=np.True_, pad_id=np.int64(-1))[
        "input_ids"
    ].tolist() == [[1, 2, -1, -1]]


def test_the_samplers_collate_refuses_samples_that_are_not_the_lengths_it_packed() -> None:
    lengths = [3, 3, 2, 2, 4, 1, 1, 4]
    sampler = DistributedPackedBatchSampler(lengths, 4, 2, 1, 0, shuffle=False, window=8)
    collate = sampler.collate_fn(pad_id=-1)
    for batch in sampler:
        packed = collate([list(range(lengths[i])) for i in batch])
        assert packed["input_ids"].shape[0] <= 2
    with pytest.raises(ValueError, match=r"make 3 rows .* more than rows_per_batch=2"):
        collate([[0] * 4, [0] * 4, [0] * 4])  # the dataset's samples are longer
    with pytest.raises(ValueError, match="max_length is not the sampler's"):
        packed_collate([[0] * 3, [0] * 3, [0] * 2], 3, rows_per_batch=2)


# 8. An explicit window is capped at the epoch ----------------------------------------------


@pytest.mark.parametrize("window", [10**8, 10**18])
def test_a_window_beyond_the_epoch_plans_as_the_epoch(window: int) -> None:
    lengths = [3, 1, 4, 1, 5, 8, 2, 6, 5, 3]
    huge = DistributedTokenBatchSampler(lengths, 8, 1, 0, window=window)
    whole = DistributedTokenBatchSampler(lengths, 8, 1, 0, window=len(lengths))
    assert huge.order().window == len(lengths)
    assert list(huge) == list(whole)
    packed = DistributedPackedBatchSampler(lengths, 9, 2, 1, 0, window=window)
    assert packed.order().window == len(lengths)
    mixture = DistributedMixtureTokenBatchSampler(
        [range(4), range(6)], [1, 1], lengths, 8, 1, 0, window=window
    )
    assert mixture.order().window == 10 and len(list(mixture)) > 0


# 9. Messages and int64 limits ----------------------------------------------------------------


def test_an_empty_source_is_told_what_to_do_given_its_weight() -> None:
    with pytest.raises(
        ValueError, match=r"datasets\[1\] is empty .* even at weight 0; leave it out"
    ):
        DistributedMixtureSampler([range(3), range(0)], [1, 0], 1, 0)
    with pytest.raises(ValueError, match=r"datasets\[1\] is empty .* cannot be drawn from"):
        DistributedMixtureSampler([range(3), range(0)], [1, 2], 1, 0)


def test_integer_likes_are_integers_and_zero_d_tensors_are_weights() -> None:
    assert TokenCost(quadratic=np.int64(4)).quadratic == 4
    assert type(TokenCost(quadratic=torch.tensor(4)).quadratic) is int
    with pytest.raises(ValueError, match="quadratic must be an integer"):
        TokenCost(quadratic=True)
    sampler = DistributedMixtureSampler(
        [range(3), range(4)], [torch.tensor(1.0), torch.tensor(2)], 1, 0
    )
    assert sampler.proportions == (Fraction(1, 3), Fraction(2, 3))
    with pytest.raises(TypeError, match=r"weights\[0\] must be a number"):
        DistributedMixtureSampler([range(3), range(4)], [torch.tensor(True), 1], 1, 0)


def test_stream_positions_past_int64_are_refused_not_wrapped() -> None:
    sources = [range(3), range(6)]
    with pytest.raises(ValueError, match="epoch_length must be at most 2\\*\\*62"):
        DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=10**30)
    sampler = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=9)
    last = (2**63) // 9 - 1
    sampler.set_epoch(last)  # the last whole epoch below 2**63
    assert len(list(sampler)) == 9
    with pytest.raises(ValueError, match=f"past 2\\*\\*63 - 1 .* the last epoch is {last}"):
        sampler.set_epoch(last + 1)
    with pytest.raises(ValueError, match="must be at least 0"):
        sampler.set_epoch(-1)
    state = sampler.state_dict()
    for field, value in (("epoch", 10**30), ("epoch", 2**60)):
        with pytest.raises(ValueError, match=f"state field '{field}' does not fit"):
            sampler.load_state_dict({**state, field: value})
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        sampler.load_state_dict({**state, "schedule": [[0, [1, 2]], [10**30, [1, 1]]]})


def test_a_state_of_another_epoch_length_is_named_as_such() -> None:
    sources = [range(3), range(6)]
    state = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=7).state_dict()
    other = DistributedMixtureSampler(sources, [1, 1], 1, 0, epoch_length=8)
    with pytest.raises(ValueError, match=r"epoch_length of the mixture that saved it; this .* 8"):
        other.load_state_dict(state)


def test_mixture_batch_samplers_refuse_the_same_limits() -> None:
    sampler = DistributedMixtureBatchSampler([range(3), range(6)], [1, 1], 2, 1, 0)
    with pytest.raises(ValueError, match="past 2\\*\\*63 - 1"):
        sampler.set_epoch(2**62)
    assert operator.index(sampler.epoch) == 0


def test_a_budget_no_batch_can_reach_is_no_limit_under_every_cost() -> None:
    """A budget of 2**62 or more passes only where no batch can cost that much; the
    over-budget check then reads costs capped below the limit (it overflowed)."""
    quadratic = TokenCost("padded", quadratic=4)
    sampler = DistributedTokenBatchSampler([8, 1, 8, 6], 2**62, 1, 0, cost=quadratic)
    (batch,) = list(sampler)  # every sample fits: the one window is one batch
    assert sorted(batch) == [0, 1, 2, 3]


def test_the_wrapper_refuses_a_seed_and_epoch_its_stream_cannot_be_seeded_with_at_once() -> None:
    """As the other samplers: in set_epoch and load_state_dict, not at the next iter()."""
    from torch.utils.data import RandomSampler

    from samplers import DistributedSamplerWrapper

    wrapper = DistributedSamplerWrapper(RandomSampler(range(10)), 2, 0)
    said = r"seed \+ epoch must be in .* got seed=0 \+ epoch=18446744073709551616"
    with pytest.raises(ValueError, match=said):
        wrapper.set_epoch(2**64)
    assert wrapper.epoch == 0 and len(list(wrapper)) == 5
    state = {**wrapper.state_dict(), "seed": 2**64}
    with pytest.raises(ValueError, match="state fields 'seed' and 'epoch' do not fit"):
        DistributedSamplerWrapper(RandomSampler(range(10)), 2, 0).load_state_dict(state)


def test_padding_past_int64_positions_is_refused_naming_num_replicas() -> None:
    """A batch per rank per step over 2**61 + 1 ranks, padded, lays out past 2**63
    positions: the padded batches held negative indices (int64 wrapped); refused
    instead, by name."""
    world = 2**61 + 1
    said = rf"num_replicas={world}, batch_size=4 over dataset_size=10 lays the epoch out"
    with pytest.raises(ValueError, match=said):
        list(DistributedBatchSampler(range(10), 4, world, world - 1, shuffle=False))
    assert list(DistributedBatchSampler(range(10), 4, 2**40, 7, shuffle=False)) == [[8, 9, 0, 1]]


def test_a_share_whose_stop_passes_int64_hands_out_its_last_position() -> None:
    """2**62 + 1 ranks over 10 samples, padded: the last rank's one position is 2**62,
    padding index 2**62 mod 10 = 4; the share's arange stopped at 2**63 + 1, past int64,
    and raised torch's overflow error. The stop is now the last position plus one."""
    world = 2**62 + 1
    assert list(DistributedSampler(range(10), world, world - 1, shuffle=False)) == [4]
    assert list(DistributedSampler(range(10), world, 3, shuffle=False)) == [3]


_SOURCES = [range(5), range(5)]
_BUILT_OVER = {
    "sampler": lambda world: DistributedSampler(range(10), world, 0),
    "batches": lambda world: DistributedBatchSampler(range(10), 2, world, 0),
    "tokens": lambda world: DistributedTokenBatchSampler([3] * 10, 8, world, 0),
    "packed": lambda world: DistributedPackedBatchSampler([3] * 10, 8, 2, world, 0),
    "mixture": lambda world: DistributedMixtureSampler(_SOURCES, [1, 1], world, 0),
    "mixture batches": lambda world: DistributedMixtureBatchSampler(_SOURCES, [1, 1], 2, world, 0),
    "token mixture": lambda world: DistributedMixtureTokenBatchSampler(
        _SOURCES, [1, 1], [3] * 10, 8, world, 0
    ),
    "packed mixture": lambda world: DistributedPackedMixtureSampler(
        _SOURCES, [1, 1], [3] * 10, 8, 2, world, 0
    ),
    "wrapper": lambda world: DistributedSamplerWrapper(list(range(10)), world, 0),
}


@pytest.mark.parametrize("world", [2**63, 2**64])
@pytest.mark.parametrize("name", sorted(_BUILT_OVER))
def test_every_sampler_refuses_more_replicas_than_int64_ranks_naming_num_replicas(
    name: str, world: int
) -> None:
    """Ranks are int64 in the plan's tensors: 2**63 replicas or more gave torch's
    "int too big to convert" from the token samplers' first batch (not naming
    num_replicas); every sampler now refuses them, by name."""
    with pytest.raises(ValueError, match=rf"num_replicas must be below 2\*\*63 .* got {world}"):
        list(_BUILT_OVER[name](world))
