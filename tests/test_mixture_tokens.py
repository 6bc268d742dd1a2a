"""DistributedMixtureTokenBatchSampler: a mixture whose weights count tokens, under a token
budget. Proportions in tokens measured over prefixes, windows and steps against the bounds
its docstring claims; once per pass; the budget; equal steps; resume on any world size,
also right after a reweight; the boundaries of passes and epochs; its errors.
"""

from __future__ import annotations

import doctest
import pickle
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest
import torch

import samplers.mixture.tokens
from samplers import (
    DistributedMixtureBatchSampler,
    DistributedMixtureTokenBatchSampler,
    SamplerWarning,
)

SIZES = (1200, 300, 3000)
OFFSETS = (0, 1200, 1500)
#: Source 0: 10 to 99 tokens, source 1: 100 to 1999 (few and long), source 2: 1 to 49.
RANGES = ((10, 100), (100, 2000), (1, 50))
WEIGHTS = (0.5, 0.3, 0.2)
BUDGET = 4096


def make_lengths() -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    return torch.cat(
        [
            torch.randint(low, high, (size,), generator=generator)
            for (low, high), size in zip(RANGES, SIZES, strict=True)
        ]
    )


LENGTHS = make_lengths()


def source_of(index: int) -> int:
    return max(d for d, offset in enumerate(OFFSETS) if offset <= index)


def ranks(world: int, weights: Any = WEIGHTS, **options: Any) -> list[Any]:
    return [
        DistributedMixtureTokenBatchSampler(
            [range(n) for n in SIZES], list(weights), LENGTHS, BUDGET, world, rank, **options
        )
        for rank in range(world)
    ]


def steps_of(samplers: list[Any]) -> list[list[list[int]]]:
    """Each step's batches, rank by rank (every rank yields as many)."""
    shares = [list(sampler) for sampler in samplers]
    assert len({len(share) for share in shares}) == 1, "ranks yield different numbers"
    return [list(step) for step in zip(*shares, strict=True)]


def flat(steps: list[list[list[int]]]) -> list[int]:
    return [i for step in steps for batch in step for i in batch]


def tokens_by_source(indices: list[int]) -> list[int]:
    found = [0] * len(SIZES)
    for index in indices:
        found[source_of(index)] += int(LENGTHS[index])
    return found


def claimed_slack(sampler: Any) -> list[float]:
    """The docstring's bound on source d's tokens off its share ``w_d`` of the tokens at
    any prefix of the stream: ``(max_d + w_d * (sum of the others' max)) / 2``."""
    longest = [int(LENGTHS[o : o + n].max()) for o, n in zip(OFFSETS, SIZES, strict=True)]
    shares = [float(w) for w in sampler.token_proportions]
    return [
        (longest[d] + shares[d] * (sum(longest) - longest[d])) / 2 + 1e-6 for d in range(len(SIZES))
    ]


def test_docstring_examples() -> None:
    result = doctest.testmod(samplers.mixture.tokens)
    assert result.attempted > 0 and result.failed == 0


def test_token_weights_become_draw_rates_through_the_mean_lengths() -> None:
    sampler = ranks(1)[0]
    means = [t / n for t, n in zip(sampler.source_tokens, SIZES, strict=True)]
    draws = [float(p) for p in sampler.proportions]
    expected = [w / m for w, m in zip(WEIGHTS, means, strict=True)]
    expected = [e / sum(expected) for e in expected]
    assert draws == pytest.approx(expected, abs=2 / 65536)
    # The rates are rounded to multiples of 1/65536: the token shares stay within 1e-4.
    assert [float(p) for p in sampler.token_proportions] == pytest.approx(WEIGHTS, abs=1e-4)


