"""Collecting per-sample results from the ranks, three ways, in real processes.

Each rank takes its part of an evaluation set from a sampler (shuffle off) and computes
one result per sample: the sample's own index, so that slot ``i`` of a correct collection
holds ``i``. The ranks then collect the parts on rank 0 in three ways:

``zip``
    The collection of the source document's ``collect_results`` (mmengine's ``dist``
    module as published there): the parts, gathered with ``all_gather_object``, zipped
    in rank order, flattened and truncated to the dataset size
    (:func:`studies.core.evaluation.zip_and_truncate`). ``zip`` stops at the shortest part.
``mmengine``
    The installed mmengine's own ``mmengine.dist.collect_results(part, size)`` (its
    default ``device="cpu"``: every rank pickles its part into a shared directory, rank 0
    reads them). mmengine 0.10.7 zips with ``itertools.zip_longest`` and drops the
    ``None`` it pads with, so parts of unequal length interleave to the end.
``gather_unsharded``
    Ours: :func:`samplers.gather_unsharded`, which places each result by the sampler's
    plan (the stock sampler's plan is that of ours with the same arguments, tail
    ``"pad"``, which yields the same indices).

:func:`measure` runs one launch per world size (:func:`studies.engines.local_ranks.
launch`) and returns, per configuration and collection, how the collected list differs
from ``[0, 1, ..., N - 1]``.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedBatchSampler, DistributedSampler, unshard
from studies.core.evaluation import zip_and_truncate
from studies.core.simulate import IndexDataset, expecting_unequal_batches
from studies.engines.local_ranks import DEFAULT_TIMEOUT, launch

__all__ = [
    "BATCH_SIZE",
    "COLLECTIONS",
    "COLUMNS",
    "DATASET_SIZES",
    "LOST",
    "REPEATED",
    "SAMPLERS",
    "WORLD_SIZES",
    "WRONG",
    "collect_on_rank",
    "count",
    "measure",
]

DATASET_SIZES: tuple[int, ...] = (*range(1, 18), 31, 32, 33, 100, 101, 1000, 1001)
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

#: The collections, in table order (see the module's docstring).
COLLECTIONS: tuple[str, ...] = ("zip", "mmengine", "gather_unsharded")

LOST = "samples lost"
REPEATED = "extra copies"
WRONG = "slots not holding their sample"

#: One row per (sampler, dataset size, world size, collection).
COLUMNS = (
    "sampler",
    "dataset size",
    "world size",
    "part lengths differ",
    "collection",
    LOST,
    REPEATED,
    WRONG,
)


def count(collected: Sequence[int | None], dataset_size: int) -> dict[str, int]:
    """How a collected list of sample indices differs from ``[0, 1, ..., N - 1]``."""
    present = Counter(index for index in collected if index is not None)
    return {
        LOST: sum(1 for index in range(dataset_size) if index not in present),
        REPEATED: sum(copies - 1 for copies in present.values()),
        WRONG: sum(
            1 for slot in range(dataset_size) if slot >= len(collected) or collected[slot] != slot
        ),
    }


def _part(sampler: Any) -> list[int]:
    """The rank's sample indices in the order its sampler yields them (batches joined)."""
    with expecting_unequal_batches():
        drawn = list(sampler)
    if drawn and isinstance(drawn[0], list):
        return [int(index) for batch in drawn for index in batch]
    return [int(index) for index in drawn]


def _planned(sampler: Any, size: int, world: int) -> Any:
    """The sampler whose plan gather_unsharded reads: the stock sampler's is ours, "pad"."""
    if isinstance(sampler, StockDistributedSampler) and not isinstance(sampler, DistributedSampler):
        return DistributedSampler(IndexDataset(size), world, 0, shuffle=False)
    return sampler


def collect_on_rank(payload: tuple[Sequence[tuple[str, int]], str]) -> list[Any]:
    """Rank work: for each (sampler name, dataset size), mmengine's ``collect_results`` of
    this rank's part, as rank 0 receives it (``None`` on the other ranks).

    ``payload`` is the configurations and a directory every rank can write, in which
    each configuration gets its own ``tmpdir`` (mmengine's default ``device="cpu"``
    passes the parts through files there).
    """
    from mmengine.dist import collect_results

    configurations, directory = payload
    rank, world = dist.get_rank(), dist.get_world_size()
    collected = []
    for number, (name, size) in enumerate(configurations):
        part = _part(SAMPLERS[name](size, world, rank))
        tmpdir = str(Path(directory) / f"configuration-{number}")
        collected.append(collect_results(part, size, device="cpu", tmpdir=tmpdir))
    return collected


def measure(
    dataset_sizes: Sequence[int] = DATASET_SIZES,
    world_sizes: Sequence[int] = WORLD_SIZES,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> pd.DataFrame:
    """Every sampler, size pair and collection; mmengine's in real gloo processes.

    The parts are each rank's sampler output (the same in every process: the
    real-processes finding checks it); ``zip`` and ``gather_unsharded`` are computed
    from them here (``gather_unsharded`` is ``all_gather_object`` then
    :func:`samplers.unshard`, measured in real processes by the exact-evaluation
    finding), mmengine's ``collect_results`` runs in one launch per world size.
    """
    rows: list[dict[str, Any]] = []
    configurations = list(itertools.product(SAMPLERS, dataset_sizes))
    for world in world_sizes:
        with tempfile.TemporaryDirectory(prefix="dsampler-collect-") as directory:
            per_rank = launch(collect_on_rank, (configurations, directory), world, timeout=timeout)
        for (name, size), mmengine in zip(configurations, per_rank[0], strict=True):
            samplers = [SAMPLERS[name](size, world, rank) for rank in range(world)]
            parts = [_part(sampler) for sampler in samplers]
            collected = {
                "zip": zip_and_truncate(parts, size),
                "mmengine": mmengine,
                "gather_unsharded": unshard(parts, _planned(samplers[0], size, world)),
            }
            for collection in COLLECTIONS:
                rows.append(
                    {
                        "sampler": name,
                        "dataset size": size,
                        "world size": world,
                        "part lengths differ": len({len(part) for part in parts}) > 1,
                        "collection": collection,
                        **count(collected[collection], size),
                    }
                )
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    rank_of = {name: position for position, name in enumerate(SAMPLERS)}
    frame = frame.assign(_order=frame["sampler"].map(rank_of))
    frame = frame.sort_values(["_order", "world size", "dataset size"], kind="stable")
    return frame.drop(columns="_order").reset_index(drop=True)
