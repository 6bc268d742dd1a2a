"""Exact distributed evaluation in real processes: ``tail="uneven"`` + ``gather_unsharded``.

Each rank evaluates its share as an evaluation loop does (a sampler read from the process
group, a DataLoader with batch size 4, the synthetic model of :mod:`studies.core.evaluation`
on each batch) and the ranks combine their per-sample results through real gloo
collectives, two ways:

* **ours**: ``samplers.DistributedSampler(tail="uneven")`` (every sample exactly once),
  shuffle off and on; per-sample ``(index, correct, label, score)`` gathered with
  :func:`samplers.gather_unsharded` on every rank (``dst=None``) and on rank 0
  (``dst=0``); accuracy and ROC AUC computed once, on the unsharded list;
* **the stock patterns**: the stock ``DistributedSampler`` with its padding, shuffle off:
  the mean of per-rank accuracies (``all_reduce``), summed correct and seen counts
  (``all_reduce``), and the ROC AUC over the gathered scores (``all_gather_object``,
  the parts concatenated, padded repeats included).

Accuracies and AUCs are exact fractions except the mean of rank means (a float from
``all_reduce``), so "equal to the single-process value" is an exact comparison.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler, gather_unsharded
from samplers.plan import ShardSizes
from studies.core import evaluation
from studies.core.simulate import IndexDataset
from studies.engines.local_ranks import DEFAULT_TIMEOUT, launch

__all__ = [
    "BATCH_SIZE",
    "COLUMNS",
    "DATASET_SIZES",
    "SEED",
    "WORLD_SIZES",
    "Metrics",
    "evaluate_on_rank",
    "measure",
    "metrics",
    "single_process",
]

DATASET_SIZES: tuple[int, ...] = (7, 10, 17, 33, 101, 1000)
WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 8)
BATCH_SIZE = 4
#: The shuffled runs' seed.
SEED = 5

#: One row per (dataset size, world size).
COLUMNS = (
    "dataset_size",
    "world_size",
    "padding",
    "exact_accuracy",
    "exact_auc",
    "ours_in_order_accuracy",
    "ours_in_order_auc",
    "ours_shuffled_accuracy",
    "ours_shuffled_auc",
    "ours_at_rank_0_accuracy",
    "ours_at_rank_0_auc",
    "ours_dataset_order",
    "ours_same_on_every_rank",
    "mean_of_rank_means",
    "pooled_counts",
    "padded_auc",
)

#: A sample's result as the ranks gather it: (index, correct, label, score).
Result = tuple[int, bool, bool, int]


@dataclass(frozen=True)
class Metrics:
    """Accuracy and ROC AUC of a list of per-sample results, exactly."""

    accuracy: Fraction
    auc: Fraction


def results_for(indices: Sequence[int]) -> list[Result]:
    """The synthetic model's per-sample results for ``indices``, in that order."""
    tensor = torch.as_tensor(list(indices), dtype=torch.int64)
    correct = evaluation.is_correct(tensor).tolist()
    labels = evaluation.label(tensor).tolist()
    scores = evaluation.score(tensor).tolist()
    return list(zip(tensor.tolist(), correct, labels, scores, strict=True))


def metrics(results: Sequence[Result]) -> Metrics:
    """Accuracy (correct / seen) and ROC AUC of ``results``, as fractions."""
    correct = sum(1 for _, right, _, _ in results if right)
    auc = evaluation.roc_auc([lab for _, _, lab, _ in results], [s for _, _, _, s in results])
    return Metrics(Fraction(correct, len(results)), auc)


def single_process(dataset_size: int) -> Metrics:
    """The values one process computes over every sample once."""
    return metrics(results_for(range(dataset_size)))


def measure(
    dataset_sizes: Iterable[int] = DATASET_SIZES,
    world_sizes: Iterable[int] = WORLD_SIZES,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> pd.DataFrame:
    """Every way of combining, through real collectives, for every size pair.

    One launch per world size (``timeout`` bounds each); values are rank 0's, next to the
    single-process values (``exact_*``). ``ours_dataset_order``: every rank's unsharded
    list held sample ``i``'s result at ``[i]``, in both runs; ``ours_same_on_every_rank``:
    every rank's unsharded lists were equal.
    """
    sizes = list(dataset_sizes)
    rows = []
    for world_size in world_sizes:
        per_rank = launch(evaluate_on_rank, sizes, world_size, timeout=timeout)
        for position, size in enumerate(sizes):
            rows.append(_row(size, world_size, [values[position] for values in per_rank]))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def evaluate_on_rank(dataset_sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Rank work: for each dataset size, this rank's values of every way of combining."""
    return [_evaluate(size) for size in dataset_sizes]


def _evaluate(dataset_size: int) -> dict[str, Any]:
    dataset = IndexDataset(dataset_size)
    values: dict[str, Any] = {}
    for run, shuffle in (("in_order", False), ("shuffled", True)):
        sampler = DistributedSampler(dataset, shuffle=shuffle, seed=SEED, tail="uneven")
        local = results_for(_loaded(dataset, sampler))
        values[run] = gather_unsharded(local, sampler)
        if not shuffle:
            values["at_rank_0"] = gather_unsharded(local, sampler, dst=0)

    stock = StockDistributedSampler(dataset, shuffle=False)
    local = results_for(_loaded(dataset, stock))
    correct = sum(1 for _, right, _, _ in local if right)
    mean = torch.tensor([correct / len(local)], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.SUM)
    values["mean_of_rank_means"] = (mean / dist.get_world_size()).item()
    counts = torch.tensor([correct, len(local)], dtype=torch.int64)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    values["pooled_counts"] = Fraction(int(counts[0]), int(counts[1]))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    values["padded"] = [result for part in everyone for result in part]
    return values


def _loaded(dataset: IndexDataset, sampler: Any) -> list[int]:
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    return [index for batch in loader for index in batch.tolist()]


def _row(dataset_size: int, world_size: int, by_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    exact = single_process(dataset_size)
    first = by_rank[0]
    ours = {run: metrics(first[run]) for run in ("in_order", "shuffled", "at_rank_0")}
    expected = results_for(range(dataset_size))
    in_order = all(
        values[run] == expected for values in by_rank for run in ("in_order", "shuffled")
    )
    same = all(values[run] == first[run] for values in by_rank for run in ("in_order", "shuffled"))
    if any(values["at_rank_0"] is not None for values in by_rank[1:]):
        raise RuntimeError("gather_unsharded(dst=0) delivered results to a rank other than 0")
    padded = first["padded"]
    return {
        "dataset_size": dataset_size,
        "world_size": world_size,
        "padding": ShardSizes.of(dataset_size, world_size, drop_last=False).padding,
        "exact_accuracy": exact.accuracy,
        "exact_auc": exact.auc,
        "ours_in_order_accuracy": ours["in_order"].accuracy,
        "ours_in_order_auc": ours["in_order"].auc,
        "ours_shuffled_accuracy": ours["shuffled"].accuracy,
        "ours_shuffled_auc": ours["shuffled"].auc,
        "ours_at_rank_0_accuracy": ours["at_rank_0"].accuracy,
        "ours_at_rank_0_auc": ours["at_rank_0"].auc,
        "ours_dataset_order": in_order,
        "ours_same_on_every_rank": same,
        "mean_of_rank_means": first["mean_of_rank_means"],
        "pooled_counts": first["pooled_counts"],
        "padded_auc": metrics(padded).auc,
    }
