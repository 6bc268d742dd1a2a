"""Token-budgeted batches for variable-length data: :class:`DistributedTokenBatchSampler`.

A thin adapter over :class:`~samplers.token_order.TokenOrder` (what the epoch's batches
are) and :class:`~samplers.token_layout.TokenLayout` (which rank takes which, step by
step): argument checks, epochs, iteration and checkpoints.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch.utils.data import Sampler

from samplers import agreement, checks
from samplers.epochs import EpochCounter
from samplers.plan import TAILS, Permutation, Tail
from samplers.token_checks import (
    STATE_VERSION,
    checked_lengths,
    checked_state,
    choice,
    warn_over_budget,
)
from samplers.token_layout import TokenLayout
from samplers.token_order import COSTS, Cost, TokenOrder, default_window, length_sum

__all__ = ["DistributedTokenBatchSampler", "TokenBatchIterator"]


class TokenBatchIterator(Iterator[list[int]]):
    """``rank``'s batches of a :class:`TokenLayout` from batch ``taken`` on, as lists of ints.

    Guarantee: yields exactly the layout's batches for ``rank`` in step order, computing
    them a few steps at a time (the first few at once, then up to :data:`STEPS`), so the
    first batch never waits for the whole epoch to be planned. ``taken`` counts the
    batches yielded since the iterator was created.
    """

    #: At most this many steps are turned into lists at a time.
    STEPS = 256

    def __init__(
        self,
        layout: TokenLayout,
        rank: int,
        *,
        closed: bool = False,
        at_end: Callable[[TokenLayout], None] | None = None,
    ) -> None:
        self.layout = layout
        self.rank = rank
        self.taken = 0
        #: Whether ``next()`` has been called.
        self.started = False
        #: Created empty: it continues an epoch a loaded state says is finished.
        self.closed = closed
        self._done = closed
        self._at_end = at_end
        self._next = 0
        self._step = 4
        self._ready: deque[list[int]] = deque()

    def __iter__(self) -> TokenBatchIterator:
        return self

    def __next__(self) -> list[int]:
        self.started = True
        if not self._ready and not self._done:
            positions, sizes = self.layout.batches(self.rank, self._next, self._next + self._step)
            self._done = len(sizes) < self._step
            self._next += len(sizes)
            self._step = min(self._step * 2, self.STEPS)
            flat = self.layout.order.at(positions).tolist()
            offset = 0
            for size in sizes:
                self._ready.append(flat[offset : offset + size])
                offset += size
        if not self._ready:
            if self._at_end is not None and not self.closed:
                self._at_end(self.layout)
                self._at_end = None
            raise StopIteration
        self.taken += 1
        return self._ready.popleft()


class DistributedTokenBatchSampler(EpochCounter, Sampler[list[int]]):
    """Batches under a token budget, the same number on every rank, balanced per step.

    Guarantee: every batch costs at most ``max_tokens`` (``cost="padded"``: the longest
    length times the count, as a batch padded to its longest sample costs; ``"sum"``: the
    sum of the lengths, for packed sequences), except that a sample longer than
    ``max_tokens`` forms a batch of its own (a ``UserWarning`` at construction counts
    them; none is ever dropped). Every rank yields the same number of batches (one
    exception below, with ``tail="uneven"``), so a collective run once per batch cannot
    wait on a rank that has finished; and the ``W`` batches of each step are neighbours
    in a cost-sorted run of the epoch order, so they cost about the same. Every rank
    computes the same epoch from ``(lengths, seed, epoch)`` without communication.

    How: the epoch's permutation is cut into windows of ``window`` samples; each window is
    sorted by length, cut greedily into batches under the budget, and its batches ordered
    by cost (:mod:`samplers.token_order`). Step ``k`` deals the ``k``-th run of
    ``num_replicas`` batches, one per rank (:mod:`samplers.token_layout`). The order does
    not depend on the world size, so a checkpoint is one global position and resumes on
    any world size.

    ``tail`` decides what happens when the batches do not divide over the ranks:

    * ``"uneven"`` (default): every sample exactly once per epoch; the last batches are
      cut in two until the count divides. Only an epoch with fewer than
      ``num_replicas - 1`` batches of two samples or more (e.g. fewer samples than
      ranks) gives the last ranks one batch fewer, with a warning;
    * ``"pad"``: the last step is completed with the epoch's first batches again;
    * ``"drop"``: fewer than ``num_replicas`` batches at the end are not handed out.

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
        cost: ``"padded"`` or ``"sum"``.
        auto_epoch: advance the epoch on each new iteration without ``set_epoch``.
        window: samples sorted together; default: about 64 batches' worth at the mean
            length, and at most a quarter of the dataset. Larger windows pad less and
            shuffle less: a window as large as the dataset gives the same batches every
            epoch (sorted by length), only their order changes.
        permutation: ``"feistel"`` (default: nothing of size ``N`` is drawn, the
            permutation is computed a chunk of windows at a time, so the first batch
            comes at once at any dataset size and the order costs no memory) or
            ``"randperm"`` (``torch.randperm`` drawn whole at the first batch, 4 bytes
            per sample; planning the whole epoch then takes about half the time).
    """

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
        cost: Cost = "padded",
        auto_epoch: bool = False,
        window: int | None = None,
        permutation: Permutation = "feistel",
    ) -> None:
        self.lengths = checked_lengths(lengths)
        self.max_tokens = checks.positive("max_tokens", max_tokens)
        self.num_replicas, self.rank = checks.placement(num_replicas, rank)
        self.shuffle = checks.as_flag("shuffle", shuffle)
        self.tail: Tail = choice("tail", tail, TAILS)  # type: ignore[assignment]
        self.cost: Cost = choice("cost", cost, COSTS)  # type: ignore[assignment]
        self.permutation: Permutation = checks.permutation(permutation)
        self.length_sum = length_sum(self.lengths)
        self.window = (
            default_window(self.lengths, self.max_tokens, self.length_sum)
            if window is None
            else checks.positive("window", window)
        )
        self.seed = checks.seed_or_agreed(seed)
        if self.shuffle:
            checks.shuffle_key_fits(self.seed, 0, self.permutation)
        self.epoch = 0
        self._init_epochs(auto_epoch)
        self._iterator: TokenBatchIterator | None = None
        self._undo: tuple[Any, ...] | None = None
        self._pending: dict[str, Any] | None = None
        self._order: tuple[tuple[Any, ...], TokenOrder] | None = None
        self._layouts: dict[tuple[Any, ...], TokenLayout] = {}
        self._warned_unequal = False
        warn_over_budget(self.lengths, self.max_tokens)

    # Plans ----------------------------------------------------------------------------------

    def order(self) -> TokenOrder:
        """The current epoch's order (kept while the settings stay the same)."""
        epoch = checks.epoch(self.epoch)
        key = (epoch, self.seed, self.shuffle, self.permutation, self.max_tokens, self.cost)
        if self._order is None or self._order[0] != (*key, self.window):
            if self.shuffle:
                checks.shuffle_key_fits(self.seed, epoch, self.permutation)
            order = TokenOrder(
                self.lengths,
                self.max_tokens,
                self.cost,
                self.window,
                shuffle=self.shuffle,
                seed=self.seed,
                epoch=epoch,
                permutation=self.permutation,
            )
            self._order, self._layouts = ((*key, self.window), order), {}
        return self._order[1]

    def layout(self, start: int = 0) -> TokenLayout:
        """The current epoch's layout from global position ``start``, for this world size.

        Kept with the order, so the planning ``len()`` does serves ``iter()``.
        """
        order = self.order()
        key = (checks.world_size(self.num_replicas), self.tail, start)
        if key not in self._layouts:
            if len(self._layouts) >= 4:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = TokenLayout(order, *key)
        return self._layouts[key]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_order"], state["_layouts"] = None, {}
        return state

    # Iteration ------------------------------------------------------------------------------

    def __iter__(self) -> TokenBatchIterator:
        previous, undo = self._iterator, self._undo
        if (
            previous is not None
            and undo is not None
            and not previous.started
            and not self._epoch_set
            and self.epoch == undo[-1]
        ):
            # The last iterator was never asked for a batch (a DataLoader with workers
            # calls iter() twice): it did not start an epoch.
            self._last_epoch, self.epoch, self._epoch_set, self._pending = undo[:-1]
        before = (self._last_epoch, self.epoch, self._epoch_set, self._pending)
        pending = self._pending
        if (
            pending is not None
            and pending["finished"]
            and pending["epoch"] == self.epoch
            and self.auto_epoch
            and not self._epoch_set
        ):
            # A loaded state says this epoch is over: auto_epoch goes on to the next one.
            self.epoch = checks.epoch(self.epoch) + 1
            self._last_epoch, self._epoch_set, self._pending = self.epoch, False, None
        else:
            self._start_epoch(self.shuffle)
        resumed = self._resumed()
        self._pending = None
        self._undo = (*before, self.epoch)
        start, finished = (0, False) if resumed is None else resumed
        layout = self.layout(min(start, self.lengths.numel()))
        self._iterator = TokenBatchIterator(
            layout, self.rank, closed=finished, at_end=self._warn_unequal
        )
        if not finished and layout.order.chunks <= 1:
            self._warn_unequal(layout)  # a small epoch: planned at once, warned at once
        return self._iterator

    def _resumed(self) -> tuple[int, bool] | None:
        """``(position, finished)`` of a loaded state for the current epoch and seed."""
        pending = self._pending
        if pending is None or pending["epoch"] != self.epoch or pending["seed"] != self.seed:
            return None
        return pending["position"], pending["finished"]

    def _warn_unequal(self, layout: TokenLayout) -> None:
        """Warn once when ranks get different numbers of batches (``"uneven"`` only)."""
        if self._warned_unequal:
            return
        counts = {layout.count(rank) for rank in range(layout.world_size)}
        if len(counts) > 1:
            self._warned_unequal = True
            warnings.warn(
                f"{type(self).__name__}(tail='uneven') gives ranks {min(counts)} or "
                f"{max(counts)} batches this epoch: too few batches of two samples or more "
                f"are left to cut for {layout.world_size} ranks, so a collective run once "
                "per batch would wait on the ranks with fewer; use tail='pad' or DDP's join()",
                UserWarning,
                stacklevel=3,
            )

    def __len__(self) -> int:
        """Batches this rank yields this epoch (the rest of it, with a loaded state pending)."""
        resumed = self._resumed()
        if resumed is None:
            return self.layout(0).count(self.rank)
        position, finished = resumed
        return 0 if finished else self.layout(position).count(self.rank)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if self._pending is not None and self._pending["epoch"] != self.epoch:
            self._pending = None  # another epoch starts afresh

    # Agreement ------------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, as plain values (see :meth:`check_consistent`)."""
        return {
            "sampler": type(self).__name__,
            "dataset length": self.lengths.numel(),
            "length sum": self.length_sum,
            "max_tokens": self.max_tokens,
            "cost": self.cost,
            "window": self.window,
            "num_replicas": self.num_replicas,
            "rank": self.rank,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self.epoch,
            "tail": self.tail,
            "permutation": self.permutation,
        }

    def check_consistent(self, group: Any = None) -> None:
        """Collective: raise on every rank unless all ranks' samplers agree (see
        :func:`samplers.agreement.check_consistent`)."""
        agreement.check_consistent(self.settings(), group)

    # State ----------------------------------------------------------------------------------

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """The ranks' progress through the epoch: one global position, JSON types only.

        The same on every rank after the same number of steps. ``consumed``: how many
        batches this rank's loop took from the current iteration (since the ``iter()``
        that started or resumed the epoch), when that is fewer than the sampler handed
        out (a DataLoader with workers fetches ahead); default: what it handed out.
        A state taken after the epoch's last batch says the epoch is finished.
        """
        if self._pending is not None:
            if consumed is not None:
                raise ValueError(
                    "consumed cannot be given before the resumed epoch is iterated, got "
                    f"consumed={consumed}"
                )
            return dict(self._pending)
        iterator = self._iterator
        if iterator is None:
            return self._state(checks.epoch(self.epoch), 0, False)
        steps = iterator.taken
        if consumed is not None:
            consumed = checks.as_int("consumed", consumed)
            if not 0 <= consumed <= steps:
                raise ValueError(
                    f"consumed must be in [0, {steps}] (what this epoch's iterator handed "
                    f"out so far), got {consumed}"
                )
            steps = consumed
        layout = iterator.layout
        # Rank 0 takes the most batches: the epoch is over when it has none left, which
        # every rank computes alike after the same number of steps.
        finished = iterator.closed or not layout.batches(0, steps, steps + 1)[1]
        position = layout.stop if finished else layout.position_after(steps)
        return self._state(layout.order.epoch, position, finished)

    def _state(self, epoch: int, position: int, finished: bool) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "sampler": type(self).__name__,
            "epoch": epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "permutation": self.permutation,
            "dataset_length": self.lengths.numel(),
            "length_sum": self.length_sum,
            "max_tokens": self.max_tokens,
            "cost": self.cost,
            "window": self.window,
            "position": position,
            "finished": finished,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (from any rank of the saved run, any world size).

        The state's seed and epoch replace this sampler's; the next ``iter()`` at that
        epoch continues it from the saved position (a finished epoch yields nothing more;
        with ``auto_epoch`` the next epoch starts), and ``set_epoch`` to another epoch
        starts that one afresh. Raises ``ValueError`` naming the field when the state
        does not fit: another sampler, dataset, budget, cost or window (the saved order
        could not be continued), an unknown version, or a missing or mistyped field.
        """
        checked = checked_state(state, self._state(0, 0, False))
        if not checked["finished"] and checked["position"] > self.lengths.numel():
            raise ValueError(
                f"state field 'position' is {checked['position']}, past the dataset's "
                f"{self.lengths.numel()} samples in an unfinished epoch: the state is corrupted"
            )
        self.seed = checked["seed"]
        self.epoch = checked["epoch"]
        self._epoch_set = False
        self._iterator = None
        self._undo = None
        self._pending = checked
        self._last_epoch = checked["epoch"] if checked["finished"] else None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset length={self.lengths.numel()}, "
            f"max_tokens={self.max_tokens}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"tail={self.tail!r}, cost={self.cost!r}, window={self.window}, epoch={self.epoch})"
        )
