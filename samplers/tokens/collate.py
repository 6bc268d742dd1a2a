"""A packed batch as a model takes it: :func:`packed_collate`.

Guarantee: for the samples of one batch of
:class:`~samplers.tokens.packed.DistributedPackedBatchSampler` (fetched by a
``DataLoader`` in the order the sampler gave), :func:`packed_collate` with the sampler's
``max_length`` rebuilds exactly the sampler's rows (:func:`~samplers.tokens.packing.
row_starts`) and returns them in the layout of flash-attention's varlen kernels and of
Hugging Face's ``DataCollatorWithFlattening``: every sample's tokens back to back, its
``position_ids`` counting from 0, and ``cu_seqlens`` the cumulative sequence boundaries.
Attention restricted to each ``[cu_seqlens[i], cu_seqlens[i + 1])`` block (a
block-diagonal mask) over the batch equals attention over each sample alone.

Two layouts:

* ``rows=True`` (default): ``input_ids`` and ``position_ids`` of shape
  ``(rows, max_length)``, each row's samples back to back and the rest ``pad_id``; a
  row's padding is a sequence of its own in ``cu_seqlens`` (its positions count from 0
  too), so no sample attends to it. ``cu_seqlens`` index ``input_ids.view(-1)``. A
  fixed shape for every batch of full rows (a row of one sample longer than
  ``max_length`` is the exception: the rows are then as wide as it);
* ``rows=False``: the flattened layout, shape ``(1, total)`` with no padding at all, as
  ``DataCollatorWithFlattening`` returns it.

Both return ``input_ids`` (int64), ``position_ids`` (int64), ``cu_seqlens`` (int32),
``max_seqlen`` (int), ``seq_lens`` (int64, the samples' lengths in order) and, with
``rows=True``, ``row_starts``: the first sample of each row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from samplers.tokens.packing import row_starts

__all__ = ["packed_collate"]


def _tokens(sample: Any, key: str) -> torch.Tensor:
    if isinstance(sample, Mapping):
        if key not in sample:
            raise KeyError(f"packed_collate: a sample has no {key!r} (keys: {sorted(sample)})")
        sample = sample[key]
    values = torch.as_tensor(sample)
    if values.dim() != 1 or values.is_floating_point():
        raise ValueError(
            f"packed_collate: each sample must be a 1-D sequence of token ids, got shape "
            f"{tuple(values.shape)} of {values.dtype}"
        )
    return values.to(torch.int64)


def packed_collate(
    samples: Sequence[Any],
    max_length: int,
    *,
    rows: bool = True,
    pad_id: int = 0,
    key: str = "input_ids",
) -> dict[str, Any]:
    """One packed batch from its samples (each a 1-D sequence of token ids, or a mapping
    holding one under ``key``); see the module for the layouts.

    Use ``functools.partial(packed_collate, max_length=...)`` as the DataLoader's
    ``collate_fn``, with the sampler's ``max_length``.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    tokens = [_tokens(sample, key) for sample in samples]
    lengths = [t.numel() for t in tokens]
    flat = torch.cat(tokens) if tokens else torch.zeros(0, dtype=torch.int64)
    positions = (
        torch.cat([torch.arange(n, dtype=torch.int64) for n in lengths])
        if tokens
        else torch.zeros(0, dtype=torch.int64)
    )
    seq_lens = torch.tensor(lengths, dtype=torch.int64)
    if not rows:
        bounds = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(seq_lens, 0)])
        return {
            "input_ids": flat.unsqueeze(0),
            "position_ids": positions.unsqueeze(0),
            "cu_seqlens": bounds.to(torch.int32),
            "max_seqlen": max(lengths, default=0),
            "seq_lens": seq_lens,
        }
    starts = row_starts(lengths, max_length)
    ends = [*starts[1:], len(lengths)]
    used = [sum(lengths[a:b]) for a, b in zip(starts, ends, strict=True)]
    width = max([max_length, *used])
    input_ids = torch.full((len(starts), width), pad_id, dtype=torch.int64)
    position_ids = torch.zeros((len(starts), width), dtype=torch.int64)
    segments: list[int] = []
    offset = 0
    for row, (a, b) in enumerate(zip(starts, ends, strict=True)):
        size = used[row]
        input_ids[row, :size] = flat[offset : offset + size]
        position_ids[row, :size] = positions[offset : offset + size]
        position_ids[row, size:] = torch.arange(width - size)
        segments += lengths[a:b]
        if width > size:
            segments.append(width - size)  # the row's padding, a sequence of its own
        offset += size
    bounds = torch.cumsum(torch.tensor([0, *segments], dtype=torch.int64), 0)
    return {
        "input_ids": input_ids,
        "position_ids": position_ids,
        "cu_seqlens": bounds.to(torch.int32),
        "max_seqlen": max(segments, default=0),
        "seq_lens": seq_lens,
        "row_starts": torch.tensor(starts, dtype=torch.int64),
    }