def test_token_shares_measured_over_prefixes_windows_and_steps() -> None:
    """Two epochs on 4 ranks. After every step each source's tokens are within the
    claimed slack of its target plus the tokens of the part of a window handed out; the
    largest deviation of the token shares is measured over prefixes of at least one
    window, and per step (large: a step's batches come from one run of lengths)."""
    samplers = ranks(4)
    sampler = samplers[0]
    window = sampler.window
    means = [t / n for t, n in zip(sampler.source_tokens, SIZES, strict=True)]
    longest = [int(LENGTHS[o : o + n].max()) for o, n in zip(OFFSETS, SIZES, strict=True)]
    slack = claimed_slack(sampler)
    token_share = [float(p) for p in sampler.token_proportions]
    worst_prefix, worst_late, worst_step, worst_bound = 0.0, 0.0, 0.0, 0.0
    consumed: list[int] = []
    epoch_length = sampler.epoch_length
    for epoch in range(2):
        for s in samplers:
            s.set_epoch(epoch)
        for step in steps_of(samplers):
            taken = [i for batch in step for i in batch]
            consumed += taken
            here = tokens_by_source(taken)
            worst_step = max(
                worst_step,
                max(abs(h / sum(here) - w) for h, w in zip(here, token_share, strict=True)),
            )
            position = len(consumed)
            total = tokens_by_source(consumed)
            if position >= window:
                share = max(
                    abs(t / sum(total) - w) for t, w in zip(total, token_share, strict=True)
                )
                worst_prefix = max(worst_prefix, share)
                if position >= epoch_length:
                    worst_late = max(worst_late, share)
            partial = position % epoch_length % window
            for d in range(len(SIZES)):
                off = abs(total[d] - token_share[d] * sum(total))
                bound = slack[d] + partial * max(longest)
                assert off <= bound, (position, d)
                worst_bound = max(worst_bound, off / bound)
    assert len(consumed) == 2 * epoch_length
    # Printed with -s; the sampler's docstring quotes these numbers, checked here.
    print(
        f"window {window}: largest token-share deviation over prefixes of a window or "
        f"more {worst_prefix:.4f}, in the second epoch {worst_late:.4f}, per step "
        f"{worst_step:.3f}; at most {worst_bound:.2f} of the claimed bound used"
    )
    quoted = (
        f"({len(SIZES)} sources, mean lengths {min(means):.0f} to {max(means):.0f}, 4 "
        f"ranks, window {window}): the token shares' largest deviation from the weights "
        f"over prefixes of a window or more is {worst_prefix:.3f} ({worst_late:.3f} in the "
        f"second epoch), per step {worst_step:.2f};"
    )
    assert quoted in " ".join((DistributedMixtureTokenBatchSampler.__doc__ or "").split())
    assert worst_late < 0.05
    assert worst_prefix < 0.13
    assert worst_bound < 0.5
    assert worst_step > 0.1  # a step is not a mixture: one run of lengths of a window


def test_the_stream_is_within_the_slack_at_every_prefix() -> None:
    """The stream itself (before windows sort it): at every prefix each source's tokens
    are within the claimed slack of its share of the prefix's tokens."""
    sampler = ranks(1)[0]
    stream = sampler.order().stream
    assert stream is not None
    positions = torch.arange(2 * sampler.epoch_length)
    values = stream.stream_at(positions)
    source = (values.unsqueeze(1) >= torch.tensor(OFFSETS)).sum(1) - 1
    slack = claimed_slack(sampler)
    every = LENGTHS[values].to(torch.int64).cumsum(0)
    for d in range(len(SIZES)):
        mine = (source == d).to(torch.int64)
        tokens = (LENGTHS[values].to(torch.int64) * mine).cumsum(0)
        share = float(sampler.token_proportions[d])
        assert float((tokens - share * every).abs().max()) <= slack[d]


def test_every_window_holds_exactly_the_streams_positions() -> None:
    sampler = ranks(1)[0]
    order = sampler.order()
    stream = order.stream
    assert stream is not None
    window = sampler.window
    for lo in (0, window, 3 * window):
        hi = min(lo + window, order.size)
        got = order.at(torch.arange(lo, hi)).tolist()
        assert Counter(got) == Counter(stream.at(torch.arange(lo, hi)).tolist())


def test_the_budget_and_equal_steps_on_every_rank() -> None:
    for world in (1, 3, 8):
        shares = [list(s) for s in ranks(world, tail="pad")]
        assert len({len(share) for share in shares}) == 1
        for share in shares:
            for batch in share:
                assert max(int(LENGTHS[i]) for i in batch) * len(batch) <= BUDGET


