"""Finding: DistributedSampler ranks run equal numbers of steps; hand-made splits do not."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import pandas as pd
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from studies.findings import Evidence, Table
from studies.findings.wording import joined, listed
from studies.simulate import IndexDataset

NAME = "equal-batch-counts"
TITLE = (
    "Every rank gets the same number of batches from a DistributedSampler; hand-made splits do not"
)
CLAIM = (
    "With the stock DistributedSampler or ours, whatever the sampler's and the DataLoader's "
    "drop_last, every rank's DataLoader yields the same number of batches, so the sampler "
    "cannot make one rank run a collective (e.g. DDP's gradient all-reduce) the others do "
    "not. Splitting the dataset by hand (contiguous Subset chunks per rank, or every W-th "
    "sample from rank r on) gives ranks different batch counts whenever the dataset does "
    "not divide evenly, and a distributed job then hangs or fails at the extra step."
)
GUARDED_BY = "tests/test_findings.py::test_distributed_samplers_give_every_rank_equal_batches"

DATASET_SIZES = tuple(range(1, 34))
WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 8)
BATCH_SIZES: tuple[int, ...] = (1, 4)

#: The table's column counting configurations whose ranks' batch counts differ.
DIFFER = "ranks' batch counts differ"

#: How a rank's DataLoader gets its part: a function of (dataset size, world size, rank,
#: DataLoader drop_last) -> that rank's DataLoader (shuffle off, where it matters).
Split = Callable[[int, int, int, int, bool], DataLoader[int]]


def _sampled(sampler_class: type[StockDistributedSampler[int]], drop_last: bool) -> Split:
    def loader(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
        dataset = IndexDataset(size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # ours warns on empty shards
            sampler = sampler_class(
                dataset, num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last
            )
        return DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=loader_drop)

    return loader


def _contiguous(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
    chunk = -(-size // world)  # ceil(N / W) samples per rank, the last rank gets the rest
    part = Subset(IndexDataset(size), range(rank * chunk, min(size, (rank + 1) * chunk)))
    return DataLoader(part, batch_size=batch, drop_last=loader_drop)


def _strided(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
    part = Subset(IndexDataset(size), range(rank, size, world))  # dataset[rank::world]
    return DataLoader(part, batch_size=batch, drop_last=loader_drop)


#: The ways of giving each rank its part that are measured, by name.
SPLITS: dict[str, Split] = {
    "stock DistributedSampler": _sampled(StockDistributedSampler, False),
    "stock DistributedSampler, drop_last=True": _sampled(StockDistributedSampler, True),
    "our DistributedSampler": _sampled(DistributedSampler, False),
    "our DistributedSampler, drop_last=True": _sampled(DistributedSampler, True),
    "contiguous Subset chunks of ceil(N/W)": _contiguous,
    "every W-th sample: Subset(range(rank, N, W))": _strided,
}


def batch_counts(split: Split, size: int, world: int, batch: int, loader_drop: bool) -> list[int]:
    """How many batches each rank's DataLoader yields in one pass."""
    return [sum(1 for _ in split(size, world, rank, batch, loader_drop)) for rank in range(world)]


def build() -> Evidence:
    rows = []
    for name, split in SPLITS.items():
        for loader_drop in (False, True):
            unequal, widest, example = 0, 0, ""
            configurations = itertools.product(DATASET_SIZES, WORLD_SIZES, BATCH_SIZES)
            total = 0
            for size, world, batch in configurations:
                total += 1
                counts = batch_counts(split, size, world, batch, loader_drop)
                spread = max(counts) - min(counts)
                if spread:
                    unequal += 1
                    if spread > widest or not example:
                        example = f"N={size}, W={world}, B={batch}: {listed(counts)}"
                    widest = max(widest, spread)
            rows.append(
                {
                    "how each rank gets its part": name,
                    "DataLoader drop_last": loader_drop,
                    "configurations": total,
                    DIFFER: unequal,
                    "largest difference (batches)": widest,
                    "example (batches per rank)": example or "-",
                }
            )
    table = pd.DataFrame(rows)
    samplers = table[table["how each rank gets its part"].str.contains("DistributedSampler")]
    by_hand = table[~table["how each rank gets its part"].str.contains("DistributedSampler")]
    prose = (
        f"Over {int(table['configurations'].iloc[0])} configurations (dataset sizes "
        f"{DATASET_SIZES[0]} to {DATASET_SIZES[-1]}, world sizes {joined(WORLD_SIZES)}, batch "
        f"sizes {joined(BATCH_SIZES)}) and both DataLoader drop_last settings, the ranks' batch "
        f"counts differed in {int(samplers[DIFFER].sum())} "
        "configurations with a DistributedSampler (stock or ours, either drop_last): the "
        "sampler pads or trims every rank to the same share, so every rank runs the same "
        "number of steps. Split by hand, they differed in "
        + joined(
            f"{int(row[DIFFER])} ({row['how each rank gets its part']}, "
            f"DataLoader drop_last={row['DataLoader drop_last']})"
            for _, row in by_hand.iterrows()
        )
        + f", by up to {int(by_hand['largest difference (batches)'].max())} batches. A rank "
        "with an extra step enters a gradient all-reduce the others never join. Neither "
        "sampler has an uneven mode (no padding, unequal shares) yet; where unequal shares "
        "are wanted, the ranks must agree on the step count themselves (e.g. DDP's join())."
    )
    return Evidence(
        prose=prose,
        tables=(
            Table(
                "Ranks whose DataLoaders yield different numbers of batches",
                table,
                note=(
                    "Shuffle off (it does not change counts). `example`: the configuration "
                    "with the largest difference, smallest first."
                ),
            ),
        ),
    )
