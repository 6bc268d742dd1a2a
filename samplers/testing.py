"""Check any distributed sampler against the guarantees this project's samplers give.

Import it explicitly (``import samplers.testing``); ``import samplers`` does not, and the
search (:func:`check`) needs the ``test`` extra (hypothesis) and the ``study`` extra
(pandas), imported only when it runs.

A *factory* is a callable taking the keyword arguments ``dataset``, ``num_replicas``,
``rank``, ``seed`` and ``batch_size`` (it is passed only those its signature names, or
all of them when it takes ``**kwargs``) and returning a sampler that yields dataset
indices, or a batch sampler that yields lists of indices; the kit tells them apart by
what they yield. The dataset is ``range(dataset_size)``.

Each guarantee is a plain function ``(factory, configuration) -> None`` that raises
:class:`Violation` (an ``AssertionError``) naming the rank, the epoch and what went wrong,
or :class:`Unsupported` when the sampler lacks what the guarantee needs (``set_epoch``,
``state_dict``, ``__len__``); call them from your own tests. :func:`check` searches
configurations for each guarantee with hypothesis and reports the smallest counterexample
it shrinks to.

Example::

    >>> from samplers import DistributedSampler
    >>> from samplers.testing import Configuration, exactly_once
    >>> def factory(dataset, num_replicas, rank, seed):
    ...     return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="uneven")
    >>> exactly_once(factory, Configuration(dataset_size=10, world_size=4))
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import itertools
import json
import os
import random
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CHECKS",
    "GUARANTEES",
    "Configuration",
    "Factory",
    "Result",
    "Unsupported",
    "Violation",
    "check",
    "check_all",
    "check_guarantee",
    "covers_dataset",
    "deterministic",
    "deterministic_across_processes",
    "equal_batch_counts",
    "equal_length_across_ranks",
    "exactly_once",
    "len_matches_iteration",
    "load_factory",
    "no_tiny_batch",
    "reshuffles_with_set_epoch",
    "resumes_other_world_size",
    "resumes_same_world_size",
    "validated",
]

#: Each guarantee's id and what it states.
GUARANTEES: dict[str, str] = {
    "len-matches-iteration": (
        "len(sampler) equals what one epoch of iteration yields, on every rank"
    ),
    "equal-length-across-ranks": "every rank yields the same number of indices",
    "equal-batch-counts": (
        "through a DataLoader with the batch size (or the batch sampler's own batches), every "
        "rank gets the same number of batches"
    ),
    "covers-dataset": "every index reaches some rank each epoch",
    "exactly-once": "every index reaches exactly one rank exactly once each epoch",
    "no-tiny-batch": (
        "no batch has fewer than batch_size // 2 samples when the dataset holds at least "
        "world_size * batch_size samples"
    ),
    "reshuffles-with-set-epoch": "different epochs give different orders (a shuffling sampler)",
    "deterministic": "the same arguments give the same output, in this and in a fresh process",
    "resumes-same-world-size": (
        "state_dict taken after k indices, loaded into a fresh sampler, yields exactly the rest"
    ),
    "resumes-other-world-size": (
        "a state loaded into samplers of another world size (ranks in lockstep) loses nothing of "
        "the epoch and repeats nothing beyond what the sampler's own tail policy repeats"
    ),
}

#: Dataset sizes, world sizes and batch sizes the search draws from.
MAX_DATASET_SIZE = 3000
MAX_WORLD_SIZE = 16
MAX_BATCH_SIZE = 16
MAX_EPOCH = 3
#: ``reshuffles-with-set-epoch`` compares epochs yielding at least this many distinct
#: indices (two random orders of 8 coincide with probability 1/40320).
RESHUFFLE_MIN_DISTINCT = 8

Factory = Callable[..., Any]
_ARGUMENTS = ("dataset", "num_replicas", "rank", "seed", "batch_size")


@dataclass(frozen=True)
class Configuration:
    """One configuration the guarantees are checked on (all ranks of it are checked).

    ``taken``: how far into the epoch a resumed run saved its state (reduced modulo what
    the ranks yield); ``other_world_size``: the world size a state is loaded into (the
    world size plus one when they are equal).
    """

    dataset_size: int
    world_size: int
    batch_size: int = 1
    epoch: int = 0
    seed: int = 0
    taken: int = 0
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
    many indices were taken before a state was saved).
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


class Unsupported(Exception):
    """The sampler lacks what a guarantee needs (e.g. ``state_dict``): it does not apply."""


class _Rejected(Exception):
    """The factory raised for this configuration: the sampler does not take it."""


# --- building and running samplers ----------------------------------------------------------


def _accepted(factory: Factory) -> tuple[str, ...]:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return _ARGUMENTS
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return _ARGUMENTS
    names = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    return tuple(name for name in _ARGUMENTS if name in names)


def build(
    factory: Factory, configuration: Configuration, rank: int, world_size: int | None = None
) -> Any:
    """The factory's sampler for ``rank`` of ``world_size`` (default: the configuration's).

    Raises ``_Rejected`` (internal) when the factory raises: the configuration is skipped.
    """
    values = {
        "dataset": range(configuration.dataset_size),
        "num_replicas": configuration.world_size if world_size is None else world_size,
        "rank": rank,
        "seed": configuration.seed,
        "batch_size": configuration.batch_size,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return factory(**{name: values[name] for name in _accepted(factory)})
    except Exception as error:
        raise _Rejected(f"{type(error).__name__}: {error}") from error


def _item(value: Any) -> int | list[int]:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [int(index) for index in value]
    return int(value)


def _iterate(sampler: Any, limit: int | None = None) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [_item(value) for value in itertools.islice(iter(sampler), limit)]


def _set_epoch(sampler: Any, epoch: int) -> None:
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def epoch_outputs(factory: Factory, configuration: Configuration) -> list[list[Any]]:
    """What each rank yields in the configuration's epoch, from fresh samplers."""
    outputs = []
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        _set_epoch(sampler, configuration.epoch)
        outputs.append(_iterate(sampler))
    return outputs


