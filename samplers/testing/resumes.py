"""The resume guarantees, checked where resume breaks: at the epoch's boundaries.

Every rank's sampler saves its state at the same step (ranks in lockstep, as under DDP), at
each of these checkpoints: before the first step, at the end of the shortest share, at the
epoch's last step, after every rank's loop ended, and at the configuration's ``taken``
steps. Each distinct state (any rank's may be the one a job kept) is loaded into fresh
samplers with the usual loop (``load_state_dict``, then ``set_epoch`` for each epoch from
the saved one on); the resumed epoch is checked, then the two epochs after it, and the run
is interrupted and resumed a second time halfway through the rest.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from samplers.testing.registry import guarantee
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    Lockstep,
    build,
    epoch_outputs,
    indices,
    iterate,
    load,
    plural,
    samples,
    set_epoch,
    state_of,
    yields_batches,
)

__all__ = ["FOLLOWING_EPOCHS", "checkpoints", "resumes_other_world_size", "resumes_same_world_size"]

#: Epochs after the resumed one that must equal the uninterrupted run's.
FOLLOWING_EPOCHS = 2


def checkpoints(counts: Sequence[int], taken: int) -> dict[int, str]:
    """The steps at which the ranks save, each with a name for counterexamples."""
    shortest, longest = min(counts), max(counts)
    named = {taken % (longest + 2): f"after step {taken % (longest + 2)}"}
    named[longest + 1] = "after every rank's loop ended"
    named[longest] = "after the epoch's last step"
    named[shortest] = "at the end of the shortest share"
    named[0] = "before the first step"
    return dict(sorted(named.items()))


def _epochs(factory: Factory, configuration: Configuration, world: int) -> list[list[list[Any]]]:
    """The uninterrupted run on ``world`` ranks: ``[epoch offset][rank]`` -> items, for the
    configuration's epoch and the :data:`FOLLOWING_EPOCHS` after it."""
    samplers = [build(factory, configuration, rank, world) for rank in range(world)]
    run = []
    for offset in range(FOLLOWING_EPOCHS + 1):
        for sampler in samplers:
            set_epoch(sampler, configuration.epoch + offset)
        run.append([iterate(sampler) for sampler in samplers])
    return run


def _job(factory: Factory, configuration: Configuration, world: int, state: Any) -> list[Any]:
    """Fresh samplers on ``world`` ranks that loaded ``state``, at the saved epoch."""
    samplers = [build(factory, configuration, rank, world) for rank in range(world)]
    for sampler in samplers:
        if state is not None:
            load(sampler, state)
        set_epoch(sampler, configuration.epoch)
    return samplers


def _distinct(states: Sequence[Any]) -> list[tuple[int, Any]]:
    """``(first rank, state)`` for each distinct state."""
    seen: dict[str, tuple[int, Any]] = {}
    for rank, state in enumerate(states):
        seen.setdefault(json.dumps(state, sort_keys=True, default=repr), (rank, state))
    return list(seen.values())


def _following(
    samplers: Sequence[Any], run: list[list[list[Any]]], configuration: Configuration, where: str
) -> None:
    """After the resumed epoch, each following epoch equals the uninterrupted run's."""
    if not all(callable(getattr(s, "set_epoch", None)) for s in samplers):
        return
    for offset in range(1, FOLLOWING_EPOCHS + 1):
        epoch = configuration.epoch + offset
        for rank, sampler in enumerate(samplers):
            set_epoch(sampler, epoch)
            got = iterate(sampler)
            if got != run[offset][rank]:
                raise Failure(
                    rank,
                    epoch,
                    f"{where}: epoch {epoch} yields {plural(len(got), 'item', 'items')}, not "
                    f"the uninterrupted run's {len(run[offset][rank])}"
                    + (" (a different order)" if len(got) == len(run[offset][rank]) else ""),
                    "after a resume every later epoch repeats, skips or reorders data",
                )


@guarantee(
    "resumes-same-world-size",
    "a state saved at any step, including the first and the last of a share and the epoch's "
    "end, by any rank, loaded into fresh samplers of the same arguments, yields exactly the "
    "rest of the epoch on every rank, then the uninterrupted epochs; so does a second resume",
)
def resumes_same_world_size(factory: Factory, configuration: Configuration) -> None:
    """See the module docstring; on the configuration's world size."""
    world = configuration.world_size
    state_of(build(factory, configuration, 0))  # unsupported before any work
    run = _epochs(factory, configuration, world)
    counts = [len(items) for items in run[0]]
    for step, where in checkpoints(counts, configuration.taken).items():
        job = Lockstep(_job(factory, configuration, world, None))
        job.step(step)
        resumed_jobs = []
        for owner, state in _distinct(job.states()):
            said = f"saved {where} ({step} steps), rank {owner}'s state"
            details = {"taken": step, "state of rank": owner}
            resumed = _job(factory, configuration, world, state)
            for rank, sampler in enumerate(resumed):
                done = min(step, counts[rank])
                _check_rest(
                    run[0][rank], done, iterate(sampler), rank, configuration, said, details
                )
            resumed_jobs.append((resumed, state, said, details))
        # Every rank's state resumed the epoch; then, from the first: the following epochs
        # and a second interruption.
        resumed, state, said, details = resumed_jobs[0]
        _following(resumed, run, configuration, f"{said}, resumed")
        _second_resume(factory, configuration, state, run, counts, step, said, details)


