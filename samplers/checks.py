"""Argument checks shared by every sampler: each error names the argument and its value.

Every check raises an instance of the exception type the stock
``torch.utils.data.distributed.DistributedSampler`` raises for the same input (when it
raises at all), so ``except`` clauses written against the stock sampler keep working;
where the stock message is accurate, ours starts with its wording.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any

from samplers.options import PERMUTATIONS, TAILS, Permutation, Tail

#: ``torch.Generator.manual_seed`` accepts exactly this range.
SEED_RANGE = (-(2**63), 2**64 - 1)


class SamplerWarning(UserWarning):
    """Every warning the samplers raise (a ``UserWarning``): one category to filter or to
    assert, e.g. ``warnings.filterwarnings("ignore", category=SamplerWarning)``."""


class SeedTypeError(TypeError, RuntimeError):
    """A seed that is not an integer.

    It is also a ``RuntimeError``, the type ``torch.Generator.manual_seed`` raises for the
    same seed, so code written against the stock sampler keeps catching it.
    """


class EpochTypeError(TypeError, RuntimeError):
    """An epoch that is not an integer.

    The stock sampler accepts any epoch in ``set_epoch`` and fails when iterating, in
    ``manual_seed``: with a ``RuntimeError`` for a float or a tensor, a ``TypeError`` for a
    string. This error is both, and is raised by ``set_epoch`` itself.
    """


class IntegerTypeError(TypeError, ValueError):
    """``num_replicas`` or ``rank`` that is not an integer (a float, a bool, a string).

    The stock sampler compares such values numerically, so for some of them it raises
    the ``ValueError`` of its rank check (``num_replicas=2.0, rank=2``), for others a
    ``TypeError`` (a string), and for others none at all until iterating. This error is
    both types, so every ``except`` clause written against the stock sampler catches it.
    """


class AssertionTypeError(TypeError, AssertionError):
    """``drop_last`` or ``num_samples`` of the wrong type, written after construction.

    When iterating, the stock sampler fails its own length assertion for such values
    (``drop_last="yes"`` trims an order whose sizes were computed for padding); this
    error is both that ``AssertionError`` and a ``TypeError`` naming the attribute.
    """


def _type_error(name: str, value: Any, kind: str, error: type[TypeError]) -> TypeError:
    return error(f"{name} must be {kind}, got {type(value).__name__} {value!r}")


def as_int(name: str, value: Any, *, error: type[TypeError] = TypeError) -> int:
    """``value`` as a Python int; integer-likes (numpy, 0-d tensors) pass, bools do not."""
    if isinstance(value, bool) or value is None or _is_boolean_scalar(value):
        raise _type_error(name, value, "an integer", error)
    try:
        return operator.index(value)
    except TypeError:
        raise _type_error(name, value, "an integer", error) from None


def _is_boolean_scalar(value: Any) -> bool:
    """A numpy bool, a 0-d numpy bool array or a 0-d bool tensor (no numpy import)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or str(dtype) not in ("bool", "torch.bool"):
        return False
    return tuple(getattr(value, "shape", (None,))) == ()


def as_flag(name: str, value: Any, *, error: type[TypeError] = TypeError) -> bool:
    """``value`` as a bool.

    Accepted: ``bool``, numpy bools, 0-d bool arrays and tensors, and the integers 0 and
    1. Anything else (strings, ``None``, floats, other numbers) raises ``TypeError``: the
    stock sampler would treat ``"no"`` as true and shuffle.
    """
    if isinstance(value, bool):
        return value
    if _is_boolean_scalar(value):
        return bool(value)
    number = None
    if tuple(getattr(value, "shape", ())) == ():
        with contextlib.suppress(TypeError):
            number = operator.index(value)
    if number not in (0, 1):
        raise _type_error(name, value, "a bool", error)
    return bool(number)


def set_flag(name: str, value: Any) -> bool:
    """Whether ``value`` is a true bool-like (:func:`as_flag`); ``False`` for a value that
    is not one, which whoever uses it refuses later (the stock sampler's ``set_epoch``
    takes any)."""
    try:
        return as_flag(name, value)
    except TypeError:
        return False


def world_size(value: Any) -> int:
    """A validated ``num_replicas``: an integer of at least 1 and below ``2**63``.

    The stock sampler reports ``num_replicas=0`` as an invalid *rank*; this says what is
    wrong, in the same ``ValueError``. Ranks and positions are int64 in the plan's
    tensors, so ``2**63`` replicas or more are refused here, by name.
    """
    size = as_int("num_replicas", value, error=IntegerTypeError)
    if size < 1:
        raise ValueError(f"num_replicas must be at least 1, got {size}")
    if size >= 1 << 63:
        raise ValueError(
            f"num_replicas must be below 2**63 (ranks are int64 in the sampler's tensors), "
            f"got {size}"
        )
    return size