def _is_batched(outputs: Sequence[Sequence[Any]]) -> bool:
    return any(isinstance(item, list) for items in outputs for item in items)


def _indices(items: Sequence[Any]) -> list[int]:
    """The indices a rank received, in order (a batch sampler's batches flattened)."""
    return [i for item in items for i in (item if isinstance(item, list) else [item])]


def _batches(items: Sequence[Any], batched: bool, batch_size: int) -> list[list[int]]:
    """The rank's batches: its own, or what a DataLoader with ``batch_size`` makes."""
    if batched:
        return [item if isinstance(item, list) else [item] for item in items]
    return list(BatchSampler(list(items), batch_size, drop_last=False))


def _n(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


def _samples(count: int) -> str:
    return _n(count, "sample", "samples")


def _spread(values: Sequence[int]) -> tuple[int, int]:
    """The ranks with the most and the fewest (first of each)."""
    return values.index(max(values)), values.index(min(values))


# --- the guarantees ---------------------------------------------------------------------------


def len_matches_iteration(factory: Factory, configuration: Configuration) -> None:
    """``len(sampler)`` equals the number of items one epoch yields, on every rank."""
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        _set_epoch(sampler, configuration.epoch)
        try:
            length = len(sampler)
        except TypeError as error:
            raise Unsupported(f"the sampler has no len(): {error}") from None
        yielded = len(_iterate(sampler))
        if length != yielded:
            raise Violation(
                "len-matches-iteration",
                rank,
                configuration.epoch,
                f"len() is {length} but the epoch yields {yielded}",
                f"rank {rank}'s len() is off by {abs(length - yielded)}: a step count, "
                "progress bar or learning-rate schedule computed from len() is wrong",
            )


def _equal(
    guarantee: str,
    configuration: Configuration,
    counts: Sequence[int],
    unit: tuple[str, str],
    consequence: str,
) -> None:
    """Raise the guarantee's violation when the ranks' ``counts`` (of ``unit``) differ."""
    if len(set(counts)) == 1:
        return
    most, fewest = _spread(counts)
    gap = counts[most] - counts[fewest]
    raise Violation(
        guarantee,
        fewest,
        configuration.epoch,
        f"rank {most} gets {_n(counts[most], *unit)}, rank {fewest} {counts[fewest]}",
        f"rank {fewest} gets {_n(gap, *unit)} fewer than rank {most}: {consequence}",
    )


def equal_length_across_ranks(factory: Factory, configuration: Configuration) -> None:
    """Every rank receives the same number of indices in an epoch."""
    counts = [len(_indices(items)) for items in epoch_outputs(factory, configuration)]
    _equal(
        "equal-length-across-ranks",
        configuration,
        counts,
        ("index", "indices"),
        "per-sample results gathered from the ranks do not line up",
    )


def equal_batch_counts(factory: Factory, configuration: Configuration) -> None:
    """Every rank gets the same number of batches (so per-step collectives cannot hang)."""
    outputs = epoch_outputs(factory, configuration)
    batched = _is_batched(outputs)
    counts = [len(_batches(items, batched, configuration.batch_size)) for items in outputs]
    _equal(
        "equal-batch-counts",
        configuration,
        counts,
        ("batch", "batches"),
        "a DDP step waits forever for it",
    )


def covers_dataset(factory: Factory, configuration: Configuration) -> None:
    """Every index of the dataset reaches some rank in the epoch."""
    outputs = epoch_outputs(factory, configuration)
    seen = {i for items in outputs for i in _indices(items)}
    missing = sorted(set(range(configuration.dataset_size)) - seen)
    if missing:
        raise Violation(
            "covers-dataset",
            None,
            configuration.epoch,
            f"{len(missing)} of {configuration.dataset_size} indices reach no rank "
            f"(e.g. {missing[0]})",
            f"{_samples(len(missing))} never seen that epoch: not trained on, and "
            "missing from an evaluation's result",
        )


def exactly_once(factory: Factory, configuration: Configuration) -> None:
    """Every index reaches exactly one rank, exactly once, in the epoch."""
    outputs = epoch_outputs(factory, configuration)
    counts = Counter(i for items in outputs for i in _indices(items))
    missing = [i for i in range(configuration.dataset_size) if counts[i] == 0]
    repeated = sorted(i for i, n in counts.items() if n > 1)
    foreign = sorted(i for i in counts if not 0 <= i < configuration.dataset_size)
    if not (missing or repeated or foreign):
        return
    parts = []
    if repeated:
        parts.append(
            f"{_n(len(repeated), 'index reaches', 'indices reach')} the ranks more than once "
            f"(e.g. {repeated[0]})"
        )
    if missing:
        parts.append(
            f"{_n(len(missing), 'index reaches', 'indices reach')} no rank (e.g. {missing[0]})"
        )
    if foreign:
        parts.append(f"{len(foreign)} are outside the dataset (e.g. {foreign[0]})")
    if repeated:
        experience = f"{_samples(len(repeated))} counted twice: a metric summed over ranks is wrong"
    else:
        experience = f"{_samples(len(missing))} never seen: an evaluation misses them"
    raise Violation("exactly-once", None, configuration.epoch, "; ".join(parts), experience)


def no_tiny_batch(factory: Factory, configuration: Configuration) -> None:
    """No batch below ``batch_size // 2`` once the dataset has ``world * batch`` samples."""
    size, world, batch = (
        configuration.dataset_size,
        configuration.world_size,
        configuration.batch_size,
    )
    if size < world * batch:
        return
    outputs = epoch_outputs(factory, configuration)
    batched = _is_batched(outputs)
    for rank, items in enumerate(outputs):
        for position, content in enumerate(_batches(items, batched, batch)):
            if len(content) < batch // 2:
                raise Violation(
                    "no-tiny-batch",
                    rank,
                    configuration.epoch,
                    f"batch {position} holds {_samples(len(content))}, batch size {batch}",
                    f"rank {rank} runs a step on {_samples(len(content))} instead of "
                    f"{batch}: a noisy gradient, and BatchNorm fails on a batch of one",
                )


def reshuffles_with_set_epoch(factory: Factory, configuration: Configuration) -> None:
    """Epoch ``e + 1`` gives a different order from epoch ``e`` (checked when the epoch
    yields at least :data:`RESHUFFLE_MIN_DISTINCT` distinct indices)."""
    samplers = [build(factory, configuration, rank) for rank in range(configuration.world_size)]
    if not all(callable(getattr(s, "set_epoch", None)) for s in samplers):
        raise Unsupported("the sampler has no set_epoch")
    if any(getattr(s, "shuffle", True) is False for s in samplers):
        raise Unsupported("the sampler does not shuffle (shuffle=False)")
    orders = []
    for epoch in (configuration.epoch, configuration.epoch + 1):
        order = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            order.append(_iterate(sampler))
        orders.append(order)
    if len({i for items in orders[0] for i in _indices(items)}) < RESHUFFLE_MIN_DISTINCT:
        return
    if orders[0] == orders[1]:
        raise Violation(
            "reshuffles-with-set-epoch",
            None,
            configuration.epoch,
            f"epochs {configuration.epoch} and {configuration.epoch + 1} give every rank the "
            "same order",
            "every epoch shows the model the data in the same order",
        )


@contextlib.contextmanager
def _global_rng(seed: int) -> Iterator[None]:
    """Seed torch's, Python's (and numpy's, when imported) global RNGs; restore them after."""
    numpy = sys.modules.get("numpy")
    states = (torch.get_rng_state(), random.getstate(), numpy and numpy.random.get_state())
    torch.manual_seed(seed)
    random.seed(seed)
    if numpy is not None:
        numpy.random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        if numpy is not None:
            numpy.random.set_state(states[2])


def deterministic(factory: Factory, configuration: Configuration) -> None:
    """Two samplers built from the same arguments yield the same, whatever the global
    random state (torch's, Python's, numpy's) when they are built and iterated."""
    with _global_rng(1):
        first = epoch_outputs(factory, configuration)
    with _global_rng(2):
        second = epoch_outputs(factory, configuration)
    for rank, (one, other) in enumerate(zip(first, second, strict=True)):
        if one != other:
            raise Violation(
                "deterministic",
                rank,
                configuration.epoch,
                "two samplers built from the same arguments yield different orders",
                "a run cannot be reproduced, and ranks that build the sampler at different "
                "moments disagree on the epoch's order",
            )


def _reference(factory: Factory) -> str | None:
    """``module:qualname`` when importing it gives back ``factory``, else ``None``."""
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not module or not name or module == "__main__" or "<" in name:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{name}" if found is factory else None


def load_factory(reference: str) -> Factory:
    """The callable named by ``MODULE:FACTORY`` (a dotted name within the module).

    Raises ``ValueError`` naming ``reference`` when it is malformed, not importable or not
    callable.
    """
    module_name, colon, name = reference.partition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"expected MODULE:FACTORY, got {reference!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(
            f"cannot import module {module_name!r} of {reference!r}: "
            f"{type(error).__name__}: {error}"
        ) from None
    for part in name.split("."):
        if not hasattr(found, part):
            raise ValueError(f"module {module_name!r} has no attribute {name!r} ({reference!r})")
        found = getattr(found, part)
    if not callable(found):
        raise ValueError(f"{reference!r} is a {type(found).__name__}, not a callable factory")
    return found  # type: ignore[no-any-return]


