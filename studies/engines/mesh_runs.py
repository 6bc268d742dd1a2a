"""Data parallelism x tensor parallelism in real processes: what each rank of a mesh reads.

:func:`measure` starts 4 gloo ranks on 127.0.0.1 (:mod:`studies.engines.local_ranks`),
arranges them as a 2 x 2 ``DeviceMesh`` on CPU with dimensions ``("dp", "tp")``, and on
every rank builds a ``DistributedSampler`` the way each :data:`VARIANTS` entry says: with
the defaults (world size and rank of the whole job, the common mistake) or with
``group=mesh["dp"]``. Each rank reads its epochs through a ``DataLoader`` and calls
``check_consistent()`` and ``check_consistent(replicas=mesh["tp"])``. Then it saves a
checkpoint part-way through an epoch (``group=mesh["dp"]``, ``tail="uneven"``), and a
second launch of 2 ranks, a 1 x 2 mesh (one data-parallel rank, the same tensor-parallel
size), loads global rank 0's state and reads the rest of that epoch.

Every table is tidy, one row per rank and what it did; :mod:`studies.findings.mesh_sharding`
reduces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch.distributed as dist
from torch.utils.data import DataLoader

from samplers import DistributedSampler, InconsistentRanksError
from samplers.options import Tail
from studies.core.simulate import IndexDataset
from studies.engines.local_ranks import DEFAULT_TIMEOUT, launch

__all__ = [
    "CALLS",
    "CHECK_COLUMNS",
    "READ_COLUMNS",
    "RESUME_COLUMNS",
    "VARIANTS",
    "Measured",
    "MeshRun",
    "measure",
    "observe_on_rank",
    "resume_on_rank",
]

#: The tail policy of the resumed sampler.
RESUME_TAIL: Tail = "uneven"

#: How the samplers are built: label -> (shard over mesh["dp"], seed). ``None`` seeds are
#: agreed over the whole job.
VARIANTS: dict[str, tuple[bool, int | None]] = {
    "defaults": (False, 0),
    'group=mesh["dp"]': (True, 0),
    'group=mesh["dp"], seed=None': (True, None),
}
#: The consistency checks every rank calls: label -> whether replicas=mesh["tp"] is passed.
CALLS: dict[str, bool] = {
    "check_consistent()": False,
    'check_consistent(replicas=mesh["tp"])': True,
}
#: One row per (variant, epoch, global rank): the samples that rank's DataLoader yielded.
READ_COLUMNS = ("variant", "num_replicas", "epoch", "global rank", "dp", "tp", "samples")
#: One row per (variant, call, global rank): the error message, or None if it passed.
CHECK_COLUMNS = ("variant", "call", "global rank", "raised", "message")
#: One row per (phase, global rank): the samples read before the save (with the state it
#: saved) or after the load (state None).
RESUME_COLUMNS = ("phase", "mesh", "global rank", "dp", "tp", "samples", "state")


@dataclass(frozen=True)
class MeshRun:
    """The configuration: mesh shapes, dataset, batches, epochs and where to checkpoint.

    ``mesh`` is the (data-parallel, tensor-parallel) shape of the first launch,
    ``resumed_mesh`` that of the launch that loads the checkpoint. The checkpoint is taken
    in epoch ``resume_epoch`` after ``resume_steps`` DataLoader steps.
    """

    mesh: tuple[int, int] = (2, 2)
    resumed_mesh: tuple[int, int] = (1, 2)
    dataset_size: int = 20
    batch_size: int = 2
    epochs: int = 2
    resume_epoch: int = 1
    resume_steps: int = 2

    def __post_init__(self) -> None:
        if self.mesh[1] != self.resumed_mesh[1]:
            raise ValueError(
                f"the tensor-parallel size must stay fixed across the resume, got mesh="
                f"{self.mesh} and resumed_mesh={self.resumed_mesh}"
            )


@dataclass(frozen=True)
class Measured:
    """The tidy tables of one :func:`measure`."""

    run: MeshRun
    reads: pd.DataFrame = field(repr=False)
    checks: pd.DataFrame = field(repr=False)
    resume: pd.DataFrame = field(repr=False)


def measure(run: MeshRun | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> Measured:
    """Run ``run`` (default :class:`MeshRun`) in real processes: two launches."""
    run = MeshRun() if run is None else run
    first = launch(observe_on_rank, run, run.mesh[0] * run.mesh[1], timeout=timeout)
    state = first[0]["saved"]["state"]
    size = run.resumed_mesh[0] * run.resumed_mesh[1]
    resumed = launch(resume_on_rank, (run, state), size, timeout=timeout)
    saves = [result["saved"] for result in first]
    return Measured(
        run,
        pd.DataFrame([row for result in first for row in result["reads"]], columns=READ_COLUMNS),
        pd.DataFrame([row for result in first for row in result["checks"]], columns=CHECK_COLUMNS),
        pd.DataFrame(saves + resumed, columns=RESUME_COLUMNS),
    )


def _mesh(shape: tuple[int, int]) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))


def _where(mesh: Any) -> dict[str, int]:
    dp, tp = mesh.get_coordinate()
    return {"global rank": dist.get_rank(), "dp": int(dp), "tp": int(tp)}


def _resumable(run: MeshRun, mesh: Any) -> DistributedSampler[int]:
    """The sampler the resume uses, on either mesh: sharded over ``mesh["dp"]``, exactly once."""
    return DistributedSampler(range(run.dataset_size), group=mesh["dp"], tail=RESUME_TAIL)


def _read(sampler: DistributedSampler[int], run: MeshRun, steps: int | None = None) -> list[int]:
    """What a DataLoader over ``sampler`` yields, in order (the first ``steps`` batches)."""
    loader = DataLoader(IndexDataset(run.dataset_size), batch_size=run.batch_size, sampler=sampler)
    samples: list[int] = []
    for step, batch in enumerate(loader, start=1):
        samples += batch.tolist()
        if step == steps:
            break
    return samples


def observe_on_rank(run: MeshRun) -> dict[str, Any]:
    """Rank work of the first launch: every variant's reads and checks, then the save."""
    mesh = _mesh(run.mesh)
    where = _where(mesh)
    reads, checks = [], []
    for variant, (sharded, seed) in VARIANTS.items():
        group = mesh["dp"] if sharded else None
        sampler: DistributedSampler[int] = DistributedSampler(
            range(run.dataset_size), seed=seed, group=group
        )
        for epoch in range(run.epochs):
            sampler.set_epoch(epoch)
            samples = _read(sampler, run)
            reads.append(
                {"variant": variant, "num_replicas": sampler.num_replicas, "epoch": epoch}
                | where
                | {"samples": samples}
            )
        for call, with_replicas in CALLS.items():
            try:
                sampler.check_consistent(replicas=mesh["tp"] if with_replicas else None)
            except InconsistentRanksError as error:
                message: str | None = str(error)
            else:
                message = None
            checks.append(
                {"variant": variant, "call": call, "global rank": where["global rank"]}
                | {"raised": message is not None, "message": message}
            )
    sampler = _resumable(run, mesh)
    sampler.set_epoch(run.resume_epoch)
    samples = _read(sampler, run, run.resume_steps)
    saved = _phase("saved", run.mesh, where, samples, sampler.state_dict())
    return {"reads": reads, "checks": checks, "saved": saved}


def resume_on_rank(payload: tuple[MeshRun, dict[str, Any]]) -> dict[str, Any]:
    """Rank work of the second launch: load the saved state and read the rest of the epoch."""
    run, state = payload
    mesh = _mesh(run.resumed_mesh)
    sampler = _resumable(run, mesh)
    sampler.load_state_dict(state)
    sampler.set_epoch(run.resume_epoch)
    samples = _read(sampler, run)
    return _phase("resumed", run.resumed_mesh, _where(mesh), samples, None)


def _phase(
    phase: str,
    shape: tuple[int, int],
    where: dict[str, int],
    samples: list[int],
    state: dict[str, Any] | None,
) -> dict[str, Any]:
    mesh = f"DP {shape[0]} x TP {shape[1]}"
    return {"phase": phase, "mesh": mesh} | where | {"samples": samples, "state": state}