def test_once_per_pass_over_epochs() -> None:
    """Every source's draws over three epochs, cut at its pass boundaries in the stream
    (a window boundary every pass, as windows hold the stream's positions), repeat
    nothing; a sample comes again only in the next pass."""
    samplers = ranks(2, epoch_length=1000)
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        stream = samplers[0].order().stream
        handed = sorted(flat(steps_of(samplers)))
        assert handed == sorted(stream.at(torch.arange(1000)).tolist())
    stream_draws = samplers[0].order().stream.stream_at(torch.arange(3000)).tolist()
    for d, (offset, size) in enumerate(zip(OFFSETS, SIZES, strict=True)):
        mine = [i for i in stream_draws if offset <= i < offset + size]
        for start in range(0, len(mine), size):
            one_pass = mine[start : start + size]
            assert len(set(one_pass)) == len(one_pass), (d, start)


def test_first_and_last_position_of_a_pass() -> None:
    """Source 0 (1200 samples) ends its first pass inside epoch 0: its last draw of pass 0
    and first of pass 1 are in the stream there, all 1200 distinct up to the last, and
    the epoch hands out exactly the stream's draws."""
    sampler = ranks(1)[0]
    stream = sampler.order().stream
    source, passes, item = stream.passes(torch.arange(sampler.epoch_length))
    ones = (source == 0).nonzero()[:, 0]
    last = ones[(passes[ones] == 0).nonzero()[-1, 0]]
    first_next = ones[(passes[ones] == 1).nonzero()[0, 0]]
    assert int(item[last]) == SIZES[0] - 1 and int(item[first_next]) == 0
    assert int(first_next) > int(last)
    before = stream.at(ones[ones <= last]).tolist()
    assert sorted(before) == list(range(OFFSETS[0], OFFSETS[0] + SIZES[0]))
    assert stream.at(first_next.reshape(1)).tolist()[0] in before  # pass 1 begins anew
    handed = Counter(flat(steps_of([sampler])))
    assert handed == Counter(stream.at(torch.arange(sampler.epoch_length)).tolist())


def test_resume_on_another_world_size_loses_and_repeats_nothing() -> None:
    whole = Counter(flat(steps_of(ranks(4))))
    for taken in (0, 1, 7):
        samplers = ranks(4)
        iterators = [iter(s) for s in samplers]
        head = [next(it) for _ in range(taken) for it in iterators]
        state = samplers[0].state_dict()
        assert all(s.state_dict() == state for s in samplers)
        resumed = ranks(3)
        for s in resumed:
            s.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = steps_of(resumed)
        seen = Counter([i for b in head for i in b] + flat(rest))
        assert seen == whole, taken


def test_an_epochs_end_continues_the_passes_into_the_next() -> None:
    samplers = ranks(2, epoch_length=700)
    for s in samplers:
        list(s)
    state = samplers[0].state_dict()
    assert state["finished"] and state["position"] == 700
    resumed = ranks(5, epoch_length=700)
    for s in resumed:
        s.load_state_dict(state)
        s.set_epoch(1)
    after = sorted(flat(steps_of(resumed)))
    stream = resumed[0].order().stream
    assert stream.first == 700
    assert after == sorted(stream.stream_at(torch.arange(700, 1400)).tolist())


