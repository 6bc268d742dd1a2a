"""Ranks that cannot silently disagree: one agreed seed, and an explicit consistency check.

``seed=None`` asks for a seed that is random but the same on every rank: rank 0 draws it
and broadcasts it over the process group (the idea of mmengine's ``sync_random_seed``);
without a process group it is simply random. :func:`check_consistent` is a collective in
which every rank compares the settings that must agree (dataset length, world size, seed,
epoch, shuffle, tail, batch size, ...) and raises on every rank, naming the ranks that
differ and their values.

Both are collectives: every rank of the group must call them at the same point (building
the samplers at the same point of the script does that). With the NCCL backend, set the
rank's CUDA device first, as for any object collective.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

__all__ = ["InconsistentRanksError", "agreed_seed", "check_consistent", "compare_settings"]


class InconsistentRanksError(ValueError):
    """Ranks hold different values for settings that must agree."""


def _group_active(group: Any) -> bool:
    return dist.is_available() and dist.is_initialized()


def agreed_seed(group: Any = None) -> int:
    """A random seed in ``[0, 2**63)``, the same on every rank of ``group``.

    Rank 0 of the group draws it and broadcasts it; without an initialised process
    group, this process's own random seed.
    """
    seed = secrets.randbits(63)
    if not _group_active(group):
        return seed
    box: list[Any] = [seed]
    source = dist.get_global_rank(group, 0) if group is not None else 0
    dist.broadcast_object_list(box, src=source, group=group)
    return int(box[0])


def compare_settings(settings: list[Mapping[str, Any]]) -> str | None:
    """Where the ranks' settings differ (``settings[r]`` is rank ``r``'s), or None.

    Besides equal values for every key, the ``rank`` entries must be exactly
    ``0 .. W - 1``, one per process.
    """
    problems = []
    keys = list(dict.fromkeys(key for entry in settings for key in entry if key != "rank"))
    for key in keys:
        values = [entry.get(key) for entry in settings]
        if len({repr(value) for value in values}) > 1:
            groups: dict[str, list[int]] = {}
            for process, value in enumerate(values):
                groups.setdefault(repr(value), []).append(process)
            listed = "; ".join(f"ranks {ranks}: {value}" for value, ranks in groups.items())
            problems.append(f"{key} differs ({listed})")
    ranks = [entry.get("rank") for entry in settings]
    whole = all(isinstance(rank, int) for rank in ranks)
    if any("rank" in entry for entry in settings) and (
        not whole or sorted(ranks) != list(range(len(settings)))
    ):
        problems.append(
            f"the samplers' ranks by process are {ranks}, expected each of "
            f"0..{len(settings) - 1} once"
        )
    return "; ".join(problems) or None


def check_consistent(settings: Mapping[str, Any], group: Any = None) -> None:
    """Collective: every rank's ``settings`` must agree; else raise on every rank.

    ``settings`` maps names to plain values (what a sampler's ``settings()`` returns).
    Without an initialised process group there is nothing to compare with.
    """
    if not _group_active(group):
        return
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, dict(settings), group=group)
    problem = compare_settings(gathered)
    if problem is not None:
        raise InconsistentRanksError(f"the ranks' samplers disagree: {problem}")
