"""Mixing samplers for the kit's mixture guarantees: ours, a deliberately wrong one, and
two peers' ways of mixing (``tests/test_kit_mixtures.py`` runs the search on each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import ConcatDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSamplerWrapper,
)
from samplers.mixture.checks import checked_weights
from samplers.mixture.order import MixtureOrder
from samplers.mixture.schedule import Schedule, parts


def ours(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedMixtureSampler(
        datasets, weights, num_replicas, rank, seed=seed, tail="uneven"
    )


def ours_batches(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedMixtureBatchSampler(
        datasets, weights, 2, num_replicas, rank, seed=seed, tail="uneven"
    )


def ours_tokens_window1(
    datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """The token mixture where draws are tokens (every sample 3 long) and a window is one
    sample (batches of one, in stream order): its draws merged by tokens over weight,
    every guarantee but the draws' quota per step (within half a sample of a level)."""
    lengths = [3] * sum(len(d) for d in datasets)
    return DistributedMixtureTokenBatchSampler(
        datasets, weights, lengths, 4, num_replicas, rank, seed=seed, window=1
    )


def ours_packed_window1(
    datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """The packed mixture with weights in samples and a window of one draw (each batch
    one row of one document, in stream order): every mixture guarantee, per step."""
    lengths = [3] * sum(len(d) for d in datasets)
    return DistributedPackedMixtureSampler(
        datasets,
        weights,
        lengths,
        4,
        1,
        num_replicas,
        rank,
        seed=seed,
        window=1,
        weights_in="samples",
    )


def ours_packed(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    """The packed mixture on lengths from 1 to 40 in rows of 48, weights in tokens,
    default windows: elastic resume, once per pass. (With ``split=`` it would yield
    piece ids, not the indices into ``ConcatDataset(datasets)`` a mixing factory
    yields.)"""
    lengths = [(i * 7919) % 40 + 1 for i in range(sum(len(d) for d in datasets))]
    return DistributedPackedMixtureSampler(
        datasets, weights, lengths, 48, 2, num_replicas, rank, seed=seed
    )


def ours_tokens(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    """The token mixture on lengths from 1 to 40 in default windows (sorted by length):
    its steps are not prefixes of the stream, so only elastic resume applies per step."""
    lengths = [(i * 7919) % 40 + 1 for i in range(sum(len(d) for d in datasets))]
    return DistributedMixtureTokenBatchSampler(
        datasets, weights, lengths, 64, num_replicas, rank, seed=seed
    )


def ours_tokens_lengths_window1(
    datasets: Any, weights: Any, lengths: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """The token mixture on the kit's lengths, a window of one draw (a batch of one
    sample, in stream order): its steps are prefixes of its stream."""
    return DistributedMixtureTokenBatchSampler(
        datasets, weights, lengths, 64, num_replicas, rank, seed=seed, window=1
    )


def ours_packed_lengths_window1(
    datasets: Any, weights: Any, lengths: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """The packed mixture on the kit's lengths, weights in tokens, a window of one draw
    (a batch of one row of one document, in stream order)."""
    return DistributedPackedMixtureSampler(
        datasets, weights, lengths, 64, 1, num_replicas, rank, seed=seed, window=1
    )


def ours_tokens_lengths(
    datasets: Any, weights: Any, lengths: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """The token mixture on the kit's lengths in default windows (sorted by length)."""
    return DistributedMixtureTokenBatchSampler(
        datasets, weights, lengths, 64, num_replicas, rank, seed=seed
    )


def samples_for_tokens(
    datasets: Any, weights: Any, lengths: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """Wrong for weights counting tokens: the mixture of samples, given the lengths and
    ignoring them (each source's share of the draws is its weight's)."""
    del lengths
    return DistributedMixtureSampler(
        datasets, weights, num_replicas, rank, seed=seed, tail="uneven"
    )


def stock_for_tokens(
    datasets: Any, weights: Any, lengths: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """``ConcatDataset`` and the stock sampler, given weights and lengths it cannot use."""
    del weights, lengths
    return StockSampler(ConcatDataset(datasets), num_replicas, rank, seed=seed)


class PeriodCheckedStates(DistributedMixtureTokenBatchSampler):
    """Wrong on purpose: the check of a loaded schedule before the fix, against the
    draws' parts (in lowest terms, summing to at most the period of 65536), which refused
    the token mixture's own states once its token parts passed that."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for _, found in state_dict["schedule"]:
            if parts(found) != tuple(found):
                raise ValueError(f"state field 'schedule' must be ... got the parts {found}")
        super().load_state_dict(state_dict)


def period_checked_states(
    datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    lengths = [(i * 7919) % 40 + 1 for i in range(sum(len(d) for d in datasets))]
    return PeriodCheckedStates(datasets, weights, lengths, 64, num_replicas, rank, seed=seed)


@dataclass(frozen=True)
class _RestartedOrder(MixtureOrder):
    restart: int = 0

    @property
    def first(self) -> int:
        return self.epoch * self.length - self.restart


class Restarting(DistributedMixtureSampler):
    """Wrong on purpose: ``set_weights`` starts the stream again from its beginning at the
    current position, with the new weights, so every source restarts its first pass (what
    rebuilding a sampler with new weights does)."""

    restart = 0

    def set_weights(self, weights: Any) -> None:
        values = checked_weights(weights, len(self.sizes))
        current = self.state_dict()
        self.restart = current["epoch"] * self.epoch_length + current["position"]
        self.schedule = Schedule.of(parts(values))
        self.weights = values
        self.load_state_dict(self.state_dict_with(current))

    def _mixture_order(self) -> MixtureOrder:
        order = super()._mixture_order()
        return _RestartedOrder(
            order.sizes,
            order.schedule,
            order.seed,
            order.shuffle,
            order.epoch,
            order.length,
            self.restart,
        )


def wrong_restarting(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return Restarting(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")


def peer_weighted_random(
    datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    """torch's ``WeightedRandomSampler`` (each sample weighted by its source's weight over
    the source's size) sharded by our ``DistributedSamplerWrapper``."""
    per_sample = [w / len(d) for d, w in zip(datasets, weights, strict=True) for _ in d]
    generator = torch.Generator().manual_seed(seed)
    sampler = WeightedRandomSampler(per_sample, len(per_sample), generator=generator)
    return DistributedSamplerWrapper(sampler, num_replicas, rank, seed=seed, tail="uneven")


def peer_concat_stock(datasets: Any, num_replicas: int, rank: int, seed: int) -> Any:
    """``ConcatDataset`` and the stock ``DistributedSampler`` (the weights cannot be given)."""
    return StockSampler(ConcatDataset(datasets), num_replicas, rank, seed=seed)


def _rounded_to_zero(weights: Any) -> tuple[int, ...]:
    """The parts of the rounding before the fix: the parts the minimum of 1 added are
    taken back one from each of the largest sources, which reaches sources of one part."""
    from samplers.mixture.schedule import MAX_PERIOD, fraction

    fractions = [fraction(w) for w in weights]
    total = sum(fractions)
    if all((f / total * MAX_PERIOD).denominator == 1 for f in fractions):
        return parts(weights)
    scaled = [f / total * MAX_PERIOD for f in fractions]
    floors = [max(int(v), 1 if v > 0 else 0) for v in scaled]
    left = MAX_PERIOD - sum(floors)
    if left >= 0:
        for d in sorted(range(len(scaled)), key=lambda d: -(scaled[d] - floors[d]))[:left]:
            floors[d] += 1
    else:
        for d in sorted(range(len(scaled)), key=lambda d: (-floors[d], d))[:-left]:
            floors[d] -= 1
    return tuple(floors)


class RoundingToZero(DistributedMixtureSampler):
    """Wrong on purpose: the rounding of large weight ratios before the fix, which gave a
    small positive weight 0 parts (a source silently never drawn)."""

    def _parts(self, weights: Any) -> tuple[int, ...]:
        return _rounded_to_zero(weights)


def rounding_to_zero(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return RoundingToZero(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")


class ReweightRaises(DistributedMixtureSampler):
    """Mixes right, but ``set_weights`` raises (builds and runs every mixture: the error
    is the reweighting guarantee's)."""

    def set_weights(self, weights: Any) -> None:
        raise RuntimeError("no new weights")


def reweight_raises(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return ReweightRaises(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")


class RankStates(DistributedMixtureSampler):
    """Mixes and resumes right from rank 0's state, but every other rank's state counts
    one draw fewer (a per-rank count where the position is global)."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.rank and state["position"] and not state["finished"]:
            state["position"] -= 1
        return state


def rank_states(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return RankStates(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")


class RevertsWeights(DistributedMixtureSampler):
    """Reweights right within the epoch, but ``set_epoch`` goes back to the weights it was
    built with (a schedule kept per epoch)."""

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        self._built_with = list(self.weights)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch and list(self.weights) != self._built_with:
            super().set_weights(self._built_with)
        super().set_epoch(epoch)


def reverts_weights(datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return RevertsWeights(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")


class DriftsAfterEpoch0(DistributedMixtureSampler):
    """Exact in epoch 0; from epoch 1 on, every draw of one source in nine becomes source
    0's (a schedule rebuilt per epoch with a rounding error)."""

    def __iter__(self) -> Any:
        for n, index in enumerate(super().__iter__()):
            yield index if self.epoch == 0 or n % 9 != 8 else index % self.sizes[0]


def drifts_after_epoch_0(
    datasets: Any, weights: Any, num_replicas: int, rank: int, seed: int
) -> Any:
    return DriftsAfterEpoch0(datasets, weights, num_replicas, rank, seed=seed, tail="uneven")
