"""The mixture samplers' argument checks: each error names the argument and the value."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from torch.utils.data import ConcatDataset

from samplers import checks

__all__ = ["checked_datasets", "checked_weights", "epoch_length"]


def checked_datasets(datasets: Any) -> tuple[list[Any], tuple[int, ...]]:
    """The sources (a ``ConcatDataset``'s, or the sequence given) and their sizes.

    Raises ``TypeError`` for something that is not a sequence of sized datasets and
    ``ValueError`` for no source or an empty one (naming its position and length).
    """
    if isinstance(datasets, ConcatDataset):
        sources = list(datasets.datasets)
    elif isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
        raise TypeError(
            "datasets must be a sequence of sized datasets or a ConcatDataset, got "
            f"{type(datasets).__name__}"
        )
    else:
        sources = list(datasets)
    if not sources:
        raise ValueError("datasets must hold at least one dataset, got none")
    sizes = []
    for d, source in enumerate(sources):
        if not hasattr(type(source), "__len__"):
            raise TypeError(
                f"datasets[{d}] has no len() (a {type(source).__name__}): every source must "
                "be a sized dataset"
            )
        size = checks.dataset_size(source)
        if size == 0:
            raise ValueError(
                f"datasets[{d}] is empty (len 0): every source needs at least one sample "
                "(give it weight 0 to pause a source, or leave it out)"
            )
        sizes.append(size)
    return sources, tuple(sizes)


def checked_weights(weights: Any, count: int) -> tuple[float | int | Fraction, ...]:
    """``weights`` as a tuple of ``count`` finite non-negative numbers, not all zero."""
    if hasattr(weights, "tolist"):
        weights = weights.tolist()
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(
            f"weights must be a sequence of {count} numbers, got {type(weights).__name__}"
        )
    if len(weights) != count:
        raise ValueError(
            f"weights must hold one weight per dataset ({count}), got {len(weights)}: "
            f"{list(weights)!r}"
        )
    values: list[float | int | Fraction] = []
    for d, weight in enumerate(weights):
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise TypeError(f"weights[{d}] must be a number, got {weight!r}")
        if isinstance(weight, numbers.Integral):
            value: float | int | Fraction = int(weight)
        elif isinstance(weight, Fraction):
            value = weight
        else:
            value = float(weight)
            if not math.isfinite(value):
                raise ValueError(f"weights[{d}] must be finite, got {weight!r}")
        if value < 0:
            raise ValueError(f"weights[{d}] must be at least 0, got {weight!r}")
        values.append(value)
    if not any(values):
        raise ValueError(
            f"weights must not all be 0 (at least one source must be drawn from), got "
            f"{list(weights)!r}"
        )
    return tuple(values)


def epoch_length(value: Any, sizes: tuple[int, ...]) -> int:
    """The epoch's length: ``sum(sizes)`` for ``None``, else a positive integer."""
    if value is None:
        return sum(sizes)
    return checks.positive("epoch_length", value)
