"""Does the simulation predict real processes? Run both and compare row by row.

:func:`compare` runs each :class:`~studies.engines.case_runs.Run` in real processes
(gloo, the sampler reading its placement from the process group, real DataLoader
workers) and in-process with :func:`studies.core.simulate.case_rows` (no workers), and
compares the tidy rows exactly: same batches, same indices, same order.
:func:`verification_runs` is the set the report checks: the shared experiment plus a
grid over world sizes 1 to 8.

Launching them takes minutes on two cores, and what the ranks received is a fact of
torch's and this checkout's code, so the report renders :data:`PROCESSES`, a record of
what every verification run received (:func:`recorded`): ``python -m
studies.engines.versus_simulation --record`` re-measures it, and
``tests/test_real_processes.py`` runs them all again in real processes and compares.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from studies.common import records
from studies.core.cases import CASE_COLUMNS, EXPERIMENT, Case, Implementation
from studies.core.simulate import COLUMNS, case_rows, tidy_rows
from studies.engines.case_runs import Run, run_many
from studies.engines.local_ranks import DEFAULT_TIMEOUT

__all__ = [
    "COMMAND",
    "MATCH_COLUMNS",
    "MISMATCH_COLUMNS",
    "PROCESSES",
    "Agreement",
    "Comparison",
    "agreement",
    "compare",
    "recorded",
    "verification_runs",
]

_LOADER_COLUMNS = ("num_workers", "persistent_workers")
#: One row per run: does the real table equal the simulated one?
MATCH_COLUMNS = (
    "label",
    *CASE_COLUMNS,
    *_LOADER_COLUMNS,
    "simulated_rows",
    "processes_rows",
    "match",
    "same_in_process",
)
#: Every row of every mismatching run, from both sources.
MISMATCH_COLUMNS = ("label", "source", *_LOADER_COLUMNS, *COLUMNS)

#: Odd dataset sizes, from fewer samples than ranks to many per rank.
_GRID_SIZES = (1, 3, 5, 7, 9, 11, 13, 17, 33, 101)
_GRID_BATCH_SIZES = (2, 3, 4)


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`.

    ``matches`` has one row per run (:data:`MATCH_COLUMNS`); ``same_in_process`` is only
    filled for mismatches: whether an in-process run *with the same DataLoader options*
    reproduces the real rows, i.e. whether the difference comes from those options rather
    than from running in separate processes. ``mismatches`` (:data:`MISMATCH_COLUMNS`)
    holds every row of every mismatching run, ``source`` ``simulated`` or ``processes``.
    """

    matches: pd.DataFrame
    mismatches: pd.DataFrame

    @property
    def matched(self) -> int:
        """How many runs matched row for row."""
        return int(self.matches["match"].sum())

    @property
    def total(self) -> int:
        """How many runs were compared."""
        return len(self.matches)


@dataclass(frozen=True)
class Agreement:
    """One run's real rows against the simulation of its case.

    ``simulated`` holds the simulated rows (no DataLoader workers); ``match`` says whether
    the real rows equal them exactly. ``same_in_process`` is only set when they differ:
    whether an in-process run with the run's own DataLoader options gives the real rows.
    """

    simulated: list[dict[str, Any]]
    match: bool
    same_in_process: bool | None

    def record(self, real: list[dict[str, Any]]) -> dict[str, Any]:
        """The plain-value summary: row counts, ``match`` and ``same_in_process``."""
        return {
            "simulated_rows": len(self.simulated),
            "processes_rows": len(real),
            "match": self.match,
            "same_in_process": self.same_in_process,
        }


def agreement(run: Run, real: list[dict[str, Any]]) -> Agreement:
    """Compare ``real``, the tidy rows ``run`` gave in real processes, with the simulation."""
    simulated = case_rows(run.case)
    match = simulated == real
    same_in_process = None if match else case_rows(run.case, **run.loader_options()) == real
    return Agreement(simulated, match, same_in_process)


def compare(
    runs: Sequence[Run],
    *,
    labels: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    real: Sequence[list[dict[str, Any]]] | None = None,
) -> Comparison:
    """Run every run in real processes and in the simulation; compare rows exactly.

    ``labels`` names each run in the tables (default: ``run <i>``). One launch per world
    size; ``timeout`` bounds each launch. ``real``: each run's rows from real processes
    measured before (:func:`recorded`), instead of launching them.
    """
    runs = list(runs)
    labels = [f"run {i}" for i in range(len(runs))] if labels is None else list(labels)
    if len(labels) != len(runs):
        raise ValueError(f"labels must name each of the {len(runs)} runs, got {len(labels)}")
    if real is not None and len(real) != len(runs):
        raise ValueError(f"real must hold the rows of each of the {len(runs)} runs")
    real_tables = run_many(runs, timeout=timeout) if real is None else list(real)
    summary: list[dict[str, Any]] = []
    differing: list[dict[str, Any]] = []
    for label, run, real in zip(labels, runs, real_tables, strict=True):
        found = agreement(run, real)
        if not found.match:
            for source, rows in (("simulated", found.simulated), ("processes", real)):
                differing.extend(
                    {"label": label, "source": source, **_loader(run), **row} for row in rows
                )
        summary.append({"label": label, **run.case.key(), **_loader(run), **found.record(real)})
    return Comparison(
        pd.DataFrame(summary, columns=list(MATCH_COLUMNS)),
        pd.DataFrame(differing, columns=list(MISMATCH_COLUMNS)),
    )


