"""Packed batches for padding-free training: :class:`DistributedPackedBatchSampler`.

A thin adapter over :class:`~samplers.tokens.packing.PackedOrder` (samples packed into
rows, rows into batches) and :class:`~samplers.tokens.layout.TokenLayout` (the batches
dealt one per rank per step), through the token sampler's hooks; epochs, iteration,
checkpoints and agreement are the sampler core's (:mod:`samplers.core`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from samplers import checks
from samplers.checks import SamplerWarning
from samplers.options import Permutation, Tail
from samplers.tokens.checks import lengths_tensor
from samplers.tokens.collate import packed_collate
from samplers.tokens.cost import CostLike, as_cost
from samplers.tokens.packing import PackedOrder, default_packing_window
from samplers.tokens.pieces import PieceDataset, Pieces, Split
from samplers.tokens.sampler import DistributedTokenBatchSampler

__all__ = ["DistributedPackedBatchSampler"]


class DistributedPackedBatchSampler(DistributedTokenBatchSampler):
    """Batches of ``rows_per_batch`` rows of at most ``max_length`` tokens, every sample
    whole, the same number of batches on every rank, balanced per step.

    Guarantee: every sample is in one row, whole (never cut across rows), and each row's
    lengths sum to at most ``max_length``, except a row of one sample longer than that (a
    ``SamplerWarning`` at construction counts them); a batch holds at most
    ``rows_per_batch`` rows. With ``tail="uneven"`` every sample comes exactly once per
    epoch; every rank yields the same number of batches (``tail`` as for
    :class:`~samplers.DistributedTokenBatchSampler`, whose guarantees this sampler keeps);
    the ``W`` batches of each step cost about the same under ``cost``; the epoch is a
    function of ``(lengths, seed, epoch)`` and the settings, not of the world size, so a
    checkpoint is one global position and resumes on any world size.

    How: the epoch's permutation is cut into windows; each window is packed best-fit
    decreasing into rows (TRL's default), every ``rows_per_batch`` rows are a batch, and
    the batches are ordered by cost (:mod:`samplers.tokens.packing`); step ``k`` deals the
    ``k``-th run of ``num_replicas`` batches, one per rank
    (:mod:`samplers.tokens.layout`). A batch that ``tail="uneven"`` cuts in two is cut
    between rows.

    **What a batch is.** Each batch is a flat list of dataset indices, row after row,
    each row's samples longest first: a ``DataLoader(dataset, batch_sampler=sampler)``
    fetches it as any batch, and :func:`~samplers.tokens.collate.packed_collate` (with
    the same ``max_length``; ``sampler.collate_fn()`` gives it) rebuilds the rows from
    the samples' lengths and returns ``input_ids``, ``position_ids`` and ``cu_seqlens``.
    The rows are read back exactly (see :func:`~samplers.tokens.packing.row_starts`),
    provided each sample the dataset returns has the length given in ``lengths``.

    Why a sampler of its own rather than a ``pack=`` option of the token sampler: packing
    has its own limit (a row's ``max_length``, not a batch's cost), its own unit (rows per
    batch, the shape a model sees) and its own default window, and a packed batch needs
    its collate; the planning is the same (:class:`~samplers.tokens.order.TokenOrder`'s
    windows, :class:`~samplers.tokens.layout.TokenLayout`), shared, not copied.

    Packing efficiency (real tokens over ``rows x max_length``) is measured in
    reports/token-costs.md.

    Example::

        >>> from samplers.tokens.collate import packed_collate
        >>> lengths = [5, 3, 8, 2, 6, 4, 7, 1]
        >>> sampler = DistributedPackedBatchSampler(lengths, 8, 2, num_replicas=1, rank=0,
        ...                                         shuffle=False, window=8)
        >>> batches = list(sampler)
        >>> [[lengths[i] for i in batch] for batch in batches]   # rows of at most 8 tokens
        [[4], [8, 7, 1], [6, 2, 5, 3]]
        >>> packed = packed_collate([list(range(lengths[i])) for i in batches[2]], 8)
        >>> packed["cu_seqlens"].tolist()   # rows [6, 2] and [5, 3], no padding
        [0, 6, 8, 13, 16]

    Args:
        lengths: each sample's length in tokens: a sequence, numpy array or tensor of
            non-negative integers, one per dataset index.
        max_length: the longest row, in tokens (at least 1).
        rows_per_batch: rows in one batch (at least 1).
        num_replicas: as for :class:`~samplers.DistributedTokenBatchSampler`.
        rank: as for :class:`~samplers.DistributedTokenBatchSampler`.
        shuffle: as for :class:`~samplers.DistributedTokenBatchSampler`.
        seed: as for :class:`~samplers.DistributedTokenBatchSampler`.
        tail: as for :class:`~samplers.DistributedTokenBatchSampler`.
        auto_epoch: as for :class:`~samplers.DistributedTokenBatchSampler`.
        permutation: as for :class:`~samplers.DistributedTokenBatchSampler`.
        group: as for :class:`~samplers.DistributedTokenBatchSampler`.
        cost: how a batch's cost is counted for the balance per step: ``"sum"`` (the
            tokens, default) or a summed :class:`~samplers.tokens.cost.TokenCost` (e.g.
            ``TokenCost("sum", quadratic=q)``: attention over a packed row costs each
            sample's own ``d²``). ``"padded"`` models are refused: a packed row is not
            padded per sample.
        window: samples packed together; default: about 512 rows' worth at the mean
            length, at most a quarter of the dataset. Larger windows pack more tightly
            and shuffle less.
        split: how documents are cut into pieces (:mod:`samplers.tokens.pieces`): ``None``
            (default: never; a document longer than ``max_length`` is a row of its own),
            ``"long"`` (documents longer than ``max_length`` cut into pieces of
            ``max_length``, so every row fits) or a piece length ``k`` (every document
            longer than ``k`` cut into pieces of ``k``, rows filled to within about a
            piece of the brim). The sampler then hands out piece ids, each exactly once
            per epoch with ``tail="uneven"``: read them with
            ``DataLoader(sampler.pieces_of(dataset), batch_sampler=sampler)``.
    """

    _warns_over_budget = False

    def __init__(
        self,
        lengths: Any,
        max_length: int,
        rows_per_batch: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        shuffle: bool = True,
        seed: int | None = 0,
        tail: Tail = "uneven",
        cost: CostLike = "sum",
        auto_epoch: bool = False,
        window: int | None = None,
        permutation: Permutation = "feistel",
        group: Any = None,
        split: Split = None,
    ) -> None:
        self.max_length = checks.positive("max_length", max_length)
        self.rows_per_batch = checks.positive("rows_per_batch", rows_per_batch)
        model = as_cost(cost)
        if model.kind != "sum":
            raise ValueError(
                f"cost must be summed for packed rows ('sum' or TokenCost('sum', ...)), got "
                f"{model.label!r}: a packed row is not padded per sample"
            )
        model.checked_budget(self.max_length * self.rows_per_batch, "max_length x rows_per_batch")
        #: The documents cut into the pieces the sampler hands out (``split=``; without
        #: it, each document is one piece and piece ids are dataset indices).
        self.pieces = Pieces.of(lengths_tensor(lengths), split, self.max_length)
        super().__init__(
            self.pieces.lengths,
            self.max_length * self.rows_per_batch,
            num_replicas,
            rank,
            shuffle=shuffle,
            seed=seed,
            tail=tail,
            cost=model,
            auto_epoch=auto_epoch,
            window=1 if window is None else window,
            permutation=permutation,
            group=group,
        )
        if window is None:  # from the lengths' size and sum, checked once: nothing copied
            self.window = default_packing_window(
                self._held.current, self.max_length, total=self._held.total
            )
        self._warn_over_length()

    def _warn_over_length(self) -> None:
        if self._held.size == 0 or self._held.longest <= self.max_length:
            return  # the usual case: the lengths are neither read again nor copied here
        lengths = self._held.owned()
        count = int((lengths > self.max_length).sum())
        longest = int(lengths.argmax())
        warnings.warn(
            f"{count} sample(s) are longer than max_length={self.max_length} (the longest: "
            f"index {longest}, {int(lengths[longest])} tokens); each forms a row of its own "
            "that is longer than max_length",
            SamplerWarning,
            stacklevel=3,
        )

    def pieces_of(self, dataset: Any, key: str = "input_ids") -> PieceDataset:
        """The dataset the DataLoader reads with ``split=``: ``dataset``'s documents cut
        into this sampler's pieces (item ``p`` is piece ``p``, the tokens under ``key``,
        with ``"document"`` and ``"start"``). Without ``split=`` each piece is a whole
        document, so it is ``dataset`` with those fields added."""
        return PieceDataset(dataset, self.pieces, key)

    def collate_fn(
        self, *, rows: bool = True, pad_id: int = 0, key: str = "input_ids"
    ) -> Callable[[Sequence[Any]], dict[str, Any]]:
        """The DataLoader's ``collate_fn`` for this sampler's batches:
        :func:`~samplers.tokens.collate.packed_collate` with this sampler's
        ``max_length`` and ``rows_per_batch`` (a batch whose samples make more rows than
        that is refused: the dataset's samples are not as long as ``lengths`` says).
        Picklable, for DataLoader workers."""
        return functools.partial(
            packed_collate,
            max_length=self.max_length,
            rows_per_batch=self.rows_per_batch,
            rows=rows,
            pad_id=pad_id,
            key=key,
        )

    def order(self) -> PackedOrder:
        """The current epoch's packed order (kept while the settings stay the same)."""
        epoch = checks.epoch(self.epoch)
        seed = checks.seed(self.seed)
        shuffle = checks.as_flag("shuffle", self.shuffle)
        permutation = checks.permutation(self.permutation)
        model = as_cost(self.cost)
        key: tuple[Any, ...] = (epoch, seed, shuffle, permutation, model, self.window)
        key += (self.max_length, self.rows_per_batch)
        if self._order is None or self._order[0] != key:
            if shuffle:
                checks.shuffle_key_fits(seed, epoch, permutation)
            # As the token sampler: the first chunk reads the caller's lengths, the rest
            # plans from the sampler's own copy (made then), so the first batch comes at once.
            order = PackedOrder(
                self._held.current,
                self.max_length,
                self.rows_per_batch,
                model,
                self.window,
                shuffle=shuffle,
                seed=seed,
                epoch=epoch,
                permutation=permutation,
                source=self._held,
            )
            self._order, self._layouts = (key, order), {}
        found = self._order[1]
        assert isinstance(found, PackedOrder)
        return found

    def _order_fields(self) -> dict[str, int | str]:
        """The token sampler's, with the row length and rows per batch for its budget,
        and how documents are cut."""
        fields = super()._order_fields()
        del fields["max_tokens"]
        fields["max_length"] = self.max_length
        fields["rows_per_batch"] = self.rows_per_batch
        fields["split"] = self.pieces.label
        return fields

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, including the row length, rows per batch, the
        cost and the window."""
        values = super().settings()
        del values["max_tokens"]
        values["max_length"] = self.max_length
        values["rows_per_batch"] = self.rows_per_batch
        values["split"] = self.pieces.label
        return values

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset length={self._held.size}, "
            f"max_length={self.max_length}, rows_per_batch={self.rows_per_batch}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, tail={self.tail!r}, cost={as_cost(self.cost).label!r}, "
            f"window={self.window}, epoch={self.epoch})"
        )
