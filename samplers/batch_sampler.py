"""Batch-aware sharding: every rank the same number of batches, for every tail policy."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from samplers import checks, consistency, groups, resharding
from samplers.core import SamplerCore
from samplers.iterators import BatchIterator
from samplers.options import Permutation, Tail
from samplers.plan import Batched, EpochPlan, Layout

__all__ = ["MAX_PAD_BATCH", "DistributedBatchSampler"]

#: With ``tail="pad"``, a batch larger than the dataset repeats its samples; one of more
#: than this many indices (and more than the dataset's) is refused rather than built.
MAX_PAD_BATCH = 1 << 24


class DistributedBatchSampler(SamplerCore, Sampler[list[int]]):
    """Yields this rank's batches of the epoch; every rank yields the same number.

    Guarantee: whenever the epoch has at least as many samples (left, for a resumed epoch)
    as ranks, every rank yields the same number of batches (``len(sampler)``; one exception
    below, and a warning whenever counts differ), so a collective run once per
    batch (DDP's gradient all-reduce, a metric ``all_reduce``) cannot wait forever on a
    rank that has finished. Why: batches are laid out a step at a time, one batch per
    rank per step (step ``k`` takes a contiguous range of the epoch order), instead of
    sharding samples first and batching each share afterwards, which leaves ranks with
    different batch counts as soon as shares differ in length.

    After ``k`` steps the ranks have together consumed exactly the first positions of the
    epoch order (the same order as :class:`samplers.DistributedSampler`), which is what
    resuming on another world size builds on.

    ``tail`` decides the last, partial step:

    * ``"pad"`` (default): every batch is full; the last step's batches are filled by
      repeating the epoch order from its head (from the head again while the order is
      shorter than what is missing). Fewer than ``num_replicas * batch_size`` positions
      are padding, so over the epoch each sample is seen ``floor(T / N)`` or
      ``ceil(T / N)`` times, ``T = len(sampler) * num_replicas * batch_size``: at most
      twice when ``N >= num_replicas * batch_size``, more often on a smaller dataset
      (3 samples, batch size 8, 2 ranks: 5 or 6 times). A ``batch_size`` above both the
      dataset size and :data:`MAX_PAD_BATCH` is refused with ``"pad"``;
    * ``"drop"``: every batch is full; fewer than ``num_replicas * batch_size`` samples
      at the tail of the order are not seen that epoch (others each epoch when shuffling);
    * ``"uneven"``: every sample exactly once per epoch, batch sizes balanced (all of the
      epoch's batches differ by at most one in size), and with at least
      ``num_replicas * batch_size`` samples no batch smaller than ``batch_size // 2``:
      exact evaluation without tiny batches and without hangs. One honest exception: with
      ``batch_size=1``, exactly once and equal counts can both hold only when
      ``num_replicas`` divides the dataset size; otherwise exactly once wins and the
      last ``num_replicas - N mod num_replicas`` ranks get one batch fewer (use DDP's
      ``join()`` or a batch size of 2 or more).

    .. warning::
        Call :meth:`set_epoch` before each epoch (or pass ``auto_epoch=True``);
        otherwise every epoch uses the same order.

    Example::

        >>> from torch.utils.data import DataLoader
        >>> sampler = DistributedBatchSampler(range(10), 2, num_replicas=3, rank=0,
        ...                                   shuffle=False, tail="uneven")
        >>> [len(DistributedBatchSampler(range(10), 2, num_replicas=3, rank=r,
        ...      tail="uneven")) for r in range(3)]
        [2, 2, 2]
        >>> list(sampler)
        [[0, 1], [6, 7]]
        >>> [batch.tolist() for batch in DataLoader(range(10), batch_sampler=sampler)]
        [[0, 1], [6, 7]]

    Args:
        dataset: a sized dataset (anything with ``__len__``).
        batch_size: samples per batch (at least 1).
        num_replicas: number of ranks; default: the default process group's world size.
        rank: this process's rank in ``[0, num_replicas)``; default: from the process group.
        shuffle: draw a fresh permutation each epoch from ``seed + epoch``.
        seed: must be the same on every rank; ``None``: one random seed agreed by all
            ranks (broadcast from rank 0; a collective).
        tail: ``"pad"``, ``"drop"`` or ``"uneven"``.
        auto_epoch: advance the epoch on each new iteration without ``set_epoch``.
        permutation: ``"randperm"`` (the stock sampler's order, default) or ``"feistel"``
            (O(1) memory; see :class:`samplers.DistributedSampler`).
        group: the data-parallel group to shard over (a ``ProcessGroup`` or a 1-D
            ``DeviceMesh``); default: the default process group.
        drop_last: not an option (``tail`` is): given, it raises ``TypeError`` saying so,
            and, when a framework rebuilds the batch sampler with ``BatchSampler``'s
            arguments around its own sampler (Lightning does), how to avoid that.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        *,
        tail: Tail = "pad",
        auto_epoch: bool = False,
        permutation: Permutation = "randperm",
        group: groups.Group = None,
        drop_last: None = None,
    ) -> None:
        resharding.refuse_drop_last(type(self).__name__, dataset, drop_last)
        checks.dataset_size(dataset)
        self.batch_size = checks.positive("batch_size", batch_size)
        self.group = groups.reference(group)
        self.num_replicas, self.rank = groups.placement(num_replicas, rank, self.group)
        self.tail = checks.tail(tail, drop_last=False)
        self.shuffle = checks.as_flag("shuffle", shuffle)
        self.seed = consistency.seed_or_agreed(seed)
        self.permutation = checks.permutation(permutation)
        if self.shuffle:
            checks.shuffle_key_fits(self.seed, 0, self.permutation)
        self.dataset = dataset
        self.epoch = 0
        self._init_core(auto_epoch)
        self._warned_unequal = False

    @property
    def drop_last(self) -> bool:
        """Whether the tail of the epoch order is dropped (``tail="drop"``)."""
        return self.tail == "drop"

    def _plan(self, start: int) -> EpochPlan:
        dataset_size = checks.dataset_size(self.dataset)
        num_replicas = checks.world_size(self.num_replicas)
        checks.rank(self.rank, num_replicas)
        tail = checks.tail(self.tail, drop_last=False)
        batch_size = checks.positive("batch_size", self.batch_size)
        if tail == "pad" and dataset_size and batch_size > max(dataset_size, MAX_PAD_BATCH):
            raise ValueError(
                f"batch_size={batch_size} with tail='pad' and {dataset_size} samples would "
                f"build batches of {batch_size} indices, each sample repeated about "
                f"{batch_size // dataset_size} times in each: batch_size must be at most "
                f"{max(dataset_size, MAX_PAD_BATCH)} with tail='pad' here, or use "
                "tail='uneven' or 'drop'"
            )
        return self._settings_plan(Batched(dataset_size, num_replicas, batch_size, tail, start))

    def _dataset_length(self) -> int:
        return checks.dataset_size(self.dataset)

    def _batch_size(self) -> int | None:
        return checks.positive("batch_size", self.batch_size)

    def _new_iterator(self, plan: EpochPlan) -> BatchIterator:
        return BatchIterator.of(plan, checks.as_int("rank", self.rank))

    def __iter__(self) -> Iterator[list[int]]:
        resharding.check(self)
        iterator = self._begin()
        self._warn_unequal(iterator.plan.layout)
        return iterator

    def _warn_unequal(self, layout: Layout) -> None:
        """Warn once when this epoch gives ranks different numbers of batches.

        Only ``tail="uneven"`` can, when fewer samples remain than ranks (a tiny dataset,
        or a resumed epoch with less left than the new world size) or with batch size 1
        and a world size that does not divide them: every sample exactly once wins.
        """
        fewest, most = layout.count_range()
        if fewest != most and not self._warned_unequal:
            self._warned_unequal = True
            warnings.warn(
                f"{type(self).__name__}(tail='uneven') gives ranks {fewest} or "
                f"{most} batches this epoch ({layout.remaining} samples left for "
                f"{layout.world_size} ranks, batch size {self.batch_size}): a collective "
                "run once per batch would wait on the ranks with fewer; use tail='pad' or "
                "DDP's join()",
                checks.SamplerWarning,
                stacklevel=3,
            )

    def __len__(self) -> int:
        """Batches this rank yields this epoch (the same on every rank, see above)."""
        remaining = self._remaining_count()
        if remaining is not None:
            return remaining
        return self.plan().layout.count(checks.as_int("rank", self.rank))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(batch_size={self.batch_size}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, tail={self.tail!r}, epoch={self.epoch})"
        )
