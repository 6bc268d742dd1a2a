"""The resume matrix: every sampler, checkpointed mid-epoch and at the epoch's end through
every loader, resumed on another world size, sees every sample as its tail promises, and
the next epoch is the right one.

Samplers (DistributedSampler, DistributedBatchSampler, DistributedSamplerWrapper,
DistributedTokenBatchSampler) x tails x world sizes (3 -> 2, 3, 5) x loaders (torch
``DataLoader`` and torchdata ``StatefulDataLoader``, 0 and 2 workers) x ``auto_epoch`` x
checkpoint (mid-epoch, epoch's end). The ranks are simulated in one process, in lockstep.

For each case the reference is the samplers alone (no loader): the first steps of the
interrupted run, its state, the rest of the epoch on the new ranks and the next epoch.
The reference keeps the tail's promise over the interrupted and resumed run together
(``"uneven"``: every sample exactly once; ``"pad"``: every sample at least once;
``"drop"``: none twice), and the run through the loader must give exactly the reference,
rank by rank: the same state on every rank, the same rest, the same next epoch.

Workers are the costly part (a worker process starts in about 0.2 s): in the 2-worker
cases rank 0's loaders have the workers and the other ranks' loaders none (every rank's
state must still be the same), and a resumed loader with workers keeps them over its two
passes (``persistent_workers``).
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

stateful_dataloader = pytest.importorskip(
    "torchdata.stateful_dataloader",
    reason="torchdata is not installed (it is in the test extra: pip install torchdata)",
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

SIZE = 23
BATCH = 2
OLD_WORLD = 3
NEW_WORLDS = (2, 3, 5)
EPOCH = 1
LENGTHS = [(7 * i) % 9 + 1 for i in range(SIZE)]
MAX_TOKENS = 12
KINDS = ("sampler", "batch sampler", "wrapper", "token sampler")
TAILS = ("pad", "drop", "uneven")
LOADERS = ("DataLoader", "StatefulDataLoader")
WORKERS = (0, 2)


def make_sampler(kind: str, world: int, rank: int, tail: str, auto: bool) -> Any:
    if kind == "sampler":
        return DistributedSampler(range(SIZE), world, rank, seed=5, tail=tail, auto_epoch=auto)
    if kind == "batch sampler":
        return DistributedBatchSampler(
            range(SIZE), BATCH, world, rank, seed=5, tail=tail, auto_epoch=auto
        )
    if kind == "wrapper":
        return DistributedSamplerWrapper(
            SequentialSampler(range(SIZE)), world, rank, seed=5, tail=tail, auto_epoch=auto
        )
    return DistributedTokenBatchSampler(
        LENGTHS, MAX_TOKENS, world, rank, seed=5, tail=tail, auto_epoch=auto
    )


def batched(kind: str) -> bool:
    return kind in ("batch sampler", "token sampler")


def make_loader(loader: str, kind: str, sampler: Any, workers: int, persistent: bool) -> Any:
    cls = DataLoader if loader == "DataLoader" else stateful_dataloader.StatefulDataLoader
    options: dict[str, Any] = {"num_workers": workers}
    if workers and persistent:
        options["persistent_workers"] = True
    if batched(kind):
        return cls(range(SIZE), batch_sampler=sampler, **options)
    return cls(range(SIZE), batch_size=BATCH, sampler=sampler, **options)


def our_state(state: Any) -> dict[str, Any]:
    """The sampler's state (ours), itself or nested in a StatefulDataLoader state."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if {"version", "sampler", "position"} <= set(value):
                found.append(value)
            for item in value.values():
                walk(item)

    walk(state)
    assert len(found) == 1, state
    return found[0]


def flat(items: Any) -> list[int]:
    out: list[int] = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out.extend(item.tolist())
        elif isinstance(item, list):
            out.extend(flat(item))
        else:
            out.append(int(item))
    return out


def quiet() -> Any:
    """Tail changes across world sizes and pad/drop resumes warn; not what is tested here."""
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("ignore")
    return context


# --- the reference: the samplers alone ---------------------------------------------------


def reference(
    kind: str, tail: str, auto: bool, steps: int | None
) -> tuple[dict[str, Any], list[list[int]]]:
    """The samplers alone: the state after ``steps`` loop steps (``None``: the whole
    epoch) of the 3-rank run, and what each rank was handed before it."""
    ranks = [make_sampler(kind, OLD_WORLD, r, tail, auto) for r in range(OLD_WORLD)]
    per_step = 1 if batched(kind) else BATCH
    handed: list[list[int]] = []
    states = []
    for rank, sampler in enumerate(ranks):
        whole = make_sampler(kind, OLD_WORLD, rank, tail, auto)
        whole.set_epoch(EPOCH)
        items = list(whole)
        took = items if steps is None else items[: steps * per_step]
        handed.append(flat(took))
        sampler.set_epoch(EPOCH)
        iterator = iter(sampler)
        for _ in took:
            next(iterator)
        if steps is None:
            assert next(iterator, None) is None
        states.append(sampler.state_dict())
    assert all(state == states[0] for state in states)
    return states[0], handed