#: The configuration :func:`validated` builds the factory's sampler with.
PROBE = Configuration(dataset_size=10, world_size=2, batch_size=2)


def validated(factory: Factory, name: str = "factory") -> Factory:
    """``factory`` when it builds a sampler for :data:`PROBE` (rank 0) that yields
    indices or lists of indices; else ``TypeError`` naming ``name`` and what it returned."""
    if not callable(factory):
        raise TypeError(f"{name} must be callable, got {type(factory).__name__}")
    try:
        sampler = build(factory, PROBE, 0)
    except _Rejected as error:
        raise TypeError(f"{name} raised for {asdict(PROBE)}: {error}") from None
    if not hasattr(sampler, "__iter__") or isinstance(sampler, (str, bytes, Mapping)):
        raise TypeError(
            f"{name} returned {type(sampler).__name__}, not a sampler (an iterable of "
            "indices or of lists of indices)"
        )
    try:
        _iterate(sampler)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{name} returned a {type(sampler).__name__} that does not yield indices or "
            f"lists of indices: {error}"
        ) from None
    return factory


def _outputs_json(reference: str, configurations: Sequence[Configuration]) -> str:
    factory = load_factory(reference)
    return json.dumps([epoch_outputs(factory, c) for c in configurations])


def deterministic_across_processes(
    reference: str, configurations: Sequence[Configuration], *, timeout: float = 120.0
) -> None:
    """The factory named ``MODULE:FACTORY`` yields the same in a fresh Python process
    (another hash seed) as in this one, for each configuration."""
    factory = load_factory(reference)
    script = (
        "import sys\nfrom samplers.testing import Configuration, _outputs_json\n"
        f"print(_outputs_json({reference!r}, [Configuration(**c) for c in "
        f"{[asdict(c) for c in configurations]!r}]))\n"
    )
    environment = {
        **os.environ,
        # Another string hash than this process's, so hash-dependent orders show.
        "PYTHONHASHSEED": "54321" if os.environ.get("PYTHONHASHSEED") == "12345" else "12345",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    finished = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        check=False,
    )
    if finished.returncode != 0:
        last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh process failed building {reference}: {last}")
    fresh = json.loads(finished.stdout)
    for configuration, theirs in zip(configurations, fresh, strict=True):
        ours = json.loads(json.dumps(epoch_outputs(factory, configuration)))
        for rank, (one, other) in enumerate(zip(ours, theirs, strict=True)):
            if one != other:
                raise Violation(
                    "deterministic",
                    rank,
                    configuration.epoch,
                    "a fresh process yields a different order for the same arguments",
                    "a run cannot be reproduced, and ranks (separate processes) disagree on "
                    "the epoch's order",
                    {"configuration": asdict(configuration)},
                )


