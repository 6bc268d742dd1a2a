"""The token samplers under each cost model, and the packed sampler, as the guarantee kit
builds them (``MODULE:FACTORY`` factories: ``dsampler check kit_tokens:packed_uneven``
with ``tests`` on the path), and the token mixture with each source weighted by its
tokens (``mixture_uneven``, ``mixture_pad``).

The kit passes ``range(dataset_size)``; the lengths are derived from the dataset size, a
long-tailed spread from 1 to 300 tokens, so batches and rows hold from one sample to
dozens.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from samplers import (
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedTokenBatchSampler,
    TokenCost,
)
from samplers.tokens.arrays import follow
from samplers.tokens.order import TokenOrder


def lengths_of(dataset: Any) -> list[int]:
    return [(index * 7919) % 300 // (1 + (index % 5)) + 1 for index in range(len(dataset))]


def flops(lengths: torch.Tensor) -> torch.Tensor:
    """A named per-sample cost: linear layers plus attention, in units of 64 tokens."""
    return (lengths * 64 + lengths * lengths) // 64


QUADRATIC = TokenCost("padded", quadratic=32)
SUMMED = TokenCost("sum", quadratic=32)
NAMED = TokenCost("padded", per_sample=flops, name="flops")


def _tokens(dataset: Any, num_replicas: int, rank: int, seed: int, cost: Any, tail: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedTokenBatchSampler(
            lengths_of(dataset), 512, num_replicas, rank, seed=seed, cost=cost, tail=tail
        )


def _packed(dataset: Any, num_replicas: int, rank: int, seed: int, tail: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedPackedBatchSampler(
            lengths_of(dataset), 256, 2, num_replicas, rank, seed=seed, cost=SUMMED, tail=tail
        )


def quadratic_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, QUADRATIC, "uneven")


def quadratic_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, QUADRATIC, "pad")


def summed_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, SUMMED, "uneven")


def summed_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, SUMMED, "pad")


def named_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, NAMED, "uneven")


def named_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _tokens(dataset, num_replicas, rank, seed, NAMED, "pad")


def packed_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _packed(dataset, num_replicas, rank, seed, "uneven")


def packed_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _packed(dataset, num_replicas, rank, seed, "pad")


def _mixture(dataset: Any, num_replicas: int, rank: int, seed: int, tail: str) -> Any:
    """The dataset cut into up to 3 sources, each weighted by its tokens: drawn in
    proportion to its size, so an epoch is every sample once."""
    size = len(dataset)
    sizes = [n for n in (size - 2 * (size // 3), size // 3, size // 3) if n]
    lengths = lengths_of(dataset)
    starts = [sum(sizes[:d]) for d in range(len(sizes))]
    weights = [sum(lengths[s : s + n]) for s, n in zip(starts, sizes, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedMixtureTokenBatchSampler(
            [range(n) for n in sizes],
            weights,
            lengths,
            512,
            num_replicas,
            rank,
            seed=seed,
            cost=QUADRATIC,
            tail=tail,
        )


def _packed_mixture(dataset: Any, num_replicas: int, rank: int, seed: int, tail: str) -> Any:
    """The dataset cut into up to 3 sources, each weighted by its tokens, packed into
    rows of 320 (the longest document fits: the items are the dataset's indices)."""
    size = len(dataset)
    sizes = [n for n in (size - 2 * (size // 3), size // 3, size // 3) if n]
    lengths = lengths_of(dataset)
    starts = [sum(sizes[:d]) for d in range(len(sizes))]
    weights = [sum(lengths[s : s + n]) for s, n in zip(starts, sizes, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedPackedMixtureSampler(
            [range(n) for n in sizes],
            weights,
            lengths,
            320,
            2,
            num_replicas,
            rank,
            seed=seed,
            cost=SUMMED,
            tail=tail,
        )


def packed_mixture_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _packed_mixture(dataset, num_replicas, rank, seed, "uneven")


def packed_mixture_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _packed_mixture(dataset, num_replicas, rank, seed, "pad")


def mixture_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _mixture(dataset, num_replicas, rank, seed, "uneven")


def mixture_pad(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return _mixture(dataset, num_replicas, rank, seed, "pad")


#: A cost in "FLOPs": each token 2**53 units; the budget, 256 tokens' worth, is 2**61.
FLOPS_UNIT = 1 << 53
FLOPS = TokenCost("sum", per_sample=lambda t: t * FLOPS_UNIT, name="flops-2**53")


def flops_uneven(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    """Ours under a cost whose sums pass 2**63 within a chunk of a few dozen samples."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedTokenBatchSampler(
            lengths_of(dataset), 256 * FLOPS_UNIT, num_replicas, rank, seed=seed, cost=FLOPS
        )


class _WrappingOrder(TokenOrder):
    """Wrong on purpose: the summed cut of before the fix, whose int64 prefix sums wrap."""

    def _cut(self, lengths: torch.Tensor, local: torch.Tensor, count: int) -> torch.Tensor:
        each = self.model.sample_costs(lengths)
        total = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(each, 0)])
        budget = min(self.model.budget(self.max_tokens), int(total[-1]) + 1)
        reach = torch.searchsorted(total, total[:-1] + budget, right=True) - 1
        return follow(torch.maximum(reach, local + 1), count, self.window)


class Wrapping(DistributedTokenBatchSampler):
    """The token sampler with :class:`_WrappingOrder` (its other planning unchanged)."""

    def order(self) -> TokenOrder:
        found = super().order()
        if not isinstance(found, _WrappingOrder):
            found.__class__ = _WrappingOrder
            found._spans.clear()
        return found


def wrapping_flops(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Wrapping(
            lengths_of(dataset), 256 * FLOPS_UNIT, num_replicas, rank, seed=seed, cost=FLOPS
        )
