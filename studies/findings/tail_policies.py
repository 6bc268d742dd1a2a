"""Finding: which sampler and tail policy, measured over a grid; the README's table."""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedBatchSampler, DistributedSampler
from studies.core.simulate import IndexDataset, expecting_unequal_batches
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined

NAME = "tail-policies"
TITLE = "Which sampler and tail policy: repeats, drops, batch counts and batch sizes"
GUARDED_BY = "tests/test_beyond_torch_findings.py::test_tail_policy_table"

DATASET_SIZES: tuple[int, ...] = (1, 3, 5, 7, 10, 16, 33, 100)
WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 8)
BATCH_SIZES: tuple[int, ...] = (1, 2, 4)

#: The README's markers around the rendered table.
README_START = "<!-- tail-table:start -->"
README_END = "<!-- tail-table:end -->"

#: A configuration's DataLoader for one rank: (dataset size, world, rank, batch) -> loader.
Loader = Callable[[int, int, int, int], DataLoader[Any]]


def _sampled(sampler_class: type[StockDistributedSampler[int]], **options: Any) -> Loader:
    def loader(size: int, world: int, rank: int, batch: int) -> DataLoader[Any]:
        dataset = IndexDataset(size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # ours warns on empty shards
            sampler = sampler_class(dataset, world, rank, shuffle=False, **options)
        return DataLoader(dataset, batch_size=batch, sampler=sampler, collate_fn=list)

    return loader


def _batched(tail: str) -> Loader:
    def loader(size: int, world: int, rank: int, batch: int) -> DataLoader[Any]:
        dataset = IndexDataset(size)
        sampler = DistributedBatchSampler(dataset, batch, world, rank, False, tail=tail)  # type: ignore[arg-type]
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=list)

    return loader


STOCK_PAD = "stock DistributedSampler, drop_last=False"
STOCK_DROP = "stock DistributedSampler, drop_last=True"
OURS_PAD = 'DistributedSampler, tail="pad" (default)'
OURS_DROP = 'DistributedSampler, tail="drop"'
UNEVEN = 'DistributedSampler, tail="uneven"'
BATCHED_DROP = 'DistributedBatchSampler, tail="drop"'
BATCHED_UNEVEN = 'DistributedBatchSampler, tail="uneven"'

#: The samplers compared, in table order.
LOADERS: dict[str, Loader] = {
    STOCK_PAD: _sampled(StockDistributedSampler),
    STOCK_DROP: _sampled(StockDistributedSampler, drop_last=True),
    OURS_PAD: _sampled(DistributedSampler, tail="pad"),
    OURS_DROP: _sampled(DistributedSampler, tail="drop"),
    UNEVEN: _sampled(DistributedSampler, tail="uneven"),
    'DistributedBatchSampler, tail="pad"': _batched("pad"),
    BATCHED_DROP: _batched("drop"),
    BATCHED_UNEVEN: _batched("uneven"),
}
#: Ours that must stay a drop-in: (ours, the stock configuration it must equal).
DROP_INS = ((OURS_PAD, STOCK_PAD), (OURS_DROP, STOCK_DROP))

REPEATED = "samples repeated (max)"
DROPPED = "samples dropped (max)"
EMPTY = "epochs with no batch at all"
UNEQUAL = "unequal batch counts"
UNEQUAL_LARGE = "of them with N ≥ W and B ≥ 2"
SMALLEST = "smallest batch / batch size (N ≥ W·B)"
ONCE = "every sample exactly once"
USE = "use this when"


def batches(loader: Loader, size: int, world: int, batch: int) -> list[list[list[int]]]:
    """Each rank's batches (lists of dataset indices) for one configuration."""
    with expecting_unequal_batches():  # what this finding measures
        return [[list(b) for b in loader(size, world, rank, batch)] for rank in range(world)]


def describe_configuration(by_rank: Sequence[Sequence[Sequence[int]]], size: int) -> dict[str, Any]:
    """What the ranks' batches of one epoch do to the dataset's ``size`` samples."""
    seen = Counter(index for rank in by_rank for batch in rank for index in batch)
    sizes = [len(batch) for rank in by_rank for batch in rank]
    return {
        "repeated": sum(copies - 1 for copies in seen.values()),
        "dropped": sum(1 for index in range(size) if index not in seen),
        "equal": len({len(rank) for rank in by_rank}) == 1,
        "no batch": not sizes,
        "smallest": min((length for length in sizes if length > 0), default=None),
        "once": len(seen) == size and all(copies == 1 for copies in seen.values()),
    }


