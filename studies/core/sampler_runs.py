"""The token, packed and mixture samplers and the wrapper, run per rank as ``explain`` and
``observe`` show them.

:class:`Setup` is one configuration of one of these samplers as the command line gives
it (:data:`KINDS`; the index and batch samplers are :class:`studies.core.cases.Case`'s).
:func:`make_sampler` builds rank ``r``'s sampler, or, with ``from_process_group``, the one
the initialised process group places; :func:`rank_batches` iterates it through a
``DataLoader`` epoch by epoch, as a training loop does (``set_epoch`` before each epoch
unless the setup says not to), and records the sampler's warnings;
:func:`gather_batches` runs that on every rank of a process group and collects the
batches on rank 0. What the batches hold (their tokens, rows and sources) is
:mod:`studies.core.sampler_views`.

Guarantee: every rank of a setup builds its sampler from the setup alone, so a run in
one process (ranks one after another) and a run in real processes hand each rank the
same batches; :func:`draw_lengths` draws the same lengths in every process.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from samplers import (
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
    SamplerWarning,
    TokenCost,
)

__all__ = [
    "CLASSES",
    "INDEX_KINDS",
    "KINDS",
    "MIXTURE_KINDS",
    "PACKED_KINDS",
    "TOKEN_KINDS",
    "Batches",
    "Setup",
    "draw_lengths",
    "gather_batches",
    "item_count",
    "make_sampler",
    "rank_batches",
    "run_in_process",
    "token_cost",
]

#: The samplers a :class:`Setup` runs, by the name ``--sampler`` gives them.
CLASSES: dict[str, type[Any]] = {
    "wrapper": DistributedSamplerWrapper,
    "tokens": DistributedTokenBatchSampler,
    "packed": DistributedPackedBatchSampler,
    "mixture": DistributedMixtureSampler,
    "mixture-batch": DistributedMixtureBatchSampler,
    "mixture-tokens": DistributedMixtureTokenBatchSampler,
    "packed-mixture": DistributedPackedMixtureSampler,
}
KINDS = tuple(CLASSES)
#: Samplers of indices, batched by the DataLoader (``batch_size``); the others are
#: batch samplers (the DataLoader's ``batch_sampler``).
INDEX_KINDS = ("wrapper", "mixture")
#: Samplers under a token budget (``max_tokens``, ``cost``).
TOKEN_KINDS = ("tokens", "mixture-tokens")
#: Samplers of packed rows (``max_length``, ``rows_per_batch``, ``split``).
PACKED_KINDS = ("packed", "packed-mixture")
#: Samplers of several sources mixed by weight (``source_sizes``, ``weights``).
MIXTURE_KINDS = ("mixture", "mixture-batch", "mixture-tokens", "packed-mixture")

#: One rank's batches: (epoch, batch number, indices) for every batch, in order.
Batches = list[tuple[int, int, list[int]]]


@dataclass(frozen=True)
class Setup:
    """One sampler configuration, as ``explain`` and ``observe`` take it.

    ``lengths`` holds one length per sample (per sample of ``ConcatDataset`` over the
    sources for a mixture), for the samplers that take lengths; ``source_sizes`` and
    ``weights`` one entry per source, for a mixture. A field a sampler does not take is
    ``None``; ``tail`` ``None`` is the sampler's default.
    """

    kind: str
    world_size: int
    dataset_size: int
    epochs: int = 2
    shuffle: bool = True
    seed: int = 0
    set_epoch: bool = True
    tail: str | None = None
    batch_size: int | None = None
    loader_drop_last: bool = False
    lengths: tuple[int, ...] | None = None
    #: Where the lengths come from, as ``--lengths`` said it (each given text).
    lengths_from: tuple[str, ...] | None = None
    max_tokens: int | None = None
    cost: str | None = None
    max_length: int | None = None
    rows_per_batch: int | None = None
    split: str | int | None = None
    source_sizes: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None
    weights_in: str | None = None
    epoch_length: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in CLASSES:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def class_name(self) -> str:
        """The sampler's class name."""
        return str(CLASSES[self.kind].__name__)

    def arguments(self) -> dict[str, Any]:
        """The settings that say what the sampler is, for the output (``None`` left out)."""
        names = (
            "world_size",
            "dataset_size",
            "lengths",
            "source_sizes",
            "weights",
            "weights_in",
            "epoch_length",
            "batch_size",
            "max_tokens",
            "max_length",
            "rows_per_batch",
            "split",
            "cost",
            "tail",
            "shuffle",
            "seed",
            "loader_drop_last",
            "set_epoch",
            "epochs",
        )
        values = {name: getattr(self, name) for name in names if name != "lengths"}
        values["source_sizes"] = list(self.source_sizes) if self.source_sizes else None
        values["weights"] = list(self.weights) if self.weights else None
        values["lengths"] = list(self.lengths_from) if self.lengths_from else None
        values = {name: values[name] for name in names}
        if self.kind not in INDEX_KINDS:
            values["loader_drop_last"] = None
        return {name: value for name, value in values.items() if value is not None}


