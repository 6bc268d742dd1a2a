"""DistributedMixtureSampler and its batch form: exact proportions at every prefix, once
per pass, epochs as windows of one stream, resume on any world size, reweighting.

Expectations are computed here from what the ranks yield (counts, passes, positions),
with the stream rebuilt by interleaving the ranks' shares as the layout deals them.
"""

from __future__ import annotations

import copy
import doctest
import math
import pickle
import random
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset, DataLoader

import samplers.mixture.passes
import samplers.mixture.sampler
import samplers.mixture.schedule
from samplers import DistributedMixtureBatchSampler, DistributedMixtureSampler
from samplers.mixture.merge import TokenMerge
from samplers.mixture.order import MixtureOrder
from samplers.mixture.schedule import (
    MAX_PERIOD,
    Period,
    Schedule,
    _closest,
    _earliest_deadline_first,
    _whole_period,
    fraction,
    parts,
    period,
)

SIZES = (5, 50, 7)
DATASETS = [range(size) for size in SIZES]
OFFSETS = [0, 5, 55]


def source_of(index: int) -> int:
    """Which source a ConcatDataset index belongs to."""
    return max(d for d, offset in enumerate(OFFSETS) if offset <= index)


def ranks(world: int, weights: Any = (2, 1, 1), **options: Any) -> list[DistributedMixtureSampler]:
    return [
        DistributedMixtureSampler(DATASETS, list(weights), world, rank, **options)
        for rank in range(world)
    ]


def stream(world: int, shares: list[list[int]]) -> list[int]:
    """The positions in order from strided shares (rank r took r, r + W, ...)."""
    longest = max(len(share) for share in shares)
    return [shares[r][k] for k in range(longest) for r in range(world) if k < len(shares[r])]


def within_one(counts: Counter[int], proportions: list[Fraction], k: int) -> bool:
    return all(abs(counts[d] - p * k) < 1 for d, p in enumerate(proportions))