def measure() -> tuple[pd.DataFrame, dict[str, int]]:
    """One row per (sampler, dataset size, world size, batch size), and for each drop-in
    of :data:`DROP_INS` the number of configurations where every rank's batches equal the
    stock ones."""
    rows = []
    identical = dict.fromkeys((ours for ours, _ in DROP_INS), 0)
    grid = list(itertools.product(DATASET_SIZES, WORLD_SIZES, BATCH_SIZES))
    for size, world, batch in grid:
        drawn = {name: batches(loader, size, world, batch) for name, loader in LOADERS.items()}
        for ours, stock in DROP_INS:
            identical[ours] += drawn[ours] == drawn[stock]
        for name, by_rank in drawn.items():
            rows.append(
                {
                    "sampler": name,
                    "dataset size": size,
                    "world size": world,
                    "batch size": batch,
                    **describe_configuration(by_rank, size),
                }
            )
    return pd.DataFrame(rows), identical


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per sampler: the worst case over the grid, and when to use it.

    Counts are configurations of the grid; the header of the exactly-once column names
    the grid's size, so ``yes`` there means every configuration.
    """
    rows = []
    for name, own in frame.groupby("sampler", sort=False):
        large = own[own["dataset size"] >= own["world size"] * own["batch size"]]
        smallest = (large["smallest"] / large["batch size"]).min()
        unequal = own[~own["equal"]]
        typical = (unequal["dataset size"] >= unequal["world size"]) & (unequal["batch size"] >= 2)
        row = {
            "sampler": name,
            REPEATED: int(own["repeated"].max()),
            DROPPED: int(own["dropped"].max()),
            EMPTY: int(own["no batch"].sum()),
            UNEQUAL: len(unequal),
            UNEQUAL_LARGE: int(typical.sum()),
            SMALLEST: f"{smallest:.2f}",
            ONCE: f"{int(own['once'].sum())} of {len(own)}",
        }
        row[USE] = use_when(row, name)
        rows.append(row)
    return pd.DataFrame(rows)


def use_when(row: dict[str, Any], name: str) -> str:
    """One line: the job a sampler's measured row suits, read from its numbers."""
    counted, total = (int(part) for part in str(row[ONCE]).split(" of "))
    once, equal = counted == total, row[UNEQUAL] == 0
    full = float(row[SMALLEST]) == 1.0
    typical_equal = row[UNEQUAL_LARGE] == 0
    if once and equal:
        return "exact evaluation with per-batch collectives (no hang, no repeats)"
    if once and typical_equal:
        return (
            "exact evaluation with per-batch collectives when N ≥ W and B ≥ 2 (the "
            "unequal counts measured all fall outside that)"
        )
    if once:
        return "exact evaluation gathered once at the end (no per-batch collectives)"
    if not equal:
        return "nothing measured here"
    if row[DROPPED] == 0:
        text = f"training that must see every sample each epoch (up to {row[REPEATED]} repeated)"
    else:
        emptied = f"; {row[EMPTY]} epochs emptied" if row[EMPTY] else ""
        text = f"training without repeats (up to {row[DROPPED]} samples skipped{emptied})"
    if full:
        text += ", full batches"
    if name.startswith("stock"):
        return text
    if name in (ours for ours, _ in DROP_INS):
        text += "; drop-in for the stock sampler"
    return text


def grid_sentence() -> str:
    """Where the table's numbers come from, in one paragraph."""
    configurations = len(DATASET_SIZES) * len(WORLD_SIZES) * len(BATCH_SIZES)
    return (
        "Measured over dataset sizes "
        f"{', '.join(map(str, DATASET_SIZES))}, world sizes "
        f"{', '.join(map(str, WORLD_SIZES))} and batch sizes "
        f"{', '.join(map(str, BATCH_SIZES))} ({configurations} configurations; the counts "
        "are configurations), shuffle off, each rank read through a DataLoader (the "
        "samplers with `batch_size`, the batch samplers as `batch_sampler`). N: dataset "
        "size, W: world size, B: batch size."
    )


def markdown(frame: pd.DataFrame) -> str:
    """The table as the README shows it (between :data:`README_START` and
    :data:`README_END`), after the grid it was measured over and its source."""
    source = f"Generated from `studies/findings/{__name__.rsplit('.', 1)[-1]}.py`."
    return f"{grid_sentence()} {source}\n\n{frame.to_markdown(index=False)}\n"


def readme_table() -> str:
    """:func:`markdown` of a fresh measurement: what the README must hold."""
    frame, _ = measure()
    return markdown(table(frame))


@dataclass(frozen=True)
class Facts:
    """Per sampler of :data:`LOADERS`, what the grid measured (configurations counted)."""

    configurations: int
    repeated: dict[str, int]
    dropped: dict[str, int]
    emptied: dict[str, int]
    unequal: dict[str, int]
    #: Unequal configurations with N >= W and B >= 2.
    unequal_large: dict[str, int]
    once: dict[str, int]
    smallest: dict[str, float]
    #: Ours that must stay a drop-in -> configurations identical to the stock sampler.
    identical: dict[str, int]


def facts(summary: pd.DataFrame, identical: dict[str, int], configurations: int) -> Facts:
    """The counts the claim and the answers use, from the table (and the drop-in check)."""
    rows = summary.set_index("sampler")

    def column(name: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in rows[name].items()}

    return Facts(
        configurations=configurations,
        repeated=column(REPEATED),
        dropped=column(DROPPED),
        emptied=column(EMPTY),
        unequal=column(UNEQUAL),
        unequal_large=column(UNEQUAL_LARGE),
        once={str(k): int(str(v).split(" of ")[0]) for k, v in rows[ONCE].items()},
        smallest={str(k): float(v) for k, v in rows[SMALLEST].items()},
        identical=dict(identical),
    )