def _check_rest(
    whole: list[Any],
    done: int,
    rest: list[Any],
    rank: int,
    configuration: Configuration,
    said: str,
    details: dict[str, Any],
) -> None:
    expected = whole[done:]
    if rest != expected:
        raise Failure(
            rank,
            configuration.epoch,
            f"{said}: rank {rank} yields {plural(len(rest), 'item', 'items')}, not the "
            f"remaining {len(expected)}"
            + (" (a different order)" if len(rest) == len(expected) else ""),
            "a run resumed from a checkpoint skips or repeats data of the interrupted epoch"
            + (" (the epoch was over: it is replayed)" if not expected and rest else ""),
            details,
        )


def _second_resume(
    factory: Factory,
    configuration: Configuration,
    state: Any,
    run: list[list[list[Any]]],
    counts: list[int],
    step: int,
    said: str,
    details: dict[str, Any],
) -> None:
    """Resumed from ``state``, the job stops again halfway through the rest and resumes."""
    world = configuration.world_size
    more = max(0, max(counts) - step) // 2
    middle = Lockstep(_job(factory, configuration, world, state))
    middle.step(more)
    again = middle.states()[0]
    resumed = _job(factory, configuration, world, again)
    twice = f"{said}, resumed, saved again {more} steps later and resumed"
    for rank, sampler in enumerate(resumed):
        done = min(step + more, counts[rank])
        _check_rest(
            run[0][rank],
            done,
            iterate(sampler),
            rank,
            configuration,
            twice,
            {**details, "second": more},
        )


def tail_allowance(
    factory: Factory, configuration: Configuration, world: int, batched: bool
) -> tuple[int, int]:
    """How many indices the sampler's own tail policy repeats and drops at most, on
    ``world`` ranks: ``unit - 1`` each (unit = ``world`` times the batch size for a batch
    sampler) when an uninterrupted epoch that does not divide evenly shows it, else 0.

    ``batched``: whether the sampler yields batches, from :func:`yields_batches` (never
    from an epoch that yields nothing, which would make a batch sampler that drops its
    tail look like an index sampler, allowed ``world - 1`` instead of ``unit - 1``)."""
    unit = world * (configuration.batch_size if batched else 1)
    if unit == 1:
        return 0, 0
    size = configuration.dataset_size + (1 - configuration.dataset_size) % unit
    probe = replace(configuration, dataset_size=size, world_size=world)
    counts = Counter(i for items in epoch_outputs(factory, probe) for i in indices(items))
    repeats = any(n > 1 for n in counts.values())
    drops = len(counts) < size
    return (unit - 1) * repeats, (unit - 1) * drops


@guarantee(
    "resumes-other-world-size",
    "a state saved at any step (as for resumes-same-world-size) by any rank and loaded into "
    "samplers of another world size, then resumed once more on a third, loses nothing of the "
    "epoch and repeats nothing beyond the sampler's own tail policy; later epochs are the "
    "uninterrupted run's on the new world size",
)
def resumes_other_world_size(factory: Factory, configuration: Configuration) -> None:
    """See the module docstring; saved on the configuration's world size ``W``, resumed on
    ``W'`` (``other_world_size``), stopped halfway and resumed again on ``W``."""
    world, other = configuration.world_size, configuration.resumed_world_size
    state_of(build(factory, configuration, 0))  # unsupported before any work
    run = _epochs(factory, configuration, world)
    counts = [len(items) for items in run[0]]
    batched = yields_batches(factory, configuration, run[0])
    may_repeat, may_drop = (
        max(pair)
        for pair in zip(
            tail_allowance(factory, configuration, world, batched),
            tail_allowance(factory, configuration, other, batched),
            strict=True,
        )
    )
    for step, where in checkpoints(counts, configuration.taken).items():
        job = Lockstep(_job(factory, configuration, world, None))
        job.step(step)
        for owner, state in _distinct(job.states()):
            middle = Lockstep(_job(factory, configuration, other, state))
            more = max((len(s) for s in middle.samplers), default=0) // 2
            middle.step(more)
            resumed = _job(factory, configuration, world, middle.states()[0])
            rest = [iterate(sampler) for sampler in resumed]
            seen = Counter(i for part in (*job.taken, *middle.taken, *rest) for i in indices(part))
            lost = [i for i in range(configuration.dataset_size) if seen[i] == 0]
            repeated = sum(n - 1 for n in seen.values() if n > 1)
            loses, repeats = len(lost) > may_drop, repeated > may_repeat
            said = (
                f"saved {where} ({step} steps) on {plural(world, 'rank', 'ranks')}, rank "
                f"{owner}'s state, resumed on {other}, saved again {more} steps later and "
                f"resumed on {world}"
            )
            if loses or repeats:
                raise Failure(
                    owner,
                    configuration.epoch,
                    f"{said}: {plural(len(lost), 'index', 'indices')} lost, {repeated} repeated "
                    f"(its tail policy accounts for at most {may_drop} lost and {may_repeat} "
                    "repeated)",
                    "resuming on another world size "
                    + (f"never shows {samples(len(lost))}" if loses else "")
                    + (" and " if loses and repeats else "")
                    + (f"shows {samples(repeated)} twice" if repeats else "")
                    + " of the interrupted epoch",
                    {"taken": step, "other_world_size": other, "state of rank": owner},
                )
            _following(resumed, run, configuration, said)
