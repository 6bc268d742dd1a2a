"""The composition matrix: every sampler we ship x every loader users pair it with x every
checkpoint point x both states (the sampler's own, the loader's) x a resume on the same, a
smaller and a larger world size.

A cell runs one epoch on :data:`OLD_WORLD` simulated ranks (one loader each, in one
process, in lockstep), checkpoints at its point, drops those loaders, resumes on the new
world size from the state and runs the epoch to its end. It ends in one of two ways:

* **exactly once**: what the loops received before the checkpoint and after the resume,
  together, is exactly the epoch the samplers alone hand out uninterrupted (a multiset:
  every sampler here uses ``tail="uneven"``, whose epoch is the same whatever the world
  size; a mixture's epoch holds a small source's samples once per pass);
* **refused**: ``state_dict()`` or ``load_state_dict()`` raised an error that says why.

One loader continues differently: a ``torchdata.nodes`` pipeline whose state was taken at
the epoch's end (after its last batch) starts the next epoch when iterated again. Its
cell is exactly once when the loops received the whole epoch before the checkpoint and
exactly the next epoch after it.

Anything else, a skip or a repeat, is a failure. :func:`run_cell` returns ``"exactly
once"`` or ``"refused: ..."`` and raises ``AssertionError`` with the difference otherwise.
"""

from __future__ import annotations

import itertools
import random
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, SequentialSampler

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

SIZE = 30
BATCH = 3
OLD_WORLD = 2
NEW_WORLDS = {"same": 2, "smaller": 1, "larger": 3}
LENGTHS = [(7 * i) % 9 + 1 for i in range(SIZE)]
MAX_TOKENS = 12
#: A mixture's two sources: 12 and 18 of the dataset's indices (ConcatDataset order).
SOURCES = [range(12), range(18)]
EPOCH = 1
SEED = 5

#: Each sampler we ship, built for rank ``rank`` of ``world`` (index or batch sampler).
SAMPLERS: dict[str, Callable[[int, int], Any]] = {
    "index": lambda world, rank: DistributedSampler(
        range(SIZE), world, rank, seed=SEED, tail="uneven"
    ),
    "batch": lambda world, rank: DistributedBatchSampler(
        range(SIZE), BATCH, world, rank, seed=SEED, tail="uneven"
    ),
    "wrapper": lambda world, rank: DistributedSamplerWrapper(
        SequentialSampler(range(SIZE)), world, rank, seed=SEED, tail="uneven"
    ),
    "token": lambda world, rank: DistributedTokenBatchSampler(
        LENGTHS, MAX_TOKENS, world, rank, seed=SEED
    ),
    "packed": lambda world, rank: DistributedPackedBatchSampler(
        LENGTHS, 9, 2, world, rank, seed=SEED, window=12
    ),
    "mixture": lambda world, rank: DistributedMixtureSampler(
        SOURCES, [1, 2], world, rank, seed=SEED, tail="uneven"
    ),
    "mixture batch": lambda world, rank: DistributedMixtureBatchSampler(
        SOURCES, [1, 2], BATCH, world, rank, seed=SEED, tail="uneven"
    ),
    "mixture token": lambda world, rank: DistributedMixtureTokenBatchSampler(
        SOURCES, [1, 2], LENGTHS, MAX_TOKENS, world, rank, seed=SEED
    ),
    # Documents cut into pieces of 4 tokens: the items are piece ids, read back through
    # the pieces' dataset (see :func:`dataset_of`).
    "packed mixture": lambda world, rank: DistributedPackedMixtureSampler(
        SOURCES, [1, 2], LENGTHS, 8, 2, world, rank, seed=SEED, split=4, window=12
    ),
}
BATCHED = {"batch", "token", "packed", "mixture batch", "mixture token", "packed mixture"}

#: The loaders: torch's DataLoader (0 and 2 workers, persistent workers), torchdata's
#: StatefulDataLoader (0 and 2 workers, persistent workers) and a torchdata.nodes pipeline
#: with a prefetcher.
LOADERS = (
    "torch",
    "torch 2 workers",
    "torch persistent",
    "stateful",
    "stateful 2 workers",
    "stateful persistent",
    "nodes",
)
#: Which loaders have a state of their own.
STATEFUL = {"stateful", "stateful 2 workers", "stateful persistent", "nodes"}
#: Before the first batch (after ``iter()``), mid-epoch, after the last batch (the loop
#: not yet told the epoch is over), after the loop.
POINTS = ("start", "mid", "last", "after")
STATES = ("sampler", "loader")


