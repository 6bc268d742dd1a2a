"""A case's summary computed from the sampler's plan, for any dataset size at once.

:func:`planned_summary` returns the same record :func:`studies.core.summary.summarize` observes
from the tidy rows (:data:`studies.core.summary.COLUMNS`), but reads the sizes from
:class:`samplers.plan.ShardSizes` and the orders from :class:`samplers.plan.EpochPlan`
instead of running DataLoaders, so its cost does not grow with the dataset: no Python
work per sample. The only tensor work is ``order_repeats`` of a shuffled case that calls
``set_epoch`` over two or more epochs, which needs both epochs' permutations (the epoch
orders of the stock sampler, ``torch.randperm``), compared a chunk at a time.

:func:`loader_shares` is the part that needs no order at all (every rank's samples,
batches and last batch size); :mod:`studies.core.verdicts` uses it to check a fix before
advising it.

Guarantee (tested against the simulation): for every case of the ``torch`` or
``samplers`` implementation, and for ``none`` without shuffling, the record equals the
simulated summary. ``none`` with shuffling is refused: its order comes from the
DataLoader's random generator, not from a sampler's plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from samplers.plan import EpochPlan, ShardSizes, ceil_div
from studies.core.cases import Case

__all__ = ["LoaderShares", "loader_shares", "planned_summary"]

#: Slots of one rank compared at a time when two epochs' orders are compared.
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LoaderShares:
    """What every rank's DataLoader yields in each epoch (all ranks alike).

    ``share`` is what the sampler hands each rank (the whole dataset without a sampler);
    ``samples`` what the DataLoader yields of it (its ``drop_last`` discards the short
    last batch), in ``batches`` batches, the last of ``last_batch`` samples (0 without
    batches). ``received`` is the length of the prefix of the padded/trimmed epoch order
    that the ranks receive together (``samples * world_size`` positions): rank ``r``
    keeps its first ``samples`` slots, i.e. positions ``r, r + W, ...`` below it.
    """

    share: int
    samples: int
    batches: int
    last_batch: int
    received: int


def loader_shares(case: Case) -> LoaderShares:
    """Each rank's share, samples, batches and last batch size for ``case``, from the plan.

    Only for the stock layout (:attr:`studies.core.cases.Case.stock_layout`), where every rank
    gets as many samples: ``ValueError`` for ours with tail ``"uneven"`` or the batch
    sampler, whose ranks differ.
    """
    if not case.stock_layout:
        raise ValueError(
            f"the plan's shares are the stock layout's; tail={case.layout_tail!r} with "
            f"sampler={case.sampler_kind!r} gives ranks different shares: simulate the case"
        )
    if case.implementation == "none":
        share = case.dataset_size
    else:
        share = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last).num_samples
    size = case.batch_size
    if case.loader_drop_last:
        batches = share // size
        samples = batches * size
        last = size if batches else 0
    else:
        batches = ceil_div(share, size)
        samples = share
        last = share - (batches - 1) * size if batches else 0
    return LoaderShares(share, samples, batches, last, samples * case.world_size)


def planned_summary(case: Case) -> dict[str, Any]:
    """The summary record of ``case`` (:data:`studies.core.summary.COLUMNS`), from the plan.

    Raises ``ValueError`` for ``implementation="none"`` with ``shuffle=True``: the order
    comes from the DataLoader's own generator, which no plan describes.
    """
    if case.implementation == "none" and case.shuffle:
        raise ValueError(
            "a case without a sampler (implementation none) that shuffles takes its order "
            "from the DataLoader's random generator, which no plan describes; "
            "simulate it instead, or set shuffle=False"
        )
    shares = loader_shares(case)
    size, world = case.dataset_size, case.world_size
    if case.implementation == "none":
        # Every rank iterates the same unshuffled dataset and keeps its first samples.
        duplicated = shares.received - shares.samples
        dropped = size - shares.samples
        most_copies = world if shares.samples else 0
    else:
        # The sampler pads the order (or trims it) to total_size positions; the
        # DataLoader's drop_last then removes each rank's short last batch, i.e. the
        # last positions of the padded/trimmed order: first the padding, then samples.
        sizes = ShardSizes.of(size, world, case.drop_last)
        removed = sizes.total_size - shares.received
        duplicated = max(sizes.padding - removed, 0)
        dropped = sizes.dropped + max(removed - sizes.padding, 0)
        # Position p of the padded order holds order[p % N] (samplers.plan).
        most_copies = ceil_div(shares.received, size) if size else 0
    batch_of_one = shares.batches > 0 and (case.batch_size == 1 or shares.last_batch == 1)
    return {
        **case.key(),
        "epochs": case.epochs,
        "samples_per_rank": [shares.samples] * world,
        "batches_per_rank": [shares.batches] * world,
        "last_batch_sizes": [shares.last_batch] * world,
        "duplicated_samples": duplicated,
        "most_copies": most_copies,
        "dropped_samples": dropped,
        "coverage": round((size - dropped) / size, 6) if size else 1.0,
        "empty_loader": shares.batches == 0,
        "batch_of_one": batch_of_one,
        "order_repeats": case.epochs > 1 and _order_repeats(case, shares),
        "uneven_batches": False,
    }


def _order_repeats(case: Case, shares: LoaderShares) -> bool:
    """Whether every rank's epoch-1 sequence equals its epoch-0 sequence."""
    if shares.samples == 0 or not case.shuffle:
        return True  # nothing received, or the same unshuffled order every epoch
    if not case.set_epoch:
        return True  # the sampler seeds every epoch with seed + 0
    sizes = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last)
    first, second = (
        EpochPlan.stock(sizes, shuffle=True, seed=case.seed, epoch=epoch) for epoch in (0, 1)
    )
    for rank in range(case.world_size):
        for start in range(0, shares.samples, _CHUNK):
            stop = min(start + _CHUNK, shares.samples)
            if not torch.equal(
                first.rank_indices(rank, start, stop), second.rank_indices(rank, start, stop)
            ):
                return False
    return True
