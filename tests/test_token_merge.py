"""The schedule counted in tokens (:mod:`samplers.mixture.merge`): the sources' draws merged
by their tokens over their weight, every prefix within one sample of a common level."""

from __future__ import annotations

import copy
import math
import pickle
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import samplers.mixture.merge as merge
import samplers.mixture.pass_tokens as pass_tokens
from samplers.mixture.merge import TokenMerge
from samplers.mixture.passes import Passes, drawn_items
from samplers.mixture.schedule import fraction, parts
from samplers.mixture.tokens import token_parts


def _reference(mixture: TokenMerge, positions: int) -> list[tuple[int, int]]:
    """The merge one position at a time: the draw with the least (key, pass, source), its
    key the double ``(2 * tokens since the segment began + its length) / 2 a_d``."""
    sizes = mixture.sizes
    passes, size_tensor = Passes(sizes, mixture.seed), torch.tensor(sizes)
    offsets = [sum(sizes[:d]) for d in range(len(sizes))]
    lengths = torch.as_tensor(mixture.lengths).tolist()

    def length(d: int, y: int) -> int:
        item = drawn_items(
            passes, size_tensor, mixture.shuffle, torch.tensor([d]), torch.tensor([y])
        )
        return lengths[offsets[d] + int(item[0])]

    counts, tokens = [0] * len(sizes), [0] * len(sizes)
    bounds = [start for start, _ in mixture.segments][1:]
    segment, base = 0, list(tokens)
    found = []
    for position in range(positions):
        while segment < len(bounds) and position >= bounds[segment]:
            segment, base = segment + 1, list(tokens)
        parts = mixture.segments[segment][1]
        _, _, d = min(
            ((2 * (tokens[d] - base[d]) + length(d, counts[d])) / (2 * a), counts[d] // sizes[d], d)
            for d, a in enumerate(parts)
            if a
        )
        found.append((d, counts[d]))
        tokens[d] += length(d, counts[d])
        counts[d] += 1
    return found


@st.composite
def _mixtures(draw: Any) -> tuple[TokenMerge, int]:
    count = draw(st.integers(1, 4))
    sizes = tuple(draw(st.lists(st.integers(1, 30), min_size=count, max_size=count)))
    lengths = draw(
        st.lists(
            st.integers(0, 60) | st.sampled_from([0, 1, 4096]),
            min_size=sum(sizes),
            max_size=sum(sizes),
        )
    )
    start = 0
    for size in sizes:  # every source has tokens
        if not any(lengths[start : start + size]):
            lengths[start] = 1
        start += size
    parts = st.lists(st.integers(0, 6), min_size=count, max_size=count).filter(any)
    segments = [(0, tuple(draw(parts)))]
    for begin in sorted(set(draw(st.lists(st.integers(1, 120), max_size=2)))):
        segments.append((begin, tuple(draw(parts))))
    mixture = TokenMerge(
        sizes,
        tuple(segments),
        torch.tensor(lengths),
        draw(st.integers(0, 3)),
        draw(st.booleans()),
    )
    return mixture, draw(st.integers(1, 200))


def _fresh(mixture: TokenMerge) -> TokenMerge:
    return TokenMerge(
        mixture.sizes, mixture.segments, mixture.lengths, mixture.seed, mixture.shuffle
    )


@given(
    _mixtures(),
    st.sampled_from([1, 2, 3, 7, 4096]),
    st.sampled_from([0, 5, 1 << 22]),
    st.sampled_from([0, 1, 6, 1 << 14]),
    st.data(),
)
def test_positions_are_the_merge_of_the_sources_by_tokens_over_weight(
    case: tuple[TokenMerge, int], block: int, forward: int, close: int, data: Any
) -> None:
    """Read in order, and anywhere: by merging on from the last run (or the segment's
    start) up to ``forward`` positions ahead; past that, by the search of a level at
    most ``close`` draws before it, merged on from there (0: the level of the position
    itself, its ties in order)."""
    mixture, positions = case
    expected = _reference(mixture, positions)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(merge, "BLOCK", block)
        patch.setattr(pass_tokens, "BLOCK", block)
        patch.setattr(merge, "_FORWARD", forward)
        patch.setattr(merge, "_CLOSE", close)
        source, drawn = mixture.locate(torch.arange(positions))
        assert list(zip(source.tolist(), drawn.tolist(), strict=True)) == expected
        # Anywhere, in any order, from a schedule that computed nothing before.
        asked = data.draw(st.lists(st.integers(0, positions - 1), min_size=1, max_size=6))
        source, drawn = _fresh(mixture).locate(torch.tensor(asked))
        assert list(zip(source.tolist(), drawn.tolist(), strict=True)) == [
            expected[p] for p in asked
        ]
        at = data.draw(st.integers(0, positions))
        counts = [sum(1 for d, _ in expected[:at] if d == e) for e in range(len(mixture.sizes))]
        assert _fresh(mixture).counts(at) == counts
        assert mixture.counts(at) == counts


@given(_mixtures())
def test_every_prefix_is_within_one_sample_of_a_common_level(case: tuple[TokenMerge, int]) -> None:
    """Per segment, the tokens ``X_d`` each source drew since it began: some level ``L``
    has ``|X_d - L * w_d| <= max_d / 2`` for every source with a weight (up to the keys'
    rounding, a relative 2**-52), so ``|X_d - w_d * X| <= (max_d + w_d * (sum of the
    others' max)) / 2``, plus the rounding."""
    mixture, positions = case
    source, drawn = mixture.locate(torch.arange(positions))
    lengths = mixture.lengths.tolist()
    passes, sizes = Passes(mixture.sizes, mixture.seed), torch.tensor(mixture.sizes)
    items = drawn_items(passes, sizes, mixture.shuffle, source, drawn).tolist()
    offsets = [sum(mixture.sizes[:d]) for d in range(len(mixture.sizes))]
    longest = [max(lengths[offsets[d] : offsets[d] + n]) for d, n in enumerate(mixture.sizes)]
    starts = [start for start, _ in mixture.segments]
    rounding = Fraction(1, 1 << 50)
    for position in range(positions + 1):
        segment = max(i for i, start in enumerate(starts) if start <= position)
        begin, parts = mixture.segments[segment]
        tokens = [0] * len(parts)
        for p in range(begin, position):
            d = int(source[p])
            tokens[d] += lengths[offsets[d] + items[p]]
        weights = [Fraction(a, sum(parts)) for a in parts]
        drawn_by = [d for d, w in enumerate(weights) if w]
        level_at_most = min((tokens[d] + Fraction(longest[d], 2)) / weights[d] for d in drawn_by)
        level_above = max((tokens[d] - Fraction(longest[d], 2)) / weights[d] for d in drawn_by)
        assert level_above <= level_at_most * (1 + rounding) + rounding, (position, tokens)
        every = sum(tokens)
        for d in drawn_by:
            others = sum(longest[e] for e in drawn_by if e != d)
            slack = (longest[d] + weights[d] * others) / 2
            assert abs(tokens[d] - weights[d] * every) < slack * (1 + rounding) + 1
        assert all(tokens[d] == 0 for d, w in enumerate(weights) if not w)


@given(_mixtures())
def test_each_source_draws_in_its_order_across_segments(case: tuple[TokenMerge, int]) -> None:
    """Its draws 0, 1, 2, ...: a pass is read whole before the next begins."""
    mixture, positions = case
    source, drawn = mixture.locate(torch.arange(positions))
    for d in range(len(mixture.sizes)):
        assert drawn[source == d].tolist() == list(range(int((source == d).sum())))


@pytest.mark.parametrize(("forward", "close"), [(0, 0), (0, merge._CLOSE), (1 << 22, 0)])
def test_a_large_mixture_read_in_windows_is_read_anywhere_alike(
    monkeypatch: pytest.MonkeyPatch, forward: int, close: int
) -> None:
    """A fresh merge reads a position directly: merged on from the last run, from a
    level found a little before it, or from the level of the position itself."""
    monkeypatch.setattr(merge, "_FORWARD", forward)
    monkeypatch.setattr(merge, "_CLOSE", close)
    generator = torch.Generator().manual_seed(0)
    sizes = tuple(torch.randint(1, 3000, (40,), generator=generator).tolist())
    lengths = torch.randint(0, 500, (sum(sizes),), generator=generator)
    mixture = TokenMerge(sizes, ((0, tuple(range(1, 41))), (50_000, (3,) * 40)), lengths, 7)
    total = 120_000
    parts = [mixture.locate(torch.arange(lo, lo + 7_000)) for lo in range(0, total, 7_000)]
    source = torch.cat([s for s, _ in parts])[:total]
    drawn = torch.cat([d for _, d in parts])[:total]
    for at in (0, 1, 4095, 4096, 49_999, 50_000, 50_001, 99_998, total - 1):
        found = _fresh(mixture).locate(torch.tensor([at, at - 1 if at else 0]))
        assert found[0].tolist() == [int(source[at]), int(source[max(at - 1, 0)])]
        assert found[1].tolist() == [int(drawn[at]), int(drawn[max(at - 1, 0)])]
        counts = torch.bincount(source[:at], minlength=40).tolist()
        assert _fresh(mixture).counts(at) == counts


def _large() -> TokenMerge:
    generator = torch.Generator().manual_seed(1)
    sizes = tuple(torch.randint(1, 2000, (30,), generator=generator).tolist())
    lengths = torch.randint(1, 400, (sum(sizes),), generator=generator)
    return TokenMerge(sizes, ((0, tuple(range(1, 31))), (40_000, (2,) * 30)), lengths, 5)


def test_the_items_handed_back_are_those_of_the_passes() -> None:
    """``locate_items``'s third column, each draw's item (the order reads it instead of
    computing it again), is the item of its pass the passes give, for consecutive
    positions (one run) and scattered ones alike."""
    mixture = _large()
    sizes = torch.tensor(mixture.sizes)
    for positions in (torch.arange(39_000, 41_000), torch.tensor([5, 3, 40_001, 39_999, 5])):
        source, drawn, items = mixture.locate_items(positions)
        expected = drawn_items(Passes(mixture.sizes, 5), sizes, True, source, drawn)
        assert torch.equal(items, expected)
        assert [t.tolist() for t in mixture.locate(positions)] == [source.tolist(), drawn.tolist()]


def test_threads_reading_one_merge_at_different_places_get_what_one_thread_gets() -> None:
    """The merge's caches (where its last run ended, the blocks of lengths) are shared:
    two threads reading the stream in chunks, one from the start and one from the second
    segment, switching as often as the interpreter allows, each get the positions a
    fresh merge read alone gives."""
    import sys
    import threading

    mixture, chunk = _large(), 1_500
    starts = {0: range(0, 30_000, chunk), 1: range(40_000 - 4 * chunk, 70_000, chunk)}
    expected = {
        k: [_fresh(mixture).locate(torch.arange(lo, lo + chunk)) for lo in where]
        for k, where in starts.items()
    }
    found: dict[int, list[Any]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def read(k: int) -> None:
        try:
            for lo in starts[k]:
                found[k].append(mixture.locate(torch.arange(lo, lo + chunk)))
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=read, args=(k,)) for k in found]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures
    for k, runs in expected.items():
        assert len(found[k]) == len(runs)
        for (s, d), (es, ed) in zip(found[k], runs, strict=True):
            assert torch.equal(s, es) and torch.equal(d, ed)


