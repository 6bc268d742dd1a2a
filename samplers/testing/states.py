"""The guarantees about states the sampler did not write just now: impossible ones, which
must be refused, and old-format ones, which must resume as the current format does.

Both run the configuration's ranks in lockstep through the epoch (as under DDP) and read
their states at every step, before the first and after every rank's loop ended.

* ``refuses-impossible-states`` mutates a state the run wrote into one no ``state_dict()``
  writes: a progress field (a top-level integer that changes as the epoch goes) set below
  zero or past anything the epoch reached, or a flag that changes as the epoch goes (say,
  ``finished``) set to its end-of-epoch value on the first state (when no state of the run
  has that combination). Loading such a state into a fresh sampler must raise: accepting
  it silently skips or replays data.
* ``loads-version-1-states`` applies to samplers built on :class:`samplers.core.SamplerCore`
  (their states are of :data:`samplers.state.STATE_VERSION`): at each step, the state format
  version 1 wrote for the same progress (:func:`version_1_state`, per rank) must resume
  exactly as the current state does, on the same and on another world size, with the usual
  loop (``set_epoch`` of the saved epoch, then of the next).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from samplers.state import STATE_VERSION
from samplers.testing.registry import guarantee
from samplers.testing.resumes import checkpoints
from samplers.testing.running import (
    Configuration,
    Factory,
    Failure,
    Lockstep,
    Unsupported,
    build,
    iterate,
    load,
    set_epoch,
    state_of,
)

__all__ = ["loads_version_1_states", "refuses_impossible_states", "version_1_state"]


def _run_states(
    factory: Factory, configuration: Configuration
) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(steps, [rank] -> the state)`` at the resume guarantees' checkpoints (before
    the first step, the configuration's step, the end of the shortest share, the epoch's
    last step, after every loop ended; see :func:`samplers.testing.resumes.checkpoints`)."""
    world = configuration.world_size
    samplers = [build(factory, configuration, rank) for rank in range(world)]
    state_of(samplers[0])  # unsupported before any work
    counts = []
    for sampler in samplers:
        set_epoch(sampler, configuration.epoch)
        counts.append(len(iterate(sampler)))
    samplers = [build(factory, configuration, rank) for rank in range(world)]
    for sampler in samplers:
        set_epoch(sampler, configuration.epoch)
    job = Lockstep(samplers)
    found, done = [], 0
    for step in checkpoints(counts, configuration.taken):
        job.step(step - done)
        done = step
        found.append((step, job.states()))
    return found


def _mutations(states: list[list[dict[str, Any]]], configuration: Configuration) -> list[Any]:
    """``(field, value, state)``: states no ``state_dict()`` of the run wrote."""
    written = [state for ranks in states for state in ranks]
    if not all(isinstance(state, dict) for state in written):
        raise Unsupported("its state is not a dict")
    seen = {json.dumps(state, sort_keys=True, default=repr) for state in written}
    first, last = states[0][0], states[-1][0]
    found = []
    for name, value in first.items():
        values = [state.get(name) for state in written]
        counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if isinstance(value, bool):
            if last.get(name) != value and isinstance(last.get(name), bool):
                found.append((name, last[name], {**first, name: last[name]}))
        elif isinstance(value, int) and len(counts) == len(values):
            if len(set(counts)) == 1:
                continue  # not progress: a setting
            past = max(counts) + configuration.dataset_size + 1
            found.append((name, -1, {**first, name: -1}))
            found.append((name, past, {**last, name: past}))
    return [m for m in found if json.dumps(m[2], sort_keys=True, default=repr) not in seen]


@guarantee(
    "refuses-impossible-states",
    "a state no state_dict() writes (a progress field below zero or past the epoch, a flag "
    "such as 'finished' on the first step's state) is refused by load_state_dict",
)
def refuses_impossible_states(factory: Factory, configuration: Configuration) -> None:
    """See the module docstring."""
    states = [ranks for _, ranks in _run_states(factory, configuration)]
    for name, value, state in _mutations(states, configuration):
        sampler = build(factory, configuration, 0)
        try:
            load(sampler, state)
        except Exception:
            continue
        raise Failure(
            0,
            configuration.epoch,
            f"load_state_dict accepted a state no state_dict() writes: {name}={value!r} "
            f"(the epoch's states have {name} from "
            f"{min(s[name] for ranks in states for s in ranks)!r} to "
            f"{max(s[name] for ranks in states for s in ranks)!r}; state {state})",
            "a corrupted or hand-edited checkpoint resumes silently, skipping or replaying data",
            {"field": name, "value": value},
        )