def rank(value: Any, num_replicas: int) -> int:
    """A validated ``rank``: an integer in ``[0, num_replicas)``."""
    checked = as_int("rank", value, error=IntegerTypeError)
    if not 0 <= checked < num_replicas:
        raise ValueError(
            f"Invalid rank {checked}, rank should be in the interval [0, {num_replicas - 1}]: "
            f"rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, "
            f"got {checked}"
        )
    return checked


def rank_when_iterating(value: Any, num_replicas: int, num_samples: Any) -> int:
    """``rank`` as written to the attribute, checked when iterating.

    The stock sampler then slices ``indices[rank:total_size:num_replicas]`` and fails its
    length assertion for a rank outside ``[0, num_replicas)``; so does this check, with
    the stock wording and the reason.
    """
    checked = as_int("rank", value, error=IntegerTypeError)
    if not 0 <= checked < num_replicas:
        total = as_int("num_replicas", num_replicas) * max(operator.index(num_samples), 0)
        received = len(range(total)[checked:total:num_replicas])
        raise AssertionError(
            f"Number of subsampled indices ({received}) does not match num_samples "
            f"({num_samples}): rank={checked} is outside [0, {num_replicas - 1}] for "
            f"num_replicas={num_replicas}"
        )
    return checked


def positive(name: str, value: Any) -> int:
    """An integer of at least 1 (bools and floats rejected), naming the argument."""
    number = as_int(name, value)
    if number < 1:
        raise ValueError(f"{name} must be at least 1, got {number}")
    return number


def seed(value: Any) -> int:
    """A validated seed: any integer (``seed + epoch`` must fit ``manual_seed`` to shuffle)."""
    return as_int("seed", value, error=SeedTypeError)


def epoch(value: Any) -> int:
    """A validated epoch: any integer."""
    return as_int("epoch", value, error=EpochTypeError)


def tail(value: Any, drop_last: bool) -> Tail:
    """The tail policy: ``value`` if given, else the one ``drop_last`` means.

    ``drop_last=True`` with a tail other than ``"drop"`` contradicts itself and raises
    ``ValueError``; ``drop_last=False`` (the default) leaves the choice to ``tail``.
    """
    if value is None:
        return "drop" if drop_last else "pad"
    if not isinstance(value, str) or value not in TAILS:
        raise ValueError(
            f"tail must be one of {', '.join(map(repr, TAILS))} or None, got {value!r}"
        )
    if drop_last and value != "drop":
        raise ValueError(
            f"drop_last=True contradicts tail={value!r}: drop_last=True means tail='drop'; "
            "pass one of them"
        )
    return TAILS[TAILS.index(value)]


def permutation(value: Any) -> Permutation:
    """``"randperm"`` (the stock sampler's) or ``"feistel"`` (O(1) memory)."""
    if not isinstance(value, str) or value not in PERMUTATIONS:
        choices = ", ".join(map(repr, PERMUTATIONS))
        raise ValueError(f"permutation must be one of {choices}, got {value!r}")
    return PERMUTATIONS[PERMUTATIONS.index(value)]


def checked_key(seed_value: int, epoch_value: int) -> int:
    """``seed + epoch``, or the error ``manual_seed`` raises for it, naming both."""
    key = seed_value + epoch_value
    low, high = SEED_RANGE
    if not low <= key <= high:
        raise ValueError(
            "Overflow when unpacking long long: seed + epoch must be in "
            f"[-2**63, 2**64 - 1] (torch.Generator.manual_seed), got seed={seed_value} + "
            f"epoch={epoch_value} = {key}"
        )
    return key


def shuffle_key_fits(seed_value: int, epoch_value: int, permutation_value: str) -> None:
    """With ``randperm``, ``seed + epoch`` must fit ``manual_seed``; feistel takes any."""
    if permutation_value == "randperm":
        checked_key(seed_value, epoch_value)


def dataset_size(dataset: Any) -> int:
    """``len(dataset)``, with an error that says what the sampler needs."""
    if not hasattr(type(dataset), "__len__"):
        raise TypeError(
            f"object of type '{type(dataset).__name__}' has no len(): dataset must have a "
            "length (a map-style Dataset with __len__)"
        )
    return len(dataset)


__all__ = [
    "SEED_RANGE",
    "AssertionTypeError",
    "EpochTypeError",
    "IntegerTypeError",
    "SeedTypeError",
    "as_flag",
    "as_int",
    "checked_key",
    "dataset_size",
    "epoch",
    "permutation",
    "positive",
    "rank",
    "rank_when_iterating",
    "seed",
    "shuffle_key_fits",
    "tail",
    "world_size",
]