def resumed_reference(
    kind: str, tail: str, auto: bool, state: dict[str, Any], world: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The rest of the epoch and the next epoch on ``world`` ranks, samplers alone."""
    rest, following = [], []
    for rank in range(world):
        sampler = make_sampler(kind, world, rank, tail, auto)
        sampler.load_state_dict(state)
        sampler.set_epoch(state["epoch"])
        rest.append(flat(list(sampler)))
        fresh = make_sampler(kind, world, rank, tail, auto)
        fresh.set_epoch(state["epoch"] + 1)
        following.append(flat(list(fresh)))
    return rest, following


def keeps_the_tail(tail: str, before: list[list[int]], rest: list[list[int]]) -> None:
    seen = Counter(flat(before) + flat(rest))
    if tail == "uneven":
        assert seen == Counter(range(SIZE)), "every sample exactly once"
    elif tail == "pad":
        assert set(seen) == set(range(SIZE)), "every sample at least once"
    else:
        assert max(seen.values()) == 1 and set(seen) <= set(range(SIZE)), "none twice"


# --- through the loaders ----------------------------------------------------------------


def interrupted(
    kind: str, tail: str, loader: str, workers: int, auto: bool, at_end: bool
) -> tuple[Any, dict[str, Any], int | None, list[list[int]]]:
    """The 3-rank run through ``loader``: (the loader states by number of workers, our
    state, the steps taken (None: all), what each rank's loop received)."""
    loaders, iterators = [], []
    for rank in range(OLD_WORLD):
        sampler = make_sampler(kind, OLD_WORLD, rank, tail, auto)
        sampler.set_epoch(EPOCH)
        made = make_loader(loader, kind, sampler, workers if rank == 0 else 0, False)
        loaders.append((made, sampler))
        iterators.append(iter(made))
    total = len(loaders[0][0])
    steps = None if at_end else max(1, total // 2)
    received: list[list[int]] = [[] for _ in range(OLD_WORLD)]
    for _ in itertools.count() if steps is None else range(steps):
        items = [next(iterator, None) for iterator in iterators]
        if all(item is None for item in items):
            break
        for got, item in zip(received, items, strict=True):
            if item is not None:
                got.extend(flat([item]))
    if loader == "DataLoader":
        states = [sampler.state_dict() for _, sampler in loaders]
        full = {workers: states[0], 0: states[1]}
    else:
        # A StatefulDataLoader's state has the layout of its number of workers: keep rank
        # 0's (with the workers) and rank 1's (without).
        full = {workers: loaders[0][0].state_dict(), 0: loaders[1][0].state_dict()}
        states = [our_state(made.state_dict()) for made, _ in loaders]
    assert all(state == states[0] for state in states), "the same state on every rank"
    del iterators
    return full, states[0], steps, received


def resumed(
    kind: str, tail: str, loader: str, workers: int, auto: bool, full: Any, world: int
) -> list[list[list[int]]]:
    """Two passes of the resumed loop on ``world`` ranks, per rank: with ``set_epoch`` at
    the saved epoch and the next; with ``auto_epoch``, two plain passes."""
    epoch = our_state(full[0])["epoch"]
    passes: list[list[list[int]]] = [[], []]
    for rank in range(world):
        sampler = make_sampler(kind, world, rank, tail, auto)
        own = workers if rank == 0 else 0
        made = make_loader(loader, kind, sampler, own, True)
        if loader == "DataLoader":
            sampler.load_state_dict(full[own])
        else:
            made.load_state_dict(full[own])
        for k in range(2):
            if not auto:
                sampler.set_epoch(epoch + k)
            passes[k].append(flat(list(made)))
        del made
    return passes


def cases() -> list[Any]:
    found = []
    for kind, tail, loader, workers, auto, at_end in itertools.product(
        KINDS, TAILS, LOADERS, WORKERS, (False, True), (False, True)
    ):
        name = (
            f"{kind.replace(' ', '-')}-{tail}-{loader}-{workers}w-"
            f"{'auto' if auto else 'set_epoch'}-{'end' if at_end else 'mid'}"
        )
        found.append(pytest.param(kind, tail, loader, workers, auto, at_end, id=name))
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("kind", "tail", "loader", "workers", "auto", "at_end"), cases())
def test_resume(kind: str, tail: str, loader: str, workers: int, auto: bool, at_end: bool) -> None:
    context = quiet()
    try:
        full, state, steps, received = interrupted(kind, tail, loader, workers, auto, at_end)
        expected_state, handed = reference(kind, tail, auto, steps)
        assert state == expected_state, "the loader's state is the samplers' at that step"
        assert received == handed, "the loop received what the samplers handed out"
        assert state["finished"] or not at_end
        for world in NEW_WORLDS:
            rest, following = resumed_reference(kind, tail, auto, state, world)
            keeps_the_tail(tail, handed, rest)
            first, second = resumed(kind, tail, loader, workers, auto, full, world)
            if auto and state["finished"]:
                # auto_epoch after a finished epoch: the first pass is the next epoch.
                assert first == following, f"the next epoch on {world} ranks"
            else:
                assert first == rest, f"the rest of the epoch on {world} ranks"
                assert second == following, f"the next epoch on {world} ranks"
    finally:
        context.__exit__(None, None, None)
