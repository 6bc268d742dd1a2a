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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from samplers.plan import unshard

#: The aggregation patterns, in the order :func:`estimates` reports them.
PATTERNS = ("mean_of_rank_means", "pooled_counts", "gathered")


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
    return unshard(results, dataset_size).double().mean().item()


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
