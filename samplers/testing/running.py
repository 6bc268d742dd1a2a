"""Building and running a factory's samplers: configurations, outcomes, and lockstep runs.

A *factory* is a callable taking the keyword arguments ``dataset``, ``num_replicas``,
``rank``, ``seed`` and ``batch_size`` (it is passed only those its signature names, or all
of them when it takes ``**kwargs``) and returning a sampler that yields dataset indices, or
a batch sampler that yields lists of indices; the kit tells them apart by the first item
they yield, never by an empty epoch (:func:`yields_batches`). The dataset is
``range(dataset_size)``.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import itertools
import operator
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import BatchSampler

__all__ = [
    "ARGUMENTS",
    "Configuration",
    "Expired",
    "Factory",
    "Failure",
    "Rejected",
    "Unbounded",
    "Unsupported",
    "Violation",
    "bounded",
    "build",
    "epoch_outputs",
    "iterate",
    "most_items",
    "time_limit",
    "yields_batches",
]

#: A callable returning the sampler (or batch sampler) of one rank, given the keyword
#: arguments of :data:`ARGUMENTS` its signature names (all of them with ``**kwargs``).
Factory = Callable[..., Any]
#: The keyword arguments a factory may take.
ARGUMENTS = ("dataset", "num_replicas", "rank", "seed", "batch_size")


@dataclass(frozen=True)
class Configuration:
    """One configuration the guarantees are checked on (all ranks of it are checked).

    ``taken``: how far into the epoch a resumed run saved its state, in steps (reduced
    modulo what the ranks yield); ``other_world_size``: the world size a state is loaded
    into (the world size plus one when they are equal).
    """

    #: The dataset's size: the factory is given ``range(dataset_size)``.
    dataset_size: int
    #: The number of ranks, each built by the factory.
    world_size: int
    #: The batch size the factory is given; an index sampler's output is batched by it, as
    #: a DataLoader would.
    batch_size: int = 1
    #: The epoch checked, passed to ``set_epoch``.
    epoch: int = 0
    #: The seed the factory is given.
    seed: int = 0
    #: How far into the epoch a resumed run saved its state, in steps (reduced modulo what
    #: the ranks yield).
    taken: int = 0
    #: The world size a state is loaded into (see :attr:`resumed_world_size`).
    other_world_size: int = 2

    def __post_init__(self) -> None:
        for name, minimum in (
            ("dataset_size", 0),
            ("world_size", 1),
            ("batch_size", 1),
            ("epoch", 0),
            ("taken", 0),
            ("other_world_size", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    @property
    def resumed_world_size(self) -> int:
        """The world size a state is loaded into: never the saved one."""
        if self.other_world_size == self.world_size:
            return self.world_size + 1
        return self.other_world_size


class Violation(AssertionError):
    """A guarantee did not hold: on which rank and epoch, what went wrong, what it costs.

    ``details`` adds what the counterexample needs beyond the configuration (e.g. how
    many steps were taken before a state was saved).
    """

    def __init__(
        self,
        guarantee: str,
        rank: int | None,
        epoch: int,
        what: str,
        experience: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        place = f"rank {rank}, epoch {epoch}" if rank is not None else f"epoch {epoch}"
        super().__init__(f"{guarantee} ({place}): {what}")
        self.guarantee = guarantee
        self.rank = rank
        self.epoch = epoch
        self.what = what
        self.experience = experience
        self.details = dict(details or {})


def raised_in_check(guarantee: str, epoch: int, error: BaseException, taken: str) -> Violation:
    """The :class:`Violation` of ``guarantee`` for an ``error`` the sampler raised while its
    check ran, although it ``taken`` (builds and iterates the configuration)."""
    raised = f"{type(error).__name__}: {error}"
    return Violation(
        guarantee,
        None,
        epoch,
        f"the sampler raised {raised} while the check ran, although it {taken}",
        f"a job that does what this guarantee covers fails with {type(error).__name__}",
        {"error": raised},
    )


class Failure(Exception):
    """What a check function raises: a :class:`Violation` without its guarantee's id, which
    the registry adds (see :func:`samplers.testing.registry.guarantee`)."""

    def __init__(
        self,
        rank: int | None,
        epoch: int,
        what: str,
        experience: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(what)
        self.rank = rank
        self.epoch = epoch
        self.what = what
        self.experience = experience
        self.details = dict(details or {})

    def violation(self, guarantee: str) -> Violation:
        return Violation(guarantee, self.rank, self.epoch, self.what, self.experience, self.details)


class Unsupported(Exception):
    """The sampler lacks what a guarantee needs (e.g. ``state_dict``): it does not apply."""


class Rejected(Exception):
    """The factory or its sampler raised for a configuration (``error`` is what it raised).

    The search skips such configurations for every guarantee but ``handles-every-size``,
    which they violate.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def _accepted(factory: Factory) -> tuple[str, ...]:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return ARGUMENTS
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return ARGUMENTS
    names = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    return tuple(name for name in ARGUMENTS if name in names)


