"""accelerate: a loader over a sampler of ours, prepared without being sharded again.

``accelerator.prepare(DataLoader(dataset, sampler=DistributedSampler(dataset)))`` wraps
the loader's batches in accelerate's ``BatchSamplerShard``, which hands each process every
``num_processes``-th batch of what it iterates: of a sampler that has already given this
rank its share, every rank keeps only part of its share and the rest of the samples are
never seen (the report's frameworks finding measures how many). :func:`prepare_data_loader`
is the replacement for that one call::

    loader = prepare_data_loader(DataLoader(dataset, batch_sampler=sampler), accelerator)
    model, optimizer = accelerator.prepare(model, optimizer)  # the loader is not passed again
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader

from samplers.integrations.loop import LoopPosition, framework, our_sampler

try:
    from accelerate import Accelerator
    from accelerate.data_loader import DataLoaderShard
    from accelerate.utils import DistributedType
except ImportError as missing:  # pragma: no cover - the error names the extra
    raise framework("accelerate", "accelerate") from missing

__all__ = ["prepare_data_loader"]

#: DataLoader arguments a prepared loader takes over from the original unchanged; the
#: others (dataset, batching, sampling) are given by the loader's batch sampler.
_DRAWN = ("self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def prepare_data_loader(dataloader: DataLoader[Any], accelerator: Accelerator) -> DataLoader[Any]:
    """``dataloader``, prepared for ``accelerator`` without sharding it a second time.

    ``dataloader`` is a ``DataLoader`` over a sampler of ours (``batch_sampler=`` a batch
    sampler of ours: the batch, token, packed and mixture batch samplers; or ``sampler=``
    :class:`~samplers.DistributedSampler`, :class:`~samplers.DistributedSamplerWrapper` or
    :class:`~samplers.DistributedMixtureSampler`), which gives this rank its share. The
    result yields exactly that share's batches, and otherwise behaves as a loader
    ``accelerator.prepare`` returns:

    * batches are placed on ``accelerator.device`` (when device placement is on);
    * gradient accumulation sees the loader's end (``accelerator.accumulate`` and
      ``accelerator.sync_gradients`` sync on its last batch);
    * each iteration sets the sampler's epoch (0, 1, ... like accelerate's own loaders;
      ``loader.set_epoch(epoch)`` sets it explicitly);
    * ``accelerator.prepare`` recognises it as prepared and returns it unchanged;
    * it is registered for checkpointing: ``accelerator.save_state`` saves the sampler's
      state at the step the loop reached, ``accelerator.load_state`` restores it and the
      next iteration continues that epoch, on the same or another number of processes.
      Prepare it before ``load_state``, in the same order as when saving.

    Do not skip batches after ``load_state`` (``accelerator.skip_first_batches``): the
    sampler's state already continues where the loop stopped.
    """
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"dataloader must be a torch DataLoader, got {type(dataloader).__name__}")
    if getattr(dataloader, "_is_accelerate_prepared", False):
        raise ValueError(
            "dataloader was already prepared by accelerate (its batches are sharded over the "
            "processes); pass the DataLoader you built, before accelerator.prepare"
        )
    if not isinstance(accelerator, Accelerator):
        raise TypeError(
            f"accelerator must be an accelerate.Accelerator, got {type(accelerator).__name__}"
        )
    sampler, per_batch = our_sampler(dataloader)
    placement = accelerator.device_placement and accelerator.distributed_type != DistributedType.XLA
    prepared = _PreparedLoader(
        dataloader.dataset,
        position=LoopPosition(sampler, per_batch),
        device=accelerator.device if placement else None,
        batch_sampler=dataloader.batch_sampler,
        _non_blocking=accelerator.non_blocking,
        # accelerate's own remainder arithmetic assumes its sharding; with ours it would
        # trim gathered results (gather_for_metrics) wrongly, so it is not computed.
        _drop_last=True,
        iteration=sampler.epoch,
        **_options(dataloader),
    )
    prepared._is_accelerate_prepared = True
    accelerator.register_for_checkpointing(prepared)
    accelerator.prepare_data_loader(prepared)  # known to the accelerator, returned as is
    return prepared


def _options(dataloader: DataLoader[Any]) -> dict[str, Any]:
    """The DataLoader's other constructor arguments (workers, collation, ...), as they are."""
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(dataloader, name)
        for name in parameters
        if name not in _DRAWN and hasattr(dataloader, name)
    }


class _PreparedLoader(DataLoaderShard):
    """accelerate's loader over this rank's share, counting what the loop received.

    Guarantee: it yields exactly the batches of the DataLoader it was built from (placed
    on the device), sets the sampler's epoch on each iteration as accelerate's loaders do,
    and its ``state_dict``/``load_state_dict`` are the sampler's state at the step the loop
    reached (:class:`~samplers.integrations.loop.LoopPosition`).
    """

    def __init__(self, dataset: Any, *, position: LoopPosition, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._position = position

    def __iter__(self) -> Iterator[Any]:
        # The epoch first, so that the length counted is this iteration's (a loaded state
        # shortens the epoch it belongs to); accelerate sets the same epoch again.
        self.set_epoch(self.iteration)
        iteration, length = self.iteration, len(self)
        yield from self._position.track(super().__iter__(), length)
        if self.iteration == iteration:
            # accelerate counts an iteration only once it yielded a batch; one that yields
            # none (the rest of an epoch restored at its end) is one too, or the next
            # would set the same epoch again and yield nothing, every epoch after.
            self.iteration += 1

    def state_dict(self) -> dict[str, Any]:
        return self._position.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self._position.load_state_dict(state_dict)
        self.iteration = self._position.sampler.epoch  # the next iteration continues it
