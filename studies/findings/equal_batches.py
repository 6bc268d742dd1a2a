"""Finding: DistributedSampler ranks run equal numbers of steps; hand-made splits do not."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from samplers.plan import ceil_div
from studies.core.simulate import IndexDataset
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined, listed

NAME = "equal-batch-counts"
TITLE = "Ranks' batch counts: padded or trimmed shares against uneven splits"
GUARDED_BY = "tests/test_findings.py::test_distributed_samplers_give_every_rank_equal_batches"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
SECONDS = 15

DATASET_SIZES = tuple(range(1, 34))
WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 8)
BATCH_SIZES: tuple[int, ...] = (1, 4)

#: The table's column counting configurations whose ranks' batch counts differ.
DIFFER = "ranks' batch counts differ"

#: How a rank's DataLoader gets its part: a function of (dataset size, world size, rank,
#: DataLoader drop_last) -> that rank's DataLoader (shuffle off, where it matters).
Split = Callable[[int, int, int, int, bool], DataLoader[int]]


def _sampled(sampler_class: type[StockDistributedSampler[int]], **options: Any) -> Split:
    def loader(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
        dataset = IndexDataset(size)
        with warnings.catch_warnings():
            # Ours warns on empty shards, which some configurations here have on purpose.
            warnings.simplefilter("ignore", UserWarning)
            sampler = sampler_class(
                dataset, num_replicas=world, rank=rank, shuffle=False, **options
            )
        return DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=loader_drop)

    return loader


def _contiguous(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
    chunk = ceil_div(size, world)  # samples per rank, the last rank gets the rest
    part = Subset(IndexDataset(size), range(rank * chunk, min(size, (rank + 1) * chunk)))
    return DataLoader(part, batch_size=batch, drop_last=loader_drop)


def _strided(size: int, world: int, rank: int, batch: int, loader_drop: bool) -> DataLoader[int]:
    part = Subset(IndexDataset(size), range(rank, size, world))  # dataset[rank::world]
    return DataLoader(part, batch_size=batch, drop_last=loader_drop)


STRIDED = "every W-th sample: Subset(range(rank, N, W))"
CONTIGUOUS = "contiguous Subset chunks of ceil(N/W)"
UNEVEN = 'our DistributedSampler, tail="uneven"'

#: The ways of giving each rank its part that are measured, by name.
SPLITS: dict[str, Split] = {
    "stock DistributedSampler": _sampled(StockDistributedSampler, drop_last=False),
    "stock DistributedSampler, drop_last=True": _sampled(StockDistributedSampler, drop_last=True),
    'our DistributedSampler, tail="pad"': _sampled(DistributedSampler, tail="pad"),
    'our DistributedSampler, tail="drop"': _sampled(DistributedSampler, tail="drop"),
    UNEVEN: _sampled(DistributedSampler, tail="uneven"),
    CONTIGUOUS: _contiguous,
    STRIDED: _strided,
}
#: The splits that give every rank a share of the same length (padded or trimmed).
EQUAL_SHARES = tuple(name for name in SPLITS if "DistributedSampler" in name and name != UNEVEN)
#: The column saying, per split, in how many configurations it gave the every-W-th split's
#: batch counts.
AS_STRIDED = "same counts as every W-th sample"


def batch_counts(split: Split, size: int, world: int, batch: int, loader_drop: bool) -> list[int]:
    """How many batches each rank's DataLoader yields in one pass."""
    return [sum(1 for _ in split(size, world, rank, batch, loader_drop)) for rank in range(world)]


