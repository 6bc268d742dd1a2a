"""The drop-in replacement for ``torch.utils.data.distributed.DistributedSampler``."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, TypeVar

from torch.utils.data.distributed import DistributedSampler as _StockDistributedSampler

from samplers import checks, consistency, groups, resharding
from samplers.core import SamplerCore
from samplers.iterators import ShareIterator
from samplers.options import Permutation, Tail
from samplers.plan import EpochPlan, ShardSizes, Strided

__all__ = ["DistributedSampler"]

_T_co = TypeVar("_T_co", covariant=True)


class DistributedSampler(SamplerCore, _StockDistributedSampler[_T_co]):
    """Yields exactly what torch's ``DistributedSampler`` yields, with less memory.

    Guarantee: for the same dataset length, ``num_replicas``, ``rank``, ``shuffle``,
    ``seed``, ``epoch`` and ``drop_last``, iteration yields the same indices in the same
    order as the installed torch's stock sampler, and ``len``, ``num_samples`` and
    ``total_size`` agree. It *is* a subclass of the stock class (generic in the same
    way: ``DistributedSampler[int]``), so frameworks that call ``set_epoch`` on "any
    DistributedSampler" keep doing so, and its iterator pickles at any point, like the
    stock sampler's list iterator.

    Where it differs, it is on purpose:

    * sizes are computed in integer arithmetic, so datasets of more than 2**53 samples
      get the right length (the stock float ``math.ceil`` does not);
    * only this rank's share of the epoch order is kept once it is drawn (int32 below
      2**31 samples), and it becomes Python ints lazily, in chunks; the stock sampler
      builds a Python list of the whole dataset every epoch;
    * bad arguments fail as early as they can be seen, with an error naming the argument
      and its value, always an instance of the exception type the stock sampler raises
      for the same bad argument (later, or with a misleading message; with several bad
      arguments at once the first one checked may differ): see ``docs/guides/drop-in.md``;
    * ``drop_last=True`` with fewer samples than replicas warns, because every rank
      then receives nothing, and so does a dataset whose length changed after the
      sampler was built (the stock sampler silently pads from the stale sizes);
    * it is stricter about types: ``shuffle`` and ``drop_last`` must be booleans (Python,
      numpy or 0-d tensor ones) or 0/1, not any truthy value (``shuffle="no"`` would
      shuffle); ``num_replicas``, ``rank``, ``seed`` and ``epoch`` must be integers
      (numpy and 0-d tensor integers are accepted), not bools or floats, even where the
      stock sampler never reads the value (the seed and epoch without shuffling).

    ``tail`` chooses what happens to the last ``N mod W`` samples of the epoch order:

    * ``"pad"`` (the default, ``drop_last=False``): repeat the head of the epoch order
      so every rank gets ``ceil(N / W)``; a metric summed over ranks counts those twice;
    * ``"drop"`` (``drop_last=True``): trim the tail, every rank gets ``floor(N / W)``;
      the trimmed samples are not seen that epoch;
    * ``"uneven"``: neither: every sample exactly once per epoch, ranks get
      ``ceil(N / W)`` or one fewer (same order and strided layout as the stock sampler).
      For exact evaluation; per-step collectives need equal step counts, which
      :class:`samplers.DistributedBatchSampler` gives.

    ``permutation`` chooses how a shuffled epoch order is drawn: ``"randperm"`` (default)
    is the stock sampler's ``torch.randperm``, drawn whole on every rank;
    ``"feistel"`` (:mod:`samplers.feistel`) computes each position on its own, so a rank
    computes only its share, in chunks, in O(1) memory at any dataset size, with the
    same order on every platform and torch version (a different order from the stock
    sampler's).

    .. warning::
        Call :meth:`set_epoch` before each epoch, before creating the DataLoader
        iterator. Otherwise every epoch uses the same order.

    Example::

        >>> from samplers import DistributedSampler
        >>> sampler = DistributedSampler(range(10), num_replicas=4, rank=3, seed=0)
        >>> len(sampler), sampler.total_size
        (3, 12)
        >>> sampler.set_epoch(1)
        >>> len(list(sampler))
        3
        >>> exact = DistributedSampler(range(10), num_replicas=4, rank=3, tail="uneven")
        >>> len(exact), exact.total_size
        (2, 10)

    Args:
        dataset: a sized dataset (anything with ``__len__``).
        num_replicas: number of ranks; default: the default process group's world size.
        rank: this process's rank in ``[0, num_replicas)``; default: from the process group.
        shuffle: draw a fresh permutation each epoch from ``seed + epoch``.
        seed: must be the same on every rank. With ``"randperm"``, as with the stock
            sampler, the generator is seeded with ``seed + epoch``, so seed ``s + 1`` at
            epoch ``e`` is seed ``s`` at epoch ``e + 1``, and torch's CPU generator keeps
            its low 32 bits: seeds ``2**32`` apart give one order (``"feistel"`` keys the
            seed and the epoch apart, on 64 bits).
        drop_last: trim the tail instead of padding, so no sample is repeated.
        tail: ``"pad"``, ``"drop"`` or ``"uneven"``; ``None`` follows ``drop_last``.
        auto_epoch: advance the epoch on each new iteration without ``set_epoch``.
        permutation: ``"randperm"`` (stock, default) or ``"feistel"``.
        group: the data-parallel group to shard over: a ``ProcessGroup`` or a 1-D
            ``DeviceMesh`` such as ``mesh["dp"]``; ``num_replicas`` and ``rank`` come from
            it. Default: the default process group (see :mod:`samplers.groups`).
    """

    #: ``tail="uneven"`` (the other two follow ``drop_last``).
    _uneven: bool = False

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        drop_last: bool = False,
        *,
        tail: Tail | None = None,
        auto_epoch: bool = False,
        permutation: Permutation = "randperm",
        group: groups.Group = None,
    ) -> None:
        # The stock __init__ is not called: it computes the sizes in floating point and
        # would read the process group a second time. Every attribute it sets is set here.
        dataset_size = checks.dataset_size(dataset)
        group = groups.reference(group)
        num_replicas, rank = groups.placement(num_replicas, rank, group)
        drop_last = checks.as_flag("drop_last", drop_last)
        tail = checks.tail(tail, drop_last)
        shuffle = checks.as_flag("shuffle", shuffle)
        seed = consistency.seed_or_agreed(seed)
        permutation = checks.permutation(permutation)
        if shuffle:
            checks.shuffle_key_fits(seed, 0, permutation)

        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.group = group
        self.epoch = 0
        self.drop_last = tail == "drop"
        self.tail = tail
        self.shuffle = shuffle
        self.seed = seed
        self.permutation = permutation
        self._init_core(auto_epoch)
        self._built_size = dataset_size
        self._warned_size = False
        layout = Strided.of(dataset_size, num_replicas, tail)
        self.num_samples = layout.count(rank)
        self.total_size = layout.stop
        if tail == "drop" and self.num_samples == 0 and dataset_size > 0:
            warnings.warn(
                f"drop_last=True with {dataset_size} sample{'' if dataset_size == 1 else 's'} "
                f"over {num_replicas} replicas "
                "gives every rank 0 samples; use drop_last=False or fewer replicas",
                checks.SamplerWarning,
                stacklevel=2,
            )

    @property
    def tail(self) -> Tail:
        """``"pad"``, ``"drop"`` or ``"uneven"``; ``drop_last`` written after construction
        switches between the first two, as it does in the stock sampler."""
        if self._uneven:
            return "uneven"
        return "drop" if self.drop_last is True else "pad"

    @tail.setter
    def tail(self, value: Tail) -> None:
        self._uneven = value == "uneven"

    def _plan(self, start: int) -> EpochPlan:
        """The current epoch's plan from ``start``, read from the attributes as they are
        now. As in the stock sampler, ``num_samples`` and ``total_size`` are trusted (a
        subclass may override them) and checked against the dataset's length now."""
        dataset_size, num_replicas, rank, drop_last, tail = self._placement()
        if tail == "uneven":
            return self._settings_plan(Strided.of(dataset_size, num_replicas, tail, start))
        sizes = ShardSizes.given(
            dataset_size,
            num_replicas,
            drop_last,
            rank=rank,
            num_samples=checks.as_int(
                "num_samples", self.num_samples, error=checks.AssertionTypeError
            ),
            total_size=checks.as_int("total_size", self.total_size),
        )
        if start == 0:
            return self._settings_plan(Strided.stock(sizes), sizes)
        if sizes == ShardSizes.of(dataset_size, num_replicas, drop_last):
            return self._settings_plan(Strided.of(dataset_size, num_replicas, tail, start))
        # Overridden sizes: the rest of their layout, padded (or trimmed) as they say.
        layout = Strided(dataset_size, num_replicas, start, max(sizes.total_size, start))
        return self._settings_plan(layout, sizes)

    def _placement(self) -> tuple[int, int, int, bool, Tail]:
        """The validated dataset size, world size, rank, drop_last and tail, as now."""
        dataset_size = checks.dataset_size(self.dataset)
        num_replicas = checks.world_size(self.num_replicas)
        rank = checks.rank_when_iterating(self.rank, num_replicas, self.num_samples)
        drop_last = checks.as_flag("drop_last", self.drop_last, error=checks.AssertionTypeError)
        tail = checks.tail("uneven" if self._uneven else None, drop_last)
        self._check_size(dataset_size)
        return dataset_size, num_replicas, rank, drop_last, tail

    def _dataset_length(self) -> int:
        return checks.dataset_size(self.dataset)

    def _new_iterator(self, plan: EpochPlan) -> ShareIterator:
        return ShareIterator.of(plan, checks.as_int("rank", self.rank))

    def _check_size(self, dataset_size: int) -> None:
        """Warn once when the dataset's length changed after the sampler was built."""
        if dataset_size == self._built_size or self._warned_size:
            return
        if self.tail != "uneven" and dataset_size > self._built_size:
            return  # the sizes cannot fit: ShardSizes.given raises the stock assertion
        self._warned_size = True
        if self.tail == "uneven":
            effect = "it shares out the current samples, but len(sampler) is stale"
        else:
            effect = (
                f"as the stock sampler does, it still pads to total_size={self.total_size}, "
                "repeating more samples than the new length needs"
            )
        warnings.warn(
            f"len(dataset) changed from {self._built_size} to {dataset_size} after the "
            f"sampler was built: {effect}; build a new sampler after changing the dataset",
            checks.SamplerWarning,
            stacklevel=3,
        )

    def __iter__(self) -> Iterator[_T_co]:
        if not self._initialised:  # a subclass that skipped __init__: the stock sampler
            return _StockDistributedSampler.__iter__(self)
        resharding.check(self)
        # The permutation is drawn now, as the stock sampler draws it when iter() is
        # called (later set_epoch calls do not affect this iterator, and a bad seed
        # raises here); only the conversion to Python ints is deferred.
        self._placement()  # the attributes as written now, also for a resumed epoch
        iterator: Iterator[_T_co] = self._begin()
        return iterator

    def __len__(self) -> int:
        if not self._initialised:
            return int(self.num_samples)
        remaining = self._remaining_count()
        return self.num_samples if remaining is None else remaining

    def __repr__(self) -> str:
        if not self._initialised:
            return object.__repr__(self)
        return (
            f"{type(self).__name__}(num_replicas={self.num_replicas}, rank={self.rank}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
            f"tail={self.tail!r}, epoch={self.epoch}, num_samples={self.num_samples})"
        )
