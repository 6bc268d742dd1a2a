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
``rows=True``, ``row_starts``: the first sample of each row. Pieces of documents cut by
``split=`` (the items of :class:`~samplers.tokens.pieces.PieceDataset`, mappings with
``"document"`` and ``"start"``) are sequences of their own, each with its own
``cu_seqlens`` boundary and positions from 0; the batch then also holds ``documents`` and
``starts`` (int64, per sample, in order): which tokens of which document each sequence is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from samplers import checks
from samplers.tokens.packing import row_starts

__all__ = ["packed_collate"]


def _tokens(sample: Any, key: str) -> torch.Tensor:
    if isinstance(sample, Mapping):
        if key not in sample:
            raise KeyError(f"packed_collate: a sample has no {key!r} (keys: {sorted(sample)})")
        sample = sample[key]
    values = torch.as_tensor(sample)
    if values.numel() == 0 and values.dim() == 1:
        return torch.zeros(0, dtype=torch.int64)  # an empty sequence has no dtype to keep
    if values.dim() != 1 or values.is_floating_point() or values.dtype == torch.bool:
        raise ValueError(
            f"packed_collate: each sample must be a 1-D sequence of token ids, got shape "
            f"{tuple(values.shape)} of {values.dtype}"
        )
    if values.dtype == torch.uint64 and bool((values.view(torch.int64) < 0).any()):
        # Read as int64 (the batch's dtype) these are negative: they would wrap.
        raise ValueError(
            "packed_collate: a sample holds a token id of 2**63 or more (uint64), which "
            "the batch's int64 token ids cannot hold"
        )
    return values.to(torch.int64)


def packed_collate(
    samples: Sequence[Any],
    max_length: int,
    *,
    rows: bool = True,
    pad_id: int = 0,
    key: str = "input_ids",
    rows_per_batch: int | None = None,
) -> dict[str, Any]:
    """One packed batch from its samples (each a 1-D sequence of token ids, or a mapping
    holding one under ``key``); see the module for the layouts. An empty batch gives
    no rows (``input_ids`` of shape ``(0, max_length)``, or ``(1, 0)`` flattened).

    Use the sampler's own: ``collate_fn=sampler.collate_fn()`` (its ``max_length`` and
    ``rows_per_batch``), or ``functools.partial(packed_collate, max_length=...)`` with
    the sampler's ``max_length``. With ``rows_per_batch`` (the sampler's), a batch whose
    samples make more rows than that is refused with ``ValueError``: the samples' lengths
    are not those the sampler packed (``lengths`` differs from the dataset) or
    ``max_length`` is smaller than the sampler's.
    """
    max_length = checks.positive("max_length", max_length)
    if rows_per_batch is not None:
        rows_per_batch = checks.positive("rows_per_batch", rows_per_batch)
    rows = checks.as_flag("rows", rows)
    pad_id = checks.as_int("pad_id", pad_id)
    if not -(2**63) <= pad_id < 2**63:
        raise ValueError(f"pad_id must fit int64 (the token ids' dtype), got {pad_id}")
    tokens = [_tokens(sample, key) for sample in samples]
    lengths = [t.numel() for t in tokens]
    origins = _origins(samples)
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
            **origins,
        }
    starts = row_starts(lengths, max_length)
    if rows_per_batch is not None and len(starts) > rows_per_batch:
        raise ValueError(
            f"packed_collate: these {len(lengths)} samples (lengths {lengths[:8]}"
            f"{' ...' if len(lengths) > 8 else ''}) make {len(starts)} rows of at most "
            f"max_length={max_length} tokens, more than rows_per_batch={rows_per_batch}: the "
            "samples' lengths differ from the lengths the sampler packed, or max_length "
            "is not the sampler's (use collate_fn=sampler.collate_fn())"
        )
    ends = [*starts[1:], len(lengths)] if starts else []
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
        **origins,
    }


def _origins(samples: Sequence[Any]) -> dict[str, torch.Tensor]:
    """``documents`` and ``starts`` of pieces (every sample a mapping holding both)."""
    if not samples or not all(
        isinstance(sample, Mapping) and "document" in sample and "start" in sample
        for sample in samples
    ):
        return {}
    return {
        field: torch.tensor(
            [checks.as_int(f"a sample's {key!r}", sample[key]) for sample in samples],
            dtype=torch.int64,
        )
        for field, key in (("documents", "document"), ("starts", "start"))
    }