@dataclass(frozen=True)
class Facts:
    """Configurations whose ranks' batch counts differed, by kind of split (both DataLoader
    drop_last settings summed)."""

    configurations: int
    equal_shares: int
    uneven: tuple[int, ...]
    uneven_as_strided: int
    strided: tuple[int, ...]
    contiguous: tuple[int, ...]
    widest: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table."""
    name = table["how each rank gets its part"]

    def counts(split: str) -> tuple[int, ...]:
        return tuple(int(count) for count in table[name == split][DIFFER])

    hand = table[name.isin([UNEVEN, STRIDED, CONTIGUOUS])]
    return Facts(
        configurations=int(table["configurations"].iloc[0]),
        equal_shares=int(table[name.isin(EQUAL_SHARES)][DIFFER].sum()),
        uneven=counts(UNEVEN),
        uneven_as_strided=int(table[name == UNEVEN][AS_STRIDED].sum()),
        strided=counts(STRIDED),
        contiguous=counts(CONTIGUOUS),
        widest=int(hand["largest difference (batches)"].max()),
    )


def measure() -> pd.DataFrame:
    """One row per split and DataLoader drop_last: how often the ranks' counts differ."""
    rows = []
    for loader_drop in (False, True):
        counted = {
            (size, world, batch): {
                name: batch_counts(split, size, world, batch, loader_drop)
                for name, split in SPLITS.items()
            }
            for size, world, batch in itertools.product(DATASET_SIZES, WORLD_SIZES, BATCH_SIZES)
        }
        for name in SPLITS:
            unequal, widest, example, as_strided = 0, 0, "", 0
            for (size, world, batch), by_split in counted.items():
                counts = by_split[name]
                as_strided += counts == by_split[STRIDED]
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
                    "configurations": len(counted),
                    DIFFER: unequal,
                    "largest difference (batches)": widest,
                    AS_STRIDED: as_strided,
                    "example (batches per rank)": example or "-",
                }
            )
    return pd.DataFrame(rows)


def build() -> Evidence:
    table = measure()
    found = facts(table)
    total = found.configurations
    claim = (
        "Padded or trimmed shares (the stock DistributedSampler, either drop_last; ours with "
        f'tail="pad" or "drop") gave ranks different batch counts in '
        f"{count_of(found.equal_shares, len(EQUAL_SHARES) * 2 * total, 'runs')} over "
        f"{total} configurations and both DataLoader drop_last settings. Uneven splits did: "
        f'ours with tail="uneven" in {joined(found.uneven)} of the {total} (DataLoader '
        f"drop_last off, on), giving the same counts as every W-th sample "
        f"(Subset(range(rank, N, W))) in {count_of(found.uneven_as_strided, 2 * total, 'runs')}"
        f", and contiguous Subset chunks in {joined(found.contiguous)}. A rank with an extra "
        "step enters a collective (e.g. DDP's gradient all-reduce) the others never join."
    )
    by_hand = table[table["how each rank gets its part"].isin([CONTIGUOUS, STRIDED])]
    prose = (
        f"Over {total} configurations (dataset sizes {DATASET_SIZES[0]} to "
        f"{DATASET_SIZES[-1]}, world sizes {joined(WORLD_SIZES)}, batch sizes "
        f"{joined(BATCH_SIZES)}) and both DataLoader drop_last settings, the ranks' batch "
        f"counts differed in {found.equal_shares} runs of the samplers that pad or trim every "
        "rank to the same share, so every rank runs the same number of steps. "
        f'Ours with tail="uneven" hands every sample out exactly once, so shares differ by '
        f"one sample and batch counts differed in {joined(found.uneven)} configurations: in "
        f"{found.uneven_as_strided} of {2 * total} runs its counts were those of every W-th "
        "sample by hand, the split it makes. Split by hand, they differed in "
        + joined(
            f"{int(row[DIFFER])} ({row['how each rank gets its part']}, "
            f"DataLoader drop_last={row['DataLoader drop_last']})"
            for _, row in by_hand.iterrows()
        )
        + f", by up to {found.widest} batch(es). Use an uneven split only where no step runs a "
        "collective the ranks must all join, e.g. evaluation gathered once at the end "
        "(the exact-evaluation finding); for training, pad or trim, or let the ranks agree "
        "on the step count themselves (e.g. DDP's join())."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "Ranks whose DataLoaders yield different numbers of batches",
                table,
                note=(
                    "Shuffle off (it does not change counts). `example`: the configuration "
                    "with the largest difference, smallest first. "
                    f"`{AS_STRIDED}`: configurations in which this split's batch counts per "
                    "rank equal those of Subset(range(rank, N, W))."
                ),
            ),
        ),
    )