@pytest.mark.parametrize("taken", [1, 3, 5, 7])
def test_resume_on_another_world_size_right_after_a_reweight(taken: int) -> None:
    """set_weights after ``taken`` steps on 4 ranks (mid-window: it takes effect from the
    next window boundary), a state at once, resumed on 3: the
    rest is what the 4 ranks would have given, head and rest are the stream's draws
    (nothing lost or repeated within a pass), and the token shares from there follow the
    new weights."""
    new = (0.1, 0.1, 0.8)
    samplers = ranks(4)
    iterators = [iter(s) for s in samplers]
    head = [next(it) for _ in range(taken) for it in iterators]
    for s in samplers:
        with pytest.warns(SamplerWarning, match="set_weights during an iteration"):
            s.set_weights(list(new))
    state = samplers[0].state_dict()
    window = samplers[0].window
    position = len([i for b in head for i in b])
    assert position % window  # each step count here ends inside a window
    assert state["schedule"][-1][0] == -(-position // window) * window
    resumed = ranks(3)
    for s in resumed:
        s.load_state_dict(state)
    rest = flat(steps_of(resumed))
    assert Counter(rest) == Counter(flat(steps_of(samplers)))  # the same on 4 ranks
    assert [float(p) for p in resumed[0].token_proportions] == pytest.approx(new, abs=1e-4)
    handed = [i for b in head for i in b] + rest
    length = resumed[0].epoch_length
    stream = resumed[0].order().stream.at(torch.arange(length)).tolist()
    assert Counter(handed) == Counter(stream)  # the windows hand out the stream's draws
    source_2 = [i for i in stream if i >= OFFSETS[2]]
    assert len(source_2) > SIZES[2]  # the new weights start its second pass
    assert len(set(source_2[: SIZES[2]])) == SIZES[2]  # its first pass repeats nothing
    # From the change on, each source's tokens are within twice the claimed slack (two
    # prefixes) of the new target, and the shares near the new weights.
    after = stream[state["schedule"][-1][0] :]
    tokens = tokens_by_source(after)
    slack = claimed_slack(resumed[0])
    shares = [float(p) for p in resumed[0].token_proportions]
    for d in range(len(SIZES)):
        assert abs(tokens[d] - shares[d] * sum(tokens)) <= 2 * slack[d]
    assert [t / sum(tokens) for t in tokens] == pytest.approx(new, abs=0.05)


def test_a_state_of_another_mixture_is_refused_naming_the_field() -> None:
    state = ranks(1)[0].state_dict()
    other_sizes = DistributedMixtureTokenBatchSampler(
        [range(1000), range(500), range(3000)], list(WEIGHTS), LENGTHS, BUDGET, 1, 0
    )
    with pytest.raises(ValueError, match="'sizes'"):
        other_sizes.load_state_dict(state)
    with pytest.raises(ValueError, match="'max_tokens'"):
        ranks(1)[0].__class__(
            [range(n) for n in SIZES], list(WEIGHTS), LENGTHS, 2048, 1, 0
        ).load_state_dict(state)
    with pytest.raises(ValueError, match="'length_digest'"):
        DistributedMixtureTokenBatchSampler(
            [range(n) for n in SIZES], list(WEIGHTS), LENGTHS.flip(0), BUDGET, 1, 0
        ).load_state_dict(state)
    with pytest.raises(ValueError, match="'seed'"):
        ranks(1, seed=3)[0].load_state_dict(state)
    mixture = DistributedMixtureBatchSampler([range(n) for n in SIZES], [1, 1, 1], 4, 1, 0)
    with pytest.raises(
        ValueError, match="state field 'sampler' is 'DistributedMixtureBatchSampler'"
    ):
        ranks(1)[0].load_state_dict(mixture.state_dict())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lengths": LENGTHS[:-1]}, r"lengths must hold one length per sample .*4500.* got 4499"),
        ({"weights": [1, -1, 1]}, r"weights\[1\] must be at least 0, got -1"),
        ({"weights": [1, float("nan"), 1]}, r"weights\[1\] must be finite"),
        ({"weights": [1, 1]}, r"one weight per dataset \(3\), got 2"),
        ({"weights": [0, 0, 0]}, r"weights must not all be 0"),
        ({"max_tokens": 0}, r"max_tokens"),
        ({"window": 0}, r"window"),
        ({"datasets": [range(1200), range(0), range(3300)]}, r"datasets\[1\] is empty"),
    ],
)
def test_errors_name_the_argument_and_the_value(change: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "datasets": [range(n) for n in SIZES],
        "weights": list(WEIGHTS),
        "lengths": LENGTHS,
        "max_tokens": BUDGET,
        "num_replicas": 1,
        "rank": 0,
        **change,
    }
    with pytest.raises(ValueError, match=message):
        DistributedMixtureTokenBatchSampler(**arguments)


def test_a_source_without_tokens_cannot_have_a_token_weight() -> None:
    lengths = LENGTHS.clone()
    lengths[OFFSETS[1] : OFFSETS[2]] = 0
    datasets = [range(n) for n in SIZES]
    with pytest.raises(ValueError, match=r"weights\[1\] is 0.3 but the lengths of datasets\[1\]"):
        DistributedMixtureTokenBatchSampler(datasets, list(WEIGHTS), lengths, BUDGET, 1, 0)
    paused = DistributedMixtureTokenBatchSampler(datasets, [1, 0, 1], lengths, BUDGET, 1, 0)
    assert paused.proportions[1] == 0
    with pytest.raises(ValueError, match=r"weights\[1\]"):
        paused.set_weights([1, 1, 1])