def version_1_state(sampler: Any, state: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """The state format version 1 wrote for ``rank`` at the progress of ``state`` (a
    current state of ``sampler``'s epoch, iterated from its start), or ``None`` when
    version 1 could not say it (a layout it did not have)."""
    from samplers.plan import Batched, Strided

    if state.get("version") != STATE_VERSION or not hasattr(sampler, "_plan"):
        return None
    layout = sampler._plan(0).layout
    if not isinstance(layout, (Strided, Batched)):
        return None
    batch_size = layout.batch_size if isinstance(layout, Batched) else None
    common = {
        "version": 1,
        "sampler": state["sampler"],
        "epoch": state["epoch"],
        "seed": state["seed"],
        "shuffle": state["shuffle"],
        "permutation": state["permutation"],
        "tail": layout.tail if isinstance(layout, Batched) else sampler.tail,
        "dataset_length": state["dataset_length"],
        "world_size": layout.world_size,
        "rank": rank,
        "batch_size": batch_size,
        "start": 0,
        "stop": layout.stop,
    }
    if state["finished"]:
        # Version 1 wrote an ended epoch as a fresh iteration of the epoch that had run.
        return {**common, "last_epoch": state["epoch"], "taken": 0}
    low, high = 0, layout.stop + 1  # position_after is non-decreasing: bisect
    while low < high:
        middle = (low + high) // 2
        if layout.position_after(middle) >= state["position"]:
            high = middle
        else:
            low = middle + 1
    steps = low
    if layout.position_after(steps) != state["position"]:
        return None
    taken = min(steps, layout.count(rank))
    return {**common, "last_epoch": state["epoch"] if taken else None, "taken": taken}


def _resumed(
    factory: Factory, configuration: Configuration, world: int, state: Any
) -> list[list[list[Any]]]:
    """The usual loop on ``world`` fresh ranks after loading ``state``: the saved epoch,
    then the next, per rank."""
    samplers = [build(factory, configuration, rank, world) for rank in range(world)]
    for sampler in samplers:
        load(sampler, state)
    passes = []
    for offset in (0, 1):
        for sampler in samplers:
            set_epoch(sampler, state["epoch"] + offset)
        passes.append([iterate(sampler) for sampler in samplers])
    return passes


@guarantee(
    "loads-version-1-states",
    "a state of format version 1 (dsampler's first format) resumes as the state the "
    "current format writes at the same step, on the same and another world size, "
    "mid-epoch and at the epoch's end",
)
def loads_version_1_states(factory: Factory, configuration: Configuration) -> None:
    """See the module docstring."""
    sampler = build(factory, configuration, 0)
    if not hasattr(sampler, "_plan") or state_of(sampler).get("version") != STATE_VERSION:
        raise Unsupported("its states are not dsampler states of the current format")
    states = _run_states(factory, configuration)
    worlds: Sequence[int] = sorted({configuration.world_size, configuration.resumed_world_size})
    checked: set[str] = set()
    for step, ranks in states:
        for rank, state in enumerate(ranks):
            old = version_1_state(sampler, copy.deepcopy(state), rank)
            key = json.dumps({**(old or {}), "rank": None}, sort_keys=True)
            if old is None or key in checked:
                continue  # the same state but for the rank: it resumes alike
            checked.add(key)
            for world in worlds:
                expected = _resumed(factory, configuration, world, state)
                got = _resumed(factory, configuration, world, old)
                if got != expected:
                    which = "the saved epoch" if got[0] != expected[0] else "the next epoch"
                    raise Failure(
                        rank,
                        configuration.epoch,
                        f"rank {rank}'s version-1 state after {step} steps "
                        f"({'the epoch ended' if state['finished'] else 'mid-epoch'}), "
                        f"resumed on {world} ranks, differs in {which} from the current "
                        f"state at that step ({state})",
                        "a checkpoint written by dsampler's first release replays or skips "
                        "data when resumed",
                        {"steps saved after": step, "state of rank": rank, "world": world},
                    )
