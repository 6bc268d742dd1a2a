"""``iter()`` of the batch and token samplers costs nothing in the world size (as the
stock sampler's): the unequal-counts check reads the fewest and the most batches a rank
takes (``Layout.count_range``) instead of every rank's count."""

from __future__ import annotations

import itertools
import time
import warnings

import pytest
import torch

from samplers import DistributedBatchSampler, DistributedSampler, DistributedTokenBatchSampler
from samplers.plan import Batched, Strided
from samplers.tokens.layout import TokenLayout
from samplers.tokens.order import TokenOrder

HUGE = 10**7  # 9.9 s per iter() when every rank's count was computed


@pytest.mark.parametrize(
    "make",
    [
        lambda: DistributedBatchSampler(range(100), 2, HUGE, 5, tail="uneven"),
        lambda: DistributedBatchSampler(range(100), 2, HUGE, HUGE - 1, tail="pad"),
        lambda: DistributedTokenBatchSampler([3] * 100, 8, HUGE, 5),
        lambda: DistributedSampler(range(100), HUGE, 5, tail="uneven"),
    ],
    ids=["batch-uneven", "batch-pad", "token", "sampler"],
)
def test_iter_at_ten_million_ranks_is_immediate(make: object) -> None:
    sampler = make()  # type: ignore[operator]
    began = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unequal-counts warning, tested below
        items = list(sampler)
    assert time.monotonic() - began < 1.0
    assert len(items) <= 1


def test_the_unequal_counts_warning_still_names_the_counts() -> None:
    with pytest.warns(UserWarning, match=r"gives ranks 0 or 1 batches"):
        list(DistributedBatchSampler(range(100), 2, HUGE, 5, tail="uneven"))
    with pytest.warns(UserWarning, match=r"gives ranks 0 or 1 batches"):
        list(DistributedTokenBatchSampler([3] * 100, 8, HUGE, 5))


def test_count_range_is_the_fewest_and_the_most_of_every_ranks_count() -> None:
    layouts: list[object] = []
    for size, world, start in itertools.product((0, 1, 7, 23), (1, 2, 3, 5, 8), (0, 3)):
        start = min(start, size)
        layouts.append(Strided.of(size, world, "uneven", start))
        layouts.append(Strided.of(size, world, "pad", start))
        for batch, tail in itertools.product((1, 2, 3), ("pad", "drop", "uneven")):
            layouts.append(Batched(size, world, batch, tail, start))  # type: ignore[arg-type]
        lengths = torch.tensor([(5 * i) % 7 + 1 for i in range(size)])
        order = TokenOrder(lengths, 9, "padded", 4, shuffle=True, seed=1, epoch=0)
        for tail in ("pad", "drop", "uneven"):
            layouts.append(TokenLayout(order, world, tail, start))  # type: ignore[arg-type]
    for layout in layouts:
        counts = layout.counts()  # type: ignore[attr-defined]
        assert layout.count_range() == (min(counts), max(counts)), layout  # type: ignore[attr-defined]
