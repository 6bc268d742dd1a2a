"""Exact distributed evaluation: every sample's result exactly once, in dataset order.

A distributed sampler hands each rank its share of the epoch; evaluation produces one
result per sample handed out. :func:`unshard` puts the ranks' results back where they
belong using the sampler's own plan (the same arithmetic that produced the shares), so it
is exact for every tail policy, shuffled or not, for the strided samplers and the batch
sampler alike: padded repeats are dropped, and with ``"drop"`` the samples no rank saw
are ``None``. :func:`gather_unsharded` does the gathering over the process group too.

Results can be any Python objects (a score, a dict of detections, a tensor); only their
count and order matter. That covers metrics that do not decompose per sample (ROC AUC,
COCO-style mAP): compute them once, on the unsharded list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist

from samplers import checks, groups
from samplers.plan import EpochPlan

__all__ = ["Planned", "gather_unsharded", "unshard"]


class Planned(Protocol):
    """Anything with the plan of its epoch: the samplers of this package."""

    def plan(self) -> EpochPlan: ...


def _plan_of(sampler: Planned | EpochPlan) -> EpochPlan:
    """``sampler`` itself, or the plan its results follow: its ``iteration_plan()`` (the
    samplers here: a resumed iteration's plan starts at the loaded position), else
    ``plan()``."""
    if isinstance(sampler, EpochPlan):
        return sampler
    plan = getattr(sampler, "iteration_plan", None)
    if not callable(plan):
        plan = getattr(sampler, "plan", None)
    if not callable(plan):
        raise TypeError(
            "sampler must be one of this package's samplers (with a plan() method) or an "
            f"EpochPlan, got {type(sampler).__name__}"
        )
    planned: EpochPlan = plan()
    return planned


def _sized(value: Any) -> bool:
    """A sequence of results: sized and indexable, not a string or a mapping."""
    return (
        hasattr(value, "__len__")
        and hasattr(value, "__getitem__")
        and not isinstance(value, (str, bytes, Mapping))
    )


def unshard(parts: Sequence[Sequence[Any]], sampler: Planned | EpochPlan) -> list[Any]:
    """Each sample's result exactly once, in dataset order (index ``i`` at ``[i]``).

    ``parts[r]`` holds rank ``r``'s per-sample results in the order rank ``r``'s sampler
    yielded the samples (for the batch sampler: its batches concatenated). For a
    :class:`~samplers.DistributedSamplerWrapper`, whose stream may repeat or skip dataset
    indices, the list is in *stream* order instead: ``len(sampler.sampler)`` results,
    one per position of the wrapped sampler's stream; so for the mixture samplers, whose
    sources are drawn in passes (a sample may come twice in an epoch): ``epoch_length``
    results, one per position of the epoch (``sampler.plan().indices_at(positions)``
    gives each position's ``ConcatDataset`` index, or piece id). ``sampler`` is
    any rank's sampler that yielded the results, or one of the same configuration at that
    epoch and progress (its ``iteration_plan()`` is read; or pass that ``EpochPlan``).
    After a resume the results are those of the resumed iteration: the samples handed out
    before the loaded position hold ``None``, as do samples no rank received (tail
    ``"drop"``). Raises ``TypeError`` naming ``parts`` (or ``parts[r]``)
    when it is not a sequence, and ``ValueError`` when the number of parts is not the
    world size or a part's length is not what its rank was handed.
    """
    plan = _plan_of(sampler)
    world_size = plan.layout.world_size
    size = plan.sizes.dataset_size
    # A stream (a wrapped sampler's, a mixture's) may repeat indices or skip some: its
    # results go back in stream order, one per position, instead of in dataset order.
    by_position = not plan.order.permutes
    if not _sized(parts):
        raise TypeError(
            f"parts must be a sequence of one sequence of results per rank, got "
            f"{type(parts).__name__}"
        )
    for rank, part in enumerate(parts):
        if not _sized(part):
            raise TypeError(
                f"parts[{rank}] must be a sequence of rank {rank}'s results, got "
                f"{type(part).__name__}"
            )
    if len(parts) != world_size:
        raise ValueError(f"parts must hold one sequence per rank ({world_size}), got {len(parts)}")
    results: list[Any] = [None] * size
    for rank, part in enumerate(parts):
        positions = plan.layout.positions(rank)
        if len(part) != positions.numel():
            raise ValueError(
                f"parts[{rank}] must hold one result per sample rank {rank} received "
                f"({positions.numel()}), got {len(part)}"
            )
        inside = positions < size
        if by_position:
            indices = positions[inside].tolist()
        else:
            indices = plan.indices_at(positions[inside]).tolist()
        kept = torch.nonzero(inside).flatten().tolist()
        for index, slot in zip(indices, kept, strict=True):
            results[index] = part[slot]
    return results


def gather_unsharded(
    local_results: Sequence[Any],
    sampler: Planned | EpochPlan,
    dst: int | None = None,
    group: Any = None,
) -> list[Any] | None:
    """Collective: gather every rank's results and :func:`unshard` them.

    ``local_results`` are this rank's per-sample results in the order its sampler yielded
    the samples; they must be picklable. With ``dst=None`` every rank receives the
    unsharded list (``all_gather_object``); otherwise only rank ``dst`` (a rank of
    ``group``) does (``gather_object``) and the others get ``None``. ``group`` (a
    ``ProcessGroup`` or a 1-D ``DeviceMesh``) defaults to the group the sampler shards
    over, so tensor-parallel replicas do not hand in their parts twice. Every rank of the
    group must call it. Each part is placed by the rank of the sampler that yielded it
    (``sampler.rank``, sent along), not by its process's rank in ``group``; a group whose
    size is not the sampler's ``num_replicas``, or whose samplers' ranks are not each of
    ``0 .. W - 1`` once, raises ``ValueError`` naming ``group`` on every rank that
    receives the results (after the collective: no rank waits on one that raised).
    """
    if group is None:
        group = getattr(sampler, "group", None)
    group = groups.reference(group).process_group
    world_size = dist.get_world_size(group)
    if not _sized(local_results):
        raise TypeError(
            f"local_results must be a sequence of this rank's results, got "
            f"{type(local_results).__name__}"
        )
    if dst is not None:
        dst = checks.as_int("dst", dst)
        if not 0 <= dst < world_size:
            raise ValueError(f"dst must be a rank of the group, 0 to {world_size - 1}, got {dst}")
    plan = _plan_of(sampler)
    rank = getattr(sampler, "rank", None)  # an EpochPlan has none: the group's rank
    rank = dist.get_rank(group) if rank is None else checks.as_int("sampler.rank", rank)
    own = (rank, list(local_results))
    if dst is None:
        everyone: list[Any] = [None] * world_size
        dist.all_gather_object(everyone, own, group=group)
        return unshard(_by_sampler_rank(everyone, plan), plan)
    if dist.get_rank(group) == dst:
        received: list[Any] | None = [None] * world_size
    else:
        received = None
    destination = dist.get_global_rank(group, dst) if group is not None else dst
    dist.gather_object(own, received, dst=destination, group=group)
    return None if received is None else unshard(_by_sampler_rank(received, plan), plan)


def _by_sampler_rank(received: list[Any], plan: EpochPlan) -> list[Any]:
    """The parts of ``(sampler rank, results)`` pairs, in sampler-rank order, or
    ``ValueError`` naming ``group`` when the group is not the one the samplers shard over
    (checked after the collective, so that no rank waits on one that raised)."""
    replicas = plan.layout.world_size
    if replicas != len(received):
        raise ValueError(
            f"group has {len(received)} processes but the sampler shards over "
            f"num_replicas={replicas}: pass the group it shards over (its group=, or the "
            "data-parallel group, a DeviceMesh's mesh['dp'], say)"
        )
    ranks = [rank for rank, _ in received]
    if sorted(ranks) != list(range(replicas)):
        raise ValueError(
            f"group holds samplers of ranks {ranks}, in the group's order; expected each of "
            f"0..{replicas - 1} once: gather over the group the samplers shard over (its "
            "group=, or the data-parallel group)"
        )
    parts: list[Any] = [None] * len(received)
    for rank, results in received:
        parts[rank] = results
    return parts
