"""The guarantees through a loader with worker processes, which fetch ahead of the loop.

The loader is torchdata's ``StatefulDataLoader`` when installed (the loader that asks the
sampler for its state itself), else torch's ``DataLoader``, with :data:`LOADER_WORKERS`
workers. A state read in the loop must be the loop's step, not what the workers fetched
(``loop-state-with-workers``); restoring a state taken after an epoch's loop ended, the
loader starts iterations it then discards, and the next epoch must still be the right one
(``loader-epochs``).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from torch.utils.data import DataLoader

from samplers.testing.registry import guarantee
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    build,
    iterate,
    load,
    plural,
    set_epoch,
    state_of,
)
from samplers.testing.usage import _fresh_epoch, _ranks

__all__ = ["LOADER_WORKERS", "loader_epochs", "loop_state_with_workers"]

#: Worker processes of the loader the sampler runs through.
LOADER_WORKERS = 2
#: Configurations a search tries for each guarantee here (each starts worker processes).
LOADER_EXAMPLES = 4


def _loader_class() -> Any:
    """torchdata's ``StatefulDataLoader`` when installed, else torch's ``DataLoader``."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        return DataLoader
    return _QuietStatefulDataLoader(StatefulDataLoader)


class _QuietStatefulDataLoader:
    """Builds torchdata's loader without the warning its constructor raises on torch
    2.13 (its own call of the deprecated ``torch.set_vital``), which says nothing about the
    sampler under check."""

    __name__ = "StatefulDataLoader"

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
            return self.kind(*args, **kwargs)


def _loader(sampler: Any, configuration: Configuration, batched: bool) -> Any:
    kind = _loader_class()
    data = range(configuration.dataset_size)
    options: dict[str, Any] = {"num_workers": LOADER_WORKERS, "persistent_workers": True}
    if batched:
        return kind(data, batch_sampler=sampler, **options)
    return kind(data, batch_size=configuration.batch_size, sampler=sampler, **options)


def _shut_down(loader: Any) -> None:
    """Stop the worker processes of ``loader``'s iterator now, not when the garbage
    collector or the interpreter's exit gets to it (a worker stopped at exit can abort and
    print to stderr)."""
    iterator = getattr(loader, "_iterator", loader)
    stop = getattr(iterator, "_shutdown_workers", None)
    if callable(stop):
        stop()


