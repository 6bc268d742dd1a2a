"""What a case's summary means for a training or evaluation loop, and what to change.

:func:`verdicts` reads one row of :func:`studies.core.summary.summarize` (observed numbers)
together with its :class:`~studies.core.cases.Case` (the flags the user set, to name the
cause and the fix) and returns the problems found, in a fixed order:

``empty-dataset``
    The dataset has no samples (no other verdict is given: there is nothing to split).
``fewer-samples-than-ranks``
    Fewer samples than ranks: the sampler either repeats samples to give every rank one,
    or (with its ``drop_last``) gives every rank nothing.
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
``memory-beyond-any-machine``
    The case's sampler holds more than 1 TiB on every rank
    (:mod:`studies.core.sampler_memory`, computed from the sizes).

Every number in a finding is the case's own. Every fix is checked against the case
before it is advised: the changed configuration is recomputed from the sampler's plan
(:func:`studies.core.plan_summary.loader_shares`) for the stock layout, or simulated (epoch 0,
every rank's DataLoader) for our other layouts, and a change that would leave a rank's
DataLoader empty, or not remove the problem, is never offered. Fixes that switch to one
of our samplers (``tail="uneven"``, the batch sampler) are checked by simulation too, so
they are offered only for cases small enough to list (:data:`SIMULATED_MAX_SAMPLES`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from samplers.plan import ShardSizes
from studies.core.cases import Case
from studies.core.plan_summary import loader_shares
from studies.core.sampler_memory import memory_problem
from studies.core.simulate import rank_batches

__all__ = ["SIMULATED_MAX_SAMPLES", "VERDICT_NAMES", "Verdict", "verdicts"]

#: Fixes are simulated (not computed from the plan) only up to this many samples handed
#: out in an epoch (dataset size, or world size times one sample when that is larger).
SIMULATED_MAX_SAMPLES = 100_000


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

    ``summary_row`` is one row of :func:`studies.core.summary.summarize` for ``case`` (a
    mapping or a ``pandas.Series``, or :func:`studies.core.plan_summary.planned_summary`);
    only its observed columns are read. An empty dataset gets ``empty-dataset`` alone.
    """
    if case.dataset_size == 0:
        return [_EMPTY_DATASET]
    found = (check(case, summary_row) for check in _CHECKS)
    return [verdict for verdict in found if verdict is not None]


def _samples(count: int) -> str:
    return f"{count} sample" if count == 1 else f"{count} samples"


def _per_rank(values: list[int]) -> str:
    """Per-rank numbers for a sentence: the list, or its values when long or all alike."""
    distinct = sorted(set(values))
    if len(values) > 1 and len(distinct) == 1:
        return f"{distinct[0]} on every rank"
    if len(values) > 16:
        return f"{len(values)} ranks, values {distinct}"
    return str(values)


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


# --- checking a fix against the case ------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    """Epoch 0 of a configuration, per rank: batches, samples, and any batch of one."""

    batches: tuple[int, ...]
    samples: tuple[int, ...]
    one: bool
    duplicated: int


def _simulable(case: Case) -> bool:
    return max(case.dataset_size, case.world_size) <= SIMULATED_MAX_SAMPLES


@lru_cache(maxsize=256)
def _outcome(case: Case) -> _Outcome:
    """Epoch 0 of ``case``: from the plan for the stock layout, else simulated."""
    if case.stock_layout:
        shares = loader_shares(case)
        world = case.world_size
        duplicated = 0
        if case.implementation != "none":
            sizes = ShardSizes.of(case.dataset_size, world, case.drop_last)
            duplicated = max(sizes.padding - (sizes.total_size - shares.received), 0)
        return _Outcome(
            (shares.batches,) * world,
            (shares.samples,) * world,
            shares.batches > 0 and (case.batch_size == 1 or shares.last_batch == 1),
            duplicated,
        )
    first = replace(case, epochs=1)
    received = [[batch for _, _, batch in rank_batches(first, r)] for r in range(case.world_size)]
    copies = Counter(index for batches in received for batch in batches for index in batch)
    return _Outcome(
        tuple(len(batches) for batches in received),
        tuple(sum(len(batch) for batch in batches) for batches in received),
        any(len(batch) == 1 for batches in received for batch in batches),
        sum(copies.values()) - len(copies),
    )


def _empties(case: Case) -> bool:
    """Whether some rank's DataLoader yields no batch in epoch 0."""
    return min(_outcome(case).batches) == 0


def _has_batch_of_one(case: Case) -> bool:
    return _outcome(case).one and case.batch_size > 1


def _ours(case: Case, **changes: Any) -> Case | None:
    """``case`` run by one of our samplers with ``changes``, when that can be simulated."""
    if case.implementation == "none" or not _simulable(case):
        return None
    settings = {"implementation": "samplers", "drop_last": False, "tail": None, **changes}
    if settings.get("sampler") == "batch":
        settings["loader_drop_last"] = False
    return replace(case, **settings)


