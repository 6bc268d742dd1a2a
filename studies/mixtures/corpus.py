"""The packed mixtures' corpus: the mixtures finding's six sources as documents of tokens,
the rows a way of packing hands out, and the settings every way is run under.

The corpus (:func:`corpus`): the mixtures finding's six sources (their sizes,
:data:`studies.mixtures.ways.SIZES`), each document's length drawn lognormal with a log-mean
of its own (:data:`LOG_MEANS`), so that a source's share of the tokens is not its share of
the documents; some documents are longer than a row (:data:`MAX_LENGTH`). Every token has a
global id (documents numbered source by source, their tokens in order), so what a row holds
is an array of token ids (a :data:`Row`, with its attention spans), and
:mod:`studies.mixtures.token_measures` reads sources, documents, pieces, repeats and losses
from the ids alone. :mod:`studies.mixtures.packing` holds the ways of packing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from studies.mixtures import ways

__all__ = [
    "DEFAULTS",
    "LOG_MEANS",
    "LONGEST",
    "MAX_LENGTH",
    "NEW_TOKEN_WEIGHTS",
    "RECOMMENDED",
    "ROWS",
    "SIGMA",
    "TOKEN_WEIGHTS",
    "Corpus",
    "Row",
    "Shares",
    "corpus",
    "epoch_rows",
    "token_shares",
]

#: The weights, as shares of the tokens (the finding's weights), and the ones set mid-run.
TOKEN_WEIGHTS = ways.WEIGHTS
NEW_TOKEN_WEIGHTS = (1, 2, 1, 2, 1, 3)
#: Each source's log-mean document length (lognormal, :data:`SIGMA`), clamped to
#: ``1..``:data:`LONGEST`.
LOG_MEANS = (5.0, 3.5, 4.0, 4.5, 3.5, 4.0)
SIGMA = 1.0
LONGEST = 2048
#: A row's tokens (the model's context) and the rows of one rank's batch.
MAX_LENGTH = 256
ROWS = 4

#: The two settings of each way: its documented defaults, and one for pretraining (named
#: in each way's ``setting``, with where it comes from in the way's docstring).
DEFAULTS = "documented defaults"
RECOMMENDED = "for pretraining"

#: A row: its token ids (global, int64) and the lengths of its attention spans, in order.
Row = tuple[np.ndarray, tuple[int, ...]]
Shares = list[list[list[Row]]]


@dataclass(frozen=True, eq=False)
class Corpus:
    """The documents' lengths and where each document's and each source's tokens begin."""

    #: Each document's length (int64), source by source.
    lengths: torch.Tensor
    #: The first global token id of each document, and the total (one more entry).
    document_starts: np.ndarray
    #: The first document and the first token id of each source, and the totals.
    source_documents: np.ndarray
    source_tokens: np.ndarray

    @property
    def tokens(self) -> int:
        """The corpus's tokens (one pass over every source)."""
        return int(self.document_starts[-1])

    def segment(self, document: int, start: int, length: int) -> np.ndarray:
        """The global ids of a document's tokens ``[start, start + length)``."""
        first = int(self.document_starts[document]) + start
        return np.arange(first, first + length, dtype=np.int64)

    def segments(self, documents: Any, starts: Any, lengths: Any) -> np.ndarray:
        """The global ids of several documents' tokens ``[start, start + length)``, back to
        back."""
        lengths = np.asarray(lengths, dtype=np.int64)
        firsts = self.document_starts[np.asarray(documents, dtype=np.int64)] + np.asarray(
            starts, dtype=np.int64
        )
        before = np.cumsum(lengths) - lengths
        return np.repeat(firsts - before, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


@functools.cache
def corpus() -> Corpus:
    """The finding's corpus (see the module), drawn once per process."""
    generator = torch.Generator().manual_seed(ways.SEED)
    parts = []
    for size, mean in zip(ways.SIZES, LOG_MEANS, strict=True):
        normal = torch.randn(size, generator=generator, dtype=torch.float64)
        parts.append(torch.exp(normal * SIGMA + mean).round().to(torch.int64).clamp(1, LONGEST))
    lengths = torch.cat(parts)
    starts = np.concatenate([[0], np.cumsum(lengths.numpy())]).astype(np.int64)
    documents = np.concatenate([[0], np.cumsum(ways.SIZES)]).astype(np.int64)
    return Corpus(lengths, starts, documents, starts[documents])


def token_shares(weights: Sequence[float]) -> np.ndarray:
    """The target share of the tokens of each source."""
    values = np.asarray(weights, dtype=np.float64)
    return np.asarray(values / values.sum(), dtype=np.float64)


def _steps(shares: Shares) -> list[list[Row]]:
    """The ranks' rows step by step: all ranks' first batches' rows, then their second."""
    longest = max((len(share) for share in shares), default=0)
    return [[row for share in shares if k < len(share) for row in share[k]] for k in range(longest)]


def epoch_rows(shares: Shares, limit: int | None = None) -> tuple[list[Row], list[int]]:
    """The rows of ``shares`` in step order, at most ``limit``, and where each step
    begins (indices into the rows)."""
    rows: list[Row] = []
    starts: list[int] = []
    for step in _steps(shares):
        if limit is not None and len(rows) >= limit:
            break
        starts.append(len(rows))
        rows.extend(step if limit is None else step[: limit - len(rows)])
    return rows, starts
