"""Argument checks of :class:`samplers.DistributedTokenBatchSampler`.

Each error names the argument and the value.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import torch

from samplers.checks import SamplerWarning, as_int
from samplers.options import TAILS, Tail

__all__ = [
    "OVER_BUDGET",
    "choice",
    "length_ints",
    "lengths_tensor",
    "token_tail",
    "warn_over_budget",
]


def lengths_tensor(lengths: Any) -> torch.Tensor:
    """``lengths`` as a 1-D CPU tensor of a signed integer dtype, or a clear error.

    The caller's tensor itself when it is one already (on the CPU, signed): neither
    copied nor read (:class:`~samplers.tokens.held.HeldLengths` checks the values).
    """
    if isinstance(lengths, (Mapping, AbstractSet)):
        raise TypeError(
            f"lengths must be a sequence, numpy array or tensor of integers (one per sample, "
            f"in index order), got a {type(lengths).__name__}, which has no order of samples"
            + (
                ": pass list(lengths.values()) if its values are in index order"
                if isinstance(lengths, Mapping)
                else ""
            )
        )
    if isinstance(lengths, torch.Tensor):
        values = lengths.detach().cpu()
    elif hasattr(lengths, "__array__"):
        try:
            values = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"lengths must be integers, got {lengths!r:.80} ({error})") from None
    elif hasattr(lengths, "__len__"):
        items = list(lengths)
        try:
            values = torch.as_tensor(items)
        except (TypeError, ValueError, RuntimeError):
            values = _one_by_one(items)
    else:
        raise TypeError(
            "lengths must be a sequence, numpy array or tensor of integers, got "
            f"{type(lengths).__name__}"
        )
    if values.numel() == 0 and not isinstance(lengths, torch.Tensor):
        values = values.to(torch.int64)  # an empty list: no dtype to go by
    if values.dim() != 1:
        raise ValueError(f"lengths must be one-dimensional, got shape {tuple(values.shape)}")
    if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
        raise TypeError(f"lengths must be integers, got dtype {values.dtype}")
    return _signed(values)


def length_ints(items: Iterable[Any], name: str = "lengths") -> list[int]:
    """Each of ``items`` as a Python int of at least 0, or an error naming the first that
    is not one (``{name}[i]``): ``TypeError`` for a non-integer, ``ValueError`` below 0."""
    values = []
    for number, item in enumerate(items):
        value = as_int(f"{name}[{number}]", item)
        if value < 0:
            raise ValueError(f"{name} must be at least 0, got {name}[{number}] = {value}")
        values.append(value)
    return values


def _one_by_one(items: list[Any]) -> torch.Tensor:
    """``items`` torch could not take at once (integer-likes of several kinds, or values
    int64 cannot hold), as int64, or an error naming the first that is not a length."""
    values = length_ints(items)
    for number, value in enumerate(values):
        if value >= 2**63:
            raise ValueError(f"lengths must be below 2**63, got lengths[{number}] = {value}")
    return torch.tensor(values, dtype=torch.int64)


def _signed(values: torch.Tensor) -> torch.Tensor:
    """Unsigned lengths (uint16/32/64, which few torch kernels take) as int64."""
    if values.dtype in (torch.uint16, torch.uint32):
        return values.to(torch.int64)
    if values.dtype == torch.uint64:
        signed = values.view(torch.int64)  # the same bits: past 2**63 - 1 reads negative
        if signed.numel() and int(signed.min()) < 0:
            where = int(torch.argmin(signed))
            raise ValueError(
                f"lengths must be below 2**63, got lengths[{where}] = {int(signed[where]) + 2**64}"
            )
        return signed
    return values


def token_tail(value: Any) -> Tail:
    """``tail`` of a token sampler: ``"pad"``, ``"drop"`` or ``"uneven"`` (no ``None``)."""
    return TAILS[TAILS.index(choice("tail", value, TAILS))]


def choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


#: What each tail does to a sample longer than ``max_tokens`` (a batch of its own), as
#: the over-budget warning says it.
OVER_BUDGET = {
    "uneven": "with tail='uneven' each is handed out exactly once per epoch",
    "pad": "with tail='pad' each is handed out at least once per epoch",
    "drop": (
        "with tail='drop' each can be left out of an epoch, like any batch among the last "
        "ones that do not fill a step (fewer than num_replicas); use tail='uneven' or "
        "'pad' to keep every one"
    ),
}


def warn_over_budget(
    lengths: torch.Tensor, max_tokens: int, tail: str, longest: int | None = None
) -> None:
    """Warn when samples are longer than ``max_tokens``, saying what ``tail`` does to
    them (:data:`OVER_BUDGET`); ``longest``, the largest length when known, saves a pass."""
    if longest is None:
        longest = int(lengths.max()) if lengths.numel() else 0
    if lengths.numel() == 0 or longest <= max_tokens:
        return
    count = int(torch.count_nonzero(lengths > max_tokens))
    if count:
        where = int(torch.argmax(lengths))
        warnings.warn(
            f"{count} sample(s) are longer than max_tokens={max_tokens} (the longest: index "
            f"{where}, {int(lengths[where])} tokens); each forms a batch of its own that "
            f"costs more than max_tokens; {OVER_BUDGET[tail]}",
            SamplerWarning,
            stacklevel=3,
        )
