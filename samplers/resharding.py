"""Detect a sampler of ours being sharded a second time, and say how to fix it.

Guarantee: :func:`check`, called by a sampler's ``__iter__``, emits one
:class:`ReshardingWarning` per sampler when the sampler is sharded (``num_replicas > 1``)
and something between it and the DataLoader that drives it splits what it yields over
more than one process again, so each rank keeps only part of its share and samples are
lost every epoch. It names the object that re-shards and the fix. Nothing is changed:
the sampler yields what it always yields.

How it can tell: ``__iter__`` is called by whatever consumes the sampler, and those
callers are on the stack. Walking up from ``__iter__`` (at most :data:`MAX_FRAMES` frames,
and never past a DataLoader or its iterator, which consume samplers without sharding),
any frame whose ``self`` carries a process count above 1 with a process index is a
re-sharder: accelerate's ``BatchSamplerShard`` (``num_processes``/``process_index``),
a ``DistributedSampler``-style wrapper such as Lightning's ``DistributedSamplerWrapper``
or ours (``num_replicas``/``rank``). Only instance attributes are read, so no property
or ``__getattr__`` of a foreign object runs. Where no frames are available (a Python
without ``sys._getframe``), nothing is checked.

What it cannot see: a framework that rebuilds the loader around a new sampler of its own
(the sampler of ours is then never iterated), and accelerate's ``dispatch_batches``, which
slices batches after the DataLoader has produced them.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from torch.utils.data.distributed import DistributedSampler as _StockDistributedSampler

from samplers.callers import callers
from samplers.checks import SamplerWarning

__all__ = ["MAX_FRAMES", "ReshardingWarning", "check", "refuse_drop_last"]

#: How many callers of ``__iter__`` are examined.
MAX_FRAMES = 8

#: (instance attribute with the process count, with the process index), per convention.
_SHARDING_ATTRIBUTES = (("num_processes", "process_index"), ("num_replicas", "rank"))

#: The fix for each package that re-shards, by its top-level module name.
_FIXES = {
    "accelerate": (
        "prepare the DataLoader with samplers.integrations.accelerate.prepare_data_loader("
        "loader, accelerator) instead of accelerator.prepare(loader); with the Hugging Face "
        "Trainer, train with samplers.integrations.transformers.ShardedTrainer"
    ),
    "lightning": (
        "build the loader with samplers.integrations.lightning.ShardedDataLoader (Lightning "
        "then leaves it alone), or pass use_distributed_sampler=False"
    ),
    "samplers": (
        "wrap a sampler that is not sharded (num_replicas=1): the wrapper shards its stream itself"
    ),
}
_FIXES["pytorch_lightning"] = _FIXES["lightning"]
_DEFAULT_FIX = "give it a sampler that is not sharded already, or turn its sharding off"

_warned: weakref.WeakSet[Any] = weakref.WeakSet()


class ReshardingWarning(SamplerWarning):
    """A sharded sampler of ours is being split over the processes a second time."""


def check(sampler: Any) -> None:
    """Warn once per sampler when whatever iterates ``sampler`` shards it again.

    Call it first thing in ``__iter__``: the frames examined are those above the caller.
    """
    if sampler in _warned or _count(sampler, ("num_replicas", "rank")) <= 1:
        return
    found = _resharder(sampler)
    if found is None:
        return
    owner, processes = found
    _warned.add(sampler)
    where = f"{type(owner).__module__}.{type(owner).__qualname__}"
    fix = _FIXES.get(type(owner).__module__.split(".")[0], _DEFAULT_FIX)
    warnings.warn(
        f"{type(sampler).__name__} already gives this rank its share of "
        f"{_count(sampler, ('num_replicas', 'rank'))} ranks, and {where} splits it over "
        f"{processes} processes again: each rank sees only part of its share and samples "
        f"are lost every epoch. To fix it, {fix}.",
        ReshardingWarning,
        stacklevel=3,
    )


def refuse_drop_last(kind: str, dataset: Any, drop_last: Any) -> None:
    """Raise ``TypeError`` when a batch sampler of ours is given ``drop_last``.

    Our batch sampler takes ``tail``. ``drop_last`` arrives when a framework rebuilds a
    batch sampler with ``BatchSampler``'s arguments, ``(sampler, batch_size=...,
    drop_last=...)``, around a ``DistributedSampler`` of its own (Lightning's Trainer and
    Fabric with ``use_distributed_sampler=True``): that would shard the data a second time
    and drop the tail policy and seed, so the error names the fix.
    """
    if drop_last is None:
        return
    message = (
        f"{kind} takes tail='pad', 'drop' or 'uneven', not drop_last (got drop_last={drop_last!r})"
    )
    if isinstance(dataset, _StockDistributedSampler):
        message += (
            f", and a {type(dataset).__name__} instead of a dataset: something is rebuilding "
            "it around a sampler of its own, which would shard the data a second time. To fix "
            f"it, {_FIXES['lightning']}"
        )
    raise TypeError(message)


def _resharder(sampler: Any) -> tuple[Any, int] | None:
    """The first object above ``__iter__`` on the stack that shards its input over several
    processes (frames: ``_resharder``, ``check``, ``__iter__``, then its callers)."""
    for owner in callers(3, MAX_FRAMES):
        if owner is sampler:
            continue
        if _is_loader(owner):
            return None
        for names in _SHARDING_ATTRIBUTES:
            processes = _count(owner, names)
            if processes > 1:
                return owner, processes
    return None


def _count(owner: Any, names: tuple[str, str]) -> int:
    """The process count ``owner`` keeps in its instance attributes, or 0."""
    attributes = getattr(owner, "__dict__", None)
    if not isinstance(attributes, dict):
        return 0
    count, index = (attributes.get(name) for name in names)
    if isinstance(count, bool) or not isinstance(count, int) or not isinstance(index, int):
        return 0
    return count


def _is_loader(owner: Any) -> bool:
    """A DataLoader or a DataLoader iterator (torch's, torchdata's): the walk ends there."""
    names = [cls.__name__ for cls in type(owner).__mro__]
    return any(name == "DataLoader" or name.endswith("DataLoaderIter") for name in names)
