"""Documents cut into pieces: :class:`Pieces`, and the dataset of pieces, :class:`PieceDataset`.

Guarantee: for lengths ``L_0 .. L_{N-1}`` and a piece length ``k``, every document longer
than ``k`` is cut into ``ceil(L / k)`` pieces, ``[0, k), [k, 2k), ...`` (the last
shorter), and every other document is one piece, whole. The pieces are numbered document
by document, in order, so piece ids ``[0, P)`` cover every token of every document
exactly once, and a sampler over the pieces' lengths hands out every token once when it
hands out every piece once. :meth:`Pieces.locate` maps piece ids back to ``(document,
start, length)`` exactly, in O(log c) per id for ``c`` cut documents, and what is held is
the piece lengths plus two small tensors per cut document (the documents that are not
cut cost nothing more than their lengths).

The packed samplers take ``split=``:

* ``None`` (default): documents are never cut; one longer than ``max_length`` is a row of
  its own, longer than the row;
* ``"long"``: a document longer than ``max_length`` is cut into pieces of ``max_length``
  tokens: every row fits the model's context, and no token is dropped;
* an integer ``k`` (at most ``max_length``): every document longer than ``k`` is cut into
  pieces of ``k`` tokens, so rows fill to within about a piece of the brim.

A piece attends to itself alone (its own ``cu_seqlens`` segment, its positions from 0),
which is what cutting costs: attention across a cut is lost. What each choice costs
(efficiency, documents cut, tokens per piece, the attention a cut saves) is measured in
the mixtures finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset

from samplers import checks

__all__ = ["PieceDataset", "Pieces", "Split", "piece_length_of"]

#: What ``split=`` takes: ``None``, ``"long"`` or a piece length.
Split = str | int | None
#: Documents placed at a time when cutting.
_CHUNK = 1 << 20


def piece_length_of(split: Any, max_length: int) -> int | None:
    """The piece length ``split`` means for rows of ``max_length`` (``None``: no cut), or
    an error naming ``split`` and its value."""
    if split is None:
        return None
    if isinstance(split, str):
        if split != "long":
            raise ValueError(
                f"split must be None, 'long' or a piece length (an integer), got {split!r}"
            )
        return max_length
    length = checks.positive("split", split)
    if length > max_length:
        raise ValueError(
            f"split={length} is longer than max_length={max_length}: a piece must fit a row "
            "(use split='long' to cut only documents longer than a row)"
        )
    return length


@dataclass(frozen=True, eq=False)
class Pieces:
    """Documents of ``document_lengths`` cut into pieces of at most ``piece_length``
    tokens (``None``: not cut); see the module."""

    #: Each document's length (int64), as given.
    document_lengths: torch.Tensor
    #: The longest piece (``None``: documents are not cut).
    piece_length: int | None
    #: Each piece's length (the documents' own lengths when nothing is cut).
    lengths: torch.Tensor = field(init=False, repr=False)
    #: The documents that are cut, in order (int64), and the piece id of each one's first
    #: piece and how many pieces each has.
    cut: torch.Tensor = field(init=False, repr=False)
    first: torch.Tensor = field(init=False, repr=False)
    count: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        given = self.document_lengths
        size = self.piece_length
        empty = torch.zeros(0, dtype=torch.int64)
        cut = empty if size is None else torch.nonzero(given > size).squeeze(1)
        if size is None or cut.numel() == 0:
            object.__setattr__(self, "lengths", given)
            for name in ("cut", "first", "count"):
                object.__setattr__(self, name, empty)
            return
        cut_lengths = given.index_select(0, cut).to(torch.int64)
        count = (cut_lengths + size - 1) // size
        extra = count - 1
        before = torch.cumsum(extra, 0) - extra  # extra pieces of the cut documents before
        first = cut + before
        object.__setattr__(self, "cut", cut)
        object.__setattr__(self, "first", first)
        object.__setattr__(self, "count", count)
        pieces = torch.empty(given.numel() + int(extra.sum()), dtype=given.dtype)
        # A document that is not cut is one piece, moved up by the extra pieces of the cut
        # documents before it; a chunk of documents at a time (nothing of their number
        # in int64 at once).
        shifts = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(extra, 0)])
        whole = torch.ones(given.numel(), dtype=torch.bool)
        whole[cut] = False
        for lo in range(0, given.numel(), _CHUNK):
            hi = min(lo + _CHUNK, given.numel())
            documents = torch.nonzero(whole[lo:hi]).squeeze(1) + lo
            moved = documents + shifts.index_select(0, torch.searchsorted(cut, documents))
            pieces[moved] = given.index_select(0, documents)
        # The cut documents' pieces: all of size ``size`` but each document's last, which
        # holds the rest; a chunk of cut documents at a time.
        for lo in range(0, cut.numel(), _CHUNK // 16):
            hi = min(lo + _CHUNK // 16, cut.numel())
            chunk_count = count[lo:hi]
            owner = torch.repeat_interleave(torch.arange(hi - lo), chunk_count)
            within = (
                torch.arange(owner.numel()) - (torch.cumsum(chunk_count, 0) - chunk_count)[owner]
            )
            pieces[first[lo:hi][owner] + within] = size
            last = first[lo:hi] + chunk_count - 1
            pieces[last] = (cut_lengths[lo:hi] - (chunk_count - 1) * size).to(pieces.dtype)
        object.__setattr__(self, "lengths", pieces)

    @classmethod
    def of(cls, lengths: torch.Tensor, split: Any, max_length: int) -> Pieces:
        """The pieces ``split`` makes of documents of ``lengths`` for rows of
        ``max_length``."""
        return cls(lengths, piece_length_of(split, max_length))

    @property
    def documents(self) -> int:
        """How many documents there are."""
        return self.document_lengths.numel()

    def __len__(self) -> int:
        return self.lengths.numel()

    def locate(self, pieces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each piece id's document, start (in the document's tokens) and length."""
        ids = pieces.to(torch.int64)
        lengths = self.lengths.index_select(0, ids).to(torch.int64)
        if self.cut.numel() == 0:
            return ids, torch.zeros_like(ids), lengths
        # The last cut document whose first piece is at or before each id.
        last = torch.searchsorted(self.first, ids, right=True) - 1
        safe = last.clamp(min=0)
        first = self.first.index_select(0, safe)
        inside = (last >= 0) & (ids < first + self.count.index_select(0, safe))
        # Extra pieces of the cut documents wholly before the id.
        extra = torch.cumsum(self.count - 1, 0)
        before = torch.where(last >= 0, extra.index_select(0, safe), torch.zeros_like(ids))
        documents = torch.where(inside, self.cut.index_select(0, safe), ids - before)
        starts = torch.where(inside, (ids - first) * int(self.piece_length or 0), 0)
        return documents, starts, lengths

    def pieces_of(self, documents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each document's first piece id and its number of pieces."""
        documents = documents.to(torch.int64)
        if self.cut.numel() == 0:
            return documents, torch.ones_like(documents)
        at = torch.searchsorted(self.cut, documents)
        extra = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(self.count - 1, 0)])
        first = documents + extra.index_select(0, at)
        is_cut = torch.zeros_like(documents, dtype=torch.bool)
        found = at < self.cut.numel()
        is_cut[found] = self.cut.index_select(0, at[found]) == documents[found]
        count = torch.ones_like(documents)
        count[is_cut] = self.count.index_select(0, at[is_cut])
        return first, count

    @property
    def label(self) -> str:
        """What a checkpoint records of the cut: ``"none"`` or ``"pieces of k"``."""
        return "none" if self.piece_length is None else f"pieces of {self.piece_length}"