def test_a_copy_and_a_pickled_one_give_the_same_positions() -> None:
    lengths = torch.arange(1, 61)
    mixture = TokenMerge((20, 40), ((0, (1, 2)), (30, (2, 1))), lengths, 3)
    expected = mixture.locate(torch.arange(100))
    for other in (copy.copy(mixture), copy.deepcopy(mixture), pickle.loads(pickle.dumps(mixture))):
        found = other.locate(torch.arange(100))
        assert torch.equal(found[0], expected[0]) and torch.equal(found[1], expected[1])
    assert mixture.changed(30, (2, 1)) == mixture  # the settings compare, not the caches


def test_what_cannot_be_merged_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="source 1 has a positive token weight but no tokens"):
        TokenMerge((2, 2), ((0, (1, 1)),), torch.tensor([1, 2, 0, 0]))
    with pytest.raises(ValueError, match="one value per sample"):
        TokenMerge((2, 2), ((0, (1, 1)),), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="segments start at 0 and increase"):
        TokenMerge((2,), ((5, (1,)),), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="parts must have 2 values"):
        TokenMerge((2, 2), ((0, (1,)),), torch.tensor([1, 2, 3, 4]))
    huge = TokenMerge((2, 2), ((0, (1, 1)),), torch.tensor([1 << 52] * 4))
    with pytest.raises(OverflowError, match="pass 2\\*\\*51"):
        huge.locate(torch.arange(4))
    with pytest.raises(ValueError, match="below 2\\*\\*53"):
        TokenMerge((2,), ((0, (1 << 53,)),), torch.tensor([1, 2]))