def takes(factory: Factory, name: str) -> bool:
    """Whether the factory is passed the argument ``name``."""
    return name in _accepted(factory)


def build(
    factory: Factory,
    configuration: Configuration,
    rank: int,
    world_size: int | None = None,
    seed: int | None = None,
) -> Any:
    """The factory's sampler for ``rank`` of ``world_size`` (default: the configuration's),
    with ``seed`` (default: the configuration's). Raises :class:`Rejected` when the factory
    raises."""
    values = {
        "dataset": range(configuration.dataset_size),
        "num_replicas": configuration.world_size if world_size is None else world_size,
        "rank": rank,
        "seed": configuration.seed if seed is None else seed,
        "batch_size": configuration.batch_size,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return factory(**{name: values[name] for name in _accepted(factory)})
    except Exception as error:
        raise Rejected(error) from error


def item(value: Any) -> int | list[int]:
    """An index, or a batch of indices, as plain ints; ``TypeError`` for anything else."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_index(index) for index in value]
    return _index(value)


def _index(value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"the sampler yielded {value!r} ({type(value).__name__}), not an index"
        ) from None


def iterate(sampler: Any, limit: int | None = None) -> list[Any]:
    """What one ``iter()`` of the sampler yields (at most ``limit`` items).

    Inside :func:`bounded`, an iteration that yields more items, or more indices, than the
    configuration's share can hold raises :class:`Unbounded` instead of growing.
    """
    most = _MOST.get()
    if limit is None and most is not None:
        limit = most + 1
    found: list[Any] = []
    indices = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in itertools.islice(iter(sampler), limit):
            found.append(item(value))
            indices += len(found[-1]) if isinstance(found[-1], list) else 1
            if most is not None and (len(found) > most or indices > most):
                raise Unbounded(most)
    return found


class Unbounded(RuntimeError):
    """An iteration yielded more than its configuration's share can hold."""

    def __init__(self, most: int) -> None:
        super().__init__(
            f"one iter() of the sampler yielded more than {most} indices, more than any "
            "rank's share of the configuration holds: its iterator does not end (or "
            "repeats far too much), so the kit stopped it"
        )


#: The most items (and indices) one iteration may yield, inside :func:`bounded`.
_MOST: contextvars.ContextVar[int | None] = contextvars.ContextVar("most", default=None)


def most_items(configuration: Configuration) -> int:
    """A generous bound on one rank's share: every sample and a padded step's worth, four
    times over (a share of any tail holds far less)."""
    world = max(configuration.world_size, configuration.other_world_size)
    return 4 * (configuration.dataset_size + world * configuration.batch_size) + 16


@contextlib.contextmanager
def bounded(configuration: Configuration) -> Iterator[None]:
    """Within the block, :func:`iterate` stops past :func:`most_items` (memory bound)."""
    token = _MOST.set(most_items(configuration))
    try:
        yield
    finally:
        _MOST.reset(token)


class Expired(BaseException):
    """Raised into the running code when its time limit passes (a ``BaseException``, so
    that a sampler's ``except Exception`` does not swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block with :class:`Expired` after ``seconds`` (an interval timer on
    the main thread, ``SIGALRM``; elsewhere, or with ``None``, unbounded). A blocking call
    that retries on ``EINTR`` is interrupted too, as the handler raises."""
    if (
        seconds is None
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def set_epoch(sampler: Any, epoch: int) -> None:
    """``sampler.set_epoch(epoch)`` when it has one."""
    method = getattr(sampler, "set_epoch", None)
    if callable(method):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            method(epoch)


def epoch_outputs(factory: Factory, configuration: Configuration) -> list[list[Any]]:
    """What each rank yields in the configuration's epoch, from fresh samplers."""
    outputs = []
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        set_epoch(sampler, configuration.epoch)
        outputs.append(iterate(sampler))
    return outputs


def is_batched(outputs: Sequence[Sequence[Any]]) -> bool:
    """Whether these outputs hold a batch; says nothing of a sampler whose outputs are
    empty (see :func:`yields_batches`)."""
    return any(isinstance(value, list) for items in outputs for value in items)


def _first_item(factory: Factory, configuration: Configuration) -> Any:
    """The first item any rank yields in the configuration's epoch, or ``None``."""
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        set_epoch(sampler, configuration.epoch)
        first = iterate(sampler, limit=1)
        if first:
            return first[0]
    return None


def yields_batches(
    factory: Factory,
    configuration: Configuration,
    outputs: Sequence[Sequence[Any]] | None = None,
) -> bool:
    """Whether the factory's samplers yield batches (lists of indices) rather than indices.

    Read from the first item of a non-empty epoch, never inferred from an empty one: the
    configuration's epoch (``outputs``, when already run), else the same world size and
    batch size on a dataset of ``2 * world_size * batch_size`` samples more (a batch
    sampler that drops its tail yields nothing from fewer than ``world_size *
    batch_size``), else the configuration's own epoch. Only a sampler that yields nothing
    in either (or raises for both) is told by what it is: a batch sampler when it is a
    torch ``BatchSampler`` or has a ``batch_size`` attribute.
    """
    if outputs is not None and any(items for items in outputs):
        return is_batched(outputs)
    unit = 2 * configuration.world_size * configuration.batch_size
    larger = replace(configuration, dataset_size=configuration.dataset_size + unit)
    for probe in (larger, configuration):
        try:
            first = _first_item(factory, probe)
            if first is not None:
                return isinstance(first, list)
            sampler = build(factory, probe, 0)
        except Exception:  # it does not take this probe: the next one, or what it is
            continue
        return isinstance(sampler, BatchSampler) or hasattr(sampler, "batch_size")
    return False


def indices(items: Sequence[Any]) -> list[int]:
    """The indices a rank received, in order (a batch sampler's batches flattened)."""
    return [i for value in items for i in (value if isinstance(value, list) else [value])]


def batches(items: Sequence[Any], batched: bool, batch_size: int) -> list[list[int]]:
    """The rank's batches: its own, or what a DataLoader with ``batch_size`` makes."""
    if batched:
        return [value if isinstance(value, list) else [value] for value in items]
    return list(BatchSampler(list(items), batch_size, drop_last=False))


def state_of(sampler: Any) -> dict[str, Any]:
    """A copy of the sampler's state; :class:`Unsupported` without ``state_dict``."""
    if not (
        callable(getattr(sampler, "state_dict", None))
        and callable(getattr(sampler, "load_state_dict", None))
    ):
        raise Unsupported("the sampler has no state_dict/load_state_dict")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return copy.deepcopy(sampler.state_dict())


def load(sampler: Any, state: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler.load_state_dict(copy.deepcopy(state))


class Lockstep:
    """The ranks of one job, iterating an epoch one step (an item each) at a time.

    A rank whose share has ended takes nothing at the steps that remain, and its iterator
    has been asked once more (as a training loop that ended asks it).
    """

    def __init__(self, samplers: Sequence[Any]) -> None:
        self.samplers = list(samplers)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.iterators: list[Iterator[Any]] = [iter(s) for s in self.samplers]
        self.taken: list[list[Any]] = [[] for _ in self.samplers]

    def step(self, steps: int = 1) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(steps):
                for rank, iterator in enumerate(self.iterators):
                    value = next(iterator, None)
                    if value is not None:
                        self.taken[rank].append(item(value))

    def states(self) -> list[dict[str, Any]]:
        return [state_of(sampler) for sampler in self.samplers]


def plural(count: int, singular: str, many: str) -> str:
    return f"{count} {singular if count == 1 else many}"


def samples(count: int) -> str:
    return plural(count, "sample", "samples")
