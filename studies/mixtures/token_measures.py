"""What a stream of packed rows did, read from the token ids it holds
(:mod:`studies.mixtures.packing`): token shares per step and at every prefix, row
efficiency, documents cut, rows over the context, tokens repeated within a pass, tokens
lost or repeated against another stream, and the attention its spans cost.

Guarantee: every measure is computed from the rows alone (each a :data:`~studies.mixtures.
packing.Row`: its global token ids and its attention spans) and the corpus's layout
(:class:`~studies.mixtures.packing.Corpus`); nothing is taken from the way that made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from studies.mixtures.corpus import Corpus, Row, token_shares

__all__ = [
    "Stream",
    "beyond_even_spread",
    "lost_and_repeated",
    "prefix_deviation",
    "repeated_within_passes",
    "step_deviation",
]


@dataclass(frozen=True, eq=False)
class Stream:
    """Rows in step order: their token ids back to back, where each row, each attention
    span and each step (in rows) begins, the last entry of each the end."""

    corpus: Corpus
    tokens: np.ndarray
    rows: np.ndarray
    spans: np.ndarray
    steps: np.ndarray

    @classmethod
    def of(cls, corpus: Corpus, rows: Sequence[Row], steps: Sequence[int]) -> Stream:
        tokens = [row[0] for row in rows]
        widths = [len(t) for t in tokens]
        spans = [length for row in rows for length in row[1]]
        return cls(
            corpus,
            np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64),
            np.concatenate([[0], np.cumsum(widths)]).astype(np.int64),
            np.concatenate([[0], np.cumsum(spans)]).astype(np.int64),
            np.asarray([*steps, len(rows)], dtype=np.int64),
        )

    @property
    def sources(self) -> np.ndarray:
        """Each token's source."""
        found = np.searchsorted(self.corpus.source_tokens, self.tokens, side="right") - 1
        return np.asarray(found, dtype=np.int64)

    @property
    def documents(self) -> np.ndarray:
        """Each token's document."""
        found = np.searchsorted(self.corpus.document_starts, self.tokens, side="right") - 1
        return np.asarray(found, dtype=np.int64)

    def efficiency(self, max_length: int) -> float:
        """Tokens over the rows' width: ``max_length``, or a longer row's own length."""
        widths = np.diff(self.rows)
        return float(widths.sum() / np.maximum(widths, max_length).sum()) if len(widths) else 0.0

    def rows_over(self, max_length: int) -> int:
        """Rows longer than ``max_length`` (the model's context)."""
        return int((np.diff(self.rows) > max_length).sum())

    def pieces(self) -> tuple[np.ndarray, np.ndarray]:
        """The pieces of documents the rows hold (runs of consecutive tokens of one
        document within one attention span and one row): each one's document and length."""
        if not len(self.tokens):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        documents = self.documents
        breaks = np.zeros(len(self.tokens), dtype=bool)
        breaks[0] = True
        breaks[1:] = (np.diff(self.tokens) != 1) | (np.diff(documents) != 0)
        breaks[self.rows[:-1][self.rows[:-1] < len(self.tokens)]] = True
        breaks[self.spans[:-1][self.spans[:-1] < len(self.tokens)]] = True
        starts = np.flatnonzero(breaks)
        lengths = np.diff(np.append(starts, len(self.tokens)))
        return documents[starts], lengths

    def documents_cut(self) -> int:
        """Documents of which a row holds a piece shorter than the document."""
        documents, lengths = self.pieces()
        whole = self.corpus.lengths.numpy()[documents]
        return len(np.unique(documents[lengths < whole]))

    def mean_piece(self) -> float:
        """The mean piece's tokens."""
        _, lengths = self.pieces()
        return float(lengths.mean()) if len(lengths) else 0.0

    def attention(self) -> int:
        """The attention the spans cost: the sum of each span's length squared."""
        return int((np.diff(self.spans) ** 2).sum())

    def mixed_spans(self) -> int:
        """Attention spans that hold tokens of more than one document."""
        documents = self.documents
        inner = self.spans[1:-1]
        changes = np.flatnonzero(np.diff(documents) != 0) + 1
        changes = changes[~np.isin(changes, inner)]
        return len(np.unique(np.searchsorted(self.spans, changes, side="right") - 1))

    def counts(self) -> np.ndarray:
        """How often each token id of the corpus is handed out."""
        return np.bincount(self.tokens, minlength=self.corpus.tokens)


def prefix_deviation(stream: Stream, weights: Sequence[float]) -> float:
    """max over every prefix of the token stream and every source of ``|tokens_d -
    share_d * tokens|`` (reached where the source changes, so those prefixes are read)."""
    sources = stream.sources
    if not len(sources):
        return 0.0
    shares = token_shares(weights)
    changes = np.flatnonzero(np.diff(sources) != 0) + 1
    starts = np.concatenate([[0], changes])
    lengths = np.diff(np.append(starts, len(sources)))
    counts = np.zeros((len(starts) + 1, len(shares)), dtype=np.int64)
    counts[np.arange(1, len(starts) + 1), sources[starts]] = lengths
    counts = np.cumsum(counts, axis=0)
    totals = counts.sum(axis=1, keepdims=True)
    return float(np.abs(counts - totals * shares).max())


def step_deviation(stream: Stream, weights: Sequence[float]) -> float:
    """max over steps and sources of ``|tokens_d(step) - share_d * tokens(step)|``."""
    if len(stream.steps) < 2:
        return 0.0
    shares = token_shares(weights)
    sources = stream.sources
    token_steps = np.searchsorted(stream.rows[stream.steps], np.arange(len(sources)), "right") - 1
    counts = np.zeros((len(stream.steps) - 1, len(shares)), dtype=np.int64)
    np.add.at(counts, (token_steps, sources), 1)
    totals = counts.sum(axis=1, keepdims=True)
    return float(np.abs(counts - totals * shares).max())


def repeated_within_passes(stream: Stream) -> int:
    """Tokens handed out twice within one pass of their source: each source's tokens, in
    the stream's order, cut into passes of the source's own token count."""
    sources, repeated = stream.sources, 0
    bounds = stream.corpus.source_tokens
    for d in range(len(bounds) - 1):
        size = int(bounds[d + 1] - bounds[d])
        tokens = stream.tokens[sources == d] - bounds[d]
        keys = np.arange(len(tokens)) // size * size + tokens  # (pass, token), numbered
        repeated += len(keys) - int(np.count_nonzero(np.bincount(keys)))
    return repeated


def beyond_even_spread(stream: Stream) -> int:
    """Tokens handed out more often than an even spread over their source's passes
    allows: for a source whose ``n`` tokens handed out are ``p`` passes over its ``t``
    tokens (``p = n / t``), each handout of a token beyond its ``ceil(p)``-th."""
    counts = stream.counts()
    bounds = stream.corpus.source_tokens
    beyond = 0
    for d in range(len(bounds) - 1):
        own = counts[bounds[d] : bounds[d + 1]]
        most = -(-int(own.sum()) // len(own))
        beyond += int((own - most)[own > most].sum())
    return beyond


def lost_and_repeated(whole: Stream, seen: Stream) -> tuple[int, int]:
    """Tokens of ``whole`` that ``seen`` misses, and tokens ``seen`` holds more often."""
    difference = seen.counts() - whole.counts()
    return int(-difference[difference < 0].sum()), int(difference[difference > 0].sum())