def test_docstring_examples() -> None:
    result = doctest.testmod(samplers.mixture.sampler, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# The schedule ------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 40), min_size=1, max_size=7).filter(any), st.integers(1, 3))
def test_every_prefix_within_one(weights: list[int], periods: int) -> None:
    part = parts(weights)
    one = period(part)
    total = sum(part)
    counts: Counter[int] = Counter()
    for k, source in enumerate(one.source.repeat(periods).tolist(), start=1):
        counts[source] += 1
        for d, a in enumerate(part):
            assert abs(counts[d] * total - a * k) < total, (weights, k, d)


@given(
    st.lists(st.integers(0, 9), min_size=2, max_size=4).filter(any),
    st.lists(st.integers(0, 9), min_size=2, max_size=4).filter(any),
    st.integers(0, 60),
)
def test_locate_counts_draws_across_a_change(first: list[int], second: list[int], at: int) -> None:
    count = min(len(first), len(second))
    first, second = first[:count], second[:count]
    if not any(first) or not any(second):
        return
    schedule = Schedule.of(parts(first)).changed(at, parts(second))
    source, drawn = schedule.locate(torch.arange(150))
    seen: Counter[int] = Counter()
    for position, (d, j) in enumerate(zip(source.tolist(), drawn.tolist(), strict=True)):
        assert j == seen[d], (position, d)  # the d-th draw of d is numbered by what came before
        seen[d] += 1
        active = first if position < at else second
        assert active[d] > 0  # a paused source is never drawn
    assert schedule.counts(150) == [seen[d] for d in range(count)]
    # Since the change (even to the same parts), every prefix is within 1 of the new
    # proportions.
    start = schedule.segments[-1][0]
    assert start == at
    shares = [Fraction(a, sum(parts(second))) for a in parts(second)]
    since: Counter[int] = Counter()
    for k, d in enumerate(source[start:].tolist(), start=1):
        since[d] += 1
        assert within_one(since, shares, k)


def test_parts_read_floats_as_the_fractions_meant() -> None:
    assert parts([0.6, 0.3, 0.1]) == (6, 3, 1)
    assert parts([1 / 3, 2 / 3]) == (1, 2)
    assert parts([6, 3, 1]) == parts([60, 30, 10]) == (6, 3, 1)
    assert parts([Fraction(1, 7), 0]) == (1, 0)


def _fraction_as_before(value: float) -> Fraction:
    """How a float weight was read with fractions.Fraction's own arithmetic."""
    exact = Fraction(value)
    simple = exact.limit_denominator(10**6)
    if abs(simple - exact) <= abs(exact) * Fraction(1e-12):
        return simple
    return Fraction(repr(value))


@given(
    st.floats(min_value=0, allow_nan=False, allow_infinity=False)
    | st.builds(lambda n, d: n / d, st.integers(1, 10**7), st.integers(1, 10**7))
)
def test_a_float_weight_is_read_in_integers_as_fractions_read_it(value: float) -> None:
    """fraction() reads a float in integer arithmetic alone: the same fraction as the
    reading with Fraction's limit_denominator and its comparisons."""
    assert fraction(value) == _fraction_as_before(value)
    assert fraction(-value) == _fraction_as_before(-value)


@given(st.integers(-(10**15), 10**15), st.integers(1, 10**15), st.integers(1, 10**7))
def test_the_closest_fraction_is_limit_denominators(n: int, d: int, limit: int) -> None:
    expected = Fraction(n, d).limit_denominator(limit)
    whole = Fraction(n, d)
    assert _closest(whole.numerator, whole.denominator, limit) == (
        expected.numerator,
        expected.denominator,
    )


@pytest.mark.parametrize("denominator", [MAX_PERIOD - 1, MAX_PERIOD, MAX_PERIOD + 1])
def test_parts_are_exact_up_to_the_longest_period_and_rounded_past_it(denominator: int) -> None:
    """The shares' common denominator is found up to MAX_PERIOD (the search stops once it
    passes it): exact parts at MAX_PERIOD, rounded ones just above."""
    weights = [Fraction(1, denominator), Fraction(denominator - 1, denominator), 0.0]
    if denominator <= MAX_PERIOD:
        assert parts(weights) == (1, denominator - 1, 0)
    else:
        rounded = parts(weights)
        assert sum(rounded) == MAX_PERIOD and rounded[0] == 1 and rounded[2] == 0


def test_parts_round_a_large_denominator_keeping_every_positive_weight() -> None:
    weights = [0.5, 1e-9, 0.123456789, 0.376543211 - 1e-9]
    rounded = parts(weights)
    assert sum(rounded) <= MAX_PERIOD and all(a >= 1 for a in rounded)
    shares = [w / sum(weights) for w in weights]
    assert all(
        abs(a / sum(rounded) - s) <= 2 / sum(rounded) for a, s in zip(rounded, shares, strict=True)
    )


# Passes, epochs and the stream --------------------------------------------------------------


def passes_of(indices: list[int]) -> dict[int, list[list[int]]]:
    """Each source's draws cut into passes of its size."""
    by_source: dict[int, list[int]] = {d: [] for d in range(len(SIZES))}
    for index in indices:
        by_source[source_of(index)].append(index)
    return {
        d: [draws[i : i + SIZES[d]] for i in range(0, len(draws), SIZES[d])]
        for d, draws in by_source.items()
    }


def test_once_per_pass_and_the_boundaries_of_a_pass() -> None:
    (sampler,) = ranks(1, epoch_length=600)
    indices = list(sampler)
    for d, cut in passes_of(indices).items():
        for number, one_pass in enumerate(cut):
            assert len(set(one_pass)) == len(one_pass), (d, number)
            if len(one_pass) == SIZES[d]:
                assert sorted(one_pass) == list(range(OFFSETS[d], OFFSETS[d] + SIZES[d]))
        assert cut[0] != cut[1]  # each pass is a fresh shuffle
    order = sampler.plan().order
    assert isinstance(order, MixtureOrder)
    source, number, item = order.passes(torch.arange(600))
    # The last position of source 0's first pass and the first of its second pass.
    zero = (source == 0).nonzero().flatten()
    last, first = int(zero[SIZES[0] - 1]), int(zero[SIZES[0]])
    assert (int(number[last]), int(item[last])) == (0, SIZES[0] - 1)
    assert (int(number[first]), int(item[first])) == (1, 0)
    for boundary in (last, first, last + 1):
        # Resuming from exactly there (two ranks) continues the stream exactly.
        (saver,) = ranks(1, epoch_length=600, tail="uneven")
        iterator = iter(saver)
        head = [next(iterator) for _ in range(boundary)]
        state = saver.state_dict()
        assert state["position"] == boundary
        resumed = ranks(2, epoch_length=600, tail="uneven")
        for other in resumed:
            other.load_state_dict(state)
        assert head + stream(2, [list(r) for r in resumed]) == indices


def test_small_sources_are_upsampled_never_repeated_within_a_pass() -> None:
    datasets = [range(2), range(3000)]
    sampler = DistributedMixtureSampler(datasets, [1, 1], 1, 0, epoch_length=2000)
    indices = list(sampler)
    small = [i for i in indices if i < 2]
    assert len(small) == 1000
    assert all(sorted(small[i : i + 2]) == [0, 1] for i in range(0, 1000, 2))


def test_epochs_are_windows_of_one_stream() -> None:
    (sampler,) = ranks(1, epoch_length=17)
    epochs = []
    for epoch in range(4):
        sampler.set_epoch(epoch)
        epochs.append(list(sampler))
    order = sampler.plan().order
    assert isinstance(order, MixtureOrder)
    whole = order.stream_at(torch.arange(4 * 17)).tolist()
    assert [i for epoch in epochs for i in epoch] == whole
    # Passes continue across epochs: the stream's passes, not each epoch's, hold once each.
    for d, cut in passes_of(whole).items():
        assert all(len(set(p)) == len(p) for p in cut), d
    # The epoch's end: the last position of epoch 1 and the first of epoch 2 are neighbours.
    assert epochs[1][-1] == whole[33] and epochs[2][0] == whole[34]


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("tail", ["pad", "drop", "uneven"])
def test_ranks_share_out_the_epoch_by_tail(world: int, tail: str) -> None:
    samplers_ = ranks(world, epoch_length=22, tail=tail)
    shares = [list(s) for s in samplers_]
    assert [len(s) for s in samplers_] == [len(share) for share in shares]
    (single,) = ranks(1, epoch_length=22)
    whole = list(single)
    taken = stream(world, shares)
    kept = {"pad": 22, "drop": 22 // world * world, "uneven": 22}[tail]
    assert taken[:kept] == whole[:kept]
    if tail == "pad":
        assert taken[22:] == whole[: len(taken) - 22]  # padding repeats the epoch's head
    if tail != "uneven":
        assert len({len(share) for share in shares}) == 1


@given(st.integers(1, 8), st.integers(0, 3))
def test_prefix_exact_over_the_ranks(world: int, epoch: int) -> None:
    samplers_ = ranks(world, (5, 2, 3), epoch_length=70, tail="uneven")
    for s in samplers_:
        s.set_epoch(epoch)
    taken = stream(world, [list(s) for s in samplers_])
    shares = [Fraction(5, 10), Fraction(2, 10), Fraction(3, 10)]
    start = epoch * 70  # the epoch's window starts where the stream is exact from 0
    (reference,) = ranks(1, (5, 2, 3), epoch_length=70 * (epoch + 1))
    before = Counter(source_of(i) for i in list(reference)[:start])
    counts = Counter(before)
    for k, index in enumerate(taken, start=start + 1):
        counts[source_of(index)] += 1
        assert within_one(counts, shares, k), (world, epoch, k)


# Reweighting and resuming ---------------------------------------------------------------------


def test_resume_on_another_world_size_right_after_a_reweight() -> None:
    options = {"epoch_length": 120, "tail": "uneven"}
    four = ranks(4, **options)
    iterators = [iter(s) for s in four]
    head = stream(4, [[next(it) for _ in range(5)] for it in iterators])
    for s in four:
        with pytest.warns(UserWarning, match="the iteration in progress keeps the old weights"):
            s.set_weights([0, 3, 1])
    state = four[2].state_dict()
    assert state["position"] == 20
    assert state["schedule"] == [[0, [2, 1, 1]], [20, [0, 3, 1]]]
    assert all(s.state_dict() == state for s in four)
    three = ranks(3, (9, 9, 9), **options)  # the state's schedule replaces these weights
    for s in three:
        s.load_state_dict(state)
    rest = stream(3, [list(s) for s in three])
    assert len(head) + len(rest) == 120
    assert all(source_of(i) != 0 for i in rest)  # source 0 paused from position 20
    # The same run without interruption (one rank, same schedule).
    (reference,) = ranks(1, **options)
    iterator = iter(reference)
    assert [next(iterator) for _ in range(20)] == head
    with pytest.warns(UserWarning, match="continue from stream position 20"):
        reference.set_weights([0, 3, 1])
    assert list(reference) == rest
    # Nothing repeats within a pass across the change.
    for d, cut in passes_of(head + rest).items():
        assert all(len(set(p)) == len(p) for p in cut), d
    # Since the change every prefix is within 1 of 0 : 3/4 : 1/4.
    counts: Counter[int] = Counter()
    for k, index in enumerate(rest, start=1):
        counts[source_of(index)] += 1
        assert within_one(counts, [Fraction(0), Fraction(3, 4), Fraction(1, 4)], k)


def test_a_paused_source_resumes_its_pass() -> None:
    (sampler,) = ranks(1, epoch_length=40)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(7)]
    with pytest.warns(UserWarning, match="set_weights during an iteration"):
        sampler.set_weights([0, 1, 1])
    iterator = iter(sampler)  # continues from position 7 under the new weights
    middle = [next(iterator) for _ in range(6)]
    assert all(source_of(i) != 0 for i in middle)
    with pytest.warns(UserWarning, match="set_weights during an iteration"):
        sampler.set_weights([1, 0, 0])
    assert sampler.state_dict()["schedule"] == [[0, [2, 1, 1]], [7, [0, 1, 1]], [13, [1, 0, 0]]]
    rest = list(sampler)
    assert len(rest) == 27 and all(source_of(i) == 0 for i in rest)
    # Source 0 continues the pass it had begun: its draws cut into passes of 5 hold each
    # sample once, the first pass straddling the pause.
    zero = [i for i in head + middle + rest if source_of(i) == 0]
    assert 0 < len([i for i in head if source_of(i) == 0]) < 5
    assert all(sorted(zero[i : i + 5]) == list(range(5)) for i in range(0, 25, 5))


def test_settings_hold_the_sizes_and_the_schedule() -> None:
    (sampler,) = ranks(1)
    before = sampler.settings()
    assert before["sizes"] == list(SIZES) and before["schedule"] == [[0, [2, 1, 1]]]
    sampler.set_weights([1, 1, 1])  # no iteration in progress: no warning
    assert sampler.settings()["schedule"] == [[0, [1, 1, 1]]]  # replaced at position 0


def test_set_weights_after_set_epoch_starts_at_the_epoch() -> None:
    (sampler,) = ranks(1, epoch_length=10)
    list(sampler)
    sampler.set_epoch(1)
    sampler.set_weights([1, 1, 0])
    assert sampler.state_dict()["schedule"][-1] == [10, [1, 1, 0]]
    assert sampler.position() == 10
    assert all(source_of(i) != 2 for i in sampler)


def test_batches_equal_counts_and_every_step_exact() -> None:
    for tail in ("pad", "drop", "uneven"):
        world = 3
        batch = [
            DistributedMixtureBatchSampler(
                DATASETS, [1, 2, 1], 4, world, r, epoch_length=50, tail=tail
            )
            for r in range(world)
        ]
        shares = [list(s) for s in batch]
        assert len({len(share) for share in shares}) == 1, tail
        assert [len(s) for s in batch] == [len(share) for share in shares]
        counts: Counter[int] = Counter()
        k = 0
        for step in range(len(shares[0])):
            for r in range(world):
                for index in shares[r][step]:
                    counts[source_of(index)] += 1
                    k += 1
            if k <= 50:
                assert within_one(counts, [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)], k)
    again = DistributedMixtureBatchSampler(
        DATASETS, [1, 2, 1], 4, world, 0, epoch_length=50, tail="uneven"
    )
    loader = DataLoader(range(sum(SIZES)), batch_sampler=again)
    assert [b.tolist() for b in loader] == shares[0]


