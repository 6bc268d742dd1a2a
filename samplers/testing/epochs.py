"""The guarantees about one epoch: sizes, coverage, batches, order and determinism."""

from __future__ import annotations

import contextlib
import random
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from samplers.testing.registry import guarantee
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    Lockstep,
    Rejected,
    Unsupported,
    batches,
    build,
    epoch_outputs,
    indices,
    is_batched,
    iterate,
    load,
    plural,
    samples,
    set_epoch,
    state_of,
    takes,
)

__all__ = [
    "RESHUFFLE_MIN_DISTINCT",
    "covers_dataset",
    "deterministic_in_process",
    "equal_batch_counts",
    "equal_length_across_ranks",
    "exactly_once",
    "handles_every_size",
    "len_matches_iteration",
    "no_tiny_batch",
    "reshuffles_with_set_epoch",
    "seed_changes_order",
]

#: ``reshuffles-with-set-epoch`` and ``seed-changes-order`` compare orders yielding at
#: least this many distinct indices (two random orders of 8 coincide with probability
#: 1/40320).
RESHUFFLE_MIN_DISTINCT = 8


@guarantee(
    "handles-every-size",
    "the sampler builds and iterates for every valid configuration: any dataset size >= 0, "
    "world size >= 1, rank in [0, world size), batch size >= 1",
)
def handles_every_size(factory: Factory, configuration: Configuration) -> None:
    """Every rank's sampler builds, has a ``len()`` if it has one at all, and iterates."""
    for rank in range(configuration.world_size):
        try:
            sampler = build(factory, configuration, rank)
            set_epoch(sampler, configuration.epoch)
            if hasattr(type(sampler), "__len__"):
                len(sampler)
            iterate(sampler)
        except Rejected as rejected:
            raise Failure(
                rank,
                configuration.epoch,
                f"the sampler raised {rejected}",
                "a job with this configuration fails at start with "
                f"{type(rejected.error).__name__}",
                {"error": str(rejected)},
            ) from None
        except Exception as error:
            raise Failure(
                rank,
                configuration.epoch,
                f"the sampler raised {type(error).__name__}: {error}",
                f"a job with this configuration fails with {type(error).__name__}",
                {"error": f"{type(error).__name__}: {error}"},
            ) from None


@guarantee(
    "len-matches-iteration",
    "len(sampler) equals what the next iteration yields, on every rank, also after a state "
    "saved mid-epoch or at its end was loaded",
)
def len_matches_iteration(factory: Factory, configuration: Configuration) -> None:
    """``len()`` equals the items one epoch yields; after loading a state taken mid-epoch
    or after the epoch's last item (``taken`` steps, when the sampler has ``state_dict``),
    what the rest yields."""
    for rank in range(configuration.world_size):
        sampler = build(factory, configuration, rank)
        set_epoch(sampler, configuration.epoch)
        try:
            length = len(sampler)
        except TypeError as error:
            raise Unsupported(f"the sampler has no len(): {error}") from None
        yielded = iterate(sampler)
        _same_length(rank, configuration.epoch, length, len(yielded), "")
        if not yielded:
            continue
        try:
            saver = build(factory, configuration, rank)
            set_epoch(saver, configuration.epoch)
            iterator = iter(saver)
            taken = configuration.taken % (len(yielded) + 1)  # the epoch's end too
            for _ in range(taken):
                next(iterator)
            state = state_of(saver)
        except Unsupported:
            continue
        resumed = build(factory, configuration, rank)
        load(resumed, state)
        set_epoch(resumed, configuration.epoch)
        length = len(resumed)
        _same_length(
            rank,
            configuration.epoch,
            length,
            len(iterate(resumed)),
            f" after a state saved at step {taken} was loaded",
            {"taken": taken},
        )


def _same_length(
    rank: int,
    epoch: int,
    length: int,
    yielded: int,
    when: str,
    details: dict[str, Any] | None = None,
) -> None:
    if length != yielded:
        raise Failure(
            rank,
            epoch,
            f"len() is {length} but the epoch yields {yielded}{when}",
            f"rank {rank}'s len() is off by {abs(length - yielded)}: a step count, "
            "progress bar or learning-rate schedule computed from len() is wrong",
            details,
        )