@dataclass(frozen=True)
class Cell:
    sampler: str
    loader: str
    point: str
    state: str
    world: str

    @property
    def id(self) -> str:
        return f"{self.sampler}|{self.loader}|{self.point}|{self.state}|{self.world}"


def all_cells() -> list[Cell]:
    """Every cell of the product that exists (a loader state only for stateful loaders)."""
    return [
        Cell(*values)
        for values in itertools.product(SAMPLERS, LOADERS, POINTS, STATES, NEW_WORLDS)
        if values[3] == "sampler" or values[1] in STATEFUL
    ]


def sampled_cells(count: int, seed: int = 0) -> list[Cell]:
    """``count`` cells of :func:`all_cells`, drawn with ``seed``, every sampler, loader,
    point, state and world size among them at least once."""
    cells = all_cells()
    rng = random.Random(seed)
    chosen: dict[str, Cell] = {}
    for field, values in (
        ("sampler", SAMPLERS),
        ("loader", LOADERS),
        ("point", POINTS),
        ("state", STATES),
        ("world", NEW_WORLDS),
    ):
        for value in values:
            candidates = [cell for cell in cells if getattr(cell, field) == value]
            cell = rng.choice(candidates)
            chosen[cell.id] = cell
    rest = [cell for cell in cells if cell.id not in chosen]
    rng.shuffle(rest)
    for cell in rest[: max(count - len(chosen), 0)]:
        chosen[cell.id] = cell
    return sorted(chosen.values(), key=lambda cell: cell.id)


# Loaders ----------------------------------------------------------------------------------


def _fetch(index: int) -> int:
    return index


def _fetch_batch(batch: list[int]) -> list[int]:
    return list(batch)


def dataset_of(sampler: Any) -> Any:
    """What a loader reads for ``sampler``: the indices themselves (``range``), or, for a
    sampler of pieces, the pieces' ids (each a ``{"input_ids", "document", "start"}``
    item, the piece id recovered by :func:`items`)."""
    pieces = getattr(sampler, "pieces", None)
    if pieces is None or pieces.piece_length is None:
        return range(SIZE)
    return range(len(pieces))


def make_loader(kind: str, loader: str, sampler: Any) -> Any:
    """A loader of ``kind`` (see :data:`LOADERS`) reading ``sampler``."""
    batched = kind in BATCHED
    if loader == "nodes":
        from torchdata import nodes

        from samplers.integrations.torchdata import Loader, sampler_node

        source: Any = sampler_node(sampler)
        if batched:
            node: Any = nodes.Mapper(source, _fetch_batch)
        else:
            node = nodes.Batcher(nodes.Mapper(source, _fetch), BATCH, drop_last=False)
        return Loader(nodes.Prefetcher(node, 2))
    options: dict[str, Any] = (
        {"batch_sampler": sampler} if batched else {"batch_size": BATCH, "sampler": sampler}
    )
    if loader.endswith("2 workers"):
        options["num_workers"] = 2
    if loader.endswith("persistent"):
        options.update(num_workers=2, persistent_workers=True)
    if loader.startswith("stateful"):
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset_of(sampler), **options)
    return DataLoader(dataset_of(sampler), **options)


def items(batch: Any) -> list[int]:
    """A batch's indices as ints (a tensor, or a list of ints)."""
    if isinstance(batch, torch.Tensor):
        return [int(i) for i in batch.tolist()]
    return [int(i) for i in batch]


def reference_epoch(kind: str, epoch: int = EPOCH) -> Counter[int]:
    """The epoch the samplers alone hand out over :data:`OLD_WORLD` ranks, uninterrupted."""
    seen: Counter[int] = Counter()
    for rank in range(OLD_WORLD):
        sampler = SAMPLERS[kind](OLD_WORLD, rank)
        sampler.set_epoch(epoch)
        for item in sampler:
            seen.update(items([item]) if isinstance(item, int) else items(item))
    return seen


# A cell -----------------------------------------------------------------------------------


