"""A recorded ``dsampler bench`` run: what the report's speed finding renders.

Timings depend on the machine and its load, so the report does not measure them: the
``speed`` finding reads one run recorded by ``dsampler bench --record``, committed with
the machine it ran on, and renders the same bytes every time. ``--record`` measures
:data:`GRID` (the defaults of ``dsampler bench``) and writes :data:`RECORD`.

Guarantee: :func:`load` gives back exactly the tidy table :func:`studies.bench.grid.
run_grid` returned when the run was recorded (every median, minimum and maximum as
measured: seconds as floats, bytes as integers), the grid and the machine facts.
:func:`save` replaces only a file it wrote itself (recognised by :data:`MARK`), and
writes it whole or not at all (a temporary file renamed over it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from studies.bench.grid import COLUMNS, Grid
from studies.common.records import write_whole

__all__ = [
    "GRID",
    "MARK",
    "RECORD",
    "RecordError",
    "Recorded",
    "is_record",
    "load",
    "machine_facts",
    "record_text",
    "save",
]

#: The run the report renders: ``dsampler bench``'s defaults.
GRID = Grid(sizes=(10**5, 10**6, 10**7), world_sizes=(1, 8, 64), repeats=3, num_workers=(0, 2))
#: Where ``dsampler bench --record`` writes, and the speed finding reads.
RECORD = Path(__file__).resolve().parents[1] / "data" / "bench_record.json"
#: The key and value that mark a file as a recorded run.
MARK = ("generated_by", "dsampler bench --record")


class RecordError(ValueError):
    """The record cannot be read or may not be replaced; the message names the file."""


class Recorded:
    """A recorded run: the tidy table, the grid it measured and the machine's facts."""

    def __init__(self, frame: pd.DataFrame, grid: Grid, machine: dict[str, str]) -> None:
        self.frame = frame
        self.grid = grid
        self.machine = machine


def machine_facts() -> dict[str, Any]:
    """The machine a recorded benchmark ran on: cores, memory, Python and torch."""
    import platform

    import psutil
    import torch

    return {
        "cores": os.cpu_count(),
        "memory (GB)": round(psutil.virtual_memory().total / 10**9),
        "Python": platform.python_version(),
        "torch": torch.__version__,
    }


def record_text(frame: pd.DataFrame, grid: Grid, machine: dict[str, str]) -> str:
    """The record file's text: the mark, the grid, the machine and one object per row."""
    rows = [
        {column: _plain(value) for column, value in zip(COLUMNS, row, strict=True)}
        for row in frame[list(COLUMNS)].itertuples(index=False)
    ]
    head = {
        MARK[0]: MARK[1],
        "grid": {
            "sizes": list(grid.sizes),
            "world_sizes": list(grid.world_sizes),
            "repeats": grid.repeats,
            "num_workers": list(grid.num_workers),
            "batch_size": grid.batch_size,
            "seed": grid.seed,
        },
        "machine": machine,
    }
    lines = ",\n".join(f"    {json.dumps(row)}" for row in rows)
    opening = json.dumps(head, indent=2)[:-2]  # without the closing brace
    return f'{opening},\n  "rows": [\n{lines}\n  ]\n}}\n'


def save(text: str, path: Path = RECORD) -> None:
    """Write ``text`` to ``path``, replacing only a record (``RecordError`` otherwise)."""
    path = Path(path)
    if path.exists() and not is_record(path):
        raise RecordError(f"{path} exists and is not a recorded bench run: not replaced")
    write_whole(path, text)


def load(path: Path = RECORD) -> Recorded:
    """The recorded run in ``path``; ``RecordError`` naming the file when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordError(f"{path} cannot be read as a recorded bench run: {error}") from None
    if not isinstance(data, dict) or data.get(MARK[0]) != MARK[1]:
        raise RecordError(f"{path} is not a recorded bench run (no {MARK[0]!r} mark)")
    grid = Grid(
        sizes=tuple(data["grid"]["sizes"]),
        world_sizes=tuple(data["grid"]["world_sizes"]),
        repeats=int(data["grid"]["repeats"]),
        num_workers=tuple(data["grid"]["num_workers"]),
        batch_size=int(data["grid"]["batch_size"]),
        seed=int(data["grid"]["seed"]),
    )
    frame = pd.DataFrame(data["rows"], columns=list(COLUMNS), dtype=object)
    for column in ("dataset size", "world size", "repeats"):
        frame[column] = frame[column].astype("int64")
    frame["num_workers"] = frame["num_workers"].astype("Int64")
    return Recorded(frame, grid, {str(k): str(v) for k, v in data["machine"].items()})


def is_record(path: Path) -> bool:
    """Whether ``path`` holds a recorded run (its mark), so that --record may replace it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get(MARK[0]) == MARK[1]


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
