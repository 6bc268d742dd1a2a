"""The guarantee of samplers that cut batches under a budget: each batch within it, exactly.

A sampler that says what its budget is (the attributes the token and packed samplers of
this package have) is checked against it with Python's integers, so a sampler whose cost
arithmetic overflows (an int64 sum that wraps, costs in FLOPs) fails, with the smallest
dataset where it does:

* a token sampler: ``lengths`` (one per index), ``max_tokens`` and ``cost`` (a
  :class:`~samplers.tokens.cost.TokenCost`, or ``"padded"`` / ``"sum"``): every batch's
  cost under ``cost`` is at most ``max_tokens`` (in the model's units), unless it is one
  sample;
* a packed sampler: ``lengths``, ``max_length`` and ``rows_per_batch``: every batch's
  rows, read back from its lengths as :func:`~samplers.tokens.packing.row_starts` reads
  them, number at most ``rows_per_batch`` and each sums to at most ``max_length``,
  unless it is one sample.

A sampler without those attributes is not supported by this guarantee.
"""

from __future__ import annotations

from typing import Any

from samplers.testing.registry import guarantee
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    Unsupported,
    build,
    iterate,
    set_epoch,
)

__all__ = ["batch_cost", "within_budget"]


def batch_cost(cost: Any, lengths: list[int]) -> int:
    """One batch's cost under ``cost`` in its units, with Python's integers (no overflow):
    ``"padded"``: the count times the costliest sample's cost; ``"sum"``: the sum."""
    from samplers.tokens.cost import as_cost

    model = as_cost(cost)
    each = [model.cost_of(length) for length in lengths]
    if not each:
        return 0
    return len(each) * max(each) if model.kind == "padded" else sum(each)


def _rows(lengths: list[int], max_length: int) -> list[list[int]]:
    from samplers.tokens.packing import row_starts

    starts = row_starts(lengths, max_length)
    ends = [*starts[1:], len(lengths)]
    return [lengths[a:b] for a, b in zip(starts, ends, strict=True)]


@guarantee(
    "within-budget",
    "every batch is within the sampler's budget, computed exactly (Python integers): its "
    "cost at most max_tokens under its cost model, or its rows at most rows_per_batch of "
    "at most max_length tokens each; a single sample may exceed it",
)
def within_budget(factory: Factory, configuration: Configuration) -> None:
    """Every rank's batches, each checked against the sampler's own budget."""
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        lengths = getattr(sampler, "lengths", None)
        if lengths is None:
            raise Unsupported("the sampler has no lengths (not a token or packed sampler)")
        values = [int(length) for length in lengths]
        set_epoch(sampler, configuration.epoch)
        for number, batch in enumerate(iterate(sampler)):
            if not isinstance(batch, list):
                raise Unsupported("the sampler yields indices, not batches")
            sizes = [values[i] for i in batch]
            if len(sizes) <= 1:
                continue
            failure = _over(sampler, sizes)
            if failure is not None:
                raise Failure(
                    rank,
                    configuration.epoch,
                    f"batch {number} ({len(sizes)} samples, lengths {sizes[:6]}"
                    f"{' ...' if len(sizes) > 6 else ''}) {failure}",
                    "a step holds more than the budget the user set: out of memory, or a "
                    "step far slower than the others",
                    {"batch": number},
                )


def _over(sampler: Any, sizes: list[int]) -> str | None:
    """What exceeds the sampler's budget in a batch of ``sizes``, or ``None``."""
    if hasattr(sampler, "max_length") and hasattr(sampler, "rows_per_batch"):
        rows = _rows(sizes, int(sampler.max_length))
        if len(rows) > sampler.rows_per_batch:
            return f"makes {len(rows)} rows, more than rows_per_batch={sampler.rows_per_batch}"
        for row in rows:
            if len(row) > 1 and sum(row) > sampler.max_length:
                return f"has a row of {sum(row)} tokens, more than max_length={sampler.max_length}"
        return None
    if hasattr(sampler, "max_tokens") and hasattr(sampler, "cost"):
        from samplers.tokens.cost import as_cost

        model = as_cost(sampler.cost)
        budget = model.budget(int(sampler.max_tokens))
        cost = batch_cost(model, sizes)
        if cost > budget:
            return (
                f"costs {cost} under {model.label!r}, more than the budget {budget} "
                f"(max_tokens={sampler.max_tokens}): {cost / budget:.4g} times it"
            )
        return None
    raise Unsupported("the sampler has no max_tokens and cost, or max_length and rows_per_batch")
