"""Arguments that cannot work are errors naming the argument; the pad batch sampler's
repetition is what its docstring says."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from samplers import DistributedBatchSampler, DistributedSampler, unshard
from samplers.batch_sampler import MAX_PAD_BATCH


@pytest.mark.parametrize("parts", [None, 3, "ab", {0: [1]}], ids=repr)
def test_unshard_names_parts_when_it_is_not_a_sequence(parts: object) -> None:
    sampler = DistributedSampler(range(4), 2, 0)
    with pytest.raises(TypeError, match=rf"parts must be a sequence .*got {type(parts).__name__}"):
        unshard(parts, sampler)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"parts\[1\] must be a sequence of rank 1's results"):
        unshard([[1, 2], None], sampler)  # type: ignore[list-item]


def test_a_pad_batch_size_past_what_can_be_built_names_batch_size() -> None:
    sampler = DistributedBatchSampler(range(3), 10**18, 2, 0, tail="pad")
    message = (
        rf"batch_size=1000000000000000000 with tail='pad' and 3 samples .* at most {MAX_PAD_BATCH}"
    )
    with pytest.raises(ValueError, match=message):
        list(sampler)
    with pytest.raises(ValueError, match=message):
        len(sampler)
    for tail in ("drop", "uneven"):  # nothing is repeated: no limit
        assert len(list(DistributedBatchSampler(range(3), 10**18, 2, 0, tail=tail))) <= 1


@pytest.mark.parametrize(
    ("size", "batch", "world"), [(3, 8, 2), (5, 2, 3), (16, 8, 2), (17, 8, 2), (40, 3, 4)]
)
def test_pad_repeats_each_sample_floor_or_ceil_of_t_over_n_times(
    size: int, batch: int, world: int
) -> None:
    ranks = [DistributedBatchSampler(range(size), batch, world, r, seed=1) for r in range(world)]
    seen = Counter(i for sampler in ranks for b in sampler for i in b)
    total = len(ranks[0]) * world * batch
    assert set(seen) == set(range(size))
    assert set(seen.values()) <= {total // size, -(-total // size)}
    if size >= world * batch:
        assert max(seen.values()) <= 2
    if (size, batch, world) == (3, 8, 2):
        assert sorted(set(seen.values())) == [5, 6]  # the docstring's example


def test_the_limit_leaves_pad_batches_larger_than_small_datasets_alone() -> None:
    for size, batch in itertools.product((1, 3), (4, 100)):
        assert len(list(DistributedBatchSampler(range(size), batch, 2, 1))) == 1
