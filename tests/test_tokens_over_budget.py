"""What each tail does to a sample longer than ``max_tokens``: the over-budget warning
and the token sampler's docstring say it, and these tests hold them to the behaviour."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import pytest

from samplers import DistributedTokenBatchSampler
from samplers.tokens.checks import OVER_BUDGET

BUDGET = 6
#: With tail="uneven", an epoch of fewer samples than ranks gives the last ranks one batch
#: fewer, with this warning at iteration (tests/test_tokens.py asserts it).
UNEQUAL = "ignore:DistributedTokenBatchSampler\\(tail='uneven'\\) gives ranks:UserWarning"


def _cases() -> list[tuple[list[int], int, int]]:
    """144 small epochs, each with a sample longer than the budget: (lengths, world size,
    seed)."""
    cases = []
    draw = random.Random(0)
    for size, world, seed in itertools.product(range(1, 13), range(1, 5), range(3)):
        lengths = [draw.randint(1, BUDGET) for _ in range(size)]
        lengths[draw.randrange(size)] = BUDGET + draw.randint(1, 4)
        cases.append((lengths, world, seed))
    return cases


CASES = _cases()


def _handed_out(tail: str) -> list[int]:
    """For every case and every over-long sample in it: how often epoch 0 hands it out,
    over all ranks. Asserts the warning at construction says what ``tail`` does."""
    counts = []
    for lengths, world, seed in CASES:
        with pytest.warns(UserWarning, match=re.escape(OVER_BUDGET[tail])):
            samplers = [
                DistributedTokenBatchSampler(lengths, BUDGET, world, rank, seed=seed, tail=tail)
                for rank in range(world)
            ]
        seen = Counter(i for sampler in samplers for batch in sampler for i in batch)
        counts += [seen[i] for i, length in enumerate(lengths) if length > BUDGET]
    return counts


@pytest.mark.filterwarnings(UNEQUAL)
def test_with_uneven_every_over_long_sample_is_handed_out_exactly_once() -> None:
    assert set(_handed_out("uneven")) == {1}


def test_with_pad_every_over_long_sample_is_handed_out() -> None:
    assert min(_handed_out("pad")) >= 1


def test_with_drop_an_over_long_sample_can_be_left_out_and_is_never_repeated() -> None:
    counts = _handed_out("drop")
    assert set(counts) == {0, 1}  # left out in some epochs, as the warning says
    assert 0 < counts.count(0) < len(counts)


def test_the_warning_never_says_an_over_long_sample_is_kept_whatever_the_tail() -> None:
    assert "exactly once" in OVER_BUDGET["uneven"]
    assert "at least once" in OVER_BUDGET["pad"]
    assert "left out" in OVER_BUDGET["drop"]
    for said in OVER_BUDGET.values():
        assert "none is dropped" not in said and "never" not in said
