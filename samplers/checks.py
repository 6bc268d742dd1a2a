"""Argument checks shared by every sampler: each error names the argument and its value."""

from __future__ import annotations

import operator
from typing import Any


class SeedTypeError(TypeError, RuntimeError):
    """A seed that is not an integer.

    It is also a ``RuntimeError``, the type ``torch.Generator.manual_seed`` raises for the
    same seed, so code written against the stock sampler keeps catching it.
    """


def as_int(name: str, value: Any, *, error: type[TypeError] = TypeError) -> int:
    """``value`` as a Python int; integer-likes (numpy, 0-d tensors) pass, bools do not."""
    if isinstance(value, bool) or value is None:
        raise error(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise error(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def as_flag(name: str, value: Any) -> bool:
    """``value`` as a bool; only bools and the integers 0 and 1 are accepted."""
    if isinstance(value, bool):
        return value
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number not in (0, 1):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(number)


def world_size(value: Any) -> int:
    """A validated ``num_replicas``: an integer of at least 1."""
    size = as_int("num_replicas", value)
    if size < 1:
        raise ValueError(f"num_replicas must be at least 1, got {size}")
    return size


def rank(value: Any, num_replicas: int) -> int:
    """A validated ``rank``: an integer in ``[0, num_replicas)``."""
    checked = as_int("rank", value)
    if not 0 <= checked < num_replicas:
        raise ValueError(
            f"rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, "
            f"got {checked}"
        )
    return checked


def seed(value: Any) -> int:
    """A validated seed: any integer (``seed + epoch`` must fit ``manual_seed`` later)."""
    return as_int("seed", value, error=SeedTypeError)


def dataset_size(dataset: Any) -> int:
    """``len(dataset)``, with an error that says what the sampler needs."""
    if not hasattr(type(dataset), "__len__"):
        raise TypeError(
            "dataset must have a length (a map-style Dataset with __len__), "
            f"got {type(dataset).__name__} without one"
        )
    return len(dataset)
