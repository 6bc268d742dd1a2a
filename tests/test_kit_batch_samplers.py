"""The kit tells a batch sampler by what it yields, never by an empty epoch; and our batch
sampler meets the resume bound its tail documents, on every small configuration."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from samplers import DistributedBatchSampler
from samplers import testing as kit
from samplers.testing.resumes import tail_allowance
from samplers.testing.running import yields_batches
from studies.kit import peers

#: Where a batch sampler that drops its tail yields nothing at all: 2 samples, 1 rank,
#: batch size 3, resumed on 2 ranks (the counterexample the kit once reported for ours).
EMPTY = kit.Configuration(dataset_size=2, world_size=1, batch_size=3, other_world_size=2)


class UsersBatches:
    """A user's batch sampler: ours with tail="drop" behind an object of its own (not a
    torch ``BatchSampler``, no ``batch_size`` attribute), so only what it yields tells."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int):
        self._inner = DistributedBatchSampler(
            dataset, batch_size, num_replicas, rank, seed=seed, tail="drop"
        )

    def __iter__(self) -> Any:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)

    def set_epoch(self, epoch: int) -> None:
        self._inner.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self._inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._inner.load_state_dict(state)


def users_batches(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    return UsersBatches(dataset, num_replicas, rank, seed, batch_size)


@pytest.mark.parametrize("factory", [peers.ours_batches_drop, users_batches])
def test_a_batch_sampler_with_an_empty_epoch_is_still_a_batch_sampler(factory: Any) -> None:
    assert kit.epoch_outputs(factory, EMPTY) == [[]]  # nothing to tell it by here
    assert yields_batches(factory, EMPTY) is True
    assert yields_batches(peers.ours_drop, EMPTY) is False


@pytest.mark.parametrize("factory", [peers.ours_batches_drop, users_batches])
def test_a_batch_sampler_is_allowed_its_own_tail_where_its_epoch_is_empty(factory: Any) -> None:
    # On 2 ranks in batches of 3, tail="drop" may leave out up to 2 * 3 - 1 = 5 samples,
    # on 1 rank up to 2: not the 1 of an index sampler on 2 ranks.
    assert tail_allowance(factory, EMPTY, 2, yields_batches(factory, EMPTY)) == (0, 5)
    assert tail_allowance(factory, EMPTY, 1, yields_batches(factory, EMPTY)) == (0, 2)
    kit.resumes_other_world_size(factory, EMPTY)  # 2 lost: within the 5 its tail allows


def test_the_allowance_still_catches_a_batch_sampler_that_loses_more() -> None:
    """A batch sampler that forgets a loaded state (restarts the epoch) repeats what it
    had taken: the larger allowance does not excuse it."""
    config = kit.Configuration(dataset_size=12, world_size=2, batch_size=2, taken=2)
    with pytest.raises(AssertionError, match="repeated"):
        kit.resumes_other_world_size(_forgets_its_state, config)


def _forgets_its_state(
    dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int
) -> Any:
    sampler = UsersBatches(dataset, num_replicas, rank, seed, batch_size)
    sampler.load_state_dict = lambda state: None  # type: ignore[method-assign]
    return sampler


#: The small configurations the bound is checked on: dataset sizes 0-9, world sizes 1-3
#: saved on one and resumed on another, batch sizes 1-3, saved after 0, 1 or 3 steps.
SMALL = [
    kit.Configuration(
        dataset_size=size, world_size=world, batch_size=batch, other_world_size=other, taken=t
    )
    for size, world, other, batch, t in itertools.product(
        range(10), range(1, 4), range(1, 4), range(1, 4), (0, 1, 3)
    )
    if other != world
]


@pytest.mark.parametrize(
    "factory", [peers.ours_batches_drop, peers.ours_batches_pad, peers.ours_batches_uneven]
)
def test_our_batch_sampler_resumes_on_another_world_size_within_its_tail(factory: Any) -> None:
    """Every small configuration (the brute force behind the matrix's cell): whatever is
    lost or repeated is fewer than ``world_size * batch_size`` samples on either world
    size, as the tail's documentation says."""
    assert EMPTY in SMALL
    for configuration in SMALL:
        kit.resumes_other_world_size(factory, configuration)
