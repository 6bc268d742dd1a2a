"""Finding: zipping the ranks' parts and truncating is exact only for the stock padding."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedBatchSampler, DistributedSampler, unshard
from studies.evaluation import zip_and_truncate
from studies.findings import Evidence, Table
from studies.simulate import IndexDataset

NAME = "zip-and-truncate"
TITLE = "Zipping the ranks' parts and truncating loses samples when the parts differ in length"
CLAIM = (
    "The common collection of distributed results (mmengine's collect_results: zip the "
    "ranks' parts in rank order, flatten, truncate to the dataset size) is exact with the "
    "stock sampler's padding, where every part has the same length; with parts of unequal "
    'length (samplers.DistributedSampler(tail="uneven")) zip stops at the shortest part '
    "and samples are silently lost, and with a batch-aware layout results land in other "
    "samples' slots, lost or repeated. samplers.unshard is exact for all of them."
)
GUARDED_BY = "tests/test_beyond_torch_findings.py::test_zip_and_truncate_loses_samples"

DATASET_SIZES: tuple[int, ...] = (*range(1, 41), 100, 101, 1000, 1001)
WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 8, 16)
BATCH_SIZE = 4

#: The samplers compared, by name: (dataset size, world size, rank) -> that rank's sampler.
SAMPLERS: dict[str, Callable[[int, int, int], Any]] = {
    "stock, padding": lambda size, world, rank: StockDistributedSampler(
        IndexDataset(size), num_replicas=world, rank=rank, shuffle=False
    ),
    'ours, tail="uneven"': lambda size, world, rank: DistributedSampler(
        IndexDataset(size), num_replicas=world, rank=rank, shuffle=False, tail="uneven"
    ),
    f'DistributedBatchSampler({BATCH_SIZE}), tail="uneven"': lambda size, world, rank: (
        DistributedBatchSampler(
            IndexDataset(size), BATCH_SIZE, world, rank, shuffle=False, tail="uneven"
        )
    ),
    f'DistributedBatchSampler({BATCH_SIZE}), tail="pad"': lambda size, world, rank: (
        DistributedBatchSampler(IndexDataset(size), BATCH_SIZE, world, rank, shuffle=False)
    ),
}

LOST = "samples lost"
REPEATED = "extra copies"
WRONG = "slots not holding their sample"


def count(collected: Sequence[int | None], dataset_size: int) -> dict[str, int]:
    """How a collected list of sample indices differs from ``[0, 1, ..., N - 1]``.

    Each result is its sample's index, so slot ``i`` should hold ``i`` (shuffle off).
    """
    present = Counter(index for index in collected if index is not None)
    return {
        LOST: sum(1 for index in range(dataset_size) if index not in present),
        REPEATED: sum(copies - 1 for copies in present.values()),
        WRONG: sum(
            1 for slot in range(dataset_size) if slot >= len(collected) or collected[slot] != slot
        ),
    }


def parts_of(samplers: Sequence[Any]) -> list[list[int]]:
    """Each rank's sample indices in the order its sampler yields them (batches joined)."""
    parts = []
    for sampler in samplers:
        drawn = list(sampler)
        if drawn and isinstance(drawn[0], list):
            drawn = [index for batch in drawn for index in batch]
        parts.append(drawn)
    return parts


def _planned(sampler: Any, size: int, world: int) -> Any:
    """The sampler whose plan unshard reads: the stock sampler's is ours with tail "pad"."""
    if isinstance(sampler, StockDistributedSampler) and not isinstance(sampler, DistributedSampler):
        return DistributedSampler(IndexDataset(size), world, 0, shuffle=False)
    return sampler