def test_batch_state_resumes_on_another_world_size() -> None:
    def build(world: int, rank: int) -> DistributedMixtureBatchSampler:
        return DistributedMixtureBatchSampler(DATASETS, [1, 2, 1], 2, world, rank, epoch_length=40)

    two = [build(2, r) for r in range(2)]
    iterators = [iter(s) for s in two]
    head = [[next(it) for _ in range(3)] for it in iterators]
    state = two[0].state_dict()
    assert state["position"] == 12
    four = [build(4, r) for r in range(4)]
    for s in four:
        s.load_state_dict(state)
    rest = [list(s) for s in four]
    (one,) = [build(1, 0)]
    flat = [i for b in one for i in b]
    taken = [i for k in range(3) for r in range(2) for i in head[r][k]]
    taken += [i for k in range(len(rest[0])) for r in range(4) for i in rest[r][k]]
    assert taken[:40] == flat
    assert taken[40:] == flat[:4]  # the last step of four ranks pads with the epoch's head


def test_copies_and_pickles_continue_the_same() -> None:
    (sampler,) = ranks(1, epoch_length=40)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(7)]
    for clone in (copy.copy(sampler), pickle.loads(pickle.dumps(sampler))):
        assert clone.state_dict() == sampler.state_dict()
    rest_of_pickled = list(pickle.loads(pickle.dumps(iterator)))
    rest_of_copied = list(copy.deepcopy(iterator))
    rest = list(iterator)
    assert rest_of_pickled == rest_of_copied == rest
    (fresh,) = ranks(1, epoch_length=40)
    assert head + rest == list(fresh)
    assert len(pickle.dumps(iterator)) < 4000


