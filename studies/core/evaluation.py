"""Distributed evaluation with a synthetic model whose exact accuracy is known.

The "model" is right on sample ``i`` exactly when :func:`is_correct` says so, a fixed
function of the index, so every aggregation pattern can be compared with the exact
accuracy over the dataset. The three patterns are the ones people write:

* ``mean_of_rank_means``: each rank computes its accuracy; ranks average them
  (``all_reduce(SUM) / world_size``).
* ``pooled_counts``: ranks sum correct and seen counts (``all_reduce`` or ``reduce``),
  then divide.
* ``gathered``: ranks gather per-sample results, interleave them back in rank order and
  truncate to the dataset size, which removes the padding.

The functions here take each rank's per-sample results as tensors, so the same
arithmetic serves the in-process study and the real-process run, where the tensors
arrive through collectives.

For a metric that does not decompose per sample, the model also gives every sample a
score (:func:`score`, an integer in ``[0, SCORE_LEVELS)``, with ties) and predicts the
positive class from ``score >= SCORE_LEVELS // 2``; the true class (:func:`label`) is the
prediction when :func:`is_correct` says the model is right, so the accuracy of that
prediction is the accuracy above. :func:`roc_auc` is exact (a fraction, integer
arithmetic only); :func:`zip_and_truncate` is the collection that zips the ranks' parts in
rank order and truncates to the dataset size.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, TypeVar

import torch

from samplers.plan import interleave_truncated

#: The aggregation patterns, in the order :func:`estimates` reports them.
PATTERNS = ("mean_of_rank_means", "pooled_counts", "gathered")

#: Scores are integers in ``[0, SCORE_LEVELS)``; the model predicts positive from half-way.
SCORE_LEVELS = 100

_T = TypeVar("_T")


def is_correct(indices: torch.Tensor) -> torch.Tensor:
    """Whether the synthetic model is right on each sample: about 70%, irregularly."""
    hashed = (indices * 2654435761) % 2**32  # Knuth's multiplicative hash
    return (hashed >> 16) % 10 < 7


def exact_accuracy(dataset_size: int) -> float:
    """The accuracy over every sample exactly once."""
    if dataset_size == 0:
        raise ValueError("dataset_size must be at least 1 to have an accuracy, got 0")
    return is_correct(torch.arange(dataset_size)).double().mean().item()


def mean_of_rank_means(results: Sequence[torch.Tensor]) -> float:
    """Average of per-rank accuracies (ranks with no samples are a division by zero)."""
    means = [share.double().mean() for share in results]
    return torch.stack(means).mean().item()


def pooled_counts(results: Sequence[torch.Tensor]) -> float:
    """Total correct over total seen, padding included."""
    correct = sum(int(share.sum()) for share in results)
    seen = sum(share.numel() for share in results)
    return correct / seen


def gathered(results: Sequence[torch.Tensor], dataset_size: int) -> float:
    """Per-sample results interleaved in rank order and truncated: exact with padding."""
    return interleave_truncated(results, dataset_size).double().mean().item()


def rank_results(shares: Sequence[Sequence[int] | torch.Tensor]) -> list[torch.Tensor]:
    """Each rank's per-sample results (:func:`is_correct`) for the indices it received."""
    return [is_correct(torch.as_tensor(share, dtype=torch.int64)) for share in shares]


def estimates(results: Sequence[torch.Tensor], dataset_size: int) -> dict[str, float]:
    """The accuracy each pattern in :data:`PATTERNS` reports for the same per-rank results."""
    return {
        "mean_of_rank_means": mean_of_rank_means(results),
        "pooled_counts": pooled_counts(results),
        "gathered": gathered(results, dataset_size),
    }


def score(indices: torch.Tensor) -> torch.Tensor:
    """The synthetic model's score for each sample: an integer in ``[0, SCORE_LEVELS)``.

    A fixed function of the index (a multiplicative hash other than :func:`is_correct`'s),
    so samples share scores (ties) and every rank computes the same score for a sample.
    """
    hashed = (indices * 2246822519) % 2**32
    return (hashed >> 8) % SCORE_LEVELS


def label(indices: torch.Tensor) -> torch.Tensor:
    """Each sample's true class: the model's prediction (``score >= SCORE_LEVELS // 2``)
    where :func:`is_correct`, the other class where not."""
    predicted = score(indices) >= SCORE_LEVELS // 2
    return predicted == is_correct(indices)


def roc_auc(labels: Sequence[bool], scores: Sequence[int]) -> Fraction:
    """The area under the ROC curve, exactly: the fraction of (positive, negative) pairs
    whose positive scores higher, a tie counting one half.

    Integer arithmetic only (scores are sorted and tied scores grouped, O(n log n)), so two
    calls on the same samples in any order give the same :class:`~fractions.Fraction`.
    Raises ``ValueError`` when the lengths differ or either class is absent.
    """
    if len(labels) != len(scores):
        raise ValueError(
            f"labels and scores must have the same length, got {len(labels)} and {len(scores)}"
        )
    positives = sum(1 for value in labels if value)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        raise ValueError(
            "labels must hold both classes for a ROC AUC, got "
            f"{positives} positive and {negatives} negative"
        )
    pairs = sorted(zip(scores, labels, strict=True), key=_score_of)
    twice_wins = 0  # 2 x (pairs the positive wins) + (tied pairs)
    negatives_below = 0
    for _, group in itertools.groupby(pairs, key=_score_of):
        tied = [bool(value) for _, value in group]
        tied_positives = sum(tied)
        tied_negatives = len(tied) - tied_positives
        twice_wins += tied_positives * (2 * negatives_below + tied_negatives)
        negatives_below += tied_negatives
    return Fraction(twice_wins, 2 * positives * negatives)


def _score_of(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def zip_and_truncate(parts: Sequence[Sequence[_T]], dataset_size: int) -> list[_T]:
    """The common collection: the ranks' parts zipped in rank order, truncated to the size.

    ``zip`` stops at the shortest part, so this is exact only when every part has the
    same length and the parts follow the stock strided layout (as with the stock
    sampler's padding); see the report's finding on it.
    """
    if dataset_size < 0:
        raise ValueError(f"dataset_size must be at least 0, got {dataset_size}")
    collected = [result for step in zip(*parts, strict=False) for result in step]
    return collected[:dataset_size]