def _pass(loader: Any) -> list[list[int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [batch.tolist() for batch in loader]


def _loader_state(loader: Any, sampler: Any) -> Any:
    method = getattr(loader, "state_dict", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return copy.deepcopy(method() if callable(method) else sampler.state_dict())


def _load_loader(loader: Any, sampler: Any, state: Any) -> None:
    method = getattr(loader, "load_state_dict", None)
    if callable(method):
        method(copy.deepcopy(state))
    else:
        load(sampler, state)


@guarantee(
    "loader-epochs",
    "through a loader with worker processes (torchdata's StatefulDataLoader when installed), "
    "a state taken after an epoch's loop ended resumes with the next epoch, as the "
    "uninterrupted run does: with set_epoch, and with the sampler's own auto_epoch",
    max_examples=LOADER_EXAMPLES,
)
def loader_epochs(factory: Factory, configuration: Configuration) -> None:
    """Rank 0 through a loader with :data:`LOADER_WORKERS` workers: two epochs, the state
    after the second, a third; the state loaded into a fresh loader and sampler must give
    the third. Run with ``set_epoch`` before each epoch, and without it when the sampler has
    an ``auto_epoch`` attribute (set to ``True``)."""
    probe = build(factory, configuration, 0)
    state_of(probe)  # unsupported before any work
    first = iterate(probe, 1)
    if not first:
        return  # an empty share: no epoch to end
    batched = isinstance(first[0], list)
    modes = ["set_epoch"] if callable(getattr(probe, "set_epoch", None)) else []
    if hasattr(probe, "auto_epoch"):
        modes.append("auto_epoch")
    for mode in modes:

        def fresh(mode: str = mode) -> tuple[Any, Any]:
            sampler = build(factory, configuration, 0)
            if mode == "auto_epoch":
                sampler.auto_epoch = True
            set_epoch(sampler, configuration.epoch)
            return sampler, _loader(sampler, configuration, batched)

        def run(sampler: Any, loader: Any, epoch: int, mode: str = mode) -> list[list[int]]:
            if mode == "set_epoch":
                set_epoch(sampler, epoch)
            return _pass(loader)

        sampler, loader = fresh()
        epoch = configuration.epoch
        run(sampler, loader, epoch)
        run(sampler, loader, epoch + 1)
        state = _loader_state(loader, sampler)
        expected = run(sampler, loader, epoch + 2)
        _shut_down(loader)
        resumed, resumed_loader = fresh()
        _load_loader(resumed_loader, resumed, state)
        if mode == "set_epoch":
            got = run(resumed, resumed_loader, epoch + 1)  # the saved epoch: nothing left
            got += run(resumed, resumed_loader, epoch + 2)
        else:
            got = _pass(resumed_loader)
        _shut_down(resumed_loader)
        if got != expected:
            raise Failure(
                0,
                epoch + 2,
                f"with {mode}, through a loader with {LOADER_WORKERS} workers, a state taken "
                f"after epoch {epoch + 1} ended resumes with "
                f"{plural(len(got), 'batch', 'batches')}"
                + (" of another order" if len(got) == len(expected) else "")
                + f", not epoch {epoch + 2}'s {len(expected)}",
                "a job resumed from an end-of-epoch checkpoint skips or repeats an epoch",
                {"loader": _loader_class().__name__, "mode": mode},
            )


@guarantee(
    "loop-state-with-workers",
    "through a loader whose worker processes fetch ahead (torchdata's StatefulDataLoader "
    "when installed), the sampler's own state_dict() read in the loop is the loop's step: "
    "loaded into fresh samplers it gives exactly the rest of every rank's epoch (or "
    "state_dict() refuses, saying why)",
    max_examples=LOADER_EXAMPLES,
)
def loop_state_with_workers(factory: Factory, configuration: Configuration) -> None:
    """Rank 0 through a loader with :data:`LOADER_WORKERS` workers takes ``taken`` steps
    (reduced modulo the shortest share), then reads its sampler's ``state_dict()`` (every
    rank at the same step has the same state, so one loader is enough); loaded into fresh
    samplers, it must yield each rank's rest of the epoch (what the samplers alone yield
    after those steps)."""
    world = configuration.world_size
    probe = build(factory, configuration, 0)
    state_of(probe)  # unsupported before any work
    whole = _fresh_epoch(factory, configuration, world)
    if not any(whole):
        return
    batched = any(isinstance(value, list) for items in whole for value in items)
    size = 1 if batched else configuration.batch_size
    shares = [-(-len(items) // size) for items in whole]  # loader batches per rank
    steps = configuration.taken % (min(shares) + 1)
    sampler = _ranks(factory, configuration, world)[0]
    options: dict[str, Any] = {"num_workers": LOADER_WORKERS}
    data = range(configuration.dataset_size)
    kind = _loader_class()
    loader = (
        kind(data, batch_sampler=sampler, **options)
        if batched
        else kind(data, batch_size=size, sampler=sampler, **options)
    )
    iterator = iter(loader)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(steps):
                next(iterator)
            try:
                states = [copy.deepcopy(sampler.state_dict())]
            except (ValueError, TypeError, RuntimeError):
                return  # refused, saying why: allowed
    finally:
        _shut_down(iterator)
    del iterator
    for rank, sampler in enumerate(_ranks(factory, configuration, world)):
        load(sampler, states[0])
        set_epoch(sampler, configuration.epoch)
        rest, expected = iterate(sampler), whole[rank][steps * size :]
        if rest != expected:
            ahead = len(expected) - len(rest)
            raise Failure(
                rank,
                configuration.epoch,
                f"through a loader with {LOADER_WORKERS} workers, the state read in the loop "
                f"after {plural(steps, 'step', 'steps')} resumes rank {rank} with "
                f"{plural(len(rest), 'item', 'items')}, not the loop's remaining "
                f"{len(expected)}"
                + (f": {ahead} ahead (what the workers fetched)" if ahead > 0 else ""),
                "a checkpoint taken in the training loop skips the batches the workers had "
                "fetched but the loop had not seen",
                {"taken": steps, "loader": _loader_class().__name__},
            )
