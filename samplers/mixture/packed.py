"""Packed rows from a mixture: :class:`DistributedPackedMixtureSampler`.

A thin adapter: the mixture's stream (:class:`~samplers.mixture.order.MixtureOrder`,
position -> (source, its draw) -> a piece of ``ConcatDataset(datasets)``) fills the
windows of a :class:`~samplers.tokens.packing.PackedOrder` in place of the epoch
permutation, which packs each window best-fit decreasing into rows, as for
:class:`~samplers.DistributedPackedBatchSampler` (its hooks, reused, not copied).
Documents may be cut into pieces first (``split=``, :mod:`samplers.tokens.pieces`): the
sources are then read in passes over their pieces. The mixture's state (one global
position plus the weight schedule), :meth:`set_weights` and checks are the mixture
samplers'.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import torch

from samplers import checks, groups, state
from samplers.mixture.checks import checked_datasets
from samplers.mixture.merge import Mixing
from samplers.mixture.sampler import _Mixture
from samplers.mixture.schedule import parts
from samplers.mixture.tokens import (
    MERGED,
    MIXING_FIELD,
    checked_token_parts,
    draw_shares,
    merged_by_tokens,
    refuse_rate_state,
)
from samplers.options import Tail
from samplers.plan import EpochPlan
from samplers.tokens.checks import choice, lengths_tensor, token_tail
from samplers.tokens.cost import CostLike, TokenCost, as_cost
from samplers.tokens.held import HeldLengths
from samplers.tokens.packed import DistributedPackedBatchSampler
from samplers.tokens.packing import PackedOrder, default_packing_window
from samplers.tokens.pieces import PieceDataset, Pieces, Split
from samplers.tokens.sampler import DistributedTokenBatchSampler

__all__ = ["WEIGHTS_IN", "DistributedPackedMixtureSampler"]

#: What the weights count: the sources' tokens, or their samples (pieces).
WEIGHTS_IN = ("tokens", "samples")


class DistributedPackedMixtureSampler(_Mixture, DistributedPackedBatchSampler):
    """Rows of at most ``max_length`` tokens packed from several datasets mixed by weight,
    batches of ``rows_per_batch`` rows, the same number of batches on every rank.

    Guarantees (over all ranks together, whatever the world size):

    * **the mixture's proportions**, counted as ``weights_in`` says: in ``"samples"``, the
      stream of draws is exact at every prefix (after ``k`` draws each source has ``c_d``
      with ``|c_d - k * p_d| < 1``, ``p_d`` its share, :attr:`proportions`); in
      ``"tokens"`` (default), the sources' draws are merged by their tokens so far over
      their weight, so at every prefix of the stream each source is within half of its
      longest piece of a common level ``L * w_d`` (as
      :class:`~samplers.DistributedMixtureTokenBatchSampler` states it). The batches hand
      out the stream a **window** at a time, each window packed, so after any step the
      bound holds plus the tokens of the part of one window handed out; not per step;
    * **once per pass, as handed out**: each source is read in passes over its pieces,
      each a shuffle seeded from ``(seed, source, pass)``; each window holds exactly the
      stream's draws there, and a window holding the end of a source's pass is packed
      and handed out **phase by phase**
      (:meth:`~samplers.mixture.order.MixtureOrder.window_phases`), so in the order the batches
      are handed out (each step's in rank order) every pass of a source holds each of its
      pieces once: small sources are upsampled by passes, never by repeats within one;
    * **rows**: every piece is in one row, whole; a row's pieces sum to at most
      ``max_length`` (with ``split="long"`` or a piece length, always; without ``split``
      a document longer than ``max_length`` is a row of its own), packed best-fit
      decreasing per window as :class:`~samplers.DistributedPackedBatchSampler` packs; in
      a window with phases, each phase best-fit decreasing on its own (and into the
      last row before it), then the pieces
      of the sources whose passes do not end there into every row left open and rows of
      their own (:mod:`samplers.tokens.packing`);
    * **equal steps**: every rank yields the same number of batches (``tail`` as for the
      token samplers);
    * **resume on any world size** from one number plus the weight schedule
      (:meth:`state_dict`; a state of another mixture, lengths, split, row length, cost or
      window is refused naming the field), and :meth:`set_weights` repeats nothing and
      is reproduced by a resume: new weights take effect from the **next window boundary**.

    Epochs are windows of one stream, ``epoch_length`` draws each (default: the sources'
    total number of pieces), so the passes continue across epochs. With ``"samples"``
    weights proportional to the sources' piece counts (or ``"tokens"`` weights to their
    tokens), an epoch of the default length is every piece exactly once (``tail="uneven"``).

    Example::

        >>> lengths = [7, 3, 5, 2] + [4] * 6          # a source of 4 documents, one of 6
        >>> sampler = DistributedPackedMixtureSampler(
        ...     [range(4), range(6)], [17, 24], lengths, 8, 2, num_replicas=1, rank=0)
        >>> sorted(i for batch in sampler for i in batch)   # token weights 17:24, their totals
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

    Args:
        datasets: the sources, a sequence of sized datasets or a ``ConcatDataset``; the
            documents are those of ``ConcatDataset(datasets)`` (also :attr:`dataset`).
        weights: one non-negative number per source, not all 0 (0 pauses a source); only
            their ratios matter. What they share is ``weights_in``.
        lengths: each document's length in ``ConcatDataset(datasets)``, in tokens.
        max_length: the longest row, in tokens.
        rows_per_batch: rows in one batch.
        num_replicas: as for :class:`~samplers.DistributedPackedBatchSampler`.
        rank: as for :class:`~samplers.DistributedPackedBatchSampler`.
        shuffle: as for :class:`~samplers.DistributedMixtureSampler`.
        seed: as for :class:`~samplers.DistributedMixtureSampler`.
        weights_in: ``"tokens"`` (the weights share the tokens) or ``"samples"`` (they
            share the draws: pieces, or documents without ``split``).
        split: as for :class:`~samplers.DistributedPackedBatchSampler`; the sampler hands
            out piece ids: read them with ``DataLoader(sampler.pieces_of(),
            batch_sampler=sampler)``.
        epoch_length: draws (pieces) per epoch; default: the sources' total.
        tail: as for :class:`~samplers.DistributedPackedBatchSampler` (default ``"uneven"``).
        cost: as for :class:`~samplers.DistributedPackedBatchSampler` (summed).
        auto_epoch: as for :class:`~samplers.DistributedPackedBatchSampler`.
        window: draws packed together; default: the packed sampler's default for the
            pieces' lengths and ``max_length``, at most ``epoch_length``.
        group: as for :class:`~samplers.DistributedPackedBatchSampler`.
    """

    def __init__(
        self,
        datasets: Any,
        weights: Any,
        lengths: Any,
        max_length: int,
        rows_per_batch: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        *,
        weights_in: str = "tokens",
        split: Split = None,
        epoch_length: int | None = None,
        tail: Tail = "uneven",
        cost: CostLike = "sum",
        auto_epoch: bool = False,
        window: int | None = None,
        group: groups.Group = None,
    ) -> None:
        self.max_length = checks.positive("max_length", max_length)
        self.rows_per_batch = checks.positive("rows_per_batch", rows_per_batch)
        self.weights_in = choice("weights_in", weights_in, WEIGHTS_IN)
        model = as_cost(cost)
        if model.kind != "sum":
            raise ValueError(
                f"cost must be summed for packed rows ('sum' or TokenCost('sum', ...)), got "
                f"{model.label!r}: a packed row is not padded per sample"
            )
        model.checked_budget(self.max_length * self.rows_per_batch, "max_length x rows_per_batch")
        documents = lengths_tensor(lengths)
        _, sizes = checked_datasets(datasets, weights)
        if documents.numel() != sum(sizes):
            raise ValueError(
                f"lengths must hold one length per document of ConcatDataset(datasets) "
                f"({sum(sizes)} in sources of sizes {list(sizes)}), got {documents.numel()}"
            )
        self.pieces = Pieces.of(documents, split, self.max_length)
        # Each source's pieces: from its first document's first piece to the next one's.
        starts = torch.tensor([sum(sizes[:d]) for d in range(len(sizes))], dtype=torch.int64)
        first, _ = self.pieces.pieces_of(starts)
        bounds = [*first.tolist(), len(self.pieces)]
        piece_sizes = tuple(b - a for a, b in itertools.pairwise(bounds))
        # Checked and summed per source now, copied when first needed (as the packed
        # sampler's): the copy is refused unless every source sums to the same.
        self._held = HeldLengths(self.pieces.lengths, parts=tuple(bounds[1:]))
        #: Each source's total length (its tokens).
        self.source_tokens = self._held.part_totals
        self.max_tokens = self.max_length * self.rows_per_batch
        self.tail = token_tail(tail)
        self.cost = model.kind if model == TokenCost(model.kind) else model
        self.length_sum = sum(self.source_tokens)
        self._init_mixture(
            datasets,
            weights,
            num_replicas,
            rank,
            shuffle,
            seed,
            epoch_length,
            self.tail,
            auto_epoch,
            group,
            sizes=piece_sizes,
        )
        self.window = (
            min(
                default_packing_window(self._held.current, self.max_length, total=self._held.total),
                self.epoch_length,
            )
            if window is None
            else checks.positive("window", window)
        )
        self._order: tuple[tuple[Any, ...], Any] | None = None
        self._layouts = {}
        self._warned_unequal = False
        self._length_digest: str | None = None
        self._warn_over_length()

    # Weights ------------------------------------------------------------------------------

    def _parts(self, weights: tuple[float | int | Fraction, ...]) -> tuple[int, ...]:
        if self.weights_in == "samples":
            return parts(weights)
        return checked_token_parts(weights, self.source_tokens, ", or weights_in='samples'")

    def _schedule_of(self, segments: tuple[tuple[int, tuple[int, ...]], ...]) -> Mixing:
        """Weights in tokens: the sources' draws merged by their tokens over their weight
        (:class:`~samplers.mixture.merge.TokenMerge`); in samples, the draws' schedule."""
        if self.weights_in == "samples":
            return super()._schedule_of(segments)
        return merged_by_tokens(self, segments)

    def _reweight_position(self, position: int) -> int:
        """The next window boundary of the epoch (or its end), as for the token mixture."""
        window = checks.positive("window", self.window)
        epoch, within = divmod(position, self.epoch_length)
        boundary = min(-(-within // window) * window, self.epoch_length)
        return epoch * self.epoch_length + boundary

    @property
    def proportions(self) -> tuple[Fraction, ...]:
        """Each source's share of the draws under the newest weights: exact with weights
        in samples; with weights in tokens the expected share (its token weight over its
        mean piece length, normalised)."""
        shares = super().proportions  # the newest parts, normalised
        if self.weights_in == "samples":
            return shares
        return draw_shares(shares, self.sizes, self.source_tokens)

    @property
    def token_proportions(self) -> tuple[Fraction, ...]:
        """Each source's share of the tokens under the newest weights: the weights with
        weights in tokens; with weights in samples its share of the draws times its mean
        piece length, normalised."""
        if self.weights_in == "tokens":
            return super().proportions
        shares = [
            share * Fraction(tokens, size)
            for share, tokens, size in zip(
                self.proportions, self.source_tokens, self.sizes, strict=True
            )
        ]
        total = sum(shares)
        return tuple(share / total for share in shares)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As :meth:`DistributedMixtureSampler.load_state_dict`; the state must be of the
        same lengths, split, row length, rows per batch, cost, window and weights' unit
        (each refused naming the field). A state of a version that packed each window as
        one (no ``passes`` field) loads where its epoch's rest is whole windows (at a
        window boundary, or finished); mid-window it is refused, naming the field. With
        weights in tokens, a state of a version before the merge by tokens is refused
        naming its missing field."""
        saved = state_dict.get("weights_in") if isinstance(state_dict, dict) else None
        if saved is not None and saved != self.weights_in:  # before the schedule's parts
            raise state.other_order("weights_in", saved, self.weights_in)
        if self.weights_in == "tokens":
            refuse_rate_state(self, state_dict)
        if isinstance(state_dict, dict) and "passes" not in state_dict:
            position, window = state_dict.get("position"), self.window
            ours = state_dict.get("window", window) == window  # else refused naming window
            if (
                ours
                and isinstance(position, int)
                and position % window
                and not state_dict.get("finished")
            ):
                raise ValueError(
                    f"state field 'passes' is missing: a state of an earlier version, saved "
                    f"at position {position}, inside a window of {window} draws, which that "
                    "version packed as one and handed out in another order; the rest of "
                    "that window cannot be known (resume from a state saved at a window "
                    f"boundary, a multiple of {window}, or at the epoch's end)"
                )
        super().load_state_dict(state_dict)
        if self.weights_in == "tokens":
            self.weights = self.token_proportions

    # Hooks: the packed sampler's, over the mixture's stream --------------------------------

    def order(self) -> PackedOrder:
        """The current epoch's order: the mixture's window of the stream, packed into rows
        (kept while the settings and the schedule stay the same)."""
        stream = self._mixture_order()
        model = as_cost(self.cost)
        key = (
            stream.epoch,
            stream.seed,
            stream.shuffle,
            stream.schedule,
            stream.length,
            model,
            self.window,
            self.max_length,
            self.rows_per_batch,
        )
        if self._order is None or self._order[0] != key:
            order = PackedOrder(
                self._held.current,
                self.max_length,
                self.rows_per_batch,
                model,
                checks.positive("window", self.window),
                shuffle=stream.shuffle,
                seed=stream.seed,
                epoch=stream.epoch,
                permutation="feistel",
                stream=stream,
                source=self._held,
            )
            # Each window packed pass by pass: no source's next pass before its last ends.
            order.phases = stream.phased(order.window)
            self._order, self._layouts = (key, order), {}
        found = self._order[1]
        assert isinstance(found, PackedOrder)
        return found

    def _plan(self, start: int) -> EpochPlan:
        return DistributedTokenBatchSampler._plan(self, start)

    def _order_fields(self) -> dict[str, int | str]:
        return {
            **_Mixture._order_fields(self),
            **DistributedPackedBatchSampler._order_fields(self),
            "weights_in": self.weights_in,
            **({MIXING_FIELD: MERGED} if self.weights_in == "tokens" else {}),
            # Each window handed out pass by pass (states without it: see load_state_dict).
            "passes": "in order",
        }

    def pieces_of(self, dataset: Any = None, key: str = "input_ids") -> PieceDataset:
        """The dataset a DataLoader reads: the documents of ``dataset`` (default
        :attr:`dataset`, ``ConcatDataset(datasets)``) cut into this sampler's pieces."""
        return PieceDataset(self.dataset if dataset is None else dataset, self.pieces, key)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(sizes={list(self.sizes)}, weights={list(self.weights)}, "
            f"weights_in={self.weights_in!r}, max_length={self.max_length}, "
            f"rows_per_batch={self.rows_per_batch}, split={self.pieces.label!r}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, tail={self.tail!r}, window={self.window}, "
            f"epoch_length={self.epoch_length}, epoch={self.epoch})"
        )