def token_cost(label: str) -> TokenCost:
    """The :class:`~samplers.TokenCost` of a label (``padded``, ``sum, quadratic=32``)."""
    kind, _, quadratic = label.partition(", quadratic=")
    return TokenCost(kind, quadratic=int(quadratic) if quadratic else None)  # type: ignore[arg-type]


def draw_lengths(spec_kind: str, parameters: Sequence[float], count: int, seed: int) -> list[int]:
    """``count`` lengths drawn from a distribution of ``--lengths``, the same in every
    process: ``uniform`` (``LO``, ``HI``: whole numbers from LO to HI) or ``lognormal``
    (``MEDIAN``, ``SIGMA``: ``MEDIAN * exp(SIGMA * z)`` rounded, at least 1), from
    ``torch.Generator().manual_seed(seed)``."""
    generator = torch.Generator().manual_seed(seed)
    if spec_kind == "uniform":
        low, high = (int(value) for value in parameters)
        drawn = torch.randint(low, high + 1, (count,), generator=generator)
    elif spec_kind == "lognormal":
        median, sigma = parameters
        normal = torch.randn(count, generator=generator, dtype=torch.float64)
        drawn = torch.exp(math.log(median) + sigma * normal).round().clamp(min=1, max=2**62)
    else:
        raise ValueError(f"spec_kind must be uniform or lognormal, got {spec_kind!r}")
    return [int(value) for value in drawn.to(torch.int64).tolist()]


def make_sampler(setup: Setup, rank: int, *, from_process_group: bool = False) -> Any:
    """Rank ``rank``'s sampler of ``setup`` (``from_process_group``: its placement from the
    initialised default process group, as in a job)."""
    placement: dict[str, Any] = {
        "num_replicas": None if from_process_group else setup.world_size,
        "rank": None if from_process_group else rank,
    }
    keywords: dict[str, Any] = {**placement, "seed": setup.seed}
    if setup.tail is not None:
        keywords["tail"] = setup.tail
    if setup.kind == "wrapper":
        inner = range(setup.dataset_size)
        # Without shuffling, the wrapper shards the dataset's order (a SequentialSampler).
        wrapped = RandomSampler(inner) if setup.shuffle else SequentialSampler(inner)
        return DistributedSamplerWrapper(wrapped, **keywords)
    keywords["shuffle"] = setup.shuffle
    if setup.cost is not None:
        keywords["cost"] = token_cost(setup.cost)
    if setup.kind in PACKED_KINDS:
        keywords["split"] = setup.split
    lengths = list(setup.lengths or ())
    if setup.kind == "tokens":
        return DistributedTokenBatchSampler(lengths, _needed(setup, "max_tokens"), **keywords)
    if setup.kind == "packed":
        return DistributedPackedBatchSampler(
            lengths, _needed(setup, "max_length"), _needed(setup, "rows_per_batch"), **keywords
        )
    sources = ([range(size) for size in setup.source_sizes or ()], list(setup.weights or ()))
    if setup.epoch_length is not None:
        keywords["epoch_length"] = setup.epoch_length
    if setup.kind == "mixture":
        return DistributedMixtureSampler(*sources, **keywords)
    if setup.kind == "mixture-batch":
        return DistributedMixtureBatchSampler(*sources, _needed(setup, "batch_size"), **keywords)
    if setup.kind == "mixture-tokens":
        return DistributedMixtureTokenBatchSampler(
            *sources, lengths, _needed(setup, "max_tokens"), **keywords
        )
    keywords["weights_in"] = setup.weights_in or "tokens"
    return DistributedPackedMixtureSampler(
        *sources,
        lengths,
        _needed(setup, "max_length"),
        _needed(setup, "rows_per_batch"),
        **keywords,
    )


