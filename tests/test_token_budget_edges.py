"""The token sampler at the edges of its arguments: a budget far above the data (cheap,
one window of the dataset at most), unsigned length dtypes, and mappings refused."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pytest
import torch

from samplers import DistributedTokenBatchSampler
from samplers.tokens.order import default_window

LENGTHS = torch.randint(1, 500, (1000,), generator=torch.Generator().manual_seed(0)).tolist()


def epoch(lengths: object, max_tokens: int, world: int, cost: str) -> list[list[list[int]]]:
    with pytest.warns(UserWarning, match="gives ranks 0 or 1 batches") if world > 1 else _none():
        return [
            list(DistributedTokenBatchSampler(lengths, max_tokens, world, r, seed=1, cost=cost))
            for r in range(world)
        ]


class _none:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


@pytest.mark.parametrize("cost", ["padded", "sum"])
@pytest.mark.parametrize("max_tokens", [2 * 10**7, 10**8, 10**12, sys.maxsize])
def test_a_budget_far_above_the_data_is_one_window_and_cheap(max_tokens: int, cost: str) -> None:
    began = time.monotonic()
    sampler = DistributedTokenBatchSampler(LENGTHS, max_tokens, 1, 0, seed=1, cost=cost)
    assert sampler.window == len(LENGTHS), "the default window is at most the dataset"
    (batches,) = epoch(LENGTHS, max_tokens, 1, cost)
    assert batches == [sorted(range(1000), key=lambda i: -LENGTHS[i])] or (
        sorted(i for batch in batches for i in batch) == list(range(1000))
    )
    assert len(batches) == 1, "the whole dataset fits the budget: one batch"
    shares = epoch(LENGTHS, max_tokens, 3, cost)
    assert sorted(i for share in shares for b in share for i in b) == list(range(1000))
    assert time.monotonic() - began < 10  # was 47 s and 4.6 GB at 10**8


def test_the_default_window_is_capped_at_the_dataset() -> None:
    lengths = torch.tensor(LENGTHS)
    assert default_window(lengths, 10**8) == 1000
    assert default_window(lengths[:3], sys.maxsize) == 3
    assert default_window(lengths[:0], sys.maxsize) == 1
    # Below the cap it is unchanged: 64 batches' worth, at most a quarter.
    per_batch = 1000 * 1000 // sum(LENGTHS)
    assert default_window(lengths, 1000) == max(2 * per_batch, min(64 * per_batch, 250)) < 1000


@pytest.mark.parametrize(
    "dtype",
    [
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.uint64,
    ],
    ids=str,
)
def test_unsigned_lengths_work(dtype: object) -> None:
    values = [length % 250 for length in LENGTHS[:50]]  # within uint8
    given = (
        torch.tensor(values).to(dtype)  # type: ignore[arg-type]
        if isinstance(dtype, torch.dtype)
        else np.array(values, dtype=dtype)  # type: ignore[call-overload]
    )
    ours = list(DistributedTokenBatchSampler(given, 600, 1, 0, seed=2))
    assert ours == list(DistributedTokenBatchSampler(values, 600, 1, 0, seed=2))


def test_an_unsigned_length_past_int64_is_an_error_naming_it() -> None:
    given = np.array([3, 2**64 - 1, 4], dtype=np.uint64)
    with pytest.raises(
        ValueError, match=r"lengths must be below 2\*\*63, got lengths\[1\] = " + str(2**64 - 1)
    ):
        DistributedTokenBatchSampler(given, 600, 1, 0)


@pytest.mark.parametrize(
    ("given", "error", "said"),
    [
        (
            [3, 2**63],
            ValueError,
            r"lengths must be below 2\*\*63, got lengths\[1\] = " + str(2**63),
        ),
        ([3, -(2**64)], ValueError, r"lengths must be at least 0, got lengths\[1\] = -"),
        ([3, "x"], TypeError, r"lengths\[1\] must be an integer, got str 'x'"),
        ([3, None], TypeError, r"lengths\[1\] must be an integer, got NoneType None"),
    ],
)
def test_a_list_torch_cannot_take_names_the_length_that_is_not_one(
    given: list[Any], error: type, said: str
) -> None:
    """Not "lengths must be integers" for an integer int64 cannot hold."""
    with pytest.raises(error, match=said):
        DistributedTokenBatchSampler(given, 600, 1, 0)


def test_integer_likes_of_several_kinds_in_a_list_are_lengths() -> None:
    mixed = [np.uint16(5), 7, np.int64(3), torch.tensor(2)]
    assert list(DistributedTokenBatchSampler(mixed, 600, 1, 0, seed=2)) == list(
        DistributedTokenBatchSampler([5, 7, 3, 2], 600, 1, 0, seed=2)
    )


@pytest.mark.parametrize("given", [{0: 5, 1: 7}, {5, 7}, frozenset({5})], ids=type)
def test_a_mapping_or_set_as_lengths_is_an_error_naming_the_argument(given: object) -> None:
    with pytest.raises(
        TypeError, match=rf"lengths must be a sequence.*got a {type(given).__name__}"
    ):
        DistributedTokenBatchSampler(given, 600, 1, 0)
