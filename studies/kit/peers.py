"""The samplers the guarantee matrix compares, as factories for :mod:`samplers.testing`.

Ours in every mode, torch's ``DistributedSampler`` and the samplers of torchdata,
Lightning, accelerate and mmengine (the ``peers`` extra), each built the way its users
build it for rank ``rank`` of ``num_replicas``. Every factory is a module-level function,
so the kit can also rebuild it in a fresh process. A peer library is imported only inside
its factory; the guarantee matrix requires the ``peers`` extra before it starts
(:func:`studies.common.extras.require`), so a missing peer fails it with a message naming the
extra instead of changing what it shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
from torch.utils.data import BatchSampler, SubsetRandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

__all__ = ["COLUMNS", "Column"]


def _seeded_random(dataset: Any, seed: int) -> SubsetRandomSampler:
    """A random sampler seeded identically on every rank: the order ``RandomSampler``
    draws (one ``randperm`` from the generator), also for an empty dataset, which
    ``RandomSampler`` refuses."""
    return SubsetRandomSampler(range(len(dataset)), generator=torch.Generator().manual_seed(seed))


def torch_pad(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return StockSampler(dataset, num_replicas, rank, seed=seed)


def torch_drop(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return StockSampler(dataset, num_replicas, rank, seed=seed, drop_last=True)


def ours_pad(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="pad")


def ours_drop(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="drop")


def ours_uneven(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="uneven")


def ours_feistel(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, permutation="feistel")


def ours_batches_pad(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    return DistributedBatchSampler(dataset, batch_size, num_replicas, rank, seed=seed, tail="pad")


def ours_batches_drop(
    dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int
) -> Any:
    return DistributedBatchSampler(dataset, batch_size, num_replicas, rank, seed=seed, tail="drop")


def ours_batches_uneven(
    dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int
) -> Any:
    return DistributedBatchSampler(
        dataset, batch_size, num_replicas, rank, seed=seed, tail="uneven"
    )


#: The longest sample of :func:`ours_tokens`' lengths, in tokens.
LONGEST = 4


def token_lengths(size: int) -> list[int]:
    """The lengths the token sampler is checked with: 1 to :data:`LONGEST` tokens,
    varied along the dataset (``1 + 7 * i mod 4``)."""
    return [1 + (7 * i) % LONGEST for i in range(size)]


def ours_tokens(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    """The token sampler with its defaults, a budget of ``batch_size`` samples of the
    longest length (``LONGEST * batch_size`` tokens, padded cost)."""
    return DistributedTokenBatchSampler(
        token_lengths(len(dataset)), LONGEST * batch_size, num_replicas, rank, seed=seed
    )


def ours_wrapper(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSamplerWrapper(_seeded_random(dataset, seed), num_replicas, rank, seed=seed)


def torchdata_stateful(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    return StatefulDistributedSampler(dataset, num_replicas, rank, seed=seed)


def lightning_unrepeated(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    return UnrepeatedDistributedSampler(dataset, num_replicas=num_replicas, rank=rank, seed=seed)


def lightning_wrapper(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper as Wrapper

    return Wrapper(_seeded_random(dataset, seed), num_replicas=num_replicas, rank=rank, seed=seed)


def _accelerate(
    dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int, even: bool
) -> Any:
    from accelerate.data_loader import BatchSamplerShard

    batches = BatchSampler(_seeded_random(dataset, seed), batch_size, drop_last=False)
    return BatchSamplerShard(
        batches, num_processes=num_replicas, process_index=rank, even_batches=even
    )


def accelerate_even(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    return _accelerate(dataset, num_replicas, rank, seed, batch_size, True)


def accelerate_uneven(
    dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int
) -> Any:
    return _accelerate(dataset, num_replicas, rank, seed, batch_size, False)


def _mmengine(dataset: Any, num_replicas: int, rank: int, seed: int, round_up: bool) -> Any:
    from mmengine.dataset import sampler as module

    # DefaultSampler reads the rank and world size from the process group.
    with mock.patch.object(module, "get_dist_info", return_value=(rank, num_replicas)):
        return module.DefaultSampler(dataset, shuffle=True, seed=seed, round_up=round_up)


def mmengine_round_up(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return _mmengine(dataset, num_replicas, rank, seed, True)


def mmengine_no_round_up(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return _mmengine(dataset, num_replicas, rank, seed, False)


@dataclass(frozen=True)
class Column:
    """One sampler of the matrix: its heading, what it is, its factory, the distribution
    that provides it (empty for ours), and the guarantees it does not promise, each with
    the reason (the kit still checks them; the matrix shows them as not applying)."""

    name: str
    what: str
    factory: Callable[..., Any]
    distribution: str = ""
    not_applicable: tuple[tuple[str, str], ...] = ()


#: The matrix's columns, in order.
COLUMNS: tuple[Column, ...] = (
    Column(
        "torch",
        "torch.utils.data.distributed.DistributedSampler",
        torch_pad,
        distribution="torch",
    ),
    Column("torch drop_last", "the same, drop_last=True", torch_drop, distribution="torch"),
    Column("ours pad", 'samplers.DistributedSampler, tail="pad" (the default)', ours_pad),
    Column("ours drop", 'samplers.DistributedSampler, tail="drop"', ours_drop),
    Column("ours uneven", 'samplers.DistributedSampler, tail="uneven"', ours_uneven),
    Column(
        "ours feistel",
        'samplers.DistributedSampler, permutation="feistel"',
        ours_feistel,
    ),
    Column("ours batches pad", 'samplers.DistributedBatchSampler, tail="pad"', ours_batches_pad),
    Column("ours batches drop", 'samplers.DistributedBatchSampler, tail="drop"', ours_batches_drop),
    Column(
        "ours batches uneven",
        'samplers.DistributedBatchSampler, tail="uneven"',
        ours_batches_uneven,
    ),
    Column(
        "ours tokens",
        'samplers.DistributedTokenBatchSampler with its defaults (tail="uneven"), a budget of '
        f"{LONGEST} x B tokens (padded cost) over lengths of 1 to {LONGEST} tokens",
        ours_tokens,
        not_applicable=(
            (
                "equal-length-across-ranks",
                "a token budget balances tokens per step: ranks get the same number of "
                "batches, not of samples",
            ),
            (
                "no-tiny-batch",
                "a token budget, not the batch size, decides how many samples a batch holds",
            ),
        ),
    ),
    Column(
        "ours wrapper",
        "samplers.DistributedSamplerWrapper over a RandomSampler seeded alike on every rank",
        ours_wrapper,
    ),
    Column(
        "torchdata",
        "torchdata.stateful_dataloader.sampler.StatefulDistributedSampler",
        torchdata_stateful,
        distribution="torchdata",
    ),
    Column(
        "Lightning unrepeated",
        "lightning.pytorch.overrides.distributed.UnrepeatedDistributedSampler",
        lightning_unrepeated,
        distribution="lightning",
    ),
    Column(
        "Lightning wrapper",
        "lightning.fabric.utilities.distributed.DistributedSamplerWrapper over a RandomSampler "
        "seeded alike on every rank",
        lightning_wrapper,
        distribution="lightning",
    ),
    Column(
        "accelerate even",
        "accelerate.data_loader.BatchSamplerShard, even_batches=True, over a BatchSampler of a "
        "RandomSampler seeded alike on every rank",
        accelerate_even,
        distribution="accelerate",
    ),
    Column(
        "accelerate uneven",
        "the same, even_batches=False",
        accelerate_uneven,
        distribution="accelerate",
    ),
    Column(
        "mmengine round_up",
        "mmengine.dataset.DefaultSampler, round_up=True (the default)",
        mmengine_round_up,
        distribution="mmengine",
    ),
    Column(
        "mmengine no round_up",
        "mmengine.dataset.DefaultSampler, round_up=False",
        mmengine_no_round_up,
        distribution="mmengine",
    ),
)
