"""Lightning: a DataLoader over a sampler of ours that the Trainer and Fabric leave alone.

With ``use_distributed_sampler=True`` (the default) Lightning's Trainer and Fabric rebuild
every training DataLoader whose ``sampler`` is not a torch ``DistributedSampler``: they
re-instantiate its batch sampler around a ``DistributedSampler`` of their own (our
:class:`~samplers.DistributedBatchSampler` cannot be rebuilt that way, and a rebuilt one
would lose its tail policy and seed) or wrap its sampler in theirs, which shards it a
second time. They also call ``set_epoch`` only on ``loader.sampler`` and
``loader.batch_sampler.sampler``, never on a batch sampler. :class:`ShardedDataLoader`
answers all three::

    loader = ShardedDataLoader(dataset, batch_sampler=DistributedBatchSampler(dataset, 4))
    trainer.fit(model, loader)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as _StockDistributedSampler

from samplers.integrations.loop import (
    LoopPosition,
    StandIn,
    TrackedDataLoader,
    framework,
    our_sampler,
)

try:
    import lightning.fabric  # noqa: F401  (Lightning itself is only needed to train with it)
except ImportError:  # pragma: no cover - the error names the extra
    try:
        import pytorch_lightning  # noqa: F401
    except ImportError as missing:
        raise framework("lightning", "lightning") from missing

__all__ = ["ShardedDataLoader"]


class ShardedDataLoader(TrackedDataLoader):
    """A ``DataLoader`` over a sampler of ours, for Lightning's Trainer and Fabric.

    Guarantee: it takes ``DataLoader``'s arguments and yields exactly what that DataLoader
    yields; its sampler is a sampler of ours: a batch sampler (``batch_sampler=``: the
    batch, token, packed and mixture batch samplers) or an index sampler (``sampler=``
    with ``batch_size``: :class:`~samplers.DistributedSampler`,
    :class:`~samplers.DistributedSamplerWrapper`, :class:`~samplers.DistributedMixtureSampler`),
    otherwise it raises ``TypeError``. Then:

    * ``loader.sampler`` is a torch ``DistributedSampler`` (ours itself, or one standing
      for it), so Lightning's Trainer and Fabric, under their defaults, see a loader that
      is distributed already and use it as it is, with our sharding, tail policy and seed;
    * the epoch they set on ``loader.sampler`` before each epoch reaches our sampler;
    * it is stateful: its state holds the sampler's state at the step the training loop
      reached and how many batches of the epoch the loop had taken. Lightning's Trainer
      keeps it in its checkpoints, and a mid-epoch checkpoint resumes that epoch exactly;
      Fabric saves and loads it with ``fabric.save``/``fabric.load`` like any stateful
      object;
    * after a state is loaded, ``len(loader)`` counts the whole epoch on this rank, the
      batches taken before the checkpoint included, as Lightning's progress tracking
      counts them; iterating yields the rest.

    Fabric sets the epoch to the number of iterations it has started in the process, so a
    Fabric run resumed in a new process continues exactly only a checkpoint of epoch 0.
    """

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        ours, per_batch = our_sampler(self)
        self._position = LoopPosition(ours, per_batch)
        #: Batches of the current epoch taken before this iteration (from a loaded state).
        self._before = 0
        #: A loaded state not yet iterated: (its epoch, batches before, the epoch's length).
        self._resumed: tuple[int, int, int] | None = None
        self._loaded: dict[str, Any] = {}
        stands_for = ours if isinstance(ours, _StockDistributedSampler) else StandIn(ours)
        # DataLoader forbids assigning `sampler` after __init__; with a batch sampler it is
        # never iterated (the batch sampler holds the real one), so only its type is read.
        vars(self)["sampler"] = stands_for

    def __len__(self) -> int:
        resumed = self._resumed
        if resumed is not None and resumed[0] == self._position.sampler.epoch:
            return resumed[2]
        return super().__len__()

    def _batches(self) -> Iterator[Any]:
        # A generator: the DataLoader's iterator starts at the first batch requested, after
        # the framework has set this epoch (Lightning calls iter() before set_epoch).
        resumed, self._resumed = self._resumed, None
        continues = resumed is not None and resumed[0] == self._position.sampler.epoch
        self._before = resumed[1] if resumed is not None and continues else 0
        length = super().__len__()  # what this iteration yields, before it starts
        yield from self._position.track(DataLoader.__iter__(self), length)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state at the loop's step, the epoch's batches taken, whether done."""
        if self._resumed is not None:
            return dict(self._loaded)  # loaded and not iterated: still the same
        position = self._position
        return {
            "sampler": position.state_dict(),
            "batches": self._before + position.taken,
            "finished": position.finished,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from ``state_dict``: the next iteration resumes its epoch."""
        state = _checked(state_dict)
        self._position.load_state_dict(state["sampler"])
        before = state["batches"]
        rest = 0 if state["finished"] else super().__len__()
        self._resumed = (self._position.sampler.epoch, before, before + rest)
        self._loaded = state


def _checked(state: Any) -> dict[str, Any]:
    """A ShardedDataLoader state's fields, or a ValueError naming the one that is wrong."""
    if not isinstance(state, Mapping):
        raise ValueError(
            f"state must be a dict from ShardedDataLoader.state_dict(), got {type(state).__name__}"
        )
    for name, kind in (("sampler", Mapping), ("batches", int), ("finished", bool)):
        if name not in state:
            raise ValueError(f"state field {name!r} is missing (a state of another loader?)")
        value = state[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"state field {name!r} must be a {kind.__name__}, got {value!r}")
    if state["batches"] < 0:
        raise ValueError(f"state field 'batches' must be at least 0, got {state['batches']}")
    return {"sampler": dict(state["sampler"]), **{k: state[k] for k in ("batches", "finished")}}
