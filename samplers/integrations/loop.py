"""What the training loop took from a loader, and the sampler's state at that step.

Frameworks fetch ahead of the training loop (accelerate's loader looks one batch ahead to
know which batch is the last; DataLoader workers prefetch), so a sampler has handed out
more than the loop has used. :class:`LoopPosition` counts the batches the loop actually
received from the current iteration and turns the count into the sampler's state with
``state_dict(consumed=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as _StockDistributedSampler

from samplers.batch_sampler import DistributedBatchSampler
from samplers.mixture.sampler import DistributedMixtureBatchSampler, DistributedMixtureSampler
from samplers.sampler import DistributedSampler
from samplers.tokens.sampler import DistributedTokenBatchSampler
from samplers.wrapper import DistributedSamplerWrapper

__all__ = [
    "BATCH_SAMPLERS",
    "INDEX_SAMPLERS",
    "LoopPosition",
    "StandIn",
    "TrackedDataLoader",
    "framework",
    "install_command",
    "our_sampler",
]

INDEX_SAMPLERS = (DistributedSampler, DistributedSamplerWrapper, DistributedMixtureSampler)
"""Our samplers that yield indices (a DataLoader batches them with its BatchSampler)."""
BATCH_SAMPLERS = (
    DistributedBatchSampler,
    DistributedTokenBatchSampler,
    DistributedMixtureBatchSampler,
)
"""Our samplers that yield batches (a DataLoader takes them as ``batch_sampler``)."""

_T = TypeVar("_T")


def framework(module: str, extra: str) -> ImportError:
    """The error for a missing framework: what to install, as a command that works where
    dsampler came from (it is installed from a clone, not from a package index)."""
    return ImportError(
        f"{module} is not installed; install it with the '{extra}' extra: {install_command(extra)}"
    )


def install_command(extra: str) -> str:
    """The pip command that adds ``extra`` to this installation: from the clone this
    package runs from (an editable install), ``pip install -e '.[extra]'`` there or the
    clone's path from anywhere; otherwise the path of the clone it was installed from."""
    clone = Path(__file__).resolve().parents[2]
    if (clone / "pyproject.toml").is_file():
        return (
            f"pip install -e '.[{extra}]' in the clone, or pip install -e '{clone}[{extra}]' "
            "from anywhere"
        )
    return f"pip install '/path/to/dsampler[{extra}]' (the clone dsampler was installed from)"


def our_sampler(loader: Any) -> tuple[Any, int]:
    """The sampler of ours that drives ``loader``, and how many of its items make a batch.

    A batch sampler of ours passed as ``batch_sampler`` (:data:`BATCH_SAMPLERS`: the
    batch, token, packed and mixture batch samplers; one item, a batch, per batch), or
    an index sampler of ours passed as ``sampler`` (:data:`INDEX_SAMPLERS`:
    :class:`~samplers.DistributedSampler`, :class:`~samplers.DistributedSamplerWrapper`,
    :class:`~samplers.DistributedMixtureSampler`; ``batch_size`` indices per batch).
    Raises ``TypeError`` naming what the loader holds otherwise.
    """
    batch_sampler = getattr(loader, "batch_sampler", None)
    if isinstance(batch_sampler, BATCH_SAMPLERS):
        return batch_sampler, 1
    inner = getattr(batch_sampler, "sampler", None)
    batch_size = getattr(batch_sampler, "batch_size", None)
    if isinstance(inner, INDEX_SAMPLERS) and isinstance(batch_size, int):
        return inner, batch_size
    held = type(inner if inner is not None else batch_sampler).__name__
    raise TypeError(
        "the loader must be driven by a sampler of ours: DataLoader(dataset, batch_sampler="
        f"{' or '.join(k.__name__ + '(...)' for k in BATCH_SAMPLERS)}) or DataLoader(dataset, "
        f"batch_size=..., sampler={' or '.join(k.__name__ + '(...)' for k in INDEX_SAMPLERS)});"
        f" it holds {held}"
    )