def _equal(
    configuration: Configuration,
    counts: Sequence[int],
    unit: tuple[str, str],
    consequence: str,
    when: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Fail when the ranks' ``counts`` (of ``unit``) differ (``when``: after what)."""
    if len(set(counts)) <= 1:
        return
    most, fewest = counts.index(max(counts)), counts.index(min(counts))
    gap = counts[most] - counts[fewest]
    raise Failure(
        fewest,
        configuration.epoch,
        f"rank {most} gets {plural(counts[most], *unit)}, rank {fewest} {counts[fewest]}{when}",
        f"rank {fewest} gets {plural(gap, *unit)} fewer than rank {most}: {consequence}",
        details,
    )


@guarantee("equal-length-across-ranks", "every rank yields the same number of indices")
def equal_length_across_ranks(factory: Factory, configuration: Configuration) -> None:
    """Every rank receives the same number of indices in an epoch."""
    counts = [len(indices(items)) for items in epoch_outputs(factory, configuration)]
    _equal(
        configuration,
        counts,
        ("index", "indices"),
        "per-sample results gathered from the ranks do not line up",
    )


@guarantee(
    "equal-batch-counts",
    "through a DataLoader with the batch size (or the batch sampler's own batches), every "
    "rank gets the same number of batches, also in the rest of an epoch resumed on another "
    "world size",
)
def equal_batch_counts(factory: Factory, configuration: Configuration) -> None:
    """Every rank gets the same number of batches (so per-step collectives cannot hang);
    for a sampler with ``state_dict`` whose fresh epochs on another world size
    (``other_world_size``) are equal too, also the ranks of that world size that loaded a
    state saved mid-epoch (after ``taken`` steps)."""
    outputs = epoch_outputs(factory, configuration)
    batched = is_batched(outputs)
    counts = [len(batches(items, batched, configuration.batch_size)) for items in outputs]
    consequence = "a DDP step waits forever for it"
    _equal(configuration, counts, ("batch", "batches"), consequence)
    other = configuration.resumed_world_size
    fresh = epoch_outputs(factory, replace(configuration, world_size=other))
    if len({len(batches(items, batched, configuration.batch_size)) for items in fresh}) > 1:
        return  # unequal there without a resume: a configuration of that world size says so
    longest = max((len(items) for items in outputs), default=0)
    job = Lockstep([build(factory, configuration, r) for r in range(configuration.world_size)])
    for sampler in job.samplers:
        set_epoch(sampler, configuration.epoch)
    taken = configuration.taken % max(longest, 1)
    try:
        job.step(taken)
        state = job.states()[0]
        resumed = [build(factory, configuration, rank, other) for rank in range(other)]
        for sampler in resumed:
            load(sampler, state)
            set_epoch(sampler, configuration.epoch)
        rest = [iterate(sampler) for sampler in resumed]
    except Exception:  # no state, or no resume on another world size: the resume
        return  # guarantees judge that; this one judges the counts of a resume that runs
    counts = [len(batches(items, batched, configuration.batch_size)) for items in rest]
    when = (
        f" after rank 0's state saved at step {taken} on {configuration.world_size} was "
        f"loaded into {other} ranks"
    )
    _equal(
        configuration,
        counts,
        ("batch", "batches"),
        consequence,
        when,
        {"taken": taken, "other_world_size": other},
    )


@guarantee("covers-dataset", "every index reaches some rank each epoch")
def covers_dataset(factory: Factory, configuration: Configuration) -> None:
    """Every index of the dataset reaches some rank in the epoch."""
    outputs = epoch_outputs(factory, configuration)
    seen = {i for items in outputs for i in indices(items)}
    missing = sorted(set(range(configuration.dataset_size)) - seen)
    if missing:
        raise Failure(
            None,
            configuration.epoch,
            f"{len(missing)} of {configuration.dataset_size} indices reach no rank "
            f"(e.g. {missing[0]})",
            f"{samples(len(missing))} never seen that epoch: not trained on, and "
            "missing from an evaluation's result",
        )


@guarantee("exactly-once", "every index reaches exactly one rank exactly once each epoch")
def exactly_once(factory: Factory, configuration: Configuration) -> None:
    """Every index reaches exactly one rank, exactly once, in the epoch."""
    outputs = epoch_outputs(factory, configuration)
    counts = Counter(i for items in outputs for i in indices(items))
    missing = [i for i in range(configuration.dataset_size) if counts[i] == 0]
    repeated = sorted(i for i, n in counts.items() if n > 1)
    foreign = sorted(i for i in counts if not 0 <= i < configuration.dataset_size)
    if not (missing or repeated or foreign):
        return
    parts = []
    if repeated:
        parts.append(
            f"{plural(len(repeated), 'index reaches', 'indices reach')} the ranks more than "
            f"once (e.g. {repeated[0]})"
        )
    if missing:
        parts.append(
            f"{plural(len(missing), 'index reaches', 'indices reach')} no rank (e.g. {missing[0]})"
        )
    if foreign:
        parts.append(
            f"{plural(len(foreign), 'index is', 'indices are')} outside [0, "
            f"{configuration.dataset_size}) (e.g. {foreign[0]})"
        )
    if repeated:
        experience = f"{samples(len(repeated))} counted twice: a metric summed over ranks is wrong"
    elif missing:
        experience = f"{samples(len(missing))} never seen: an evaluation misses them"
    else:
        experience = "the DataLoader asks the dataset for an index it does not have"
    raise Failure(None, configuration.epoch, "; ".join(parts), experience)


@guarantee(
    "no-tiny-batch",
    "no batch has fewer than batch_size // 2 samples when the dataset holds at least "
    "world_size * batch_size samples",
)
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
    batched = is_batched(outputs)
    for rank, items in enumerate(outputs):
        for position, content in enumerate(batches(items, batched, batch)):
            if len(content) < batch // 2:
                raise Failure(
                    rank,
                    configuration.epoch,
                    f"batch {position} holds {samples(len(content))}, batch size {batch}",
                    f"rank {rank} runs a step on {samples(len(content))} instead of "
                    f"{batch}: a noisy gradient, and BatchNorm fails on a batch of one",
                )


def _shuffling(samplers: Sequence[object]) -> None:
    if any(getattr(s, "shuffle", True) is False for s in samplers):
        raise Unsupported("the sampler does not shuffle (shuffle=False)")


def _distinct(outputs: Sequence[Sequence[object]]) -> int:
    return len({i for items in outputs for i in indices(items)})


@guarantee(
    "reshuffles-with-set-epoch",
    "different epochs give different orders, the next epoch's and the one after (a "
    "shuffling sampler)",
)
def reshuffles_with_set_epoch(factory: Factory, configuration: Configuration) -> None:
    """Epochs ``e + 1`` and ``e + 2`` each give a different order from epoch ``e`` (an
    order of period two repeats at ``e + 2``; checked when the epoch yields at least
    :data:`RESHUFFLE_MIN_DISTINCT` distinct indices)."""
    samplers = [build(factory, configuration, rank) for rank in range(configuration.world_size)]
    if not all(callable(getattr(s, "set_epoch", None)) for s in samplers):
        raise Unsupported("the sampler has no set_epoch")
    _shuffling(samplers)
    epoch = configuration.epoch
    first = _order(samplers, epoch)
    for later in (epoch + 1, epoch + 2):
        _differ(
            first,
            _order(samplers, later),
            configuration,
            f"epochs {epoch} and {later}",
            "every epoch shows the model the data in the same order"
            if later == epoch + 1
            else "every other epoch shows the model the data in the same order",
        )


@guarantee("seed-changes-order", "different seeds give different orders (a shuffling sampler)")
def seed_changes_order(factory: Factory, configuration: Configuration) -> None:
    """Seeds ``seed + 1`` and ``seed + 2**32`` each give a different order from ``seed``
    (a seed kept in 32 bits repeats at ``seed + 2**32``; checked when the epoch yields at
    least :data:`RESHUFFLE_MIN_DISTINCT` distinct indices)."""
    if not takes(factory, "seed"):
        raise Unsupported("the factory takes no seed")
    seed = configuration.seed
    orders = []
    for each in (seed, seed + 1, seed + 2**32):
        samplers = [
            build(factory, configuration, rank, seed=each)
            for rank in range(configuration.world_size)
        ]
        _shuffling(samplers)
        orders.append(_order(samplers, configuration.epoch))
    for other, order in zip((seed + 1, seed + 2**32), orders[1:], strict=True):
        _differ(
            orders[0],
            order,
            configuration,
            f"seeds {seed} and {other}",
            "runs meant to differ (seeds of an ensemble, repeated trials) see the data in the "
            "same order"
            + ("" if other == seed + 1 else " (the seed is kept in 32 bits: 2**32 apart)"),
        )


def _order(samplers: Sequence[object], epoch: int) -> list[list[Any]]:
    """What each rank's sampler yields at ``epoch``."""
    order = []
    for sampler in samplers:
        set_epoch(sampler, epoch)
        order.append(iterate(sampler))
    return order


def _differ(
    first: list[list[Any]],
    second: list[list[Any]],
    configuration: Configuration,
    which: str,
    experience: str,
) -> None:
    """Fail when two orders of at least :data:`RESHUFFLE_MIN_DISTINCT` indices are equal."""
    if _distinct(first) >= RESHUFFLE_MIN_DISTINCT and first == second:
        raise Failure(
            None, configuration.epoch, f"{which} give every rank the same order", experience
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


def deterministic_in_process(factory: Factory, configuration: Configuration) -> None:
    """Two samplers built from the same arguments yield the same, whatever the global
    random state (torch's, Python's, numpy's) when they are built and iterated."""
    with _global_rng(1):
        first = epoch_outputs(factory, configuration)
    with _global_rng(2):
        second = epoch_outputs(factory, configuration)
    same_outputs(
        first,
        second,
        configuration,
        "two samplers built from the same arguments yield different orders",
        "ranks that build the sampler at different moments",
    )


def same_outputs(
    first: Sequence[Sequence[object]],
    second: Sequence[Sequence[object]],
    configuration: Configuration,
    what: str,
    who: str,
    details: dict[str, Any] | None = None,
) -> None:
    """Fail on the first rank whose outputs differ: the run is not reproducible."""
    for rank, (one, other) in enumerate(zip(first, second, strict=True)):
        if one != other:
            raise Failure(
                rank,
                configuration.epoch,
                what,
                f"a run cannot be reproduced, and {who} disagree on the epoch's order",
                details,
            )
