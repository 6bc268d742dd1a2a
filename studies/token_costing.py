"""Token batches under a cost model: padded, quadratic and packed, run and measured.

Each sampler is run on every rank of ``W`` and gives ``shares[rank][step]`` (a batch of
dataset indices); :func:`measure` reduces one epoch to the numbers the finding compares,
under the step model of :mod:`studies.token_batching` (:class:`StepModel`), whose
attention term is lhotse's quadratic cost with ``q = 1 / per_square``
(:data:`QUADRATIC`):

* ``padded``: :class:`samplers.DistributedTokenBatchSampler`, ``cost="padded"``;
* ``quadratic``: the same under ``TokenCost("padded", quadratic=QUADRATIC)`` with the
  budget :func:`quadratic_budget` (what a batch of ``max_tokens / context`` samples of the
  context length costs under it, so the same fullest batch fits both budgets);
* ``packed``: :class:`samplers.DistributedPackedBatchSampler` with rows of the context
  length, ``max_tokens / context`` rows per batch, ``TokenCost("sum", quadratic=...)``;
* ``fixed``: torch's ``DistributedSampler`` with the largest fixed batch size that never
  exceeds ``max_tokens`` (``max_tokens / context``).

A packed batch is processed as its rows (``rows x max_length`` tokens through the linear
layers) with attention within each sample (``sum of d²``); a padded batch as ``count x
longest`` tokens with attention over each padded row (``count x longest²``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedPackedBatchSampler, DistributedTokenBatchSampler, TokenCost
from samplers.tokens.packing import row_starts
from studies.token_batching import Shares, StepModel

__all__ = ["QUADRATIC", "SAMPLERS", "measure", "quadratic_budget", "resumes_elsewhere"]

#: ``q`` of the quadratic cost: the step model's ``1 / per_square`` (width 1024 x 6).
QUADRATIC = round(1 / StepModel().per_square)


def quadratic_budget(max_tokens: int, context: int) -> int:
    """The quadratic budget in which ``max_tokens / context`` samples of ``context`` fit:
    ``ceil(max_tokens x (1 + context / q))``."""
    return -(-max_tokens * (QUADRATIC + context) // QUADRATIC)


def _quiet(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return make()


def _listed(sampler: Any) -> Any:
    """One epoch of ``sampler`` (its warnings, e.g. of over-long samples, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return list(sampler)


def _build(
    key: str, lengths: torch.Tensor, world: int, rank: int, seed: int, max_tokens: int, context: int
) -> Any:
    rows = max_tokens // context
    if key == "padded":
        return _quiet(
            lambda: DistributedTokenBatchSampler(lengths, max_tokens, world, rank, seed=seed)
        )
    if key == "quadratic":
        cost = TokenCost("padded", quadratic=QUADRATIC)
        budget = quadratic_budget(max_tokens, context)
        return _quiet(
            lambda: DistributedTokenBatchSampler(lengths, budget, world, rank, seed=seed, cost=cost)
        )
    if key == "packed":
        cost = TokenCost("sum", quadratic=QUADRATIC)
        return _quiet(
            lambda: DistributedPackedBatchSampler(
                lengths, context, rows, world, rank, seed=seed, cost=cost
            )
        )
    raise ValueError(f"unknown sampler {key!r}")


def _epoch(
    key: str,
    lengths: torch.Tensor,
    world: int,
    epoch: int,
    seed: int,
    max_tokens: int,
    context: int,
) -> Shares:
    if key == "fixed":
        size = max_tokens // context
        shares = []
        for rank in range(world):
            dataset: Any = range(lengths.numel())
            stock: StockSampler[int] = StockSampler(dataset, world, rank, seed=seed)
            stock.set_epoch(epoch)
            indices = list(stock)
            shares.append([indices[i : i + size] for i in range(0, len(indices), size)])
        return shares
    shares = []
    for rank in range(world):
        sampler = _build(key, lengths, world, rank, seed, max_tokens, context)
        sampler.set_epoch(epoch)
        shares.append(_listed(sampler))
    return shares


#: The samplers by key: ``(lengths, world, epoch, seed, max_tokens, context) -> shares``.
SAMPLERS: dict[str, Callable[..., Shares]] = {
    key: (lambda *arguments, key=key: _epoch(key, *arguments))
    for key in ("padded", "quadratic", "packed", "fixed")
}


def resumes_elsewhere(
    key: str,
    lengths: torch.Tensor,
    world: int,
    other: int,
    seed: int,
    max_tokens: int,
    context: int,
) -> str:
    """``"yes"`` when an epoch stopped at half its steps on ``world`` ranks and resumed on
    ``other`` ranks sees every sample exactly once, ``"no"`` otherwise, ``"no state"`` for
    a sampler without one."""
    if key == "fixed":
        return "no state"
    first = [_build(key, lengths, world, rank, seed, max_tokens, context) for rank in range(world)]
    steps = len(first[0]) // 2
    iterators = [iter(sampler) for sampler in first]
    seen = [i for it in iterators for _ in range(steps) for i in next(it)]
    state = first[0].state_dict()
    for rank in range(other):
        sampler = _build(key, lengths, other, rank, seed, max_tokens, context)
        sampler.load_state_dict(state)
        seen += [i for batch in _listed(sampler) for i in batch]
    return "yes" if sorted(seen) == list(range(lengths.numel())) else "no"


def _processed(
    key: str, values: list[int], batch: list[int], context: int
) -> tuple[int, float, bool]:
    """(tokens processed, attention term d²/q summed, over the sampler's own limit)."""
    lengths = [values[i] for i in batch]
    if not lengths:
        return 0, 0.0, False
    if key == "packed":
        starts = row_starts(lengths, context)
        ends = [*starts[1:], len(lengths)]
        rows = [sum(lengths[a:b]) for a, b in zip(starts, ends, strict=True)]
        over = any(r > context and b - a > 1 for r, a, b in zip(rows, starts, ends, strict=True))
        return len(rows) * context, sum(d * d for d in lengths) / QUADRATIC, over
    longest = max(lengths)
    return len(lengths) * longest, len(lengths) * longest**2 / QUADRATIC, False


def measure(
    key: str,
    lengths: torch.Tensor,
    shares: Shares,
    max_tokens: int,
    context: int,
    model: StepModel | None = None,
) -> dict[str, Any]:
    """One epoch's numbers for sampler ``key`` (under ``model``, default ``StepModel()``)."""
    model = model or StepModel()
    values = lengths.tolist()
    steps = max((len(share) for share in shares), default=0)
    real = processed = over = 0
    worst = mean = worst_time = mean_time = epoch_time = 0.0
    quadratic = quadratic_budget(max_tokens, context)
    for step in range(steps):
        tokens, weighted, times = [], [], []
        for share in shares:
            batch = share[step] if step < len(share) else []
            done, attention, beyond = _processed(key, values, batch, context)
            real += sum(values[i] for i in batch)
            processed += done
            if key == "quadratic":
                beyond = len(batch) > 1 and done + attention > quadratic
            elif key != "packed":
                beyond = len(batch) > 1 and done > max_tokens
            over += beyond
            tokens.append(done)
            weighted.append(done + attention)
            times.append(model.overhead + model.per_token * done + attention if batch else 0.0)
        worst += max(tokens)
        mean += sum(tokens) / len(tokens)
        worst_time += max(weighted)
        mean_time += sum(weighted) / len(weighted)
        epoch_time += max(times)
    seen = torch.bincount(
        torch.tensor([i for share in shares for batch in share for i in batch], dtype=torch.int64),
        minlength=len(values),
    )
    return {
        "steps": steps,
        "equal batch counts": "yes" if len({len(share) for share in shares}) == 1 else "no",
        "efficiency": real / processed if processed else 1.0,
        "straggler ratio, tokens": worst / mean if mean else 1.0,
        "straggler ratio, with attention": worst_time / mean_time if mean_time else 1.0,
        "batches over its limit": over,
        "simulated epoch time": epoch_time,
        "samples repeated": int((seen - 1).clamp(min=0).sum()),
        "samples not seen": int((seen == 0).sum()),
    }