def claim(found: Facts) -> str:
    """The claim, from the facts."""
    total = found.configurations

    def of(counts: dict[str, int], name: str, noun: str = "configurations") -> str:
        return count_of(counts[name], total, noun)

    batched = [name for name in LOADERS if name.startswith("DistributedBatchSampler")]
    same = [found.identical[ours] for ours, _ in DROP_INS]
    drop_ins = (
        f"all {total} configurations, each"
        if all(count == total for count in same)
        else f"{joined(same)} of the {total} configurations"
    )
    return (
        f"Over a grid of {total} configurations (fewer samples than ranks and batch size 1 "
        'included), read through DataLoaders: the stock sampler and ours with tail="pad" '
        f'repeated up to {found.repeated[STOCK_PAD]} samples per epoch and with "drop" '
        f'skipped up to {found.dropped[STOCK_DROP]}; ours with tail="uneven" handed out '
        f"every sample exactly once in {of(found.once, UNEVEN)} but gave ranks unequal "
        f"batch counts in {found.unequal[UNEVEN]}. DistributedBatchSampler gave ranks unequal "
        "batch counts in "
        + joined(f"{found.unequal[name]} ({name.split(', ', 1)[1]})" for name in batched)
        + f' configurations; with "uneven", whose every sample went out exactly once in '
        f"{of(found.once, BATCHED_UNEVEN)}, {found.unequal_large[BATCHED_UNEVEN]} of its "
        f"{found.unequal[BATCHED_UNEVEN]} unequal ones had N ≥ W and B ≥ 2. With "
        f'"drop" it skipped up to {found.dropped[BATCHED_DROP]} samples and left '
        f'{found.emptied[BATCHED_DROP]} epochs without a batch. Ours with "pad" and '
        f'"drop" yielded the stock sampler\'s batches in {drop_ins}.'
    )


def describe(frame: pd.DataFrame, found: Facts) -> str:
    """The prose, from the measurements and their facts."""
    total = found.configurations
    once = [name for name in LOADERS if found.once[name] == total]
    both = [name for name in once if found.unequal[name] == 0]
    unequal = frame[~frame["equal"]]
    batched_once = frame[(frame["sampler"] == BATCHED_UNEVEN) & ~frame["equal"]]
    batch_one = int((batched_once["batch size"] == 1).sum())
    larger = batched_once[batched_once["batch size"] > 1]
    below = int((larger["dataset size"] < larger["world size"]).sum())
    emptied = frame[frame["no batch"]]
    example = emptied[emptied["dropped"] == emptied["dataset size"]]
    drop_ins = "; ".join(
        f"{ours}: {found.identical[ours]} of {total} identical to {stock}"
        for ours, stock in DROP_INS
    )
    text = (
        f"Over {total} configurations per sampler. Every sample exactly once in every "
        f"configuration: {joined(once) or 'none'}; of these, equal batch counts on every "
        f"rank in every configuration too: {joined(both) or 'none'}. Ranks' batch counts "
        f"differed in {len(unequal)} (sampler, configuration) pairs, all with "
        f"{joined(sorted(unequal['sampler'].unique()))}. The stock padding repeated up "
        f"to {found.repeated[STOCK_PAD]} samples and drop_last dropped up to "
        f"{found.dropped[STOCK_DROP]}. Drop-in: {drop_ins}. "
        f"{BATCHED_UNEVEN} gave ranks unequal batch counts in {len(batched_once)} "
        f"configurations: {batch_one} with batch size 1 (every sample exactly once wins "
        "there: some ranks take one batch fewer), and "
        f"{len(batched_once) - batch_one} with batch size 2 or more, of which {below} had "
        "fewer samples than ranks. "
    )
    if not emptied.empty:
        text += (
            f"{len(emptied)} (sampler, configuration) pairs gave no rank a batch at all ("
            + joined(
                f"{count} with {name}"
                for name, count in emptied["sampler"].value_counts(sort=False).items()
            )
            + ")"
        )
        if not example.empty:
            row = example.iloc[0]
            text += (
                f", e.g. N={row['dataset size']}, W={row['world size']}, "
                f"B={row['batch size']} with {row['sampler']}: every sample dropped"
            )
        text += ". "
    text += (
        "Our batch sampler warns when it gives ranks unequal batch counts; the measurement "
        "provokes that on purpose and silences that one warning."
    )
    return text


def build() -> Evidence:
    frame, identical = measure()
    summary = table(frame)
    configurations = len(frame) // frame["sampler"].nunique()
    found = facts(summary, identical, configurations)
    return Evidence(
        claim=claim(found),
        facts=found,
        prose=describe(frame, found),
        tables=(
            Table(
                "Worst case of each sampler over the grid, and when to use it",
                summary,
                note=grid_sentence(),
            ),
        ),
    )
