"""Finding: which sampler and tail policy, measured over a grid; the README's table."""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedBatchSampler, DistributedSampler
from studies.findings import Evidence, Table
from studies.simulate import IndexDataset, expecting_unequal_batches

NAME = "tail-policies"
TITLE = "Which sampler and tail policy: repeats, drops, batch counts and batch sizes"
CLAIM = (
    "Over a grid of dataset sizes (fewer samples than ranks included), world sizes and "
    'batch sizes, read through DataLoaders: the stock sampler and ours with tail="pad" '
    'repeat samples and with "drop" skip them; ours with tail="uneven" hands out every '
    "sample exactly once but ranks may run different numbers of batches; "
    "DistributedBatchSampler gives every rank the same number of batches with every tail, "
    'and with "uneven" every sample exactly once. Ours with tail="pad" and "drop" '
    "yields exactly the stock sampler's batches with drop_last False and True."
)
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
BATCHED_UNEVEN = 'DistributedBatchSampler, tail="uneven"'

#: The samplers compared, in table order.
LOADERS: dict[str, Loader] = {
    STOCK_PAD: _sampled(StockDistributedSampler),
    STOCK_DROP: _sampled(StockDistributedSampler, drop_last=True),
    OURS_PAD: _sampled(DistributedSampler, tail="pad"),
    OURS_DROP: _sampled(DistributedSampler, tail="drop"),
    'DistributedSampler, tail="uneven"': _sampled(DistributedSampler, tail="uneven"),
    'DistributedBatchSampler, tail="pad"': _batched("pad"),
    'DistributedBatchSampler, tail="drop"': _batched("drop"),
    BATCHED_UNEVEN: _batched("uneven"),
}
#: Ours that must stay a drop-in: (ours, the stock configuration it must equal).
DROP_INS = ((OURS_PAD, STOCK_PAD), (OURS_DROP, STOCK_DROP))

REPEATED = "samples repeated (max)"
DROPPED = "samples dropped (max)"
EQUAL = "equal batch counts (N ≥ W, B ≥ 2)"
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
        "empty": any(length == 0 for length in sizes),
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
    """One row per sampler: the worst case over the grid, and when to use it."""
    rows = []
    for name, own in frame.groupby("sampler", sort=False):
        large = own[own["dataset size"] >= own["world size"] * own["batch size"]]
        smallest = (large["smallest"] / large["batch size"]).min()
        # The batch sampler promises equal counts from N >= W on, except for an uneven
        # tail with batch size 1 (exactly once wins there): the column shows that range.
        promised = own[(own["dataset size"] >= own["world size"]) & (own["batch size"] >= 2)]
        row = {
            "sampler": name,
            REPEATED: int(own["repeated"].max()),
            DROPPED: int(own["dropped"].max()),
            EQUAL: _yes(promised["equal"].all()),
            SMALLEST: f"{smallest:.2f}",
            ONCE: _yes(own["once"].all()),
        }
        row[USE] = use_when(row, name)
        rows.append(row)
    return pd.DataFrame(rows)


def use_when(row: dict[str, Any], name: str) -> str:
    """One line: the job a sampler's measured row suits, read from its numbers."""
    once, equal = row[ONCE] == "yes", row[EQUAL] == "yes"
    full = float(row[SMALLEST]) == 1.0
    if once and equal:
        return "exact evaluation with per-batch collectives (no hang, no repeats)"
    if once:
        return "exact evaluation gathered once at the end (no per-batch collectives)"
    if not equal:
        return "nothing measured here"
    if row[DROPPED] == 0:
        text = "training that must see every sample each epoch (a few repeated)"
    else:
        text = "training without repeats (a few samples skipped each epoch)"
    if full:
        text += ", full batches"
    if name.startswith("stock"):
        return text
    if name in (ours for ours, _ in DROP_INS):
        text += "; drop-in for the stock sampler"
    return text


def _yes(value: object) -> str:
    return "yes" if bool(value) else "no"


def grid_sentence() -> str:
    """Where the table's numbers come from, in one paragraph."""
    return (
        "Measured over dataset sizes "
        f"{', '.join(map(str, DATASET_SIZES))}, world sizes "
        f"{', '.join(map(str, WORLD_SIZES))} and batch sizes "
        f"{', '.join(map(str, BATCH_SIZES))}, shuffle off, each rank read through a "
        "DataLoader (the samplers with `batch_size`, the batch samplers as "
        "`batch_sampler`). N: dataset size, W: world size, B: batch size."
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


def describe(frame: pd.DataFrame, summary: pd.DataFrame, identical: dict[str, int]) -> str:
    """The prose, from the measurements and the table."""
    configurations = len(frame) // frame["sampler"].nunique()
    by_name = summary.set_index("sampler")
    both = summary[(summary[ONCE] == "yes") & (summary[EQUAL] == "yes")]["sampler"].tolist()
    once = summary[summary[ONCE] == "yes"]["sampler"].tolist()
    unequal = frame[~frame["equal"]]
    batched_once = frame[(frame["sampler"] == BATCHED_UNEVEN) & ~frame["equal"]]
    batch_one = int((batched_once["batch size"] == 1).sum())
    larger = batched_once[batched_once["batch size"] > 1]
    below = int((larger["dataset size"] < larger["world size"]).sum())
    drop_ins = "; ".join(
        f"{ours}: {identical[ours]} of {configurations} identical to {stock}"
        for ours, stock in DROP_INS
    )
    return (
        f"Over {configurations} configurations per sampler. Every sample exactly once in "
        f"every configuration: {' and '.join(once)}; of these, equal batch counts on every "
        f"rank too: {', '.join(both) or 'none'}. "
        f"Ranks' batch counts differed in {len(unequal)} configurations, all with "
        f"{', '.join(sorted(unequal['sampler'].unique()))}. The stock padding repeated up "
        f"to {by_name.loc[STOCK_PAD, REPEATED]} samples and drop_last dropped up to "
        f"{by_name.loc[STOCK_DROP, DROPPED]}. Drop-in: {drop_ins}. "
        f"{BATCHED_UNEVEN} gave ranks unequal batch counts in {len(batched_once)} "
        f"configurations: {batch_one} with batch size 1 (every sample exactly once wins "
        "there: some ranks take one batch fewer), and "
        f"{len(batched_once) - batch_one} with batch size 2 or more, of which {below} had "
        f"fewer samples than ranks. Empty batches handed out, by any sampler: "
        f"{int(frame['empty'].sum())}."
    )


def build() -> Evidence:
    frame, identical = measure()
    summary = table(frame)
    return Evidence(
        prose=describe(frame, summary, identical),
        tables=(
            Table(
                "Worst case of each sampler over the grid, and when to use it",
                summary,
                note=grid_sentence(),
            ),
        ),
    )
