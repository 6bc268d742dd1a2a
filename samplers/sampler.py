"""The drop-in replacement for ``torch.utils.data.distributed.DistributedSampler``."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler as _StockDistributedSampler

from samplers import checks
from samplers.plan import EpochPlan, ShardSizes

__all__ = ["DistributedSampler"]

#: How many indices are turned into Python ints at a time while iterating.
_CHUNK = 1 << 16


class DistributedSampler(_StockDistributedSampler[int]):
    """Yields exactly what torch's ``DistributedSampler`` yields, with less memory.

    Guarantee: for the same dataset length, ``num_replicas``, ``rank``, ``shuffle``,
    ``seed``, ``epoch`` and ``drop_last``, iteration yields the same indices in the same
    order as the installed torch's stock sampler, and ``len``, ``num_samples`` and
    ``total_size`` agree. It *is* a subclass of the stock class, so frameworks that call
    ``set_epoch`` on "any DistributedSampler" keep doing so.

    Where it differs, it is on purpose:

    * sizes are computed in integer arithmetic, so datasets of more than 2**53 samples
      get the right length (the stock float ``math.ceil`` does not);
    * only this rank's share of the epoch order becomes Python ints, and lazily, in
      chunks; the stock sampler builds a Python list of the whole dataset every epoch;
    * bad arguments fail at construction with an error naming the argument; the stock
      sampler reports ``num_replicas=0`` as an invalid rank and a float seed only when
      iterating. Exception types match the stock ones (a non-integer seed raises
      :class:`samplers.checks.SeedTypeError`, both a ``TypeError`` and the
      ``RuntimeError`` torch raises);
    * ``drop_last=True`` with fewer samples than replicas warns, because every rank
      then receives nothing;
    * it is stricter about types: ``shuffle`` and ``drop_last`` must be bools (or 0/1),
      and ``epoch`` an integer (``set_epoch(1.0)`` raises ``TypeError``), where the
      stock sampler takes any truthy value or number.

    What it keeps from the stock sampler, because changing it would change what ranks
    receive: without ``drop_last`` the order is padded by repeating its first
    ``total_size - N`` samples (so evaluation over all ranks counts those twice); with
    it, the tail of the (shuffled) order is dropped and never seen that epoch.

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

    Args:
        dataset: a sized dataset (anything with ``__len__``).
        num_replicas: number of ranks; default: the default process group's world size.
        rank: this process's rank in ``[0, num_replicas)``; default: from the process group.
        shuffle: draw a fresh permutation each epoch from ``seed + epoch``.
        seed: must be the same on every rank.
        drop_last: trim the tail instead of padding, so no sample is repeated.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        # The stock __init__ is not called: it computes the sizes in floating point and
        # would read the process group a second time. Every attribute it sets is set here.
        dataset_size = checks.dataset_size(dataset)
        num_replicas = checks.world_size(
            _from_process_group("num_replicas", dist.get_world_size)
            if num_replicas is None
            else num_replicas
        )
        rank = checks.rank(
            _from_process_group("rank", dist.get_rank) if rank is None else rank, num_replicas
        )
        drop_last = checks.as_flag("drop_last", drop_last)
        sizes = ShardSizes.of(dataset_size, num_replicas, drop_last)

        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        self.num_samples = sizes.num_samples
        self.total_size = sizes.total_size
        self.shuffle = checks.as_flag("shuffle", shuffle)
        self.seed = checks.seed(seed)
        if drop_last and sizes.num_samples == 0 and dataset_size > 0:
            warnings.warn(
                f"drop_last=True with {dataset_size} sample{'' if dataset_size == 1 else 's'} "
                f"over {num_replicas} replicas "
                "gives every rank 0 samples; use drop_last=False or fewer replicas",
                stacklevel=2,
            )

    def plan(self) -> EpochPlan:
        """The current epoch's plan, read from the attributes as they are now."""
        dataset_size = checks.dataset_size(self.dataset)
        num_replicas = checks.world_size(self.num_replicas)
        sizes = ShardSizes.given(
            dataset_size,
            num_replicas,
            checks.as_flag("drop_last", self.drop_last),
            rank=checks.rank(self.rank, num_replicas),
            num_samples=checks.as_int("num_samples", self.num_samples),
            total_size=checks.as_int("total_size", self.total_size),
        )
        return EpochPlan(
            sizes,
            shuffle=checks.as_flag("shuffle", self.shuffle),
            seed=checks.seed(self.seed),
            epoch=checks.as_int("epoch", self.epoch),
        )

    def __iter__(self) -> Iterator[int]:
        # The permutation is drawn now, as the stock sampler draws it when iter() is
        # called (later set_epoch calls do not affect this iterator, and a bad seed
        # raises here); only the conversion to Python ints is deferred.
        plan = self.plan()
        if plan.shuffle:
            _ = plan.order
        return _python_ints(plan, checks.rank(self.rank, plan.sizes.world_size))

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``seed + epoch`` for the next iteration's permutation.

        Call it before every epoch, with a different ``epoch`` each time; without it,
        every epoch repeats the order of epoch 0.
        """
        self.epoch = checks.as_int("epoch", epoch)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_replicas={self.num_replicas}, rank={self.rank}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
            f"epoch={self.epoch}, num_samples={self.num_samples})"
        )


def _from_process_group(name: str, read: Any) -> int:
    """``num_replicas`` or ``rank`` from the default process group, or a clear error."""
    if not dist.is_available():
        raise RuntimeError(
            f"{name} was not given and torch.distributed is not available in this build"
        )
    if not dist.is_initialized():
        raise ValueError(
            f"{name} was not given and no default process group is initialised: pass "
            "num_replicas and rank, or call torch.distributed.init_process_group first"
        )
    return int(read())


def _python_ints(plan: EpochPlan, rank: int) -> Iterator[int]:
    """Yield the rank's share as Python ints, planning and converting a chunk at a time.

    Only the epoch order (when shuffling) is held whole, as an int64 tensor; the share
    itself is never built, so an unshuffled sampler over any size runs in constant memory.
    """
    for start in range(0, plan.sizes.num_samples, _CHUNK):
        yield from plan.rank_indices(rank, start, start + _CHUNK).tolist()
