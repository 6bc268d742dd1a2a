"""States no ``state_dict()`` writes are refused, naming the fields; the token and packed
samplers' states and settings carry a digest of their lengths, so the same lengths in
another order (same count, same sum) are another dataset."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np
import pytest
import torch

from samplers import (
    DistributedBatchSampler,
    DistributedPackedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)
from samplers.consistency import compare_settings
from samplers.tokens.held import length_digest

LENGTHS = [5, 1, 8, 3, 9, 2, 7, 4, 6, 10, 2, 3]

BUILDERS: dict[str, Any] = {
    "sampler": lambda: DistributedSampler(range(11), 2, 0, seed=3),
    "batch sampler": lambda: DistributedBatchSampler(range(11), 2, 2, 0, seed=3),
    "wrapper": lambda: DistributedSamplerWrapper(
        torch.utils.data.SequentialSampler(range(11)), 2, 0, seed=3
    ),
    "token sampler": lambda: DistributedTokenBatchSampler(LENGTHS, 12, 2, 0, seed=3),
}


@pytest.mark.parametrize("kind", BUILDERS)
def test_a_finished_state_short_of_the_end_is_refused(kind: str) -> None:
    sampler = BUILDERS[kind]()
    list(sampler)
    state = sampler.state_dict()
    assert state["finished"] and state["position"] == len(
        sampler.lengths if kind == "token sampler" else range(11)
    )
    BUILDERS[kind]().load_state_dict(state)  # what state_dict() wrote loads
    for position in (0, 4, state["position"] - 1):
        with pytest.raises(
            ValueError,
            match=(
                rf"state fields 'finished' and 'position' contradict each other: finished=True "
                rf"with position={position}, but a finished epoch's position is its end, "
                rf"{state['position']}"
            ),
        ):
            BUILDERS[kind]().load_state_dict({**state, "position": position})


def token(lengths: Any) -> DistributedTokenBatchSampler:
    return DistributedTokenBatchSampler(lengths, 12, 2, 0, seed=3)


def packed(lengths: Any) -> DistributedPackedBatchSampler:
    return DistributedPackedBatchSampler(lengths, 12, 2, num_replicas=2, rank=0, seed=3)


#: The samplers whose order follows the lengths, built over the given lengths.
BY_LENGTHS: dict[str, Any] = {"token": token, "packed": packed}


@pytest.mark.parametrize("kind", BY_LENGTHS)
def test_the_same_lengths_in_another_order_are_refused(kind: str) -> None:
    build = BY_LENGTHS[kind]
    shuffled = LENGTHS[::-1]
    assert sorted(shuffled) == sorted(LENGTHS)
    sampler = build(LENGTHS)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    other = build(shuffled)
    assert other.length_sum == sampler.length_sum
    with pytest.raises(ValueError, match=r"state field 'length_digest' is '[0-9a-f]{32}', this"):
        other.load_state_dict(state)
    build(list(LENGTHS)).load_state_dict(state)


def test_check_consistent_compares_the_digest() -> None:
    ours, theirs = token(LENGTHS).settings(), token(LENGTHS[::-1]).settings()
    theirs["rank"] = 1
    problem = compare_settings([ours, theirs])
    assert problem is not None and problem.startswith("length digest differs")
    assert compare_settings([ours, {**ours, "rank": 1}]) is None


def test_the_digest_is_of_the_int64_little_endian_bytes_whatever_the_input_type() -> None:
    expected = hashlib.blake2b(struct.pack("<12q", *LENGTHS), digest_size=16).hexdigest()
    for given in (
        LENGTHS,
        np.array(LENGTHS, dtype=np.int16),
        np.array(LENGTHS, dtype=np.int64),
        torch.tensor(LENGTHS, dtype=torch.int32),
    ):
        assert token(given).length_digest == expected, type(given)
    assert (
        length_digest(torch.tensor([2**40, 1]))
        == hashlib.blake2b(struct.pack("<2q", 2**40, 1), digest_size=16).hexdigest()
    )


@pytest.mark.parametrize("kind", BY_LENGTHS)
def test_a_state_written_before_the_digest_still_loads_and_resumes(kind: str) -> None:
    """Version 2 token and packed states written before they held ``length_digest`` load,
    checked on the fields they have (documented in samplers.state: LATER_FIELDS)."""
    build = BY_LENGTHS[kind]
    sampler = build(LENGTHS)
    iterator = iter(sampler)
    first = next(iterator)
    state = sampler.state_dict()
    older = {key: value for key, value in state.items() if key != "length_digest"}
    resumed = build(LENGTHS)
    resumed.load_state_dict(older)
    rest = list(resumed)
    whole = list(build(LENGTHS))
    assert [first, *rest] == whole
    with pytest.raises(ValueError, match="'length_sum' is 1"):
        build(LENGTHS).load_state_dict({**older, "length_sum": 1})
