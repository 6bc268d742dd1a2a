"""Observe a case inside a job that ``torchrun`` started, on the user's own cluster.

:func:`process_group` joins the process group torchrun describes in each rank's
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), with backend
``nccl`` when the rank has a GPU and ``gloo`` otherwise, and an explicit timeout on every
collective, so a rank that fails or disappears ends the job instead of hanging it.
:func:`observe` then runs the case the way :mod:`studies.engines.case_runs` runs it
on this machine's local ranks, with the same rank code
(:func:`~studies.engines.case_runs.observe_on_rank`): every rank builds the sampler
and DataLoader from the group (world size and rank are read from it, never passed) and
the batches are gathered to rank 0 with ``gather_object``.

Nothing here writes to stdout; the caller prints rank 0's result.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from studies.core.cases import Case
from studies.core.simulate import tidy_rows
from studies.engines.case_runs import Run, observe_on_rank
from studies.engines.local_ranks import start_workers_from_a_fork_server
from studies.engines.versus_simulation import Agreement, agreement

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENVIRONMENT",
    "NotStartedByTorchrun",
    "Observation",
    "backend",
    "observe",
    "process_group",
    "require_environment",
]

#: The variables torchrun sets in every rank's environment that the group is built from.
ENVIRONMENT = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: Seconds any collective (and joining the group) may take by default.
DEFAULT_TIMEOUT = 300.0


class NotStartedByTorchrun(RuntimeError):
    """The process has none of the environment torchrun gives a rank."""


@dataclass(frozen=True)
class Observation:
    """What rank 0 observed: the run, its tidy rows, and their agreement with the simulation.

    ``run.case.world_size`` is the group's size; ``backend`` the group's backend.
    """

    run: Run
    rows: list[dict[str, Any]]
    agreement: Agreement
    backend: str


def require_environment() -> None:
    """Raise :class:`NotStartedByTorchrun`, naming what is missing, outside a torchrun rank."""
    missing = [name for name in ENVIRONMENT if not os.environ.get(name)]
    if missing:
        raise NotStartedByTorchrun(
            f"the environment lacks {', '.join(missing)}, which torchrun sets for each rank; "
            "start it as: torchrun --nproc-per-node N --no-python dsampler observe ..."
        )


def backend() -> str:
    """``nccl`` when this process sees a CUDA device, else ``gloo``."""
    return "nccl" if torch.cuda.is_available() else "gloo"


@contextmanager
def process_group(timeout: float = DEFAULT_TIMEOUT) -> Iterator[str]:
    """Join torchrun's process group for the ``with`` block; yields the backend.

    Raises :class:`NotStartedByTorchrun` (naming the missing variables) before touching
    the network when the environment lacks :data:`ENVIRONMENT`. With ``nccl`` the rank
    uses GPU ``LOCAL_RANK``. The group is destroyed when the block ends normally; after
    an error it is left to the process's exit, since a group whose peers failed may block
    in teardown. It also makes ``forkserver`` this process's default start method, for
    good (:func:`~studies.engines.local_ranks.start_workers_from_a_fork_server`:
    forking a rank whose gloo group runs can deadlock the worker), so DataLoader workers,
    and any other process started without a context, come from a fork server of its own;
    the caller's ``__main__`` must then be safe to import.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    require_environment()
    start_workers_from_a_fork_server()
    chosen = backend()
    if chosen == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(chosen, init_method="env://", timeout=timedelta(seconds=timeout))
    yield chosen
    dist.barrier()  # every rank is done with its collectives before any tears down
    dist.destroy_process_group()


def observe(
    case: Case, *, num_workers: int = 0, persistent_workers: bool = False
) -> Observation | None:
    """Run ``case`` on every rank of the current group; rank 0 gets the observation.

    ``case.world_size`` is replaced by the group's size. Returns ``None`` on every rank
    but 0. Must be called on every rank of an initialised group (see
    :func:`process_group`).
    """
    run = Run(
        replace(case, world_size=dist.get_world_size()),
        num_workers=num_workers,
        persistent_workers=persistent_workers,
    )
    gathered = observe_on_rank([run])
    if gathered is None:
        return None
    rows = tidy_rows(run.case, gathered[0])
    return Observation(run, rows, agreement(run, rows), dist.get_backend())