def _needed(setup: Setup, name: str) -> int:
    """The setup's ``name``, which its sampler needs: ``ValueError`` naming it when absent."""
    value = getattr(setup, name)
    if value is None:
        raise ValueError(f"{name} is needed by {setup.class_name}, got None")
    return int(value)


def item_count(setup: Setup, sampler: Any) -> int:
    """How many items the sampler's indices index: pieces for a packed sampler (one per
    document without ``split``), the sources' total for a mixture, else the dataset's."""
    pieces = getattr(sampler, "pieces", None)
    if pieces is not None:
        return len(pieces)
    if setup.kind in MIXTURE_KINDS:
        return sum(sampler.sizes)
    return setup.dataset_size


def make_loader(setup: Setup, sampler: Any, **loader_options: Any) -> DataLoader[int]:
    """The DataLoader a user writes for the sampler: ``batch_size`` and ``sampler`` for a
    sampler of indices, ``batch_sampler`` for the others; each item is its own index."""
    items = range(item_count(setup, sampler))
    if setup.kind in INDEX_KINDS:
        return DataLoader(
            items,  # type: ignore[arg-type]
            batch_size=setup.batch_size,
            sampler=sampler,
            drop_last=setup.loader_drop_last,
            **loader_options,
        )
    return DataLoader(items, batch_sampler=sampler, **loader_options)  # type: ignore[arg-type]


def rank_batches(
    setup: Setup, rank: int, *, from_process_group: bool = False, **loader_options: Any
) -> tuple[Batches, list[str]]:
    """Every batch rank ``rank``'s DataLoader yields, epoch by epoch, and the warnings its
    sampler gave (each message once, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = make_sampler(setup, rank, from_process_group=from_process_group)
        loader = make_loader(setup, sampler, **loader_options)
        batches: Batches = []
        for epoch in range(setup.epochs):
            if setup.set_epoch:
                sampler.set_epoch(epoch)
            for number, batch in enumerate(loader):
                batches.append((epoch, number, [int(index) for index in batch.tolist()]))
    said = []
    for warning in caught:
        if issubclass(warning.category, SamplerWarning):
            said.append(str(warning.message))
        else:  # not the sampler's: shown as it would have been
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return batches, list(dict.fromkeys(said))


def run_in_process(setup: Setup, **loader_options: Any) -> tuple[list[Batches], list[str]]:
    """Every rank's batches, ranks one after another in this process, and the warnings."""
    found = [rank_batches(setup, rank, **loader_options) for rank in range(setup.world_size)]
    said = [message for _, messages in found for message in messages]
    return [batches for batches, _ in found], list(dict.fromkeys(said))


def gather_batches(
    setup: Setup, **loader_options: Any
) -> tuple[Setup, list[Batches], list[str]] | None:
    """Run ``setup`` on every rank of the initialised default process group (its world
    size replaces the setup's); rank 0 gets the setup, every rank's batches and the
    warnings, the other ranks ``None``. Call it on every rank."""
    world, rank = dist.get_world_size(), dist.get_rank()
    setup = replace(setup, world_size=world)
    mine = rank_batches(setup, rank, from_process_group=True, **loader_options)
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if gathered is None:
        return None
    said = [message for _, messages in gathered for message in messages]
    return setup, [batches for batches, _ in gathered], list(dict.fromkeys(said))
