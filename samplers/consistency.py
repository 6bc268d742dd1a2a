"""Ranks that cannot silently disagree: one agreed seed, and an explicit consistency check.

``seed=None`` asks for a seed that is random but the same on every process of the job:
global rank 0 draws it and broadcasts it over the default process group (the idea of
mmengine's ``sync_random_seed``). It is agreed over the whole job, not over the group the
sampler shards over, so that tensor- or context-parallel replicas share the order too.
Without an initialised process group each process would draw its own seed and the ranks
would shard different orders, so :func:`agreed_seed` raises a
:class:`~samplers.checks.SeedTypeError` (a ``TypeError``, the type the stock sampler raises
for ``seed=None``) saying to pass a seed.

:func:`check_consistent` is a collective in which every rank compares the settings that
must agree (dataset length, world size, rank, seed, epoch, shuffle, tail, batch size, ...):

* over the data-parallel ``group``: the settings agree, the samplers' ranks are
  ``0 .. W - 1`` once each, and the world size they use is the group's size ``W``;
* over ``replicas`` (a tensor- or context-parallel group, optional): every member's
  settings are identical, the data-parallel rank included, since replicas must read the
  same samples.

It raises :class:`InconsistentRanksError` on every rank that took part, with the same
message, naming the global ranks that differ and their values. A rank that cannot compute
its settings (its ``len(dataset)`` raises, say) still takes part in every exchange, with its
error instead of its settings, so no rank waits on it: every rank raises
:class:`RankFailedError` at once, naming the failing ranks and their errors (the failing
rank's own error is its ``__cause__``).

Both are collectives: every rank of the group (for ``seed=None``, every process of the job)
must call them at the same point (building the samplers at the same point of the script
does that). With the NCCL backend, set the rank's CUDA device first, as for any object
collective.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.distributed as dist

from samplers import checks, groups

__all__ = [
    "InconsistentRanksError",
    "RankFailedError",
    "agreed_seed",
    "check_consistent",
    "compare_replicas",
    "compare_settings",
]

#: A problem found: (0 for a data-parallel group, 1 for replicas, 2 for the advice; its
#: global ranks; text).
Problem = tuple[int, tuple[int, ...], str]
#: The advice when replicas' samplers shard over more than the data-parallel group.
_SHARD_OVER_DATA_PARALLEL: Problem = (
    2,
    (),
    "build the samplers with group= the data-parallel group (e.g. group=mesh['dp']), so "
    "that replicas share one shard",
)
#: Settings that differ between replicas whose samplers shard over too large a group.
_SHARD = ("rank", "num_replicas")


class InconsistentRanksError(ValueError):
    """Ranks hold different values for settings that must agree."""


class RankFailedError(RuntimeError):
    """A rank could not compute its settings for :func:`check_consistent`."""


#: A rank's failure: (global rank, ``"<type>: <message>"``).
Failure = tuple[int, str]


def _group_active(group: groups.GroupRef) -> bool:
    """Whether a collective over ``group`` can run in this process.

    False for the default group without an initialised process group (there is nothing
    to compare with); a given group needs one, and this process must be its member.
    """
    if not (dist.is_available() and dist.is_initialized()):
        if group.is_default:
            return False
        raise RuntimeError(
            f"group {group} was given, but no process group is initialised in this process"
        )
    if not group.is_default and dist.get_rank(group.process_group) < 0:
        raise ValueError(
            f"this process (global rank {dist.get_rank()}) is not a member of group (global "
            f"ranks {groups.global_ranks(group)}): call it on the group's processes only"
        )
    return True


def seed_or_agreed(value: Any) -> int:
    """A validated seed; ``None`` means one random seed agreed by the whole job."""
    if value is None:
        return agreed_seed()
    return checks.seed(value)


def agreed_seed(group: Any = None) -> int:
    """A random seed in ``[0, 2**63)``, the same on every rank of ``group``.

    The group's first rank draws it and broadcasts it; ``group=None`` (what ``seed=None``
    uses) is the default group, the whole job. Without an initialised process group,
    raises :class:`~samplers.checks.SeedTypeError` saying to pass a seed.
    """
    ref = groups.reference(group)
    if not _group_active(ref):
        raise checks.SeedTypeError(
            "seed=None asks for one random seed agreed by every process, which needs an "
            "initialised process group (torch.distributed.init_process_group); without one "
            "each process would draw its own seed and the ranks would shard different "
            "orders: pass seed=<an integer>, the same on every rank"
        )
    box: list[Any] = [secrets.randbits(63)]
    dist.broadcast_object_list(box, src=groups.global_ranks(ref)[0], group=ref.process_group)
    return int(box[0])


def _differences(
    settings: Sequence[Mapping[str, Any]], ranks: Sequence[int], skip: str
) -> list[str]:
    """``"<key> differs (ranks [..]: value; ...)"`` for each key whose values differ."""
    problems = []
    keys = list(dict.fromkeys(key for entry in settings for key in entry if key != skip))
    for key in keys:
        values = [entry.get(key) for entry in settings]
        if len({repr(value) for value in values}) > 1:
            holders: dict[str, list[int]] = {}
            for rank, value in zip(ranks, values, strict=True):
                holders.setdefault(repr(value), []).append(rank)
            listed = "; ".join(f"ranks {ranks}: {value}" for value, ranks in holders.items())
            problems.append(f"{key} differs ({listed})")
    return problems


def compare_settings(
    settings: Sequence[Mapping[str, Any]], ranks: Sequence[int] | None = None
) -> str | None:
    """Where the data-parallel ranks' settings differ, or None.

    ``settings[i]`` is the settings of the process with global rank ``ranks[i]`` (default
    ``i``), in group-rank order. Besides equal values for every key, the ``rank`` entries
    must be exactly ``0 .. W - 1`` (``W = len(settings)``), one per process, and the
    ``num_replicas`` entries, when they agree, must be ``W``.
    """
    ranks = list(range(len(settings))) if ranks is None else list(ranks)
    size = len(settings)
    problems = _differences(settings, ranks, skip="rank")
    held = [entry.get("rank") for entry in settings]
    whole = [rank for rank in held if isinstance(rank, int) and not isinstance(rank, bool)]
    if any("rank" in entry for entry in settings) and sorted(whole) != list(range(size)):
        problems.append(
            f"the samplers on ranks {ranks} have ranks {held}, expected each of 0..{size - 1} once"
        )
    stated = {repr(entry.get("num_replicas")) for entry in settings if "num_replicas" in entry}
    stated_size = settings[0].get("num_replicas") if settings else None
    if len(stated) == 1 and stated_size != size:
        problem = (
            f"the samplers use num_replicas={stated_size}, but the group they shard over has "
            f"{size} processes (ranks {ranks}): build them with num_replicas={size}, or leave "
            "num_replicas out"
        )
        if (
            isinstance(stated_size, int)
            and not isinstance(stated_size, bool)
            and 0 < stated_size < size
            and size % stated_size == 0
        ):
            # Fewer replicas than processes, a divisor: maybe replicas read the same samples.
            problem += (
                f"; or, if every {size // stated_size} of these processes are replicas that "
                "must read the same samples (tensor or context parallelism), pass their "
                f"data-parallel group of {stated_size} processes as group= to the samplers "
                "and to check_consistent (a DeviceMesh's mesh['dp'], say)"
            )
        problems.append(problem)
    return "; ".join(problems) or None


def compare_replicas(settings: Sequence[Mapping[str, Any]], ranks: Sequence[int]) -> str | None:
    """Where replicas' settings differ (they must be identical, ``rank`` included), or None.

    ``settings[i]`` is the settings of the process with global rank ``ranks[i]``.
    """
    differing = _differences(settings, ranks, skip="")
    if not differing:
        return None
    return f"ranks {list(ranks)} are replicas, which must read the same samples, but " + (
        "; ".join(differing)
    )


def check_consistent(
    settings: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
    group: Any = None,
    *,
    replicas: Any = None,
) -> None:
    """Collective: the samplers of ``group`` and of ``replicas`` agree; else raise on every rank.

    ``settings`` maps names to plain values (what a sampler's ``settings()`` returns), or is
    a function returning them, called here: an exception it raises is exchanged with the
    other ranks instead of the settings, and every rank raises :class:`RankFailedError`
    naming it. ``group`` is the data-parallel group the samplers shard over (``None``: the
    default group), ``replicas`` the group whose members must read the same samples (a
    tensor- or context-parallel group; ``None``: none). Each is ``None``, a
    ``ProcessGroup`` or a 1-D ``DeviceMesh``. Every rank of both groups must call it.
    Without an initialised process group there is nothing to compare with (a function is
    still called, and its exception raised).

    When every data-parallel group meets every replica group in one process (a mesh), the
    problems found anywhere reach every rank, and every rank raises the same
    :class:`InconsistentRanksError`.
    """
    data = groups.reference(group)
    peers = None if replicas is None else groups.reference(replicas)
    if not _group_active(data):
        if peers is not None:
            _group_active(peers)  # a given group without a process group raises
        if callable(settings):
            settings()
        return
    if peers is not None:
        _group_active(peers)
    own: dict[str, Any] | None = None
    error: BaseException | None = None
    failed: list[Failure] = []
    try:
        own = dict(settings() if callable(settings) else settings)
    except Exception as raised:  # exchanged, so that no other rank waits on this one
        error = raised
        failed.append((dist.get_rank(), f"{type(raised).__name__}: {raised}"))
    found: list[Problem] = []
    if peers is not None:
        peer_ranks = tuple(groups.global_ranks(peers))
        exchanged_peers = _gathered((own, failed), peers)
        failed = sorted({item for _, theirs in exchanged_peers for item in theirs})
        if not failed:
            peer_settings = [entry for entry, _ in exchanged_peers]
            problem = compare_replicas(peer_settings, peer_ranks)
            if problem is not None:
                found.append((1, peer_ranks, problem))
            if any(len({repr(entry.get(key)) for entry in peer_settings}) > 1 for key in _SHARD):
                found.append(_SHARD_OVER_DATA_PARALLEL)
    # The data-parallel group compares its settings and learns what its members found
    # among their replicas; the replicas then learn what each data-parallel group found.
    data_ranks = tuple(groups.global_ranks(data))
    exchanged = _gathered((own, found, failed), data)
    failed = sorted({item for _, _, theirs in exchanged for item in theirs})
    if not failed:
        problem = compare_settings([entry for entry, _, _ in exchanged], data_ranks)
        if problem is not None:
            scope = "" if data.is_default else f"over the group of ranks {list(data_ranks)}: "
            found.append((0, data_ranks, scope + problem))
    found += [item for _, theirs, _ in exchanged for item in theirs]
    if peers is not None:
        gathered = _gathered((found, failed), peers)
        found = [item for theirs, _ in gathered for item in theirs]
        failed = sorted({item for _, theirs in gathered for item in theirs})
    if failed:
        listed = "; ".join(f"rank {rank}: {text}" for rank, text in failed)
        raise RankFailedError(
            f"check_consistent: {len(failed)} rank(s) could not compute their sampler "
            f"settings, so none were compared: {listed}"
        ) from error
    problems = sorted(set(found))
    if problems:
        listed = "; ".join(text for _, _, text in problems)
        raise InconsistentRanksError(f"the ranks' samplers disagree: {listed}")


def _gathered(value: Any, group: groups.GroupRef) -> list[Any]:
    """Every member's ``value``, in group-rank order (``all_gather_object``)."""
    process_group = group.process_group
    everyone: list[Any] = [None] * dist.get_world_size(process_group)
    dist.all_gather_object(everyone, value, group=process_group)
    return everyone
