"""The mixture samplers' argument checks: each error names the argument and the value."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from torch.utils.data import ConcatDataset

from samplers import checks
from samplers.mixture.schedule import MAX_PERIOD, parts

__all__ = [
    "EPOCH_LIMIT",
    "STREAM_END",
    "checked_datasets",
    "checked_weights",
    "decoded_schedule",
    "epoch_length",
    "is_int",
    "stream_epoch",
]

#: A mixture's stream positions are int64: every epoch's positions lie below this.
STREAM_END = 1 << 63
#: The longest epoch (its layouts' padded positions stay int64).
EPOCH_LIMIT = 1 << 62


def checked_datasets(datasets: Any, weights: Any = None) -> tuple[list[Any], tuple[int, ...]]:
    """The sources (a ``ConcatDataset``'s, or the sequence given) and their sizes.

    Raises ``TypeError`` for something that is not a sequence of sized datasets and
    ``ValueError`` for no source or an empty one (naming its position and length, and
    what to do given its weight in ``weights``, when given).
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
            paused = _weight_is_zero(weights, d)
            raise ValueError(
                f"datasets[{d}] is empty (len 0): every source needs at least one sample, "
                + (
                    "even at weight 0; leave it out of datasets (and its weight out of weights)"
                    if paused
                    else "and an empty one cannot be drawn from; leave it out (a source "
                    "with samples is paused with weight 0)"
                )
            )
        sizes.append(size)
    return sources, tuple(sizes)


def _weight_is_zero(weights: Any, d: int) -> bool:
    """Whether ``weights`` (unchecked) gives source ``d`` the weight 0."""
    try:
        value = _scalar(list(weights.tolist() if hasattr(weights, "tolist") else weights)[d])
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == 0
    except (TypeError, IndexError, ValueError):
        return False


def _scalar(value: Any) -> Any:
    """A 0-d tensor or array as the Python number it holds; anything else as it is."""
    if tuple(getattr(value, "shape", (None,))) == () and hasattr(value, "item"):
        return value.item()
    return value


def checked_weights(weights: Any, count: int) -> tuple[float | int | Fraction, ...]:
    """``weights`` as a tuple of ``count`` finite non-negative numbers, not all zero
    (numpy scalars and 0-d tensors count as the numbers they hold; bools do not)."""
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
    for d, given in enumerate(weights):
        weight = _scalar(given)
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
    """The epoch's length: ``sum(sizes)`` for ``None``, else a positive integer; either
    way at most ``2**62`` (:data:`EPOCH_LIMIT`: stream positions are int64, and a
    layout pads an epoch's positions up to a multiple of the ranks' step)."""
    length = sum(sizes) if value is None else checks.positive("epoch_length", value)
    if length > EPOCH_LIMIT:
        raise ValueError(
            f"epoch_length must be at most 2**62 (a mixture's stream positions are int64), "
            f"got {length}"
        )
    return length


def stream_epoch(epoch: int, length: int) -> int:
    """``epoch``, checked to be a window of the stream: at least 0, its positions
    ``[epoch * length, (epoch + 1) * length)`` below ``2**63``."""
    if epoch < 0:
        raise ValueError(
            f"a mixture's epoch must be at least 0 (epochs are windows of one stream), got {epoch}"
        )
    if (epoch + 1) * length > STREAM_END:
        raise ValueError(
            f"epoch {epoch} with epoch_length={length} reaches stream position "
            f"{(epoch + 1) * length - 1}, past 2**63 - 1 (a mixture's stream positions "
            f"are int64): the last epoch is {STREAM_END // length - 1}"
        )
    return epoch


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (as a state's JSON fields are)."""
    return isinstance(value, int) and not isinstance(value, bool)


def decoded_schedule(
    value: Any,
    count: int,
    field: str = "schedule",
    canonical: Callable[[tuple[int, ...]], tuple[int, ...]] = parts,
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """A state's schedule field (``[[position, parts], ...]`` for ``count`` sources) as
    segments, or ``ValueError`` naming ``field`` and what a schedule ``state_dict()``
    writes looks like. Each segment's parts must be those its weights give, which
    ``canonical`` computes (the sampler's: :func:`~samplers.mixture.schedule.parts` for
    weights counting draws, in lowest terms summing to at most
    :data:`~samplers.mixture.schedule.MAX_PERIOD`;
    :func:`~samplers.mixture.tokens.token_parts` for weights counting tokens, each below
    ``2**53``): parts it maps to themselves."""
    shape = (
        f"state field {field!r} must be a list of [position, parts] with "
        f"{count} non-negative integer parts, not all 0, as state_dict() writes them (the "
        f"parts its weights give: in lowest terms, summing to at most {MAX_PERIOD} for "
        "weights that count draws, each below 2**53 for weights that count tokens), "
        "positions rising from 0 and below 2**63"
    )
    if not isinstance(value, list) or not value:
        raise ValueError(f"{shape}; got {value!r}")
    segments: list[tuple[int, tuple[int, ...]]] = []
    for entry in value:
        ok = (
            isinstance(entry, (list, tuple))
            and len(entry) == 2
            and is_int(entry[0])
            and 0 <= entry[0] < STREAM_END
            and isinstance(entry[1], (list, tuple))
            and len(entry[1]) == count
            and all(is_int(a) and a >= 0 for a in entry[1])
            and any(entry[1])
            and _fixed(canonical, tuple(int(a) for a in entry[1]))
        )
        if not ok:
            raise ValueError(f"{shape}; got the entry {entry!r}")
        segments.append((int(entry[0]), tuple(int(a) for a in entry[1])))
    starts = [start for start, _ in segments]
    if starts[0] != 0 or any(b <= a for a, b in itertools.pairwise(starts)):
        raise ValueError(f"{shape}; got the positions {starts}")
    return tuple(segments)


def _fixed(canonical: Callable[[tuple[int, ...]], tuple[int, ...]], found: tuple[int, ...]) -> bool:
    """Whether ``canonical`` maps ``found`` to itself (refusing them is not)."""
    try:
        return canonical(found) == found
    except ValueError:
        return False