class LoopPosition:
    """The sampler's state at the step the training loop reached in the current iteration.

    Guarantee: after the loop has received ``k`` batches from an iteration that
    :meth:`track` counts, :meth:`state_dict` is the sampler's state after those ``k``
    batches, however far the sampler's own iterator has run ahead; once ``k`` is the
    iteration's whole length, it is the sampler's state at the epoch's end. Before any
    iteration is counted it is the sampler's own state (a state just loaded, unchanged).
    """

    def __init__(self, sampler: Any, per_batch: int) -> None:
        self.sampler = sampler
        self.per_batch = per_batch
        self._taken = 0
        self._length: int | None = None

    def track(self, batches: Iterable[_T], length: int) -> Iterator[_T]:
        """Yield ``batches`` (an iteration of ``length`` batches), counting what the loop gets."""
        self._taken, self._length = 0, length
        for batch in batches:
            self._taken += 1
            yield batch

    @property
    def taken(self) -> int:
        """Batches the loop has received from the current iteration."""
        return self._taken

    @property
    def finished(self) -> bool:
        """Whether the loop has received every batch of the current iteration."""
        return self._length is not None and self._taken >= self._length

    def state_dict(self) -> dict[str, Any]:
        """The sampler's ``state_dict`` at the loop's step (see the class guarantee)."""
        if self._length is None or self.finished:
            return dict(self.sampler.state_dict())
        return dict(self.sampler.state_dict(consumed=self._taken * self.per_batch))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load ``state`` into the sampler: its next iteration continues from there."""
        self.sampler.load_state_dict(state)
        self._taken, self._length = 0, None


class TrackedDataLoader(DataLoader[Any]):
    """A ``DataLoader`` whose iteration is a generator of the same batches
    (:meth:`_batches`), so that it can count what the training loop took
    (:class:`LoopPosition`) and start the DataLoader's own iterator only at the first
    batch requested; the base of the frameworks' stateful loaders."""

    # DataLoader's __iter__ is typed to return its own iterator class; a generator of the
    # same batches is what a training loop uses, and a different type is the point.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        """This iteration's batches (a subclass's generator)."""
        raise NotImplementedError(f"{type(self).__name__} must define _batches")


class StandIn(_StockDistributedSampler[Any]):
    """A torch ``DistributedSampler`` standing for a sampler of ours that is not one.

    Guarantee: it carries our sampler's placement and settings, and ``set_epoch`` sets our
    sampler's epoch (through ``set_epoch``, the callable given, when there is one); it
    yields nothing itself (iterating it raises ``TypeError``), since the loader iterates
    our sampler. Frameworks that rebuild every loader whose ``sampler`` is not a torch
    ``DistributedSampler`` leave a loader holding it as it is.
    """

    def __init__(self, ours: Any, set_epoch: Callable[[int], None] | None = None) -> None:
        # The stock __init__ reads the process group and the dataset: everything it would
        # set is our sampler's.
        self.ours = ours
        self._set_epoch = set_epoch if set_epoch is not None else ours.set_epoch
        # The wrapper has no dataset of its own; frameworks only read this one.
        self.dataset = cast(Any, getattr(ours, "dataset", None))
        self.num_replicas = ours.num_replicas
        self.rank = ours.rank
        self.shuffle = ours.shuffle
        self.seed = ours.seed
        self.drop_last = ours.tail == "drop"
        self.epoch = ours.epoch

    def set_epoch(self, epoch: int) -> None:
        """Set our sampler's epoch (through the callable given, if any), and mirror it."""
        self._set_epoch(epoch)
        self.epoch = self.ours.epoch

    def __iter__(self) -> Iterator[int]:
        raise TypeError(
            f"this stands for the loader's {type(self.ours).__name__}, which the loader "
            "iterates; iterate the loader, not loader.sampler"
        )

    def __len__(self) -> int:
        raise TypeError(
            f"this stands for the loader's {type(self.ours).__name__}; take len() of the "
            "loader or of that sampler"
        )
