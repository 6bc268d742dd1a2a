"""Argument checks of :class:`samplers.DistributedTokenBatchSampler`.

Each error names the argument and the value.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from samplers.checks import SamplerWarning

__all__ = ["checked_lengths", "choice", "warn_over_budget"]


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
            SamplerWarning,
            stacklevel=3,
        )
