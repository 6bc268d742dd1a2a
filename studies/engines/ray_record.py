"""What the Ray Train runs observed, recorded: what the engines finding renders.

The runs (:func:`observe`: every :data:`~studies.engines.ray_runs.CASES` loader in one
``TorchTrainer`` that fails and restarts, and the restart on fewer workers of
:mod:`~studies.engines.ray_resized`) start a local Ray cluster and its worker groups, which
takes minutes on two cores. What they observe is a fact of Ray's, torch's and this
checkout's code, the same every run, so the report renders :data:`RECORD` instead:
``python -m studies.engines.ray_record`` re-measures it, the record names the machine and
versions it ran on, and ``tests/test_ray.py`` runs the same runs again and compares them
with it.

Guarantee: :func:`load` gives back what :func:`observe` returned when the record was made,
and raises :class:`~studies.common.records.RecordError` when the record was made with
other settings (sizes, epochs, cases) than the code's now.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from studies.common import records
from studies.engines import ray_resized, ray_runs
from studies.engines.ray_runs import Seen

__all__ = ["COMMAND", "RECORD", "Observed", "counted", "load", "observe", "record", "settings"]

#: The command that re-measures :data:`RECORD`.
COMMAND = "python -m studies.engines.ray_record"
#: What the runs observed.
RECORD = records.DATA / "ray-runs.json"

#: ``(world size, rank, epoch, step, batch)`` of a step of the run on fewer workers.
Step = tuple[int, int, int, int, tuple[int, ...]]


@dataclass(frozen=True)
class Observed:
    """The two runs: every case's records per worker, and the steps of the restart on
    fewer workers that count from its checkpoint (:func:`counted`)."""

    cases: Mapping[str, Sequence[Seen]]
    resized: Sequence[Step]


def counted(seen: Sequence[Step]) -> tuple[Step, ...]:
    """The steps of the run on fewer workers counted from its checkpoint: the first run's
    up to the checkpoint, then the second run's. (What the first run's workers recorded
    after the checkpoint, before the failure reached them, depends on timing.)"""
    second = ray_resized.RESIZED_WORKERS[1]
    return tuple(
        step
        for step in seen
        if step[0] == second or (step[2], step[3]) <= ray_resized.RESIZED_CHECKPOINT
    )


def observe() -> Observed:
    """Both runs, each in a local Ray cluster of its own (minutes)."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as storage:
        cases = ray_runs.observe()
        with ray_runs.cluster(cpus=max(ray_resized.RESIZED_WORKERS)):
            ray_resized.resized(storage=storage, out=out)
        return Observed(
            {name: tuple(ranks) for name, ranks in cases.items()},
            counted(ray_resized.resized_seen(out)),
        )


def settings() -> dict[str, Any]:
    """What the runs are: their sizes, epochs, checkpoints and cases."""
    return {
        "workers": ray_runs.WORKERS,
        "dataset size": ray_runs.DATASET_SIZE,
        "batch size": ray_runs.BATCH_SIZE,
        "epochs": ray_runs.EPOCHS,
        "checkpoint step": ray_runs.CHECKPOINT_STEP,
        "cases": {case.name: [case.sampler, case.path] for case in ray_runs.CASES},
        "resized": {
            "workers": list(ray_resized.RESIZED_WORKERS),
            "epochs": ray_resized.RESIZED_EPOCHS,
            "checkpoint": list(ray_resized.RESIZED_CHECKPOINT),
            "kill": list(ray_resized.RESIZED_KILL),
        },
    }


def record(observed: Observed) -> dict[str, Any]:
    """The record's content: the machine, the versions, the settings and what was seen."""
    return {
        "machine": records.machine(),
        "versions": records.versions("ray", "torch"),
        "settings": settings(),
        "cases": [
            {"case": name, **asdict(seen)}
            for name, ranks in observed.cases.items()
            for seen in ranks
        ],
        "resized": [[*step[:4], list(step[4])] for step in observed.resized],
    }


def load(path: Path = RECORD) -> Observed:
    """The recorded runs (``RecordError`` naming the file when it is not the record, or
    when it was made with other settings than the code's)."""
    data = records.load(path, COMMAND)
    if data.get("settings") != settings():
        raise records.RecordError(
            f"{path} was recorded with other settings than the code's now: re-measure it "
            f"with {COMMAND}"
        )
    cases: dict[str, list[Seen]] = {}
    for item in data["cases"]:
        cases.setdefault(item["case"], []).append(
            Seen(
                item["rank"],
                _steps(item["before"]),
                _steps(item["after"]),
                item["error"],
                item["restart"],
                item["iterates"],
            )
        )
    resized = tuple(
        (size, rank, epoch, step, tuple(batch))
        for size, rank, epoch, step, batch in data["resized"]
    )
    return Observed({name: tuple(ranks) for name, ranks in cases.items()}, resized)


def _steps(items: list[Any]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    return tuple((int(epoch), tuple(int(i) for i in batch)) for epoch, batch in items)


def machine_and_versions(path: Path = RECORD) -> tuple[dict[str, str], dict[str, str]]:
    """The machine and versions the record names."""
    data = records.load(path, COMMAND)
    return data["machine"], data["versions"]


if __name__ == "__main__":
    records.save(RECORD, COMMAND, record(observe()))
    print(f"wrote {RECORD}", file=sys.stderr)
