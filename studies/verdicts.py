"""What a case's summary means for a training or evaluation loop, and what to change.

:func:`verdicts` reads one row of :func:`studies.summary.summarize` (observed numbers)
together with its :class:`~studies.cases.Case` (the flags the user set, to name the
cause and the fix) and returns the problems found, in a fixed order:

``no-sampler``
    Without a sampler, ranks receive the same samples: the work is repeated, not split.
``padded-duplicates``
    The sampler repeated samples to give every rank the same count.
``dropped-samples``
    Some samples reached no rank in epoch 0.
``batch-of-one``
    Some batch holds a single sample (only when the batch size is larger than 1).
``empty-loader``
    Some rank's DataLoader yields no batch.
``order-repeated``
    Shuffling without ``set_epoch``: every epoch repeats epoch 0's order.
``uneven-batch-counts``
    Ranks run different numbers of steps, so collectives stop matching up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from studies.cases import Case

__all__ = ["VERDICT_NAMES", "Verdict", "verdicts"]


@dataclass(frozen=True)
class Verdict:
    """One problem: a short ``name``, a one-sentence ``finding`` with the case's numbers,
    and a one-line ``fix``."""

    name: str
    finding: str
    fix: str


Summary = Mapping[str, Any]


def verdicts(case: Case, summary_row: Summary) -> list[Verdict]:
    """The problems the summary row shows, in :data:`VERDICT_NAMES` order ([] if none).

    ``summary_row`` is one row of :func:`studies.summary.summarize` for ``case`` (a
    mapping or a ``pandas.Series``); only its observed columns are read.
    """
    found = (check(case, summary_row) for check in _CHECKS)
    return [verdict for verdict in found if verdict is not None]


def _samples(count: int) -> str:
    return f"{count} sample" if count == 1 else f"{count} samples"


def _no_sampler(case: Case, row: Summary) -> Verdict | None:
    if case.implementation != "none" or row["duplicated_samples"] == 0:
        return None
    received = row["samples_per_rank"]
    return Verdict(
        "no-sampler",
        f"Without a DistributedSampler the {case.world_size} ranks received {received} samples "
        f"from the {case.dataset_size}-sample dataset in epoch 0, {row['duplicated_samples']} of "
        "them copies of what another rank also received: every rank repeats the same work.",
        "Pass sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank) to each "
        "rank's DataLoader and call sampler.set_epoch(epoch) every epoch.",
    )


def _padded_duplicates(case: Case, row: Summary) -> Verdict | None:
    duplicated = row["duplicated_samples"]
    if case.implementation == "none" or duplicated == 0:
        return None
    received = sum(row["samples_per_rank"])
    return Verdict(
        "padded-duplicates",
        f"Epoch 0 handed out {_samples(received)} for {received - duplicated} distinct indices: "
        f"the sampler padded the order with {duplicated} repeated "
        f"{'index' if duplicated == 1 else 'indices'} so all {case.world_size} ranks get the "
        "same count, and those samples count twice in losses and metrics.",
        "Harmless for training; for evaluation use a sampler without padding, or all_gather "
        "per-sample results, interleave them by rank and truncate to the dataset size.",
    )


def _dropped_samples(case: Case, row: Summary) -> Verdict | None:
    dropped = row["dropped_samples"]
    if dropped == 0:
        return None
    causes = []
    fixes = []
    if case.drop_last and case.implementation != "none":
        causes.append("the sampler's drop_last trims the epoch order to a multiple of the ranks")
        fixes.append("the sampler's drop_last=False (it pads instead)")
    if case.loader_drop_last:
        causes.append("the DataLoader's drop_last discards each rank's short last batch")
        fixes.append("DataLoader drop_last=False or a batch size dividing each rank's share")
    because = f" because {' and '.join(causes)}" if causes else ""
    again = "; epoch 1 misses the same ones again" if row["order_repeats"] else ""
    fix = f"Set {' and '.join(fixes)}; " if fixes else ""
    return Verdict(
        "dropped-samples",
        f"{dropped} of the {_samples(case.dataset_size)} reached no rank in epoch 0 "
        f"(coverage {row['coverage']:g}){because}{again}.",
        f"{fix}evaluation must see every sample, while training may drop a few if it shuffles "
        "and calls sampler.set_epoch(epoch) so a different few drop each epoch.",
    )


def _batch_of_one(case: Case, row: Summary) -> Verdict | None:
    if case.batch_size == 1 or not row["batch_of_one"]:
        return None
    return Verdict(
        "batch-of-one",
        f"With batch size {case.batch_size} some batch holds a single sample (last batch sizes "
        f"per rank in epoch 0: {row['last_batch_sizes']}): BatchNorm takes its statistics "
        "from one sample (BatchNorm1d raises on it) and that step's gradient is one sample's.",
        "Set the DataLoader's drop_last=True, or choose a batch size that does not leave a "
        "remainder of 1 in each rank's share.",
    )


def _empty_loader(case: Case, row: Summary) -> Verdict | None:
    if not row["empty_loader"]:
        return None
    batches = row["batches_per_rank"]
    empty = [rank for rank, count in enumerate(batches) if count == 0]
    if len(empty) == len(batches):
        finding = (
            f"Every rank ({len(batches)} of {len(batches)}) gets zero batches in epoch 0 "
            f"({_samples(case.dataset_size)}, batch size {case.batch_size}): the loop never "
            "takes a step."
        )
    elif empty:
        finding = (
            f"Ranks {empty} get zero batches in epoch 0 while others get up to {max(batches)}: "
            "the empty ranks never join the gradient all-reduce, so the others hang in DDP."
        )
    else:
        finding = "Some rank gets zero batches in a later epoch, while it had some in epoch 0."
    fixes = []
    if case.dataset_size == 0:
        fixes.append("the dataset is empty: check how it is built")
    if case.loader_drop_last:
        fixes.append(
            "set the DataLoader's drop_last=False or a batch size within each rank's share"
        )
    if case.drop_last and case.implementation != "none":
        fixes.append("set the sampler's drop_last=False")
    fixes.append("or use fewer ranks")
    fix = "; ".join(fixes)
    return Verdict("empty-loader", finding, f"{fix[0].upper()}{fix[1:]}.")


def _order_repeated(case: Case, row: Summary) -> Verdict | None:
    if not (
        row["order_repeats"]
        and case.shuffle
        and not case.set_epoch
        and case.implementation != "none"
    ):
        return None
    return Verdict(
        "order-repeated",
        "With shuffle=True but no set_epoch call, every rank received the same sequence in "
        "epoch 1 as in epoch 0, because the sampler seeds each epoch with seed + epoch and "
        f"epoch stays 0 (seed {case.seed}).",
        "Call sampler.set_epoch(epoch) at the start of every epoch, before iterating the "
        "DataLoader.",
    )


def _uneven_batch_counts(case: Case, row: Summary) -> Verdict | None:
    if not row["uneven_batches"]:
        return None
    return Verdict(
        "uneven-batch-counts",
        f"Ranks get different numbers of batches (epoch 0: {row['batches_per_rank']}): the "
        "ranks with more batches wait in DDP's gradient all-reduce for ranks that have "
        "finished, so training hangs or its collectives desynchronise.",
        "Give every rank the same number of batches (a DistributedSampler pads each share to "
        "the same length), or wrap the loop in DDP's join() context manager.",
    )


_CHECKS: tuple[Callable[[Case, Summary], Verdict | None], ...] = (
    _no_sampler,
    _padded_duplicates,
    _dropped_samples,
    _batch_of_one,
    _empty_loader,
    _order_repeated,
    _uneven_batch_counts,
)

#: Every verdict name, in the order :func:`verdicts` reports them.
VERDICT_NAMES = (
    "no-sampler",
    "padded-duplicates",
    "dropped-samples",
    "batch-of-one",
    "empty-loader",
    "order-repeated",
    "uneven-batch-counts",
)
