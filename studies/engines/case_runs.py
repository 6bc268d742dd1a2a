"""Run cases in real processes and return what each rank's DataLoader handed it.

Each rank is a real process in a gloo process group (see
:mod:`studies.engines.local_ranks`) and builds its loader as a training script does:
``DistributedSampler(dataset, shuffle=..., seed=..., drop_last=...)`` with no
``num_replicas``/``rank``, so both come from the process group; ``set_epoch`` before
each epoch as the case says; a ``DataLoader`` with the requested
``num_workers``/``persistent_workers``. The sampler and loader come from
:func:`studies.core.simulate.make_sampler`/:func:`~studies.core.simulate.make_loader`, and the rows
from :func:`studies.core.simulate.tidy_rows`, so the only thing that can differ from
:func:`studies.core.simulate.simulate` is what the ranks actually received.

Every rank's batches are collected to rank 0 with ``gather_object``. Cases are batched:
all cases of one world size run inside one launch, because starting processes costs far
more than running a small case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch.distributed as dist

from studies.core.cases import Case
from studies.core.simulate import frame, rank_batches, tidy_rows
from studies.engines.local_ranks import DEFAULT_TIMEOUT, launch

__all__ = ["Run", "observe_on_rank", "run_case", "run_cases", "run_many"]

#: One rank's batches: (epoch, batch number, indices), as :func:`rank_batches` yields them.
Batches = list[tuple[int, int, list[int]]]


@dataclass(frozen=True)
class Run:
    """A case and the DataLoader worker settings it runs with in real processes."""

    case: Case
    num_workers: int = 0
    persistent_workers: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.case, Case):
            raise TypeError(f"case must be a studies.core.cases.Case, got {self.case!r}")
        workers = self.num_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"num_workers must be a non-negative integer, got {workers!r}")
        if not isinstance(self.persistent_workers, bool):
            raise TypeError(f"persistent_workers must be a bool, got {self.persistent_workers!r}")
        if self.persistent_workers and workers == 0:
            raise ValueError(
                "persistent_workers=True needs num_workers >= 1 (the DataLoader refuses it), "
                "got num_workers=0"
            )

    def loader_options(self) -> dict[str, Any]:
        """The DataLoader keyword arguments for the workers (none when there are none)."""
        if self.num_workers == 0:
            return {}
        return {"num_workers": self.num_workers, "persistent_workers": self.persistent_workers}


def run_case(
    case: Case,
    *,
    num_workers: int = 0,
    persistent_workers: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> pd.DataFrame:
    """The tidy table of one case run in ``case.world_size`` real processes.

    Same columns (:data:`studies.core.simulate.COLUMNS`) and row order as
    ``simulate([case])``. Raises :class:`studies.engines.local_ranks.RankFailed` or
    :class:`~studies.engines.local_ranks.LaunchTimeout` instead of hanging.
    """
    return run_cases(
        [case], num_workers=num_workers, persistent_workers=persistent_workers, timeout=timeout
    )


def run_cases(
    cases: Iterable[Case],
    *,
    num_workers: int = 0,
    persistent_workers: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[Any], Any] | None = None,
) -> pd.DataFrame:
    """The tidy table of every case, as :func:`studies.core.simulate.simulate` returns it.

    One launch per distinct world size; ``timeout`` bounds each launch. ``progress``
    wraps the iterable of launches (e.g. ``tqdm``).
    """
    runs = [Run(case, num_workers, persistent_workers) for case in cases]
    tables = run_many(runs, timeout=timeout, progress=progress)
    return frame([row for table in tables for row in table])


def run_many(
    runs: Sequence[Run],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[Any], Any] | None = None,
) -> list[list[dict[str, Any]]]:
    """Each run's tidy rows, in the order given; runs may mix worker settings.

    Runs of the same world size share one launch; ``timeout`` bounds each launch.
    """
    runs = list(runs)
    by_world: dict[int, list[int]] = {}
    for position, run in enumerate(runs):
        if not isinstance(run, Run):
            raise TypeError(f"runs must hold case_runs.Run values, got {run!r}")
        by_world.setdefault(run.case.world_size, []).append(position)
    tables: list[list[dict[str, Any]]] = [[] for _ in runs]
    worlds = sorted(by_world)
    for world_size in progress(worlds) if progress else worlds:
        positions = by_world[world_size]
        batch = [runs[position] for position in positions]
        gathered = launch(observe_on_rank, batch, world_size, timeout=timeout)[0]
        for position, by_rank in zip(positions, gathered, strict=True):
            tables[position] = tidy_rows(runs[position].case, by_rank)
    return tables


def observe_on_rank(runs: Sequence[Run]) -> list[list[Batches]] | None:
    """Rank work: run every case here; on rank 0, every rank's batches per run.

    Returns ``result[run][rank]`` on rank 0 and ``None`` elsewhere. The rank and world
    size are read from the process group, never passed in.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine: list[Batches] = []
    for run in runs:
        if run.case.world_size != world_size:
            raise ValueError(
                f"case world_size={run.case.world_size} launched in a group of {world_size}"
            )
        batches = rank_batches(run.case, rank, from_process_group=True, **run.loader_options())
        mine.append(list(batches))
    everyone: list[list[Batches]] | None = [[] for _ in range(world_size)] if rank == 0 else None
    dist.gather_object(mine, everyone, dst=0)
    if everyone is None:
        return None
    return [[everyone[r][i] for r in range(world_size)] for i in range(len(runs))]
