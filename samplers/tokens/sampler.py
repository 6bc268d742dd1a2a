"""Token-budgeted batches for variable-length data: :class:`DistributedTokenBatchSampler`.

A thin adapter over :class:`~samplers.tokens.order.TokenOrder` (what the epoch's batches
are) and :class:`~samplers.tokens.layout.TokenLayout` (which rank takes which, step by
step); epochs, iteration, checkpoints and agreement are the sampler core's
(:mod:`samplers.core`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from samplers import checks, consistency, groups, resharding
from samplers.core import SamplerCore
from samplers.iterators import BatchIterator
from samplers.options import Permutation, Tail
from samplers.plan import EpochPlan, Layout, ShardSizes
from samplers.tokens.checks import lengths_tensor, token_tail, warn_over_budget
from samplers.tokens.cost import Cost, CostLike, TokenCost, as_cost, warn_costly
from samplers.tokens.held import HeldLengths, length_digest
from samplers.tokens.layout import TokenLayout
from samplers.tokens.order import TokenOrder, default_window

__all__ = ["DistributedTokenBatchSampler"]


class DistributedTokenBatchSampler(SamplerCore, Sampler[list[int]]):
    """Batches under a token budget, the same number on every rank, balanced per step.

    Guarantee: every batch costs at most ``max_tokens`` (``cost="padded"``: the longest
    length times the count, as a batch padded to its longest sample costs; ``"sum"``: the
    sum of the lengths, for packed sequences), except that a sample longer than
    ``max_tokens`` forms a batch of its own (a ``SamplerWarning`` at construction counts
    them; ``tail`` below says whether it is handed out). Every rank yields the same number
    of batches (one
    exception below, with ``tail="uneven"``), so a collective run once per batch cannot
    wait on a rank that has finished; and the ``W`` batches of each step are neighbours
    in a cost-sorted run of the epoch order, so they cost about the same. Every rank
    computes the same epoch from ``(lengths, seed, epoch)`` without communication.

    How: the epoch's permutation is cut into windows of ``window`` samples; each window is
    sorted by length, cut greedily into batches under the budget, and its batches ordered
    by cost (:mod:`samplers.tokens.order`). Step ``k`` deals the ``k``-th run of
    ``num_replicas`` batches, one per rank (:mod:`samplers.tokens.layout`). The order does
    not depend on the world size, so a checkpoint is one global position and resumes on
    any world size.

    ``tail`` decides what happens when the batches do not divide over the ranks:

    * ``"uneven"`` (default): every sample exactly once per epoch, an over-long one too;
      the last batches are cut in two until the count divides. Only an epoch with fewer
      than ``num_replicas - 1`` batches of two samples or more (e.g. fewer samples than
      ranks) gives the last ranks one batch fewer, with a warning;
    * ``"pad"``: every sample at least once per epoch, an over-long one too; the last
      step is completed with the epoch's first batches again;
    * ``"drop"``: fewer than ``num_replicas`` batches at the end are not handed out; an
      over-long sample whose batch is one of them is left out of that epoch.

    The number of batches depends on the epoch's shuffle, so ``len(sampler)`` can differ
    from epoch to epoch (by a few batches); it is the count of the epoch currently set.
    It plans the whole epoch at once (reports/token-batches.md measures how long that
    takes), which iterating does not need: iteration plans a chunk of windows at a time,
    and the first batch needs only the first chunk.

    Example::

        >>> from torch.utils.data import DataLoader
        >>> lengths = [8, 1, 8, 6, 2, 4, 4, 2, 6, 7]
        >>> ranks = [DistributedTokenBatchSampler(lengths, 16, num_replicas=2, rank=r)
        ...          for r in range(2)]
        >>> [len(sampler) for sampler in ranks]
        [2, 2]
        >>> batches = [list(sampler) for sampler in ranks]
        >>> batches
        [[[3, 6], [2, 0]], [[9, 8], [5, 7, 4, 1]]]
        >>> [[max(lengths[i] for i in batch) * len(batch) for batch in share]
        ...  for share in batches]  # each batch padded to its longest: at most 16 tokens
        [[12, 16], [14, 16]]
        >>> ranks[1].set_epoch(1)
        >>> [batch.tolist() for batch in DataLoader(range(10), batch_sampler=ranks[1])]
        [[3, 6], [2, 8], [4]]

    Args:
        lengths: each sample's length (tokens, frames, ...): a sequence, numpy array or
            tensor of non-negative integers, one per dataset index.
        max_tokens: the budget of one batch's cost (at least 1).
        num_replicas: number of ranks; default: the default process group's world size.
        rank: this process's rank in ``[0, num_replicas)``; default: from the process group.
        shuffle: a fresh order each epoch from ``seed + epoch``; without it the windows
            follow the dataset order (still sorted and cut by length).
        seed: must be the same on every rank; ``None``: one random seed agreed by all
            ranks (a collective).
        tail: ``"uneven"``, ``"pad"`` or ``"drop"``.
        cost: ``"padded"`` or ``"sum"`` (linear in the lengths), or a
            :class:`~samplers.tokens.cost.TokenCost`: quadratic (``TokenCost("padded",
            quadratic=q)``, each sample ``d + d² / q``) or a named function of the lengths
            (see :mod:`samplers.tokens.cost`); a mapping of its fields is taken too. The
            budget, the balance and the checkpoint (which records the model) follow it.
        auto_epoch: advance the epoch on each new iteration without ``set_epoch``.
        window: samples sorted together; default: about 64 batches' worth at the mean
            length, at most a quarter of the dataset unless two batches' worth is more,
            and never more than the dataset (a budget far above the data: one window of
            the whole dataset, cut into batches as it allows). Larger windows pad less and
            shuffle less: a window as large as the dataset gives the same batches every
            epoch (sorted by length), only their order changes.
        permutation: ``"feistel"`` (default: nothing of size ``N`` is drawn, the
            permutation is computed a chunk of windows at a time, so the first batch
            comes at once at any dataset size and the order costs no memory) or
            ``"randperm"`` (``torch.randperm`` drawn whole at the first batch, 4 bytes
            per sample; planning the whole epoch then took 10-15% longer at 10**6
            samples and 2-6% less time at 10**7, rank 7 of 8 on one thread, medians of 7
            runs in one process, alternating the two, in two processes).
        group: the data-parallel group to shard over (a ``ProcessGroup`` or a 1-D
            ``DeviceMesh``); default: the default process group.
    """

    #: Whether ``__init__`` warns of samples over ``max_tokens`` (a subclass with another
    #: limit warns itself).
    _warns_over_budget = True

    def __init__(
        self,
        lengths: Any,
        max_tokens: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        shuffle: bool = True,
        seed: int | None = 0,
        tail: Tail = "uneven",
        cost: CostLike = "padded",
        auto_epoch: bool = False,
        window: int | None = None,
        permutation: Permutation = "feistel",
        group: groups.Group = None,
    ) -> None:
        #: The lengths, checked; copied when first needed (:attr:`lengths`).
        self._held = HeldLengths(lengths_tensor(lengths))
        self.max_tokens = checks.positive("max_tokens", max_tokens)
        self.group = groups.reference(group)
        self.num_replicas, self.rank = groups.placement(num_replicas, rank, self.group)
        self.shuffle = checks.as_flag("shuffle", shuffle)
        self.tail = token_tail(tail)
        model = as_cost(cost)
        model.checked_budget(self.max_tokens, count=self._held.size, longest=self._held.longest)
        #: ``"padded"``, ``"sum"``, or a :class:`~samplers.tokens.cost.TokenCost`.
        self.cost: Cost | TokenCost = model.kind if model == TokenCost(model.kind) else model
        self.permutation = checks.permutation(permutation)
        self.length_sum = self._held.total
        if self._warns_over_budget and not model.linear:
            # First: it runs a named function over every length, refusing bad costs.
            warn_costly(self._held.owned(), self.max_tokens, model)
        self.window = (
            default_window(self._held.current, self.max_tokens, self.length_sum, model)
            if window is None
            else checks.positive("window", window)
        )
        self.seed = consistency.seed_or_agreed(seed)
        if self.shuffle:
            checks.shuffle_key_fits(self.seed, 0, self.permutation)
        self.epoch = 0
        self._init_core(auto_epoch)
        self._order: tuple[tuple[Any, ...], TokenOrder] | None = None
        self._layouts: dict[tuple[Any, ...], TokenLayout] = {}
        self._warned_unequal = False
        self._length_digest: str | None = None
        if self._warns_over_budget and model.linear:
            warn_over_budget(self._held.current, self.max_tokens, self.tail, self._held.longest)

    # Plans ----------------------------------------------------------------------------------

    def order(self) -> TokenOrder:
        """The current epoch's order (kept while the settings stay the same)."""
        epoch = checks.epoch(self.epoch)
        seed = checks.seed(self.seed)
        shuffle = checks.as_flag("shuffle", self.shuffle)
        permutation = checks.permutation(self.permutation)
        key = (epoch, seed, shuffle, permutation, self.max_tokens, self.cost, self.window)
        if self._order is None or self._order[0] != key:
            if shuffle:
                checks.shuffle_key_fits(seed, epoch, permutation)
            order = TokenOrder(
                self._held.current,
                self.max_tokens,
                self.cost,
                self.window,
                shuffle=shuffle,
                seed=seed,
                epoch=epoch,
                permutation=permutation,
                source=self._held,
            )
            self._order, self._layouts = (key, order), {}
        return self._order[1]

    def layout(self, start: int = 0) -> TokenLayout:
        """The current epoch's layout from global position ``start``, for this world size.

        Kept with the order, so the planning ``len()`` does serves ``iter()``.
        """
        order = self.order()
        world = checks.world_size(self.num_replicas)
        checks.rank(self.rank, world)
        key = (world, token_tail(self.tail), start)
        if key not in self._layouts:
            if len(self._layouts) >= 4:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = TokenLayout(order, *key)
        return self._layouts[key]

    def _plan(self, start: int) -> EpochPlan:
        layout = self.layout(start)
        order = layout.order
        sizes = ShardSizes.of(order.size, layout.world_size, drop_last=layout.tail == "drop")
        return EpochPlan(
            sizes, order.shuffle, order.seed, order.epoch, layout, order.permutation, order
        )

    @property
    def lengths(self) -> torch.Tensor:
        """A copy of the lengths the sampler plans from: int32, or int64 when a length is
        ``2**31`` or more (changing it changes nothing in the sampler).

        The sampler's own copy (:class:`~samplers.tokens.held.HeldLengths`) is made when
        first needed, in int16 when every length is below ``2**15``. Before it, the first
        chunk planned reads its samples' lengths from the caller's int32 or int64 tensor;
        the copy is refused if the sum, the largest length or those samples' lengths
        changed in between."""
        return self._held.widened()

    def _dataset_length(self) -> int:
        return self._held.size

    def _end_position(self) -> int:
        # From the order's end the layout hands out nothing (without planning the epoch).
        return self._held.size

    def _new_iterator(self, plan: EpochPlan) -> BatchIterator:
        return BatchIterator.of(plan, checks.as_int("rank", self.rank))

    @property
    def length_digest(self) -> str:
        """A digest of the lengths in order (computed once, when first needed), which a
        state and :meth:`check_consistent` compare: the same sum in another order is
        another epoch order."""
        if self._length_digest is None:
            self._length_digest = length_digest(self._held.owned())
        return self._length_digest

    def _order_fields(self) -> dict[str, int | str]:
        return {
            "length_sum": self.length_sum,
            "length_digest": self.length_digest,
            "max_tokens": self.max_tokens,
            "cost": as_cost(self.cost).label,
            "window": self.window,
        }

    def __getstate__(self) -> dict[str, Any]:
        state = SamplerCore.__getstate__(self)
        state["_order"], state["_layouts"] = None, {}
        return state

    # Iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[list[int]]:
        resharding.check(self)
        iterator = self._begin()
        layout = iterator.plan.layout
        if isinstance(layout, TokenLayout) and layout.order.chunks <= 1:
            self._warn_unequal(layout)  # a small epoch: planned at once, warned at once
        else:
            iterator.at_end = self._warn_unequal  # once the epoch is planned
        return iterator

    def _warn_unequal(self, layout: Layout) -> None:
        """Warn once when ranks get different numbers of batches (``"uneven"`` only)."""
        if self._warned_unequal:
            return
        fewest, most = layout.count_range()
        if fewest != most:
            self._warned_unequal = True
            warnings.warn(
                f"{type(self).__name__}(tail='uneven') gives ranks {fewest} or "
                f"{most} batches this epoch: too few batches of two samples or more "
                f"are left to cut for {layout.world_size} ranks, so a collective run once "
                "per batch would wait on the ranks with fewer; use tail='pad' or DDP's join()",
                checks.SamplerWarning,
                stacklevel=3,
            )

    def __len__(self) -> int:
        """Batches this rank yields this epoch (the rest of it, with a loaded state
        pending); plans the whole epoch."""
        remaining = self._remaining_count()
        if remaining is not None:
            return remaining
        return self.layout(0).count(checks.as_int("rank", self.rank))

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, including the budget, the cost and the window."""
        return {
            **super().settings(),
            "length sum": self.length_sum,
            "length digest": self.length_digest,
            "max_tokens": self.max_tokens,
            "cost": as_cost(self.cost).label,
            "window": self.window,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset length={self._held.size}, "
            f"max_tokens={self.max_tokens}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"tail={self.tail!r}, cost={self.cost!r}, window={self.window}, epoch={self.epoch})"
        )
