"""Distributed evaluation through real collectives, with the synthetic model.

Each rank evaluates its share as an evaluation loop does: a ``DistributedSampler``
(stock, no shuffling, the default padding) read from the process group, a DataLoader,
and :func:`studies.core.evaluation.is_correct` on each batch. The ranks then combine their
results the ways people write it, through real gloo collectives:

==================  =========================================  =========================
pattern             collective                                  result on
==================  =========================================  =========================
mean_of_rank_means  ``all_reduce(SUM)`` of each rank's mean, / W  every rank
pooled_counts       ``all_reduce(SUM)`` of [correct, seen]        every rank
pooled_counts       ``reduce(SUM, dst=0)`` of [correct, seen]     rank 0
gathered            ``all_gather_object`` of per-sample results,  every rank
                    interleaved in rank order, truncated to N
gathered            ``gather_object(dst=0)``, the same            rank 0
==================  =========================================  =========================

:func:`measure` returns each pattern's accuracy next to :func:`~studies.core.evaluation.
exact_accuracy` and next to the pure formula of :mod:`studies.core.evaluation` applied to the
simulated shares, so the real numbers are checked against the arithmetic that explains
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

from samplers.plan import ShardSizes
from studies.core import evaluation
from studies.core.cases import Case
from studies.core.simulate import rank_batches
from studies.engines.local_ranks import DEFAULT_TIMEOUT, launch

__all__ = [
    "COLLECTIVES",
    "COLUMNS",
    "DATASET_SIZES",
    "WORLD_SIZES",
    "evaluate_on_rank",
    "evaluation_case",
    "measure",
    "simulated_shares",
]

#: (pattern, collective) pairs, in table order; patterns as in studies.core.evaluation.
COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("mean_of_rank_means", "all_reduce(SUM) / world_size"),
    ("pooled_counts", "all_reduce(SUM)"),
    ("pooled_counts", "reduce(SUM, dst=0)"),
    ("gathered", "all_gather_object + interleave"),
    ("gathered", "gather_object(dst=0) + interleave"),
)
#: One row per (dataset size, world size, pattern, collective).
COLUMNS = (
    "dataset_size",
    "world_size",
    "padding",
    "pattern",
    "collective",
    "accuracy",
    "exact",
    "error",
    "formula",
    "same_on_every_rank",
)
DATASET_SIZES = (7, 10, 17, 33, 101, 1000)
WORLD_SIZES = (2, 3, 4, 8)
_BATCH_SIZE = 4


def evaluation_case(dataset_size: int, world_size: int) -> Case:
    """The evaluation loop's configuration: stock sampler, no shuffling, padding, 1 epoch."""
    return Case(
        dataset_size,
        world_size,
        _BATCH_SIZE,
        shuffle=False,
        drop_last=False,
        loader_drop_last=False,
        set_epoch=False,
        epochs=1,
        implementation="torch",
    )


def measure(
    dataset_sizes: Iterable[int] = DATASET_SIZES,
    world_sizes: Iterable[int] = WORLD_SIZES,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> pd.DataFrame:
    """Every pattern's accuracy through real collectives, for every size pair.

    One launch per world size (``timeout`` bounds each). ``accuracy`` is rank 0's value,
    ``error = accuracy - exact``; ``formula`` is the :mod:`studies.core.evaluation` function
    of the pattern on the simulated shares; ``same_on_every_rank`` says whether every
    rank holds the same value (``None`` for collectives that only deliver to rank 0).
    """
    dataset_sizes = list(dataset_sizes)
    rows: list[dict[str, Any]] = []
    for world_size in world_sizes:
        cases = [evaluation_case(size, world_size) for size in dataset_sizes]
        per_rank = launch(evaluate_on_rank, cases, world_size, timeout=timeout)
        for position, case in enumerate(cases):
            rows.extend(_rows(case, [values[position] for values in per_rank]))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def simulated_shares(case: Case) -> list[torch.Tensor]:
    """Each rank's per-sample correctness, computed in-process from the simulation."""
    return [_correctness(rank_batches(case, rank)) for rank in range(case.world_size)]


def evaluate_on_rank(cases: Sequence[Case]) -> list[list[float | None]]:
    """Rank work: for each case, this rank's value of each :data:`COLLECTIVES` entry.

    ``None`` where the collective delivers nothing to this rank.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    values = []
    for case in cases:
        if case.world_size != world_size:
            raise ValueError(
                f"case world_size={case.world_size} launched in a group of {world_size}"
            )
        results = _correctness(rank_batches(case, rank, from_process_group=True))
        values.append(_combine(results, case.dataset_size, rank, world_size))
    return values


def _combine(
    results: torch.Tensor, dataset_size: int, rank: int, world_size: int
) -> list[float | None]:
    """This rank's result of each collective pattern, in :data:`COLLECTIVES` order."""
    mean = results.double().mean().reshape(1)
    dist.all_reduce(mean, op=dist.ReduceOp.SUM)
    mean_of_means = (mean / world_size).item()

    local = torch.tensor([int(results.sum()), results.numel()], dtype=torch.int64)
    summed = local.clone()  # both collectives work in place
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    all_pooled = int(summed[0]) / int(summed[1])
    at_zero_counts = local.clone()
    dist.reduce(at_zero_counts, dst=0, op=dist.ReduceOp.SUM)
    reduced = int(at_zero_counts[0]) / int(at_zero_counts[1]) if rank == 0 else None

    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, results)
    all_gathered = evaluation.gathered(everyone, dataset_size)
    at_zero: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object(results, at_zero, dst=0)
    gathered = evaluation.gathered(at_zero, dataset_size) if at_zero is not None else None
    return [mean_of_means, all_pooled, reduced, all_gathered, gathered]


def _correctness(batches: Iterable[tuple[int, int, list[int]]]) -> torch.Tensor:
    """The synthetic model's per-sample correctness over a rank's batches, in order."""
    return evaluation.rank_results([[index for _, _, batch in batches for index in batch]])[0]


def _rows(case: Case, by_rank: Sequence[Sequence[float | None]]) -> list[dict[str, Any]]:
    formulas = evaluation.estimates(simulated_shares(case), case.dataset_size)
    exact = evaluation.exact_accuracy(case.dataset_size)
    padding = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last).padding
    rows = []
    for column, (pattern, collective) in enumerate(COLLECTIVES):
        held = [values[column] for values in by_rank]
        accuracy = held[0]
        if accuracy is None:
            raise RuntimeError(f"{collective} delivered nothing to rank 0")
        delivered = [value for value in held if value is not None]
        rows.append(
            {
                "dataset_size": case.dataset_size,
                "world_size": case.world_size,
                "padding": padding,
                "pattern": pattern,
                "collective": collective,
                "accuracy": accuracy,
                "exact": exact,
                "error": accuracy - exact,
                "formula": formulas[pattern],
                "same_on_every_rank": (
                    len(set(delivered)) == 1 if len(delivered) == len(held) else None
                ),
            }
        )
    return rows
