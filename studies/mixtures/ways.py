"""The ways of mixing datasets by weight that the mixtures finding compares, on its
sources: ours, a Megatron-style blend, torchdata's ``MultiNodeWeightedSampler``, Hugging
Face ``datasets``' ``interleave_datasets`` (five variants), a ``WeightedRandomSampler``
in our wrapper, and the stock sampler over a ``ConcatDataset``.

Each is built by ``BUILDERS[name](world, rank, weights)`` and iterated as a rank would.
Those that can save their place or change weights do it as their users would (see each
class). The sources are read from this module's globals at each build, so the mixture
benchmark can scale them (:func:`studies.mixtures.bench.scaled`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import ConcatDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedMixtureSampler, DistributedSamplerWrapper

__all__ = [
    "BUILDERS",
    "LENGTH",
    "MEGATRON_FORMULA",
    "OFFSETS",
    "SEED",
    "SHARDS",
    "SIZES",
    "WEIGHTS",
]

#: Six sources whose sizes span three orders of magnitude, and their weights.
SIZES = (20, 60, 300, 1000, 3000, 10000)
WEIGHTS = (3, 1, 2, 1, 2, 1)
SEED = 0
LENGTH = sum(SIZES)
OFFSETS = np.cumsum((0, *SIZES[:-1]))

#: Megatron's blending rule, as ``build_blending_indices`` (megatron/core/datasets/
#: helpers.cpp) writes it: at each sample index, the dataset with the largest error.
MEGATRON_FORMULA = (
    "error = weights[dataset_idx] * max(sample_idx, 1) - current_samples[dataset_idx]"
)

OURS = "ours: DistributedMixtureSampler"
MEGATRON = "Megatron-style blend (reimplemented from its published algorithm)"
WEIGHTED = "WeightedRandomSampler in our DistributedSamplerWrapper"
STOCK = "ConcatDataset + stock DistributedSampler"
TORCHDATA = "torchdata.nodes MultiNodeWeightedSampler over per-rank shards"
HF_MAP = "datasets: interleave_datasets, then split_dataset_by_node (Dataset, default stop)"
HF_MAP_ALL = "datasets: interleave_datasets, then split_dataset_by_node (Dataset, all_exhausted)"
HF_MAP_ONCE = (
    "datasets: interleave_datasets, then split_dataset_by_node "
    "(Dataset, all_exhausted_without_replacement)"
)
HF_STREAM = (
    "datasets: interleave_datasets, then split_dataset_by_node (IterableDataset, all_exhausted)"
)
HF_SPLIT_FIRST = (
    "datasets: split_dataset_by_node, then interleave_datasets (IterableDataset, all_exhausted)"
)
#: Shards of each streamed source: a multiple of every world size the finding uses, so
#: that ``split_dataset_by_node`` hands each rank whole shards (its documented fast case).
SHARDS = 8


def ours(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    return DistributedMixtureSampler(
        [range(n) for n in SIZES], list(weights), world, rank, seed=SEED, tail="uneven"
    )


def weighted(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    per_sample = [w / n for n, w in zip(SIZES, weights, strict=True) for _ in range(n)]
    generator = torch.Generator().manual_seed(SEED)
    inner = WeightedRandomSampler(per_sample, LENGTH, generator=generator)
    return DistributedSamplerWrapper(inner, world, rank, seed=SEED, tail="uneven")


def stock(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    return StockSampler(ConcatDataset([range(n) for n in SIZES]), world, rank, seed=SEED)


def megatron_stream(weights: Sequence[int], length: int) -> list[int]:
    """Megatron's blend: at each position ``k`` the source with the largest error, as
    Megatron's ``build_blending_indices`` writes it (``weights[dataset_idx] *
    max(sample_idx, 1) - current_samples[dataset_idx]``, the first source on a tie), and
    that source's next sample; each source's passes are fresh permutations of it
    (``randperm`` seeded with the seed, the source and the pass)."""
    shares = np.asarray(weights, dtype=np.float64) / sum(weights)
    counts = np.zeros(len(SIZES), dtype=np.int64)
    stream = []
    orders: dict[tuple[int, int], list[int]] = {}
    for k in range(length):
        d = int(np.argmax(shares * max(k, 1) - counts))
        number, item = divmod(int(counts[d]), SIZES[d])
        if (d, number) not in orders:
            generator = torch.Generator().manual_seed(SEED * 1_000_003 + d * 1009 + number)
            orders[(d, number)] = torch.randperm(SIZES[d], generator=generator).tolist()
        stream.append(int(OFFSETS[d]) + orders[(d, number)][item])
        counts[d] += 1
    return stream


class Megatron:
    """The blend sharded by global position (Megatron's ``consumed_samples``): rank ``r``
    takes positions ``r, r + W, ...``; the state is the position; new weights rebuild the
    blend from scratch, which is then read from the same position."""

    def __init__(self, world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> None:
        self.world, self.rank, self.weights, self.start = world, rank, tuple(weights), 0

    def __iter__(self) -> Any:
        stream = megatron_stream(self.weights, LENGTH)
        return iter(stream[self.start + self.rank :: self.world])

    def state_dict(self, taken: int) -> dict[str, int]:
        return {"position": self.start + taken * self.world}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["position"]

    def set_weights(self, weights: Sequence[int], position: int) -> None:
        self.weights, self.start = tuple(weights), position


class Torchdata:
    """torchdata's ``MultiNodeWeightedSampler`` (the ``peers`` extra): each source a node
    over this rank's shard (``[rank::W]``) of a permutation of it, drawn by weight with
    the sampler's random draws, each rank taking its share of the epoch's length. Its
    state is per rank and per shard, so it does not carry over to another world size:
    a restarted job begins the epoch again."""

    def __init__(self, world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> None:
        self.world, self.rank, self.weights = world, rank, tuple(weights)

    def __iter__(self) -> Any:
        import torchdata.nodes as nodes

        shards = {}
        for d, size in enumerate(SIZES):
            generator = torch.Generator().manual_seed(SEED * 1_000_003 + d)
            order = (torch.randperm(size, generator=generator) + int(OFFSETS[d])).tolist()
            shards[str(d)] = nodes.IterableWrapper(order[self.rank :: self.world])
        node = nodes.MultiNodeWeightedSampler(
            shards,
            {str(d): float(w) for d, w in enumerate(self.weights)},
            rank=self.rank,
            world_size=self.world,
            seed=SEED,
        )
        count = len(range(self.rank, LENGTH, self.world))
        return itertools.islice(nodes.Loader(node), count)


class HuggingFace:
    """Hugging Face ``datasets`` (the ``peers`` extra): the sources as in-memory
    ``Dataset`` s of one ``index`` column (or their ``to_iterable_dataset`` in ``SHARDS``
    shards), mixed by ``interleave_datasets`` with the weights as ``probabilities`` and
    the seed, split over ranks by ``split_dataset_by_node`` after the mix (or, as in
    datasets#7868, each source split before it). Each rank reads its split in order and
    takes its share of the epoch's length (all of its split when that is shorter).

    It has no way to change the probabilities or the world size of a mix; what a user
    does stands in for both. The state is what a training loop keeps: the steps and
    samples done, and for an ``IterableDataset`` its ``state_dict()``. A resume, or a
    reweight (the mix rebuilt with the new probabilities), loads that ``state_dict()``
    into the new dataset; a ``Dataset`` has none, so its loader skips the steps done
    (as the Trainer's ``skip_first_batches`` does), on whatever world size.
    """

    def __init__(
        self,
        world: int,
        rank: int,
        weights: Sequence[int] = WEIGHTS,
        *,
        streaming: bool = False,
        split_first: bool = False,
        stopping_strategy: str = "all_exhausted",
    ) -> None:
        self.world, self.rank, self.weights = world, rank, tuple(weights)
        self.streaming, self.split_first, self.stopping = streaming, split_first, stopping_strategy
        self.start = self.skip = self.taken = 0
        self.saved: dict[str, Any] | None = None
        self.dataset: Any = None

    def _build(self) -> Any:
        from datasets.distributed import split_dataset_by_node

        sources = list(hf_sources(self.streaming))
        if self.split_first:
            sources = [split_dataset_by_node(s, self.rank, self.world) for s in sources]
            return hf_mix(sources, self.weights, self.stopping)
        if self.streaming:
            mixed = hf_mix(sources, self.weights, self.stopping)
        else:
            mixed = hf_dataset_mix(self.weights, self.stopping)
        return split_dataset_by_node(mixed, self.rank, self.world)

    def __iter__(self) -> Any:
        self.dataset, self.taken = self._build(), 0
        if self.saved is not None:
            self.dataset.load_state_dict(self.saved)
        rows = itertools.islice(self.dataset, self.skip, None)
        return self._counted(
            itertools.islice(rows, len(range(self.start + self.rank, LENGTH, self.world)))
        )

    def _counted(self, rows: Any) -> Any:
        for row in rows:
            self.taken += 1
            yield int(row["index"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.skip + self.taken,
            "samples": self.start + self.taken * self.world,
            "dataset": self.dataset.state_dict() if self.streaming else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.start, self.saved = state["samples"], state["dataset"]
        self.skip = 0 if self.streaming else state["steps"]

    def set_weights(self, weights: Sequence[int]) -> None:
        """What a user does: the mix rebuilt with the new probabilities, from the state."""
        state = self.state_dict()
        self.weights = tuple(weights)
        self.load_state_dict(state)


def hf_mix(sources: list[Any], weights: Sequence[int], stopping: str) -> Any:
    from datasets import interleave_datasets

    return interleave_datasets(
        sources,
        probabilities=[w / sum(weights) for w in weights],
        seed=SEED,
        stopping_strategy=stopping,  # type: ignore[arg-type]
    )


@functools.cache
def hf_dataset_mix(weights: tuple[int, ...], stopping: str) -> Any:
    """A ``Dataset`` s' mix, built once for all ranks (a ``Dataset`` is not changed by
    splitting or reading it)."""
    return hf_mix(list(hf_sources(False)), weights, stopping)


@functools.cache
def hf_sources(streaming: bool) -> tuple[Any, ...]:
    """The sources, built once per process: splitting, mixing and reading them make or
    iterate new datasets and leave these as they are."""
    from datasets import Dataset

    sources = [
        Dataset.from_dict({"index": list(range(int(offset), int(offset) + size))})
        for offset, size in zip(OFFSETS, SIZES, strict=True)
    ]
    if streaming:
        return tuple(s.to_iterable_dataset(num_shards=SHARDS) for s in sources)
    return tuple(sources)


BUILDERS: dict[str, Callable[..., Any]] = {
    OURS: ours,
    MEGATRON: Megatron,
    TORCHDATA: Torchdata,
    HF_MAP: functools.partial(HuggingFace, stopping_strategy="first_exhausted"),
    HF_MAP_ALL: HuggingFace,
    HF_MAP_ONCE: functools.partial(
        HuggingFace, stopping_strategy="all_exhausted_without_replacement"
    ),
    HF_STREAM: functools.partial(HuggingFace, streaming=True),
    HF_SPLIT_FIRST: functools.partial(HuggingFace, streaming=True, split_first=True),
    WEIGHTED: weighted,
    STOCK: stock,
}