class _Rank:
    """One simulated rank: its sampler, loader and the iterator of the epoch."""

    def __init__(self, cell: Cell, world: int, rank: int) -> None:
        self.sampler = SAMPLERS[cell.sampler](world, rank)
        self.sampler.set_epoch(EPOCH)  # before the loader: a node starts at it
        self.loader = make_loader(cell.sampler, cell.loader, self.sampler)
        self.iterator: Iterator[Any] | None = None
        self.received: list[int] = []
        self.ended = False

    def begin(self) -> None:
        self.iterator = iter(self.loader)

    def step(self) -> bool:
        """Take one batch; ``False`` once the epoch is over (at its StopIteration)."""
        assert self.iterator is not None
        try:
            batch = next(self.iterator)
        except StopIteration:
            self.ended = True
            return False
        self.received.extend(items(batch))
        return True

    def close(self) -> None:
        """Stop the loader's workers or threads here, on the main thread."""
        self.iterator = None
        running = getattr(self.loader, "_iterator", None)
        if running is not None and hasattr(running, "_shutdown_workers"):
            running._shutdown_workers()
        prefetching = getattr(getattr(self.loader, "root", None), "_it", None)
        if prefetching is not None and hasattr(prefetching, "_shutdown"):
            prefetching._shutdown()  # a nodes Prefetcher's thread


def _steps(kind: str) -> list[int]:
    """How many batches each of :data:`OLD_WORLD` ranks takes in the epoch."""
    counts = []
    for rank in range(OLD_WORLD):
        sampler = SAMPLERS[kind](OLD_WORLD, rank)
        sampler.set_epoch(EPOCH)
        listed = list(sampler)
        counts.append(len(listed) if kind in BATCHED else -(-len(listed) // BATCH))
    return counts


def run_cell(cell: Cell) -> str:
    """Run ``cell``: ``"exactly once"`` or ``"refused: <reason>"`` (see the module)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warnings are the samplers' own, tested elsewhere
        return _run(cell)


def _run(cell: Cell) -> str:
    reference = reference_epoch(cell.sampler)
    steps = max(_steps(cell.sampler))
    stop = {"start": 0, "mid": steps // 2, "last": steps, "after": steps + 1}[cell.point]
    ranks = [_Rank(cell, OLD_WORLD, rank) for rank in range(OLD_WORLD)]
    try:
        for rank in ranks:
            rank.begin()
        for _ in range(stop):
            for rank in ranks:
                if not rank.ended:
                    rank.step()
        if cell.point == "after":
            for rank in ranks:  # the loops end: every rank sees its StopIteration
                while not rank.ended:
                    rank.step()
        try:
            if cell.state == "sampler":
                states = [rank.sampler.state_dict() for rank in ranks]
            else:
                states = [rank.loader.state_dict() for rank in ranks]
        except (ValueError, TypeError, RuntimeError) as error:
            return f"refused: {error}"
        before = [i for rank in ranks for i in rank.received]
    finally:
        for rank in ranks:
            rank.close()
    world = NEW_WORLDS[cell.world]
    resumed = [_Rank(cell, world, rank) for rank in range(world)]
    try:
        try:
            for number, rank in enumerate(resumed):
                if cell.state == "sampler":
                    rank.sampler.load_state_dict(states[0])
                else:
                    rank.loader.load_state_dict(states[number % OLD_WORLD])
        except (ValueError, TypeError, RuntimeError) as error:
            return f"refused: {error}"
        for rank in resumed:
            rank.begin()
            while rank.step():
                pass
        after = [i for rank in resumed for i in rank.received]
    finally:
        for rank in resumed:
            rank.close()
    got = Counter(before) + Counter(after)
    # A pipeline's state at the epoch's end: iterating it again is the next epoch.
    at_the_end = cell.loader == "nodes" and cell.state == "loader" and Counter(before) == reference
    if (
        at_the_end
        and Counter(after) == reference_epoch(cell.sampler, EPOCH + 1)
        and all(rank.sampler.epoch == EPOCH + 1 for rank in resumed)
    ):
        return "exactly once"
    if got != reference:
        missing = reference - got
        repeated = got - reference
        raise AssertionError(
            f"{cell.id}: {sum(missing.values())} skipped {sorted(missing.elements())[:10]}, "
            f"{sum(repeated.values())} repeated {sorted(repeated.elements())[:10]} "
            f"({len(before)} before the checkpoint, {len(after)} after)"
        )
    return "exactly once"
