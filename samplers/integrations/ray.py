"""Ray Train: a loader over a sampler of ours that Ray leaves alone, resumed from its checkpoints.

``ray.train.torch.prepare_data_loader(loader)`` rebuilds every loader whose ``sampler`` is
not a torch ``DistributedSampler`` around a stock ``DistributedSampler`` of its own. A
loader built with ``batch_sampler=`` (any batch sampler of ours: batch, token, packed,
mixture) has a ``SequentialSampler`` there and ``batch_size=None``, so the rebuilt loader
yields one sample per step, or fails at its first batch, and our sampler is gone; a
:class:`~samplers.DistributedMixtureSampler` or :class:`~samplers.DistributedSamplerWrapper`
is replaced by a stock sampler, its weights or its wrapped sampler gone. Without a
warning either way. It also wraps the loader in one that fetches a batch ahead of the
loop (``move_to_device=True``, its default); a sampler of ours finds that wrapper and
leaves the batch it holds out of its ``state_dict`` (:mod:`samplers.loader_progress`), but
the loop must still set each epoch and save and load the state itself.
:func:`prepare_data_loader` is the replacement for that one call, for every sampler of
ours, in the training function::

    loader = prepare_data_loader(DataLoader(dataset, batch_sampler=sampler))
    load_state(loader)  # continue from ray.train.get_checkpoint(), if there is one
    for epoch in range(loader.epoch, epochs):
        for batch in loader:
            ...
            with tempfile.TemporaryDirectory() as directory:
                save_state(directory, loader)
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(directory))

Ray's own function is left as it is (this module patches nothing): call this one instead
of it. Not Ray's after this one: it would keep our sampler but wrap the prepared loader
in its device-moving loader, which has no ``state_dict``.
``ray.train.torch.prepare_data_loader(loader, add_dist_sampler=False,
move_to_device=False)`` also keeps any sampler and fetches nothing ahead, but counts no
epochs and keeps no state.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from samplers.integrations.loop import (
    LoopPosition,
    StandIn,
    TrackedDataLoader,
    framework,
    our_sampler,
)

try:
    import ray.train
    import ray.train.torch
except ImportError as missing:  # pragma: no cover - the error names the extra
    raise framework("ray", "ray") from missing

__all__ = [
    "STATE_FILE",
    "PreparedDataLoader",
    "load_state",
    "placement",
    "prepare_data_loader",
    "save_state",
]

#: The file :func:`save_state` writes in a checkpoint directory (``{name}`` is its name).
STATE_FILE = "dsampler-{name}.json"

#: DataLoader arguments a prepared loader takes over from the original unchanged; the
#: others (dataset, batching, sampling) are given by the loader's batch sampler.
_DRAWN = ("self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def placement() -> dict[str, int]:
    """This Ray Train worker's place: ``num_replicas`` (world size) and ``rank`` (world rank).

    ``DistributedBatchSampler(dataset, 4, **placement())`` places a sampler of ours as Ray
    placed the worker (the process group Ray initialises gives the same by default).
    """
    context = ray.train.get_context()
    return {"num_replicas": context.get_world_size(), "rank": context.get_world_rank()}


def prepare_data_loader(
    data_loader: DataLoader[Any], *, move_to_device: bool = True
) -> PreparedDataLoader:
    """``data_loader`` prepared for a Ray Train worker, over our sampler as it is.

    ``data_loader`` is a ``DataLoader`` over a sampler of ours (``batch_sampler=`` any
    batch sampler of ours: :class:`~samplers.DistributedBatchSampler`, the token, packed
    and mixture batch samplers; or ``sampler=`` :class:`~samplers.DistributedSampler`,
    :class:`~samplers.DistributedSamplerWrapper` or
    :class:`~samplers.DistributedMixtureSampler` with ``batch_size``), placed as Ray
    placed this worker (:func:`placement`); otherwise ``TypeError`` / ``ValueError`` name
    what is wrong. The result is a
    :class:`PreparedDataLoader`: the same batches with our sharding, tail policy and seed,
    on ``ray.train.torch.get_device()`` when ``move_to_device``.
    """
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"data_loader must be a torch DataLoader, got {type(data_loader).__name__}")
    if isinstance(data_loader, PreparedDataLoader):
        raise ValueError("data_loader is prepared already; iterate it as it is")
    sampler, per_batch = our_sampler(data_loader)
    place = placement()
    held = {"num_replicas": sampler.num_replicas, "rank": sampler.rank}
    if held != place:
        raise ValueError(
            f"the loader's {type(sampler).__name__} has num_replicas={held['num_replicas']}, "
            f"rank={held['rank']}, but this Ray Train worker is rank {place['rank']} of "
            f"{place['num_replicas']}: build it with **samplers.integrations.ray.placement()"
        )
    device = ray.train.torch.get_device() if move_to_device else None
    return PreparedDataLoader(
        data_loader.dataset,
        position=LoopPosition(sampler, per_batch),
        device=device,
        batch_sampler=data_loader.batch_sampler,
        **_options(data_loader),
    )


def _options(data_loader: DataLoader[Any]) -> dict[str, Any]:
    """The DataLoader's other constructor arguments (workers, collation, ...), as they are."""
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(data_loader, name)
        for name in parameters
        if name not in _DRAWN and hasattr(data_loader, name)
    }


