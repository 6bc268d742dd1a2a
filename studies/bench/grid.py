"""The benchmark's grid: every variant, size and world size, measured side by side.

Guarantee: :func:`run_grid` measures each cell of the grid ``repeats`` times, each time
in a fresh process (:func:`studies.bench.probe.measure`), visiting the variants in turn
within each repeat so that a change in the machine's load falls on all of them alike.
It returns one row per cell and quantity with the median and the spread (min..max) of
what was measured, or a status saying why nothing was: ``"unavailable: <error>"`` (the
variant cannot be built; not retried), ``"skipped: needs ~X GB, over 4/5 of the Y GB
available"`` (its estimated peak, from the dataset size alone, does not fit in 4/5 of the
memory available when the run started; never attempted) or ``"failed: <reason>"``.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from studies.bench.probe import Probe, measure
from studies.bench.variants import SEED, VARIANTS, estimated_bytes
from studies.common.records import cpu_model

__all__ = [
    "COLUMNS",
    "QUANTITIES",
    "Grid",
    "gigabytes",
    "machine_facts",
    "run_grid",
    "skip_reason",
]

#: Each quantity, its unit, and the key the probe reports it under.
QUANTITIES: dict[str, tuple[str, str]] = {
    "first index": ("s", "first_s"),
    "epoch": ("s", "epoch_s"),
    "peak RSS above baseline": ("bytes", "peak_bytes"),
    "first batch": ("s", "first_s"),
}
#: The quantities measured on the sampler itself; "first batch" is the DataLoader's.
SAMPLER_QUANTITIES = ("first index", "epoch", "peak RSS above baseline")
LOADER_QUANTITY = "first batch"

#: The tidy table's columns (``num_workers`` is set for the DataLoader rows only).
COLUMNS = (
    "quantity",
    "unit",
    "dataset size",
    "world size",
    "num_workers",
    "variant",
    "median",
    "min",
    "max",
    "repeats",
    "status",
)

#: Share of the available memory a variant's estimated peak may use.
MEMORY_HEADROOM = (4, 5)


@dataclass(frozen=True)
class Grid:
    """What to measure. The DataLoader part runs at the largest world size only."""

    sizes: tuple[int, ...]
    world_sizes: tuple[int, ...]
    repeats: int
    num_workers: tuple[int, ...]
    batch_size: int = 256
    seed: int = SEED

    @property
    def loader_world_size(self) -> int:
        """The world size of the DataLoader measurements (the largest one)."""
        return max(self.world_sizes)

    def cells(self) -> list[Probe]:
        """Every probe of one repeat: sampler cells, then DataLoader cells, variants in turn."""
        cells = [
            Probe(variant.name, size, world, self.seed)
            for size in self.sizes
            for world in self.world_sizes
            for variant in VARIANTS
        ]
        cells += [
            Probe(
                variant.name,
                size,
                self.loader_world_size,
                self.seed,
                num_workers=workers,
                batch_size=self.batch_size,
            )
            for size in self.sizes
            for workers in self.num_workers
            for variant in VARIANTS
        ]
        return cells


def gigabytes(count: int) -> str:
    """``count`` bytes in GB (10**9 bytes), two significant digits."""
    return f"{count / 10**9:.2g}"


def skip_reason(variant: str, dataset_size: int, available: int) -> str | None:
    """Why the variant is not attempted at this size, or None when it fits."""
    needed = estimated_bytes(variant, dataset_size)
    share, whole = MEMORY_HEADROOM
    if needed * whole <= available * share:
        return None
    return (
        f"skipped: needs ~{gigabytes(needed)} GB, over {share}/{whole} of the "
        f"{gigabytes(available)} GB available"
    )


def machine_facts() -> dict[str, str]:
    """The machine and versions the measurements ran on, and its load when asked."""
    import psutil
    import torch

    facts = {
        "CPU": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": f"{gigabytes(psutil.virtual_memory().total)} GB",
        "Python": platform.python_version(),
        "torch": torch.__version__,
    }
    if hasattr(os, "getloadavg"):
        one, five, fifteen = os.getloadavg()
        facts["load average (1, 5, 15 min)"] = f"{one:.2f}, {five:.2f}, {fifteen:.2f}"
    return facts


def run_grid(
    grid: Grid,
    *,
    available: int | None = None,
    progress: Callable[[Sequence[Probe]], Iterable[Probe]] | None = None,
    measure_one: Callable[[Probe, float], dict[str, Any]] | None = None,
    timeout: float | None = None,
) -> pd.DataFrame:
    """Measure ``grid``; one row per cell and quantity (:data:`COLUMNS`).

    ``available`` is the memory budget in bytes (default: psutil's available memory now).
    ``progress`` wraps the list of probes to run (e.g. a progress bar). ``measure_one``
    replaces :func:`studies.bench.probe.measure` (same signature and result).
    ``timeout`` is the seconds one measuring process may take (default: a minute plus
    5 s per million samples).
    """
    measure_one = measure_one or measure
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().available)
    cells = grid.cells()
    results: dict[Probe, list[dict[str, Any]]] = {cell: [] for cell in cells}
    skipped = {cell: skip_reason(cell.variant, cell.dataset_size, available) for cell in cells}
    final: dict[Probe, str] = {}
    todo = [cell for _ in range(grid.repeats) for cell in cells if skipped[cell] is None]
    for cell in progress(todo) if progress else todo:
        if cell in final:
            continue
        result = measure_one(cell, timeout or _timeout(cell.dataset_size))
        if result["status"].startswith("unavailable"):
            final[cell] = result["status"]
        results[cell].append(result)
    rows = []
    for cell in cells:
        quantities = SAMPLER_QUANTITIES if cell.num_workers is None else (LOADER_QUANTITY,)
        for quantity in quantities:
            rows.append(_row(cell, quantity, results[cell], skipped[cell] or final.get(cell)))
    # Object columns keep each value as measured: seconds as floats, bytes as ints.
    frame = pd.DataFrame(rows, columns=list(COLUMNS), dtype=object)
    for column in ("dataset size", "world size", "repeats"):
        frame[column] = frame[column].astype("int64")
    frame["num_workers"] = frame["num_workers"].astype("Int64")
    return frame


def _row(
    cell: Probe, quantity: str, results: list[dict[str, Any]], status: str | None
) -> dict[str, Any]:
    unit, key = QUANTITIES[quantity]
    values = [result[key] for result in results if result["status"] == "ok"]
    failures = [result["status"] for result in results if result["status"] != "ok"]
    if status is None and failures:
        status = failures[0]
    if status is None and not values:
        status = "failed: nothing measured"
    row: dict[str, Any] = {
        "quantity": quantity,
        "unit": unit,
        "dataset size": cell.dataset_size,
        "world size": cell.world_size,
        "num_workers": cell.num_workers,
        "variant": cell.variant,
        "median": None,
        "min": None,
        "max": None,
        "repeats": len(values),
        "status": status or "ok",
    }
    if status is None:
        # The lower median: always one of the measured values (an integer for bytes).
        row.update(median=statistics.median_low(values), min=min(values), max=max(values))
    return row


#: The most seconds one measuring process may take (``--timeout``'s bound, too).
MAX_TIMEOUT = 3600.0


def _timeout(dataset_size: int) -> float:
    """Seconds one measurement may take: a minute, plus 5 s per million samples, at most
    :data:`MAX_TIMEOUT`."""
    return min(60 + 5 * dataset_size / 10**6, MAX_TIMEOUT)
