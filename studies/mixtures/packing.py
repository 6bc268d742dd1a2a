"""The ways of packing a weighted mixture into rows that the mixtures finding compares, over
the corpus of :mod:`studies.mixtures.corpus`: ours (``DistributedPackedMixtureSampler``), a
Megatron-style blend over concatenated-and-chunked documents, and Hugging Face
``datasets.interleave_datasets`` followed by TRL's ``pack_dataset``, each under its
documented defaults and under a setting for pretraining (:data:`WAYS`; each way's
docstring says where that setting comes from).

Each way is a class with a ``name``, a ``setting`` (which one, named) and three runs on
``world`` ranks, each returning, per rank, its batches, each a list of rows (a
:data:`~studies.mixtures.corpus.Row`):

* ``epoch(world)``: the epoch;
* ``resumed(world, other, steps)``: ``steps`` steps on ``world`` ranks, the state saved as
  the way's users save it, and the rest on ``other`` ranks;
* ``reweighted(world, steps, weights)``: ``steps`` steps, then the new token weights as
  the way's users set them, and the rest;

and ``dropped()``: the tokens its packing takes in and never puts in a row.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedPackedMixtureSampler, SamplerWarning
from samplers.tokens.packing import row_starts
from studies.mixtures import ways
from studies.mixtures.corpus import (
    DEFAULTS,
    MAX_LENGTH,
    RECOMMENDED,
    ROWS,
    TOKEN_WEIGHTS,
    Row,
    Shares,
    corpus,
    token_shares,
)

__all__ = [
    "WAYS",
    "HuggingFaceTrl",
    "MegatronStyle",
    "Ours",
    "megatron_blend",
    "ours_rows",
]

# Ours ----------------------------------------------------------------------------------


class Ours:
    """``DistributedPackedMixtureSampler`` over the corpus, weights in tokens, seed
    :data:`~studies.mixtures.ways.SEED`; ``split=None`` (its default: a document longer
    than a row is a row of its own) or ``split="long"`` (for pretraining, as
    docs/guides/pretraining.md uses it: such a document cut into row-sized pieces). The
    state is ``state_dict()``, loaded on the other world size; new weights are
    ``set_weights``, on every rank at the same step."""

    name = "ours: DistributedPackedMixtureSampler"

    def __init__(self, split: Any) -> None:
        self.split = split
        self._epochs: dict[int, Shares] = {}
        #: What the prose calls it.
        self.short = f"ours (split={split!r})"
        self.setting = {
            None: DEFAULTS + " (split=None)",
            "long": RECOMMENDED + " (split='long')",
        }.get(split, f"split={split!r}")

    def sampler(self, world: int, rank: int, weights: Sequence[float] = TOKEN_WEIGHTS) -> Any:
        with warnings.catch_warnings():
            # Without split, the documents longer than a row are counted by a warning; the
            # table counts the rows they make.
            warnings.simplefilter("ignore", SamplerWarning)
            return DistributedPackedMixtureSampler(
                [range(n) for n in ways.SIZES],
                list(weights),
                corpus().lengths,
                MAX_LENGTH,
                ROWS,
                world,
                rank,
                seed=ways.SEED,
                split=self.split,
            )

    def dropped(self) -> int:
        """The documents' tokens that no piece holds."""
        pieces = self.sampler(1, 0).pieces
        return int(pieces.document_lengths.sum()) - int(pieces.lengths.sum())

    def rows(self, sampler: Any, batch: list[int]) -> list[Row]:
        """A batch of piece ids as its rows: cut by the pieces' lengths as
        ``packed_collate`` cuts them, each piece an attention span of its own."""
        return self._batches(sampler, [batch])[0]

    def _batches(self, sampler: Any, batches: Any) -> list[list[Row]]:
        """Each batch's rows (:meth:`rows`), the pieces located all at once."""
        listed = [list(batch) for batch in batches]
        flat = torch.tensor([i for batch in listed for i in batch], dtype=torch.int64)
        documents, starts, lengths = sampler.pieces.locate(flat)
        tokens = corpus().segments(documents.numpy(), starts.numpy(), lengths.numpy())
        values = lengths.tolist()
        bounds = np.concatenate([[0], np.cumsum(values)]).astype(np.int64)
        made, at = [], 0
        for batch in listed:
            own = values[at : at + len(batch)]
            cuts = [at + c for c in (*row_starts(own, MAX_LENGTH), len(own))]
            made.append(
                [
                    (tokens[bounds[a] : bounds[b]], tuple(values[a:b]))
                    for a, b in itertools.pairwise(cuts)
                ]
            )
            at += len(batch)
        return made

    def epoch(self, world: int) -> Shares:
        if world not in self._epochs:
            samplers = [self.sampler(world, r) for r in range(world)]
            self._epochs[world] = [self._batches(s, s) for s in samplers]
        return self._epochs[world]

    def steps(self, world: int) -> list[int]:
        """Each rank's steps in the epoch."""
        return [len(share) for share in self.epoch(world)]

    def resumed(self, world: int, other: int, steps: int) -> tuple[Shares, Shares]:
        """The head is each rank's first ``steps`` batches of :meth:`epoch` (a sampler's
        batches are a function of its settings); the state is rank 0's after as many."""
        head = [share[:steps] for share in self.epoch(world)]
        first = self.sampler(world, 0)
        for _ in itertools.islice(iter(first), steps):
            pass
        state = first.state_dict()
        resumed = [self.sampler(other, r) for r in range(other)]
        for sampler in resumed:
            sampler.load_state_dict(state)
        return head, [self._batches(s, s) for s in resumed]

    def reweighted(self, world: int, steps: int, weights: Sequence[float]) -> tuple[Shares, Shares]:
        samplers = [self.sampler(world, r) for r in range(world)]
        head = [self._batches(s, itertools.islice(iter(s), steps)) for s in samplers]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # set_weights mid-iteration says what it does
            for sampler in samplers:
                sampler.set_weights(list(weights))
        return head, [self._batches(s, s) for s in samplers]