class PreparedDataLoader(TrackedDataLoader):
    """A ``DataLoader`` over a sampler of ours for a Ray Train worker, stateful.

    Guarantee: each iteration yields exactly the batches of the DataLoader it was prepared
    from, in order (on the device, when it has one), for the epoch :attr:`epoch`; then:

    * the epoch counts itself: each iteration sets the sampler's epoch to :attr:`epoch`,
      which a whole iteration advances by one. ``loader.set_epoch(epoch)`` (or
      ``loader.sampler.set_epoch(epoch)``, as Ray's guide writes it) sets it explicitly;
    * ``loader.sampler`` is a torch ``DistributedSampler`` (ours itself, or one standing
      for it), so frameworks that replace any other sampler keep ours;
    * ``state_dict()`` is the sampler's state at the step the training loop reached (what
      the loop received, however far DataLoader workers fetched ahead), and after
      ``load_state_dict`` the next iteration continues that epoch exactly, on this or
      another number of workers (:func:`save_state` / :func:`load_state` carry it
      through Ray Train's checkpoints).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        position: LoopPosition,
        device: torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self._position = position
        self._device = device
        ours = position.sampler
        self._epoch = int(ours.epoch)
        #: The epoch this loader last set on the sampler (another one was set directly).
        self._told = self._epoch
        stands_for = StandIn(ours, set_epoch=self.set_epoch)
        # DataLoader forbids assigning `sampler` after __init__; the batch sampler holds the
        # real one, so the DataLoader never iterates this.
        vars(self)["sampler"] = stands_for

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs (continues, after a mid-epoch state)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next (a loaded state of that epoch continues it)."""
        self._position.sampler.set_epoch(epoch)
        self._epoch = self._told = int(self._position.sampler.epoch)

    def _batches(self) -> Iterator[Any]:
        sampler = self._position.sampler
        if sampler.epoch != self._told:  # set on the sampler itself: that one runs
            self._epoch = int(sampler.epoch)
        self.set_epoch(self._epoch)
        length = super().__len__()  # what this iteration yields, before it starts
        batches = self._position.track(DataLoader.__iter__(self), length)
        for batch in batches:
            yield batch if self._device is None else _moved(batch, self._device)
        if self._position.finished:
            self._epoch += 1

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state at the step the loop reached (a small dict of JSON types)."""
        return self._position.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from ``state_dict``: the next iteration resumes its epoch (or, for a
        finished epoch, runs the next one)."""
        self._position.load_state_dict(state_dict)
        epoch = int(self._position.sampler.epoch)
        self._told = epoch
        self._epoch = epoch + 1 if state_dict.get("finished") is True else epoch


def _moved(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor in it (through dicts, tuples and lists) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        mapping: Any = type(batch)  # a Mapping's class: built from a dict of its items
        return mapping({key: _moved(value, device) for key, value in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(_moved(item, device) for item in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_moved(item, device) for item in batch)
    return batch


def save_state(
    directory: str | os.PathLike[str], loader: PreparedDataLoader, *, name: str = "train"
) -> Path:
    """Write ``loader``'s state into ``directory`` (a Ray checkpoint being made); its path.

    Every worker at the same step has the same state, so one worker's checkpoint (rank
    0's, as Ray's guide writes) is enough; each may write its own.
    """
    if not isinstance(loader, PreparedDataLoader):
        raise TypeError(
            f"loader must come from samplers.integrations.ray.prepare_data_loader, got "
            f"{type(loader).__name__}"
        )
    path = Path(directory) / STATE_FILE.format(name=name)
    path.write_text(json.dumps(loader.state_dict(), sort_keys=True))
    return path


def load_state(
    loader: PreparedDataLoader,
    checkpoint: ray.train.Checkpoint | None = None,
    *,
    name: str = "train",
) -> bool:
    """Load ``loader``'s state from ``checkpoint`` (default ``ray.train.get_checkpoint()``).

    Returns whether a state was loaded: ``False`` when there is no checkpoint (a fresh
    run); ``FileNotFoundError`` names the file when the checkpoint has none of this name.
    """
    if not isinstance(loader, PreparedDataLoader):
        raise TypeError(
            f"loader must come from samplers.integrations.ray.prepare_data_loader, got "
            f"{type(loader).__name__}"
        )
    if checkpoint is None:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return False
    with checkpoint.as_directory() as directory:
        path = Path(directory) / STATE_FILE.format(name=name)
        if not path.exists():
            raise FileNotFoundError(
                f"the checkpoint holds no loader state {path.name!r} (saved with "
                f"save_state(directory, loader, name={name!r})?)"
            )
        loader.load_state_dict(json.loads(path.read_text()))
    return True
