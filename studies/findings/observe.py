"""What a case's samplers and DataLoaders hand each rank, in the shapes findings use.

Every function here runs the real samplers and DataLoaders (through
:mod:`studies.core.simulate`) or reads the shared planning layer (:mod:`samplers.plan`); the
findings never re-derive the sharding arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers.plan import EpochPlan, ShardSizes
from studies.core.cases import Case
from studies.core.simulate import IndexDataset, case_rows, make_sampler

__all__ = [
    "Batches",
    "batches",
    "flat",
    "layout",
    "plan",
    "sampler_share",
]

#: A case's batches: (epoch, rank) -> the rank's batches that epoch, in order.
Batches = dict[tuple[int, int], list[list[int]]]


def batches(case: Case) -> Batches:
    """Every (epoch, rank) of the case, with the batches its DataLoader yields (maybe none)."""
    received: Batches = {
        (epoch, rank): [] for epoch in range(case.epochs) for rank in range(case.world_size)
    }
    for row in case_rows(case):
        received[row["epoch"], row["rank"]].append(list(row["indices"]))
    return received


def flat(rank_batches: Iterable[list[int]]) -> list[int]:
    """A rank's batches as one sequence of indices."""
    return [index for batch in rank_batches for index in batch]


def sampler_share(case: Case, rank: int, epoch: int) -> list[int]:
    """What the case's sampler yields to ``rank`` in ``epoch`` (before any DataLoader)."""
    sampler = make_sampler(case, IndexDataset(case.dataset_size), rank)
    if not isinstance(sampler, StockDistributedSampler):
        raise ValueError(f"case must use a distributed sampler, got {case.implementation!r}")
    if case.set_epoch:
        sampler.set_epoch(epoch)
    return list(sampler)


def plan(case: Case, epoch: int) -> EpochPlan:
    """The planning layer's view of the case's epoch (epoch 0's order without set_epoch)."""
    sizes = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last)
    return EpochPlan.stock(sizes, case.shuffle, case.seed, epoch if case.set_epoch else 0)


def layout(epoch_plan: EpochPlan) -> dict[str, object]:
    """Where every position of the plan's padded/trimmed order goes, for ``draw_layout``.

    ``ranks``/``slots``/``padding`` (one entry per position) come from the plan's
    ``owner``/``slot``/``is_padding``; ``world_size`` sets the grid's rows.
    """
    positions = torch.arange(epoch_plan.sizes.total_size, dtype=torch.int64)
    return {
        "ranks": epoch_plan.owner(positions).tolist(),
        "slots": epoch_plan.slot(positions).tolist(),
        "world_size": epoch_plan.sizes.world_size,
        "padding": epoch_plan.is_padding(positions).tolist(),
    }