def test_a_concat_dataset_is_taken_as_its_sources() -> None:
    concat = ConcatDataset(DATASETS)
    sampler = DistributedMixtureSampler(concat, [2, 1, 1], 1, 0, epoch_length=12)
    assert sampler.dataset is concat and sampler.sizes == SIZES
    assert list(sampler) == list(ranks(1, epoch_length=12)[0])


def test_unshuffled_passes_are_in_order() -> None:
    (sampler,) = ranks(1, (1, 1, 1), shuffle=False, epoch_length=15)
    assert list(sampler) == [0, 5, 55, 1, 6, 56, 2, 7, 57, 3, 8, 58, 4, 9, 59]


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    assert list(ranks(1, seed=3, epoch_length=60)[0]) == list(ranks(1, seed=3, epoch_length=60)[0])
    assert list(ranks(1, seed=3, epoch_length=60)[0]) != list(ranks(1, seed=4, epoch_length=60)[0])


# Errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1, -1, 1], r"weights\[1\] must be at least 0, got -1"),
        ([0, 0, 0], r"weights must not all be 0.*\[0, 0, 0\]"),
        ([1, math.nan, 1], r"weights\[1\] must be finite, got nan"),
        ([1, math.inf, 1], r"weights\[1\] must be finite, got inf"),
        ([1, 1], r"weights must hold one weight per dataset \(3\), got 2"),
    ],
)
def test_bad_weights_are_named(weights: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DistributedMixtureSampler(DATASETS, weights, 1, 0)
    (sampler,) = ranks(1)
    with pytest.raises(ValueError, match=message):
        sampler.set_weights(weights)
    assert sampler.state_dict()["schedule"] == [[0, [2, 1, 1]]]  # unchanged


def test_bad_weight_types_and_sources_are_named() -> None:
    with pytest.raises(TypeError, match=r"weights\[0\] must be a number, got 'a'"):
        DistributedMixtureSampler(DATASETS, ["a", 1, 1], 1, 0)
    with pytest.raises(ValueError, match=r"datasets\[1\] is empty \(len 0\)"):
        DistributedMixtureSampler([range(3), range(0)], [1, 1], 1, 0)
    with pytest.raises(ValueError, match="datasets must hold at least one dataset"):
        DistributedMixtureSampler([], [], 1, 0)
    with pytest.raises(TypeError, match="datasets must be a sequence"):
        DistributedMixtureSampler(42, [1], 1, 0)
    with pytest.raises(TypeError, match=r"datasets\[1\] has no len\(\)"):
        DistributedMixtureSampler([range(3), 7], [1, 1], 1, 0)
    with pytest.raises(ValueError, match="epoch_length must be at least 1, got 0"):
        DistributedMixtureSampler(DATASETS, [1, 1, 1], 1, 0, epoch_length=0)


def test_a_zero_weight_is_allowed_and_pauses_its_source() -> None:
    (sampler,) = ranks(1, (1, 0, 1), epoch_length=30)
    assert all(source_of(i) != 1 for i in sampler)


def test_a_state_of_another_mixture_is_refused() -> None:
    (sampler,) = ranks(1, epoch_length=40)
    state = sampler.state_dict()
    other_sizes = DistributedMixtureSampler(
        [range(5), range(51), range(7)], [2, 1, 1], 1, 0, epoch_length=40
    )
    with pytest.raises(
        ValueError, match=r"state field 'sizes' is '5,50,7', this sampler's is '5,51,7'"
    ):
        other_sizes.load_state_dict(state)
    fewer = DistributedMixtureSampler([range(5), range(50)], [2, 1], 1, 0, epoch_length=40)
    with pytest.raises(ValueError, match="state field 'schedule' must be a list"):
        fewer.load_state_dict(state)
    (other_seed,) = ranks(1, seed=1, epoch_length=40)
    with pytest.raises(ValueError, match="state field 'seed' is 0, this mixture's seed is 1"):
        other_seed.load_state_dict(state)
    (other_length,) = ranks(1, epoch_length=41)
    with pytest.raises(ValueError, match="state field 'dataset_length' is 40"):
        other_length.load_state_dict(state)
    broken_schedules = (
        [],
        [[0, [0, 0, 0]]],
        [[3, [1, 1, 1]]],
        [[0, [1, 1, 1]], [0, [1, 2, 1]]],
        "x",
        # Parts state_dict() never writes: past the longest period, or not in lowest terms
        # (a period of 10**12 would be allocated, 2**70 overflows a tensor).
        [[0, [10**12, 1, 1]]],
        [[0, [3, 2**70, 1]]],
        [[0, [2, 2, 2]]],
    )
    for broken in broken_schedules:
        with pytest.raises(ValueError, match="state field 'schedule'"):
            sampler.load_state_dict({**state, "schedule": broken})
    missing = dict(state)
    del missing["schedule"]
    with pytest.raises(ValueError, match="state field 'schedule' is missing"):
        sampler.load_state_dict(missing)


def test_a_pass_is_the_same_however_its_draws_are_grouped() -> None:
    """Each (source, pass) is a permutation of the source, and evaluating a draw alone,
    in a chunk with other sources and passes, or in another order gives the same sample."""
    sizes = (1, 2, 3, 8, 9, 100, (1 << 16) + 5)
    order = MixtureOrder(sizes, Schedule.of((1,) * len(sizes)), 7, True, 0, 10)
    alone: dict[tuple[int, int], list[int]] = {}
    for d, size in enumerate(sizes):
        for q in (0, 1, 2**32 + 3):
            draws = torch.arange(size) + q * size
            got = order.within(torch.full_like(draws, d), draws).tolist()
            assert sorted(got) == list(range(size)), (size, q)
            alone[d, q] = got
    mixed = [(d, q, j) for (d, q), got in alone.items() for j in range(0, len(got), 7)]
    random.Random(0).shuffle(mixed)
    source = torch.tensor([d for d, _, _ in mixed])
    draws = torch.tensor([q * sizes[d] + j for d, q, j in mixed])
    together = order.within(source, draws).tolist()
    assert together == [alone[d, q][j] for d, q, j in mixed]
    assert alone[6, 0] != alone[6, 1]  # passes differ


@pytest.mark.parametrize("scalar_walk", [0, 1, 64, 10**9])
def test_the_cycle_walk_ends_the_same_in_python_integers(
    scalar_walk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct call finishes the cycle walk of its last few elements in Python integers
    (_SCALAR_WALK of them or fewer): the same samples as walking every step in tensors,
    whatever the threshold, for sources just past a power of two (long walks), of one
    sample, and past 2**32 samples, and for passes past 2**32."""
    sizes = (1, 2, 5, 17, 129, 1025, (1 << 16) + 1, (1 << 33) + 7)
    generator = torch.Generator().manual_seed(3)
    source = torch.randint(0, len(sizes), (3000,), generator=generator)
    size = torch.tensor(sizes).index_select(0, source)
    item = (torch.rand(3000, generator=generator, dtype=torch.float64) * size).long()
    passes = torch.randint(0, 2**40, (3000,), generator=generator)
    orders = samplers.mixture.passes.Passes(sizes, 11)
    monkeypatch.setattr(samplers.mixture.passes, "_SCALAR_WALK", 0)
    in_tensors = orders._direct(source, passes, item)
    monkeypatch.setattr(samplers.mixture.passes, "_SCALAR_WALK", scalar_walk)
    assert torch.equal(orders._direct(source, passes, item), in_tensors)
    assert bool((in_tensors < size).all())
    # Each pass of a source walked whole is still a permutation of it.
    for d in (4, 5):
        whole = torch.arange(sizes[d])
        got = orders._direct(torch.full_like(whole, d), torch.full_like(whole, 2**33), whole)
        assert sorted(got.tolist()) == list(range(sizes[d]))


@pytest.mark.parametrize(
    ("budget", "largest"),
    [(1 << 17, (1 << 16) + 5), (1 << 9, (1 << 16) + 5), (1 << 5, 70), (1 << 19, (1 << 31) + 5)],
)
def test_a_large_call_read_from_tables_gives_the_same_samples(
    budget: int, largest: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls of at least TABLED_MIN positions read each pass's rounds from tables kept
    across calls (and rebuilt or compacted past the budget), and calls above the block
    size are evaluated a block at a time; the samples are the ones small calls, which
    compute every round directly, give (in int32, or int64 past 2**30 samples)."""
    monkeypatch.setattr(samplers.mixture.passes, "TABLE_BUDGET", budget)
    sizes = (1, 3, 40, 700, 5000, largest)
    order = MixtureOrder(sizes, Schedule.of((5, 30, 20, 10, 30, 5)), 3, True, 0, 10)
    small = [order.stream_at(torch.arange(lo, lo + 1000)) for lo in range(0, 60000, 1000)]
    # A call below the block size, and one above it (evaluated a block at a time).
    calls = [order.stream_at(torch.arange(0, 20000)), order.stream_at(torch.arange(20000, 60000))]
    assert torch.equal(torch.cat(calls), torch.cat(small))
    assert torch.equal(order.stream_at(torch.arange(0, 20000)), torch.cat(small[:20]))
    stored = order.pass_orders._store
    assert stored.used <= budget
    if budget >= 1 << 17:
        assert stored.used > 0  # the tables were read
    assert order.pass_orders._dtype == (torch.int64 if largest > 1 << 30 else torch.int32)


def test_a_period_is_computed_as_far_as_it_is_used_and_the_same_whole() -> None:
    """Locating positions near a period's start computes only its first piece; computed
    piece by piece in any order of requests, the period is the one computed whole."""
    generator = random.Random(5)
    weights = [generator.random() for _ in range(30)]
    part = parts(weights)
    assert sum(part) == MAX_PERIOD
    lazy = Period(part)
    source, rank = lazy.at(torch.arange(0, 64 * 8, 8))
    assert lazy._done < lazy.length  # the rest of the period is not computed
    whole = Period(part)
    whole.ensure(whole.length)
    assert torch.equal(source, whole.source[: 64 * 8 : 8])
    assert torch.equal(rank, whole.rank[: 64 * 8 : 8])
    # Past the first steps, a prefix four times as long as the one done (a multiple of
    # the checkpoints'), the whole period once that would pass half of it.
    for offset, done in ((5000, 8192), (777, 8192), (30001, 32768), (MAX_PERIOD - 1, MAX_PERIOD)):
        assert torch.equal(lazy.counts_before(offset), whole.counts_before(offset))
        assert lazy.at(torch.tensor([offset]))[0].item() == whole.source[offset].item()
        assert lazy._done == done, offset
    assert torch.equal(lazy.source, whole.source)
    assert torch.equal(lazy.checkpoints, whole.checkpoints)


@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=12).filter(any)
    | st.lists(st.integers(0, 3), min_size=1, max_size=40).filter(any)
)
def test_the_whole_period_at_once_is_earliest_deadline_first_step_by_step(
    part: list[int],
) -> None:
    """The period computed in rounds of tensor operations is, step for step, the one
    earliest deadline first gives one step at a time: periods of any length (a power of
    two or padded to one, 1 included), paused sources, one source; and so is every
    prefix computed alone (from the draws released before its end)."""
    sources, ranks = _earliest_deadline_first(tuple(part))
    whole_source, whole_rank = _whole_period(tuple(part))
    assert whole_source.tolist() == sources
    assert whole_rank.tolist() == ranks
    total = sum(part)
    for stop in sorted(
        {min(k, total) for k in (1, 2, total // 3, total // 2 + 1, total - 1)} - {0}
    ):
        prefix_source, prefix_rank = _whole_period(tuple(part), stop)
        assert prefix_source.tolist() == sources[:stop], stop
        assert prefix_rank.tolist() == ranks[:stop], stop
    for stop in (0, total + 1):
        with pytest.raises(ValueError, match="stop must lie in"):
            _whole_period(tuple(part), stop)


@pytest.mark.parametrize("count", [30, 100, 1000])
def test_the_whole_period_at_once_at_the_longest_period(count: int) -> None:
    """Weights rounded to MAX_PERIOD parts (the longest period, no padding) and their
    period one longer (padded to twice its length): the same steps both ways."""
    generator = random.Random(count)
    part = parts([generator.random() ** 3 for _ in range(count)])
    assert sum(part) == MAX_PERIOD
    longer = (part[0] + 1, *part[1:])
    for each in (part, longer):
        sources, ranks = _earliest_deadline_first(each)
        whole_source, whole_rank = _whole_period(each)
        assert whole_source.tolist() == sources
        assert whole_rank.tolist() == ranks
        # Prefixes: one whose draws just fill a power of two, one just past it, others.
        for stop in (2048, 4096 - count, 4097, 16_384, 40_000, MAX_PERIOD - 1):
            prefix_source, prefix_rank = _whole_period(each, stop)
            assert prefix_source.tolist() == sources[:stop], stop
            assert prefix_rank.tolist() == ranks[:stop], stop


def test_a_period_past_the_rounds_limit_is_computed_step_by_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A period longer than the rounds' int32 places allow (only from parts given by
    hand) is computed step by step: the same steps."""
    part = (7, 50, 3, 41)
    expected = _whole_period(part)
    monkeypatch.setattr(samplers.mixture.schedule, "_WHOLE_IN_ROUNDS", 64)
    sources, ranks = _whole_period(part)
    assert torch.equal(sources, expected[0]) and torch.equal(ranks, expected[1])
    assert sources.tolist() == _earliest_deadline_first(part)[0]


def test_the_first_index_computes_only_the_start_of_the_period() -> None:
    """Rank 7 of 8's first index at the start of the stream needs the period's first
    positions only (the mixture's first chunk is small); the rest of the epoch is the
    same as from a period computed whole."""
    generator = random.Random(6)
    weights = [generator.random() for _ in range(40)]
    datasets = [range(1 + generator.randrange(5000)) for _ in range(40)]
    one = period(parts(weights))
    period.cache_clear()
    sampler = DistributedMixtureSampler(datasets, weights, 8, 7, epoch_length=200_000)
    iterator = iter(sampler)
    first = next(iterator)
    lazy = period(parts(weights))
    assert lazy is not one and lazy.length == MAX_PERIOD
    assert lazy._done <= 2048  # 128 positions of rank 7 of 8 span the first 1024
    rest = [first, *iterator]
    assert lazy._done == lazy.length  # the second chunk reaches past the period
    order = sampler.plan().order
    assert isinstance(order, MixtureOrder)
    period.cache_clear()
    whole = period(parts(weights))
    whole.ensure(whole.length)
    again = DistributedMixtureSampler(datasets, weights, 8, 7, epoch_length=200_000)
    assert list(again) == rest


def test_the_order_keeps_located_draws_only_for_the_window_phases_asked_of_it() -> None:
    """``between`` keeps the draws it located (16 bytes a position) only for an order
    whose ``phased`` was asked (a packed mixture reads them right after, and drops them):
    a plain mixture's order keeps nothing, and the phases read from the kept draws are
    those computed afresh."""
    (sampler,) = ranks(1, epoch_length=600)
    order = sampler.plan().order
    assert isinstance(order, MixtureOrder)
    order.between(0, 600)
    assert order._located is None
    fresh = copy.deepcopy(order)
    phases = order.phased(64)
    indices = order.between(128, 384)
    assert order._located is not None and order._located[:2] == (128, 384)
    kept = phases(128, 384)
    assert order._located is None
    expected = fresh.window_phases(128, 384, 64)
    assert kept is not None and expected is not None and torch.equal(kept, expected)
    assert torch.equal(indices, fresh.between(128, 384))
    assert pickle.loads(pickle.dumps(order))._keeps_located


def test_tables_of_groups_first_asked_in_a_large_number_wait_for_a_second_call() -> None:
    """A call whose groups never asked before would need more than ``_FIRST_ASK`` table
    entries per element is evaluated directly (a sampler's first batch builds no tables
    it reads once); a later call asking for them again builds and reads them, and a call
    whose new groups are small builds them at once. Every call gives the samples the
    direct evaluation gives."""
    passes_module = samplers.mixture.passes
    sizes = (60_000,) * 40 + (300,)  # 40 tables of 2**8 entries per round, one of 2**5
    orders = passes_module.Passes(sizes, 7)
    source = torch.arange(passes_module.TABLED_MIN + 40) % 40
    passes = torch.full_like(source, 3)
    item = (torch.arange(source.numel()) * 7919) % 60_000
    expected = orders._direct(source, passes, item)
    assert 40 * orders.table_length(0) > passes_module._FIRST_ASK * source.numel()
    assert torch.equal(orders.items(source, passes, item), expected)
    stored = orders._store
    assert stored.used == 0 and len(stored.asked) == 40  # evaluated directly, remembered
    assert torch.equal(orders.items(source, passes, item), expected)
    assert stored.used == 40 * orders.table_length(0) and not stored.asked  # built, read
    # One new small group (source 40's pass 0) next to the built ones: built at once.
    more = torch.cat([source, torch.full((64,), 40)])
    more_passes = torch.cat([passes, torch.zeros(64, dtype=torch.int64)])
    more_items = torch.cat([item, torch.arange(64) * 4])
    assert torch.equal(
        orders.items(more, more_passes, more_items), orders._direct(more, more_passes, more_items)
    )
    assert stored.used == 40 * orders.table_length(0) + orders.table_length(40)


def test_an_order_whose_merge_hands_back_its_items_builds_no_passes_of_its_own() -> None:
    """The passes' keys and tables are built when first read: an order over a merge by
    tokens that hands back the items it drew (the packed mixture's) never reads its own,
    an order over a schedule of draws does, and a copy builds them again when read."""
    sizes = (50, 70, 30)
    lengths = torch.arange(1, sum(sizes) + 1) % 17 + 1
    merged = TokenMerge(sizes, ((0, (1, 2, 1)),), lengths, 5, True)
    order = MixtureOrder(sizes, merged, 5, True, 0, 150)
    by_tokens = order.between(0, 150)
    assert "pass_orders" not in vars(order)
    drawn = MixtureOrder(sizes, Schedule.of((1, 2, 1)), 5, True, 0, 150)
    drawn.between(0, 150)
    assert "pass_orders" in vars(drawn)
    # The items the merge handed back are those the order's own passes give.
    source, count = merged.locate(torch.arange(150))
    offsets = torch.tensor([0, 50, 120]).index_select(0, source)
    assert torch.equal(by_tokens, order.within(source, count) + offsets)
    again = pickle.loads(pickle.dumps(drawn))
    assert "pass_orders" not in vars(again)
    assert torch.equal(again.between(0, 150), drawn.between(0, 150))
