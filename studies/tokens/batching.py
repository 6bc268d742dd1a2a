"""Four ways to batch variable-length samples over ranks, run side by side and measured.

Each sampler is run as its users run it, on every rank of ``W``, and gives what each rank
receives per step (``shares[rank][step]`` is a batch of dataset indices):

* ``ours``: :class:`samplers.DistributedTokenBatchSampler` under ``max_tokens``;
* ``stock``: torch's ``DistributedSampler`` with a fixed batch size (a DataLoader's
  batching of the rank's share, the last batch kept);
* ``length-grouped``: transformers' ``DistributedLengthGroupedSampler`` with the same
  fixed batch size (optional peer: ``None`` when transformers is not installed);
* ``sorted-by-size``: the fairseq recipe, written here from its idea: sort the dataset by
  length (ties in a random order drawn once), cut it greedily into batches under
  ``max_tokens`` (padded cost), shuffle the batches each epoch with ``seed + epoch`` and
  deal them round-robin, batch ``i`` to rank ``i mod W``; a rank left without a batch at
  the last step has none (fairseq pads its shard with an empty batch).

:func:`measure` reduces one epoch to the numbers the finding compares.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedTokenBatchSampler

__all__ = [
    "SAMPLERS",
    "Shares",
    "StepModel",
    "batch_size_like",
    "length_grouped",
    "measure",
    "order_change",
    "ours",
    "sorted_by_size",
    "step_balance",
    "stock",
]

#: ``shares[rank][step]``: the batch (dataset indices) a rank takes at a step.
Shares = list[list[list[int]]]


@dataclass(frozen=True)
class StepModel:
    """Simulated time of one rank's step: ``overhead + per_token * tokens + per_square *
    sum of squared lengths``, in the time one token takes, for a batch padded to its
    longest sample (``tokens`` = count x longest, each row ``longest`` long).

    The defaults picture a transformer of width 1024: attention costs about
    ``length / (6 * width)`` of the linear layers' work per token, and a step has a fixed
    overhead worth 1000 tokens (optimizer, kernel launches, the all-reduce's latency).
    """

    overhead: float = 1000.0
    per_token: float = 1.0
    per_square: float = 1.0 / 6144

    def time(self, count: int, longest: int) -> float:
        if count == 0:
            return 0.0
        return (
            self.overhead + self.per_token * count * longest + self.per_square * count * longest**2
        )


# The samplers ---------------------------------------------------------------------------


def ours(lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int) -> Shares:
    shares = []
    for rank in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            sampler = DistributedTokenBatchSampler(lengths, max_tokens, world, rank, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def _batched(indices: Sequence[int], batch_size: int) -> list[list[int]]:
    return [list(indices[i : i + batch_size]) for i in range(0, len(indices), batch_size)]


def stock(lengths: torch.Tensor, world: int, epoch: int, seed: int, batch_size: int) -> Shares:
    shares = []
    for rank in range(world):
        sampler: StockSampler[int] = StockSampler(range(lengths.numel()), world, rank, seed=seed)  # type: ignore[arg-type]
        sampler.set_epoch(epoch)
        shares.append(_batched(list(sampler), batch_size))
    return shares


def length_grouped(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, batch_size: int
) -> Shares | None:
    """transformers' sampler, or ``None`` when transformers is not installed."""
    if importlib.util.find_spec("transformers") is None:
        return None
    from transformers.trainer_pt_utils import DistributedLengthGroupedSampler

    values = lengths.tolist()
    shares = []
    for rank in range(world):
        sampler = DistributedLengthGroupedSampler(
            batch_size, num_replicas=world, rank=rank, seed=seed, lengths=values
        )
        sampler.set_epoch(epoch)
        shares.append(_batched(list(sampler), batch_size))
    return shares


def greedy_batches(sizes: Sequence[int], max_tokens: int) -> list[tuple[int, int]]:
    """Cut lengths sorted ascending into ``[lo, hi)`` batches whose padded cost (the last,
    longest length times the count) stays within ``max_tokens`` (a longer one alone)."""
    batches, lo = [], 0
    for hi, size in enumerate(sizes):
        if hi > lo and size * (hi - lo + 1) > max_tokens:
            batches.append((lo, hi))
            lo = hi
    if lo < len(sizes):
        batches.append((lo, len(sizes)))
    return batches


def sorted_by_size(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int
) -> Shares:
    ties = torch.randperm(lengths.numel(), generator=torch.Generator().manual_seed(seed))
    order = ties[torch.argsort(lengths[ties], stable=True)].tolist()
    sizes = lengths[order].tolist()
    batches = [order[lo:hi] for lo, hi in greedy_batches(sizes, max_tokens)]
    shuffled = torch.randperm(len(batches), generator=torch.Generator().manual_seed(seed + epoch))
    dealt = [batches[i] for i in shuffled.tolist()]
    return [dealt[rank::world] for rank in range(world)]


#: The samplers by name: ``(lengths, world, epoch, seed, max_tokens, batch_size)``.
SAMPLERS: dict[str, Callable[..., Shares | None]] = {
    "ours": lambda lengths, world, epoch, seed, tokens, size: ours(
        lengths, world, epoch, seed, tokens
    ),
    "stock": lambda lengths, world, epoch, seed, tokens, size: stock(
        lengths, world, epoch, seed, size
    ),
    "length-grouped": lambda lengths, world, epoch, seed, tokens, size: length_grouped(
        lengths, world, epoch, seed, size
    ),
    "sorted-by-size": lambda lengths, world, epoch, seed, tokens, size: sorted_by_size(
        lengths, world, epoch, seed, tokens
    ),
}


def batch_size_like(shares: Shares) -> int:
    """The fixed batch size nearest ours' mean samples per batch (rounded: about, not
    exactly, the same mean tokens per step)."""
    batches = [batch for share in shares for batch in share]
    return max(1, round(sum(map(len, batches)) / len(batches)))


# Measurements ---------------------------------------------------------------------------


def measure(
    lengths: torch.Tensor, shares: Shares, max_tokens: int, model: StepModel = StepModel()
) -> dict[str, float | int | bool]:
    """One epoch's numbers: steps, counts, padding, balance, budget, simulated time."""
    values = lengths.tolist()
    steps = max((len(share) for share in shares), default=0)
    real = padded = over = largest = 0
    worst_cost = mean_cost = epoch_time = 0.0
    for step in range(steps):
        costs, times = [], []
        for share in shares:
            batch = share[step] if step < len(share) else []
            longest = max((values[i] for i in batch), default=0)
            cost = longest * len(batch)
            real += sum(values[i] for i in batch)
            padded += cost
            over += cost > max_tokens
            largest = max(largest, cost)
            costs.append(cost)
            times.append(model.time(len(batch), longest))
        worst_cost += max(costs)
        mean_cost += sum(costs) / len(costs)
        epoch_time += max(times)
    seen = torch.bincount(
        torch.tensor([i for share in shares for batch in share for i in batch], dtype=torch.int64),
        minlength=len(values),
    )
    return {
        "steps": steps,
        "equal batch counts": len({len(share) for share in shares}) == 1,
        "padded efficiency": real / padded if padded else 1.0,
        "straggler ratio": worst_cost / mean_cost if mean_cost else 1.0,
        "batches over max_tokens": over,
        "largest batch / max_tokens": largest / max_tokens,
        "simulated epoch time": epoch_time,
        "samples repeated": int((seen - 1).clamp(min=0).sum()),
        "samples not seen": int((seen == 0).sum()),
    }


def step_balance(lengths: torch.Tensor, shares: Shares) -> list[float]:
    """Each step's slowest rank's padded tokens divided by the ranks' mean."""
    values = lengths.tolist()
    steps = max((len(share) for share in shares), default=0)
    ratios = []
    for step in range(steps):
        costs = [
            max((values[i] for i in share[step]), default=0) * len(share[step])
            if step < len(share)
            else 0
            for share in shares
        ]
        mean = sum(costs) / len(costs)
        ratios.append(max(costs) / mean if mean else 1.0)
    return ratios


def _placement(shares: Shares, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's batch number and position in the epoch (its first appearance)."""
    batch = torch.full((size,), -1, dtype=torch.int64)
    where = torch.full((size,), -1, dtype=torch.int64)
    number = position = 0
    steps = max((len(share) for share in shares), default=0)
    for step in range(steps):
        for share in shares:
            if step >= len(share):
                continue
            indices = torch.tensor(share[step], dtype=torch.int64)
            fresh = indices[batch[indices] < 0]
            batch[fresh] = number
            where[fresh] = torch.arange(position, position + fresh.numel())
            number += 1
            position += fresh.numel()
    return batch, where


def order_change(first: Shares, second: Shares, size: int) -> dict[str, float]:
    """How much two epochs differ: of the pairs of samples sharing a batch in ``first``,
    the fraction sharing one again in ``second``; and the correlation of the samples'
    positions in the two epochs (1: the same order, 0: unrelated)."""
    batch_one, place_one = _placement(first, size)
    batch_two, place_two = _placement(second, size)
    both = (batch_one >= 0) & (batch_two >= 0)
    one, two = batch_one[both], batch_two[both]

    def pairs(keys: torch.Tensor) -> int:
        counts = torch.unique(keys, return_counts=True)[1]
        return int((counts * (counts - 1) // 2).sum())

    together = pairs(one)
    kept = pairs(one * (int(two.max()) + 1 if two.numel() else 1) + two)
    ranks = torch.stack([place_one[both], place_two[both]]).to(torch.float64)
    correlation = float(torch.corrcoef(ranks)[0, 1]) if ranks.shape[1] > 1 else 1.0
    return {
        "batch-mate pairs kept": kept / together if together else 0.0,
        "position correlation": correlation,
    }