def verification_runs() -> list[tuple[str, Run]]:
    """The labelled runs the report verifies in real processes.

    * The shared experiment (:data:`studies.core.cases.EXPERIMENT`), without workers and with
      two persistent workers.
    * A grid of 32 configurations, each for both the stock sampler and ours (64 runs):
      every world size 1 to 8 with each of the four sampler/loader ``drop_last``
      combinations, odd dataset sizes cycling from 1 (fewer samples than ranks) to 101,
      and varied batch sizes, seeds, ``shuffle`` and ``set_epoch``. In each world size,
      one configuration per sampler also runs with 2 DataLoader workers (persistent for
      world sizes 5 to 8); the rest run without workers.
    """
    runs = [(f"experiment {label}", Run(case)) for label, case in EXPERIMENT]
    runs += [
        (f"experiment {label}, 2 persistent workers", Run(case, 2, persistent_workers=True))
        for label, case in EXPERIMENT
    ]
    flags = list(itertools.product((False, True), repeat=2))
    for world_size in range(1, 9):
        for i, (drop_last, loader_drop_last) in enumerate(flags):
            k = len(flags) * (world_size - 1) + i
            # Workers cost ~0.1 s per rank and epoch, and a rank that starts any also
            # starts its fork server (~1 s, see local_ranks), so only one run in four
            # uses them: per world size, one configuration with each sampler.
            with_workers = "torch" if i < 2 else "samplers"
            for implementation in ("torch", "samplers"):
                case = _grid_case(k, world_size, drop_last, loader_drop_last, implementation)
                workers = 2 if (world_size + i) % 2 == 0 and implementation == with_workers else 0
                run = Run(case, workers, persistent_workers=workers > 0 and world_size >= 5)
                runs.append((f"grid {k}", run))
    return runs


#: The command that re-measures :data:`PROCESSES`.
COMMAND = "python -m studies.engines.versus_simulation --record"


def _received(world_size: int) -> dict[str, Any]:
    """What each verification run of ``world_size`` received in real processes (one
    launch): per run, its ``[rank, epoch, batch, indices]`` rows in table order."""
    runs = [run for _, run in verification_runs() if run.case.world_size == world_size]
    return {
        "received": [
            [[row["rank"], row["epoch"], row["batch"], row["indices"]] for row in table]
            for table in run_many(runs)
        ]
    }


def _world_sizes() -> list[tuple[int]]:
    return [(size,) for size in sorted({run.case.world_size for _, run in verification_runs()})]


def _settings() -> dict[str, Any]:
    """The verification runs, each as its label, case and DataLoader workers."""
    return {
        "runs": [
            [label, run.case.key(), run.num_workers, run.persistent_workers]
            for label, run in verification_runs()
        ]
    }


#: What the verification runs received in real processes, by world size.
PROCESSES = records.Rows(
    records.DATA / "real-processes.json", COMMAND, _received, _world_sizes, _settings, ("torch",)
)


def recorded(runs: Sequence[Run] | None = None) -> list[list[dict[str, Any]]]:
    """Each of ``runs``' (default: the verification runs') tidy rows from real processes,
    as :data:`PROCESSES` recorded them (``RecordError`` when the record was made for
    other runs)."""
    runs = [run for _, run in verification_runs()] if runs is None else list(runs)
    received = PROCESSES.load()
    tables: list[list[dict[str, Any]]] = []
    seen: dict[int, int] = {}
    for run in runs:
        size = run.case.world_size
        rows = received[(size,)]["received"][seen.get(size, 0)]
        seen[size] = seen.get(size, 0) + 1
        by_rank: list[list[tuple[int, int, list[int]]]] = [[] for _ in range(size)]
        for rank, epoch, batch, indices in rows:
            by_rank[rank].append((epoch, batch, indices))
        tables.append(tidy_rows(run.case, by_rank))
    return tables


def _grid_case(
    k: int,
    world_size: int,
    drop_last: bool,
    loader_drop_last: bool,
    implementation: Implementation,
) -> Case:
    return Case(
        _GRID_SIZES[k % len(_GRID_SIZES)],
        world_size,
        _GRID_BATCH_SIZES[(k + world_size) % len(_GRID_BATCH_SIZES)],
        shuffle=k % 5 != 4,
        seed=k,
        drop_last=drop_last,
        loader_drop_last=loader_drop_last,
        set_epoch=k % 3 != 2,
        implementation=implementation,
    )


def _loader(run: Run) -> dict[str, Any]:
    return {"num_workers": run.num_workers, "persistent_workers": run.persistent_workers}


if __name__ == "__main__":
    PROCESSES.main()
