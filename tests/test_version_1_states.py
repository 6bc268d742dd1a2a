"""Genuine version-1 states (written by the code before state version 2, see
``tests/data/make_version_1_states.py``) resume as the state this version writes at the same
step does: mid-epoch they continue the epoch, at an epoch's end they finish it (the next
epoch is the one after), on 2, 3 or 5 ranks."""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

import samplers

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "version_1_states.json").read_text()
)["cases"]


def build(case: dict[str, Any], world: int, rank: int, *, tail: str | None = None) -> Any:
    data = list(range(case["dataset_length"]))
    kind, auto = case["sampler"], case["auto_epoch"]
    tail = case["tail"] if tail is None else tail
    if kind == "DistributedSampler":
        return samplers.DistributedSampler(
            data, world, rank, shuffle=case["shuffle"], seed=7, tail=tail, auto_epoch=auto
        )
    if kind == "DistributedBatchSampler":
        return samplers.DistributedBatchSampler(
            data, 3, world, rank, shuffle=case["shuffle"], seed=7, tail=tail, auto_epoch=auto
        )
    return samplers.DistributedSamplerWrapper(
        torch.utils.data.SequentialSampler(data), world, rank, seed=7, tail=tail, auto_epoch=auto
    )


def v2_state(case: dict[str, Any]) -> tuple[dict[str, Any], list[list[Any]]]:
    """The state this version writes at the case's step, and what it handed out before."""
    world = case["world_size"]
    ranks = [build(case, world, r) for r in range(world)]
    for sampler in ranks:
        sampler.set_epoch(case["epoch"])
    iterators = [iter(s) for s in ranks]
    handed: list[list[Any]] = [[] for _ in ranks]
    steps = max(len(h) for h in case["handed"])
    for _ in itertools.count() if case["at_end"] else range(steps):
        items = [next(it, None) for it in iterators]
        if all(item is None for item in items):
            break
        for got, item in zip(handed, items, strict=True):
            if item is not None:
                got.append(item)
    return ranks[0].state_dict(), handed


def resume(case: dict[str, Any], state: dict[str, Any], world: int) -> list[list[list[Any]]]:
    """Two passes of the resumed run on ``world`` ranks (set_epoch(e), set_epoch(e + 1);
    with auto_epoch, two plain iterations), per rank."""
    passes: list[list[list[Any]]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a pad/drop change of world size may warn
        ranks = [build(case, world, r) for r in range(world)]
        for sampler in ranks:
            sampler.load_state_dict(state)
        for k in range(2):
            if not case["auto_epoch"]:
                for sampler in ranks:
                    sampler.set_epoch(state["epoch"] + k)
            passes.append([list(s) for s in ranks])
    return passes


def flat(items: Any) -> list[int]:
    out: list[int] = []
    for item in items:
        out.extend(item if isinstance(item, list) else [item])
    return out


def name(case: dict[str, Any]) -> str:
    steps = "end" if case["at_end"] else max(len(h) for h in case["handed"])
    return (
        f"{case['sampler']}-n{case['dataset_length']}-w{case['world_size']}-{case['tail']}-"
        f"shuffle{int(case['shuffle'])}-auto{int(case['auto_epoch'])}-{steps}"
    )


def test_the_fixture_is_genuine_version_1() -> None:
    assert len(CASES) == 240
    assert {case["state"]["version"] for case in CASES} == {1}
    ended = [c for c in CASES if c["at_end"]]
    # The states at an epoch's end are the ones version 1 wrote as a fresh iteration.
    assert ended and all(c["state"]["taken"] == 0 for c in ended)
    assert all(c["state"]["last_epoch"] == c["epoch"] for c in ended)


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{name(c)}" for i, c in enumerate(CASES)])
def test_a_version_1_state_resumes_as_version_2_does(case: dict[str, Any]) -> None:
    state, handed = v2_state(case)
    assert handed == case["handed"], "the same order before the state"
    for world in (2, 3, 5):
        old = resume(case, case["state"], world)
        assert old == resume(case, state, world), f"on {world} ranks"
        rest, following = old
        ended = state["finished"]  # at the loop's end, or after the last step
        assert ended or not case["at_end"]
        if ended and case["auto_epoch"]:
            rest, following = [[] for _ in range(world)], old[0]  # straight to the next
        if ended:
            assert not flat(flat(rest)), f"an ended epoch resumed on {world} ranks yields nothing"
        fresh = [build(case, world, r) for r in range(world)]
        for sampler in fresh:
            sampler.set_epoch(case["epoch"] + 1)
        assert following == [list(s) for s in fresh], f"the next epoch, on {world} ranks"
        if case["tail"] == "uneven":
            seen = sorted(flat(flat(case["handed"])) + flat(flat(rest)))
            assert seen == list(range(case["dataset_length"])), "every sample exactly once"


def test_a_version_1_state_with_a_mistyped_last_epoch_is_refused() -> None:
    case = next(c for c in CASES if c["at_end"])
    sampler = build(case, 2, 0)
    with pytest.raises(ValueError, match="'last_epoch' must be an integer or null, got '2'"):
        sampler.load_state_dict({**case["state"], "last_epoch": "2"})


@pytest.mark.parametrize("batch_size", [None, 1])
def test_a_version_1_state_of_an_empty_share_that_took_nothing_is_the_epochs_start(
    batch_size: int | None,
) -> None:
    """1 sample on 2 ranks with the tail dropped: rank 0's share is empty. Its version 1
    state before any step (``last_epoch`` not this epoch) is the epoch's start, as the
    version 2 state at that step says, so a resume on 1 rank yields the sample; with
    ``last_epoch`` equal to its epoch it is the epoch's end, and yields nothing."""
    state = {
        "version": 1,
        "sampler": "DistributedSampler" if batch_size is None else "DistributedBatchSampler",
        "epoch": 0,
        "last_epoch": None,
        "seed": 0,
        "shuffle": True,
        "permutation": "randperm",
        "tail": "drop",
        "dataset_length": 1,
        "world_size": 2,
        "rank": 0,
        "batch_size": batch_size,
        "start": 0,
        "stop": 0,
        "taken": 0,
    }

    def resumed(saved: dict[str, Any]) -> list[Any]:
        if batch_size is None:
            sampler: Any = samplers.DistributedSampler(
                range(1), num_replicas=1, rank=0, seed=0, tail="drop"
            )
        else:
            sampler = samplers.DistributedBatchSampler(
                range(1), batch_size, num_replicas=1, rank=0, seed=0, tail="drop"
            )
        sampler.load_state_dict(saved)
        return list(sampler)

    with pytest.warns(samplers.SamplerWarning, match="gives every rank 0 samples"):
        current = samplers.DistributedSampler(range(1), 2, 0, seed=0, tail="drop")
    assert current.state_dict()["finished"] is False  # version 2 at the same step
    assert flat(resumed(state)) == [0]
    with pytest.warns(samplers.SamplerWarning, match="which is finished"):
        assert resumed({**state, "last_epoch": 0}) == []
