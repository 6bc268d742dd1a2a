"""The synthetic model at the path the reports name (``studies/evaluation.py``): it is
:mod:`studies.core.evaluation`, whose names this module re-exports.
"""

from __future__ import annotations

from studies.core.evaluation import (
    PATTERNS,
    SCORE_LEVELS,
    estimates,
    exact_accuracy,
    gathered,
    is_correct,
    label,
    mean_of_rank_means,
    pooled_counts,
    rank_results,
    roc_auc,
    score,
    zip_and_truncate,
)

__all__ = [
    "PATTERNS",
    "SCORE_LEVELS",
    "estimates",
    "exact_accuracy",
    "gathered",
    "is_correct",
    "label",
    "mean_of_rank_means",
    "pooled_counts",
    "rank_results",
    "roc_auc",
    "score",
    "zip_and_truncate",
]
