"""Argument and state checks of :class:`samplers.DistributedTokenBatchSampler`.

Each error names the argument (or the state's field) and the value; a state that
describes another epoch order (another dataset, budget, cost or window) is refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

__all__ = [
    "ORDER_FIELDS",
    "STATE_VERSION",
    "checked_lengths",
    "checked_state",
    "choice",
    "warn_over_budget",
]

#: The version :meth:`DistributedTokenBatchSampler.state_dict` writes.
STATE_VERSION = 1
#: Fields of a state that must match the sampler loading it: they define the epoch order.
ORDER_FIELDS = ("dataset_length", "length_sum", "max_tokens", "cost", "window")


def checked_lengths(lengths: Any) -> torch.Tensor:
    """``lengths`` as a 1-D CPU tensor (int32, or int64 past 2**31 - 1), or a clear error."""
    if isinstance(lengths, torch.Tensor):
        values = lengths.detach().cpu()
    elif hasattr(lengths, "__array__") or hasattr(lengths, "__len__"):
        try:
            values = torch.as_tensor(lengths if hasattr(lengths, "__array__") else list(lengths))
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"lengths must be integers, got {lengths!r:.80} ({error})") from None
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
    low, high = (int(bound) for bound in torch.aminmax(values)) if values.numel() else (0, 0)
    if low < 0:
        where = int(torch.argmin(values))
        raise ValueError(f"lengths must be at least 0, got lengths[{where}] = {int(values[where])}")
    fits = high < 2**31
    # A copy: the epoch order must not change under the sampler.
    return values.to(torch.int32 if fits else torch.int64, copy=True).contiguous()


def choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def warn_over_budget(lengths: torch.Tensor, max_tokens: int) -> None:
    if lengths.numel() == 0 or int(lengths.max()) <= max_tokens:
        return
    count = int(torch.count_nonzero(lengths > max_tokens))
    if count:
        longest = int(torch.argmax(lengths))
        warnings.warn(
            f"{count} sample(s) are longer than max_tokens={max_tokens} (the longest: index "
            f"{longest}, {int(lengths[longest])} tokens); each forms a batch of its own that "
            "costs more than max_tokens (none is dropped)",
            UserWarning,
            stacklevel=3,
        )


def checked_state(state: Any, expected: Mapping[str, Any]) -> dict[str, Any]:
    """The state's fields, validated against this sampler's ``expected`` state."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    checked: dict[str, Any] = {}
    for name, example in expected.items():
        if name not in state:
            raise ValueError(f"state field {name!r} is missing (a truncated or foreign state?)")
        value = state[name]
        if type(value) is not type(example):
            raise ValueError(
                f"state field {name!r} must be {type(example).__name__}, got {value!r}"
            )
        checked[name] = value
    if checked["version"] != STATE_VERSION:
        raise ValueError(
            f"state field 'version' is {checked['version']!r}; this version of dsampler "
            f"reads state version {STATE_VERSION}"
        )
    if checked["sampler"] != expected["sampler"]:
        raise ValueError(
            f"state field 'sampler' is {checked['sampler']!r}, not {expected['sampler']!r}: "
            "a state loads into the kind of sampler that saved it"
        )
    for name in ("shuffle", "permutation", *ORDER_FIELDS):
        if checked[name] != expected[name]:
            raise ValueError(
                f"state field {name!r} is {checked[name]!r}, this sampler's is "
                f"{expected[name]!r}: the saved epoch's order cannot be continued"
            )
    if checked["position"] < 0:
        raise ValueError(f"state field 'position' must be at least 0, got {checked['position']}")
    return checked