def test_token_weights_of_the_sources_totals_give_every_sample_once() -> None:
    """Weights proportional to each source's tokens draw each source in proportion to
    its size: an epoch is every sample once, as the token sampler over the concatenation."""
    sampler = ranks(1)[0]
    totals = list(sampler.source_tokens)
    for world in (1, 3):
        samplers = ranks(world, weights=totals)
        assert sorted(flat(steps_of(samplers))) == list(range(sum(SIZES)))


def test_a_pickled_sampler_gives_the_same_batches_and_len_matches() -> None:
    """As a DataLoader worker receives it: pickled with its settings and schedule, its
    plans computed again."""
    sampler = ranks(3)[1]
    sampler.set_weights([1, 1, 1])
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy.schedule == sampler.schedule
    batches = list(sampler)
    assert list(copy) == batches and len(copy) == len(batches)


def test_without_shuffling_each_pass_is_read_in_order() -> None:
    sampler = ranks(1, shuffle=False)[0]
    draws = sampler.order().stream.at(torch.arange(sampler.epoch_length)).tolist()
    for offset, size in zip(OFFSETS, SIZES, strict=True):
        mine = [i - offset for i in draws if offset <= i < offset + size]
        assert mine == [k % size for k in range(len(mine))]


def test_the_settings_ranks_compare_hold_the_schedule_and_the_budget() -> None:
    settings = ranks(1)[0].settings()
    assert settings["sizes"] == list(SIZES) and settings["max_tokens"] == BUDGET
    assert settings["schedule"][0][0] == 0 and "length digest" in settings


@pytest.mark.parametrize("world", [1, 3])
def test_token_weights_proportional_to_the_token_totals_give_every_sample_once(
    world: int,
) -> None:
    """The docstring's promise, with token totals in the millions (far past 65536 parts):
    the rates are computed from the exact weights, so they are the sizes' proportions and
    an epoch of the default length is every sample exactly once."""
    generator = torch.Generator().manual_seed(0)
    sizes = (42_606, 5_009)
    lengths = torch.cat(
        [
            torch.randint(20, 100, (sizes[0],), generator=generator),
            torch.randint(200, 560, (sizes[1],), generator=generator),
        ]
    )
    totals = [int(lengths[: sizes[0]].sum()), int(lengths[sizes[0] :].sum())]
    assert sum(totals) > 2**16
    samplers = [
        DistributedMixtureTokenBatchSampler(
            [range(n) for n in sizes], totals, lengths, 4096, world, rank, tail="uneven"
        )
        for rank in range(world)
    ]
    assert samplers[0].proportions == (
        Fraction(sizes[0], sum(sizes)),
        Fraction(sizes[1], sum(sizes)),
    )
    taken = Counter(i for sampler in samplers for batch in sampler for i in batch)
    assert sorted(taken) == list(range(sum(sizes)))
    assert set(taken.values()) == {1}
    assert samplers[0].token_proportions == tuple(Fraction(t, sum(totals)) for t in totals)


def test_tail_none_is_refused_as_by_the_token_sampler() -> None:
    with pytest.raises(ValueError, match="tail must be one of 'pad', 'drop', 'uneven', got None"):
        ranks(1, tail=None)


def test_a_state_saved_before_the_merge_by_tokens_is_refused_naming_the_field() -> None:
    """A state without the ``mixing`` field was saved by a version that drew each source at
    its token weight over its mean length: another stream, so no position of it loads."""
    state = ranks(1)[0].state_dict()
    assert state["mixing"] == "merged by tokens"
    del state["mixing"]
    with pytest.raises(ValueError, match="state field 'mixing' is missing"):
        ranks(2)[1].load_state_dict(state)


def test_a_seed_or_shuffle_set_after_building_reaches_the_merge_as_the_passes() -> None:
    """The merge reads each source's passes: a seed or shuffle changed on the sampler is
    the one it merges over, as if the sampler had been built with it."""
    (changed,) = ranks(1)
    changed.seed, changed.shuffle = 11, False
    (built,) = ranks(1, seed=11, shuffle=False)
    assert list(changed) == list(built)
    assert changed.order().stream.schedule.seed == 11