def _most_ranks(case: Case, limit: int) -> int | None:
    """The most ranks, at most ``limit``, with which no rank's DataLoader is empty.

    Each rank's share only shrinks as ranks are added, so this is a binary search.
    """
    low, high = 1, min(limit, case.world_size)
    if high < 1 or _empties(replace(case, world_size=low)):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if _empties(replace(case, world_size=middle)):
            high = middle - 1
        else:
            low = middle
    return low


def _batch_size_without_one(case: Case) -> int | None:
    """The batch size nearest the case's that leaves no batch of one and no empty loader."""
    if not case.stock_layout and not _simulable(case):
        return None
    share = max(_outcome(replace(case, loader_drop_last=False)).samples)
    # The stock layout is arithmetic; another one is simulated, so only nearby sizes.
    farthest = max(case.batch_size, share) if case.stock_layout else 16
    for distance in range(1, farthest + 1):
        for size in (case.batch_size + distance, case.batch_size - distance):
            if 2 <= size <= share:
                changed = replace(case, batch_size=size)
                if not _has_batch_of_one(changed) and not _empties(changed):
                    return size
    return None


def _sentence(fixes: list[str]) -> str:
    text = "; or ".join(fixes)
    return f"{text[0].upper()}{text[1:]}."


# --- the checks ---------------------------------------------------------------------------

_EMPTY_DATASET = Verdict(
    "empty-dataset",
    "The dataset has no samples, so every rank's DataLoader yields nothing in every epoch.",
    "Check how the dataset is built: its __len__ returns 0 before it reaches the sampler.",
)


def _fewer_samples_than_ranks(case: Case, row: Summary) -> Verdict | None:
    size, world = case.dataset_size, case.world_size
    if case.implementation == "none" or not 0 < size < world:
        return None
    sizes = ShardSizes.of(size, world, case.drop_last)
    if not case.stock_layout:
        empty = sum(1 for count in row["batches_per_rank"] if count == 0)
        happens = f"{_ranks(empty)} of {world} get nothing"
        if row["duplicated_samples"]:
            happens += f" and a sample is handed out up to {_times(row['most_copies'])}"
    elif case.drop_last:
        happens = (
            "the sampler's drop_last trims the order to a multiple of the ranks, 0 samples, "
            "so every rank gets nothing"
        )
    else:
        happens = (
            f"the sampler pads the order with {sizes.padding} repeated "
            f"{'index' if sizes.padding == 1 else 'indices'} so that each rank gets one, and "
            f"a sample is handed out up to {_times(row['most_copies'])}"
        )
    ranks = _most_ranks(case, size)
    padded = replace(case, drop_last=False, tail=None)
    if ranks is not None:
        fix = f"Use at most {_ranks(ranks)}, or a"
    elif case.stock_layout:
        fix = f"Set the DataLoader's drop_last=False and use at most {_ranks(size)}, or a"
    elif case.drop_last and _simulable(padded) and not _empties(padded):
        fix = 'Use tail="pad", or a'
    else:
        fix = "Use a"
    return Verdict(
        "fewer-samples-than-ranks",
        f"The dataset has {_samples(size)} for {world} ranks, fewer than one per rank: {happens}.",
        f"{fix} dataset of at least {world} samples.",
    )


def _no_sampler(case: Case, row: Summary) -> Verdict | None:
    if case.implementation != "none" or row["duplicated_samples"] == 0:
        return None
    counts = row["samples_per_rank"]
    each = f"{counts[0]} samples each" if len(set(counts)) == 1 else f"{_per_rank(counts)} samples"
    return Verdict(
        "no-sampler",
        f"Without a DistributedSampler the {case.world_size} ranks received {each} "
        f"from the {case.dataset_size}-sample dataset in epoch 0, {row['duplicated_samples']} of "
        f"them copies of what another rank also received (each sample up to "
        f"{_times(row['most_copies'])}): every rank repeats the same work.",
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
        f"same count, and each sample counts up to {_times(row['most_copies'])} in losses "
        "and metrics.",
        _uneven_fix(case),
    )


def _uneven_fix(case: Case) -> str:
    """The padded-duplicates fix: ours with tail "uneven" when simulated to repeat none."""
    advice = "Harmless for training; for evaluation "
    kind = case.sampler_kind or "index"
    uneven = _ours(case, tail="uneven", sampler=None if kind == "index" else kind)
    if uneven is not None and _outcome(uneven).duplicated == 0 and not _empties(uneven):
        flags = "--implementation samplers --tail uneven" + (
            " --sampler batch" if kind == "batch" else ""
        )
        return (
            f'{advice}use ours with tail="uneven" ({flags}), which hands each sample out '
            "once, and gather_unsharded; or all_gather per-sample results, interleave them "
            "by rank and truncate to the dataset size."
        )
    return (
        f"{advice}use a sampler without padding, or all_gather per-sample results, "
        "interleave them by rank and truncate to the dataset size."
    )


