"""States of the mixtures whose weights count tokens, under the weights users write: decimal
weights (exact parts summing past the draws' period), random floats (parts rounded to about
2**40) and integer weights far apart. Each state the sampler writes loads on another world
size and gives the rest of the epoch, also after ``set_weights`` and after a second resume;
a schedule whose parts are not those its weights give is refused, naming the field."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from samplers import (
    DistributedMixtureTokenBatchSampler,
    DistributedPackedMixtureSampler,
    SamplerWarning,
)
from samplers.mixture.schedule import MAX_PERIOD
from samplers.mixture.tokens import token_parts

SIZES = (30, 50, 20)
LENGTHS = [(i * 7919) % 40 + 1 for i in range(sum(SIZES))]
_DRAWN = random.Random(3)
WEIGHTS = {
    "decimal": [0.123456789, 0.5, 0.376543211],  # exact parts sum to 10**9
    "random floats": [_DRAWN.random() for _ in SIZES],  # parts rounded to about 2**40
    "far apart": [1, 10**7, 3],
}
NEW_WEIGHTS = [0.333333333, 0.2, 0.466666667]

Build = Callable[[list[float], int, int], Any]
BUILDS: dict[str, Build] = {
    "token mixture": lambda weights, world, rank: DistributedMixtureTokenBatchSampler(
        [range(n) for n in SIZES], weights, LENGTHS, 64, world, rank, seed=1
    ),
    "packed mixture": lambda weights, world, rank: DistributedPackedMixtureSampler(
        [range(n) for n in SIZES], weights, LENGTHS, 48, 2, world, rank, seed=1
    ),
    "packed mixture, weights in samples": lambda weights, world, rank: (
        DistributedPackedMixtureSampler(
            [range(n) for n in SIZES],
            weights,
            LENGTHS,
            48,
            2,
            world,
            rank,
            seed=1,
            weights_in="samples",
        )
    ),
}


def _ranks(build: Build, weights: list[float], world: int) -> list[Any]:
    return [build(weights, world, rank) for rank in range(world)]


def _rest(samplers: list[Any]) -> list[int]:
    """Every rank's batches to the epoch's end, flattened (each rank yields as many)."""
    batches = [list(s) for s in samplers]
    assert len({len(b) for b in batches}) == 1
    return [i for b in batches for batch in b for i in batch]


def _taken(samplers: list[Any], steps: int) -> list[int]:
    """The indices of ``steps`` steps on every rank."""
    iterators = [iter(s) for s in samplers]
    return [i for _ in range(steps) for it in iterators for i in next(it)]


def _loaded(build: Build, weights: list[float], world: int, state: dict[str, Any]) -> list[Any]:
    samplers = _ranks(build, weights, world)
    for sampler in samplers:
        sampler.load_state_dict(state)
    return samplers


@pytest.mark.parametrize("weights_name", list(WEIGHTS))
@pytest.mark.parametrize("kind", list(BUILDS))
def test_a_state_resumes_on_other_world_sizes_twice_with_nothing_lost(
    kind: str, weights_name: str
) -> None:
    """Saved on 2 ranks after 0, 1 and 3 steps and half the epoch, resumed on 3, then
    saved again after a step and resumed on 1: the epoch is the uninterrupted one's, every sample as
    often, and the schedule the state carries is the one the sampler wrote."""
    build, weights = BUILDS[kind], WEIGHTS[weights_name]
    whole = Counter(_rest(_ranks(build, weights, 2)))
    steps = len(list(build(weights, 2, 0)))
    for taken in sorted({0, 1, 3, steps // 2}):
        samplers = _ranks(build, weights, 2)
        head = _taken(samplers, taken)
        state = samplers[0].state_dict()
        assert samplers[1].state_dict() == state
        if not kind.endswith("samples"):  # token parts past the draws' period
            assert sum(state["schedule"][0][1]) > MAX_PERIOD
        resumed = _loaded(build, weights, 3, state)
        middle = _taken(resumed, 1)
        again = _loaded(build, weights, 1, resumed[0].state_dict())
        assert again[0].state_dict()["schedule"] == state["schedule"]
        seen = Counter(head + middle + _rest(again))
        assert seen == whole, (kind, weights_name, taken)


@pytest.mark.parametrize("weights_name", list(WEIGHTS))
@pytest.mark.parametrize("kind", list(BUILDS))
def test_a_state_after_set_weights_resumes_on_another_world_size(
    kind: str, weights_name: str
) -> None:
    """``set_weights`` to decimal weights after 2 steps on 2 ranks, a state, a resume on 3
    ranks: what the 3 ranks hand out is what the 2 would have, and the loaded schedule is
    the one the reweighted sampler holds."""
    build = BUILDS[kind]
    samplers = _ranks(build, WEIGHTS[weights_name], 2)
    head = _taken(samplers, 2)
    for sampler in samplers:
        with pytest.warns(SamplerWarning, match="set_weights during an iteration"):
            sampler.set_weights(NEW_WEIGHTS)
    state = samplers[0].state_dict()
    assert len(state["schedule"]) == 2
    resumed = _loaded(build, WEIGHTS[weights_name], 3, state)
    assert resumed[0].state_dict()["schedule"] == state["schedule"]
    assert Counter(_rest(resumed)) == Counter(_rest(samplers))
    assert head


@pytest.mark.parametrize("kind", list(BUILDS))
def test_a_schedule_whose_parts_its_weights_would_not_give_is_refused(kind: str) -> None:
    sampler = BUILDS[kind](WEIGHTS["decimal"], 1, 0)
    state = sampler.state_dict()
    foreign = [
        [[0, [2, 4, 6]]],  # not in lowest terms
        [[0, [1, 2]]],  # a part too few
        [[0, [0, 0, 0]]],  # all 0
        [[0, [1, 2, 3]], [0, [1, 1, 1]]],  # positions not rising
        [[5, [1, 2, 3]]],  # not from 0
    ]
    if kind.endswith("samples"):
        foreign.append([[0, [1, MAX_PERIOD, 1]]])  # past the draws' period
    else:
        foreign.append([[0, [1, 2**53, 1]]])  # past what a double holds exactly
    for schedule in foreign:
        with pytest.raises(ValueError, match="state field 'schedule'"):
            sampler.load_state_dict({**state, "schedule": schedule})


@pytest.mark.parametrize("weights", list(WEIGHTS))
def test_a_state_of_the_other_unit_of_weights_is_refused_naming_it(weights: str) -> None:
    """A packed mixture's state loaded into one whose weights count the other unit:
    refused naming ``weights_in`` (not the schedule its parts fail, nor the merge's
    field a state of weights in samples lacks), both ways."""
    tokens = BUILDS["packed mixture"](WEIGHTS[weights], 1, 0)
    samples = BUILDS["packed mixture, weights in samples"](WEIGHTS[weights], 1, 0)
    with pytest.raises(ValueError, match="state field 'weights_in' is 'tokens', this sampler's"):
        samples.load_state_dict(tokens.state_dict())
    with pytest.raises(ValueError, match="state field 'weights_in' is 'samples', this sampler's"):
        tokens.load_state_dict(samples.state_dict())


@given(
    st.lists(
        st.one_of(
            st.floats(min_value=0, max_value=1e12, allow_nan=False),
            st.integers(min_value=0, max_value=2**80),
        ),
        min_size=1,
        max_size=8,
    ).filter(any)
)
def test_token_parts_are_their_own_parts_in_lowest_terms(weights: list[Any]) -> None:
    """What a state's check asks of the parts a sampler writes: token_parts maps them to
    themselves, exact or rounded, and they share no common factor."""
    found = token_parts(weights)
    assert token_parts(found) == found
    assert math.gcd(*found) == 1
