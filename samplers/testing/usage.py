"""The guarantees about how a sampler is used around the loop, not only by it.

A checkpoint or monitoring thread reads the state while the loop iterates; a callback
peeks with a second ``iter()`` in the middle of an epoch; a flag is written
as an attribute with a numpy or 0-d tensor bool, or ``0``/``1``. Each check drives the
factory's samplers the way a user's code does and compares with the plain run. The
guarantees through loaders with worker processes are :mod:`samplers.testing.loaders`'.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from samplers.testing.registry import guarantee
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    Lockstep,
    Unsupported,
    build,
    item,
    iterate,
    load,
    plural,
    set_epoch,
    state_of,
)

__all__ = ["bool_like_attributes", "second_iterator", "state_read_concurrently"]

#: Items at most a concurrent-read check iterates (the reads race the first ones).
CONCURRENT_ITEMS = 2000


def _key(state: Any) -> str:
    return json.dumps(state, sort_keys=True, default=repr)


def _quiet_state(sampler: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return copy.deepcopy(sampler.state_dict())


@guarantee(
    "state-read-concurrently",
    "a state read from another thread while the loop iterates (a checkpoint or monitoring "
    "thread) is one the loop's iterator reached during the read, and the loop never fails",
)
def state_read_concurrently(factory: Factory, configuration: Configuration) -> None:
    """Rank 0 iterates (up to :data:`CONCURRENT_ITEMS` items) while a thread reads its
    state without pause; each read must equal the state after ``k`` items, for a ``k``
    between what the loop had received when the read began and one more than it had
    received when the read ended (the item being handed out)."""
    reference = build(factory, configuration, 0)
    state_of(reference)  # unsupported before any work
    set_epoch(reference, configuration.epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        states = [_key(reference.state_dict())]
        for _ in zip(range(CONCURRENT_ITEMS), iter(reference), strict=False):
            states.append(_key(reference.state_dict()))
        # Once the loop's next() met the end, the state may also say so.
        ended = _key(reference.state_dict()) if len(states) <= CONCURRENT_ITEMS else None
    sampler = build(factory, configuration, 0)
    set_epoch(sampler, configuration.epoch)
    received = [0]
    done = threading.Event()
    reads: list[tuple[int, int, str]] = []
    errors: list[BaseException] = []

    def read() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while not done.is_set():
                before = received[0]
                try:
                    state = _key(sampler.state_dict())
                except Exception as error:  # reported below
                    errors.append(error)
                    return
                reads.append((before, received[0], state))
                time.sleep(0)

    reader = threading.Thread(target=read, daemon=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iterator = iter(sampler)
        reader.start()
        try:
            for _ in zip(range(CONCURRENT_ITEMS), iterator, strict=False):
                received[0] += 1
                time.sleep(0)  # let the reader in between items
        except Exception as error:
            raise Failure(
                0,
                configuration.epoch,
                f"the loop failed while another thread read the state: "
                f"{type(error).__name__}: {error}",
                "a checkpoint or monitoring thread kills the training loop",
            ) from error
        finally:
            done.set()
            reader.join(timeout=60)
    if errors:
        raised = errors[0]
        raise Failure(
            0,
            configuration.epoch,
            f"state_dict() raised while the loop iterated: {type(raised).__name__}: {raised}",
            "a checkpoint taken from another thread fails",
        )
    for before, after, state in reads:
        allowed = states[before : after + 2]
        if ended is not None and after + 1 >= len(states):
            allowed.append(ended)  # the loop received everything: its iterator ended
        if state not in allowed:
            matches = [k for k, known in enumerate(states) if known == state]
            said = f"the state after {matches[0]} items" if matches else "no state of the loop"
            raise Failure(
                0,
                configuration.epoch,
                f"a state read from another thread while the loop had received {before} to "
                f"{after} items is {said}",
                "a checkpoint taken from another thread resumes at the wrong place: it skips "
                "or repeats data",
                {"received": before},
            )


@guarantee(
    "second-iterator",
    "a second iter() in the middle of an epoch (a callback peeking at the order) leaves the "
    "state at the loop's progress, or makes state_dict() raise; it never reports the "
    "peek's position",
)
def second_iterator(factory: Factory, configuration: Configuration) -> None:
    """Every rank takes ``taken`` steps (at least one, at most all but one of the shortest
    share), peeks with ``next(iter(sampler))``, and saves; each state, loaded into fresh
    samplers, must yield exactly the rest of the loop's epoch on every rank."""
    world = configuration.world_size
    state_of(build(factory, configuration, 0))  # unsupported before any work
    whole = _fresh_epoch(factory, configuration, world)
    shortest = min(len(items) for items in whole)
    if shortest < 2:
        return  # no step that leaves something to peek past
    steps = 1 + (configuration.taken - 1) % (shortest - 1)  # itself when in [1, shortest)
    job = Lockstep(_ranks(factory, configuration, world))
    job.step(steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sampler in job.samplers:
            next(iter(sampler), None)  # the callback's peek
    try:
        states = job.states()
    except Exception:
        return  # refuses the ambiguous state: allowed
    for owner, state in enumerate(states):
        resumed = _ranks(factory, configuration, world)
        for sampler in resumed:
            load(sampler, state)
            set_epoch(sampler, configuration.epoch)
        for rank, sampler in enumerate(resumed):
            rest, expected = iterate(sampler), whole[rank][steps:]
            if rest != expected:
                raise Failure(
                    rank,
                    configuration.epoch,
                    f"after {plural(steps, 'step', 'steps')} and a peek with "
                    f"next(iter(sampler)), rank {owner}'s state resumes rank {rank} with "
                    f"{plural(len(rest), 'item', 'items')}, not the loop's remaining "
                    f"{len(expected)}",
                    "a callback that peeks at the sampler makes the checkpoint skip or repeat data",
                    {"taken": steps, "state of rank": owner},
                )


def _ranks(factory: Factory, configuration: Configuration, world: int) -> list[Any]:
    samplers = [build(factory, configuration, rank, world) for rank in range(world)]
    for sampler in samplers:
        set_epoch(sampler, configuration.epoch)
    return samplers


def _fresh_epoch(factory: Factory, configuration: Configuration, world: int) -> list[list[Any]]:
    return [iterate(sampler) for sampler in _ranks(factory, configuration, world)]


#: Bool-likes of each truth value that a flag written as an attribute may be.
BOOL_LIKES: dict[bool, tuple[Callable[[], Any], ...]] = {
    True: (lambda: np.True_, lambda: 1, lambda: torch.tensor(True)),
    False: (lambda: np.False_, lambda: 0, lambda: torch.tensor(False)),
}
#: The flags checked, when a sampler has them as bool attributes.
FLAGS = ("shuffle", "drop_last", "auto_epoch")


def _flags(sampler: Any) -> list[str]:
    """The flags the sampler has as bool attributes that can be written."""
    names = []
    for name in FLAGS:
        value = getattr(sampler, name, None)
        if isinstance(value, bool):
            try:
                setattr(sampler, name, value)
            except AttributeError:  # a read-only property
                continue
            names.append(name)
    return names


def _written(factory: Factory, configuration: Configuration, names: Sequence[str], how: int) -> Any:
    sampler = build(factory, configuration, 0)
    for name in names:
        setattr(sampler, name, BOOL_LIKES[bool(getattr(sampler, name))][how]())
    return sampler


def _two_epochs(sampler: Any, configuration: Configuration, steps: int) -> tuple[Any, ...]:
    """Two passes without set_epoch, then one with it, the state ``steps`` into it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        passes = [iterate(sampler), iterate(sampler)]
        set_epoch(sampler, configuration.epoch + 5)
        iterator = iter(sampler)
        head = [item(value) for _, value in zip(range(steps), iterator, strict=False)]
        state = _quiet_state(sampler)
        tail = [item(value) for value in iterator]
    return (*passes, head, tail, state)


@guarantee(
    "bool-like-attributes",
    "a flag (shuffle, drop_last, auto_epoch) written as an attribute with a numpy or 0-d "
    "tensor bool, or 0/1, of the same truth value, changes nothing: what each epoch yields, "
    "the epochs' succession and the state are those of the plain bool, and the state loads",
)
def bool_like_attributes(factory: Factory, configuration: Configuration) -> None:
    """Rank 0 with each flag it has as a bool attribute rewritten as each bool-like of the
    same value: two passes without ``set_epoch``, then ``set_epoch`` and a state part-way,
    compared with the plain sampler; the state is loaded into a sampler written alike."""
    plain = build(factory, configuration, 0)
    names = _flags(plain)
    if not names:
        raise Unsupported("the sampler has no bool attribute shuffle, drop_last or auto_epoch")
    has_state = callable(getattr(plain, "state_dict", None)) and callable(
        getattr(plain, "load_state_dict", None)
    )
    steps = configuration.taken % 7
    expected = _two_epochs(plain, configuration, steps) if has_state else None
    for how, kind in enumerate(("a numpy bool", "0 or 1", "a 0-d tensor")):
        sampler = _written(factory, configuration, names, how)
        try:
            if has_state:
                got = _two_epochs(sampler, configuration, steps)
            else:
                got = (iterate(sampler), iterate(sampler))
                expected = (iterate(plain), iterate(plain))
        except Exception as error:
            raise Failure(
                0,
                configuration.epoch,
                f"with {', '.join(names)} written as {kind}: {type(error).__name__}: {error}",
                "a flag written as an accepted bool-like breaks the sampler",
            ) from error
        assert expected is not None
        parts = (
            "the first pass",
            "the second pass without set_epoch",
            "the items before the state",
            "the items after the state",
            "the state",
        )
        for part, mine, theirs in zip(parts, got, expected, strict=False):
            if _key(mine) != _key(theirs):
                raise Failure(
                    0,
                    configuration.epoch,
                    f"with {', '.join(names)} written as {kind} of the same value, {part} "
                    "differs from the plain bool's",
                    "a flag written as numpy.True_ or 1 silently changes the order, the "
                    "epochs or the checkpoint",
                    {"flags": ", ".join(names)},
                )
        if has_state:
            _reload(factory, configuration, names, how, kind, got)


def _reload(
    factory: Factory,
    configuration: Configuration,
    names: Sequence[str],
    how: int,
    kind: str,
    got: tuple[Any, ...],
) -> None:
    resumed = _written(factory, configuration, names, how)
    try:
        load(resumed, got[4])
        set_epoch(resumed, configuration.epoch + 5)
        rest = iterate(resumed)
    except Exception as error:
        raise Failure(
            0,
            configuration.epoch,
            f"with {', '.join(names)} written as {kind}, the sampler refuses its own state: "
            f"{type(error).__name__}: {error}",
            "a checkpoint cannot be resumed",
        ) from error
    if rest != got[3]:
        raise Failure(
            0,
            configuration.epoch,
            f"with {', '.join(names)} written as {kind}, its own state resumes with "
            f"{plural(len(rest), 'item', 'items')}, not the remaining {len(got[3])}",
            "a checkpoint resumes at the wrong place",
        )
