"""The attention shapes a sampler's epoch asks for: what a backend that plans per shape
plans for.

A padded batch of ``count`` samples whose longest is ``L`` runs attention over a
``(count, L)`` tensor (per head); a backend that builds a plan for each shape it has not
seen (PyTorch's cuDNN attention caches one graph per exact shape, see
``docs/guides/packing.md``) builds one per distinct ``(count, L)`` of the epoch. Padding
``L`` up to a multiple of ``m`` leaves fewer distinct shapes; packed rows of the context
are ``(rows, context)`` whatever their samples (and a varlen kernel takes its sequences'
boundaries as data, not as a shape).
"""

from __future__ import annotations

from studies.tokens.batching import Shares

__all__ = ["distinct_shapes"]


def distinct_shapes(
    shares: Shares, values: list[int], packed: bool, context: int, multiple: int
) -> dict[str, int]:
    """The epoch's batches, its distinct attention shapes, and its distinct shapes with
    every padded length rounded up to a multiple of ``multiple`` (packed: the same)."""
    from samplers.tokens.packing import row_starts

    exact: set[tuple[int, int]] = set()
    rounded: set[tuple[int, int]] = set()
    batches = 0
    for share in shares:
        for batch in share:
            if not batch:
                continue
            batches += 1
            lengths = [values[i] for i in batch]
            if packed:
                starts = row_starts(lengths, context)
                ends = [*starts[1:], len(lengths)]
                width = max(
                    context, *(sum(lengths[a:b]) for a, b in zip(starts, ends, strict=True))
                )
                exact.add((len(starts), width))
                rounded.add((len(starts), width))
                continue
            longest = max(lengths)
            exact.add((len(lengths), longest))
            rounded.add((len(lengths), -(-longest // multiple) * multiple))
    return {
        "batches": batches,
        "distinct shapes": len(exact),
        f"distinct shapes, lengths to a multiple of {multiple}": len(rounded),
    }
