"""Each source's tokens over its passes (:mod:`samplers.mixture.pass_tokens`): ``T_d(y)``
and its inverse exact, read a block or many at a time, from a fresh reader or one that
has read before, against the sums of the lengths draw by draw."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import samplers.mixture.pass_tokens as pass_tokens
from samplers.mixture.pass_tokens import PassTokens
from samplers.mixture.passes import Passes, drawn_items

PASSES = 3


def _reader(sizes: tuple[int, ...], lengths: list[int], seed: int, shuffle: bool) -> PassTokens:
    table = torch.tensor(lengths, dtype=torch.int64)
    offsets = list(itertools.accumulate(sizes, initial=0))[:-1]
    totals = [sum(lengths[o : o + n]) for o, n in zip(offsets, sizes, strict=True)]
    read = lambda at: table.index_select(0, at)  # noqa: E731
    return PassTokens(read, sizes, offsets, totals, Passes(sizes, seed), shuffle)


def _drawn_lengths(reader: PassTokens, d: int, lengths: list[int]) -> list[int]:
    """Source ``d``'s draws' lengths over :data:`PASSES` passes, one draw at a time."""
    n = reader.sizes[d]
    drawn = torch.arange(PASSES * n)
    items = drawn_items(
        reader.passes, reader.size_tensor, reader.shuffle, torch.full_like(drawn, d), drawn
    )
    return [lengths[reader.offsets[d] + i] for i in items.tolist()]


@st.composite
def _sources(draw: Any) -> tuple[tuple[int, ...], list[int]]:
    sizes = tuple(draw(st.lists(st.integers(1, 70), min_size=1, max_size=3)))
    lengths = draw(
        st.lists(st.integers(0, 9) | st.just(1000), min_size=sum(sizes), max_size=sum(sizes))
    )
    start = 0
    for size in sizes:  # every source has tokens
        if not any(lengths[start : start + size]):
            lengths[start] = 1
        start += size
    return sizes, lengths


@given(
    _sources(),
    st.integers(0, 3),
    st.booleans(),
    st.sampled_from([1, 2, 3, 8, 4096]),
    st.sampled_from([1, 2, 5, 64]),
    st.data(),
)
def test_tokens_and_their_inverse_are_the_draws_sums(
    case: tuple[tuple[int, ...], list[int]],
    seed: int,
    shuffle: bool,
    block: int,
    bulk: int,
    data: Any,
) -> None:
    """``T_d(y)`` for every draw of three passes, in a random order (so the sums are read
    on from any point, in one call of many blocks or block by block), and ``below`` for
    up to 12 numbers of tokens; some of each also from a fresh reader."""
    sizes, lengths = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pass_tokens, "BLOCK", block)
        patch.setattr(pass_tokens, "_BULK", bulk)
        reader = _reader(sizes, lengths, seed, shuffle)
        for d in range(len(sizes)):
            each = _drawn_lengths(reader, d, lengths)
            sums = list(itertools.accumulate(each, initial=0))
            asked = data.draw(st.permutations(range(len(sums))))
            for y in asked:
                assert reader.tokens(d, y) == sums[y]
            for y in asked[:4]:
                assert _reader(sizes, lengths, seed, shuffle).tokens(d, y) == sums[y]
            values = data.draw(st.lists(st.integers(-1, sums[-1]), min_size=1, max_size=12))
            for value in values:
                expected = sum(1 for s in sums[:-1] if s < value)
                assert reader.below(d, value) == expected
            expected = sum(1 for s in sums[:-1] if s < values[0])
            assert _reader(sizes, lengths, seed, shuffle).below(d, values[0]) == expected


def test_what_is_kept_stays_bounded() -> None:
    """Many passes and blocks read: at most the latest passes' sums and blocks stay."""
    sizes = (5000, 300)
    lengths = [1 + i % 7 for i in range(sum(sizes))]
    reader = _reader(sizes, lengths, 0, True)
    for q in range(pass_tokens._CACHED_PASSES + 10):
        reader.tokens(0, q * 5000 + 4999)
        reader.tokens(1, q * 300 + 7)
    assert len(reader.sums) == pass_tokens._CACHED_PASSES
    assert len(reader.blocks) == pass_tokens._CACHED_BLOCKS