class PieceDataset(Dataset[Any]):
    """The pieces of ``dataset``'s documents, by piece id: what a DataLoader over a packed
    sampler with ``split=`` reads (``sampler.pieces_of(dataset)`` builds it).

    Guarantee: item ``p`` is piece ``p`` of :class:`Pieces`: the document's tokens
    ``[start, start + length)`` (a 1-D sequence under ``key`` when the document is a
    mapping; the mapping's other fields are kept), with ``"document"`` and ``"start"``
    added, so the collate and the loop can tell which tokens a row holds. A document whose
    tokens are fewer than ``lengths`` says is refused (``ValueError`` naming it).
    """

    def __init__(self, dataset: Any, pieces: Pieces, key: str = "input_ids") -> None:
        if len(dataset) != pieces.documents:
            raise ValueError(
                f"the dataset has {len(dataset)} documents, the lengths {pieces.documents}"
            )
        self.dataset = dataset
        self.pieces = pieces
        self.key = key

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, piece: int) -> dict[str, Any]:
        documents, starts, lengths = self.pieces.locate(torch.tensor([int(piece)]))
        document, start, length = int(documents[0]), int(starts[0]), int(lengths[0])
        sample = self.dataset[document]
        fields = dict(sample) if isinstance(sample, Mapping) else {}
        tokens = sample[self.key] if isinstance(sample, Mapping) else sample
        if len(tokens) < start + length:
            raise ValueError(
                f"dataset[{document}] has {len(tokens)} tokens, but the lengths given to "
                f"the sampler say {int(self.pieces.document_lengths[document])}: its piece "
                f"[{start}, {start + length}) does not exist"
            )
        fields[self.key] = tokens[start : start + length]
        fields["document"] = document
        fields["start"] = start
        return fields