def _state(sampler: Any) -> dict[str, Any]:
    if not (
        callable(getattr(sampler, "state_dict", None))
        and callable(getattr(sampler, "load_state_dict", None))
    ):
        raise Unsupported("the sampler has no state_dict/load_state_dict")
    return copy.deepcopy(sampler.state_dict())


def _resumed(
    factory: Factory, configuration: Configuration, rank: int, world: int, state: Any
) -> list[Any]:
    sampler = build(factory, configuration, rank, world)
    _set_epoch(sampler, configuration.epoch)
    sampler.load_state_dict(copy.deepcopy(state))
    return _iterate(sampler)


def _advanced(
    factory: Factory, configuration: Configuration, rank: int, taken: int
) -> tuple[list[Any], dict[str, Any]]:
    """A fresh sampler's first ``taken`` items at the epoch, and its state after them."""
    sampler = build(factory, configuration, rank)
    _set_epoch(sampler, configuration.epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iterator = iter(sampler)
        first = [_item(next(iterator)) for _ in range(taken)]
    state = _state(sampler)
    del iterator
    return first, state


def resumes_same_world_size(factory: Factory, configuration: Configuration) -> None:
    """A state saved after ``k`` items (``taken`` modulo the rank's count), loaded into a
    fresh sampler of the same arguments, yields exactly the rest of the epoch."""
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        _set_epoch(sampler, configuration.epoch)
        full = _iterate(sampler)
        _state(sampler)  # unsupported before any work
        if not full:
            continue
        taken = configuration.taken % len(full)
        _, state = _advanced(factory, configuration, rank, taken)
        rest = _resumed(factory, configuration, rank, configuration.world_size, state)
        if rest != full[taken:]:
            raise Violation(
                "resumes-same-world-size",
                rank,
                configuration.epoch,
                f"after {taken} of {len(full)} items, the resumed sampler yields {len(rest)} "
                f"items, not the remaining {len(full) - taken}"
                + (" (a different order)" if len(rest) == len(full) - taken else ""),
                "a run resumed from a checkpoint skips or repeats data of the interrupted epoch",
                {"taken": taken},
            )


def _tail_allowance(
    factory: Factory, configuration: Configuration, world: int, batched: bool
) -> tuple[int, int]:
    """How many indices the sampler's own tail policy repeats and drops at most, on
    ``world`` ranks: ``unit - 1`` each (unit = ``world`` times the batch size for a batch
    sampler) when an uninterrupted epoch that does not divide evenly shows it, else 0."""
    unit = world * (configuration.batch_size if batched else 1)
    if unit == 1:
        return 0, 0
    size = configuration.dataset_size + (1 - configuration.dataset_size) % unit
    probe = replace(configuration, dataset_size=size, world_size=world)
    counts = Counter(i for items in epoch_outputs(factory, probe) for i in _indices(items))
    repeats = any(n > 1 for n in counts.values())
    drops = len(counts) < size
    return (unit - 1) * repeats, (unit - 1) * drops


def resumes_other_world_size(factory: Factory, configuration: Configuration) -> None:
    """Ranks in lockstep save after ``k`` items each; rank 0's state loaded into every rank
    of another world size: over the epoch nothing is lost and nothing repeated beyond what
    the sampler's tail policy itself repeats or drops (see :func:`_tail_allowance`)."""
    world, other = configuration.world_size, configuration.resumed_world_size
    full = epoch_outputs(factory, configuration)
    _state(build(factory, configuration, 0))  # unsupported before any work
    fewest = min(len(items) for items in full)
    if fewest == 0:
        return
    taken = configuration.taken % fewest
    consumed: list[Any] = []
    states = []
    for rank in range(world):
        first, state = _advanced(factory, configuration, rank, taken)
        consumed.extend(first)
        states.append(state)
    rest = [_resumed(factory, configuration, rank, other, states[0]) for rank in range(other)]
    counts = Counter(_indices(consumed) + [i for items in rest for i in _indices(items)])
    lost = [i for i in range(configuration.dataset_size) if counts[i] == 0]
    repeated = sum(n - 1 for n in counts.values() if n > 1)
    may_repeat, may_drop = _tail_allowance(factory, configuration, other, _is_batched(full))
    loses, repeats = len(lost) > may_drop, repeated > may_repeat
    if loses or repeats:
        raise Violation(
            "resumes-other-world-size",
            0,
            configuration.epoch,
            f"saved after {_n(taken, 'item', 'items')} per rank on {_n(world, 'rank', 'ranks')} "
            f"and resumed on {other}: "
            f"{_n(len(lost), 'index', 'indices')} lost, {repeated} repeated (its tail "
            f"policy accounts for at most {may_drop} lost and {may_repeat} repeated)",
            f"resuming on {other} ranks "
            + (f"never shows {_samples(len(lost))}" if loses else "")
            + (" and " if loses and repeats else "")
            + (f"shows {_samples(repeated)} twice" if repeats else "")
            + " of the interrupted epoch",
            {"taken": taken, "other_world_size": other},
        )


#: The guarantee functions, by id.
CHECKS: dict[str, Callable[[Factory, Configuration], None]] = {
    "len-matches-iteration": len_matches_iteration,
    "equal-length-across-ranks": equal_length_across_ranks,
    "equal-batch-counts": equal_batch_counts,
    "covers-dataset": covers_dataset,
    "exactly-once": exactly_once,
    "no-tiny-batch": no_tiny_batch,
    "reshuffles-with-set-epoch": reshuffles_with_set_epoch,
    "deterministic": deterministic,
    "resumes-same-world-size": resumes_same_world_size,
    "resumes-other-world-size": resumes_other_world_size,
}

#: Configurations the ``deterministic`` guarantee also compares with a fresh process.
FRESH_PROCESS_CONFIGURATIONS = (
    Configuration(dataset_size=10, world_size=3, batch_size=2),
    Configuration(dataset_size=257, world_size=4, batch_size=8, epoch=1),
)

#: :func:`check`'s examples per guarantee: the default (derandomised) and thorough search.
EXAMPLES = {False: 40, True: 600}


@dataclass(frozen=True)
class Result:
    """One guarantee's outcome: ``holds`` is ``None`` when the guarantee does not apply."""

    guarantee: str
    holds: bool | None
    counterexample: dict[str, Any] | None = None
    detail: str = ""
    experience: str = ""
    examples: int = field(default=0, compare=False)


def _strategy() -> Any:
    from hypothesis import strategies as st

    return st.builds(
        Configuration,
        dataset_size=st.one_of(
            st.integers(0, 2 * MAX_WORLD_SIZE * MAX_BATCH_SIZE) | st.integers(0, MAX_DATASET_SIZE)
        ),
        world_size=st.integers(1, MAX_WORLD_SIZE),
        batch_size=st.integers(1, MAX_BATCH_SIZE),
        epoch=st.integers(0, MAX_EPOCH),
        seed=st.just(0),
        taken=st.integers(0, MAX_DATASET_SIZE),
        other_world_size=st.integers(1, MAX_WORLD_SIZE),
    )


#: At most this many further runs of a check make a shrunk counterexample smaller.
MINIMISE_ATTEMPTS = 400


def _candidates(configuration: Configuration, name: str) -> list[int]:
    """Smaller values of one field to try, smallest first."""
    value = getattr(configuration, name)
    if name == "dataset_size":
        steps = (configuration.world_size, configuration.batch_size)
        nearby = {value // 2, value - 1, *(value - step for step in steps)}
        nearby.add(value - configuration.world_size * configuration.batch_size)
        tried = set(range(min(value, 49))) | nearby
    elif name == "taken":
        tried = {0, 1, value // 2, value - 1}
    else:
        tried = set(range(1 if name.endswith("_size") else 0, value))
    return sorted(v for v in tried if 0 <= v < value)


def _minimised(
    configuration: Configuration, violates: Callable[[Configuration], bool]
) -> Configuration:
    """Greedily smaller fields while ``violates`` still holds: hypothesis's shrinker
    changes one number at a time, so it stops at, e.g., 188 samples in batches of 11
    where 5 in batches of 4 fail the same way."""
    attempts = 0
    changed = True
    while changed and attempts < MINIMISE_ATTEMPTS:
        changed = False
        for name in ("dataset_size", "world_size", "batch_size", "epoch", "taken"):
            for value in _candidates(configuration, name):
                attempts += 1
                smaller = replace(configuration, **{name: value})
                if violates(smaller):
                    configuration, changed = smaller, True
                    break
                if attempts >= MINIMISE_ATTEMPTS:
                    return configuration
    return configuration


def _size(configuration: Configuration) -> tuple[int, ...]:
    return (
        configuration.dataset_size,
        configuration.world_size,
        configuration.batch_size,
        configuration.epoch,
    )


def _shown(configuration: Configuration) -> str:
    return (
        f"dataset_size={configuration.dataset_size}, world_size={configuration.world_size}, "
        f"batch_size={configuration.batch_size}"
    )


def _counterexample(configuration: Configuration, violation: Violation) -> dict[str, Any]:
    found = {
        "dataset_size": configuration.dataset_size,
        "world_size": configuration.world_size,
        "batch_size": configuration.batch_size,
        "rank": violation.rank,
        "epoch": violation.epoch,
    }
    found.update(violation.details)
    found["what"] = violation.what
    return found


def _violation(function: Callable[..., None], *arguments: Any) -> Violation | None:
    """The violation the check raises, ``None`` when it holds. Any other error of the
    sampler (building or iterating it) means it does not take this configuration:
    ``_Rejected``, and the search skips it."""
    try:
        function(*arguments)
    except (Violation, Unsupported, _Rejected):
        raise
    except Exception as error:
        raise _Rejected(f"{type(error).__name__}: {error}") from error
    return None


def check_guarantee(factory: Factory, guarantee: str, *, thorough: bool = False) -> Result:
    """Search configurations for a violation of ``guarantee`` (an id of :data:`GUARANTEES`)
    and return the smallest one hypothesis shrinks to, or that it held (or does not apply).

    Derandomised by default (the same examples every run); ``thorough`` searches longer,
    with random examples.
    """
    if guarantee not in CHECKS:
        raise ValueError(f"guarantee must be one of {list(CHECKS)}, got {guarantee!r}")
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis.errors import NoSuchExample

    function = CHECKS[guarantee]
    seen = {"tried": 0, "rejected": 0, "unsupported": ""}
    rejection = ""
    smallest: Configuration | None = None

    def violates(configuration: Configuration) -> bool:
        nonlocal rejection, smallest
        seen["tried"] += 1
        try:
            return _violation(function, factory, configuration) is not None
        except Violation:
            return True
        except Unsupported as reason:
            seen["unsupported"] = str(reason)
        except _Rejected as reason:
            seen["rejected"] += 1
            if smallest is None or _size(configuration) < _size(smallest):
                smallest, rejection = configuration, str(reason)
        return False

    options = settings(
        max_examples=EXAMPLES[thorough],
        derandomize=not thorough,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    try:
        found: Configuration | None = _minimised(
            find(_strategy(), violates, settings=options), violates
        )
    except NoSuchExample:
        found = None
    examples = seen["tried"]
    if found is None:
        if seen["unsupported"]:
            return Result(guarantee, None, None, f"not supported: {seen['unsupported']}")
        if seen["rejected"] == examples:
            return Result(
                guarantee,
                None,
                None,
                f"not supported: the sampler raised for every configuration ({rejection})",
            )
        if guarantee == "deterministic":
            return _fresh_process(factory, examples)
        skipped = ""
        if smallest is not None:
            skipped = (
                f"; skipped {seen['rejected']} the sampler raised for (e.g. "
                f"{_shown(smallest)}: {rejection})"
            )
        return Result(
            guarantee,
            True,
            None,
            f"held on {examples - seen['rejected']} configurations searched{skipped}",
            examples=examples,
        )
    try:
        violation = _violation(function, factory, found)
    except Violation as raised:
        violation = raised
    except (Unsupported, _Rejected):
        violation = None
    if violation is None:  # a flaky sampler: the shrunk example passed when run again
        return Result(guarantee, False, asdict(found), "violated, but not reproducibly")
    return Result(
        guarantee,
        False,
        _counterexample(found, violation),
        str(violation),
        violation.experience,
        examples,
    )


def _fresh_process(factory: Factory, examples: int) -> Result:
    reference = _reference(factory)
    searched = f"held on {examples} configurations searched in this process"
    if reference is None:
        return Result(
            "deterministic",
            True,
            None,
            f"{searched}; not compared with a fresh process (the factory is not importable "
            "by name)",
            examples=examples,
        )
    try:
        deterministic_across_processes(reference, FRESH_PROCESS_CONFIGURATIONS)
    except Violation as violation:
        configuration = Configuration(**violation.details.pop("configuration"))
        return Result(
            "deterministic",
            False,
            _counterexample(configuration, violation),
            str(violation),
            violation.experience,
            examples,
        )
    except (RuntimeError, subprocess.TimeoutExpired, _Rejected) as error:
        return Result(
            "deterministic", True, None, f"{searched}; not compared with a fresh process: {error}"
        )
    return Result(
        "deterministic",
        True,
        None,
        f"{searched} and in a fresh process ({len(FRESH_PROCESS_CONFIGURATIONS)} configurations)",
        examples=examples,
    )


def check_all(factory: Factory, *, thorough: bool = False) -> list[Result]:
    """:func:`check_guarantee` for every guarantee, in :data:`GUARANTEES` order (after
    :func:`validated`)."""
    validated(factory)
    return [check_guarantee(factory, guarantee, thorough=thorough) for guarantee in CHECKS]


def check(factory: Factory, *, thorough: bool = False) -> pd.DataFrame:
    """Each guarantee, searched with hypothesis: one row per guarantee with the columns
    ``guarantee``, ``holds`` (True, False, or None when it does not apply),
    ``counterexample`` (the shrunk configuration and what went wrong, or None), ``detail``
    and ``experience`` (what a user of the sampler sees when it is violated)."""
    import pandas as pd

    rows = [
        {
            "guarantee": result.guarantee,
            "holds": result.holds,
            "counterexample": result.counterexample,
            "detail": result.detail,
            "experience": result.experience,
        }
        for result in check_all(factory, thorough=thorough)
    ]
    return pd.DataFrame(
        rows, columns=["guarantee", "holds", "counterexample", "detail", "experience"]
    )