def _dropped_samples(case: Case, row: Summary) -> Verdict | None:
    dropped = row["dropped_samples"]
    if dropped == 0:
        return None
    causes = []
    fixes = []
    changed = case
    if case.drop_last and case.implementation != "none":
        causes.append("the sampler's drop_last trims the epoch order to a multiple of the ranks")
        fixes.append("the sampler's drop_last=False (it pads instead)")
        changed = replace(changed, drop_last=False)
    if case.loader_drop_last:
        causes.append("the DataLoader's drop_last discards each rank's short last batch")
        fixes.append("the DataLoader's drop_last=False")
        changed = replace(changed, loader_drop_last=False)
    because = f" because {' and '.join(causes)}" if causes else ""
    again = "; epoch 1 misses the same ones again" if row["order_repeats"] else ""
    checkable = case.stock_layout or _simulable(case)
    fix = f"Set {' and '.join(fixes)}; " if fixes and checkable and not _empties(changed) else ""
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
    fixes = []
    by_loader = case.sampler_kind != "batch"  # the batch sampler makes its own batches
    if (
        by_loader
        and not case.loader_drop_last
        and not _empties(replace(case, loader_drop_last=True))
    ):
        fixes.append("set the DataLoader's drop_last=True (it skips that batch)")
    size = _batch_size_without_one(case)
    if size is not None:
        fixes.append(f"use batch size {size}")
    full = _ours(case, sampler="batch", tail="pad" if case.layout_tail == "uneven" else None)
    if full is not None and not _has_batch_of_one(full) and not _empties(full):
        fixes.append(
            'use ours DistributedBatchSampler with tail="pad", whose batches are all full '
            "(--implementation samplers --sampler batch --tail pad)"
        )
    if not fixes:
        ranks = [
            world
            for world in range(case.world_size - 1, 0, -1)
            if not _has_batch_of_one(changed := replace(case, world_size=world))
            and not _empties(changed)
        ]
        if ranks:
            fixes.append(f"use at most {_ranks(ranks[0])}, so each rank gets two or more samples")
        else:
            fixes.append(
                f"no setting avoids it with {_samples(case.dataset_size)}: use a larger "
                "dataset, or keep BatchNorm layers in eval mode"
            )
    return Verdict(
        "batch-of-one",
        f"With batch size {case.batch_size} some batch holds a single sample (last batch sizes "
        f"in epoch 0: {_per_rank(row['last_batch_sizes'])}): BatchNorm takes its statistics "
        "from one sample (BatchNorm1d raises on it) and that step's gradient is one sample's.",
        _sentence(fixes),
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
    if case.loader_drop_last and not _empties(replace(case, loader_drop_last=False)):
        fixes.append("set the DataLoader's drop_last=False")
    if case.stock_layout:
        share = loader_shares(case).share
        if case.loader_drop_last and 0 < share < case.batch_size:
            fixes.append(f"use a batch size of at most {share}, each rank's share")
    sampler = case.implementation != "none"
    if sampler and case.drop_last and not _empties(replace(case, drop_last=False)):
        fixes.append("set the sampler's drop_last=False")
    ranks = _most_ranks(case, case.world_size - 1) if sampler else None
    if ranks is not None:
        fixes.append(f"use at most {_ranks(ranks)}")
    if not fixes:
        fixes.append("give every rank at least one batch (check the dataset and batch size)")
    return Verdict("empty-loader", finding, _sentence(fixes))


def _order_repeated(case: Case, row: Summary) -> Verdict | None:
    if not (
        row["order_repeats"]
        and case.shuffle
        and not case.set_epoch
        and case.implementation != "none"
        and sum(row["samples_per_rank"]) > 0
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
    fixes = []
    if case.layout_tail == "uneven" and case.sampler_kind == "index":
        batched = _ours(case, tail="uneven", sampler="batch")
        if batched is not None and len(set(_outcome(batched).batches)) == 1:
            fixes.append(
                'use ours DistributedBatchSampler with tail="uneven", which gives every rank '
                "the same number of batches here and still every sample once "
                "(--sampler batch --tail uneven)"
            )
    fixes.append(
        "give every rank the same number of batches (a sampler that pads each share to the "
        'same length: the stock sampler, or ours with tail="pad"), or wrap the loop in '
        "DDP's join() context manager"
    )
    return Verdict(
        "uneven-batch-counts",
        "Ranks get different numbers of batches (epoch 0: "
        f"{_per_rank(row['batches_per_rank'])}): the ranks with more batches wait in DDP's "
        "gradient all-reduce for ranks that have finished, so training hangs or its "
        "collectives desynchronise.",
        _sentence(fixes),
    )


def _memory(case: Case, row: Summary) -> Verdict | None:
    found = memory_problem(case)
    return None if found is None else Verdict(*found)


_CHECKS: tuple[Callable[[Case, Summary], Verdict | None], ...] = (
    _fewer_samples_than_ranks,
    _no_sampler,
    _padded_duplicates,
    _dropped_samples,
    _batch_of_one,
    _empty_loader,
    _order_repeated,
    _uneven_batch_counts,
    _memory,
)

#: Every verdict name, in the order :func:`verdicts` reports them.
VERDICT_NAMES = (
    "empty-dataset",
    "fewer-samples-than-ranks",
    "no-sampler",
    "padded-duplicates",
    "dropped-samples",
    "batch-of-one",
    "empty-loader",
    "order-repeated",
    "uneven-batch-counts",
    "memory-beyond-any-machine",
)