@functools.cache
def ours_rows() -> int:
    """The rows of ours' epoch with ``split="long"`` (the same on any world
    size): the budget every way's epoch is cut to."""
    sampler = Ours("long").sampler(1, 0)
    return sum(len(batch) for batch in Ours("long")._batches(sampler, sampler))


# Megatron-style ------------------------------------------------------------------------


def megatron_blend(weights: Sequence[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """The blend's source and the source's sample at each of ``size`` positions, by
    Megatron's rule (:data:`~studies.mixtures.ways.MEGATRON_FORMULA`: the largest error,
    the first source on a tie), written here from that formula."""
    shares = token_shares(weights)
    counts = np.zeros(len(shares), dtype=np.int64)
    sources = np.empty(size, dtype=np.int64)
    samples = np.empty(size, dtype=np.int64)
    for k in range(size):
        d = int(np.argmax(shares * max(k, 1) - counts))
        sources[k], samples[k] = d, counts[d]
        counts[d] += 1
    return sources, samples


Segments = tuple[tuple[int, int, int], ...]


@functools.cache
def megatron_chunks(source: int, samples: int) -> tuple[tuple[Segments, ...], int]:
    """Source ``source`` as Megatron's GPT dataset lays it out for ``samples`` samples of
    :data:`MAX_LENGTH` tokens, reimplemented from its documented idea: the fewest epochs
    of the source's documents that hold that many samples, their document order shuffled
    all together (the last epoch shuffled apart when it holds under 80% of an epoch's
    samples), the documents concatenated and cut every :data:`MAX_LENGTH` tokens (a last
    partial sample dropped), and the samples shuffled (again the last epoch apart), all
    from one ``numpy.random.RandomState(seed)``. Each sample is its ``(document, start,
    length)`` segments; with them, the tokens of the dropped partial sample. The extra
    label token each Megatron sample also reads is left out."""
    data = corpus()
    first, last = int(data.source_documents[source]), int(data.source_documents[source + 1])
    lengths = data.lengths[first:last].numpy()
    per_epoch = int(lengths.sum())
    epochs = max(1, math.ceil(samples * MAX_LENGTH / per_epoch))
    whole = (epochs - 1) * per_epoch // MAX_LENGTH
    apart = epochs > 1 and samples - whole < int(0.8 * (per_epoch // MAX_LENGTH))
    state = np.random.RandomState(ways.SEED)

    def shuffled(count: int) -> np.ndarray:
        order = np.tile(np.arange(first, last, dtype=np.int64), count)
        state.shuffle(order)
        return order

    documents = np.concatenate([shuffled(epochs - 1), shuffled(1)]) if apart else shuffled(epochs)
    chunks: list[Segments] = []
    current: list[tuple[int, int, int]] = []
    room = MAX_LENGTH
    for document in documents.tolist():
        length, start = int(data.lengths[document]), 0
        while length - start > 0:
            take = min(room, length - start)
            current.append((document, start, take))
            start, room = start + take, room - take
            if room == 0:
                chunks.append(tuple(current))
                current, room = [], MAX_LENGTH
    cut = whole if apart else len(chunks)
    order = np.arange(cut)
    state.shuffle(order)
    rest = np.arange(cut, len(chunks))
    state.shuffle(rest)
    dropped = MAX_LENGTH - room if current else 0
    return tuple(chunks[i] for i in np.concatenate([order, rest]).tolist()), dropped


def megatron_sources(weights: Sequence[float]) -> list[tuple[tuple[Segments, ...], int]]:
    """Each source's samples (and dropped tokens), built for its share of a blend of
    :func:`ours_rows` samples with the builder's 0.5% margin."""
    size = ours_rows()
    return [
        megatron_chunks(d, math.ceil(size * float(share) * 1.005))
        for d, share in enumerate(token_shares(weights))
    ]


@functools.cache
def megatron_rows(weights: tuple[float, ...], masked: bool) -> list[Row]:
    """The blend's rows (:func:`megatron_blend` of :func:`megatron_sources`): each its
    tokens, and its attention spans: the whole row, or each document's piece when
    ``masked``."""
    sources, samples = megatron_blend(weights, ours_rows())
    chunks = [built[0] for built in megatron_sources(weights)]
    rows = [chunks[d][k] for d, k in zip(sources.tolist(), samples.tolist(), strict=True)]
    flat = [segment for row in rows for segment in row]
    tokens = corpus().segments(*zip(*flat, strict=True))
    return [
        (
            tokens[k * MAX_LENGTH : (k + 1) * MAX_LENGTH],
            tuple(s[2] for s in row) if masked else (MAX_LENGTH,),
        )
        for k, row in enumerate(rows)
    ]


class MegatronStyle:
    """A Megatron-style blend (reimplemented from Megatron's published algorithm, not its
    code): :func:`megatron_blend` over :func:`megatron_chunks` of each source, each
    source built with ``ceil(size * share * 1.005)`` samples (the builder's 0.5% margin),
    ``size`` the rows of ours' epoch; rank ``r`` takes rows ``r * ROWS`` to ``(r + 1) *
    ROWS`` of each global batch of ``world * ROWS`` consecutive rows, whole global batches
    only (Megatron's pretraining sampler, ``consumed_samples`` its state, so a resume on
    another world size reads on from the same row); new weights rebuild the blend and its
    sources, read from the same row. Its default (``reset_attention_mask=False``, as
    Megatron-LM's arguments and ``GPTDatasetConfig`` have it) attends across the documents
    of a row; the setting for pretraining here, ``--reset-attention-mask
    --reset-position-ids``, restricts attention to each document's piece (Megatron
    documents no recommendation; this is the choice that keeps documents apart, as
    document-masked pretraining does). Both hand out the same rows."""

    name = "Megatron-style blend over concatenated and chunked documents (reimplemented)"

    def __init__(self, masked: bool) -> None:
        self.masked = masked
        self.short = f"Megatron-style ({'document masks' if masked else 'defaults'})"
        self.setting = (
            RECOMMENDED + " (--reset-attention-mask, --reset-position-ids)"
            if masked
            else DEFAULTS + " (reset_attention_mask=False)"
        )

    def _blend(self, weights: Sequence[float]) -> list[Row]:
        """The blend's rows, in order."""
        return megatron_rows(tuple(float(w) for w in weights), self.masked)

    def dropped(self) -> int:
        """The tokens of each source's last, partial sample (Megatron drops it)."""
        return sum(built[1] for built in megatron_sources(TOKEN_WEIGHTS))

    def _deal(self, blend: list[Row], world: int, start: int) -> Shares:
        step = world * ROWS
        steps = (len(blend) - start) // step
        return [
            [
                blend[start + k * step + r * ROWS : start + k * step + (r + 1) * ROWS]
                for k in range(steps)
            ]
            for r in range(world)
        ]

    def epoch(self, world: int) -> Shares:
        return self._deal(self._blend(TOKEN_WEIGHTS), world, 0)

    def steps(self, world: int) -> list[int]:
        """Each rank's steps in the epoch: the whole global batches of the blend."""
        return [ours_rows() // (world * ROWS)] * world

    def resumed(self, world: int, other: int, steps: int) -> tuple[Shares, Shares]:
        blend = self._blend(TOKEN_WEIGHTS)
        head = [share[:steps] for share in self._deal(blend, world, 0)]
        return head, self._deal(blend, other, steps * world * ROWS)

    def reweighted(self, world: int, steps: int, weights: Sequence[float]) -> tuple[Shares, Shares]:
        head = [share[:steps] for share in self.epoch(world)]
        return head, self._deal(self._blend(weights), world, steps * world * ROWS)


# Hugging Face datasets + TRL -------------------------------------------------------------


@functools.cache
def hf_sources() -> tuple[Any, ...]:
    """Each source as an in-memory ``datasets.Dataset`` of one ``input_ids`` column (each
    document's global token ids)."""
    from datasets import Dataset

    data = corpus()
    made = []
    for d in range(len(ways.SIZES)):
        first, last = int(data.source_documents[d]), int(data.source_documents[d + 1])
        documents = [data.segment(i, 0, int(data.lengths[i])).tolist() for i in range(first, last)]
        made.append(Dataset.from_dict({"input_ids": documents}))
    return tuple(made)


@dataclass(frozen=True)
class PackedRows:
    """TRL's packed rows: their token ids back to back, where each row begins (and the
    end), each row's ``seq_lengths``, and the lengths of the mix's documents that went in."""

    values: np.ndarray
    offsets: np.ndarray
    spans: tuple[tuple[int, ...], ...]
    mixed: np.ndarray

    @property
    def tokens_in(self) -> int:
        """The mix's tokens."""
        return int(self.mixed.sum())

    def row(self, index: int) -> Row:
        return self.values[self.offsets[index] : self.offsets[index + 1]], self.spans[index]


@functools.cache
def hf_packed(weights: tuple[float, ...], stopping: str, strategy: str) -> PackedRows:
    """``interleave_datasets`` of :func:`hf_sources` with the token weights turned into
    probabilities of documents (each weight over its source's mean length, normalised),
    the seed and ``stopping``, then TRL's ``pack_dataset(mix, MAX_LENGTH, strategy)``."""
    import datasets
    from datasets import interleave_datasets
    from trl.data_utils import pack_dataset

    data = corpus()
    means = [
        float(data.lengths[int(a) : int(b)].double().mean())
        for a, b in itertools.pairwise(data.source_documents)
    ]
    raw = [w / m for w, m in zip(weights, means, strict=True)]
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        mix = interleave_datasets(
            list(hf_sources()),
            probabilities=[p / sum(raw) for p in raw],
            seed=ways.SEED,
            stopping_strategy=stopping,
        )
        packed = pack_dataset(mix, MAX_LENGTH, strategy)
    finally:
        if bars:
            datasets.enable_progress_bars()
    import pyarrow.compute as pc

    rows = packed.with_format("arrow")[:]
    column = rows.column("input_ids").combine_chunks()
    offsets = np.asarray(column.offsets, dtype=np.int64)
    spans = rows.column("seq_lengths").to_pylist()
    taken = mix.with_format("arrow")[:].column("input_ids")
    return PackedRows(
        np.asarray(column.flatten(), dtype=np.int64),
        offsets - offsets[0],
        tuple(tuple(int(v) for v in s) for s in spans),
        np.asarray(pc.list_value_length(taken), dtype=np.int64),
    )


class HuggingFaceTrl:
    """Hugging Face ``datasets.interleave_datasets``, then TRL's ``pack_dataset``
    (:func:`hf_packed`), the packed rows shuffled and dealt to ranks by torch's
    ``DistributedSampler`` (seed :data:`~studies.mixtures.ways.SEED`) in batches of
    :data:`ROWS` rows. Defaults: ``stopping_strategy="first_exhausted"`` (the mix ends
    when a source runs out) and ``strategy="bfd"`` (a document longer than a row
    truncated); for pretraining: ``"all_exhausted"`` (the oversampling strategy of
    datasets' documentation: every source read to its end) and ``"bfd_split"`` (which
    TRL's docstring says "prevents token loss for pre-training or long documents"). Attention runs
    within each packed sequence (``seq_lengths``, as TRL's padding-free path does). Neither
    library resumes on another world size or changes the weights of a mix: a resume, as the
    Trainer does, skips the steps done on each rank of the new world size; a reweight
    rebuilds and repacks the mix with the new probabilities and skips the steps done."""

    name = "datasets.interleave_datasets, then TRL pack_dataset"

    def __init__(self, stopping: str, strategy: str) -> None:
        self.stopping, self.strategy = stopping, strategy
        kind = DEFAULTS if stopping == "first_exhausted" else RECOMMENDED
        self.setting = f"{kind} ({stopping}, {strategy})"
        self.short = f"datasets + TRL ({stopping}, {strategy})"

    def packed(self, weights: Sequence[float] = TOKEN_WEIGHTS) -> PackedRows:
        return hf_packed(tuple(float(w) for w in weights), self.stopping, self.strategy)

    def dropped(self) -> int:
        """The mix's tokens that no packed row holds."""
        packed = self.packed()
        return packed.tokens_in - len(packed.values)

    def _orders(self, packed: PackedRows, world: int) -> list[list[int]]:
        count = len(packed.spans)
        return [
            list(StockSampler(range(count), world, rank, seed=ways.SEED))  # type: ignore[arg-type]
            for rank in range(world)
        ]

    def _deal(self, packed: PackedRows, world: int, skip: int = 0) -> Shares:
        """Each rank's batches after ``skip``, as many as the budget of rows can take."""
        steps = skip - (-ours_rows() // (world * ROWS))
        return [
            [
                [packed.row(i) for i in order[k * ROWS : (k + 1) * ROWS]]
                for k in range(skip, min(steps, -(-len(order) // ROWS)))
            ]
            for order in self._orders(packed, world)
        ]

    def epoch(self, world: int) -> Shares:
        return self._deal(self.packed(), world)

    def steps(self, world: int) -> list[int]:
        """Each rank's steps over the whole packed dataset."""
        return [-(-len(order) // ROWS) for order in self._orders(self.packed(), world)]

    def resumed(self, world: int, other: int, steps: int) -> tuple[Shares, Shares]:
        head = [share[:steps] for share in self.epoch(world)]
        return head, self._deal(self.packed(), other, skip=steps)

    def reweighted(self, world: int, steps: int, weights: Sequence[float]) -> tuple[Shares, Shares]:
        head = [share[:steps] for share in self.epoch(world)]
        return head, self._deal(self.packed(weights), world, skip=steps)


#: Every way and setting, in the table's order.
WAYS: tuple[Any, ...] = (
    Ours(None),
    Ours("long"),
    MegatronStyle(False),
    MegatronStyle(True),
    HuggingFaceTrl("first_exhausted", "bfd"),
    HuggingFaceTrl("all_exhausted", "bfd_split"),
)
