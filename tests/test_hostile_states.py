"""States no ``state_dict()`` writes are refused, naming the fields; the token sampler's
state and settings carry a digest of its lengths, so the same lengths in another order
(same count, same sum) are another dataset."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np
import pytest
import torch

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)
from samplers.consistency import compare_settings
from samplers.tokens.order import length_digest

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


def token(lengths: list[int]) -> DistributedTokenBatchSampler:
    return DistributedTokenBatchSampler(lengths, 12, 2, 0, seed=3)


def test_the_same_lengths_in_another_order_are_refused() -> None:
    shuffled = LENGTHS[::-1]
    assert sorted(shuffled) == sorted(LENGTHS)
    sampler = token(LENGTHS)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    other = token(shuffled)
    assert other.length_sum == sampler.length_sum
    with pytest.raises(ValueError, match=r"state field 'length_digest' is '[0-9a-f]{32}', this"):
        other.load_state_dict(state)
    token(list(LENGTHS)).load_state_dict(state)


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


def test_a_token_state_written_before_the_digest_still_loads_and_resumes() -> None:
    """Version 2 token states written before ``length_digest`` existed load, checked on
    the fields they have (documented in samplers.state: LATER_FIELDS)."""
    sampler = token(LENGTHS)
    iterator = iter(sampler)
    first = next(iterator)
    state = sampler.state_dict()
    older = {key: value for key, value in state.items() if key != "length_digest"}
    resumed = token(LENGTHS)
    resumed.load_state_dict(older)
    rest = list(resumed)
    whole = list(token(LENGTHS))
    assert [first, *rest] == whole
    with pytest.raises(ValueError, match="'length_sum' is 1"):
        token(LENGTHS).load_state_dict({**older, "length_sum": 1})