def measure() -> pd.DataFrame:
    """One row per (sampler, dataset size, world size): both collections' differences."""
    rows = []
    for name, make in SAMPLERS.items():
        for world, size in itertools.product(WORLD_SIZES, DATASET_SIZES):
            samplers = [make(size, world, rank) for rank in range(world)]
            parts = parts_of(samplers)
            zipped = count(zip_and_truncate(parts, size), size)
            exact = count(unshard(parts, _planned(samplers[0], size, world)), size)
            rows.append(
                {
                    "sampler": name,
                    "dataset size": size,
                    "world size": world,
                    "part lengths differ": len({len(part) for part in parts}) > 1,
                    **{f"zip and truncate: {k}": v for k, v in zipped.items()},
                    **{f"unshard: {k}": v for k, v in exact.items()},
                }
            )
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per sampler: how often and by how much each collection was wrong."""
    rows = []
    for name, own in frame.groupby("sampler", sort=False):
        zipped = {key: own[f"zip and truncate: {key}"] for key in (LOST, REPEATED, WRONG)}
        unsharded = own[[f"unshard: {key}" for key in (LOST, REPEATED, WRONG)]]
        rows.append(
            {
                "sampler": name,
                "configurations": len(own),
                "part lengths differ": int(own["part lengths differ"].sum()),
                "zip and truncate wrong": int((zipped[WRONG] > 0).sum()),
                f"zip and truncate: max {LOST}": int(zipped[LOST].max()),
                f"zip and truncate: max {REPEATED}": int(zipped[REPEATED].max()),
                f"zip and truncate: max {WRONG}": int(zipped[WRONG].max()),
                "unshard wrong": int((unsharded.to_numpy() > 0).any(axis=1).sum()),
            }
        )
    return pd.DataFrame(rows)


def describe(frame: pd.DataFrame, table: pd.DataFrame) -> str:
    """The prose, from :func:`measure`'s frame and its :func:`summary`."""
    by_name = table.set_index("sampler")
    stock, uneven = by_name.loc["stock, padding"], by_name.loc['ours, tail="uneven"']
    ours = frame[frame["sampler"] == 'ours, tail="uneven"']
    remainder = ours["dataset size"] % ours["world size"]
    lost = ours[f"zip and truncate: {LOST}"]
    batched = table[table["sampler"].str.startswith("DistributedBatchSampler")]
    return (
        f"Over {int(stock['configurations'])} (dataset size, world size) pairs per sampler: "
        f"with the stock padding the parts never differed in length "
        f"({int(stock['part lengths differ'])} pairs) and zip-and-truncate was wrong in "
        f'{int(stock["zip and truncate wrong"])}. With tail="uneven" the parts differed in '
        f"{int(uneven['part lengths differ'])} pairs and zip-and-truncate lost samples in "
        f"{int((lost > 0).sum())}, up to {int(lost.max())} at once, without an error; the "
        f"number lost equalled dataset size mod world size in "
        f"{int((lost == remainder).sum())} of {len(ours)}, the samples past the last "
        "complete round of ranks, which zip never reaches. With the batch-aware layout, "
        f"whose ranks take contiguous blocks, it was wrong in "
        f"{int(batched['zip and truncate wrong'].min())} or more pairs per tail policy, "
        f"with up to {int(batched[f'zip and truncate: max {REPEATED}'].max())} extra copies "
        f"and {int(batched[f'zip and truncate: max {WRONG}'].max())} slots holding another "
        f"sample's result. unshard was wrong in {int(table['unshard wrong'].sum())} of "
        f"{len(frame)} configurations."
    )


def build() -> Evidence:
    frame = measure()
    table = summary(frame)
    return Evidence(
        prose=describe(frame, table),
        tables=(
            Table(
                "Collections against every sample once, in dataset order",
                frame,
                name="collections",
                summary=table,
                note=(
                    "Shuffle off; each sample's result is its index, so slot i must hold i. "
                    "Zip and truncate: the ranks' parts zipped in rank order, flattened and "
                    "truncated to the dataset size. Batch samplers' batches are joined in "
                    "the order they are yielded. unshard reads the stock sampler's layout "
                    'from ours with the same arguments (tail "pad"), which yields the same '
                    "indices."
                ),
            ),
        ),
    )