def test_token_parts_are_exact_when_they_fit_and_rounded_finely_otherwise() -> None:
    assert token_parts([0.6, 0.3, 0.1]) == (6, 3, 1)
    assert token_parts([10**12, 3 * 10**12, 0]) == (1, 3, 0)
    weights = [0.05612329752074041, 0.8700101551766398, 1e-9, 0.5699993338763802]
    found = token_parts(weights)
    assert sum(found) == pytest.approx(1 << 40, rel=1e-9) and min(found) >= 1
    for part, weight in zip(found, weights, strict=True):
        assert part / sum(found) == pytest.approx(weight / sum(weights), rel=1e-3, abs=2**-40)


def _parts_in_fractions(weights: list[Any]) -> tuple[int, ...]:
    """:func:`token_parts` written in ``Fraction`` arithmetic (the definition), in lowest
    terms."""
    exact = [fraction(w) for w in weights]
    common = math.lcm(*(f.denominator for f in exact))
    values = [int(f * common) for f in exact]
    divisor = math.gcd(*values)
    found = tuple(v // divisor for v in values)
    if max(found) < merge.EXACT:
        return found
    total = sum(exact)
    rounded = [max(round(f / total * 2**40), 1) if f else 0 for f in exact]
    return tuple(v // math.gcd(*rounded) for v in rounded)


_WEIGHT = st.one_of(
    st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=2**70),
    st.fractions(min_value=0, max_value=10**9, max_denominator=10**12),
    st.sampled_from([0, 0.5, 0.1, 1e-300, 5e-324]),
)


@given(st.lists(_WEIGHT, min_size=1, max_size=12).filter(any))
def test_token_parts_are_the_exact_fractions_rounded_as_defined(weights: list[Any]) -> None:
    """The parts computed in integers are those of the definition in fractions, exact or
    rounded to about 2**40 (ties to even), for floats, integers and fractions alike."""
    assert token_parts(weights) == _parts_in_fractions(weights)


def test_token_parts_round_ties_to_even() -> None:
    """Rounded parts exactly halfway between two integers go to the even one."""
    odd = 2**13 + 1  # parts summing to 2**41 * odd (past 2**53): a part 3 * odd is 1.5
    total = 2**41 * odd
    assert token_parts([3 * odd, 1, total - 3 * odd - 1])[:2] == (2, 1)  # 1.5 -> 2
    assert token_parts([5 * odd, 1, total - 5 * odd - 1])[:2] == (2, 1)  # 2.5 -> 2
    assert token_parts([7 * odd, 1, total - 7 * odd - 1])[:2] == (4, 1)  # 3.5 -> 4


def test_numpy_floats_give_the_parts_of_the_same_python_floats() -> None:
    """A weight that is a numpy float reads as the Python float of the same value (its
    ``repr`` is not a decimal: ``np.float64(0.1)``)."""
    numpy = pytest.importorskip("numpy")
    weights = [0.1, 0.123456789, 0.7]
    as_numpy = [numpy.float64(w) for w in weights]
    assert token_parts(as_numpy) == token_parts(weights)
    assert parts(as_numpy) == parts(weights)
    assert fraction(numpy.float32(0.5)) == Fraction(1, 2)
