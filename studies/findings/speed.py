"""Finding: time and memory of the stock sampler, ours, bare randperm and feistel.

Unlike the other findings, its numbers are wall-clock times and resident memory, so they
depend on the machine and the run: the prose states the machine it ran on and quotes only
medians and ratios measured in the same run. The committed report is one such run;
``dsampler bench`` measures the same grid (and more, with options) on any machine.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from studies.bench.grid import (
    LOADER_QUANTITY,
    MEMORY_HEADROOM,
    SAMPLER_QUANTITIES,
    Grid,
    machine_facts,
    run_grid,
)
from studies.bench.plot import draw, figure_size
from studies.bench.probe import WARM_UP_SIZE
from studies.bench.tables import constant_statuses, formatted, ratio_view, value_view
from studies.bench.variants import FLOOR, REFERENCE
from studies.findings import Evidence, Picture, Table

NAME = "speed"
TITLE = "Speed and memory: the stock sampler, ours, bare torch.randperm and feistel"
CLAIM = (
    "Side by side in one run, each measurement in a fresh process, for 10**5 to 10**7 "
    "samples on 1, 8 and 64 ranks (the last rank): the time to the first index, the time "
    "for the rank's epoch and the peak resident memory above the process's baseline of "
    "the stock sampler, ours in identical-output mode, bare torch.randperm (int64 and "
    "int32, same generator) and the feistel permutation, each divided by the stock "
    "sampler's and by bare int64 randperm's (the floor); and the DataLoader's time to its "
    "first batch."
)
GUARDED_BY = "tests/test_bench.py::test_ratios_divide_medians_of_one_run"
SLOW = True

#: The grid of the report: ``dsampler bench``'s defaults.
GRID = Grid(sizes=(10**5, 10**6, 10**7), world_sizes=(1, 8, 64), repeats=3, num_workers=(0, 2))
#: The world size the prose quotes.
QUOTED_WORLD_SIZE = 8

_TITLES = {
    "first index": "Time to the first index (ms)",
    "epoch": "Time for the rank's whole epoch (ms)",
    "peak RSS above baseline": "Peak RSS above the process's baseline (MB)",
    "first batch": "DataLoader: time to the first batch (ms)",
}


def build() -> Evidence:
    frame = run_grid(GRID)
    facts = machine_facts()  # cores: os.cpu_count()
    dropped = constant_statuses(frame)
    drop = tuple(dropped)
    tables: list[Table] = []
    for quantity in (*SAMPLER_QUANTITIES, LOADER_QUANTITY):
        note = _note(quantity, dropped)
        title = _TITLES[quantity]
        tables.append(Table(title, formatted(value_view(frame, quantity, drop=drop)), note=note))
        tables.append(
            Table(
                f"{title}: ratios of medians",
                formatted(ratio_view(frame, quantity, drop=drop)),
                floatfmt=".2f",
            )
        )

    def picture(figure: Figure) -> None:
        draw(figure, frame)

    return Evidence(
        prose=_prose(frame, facts, dropped),
        tables=tuple(tables),
        pictures=(
            Picture(
                "time-memory",
                "Median time to the first index, time for the epoch and peak RSS above "
                "baseline against dataset size, log-log, one panel per world size",
                picture,
                size=figure_size(len(GRID.world_sizes)),
            ),
        ),
    )


def _note(quantity: str, dropped: dict[str, str]) -> str:
    parts = [f"Median (min..max) of {GRID.repeats} fresh processes, rank W - 1 of W."]
    if quantity == LOADER_QUANTITY:
        parts = [
            f"Median (min..max) of {GRID.repeats} fresh processes; DataLoader with batch size "
            f"{GRID.batch_size} over rank {GRID.loader_world_size - 1} of "
            f"{GRID.loader_world_size}'s sampler."
        ]
    parts += [f"{name}: {status}." for name, status in dropped.items()]
    return " ".join(parts)


def _prose(frame: pd.DataFrame, facts: dict[str, str], dropped: dict[str, str]) -> str:
    size, world = max(GRID.sizes), QUOTED_WORLD_SIZE

    def row(quantity: str, variant: str, workers: int | None = None) -> pd.Series:
        match = (
            (frame["quantity"] == quantity)
            & (frame["dataset size"] == size)
            & (frame["variant"] == variant)
        )
        if workers is None:
            match &= frame["world size"] == world
        else:
            match &= frame["num_workers"] == workers
        return frame[match].iloc[0]

    def ms(quantity: str, variant: str, workers: int | None = None) -> str:
        found = row(quantity, variant, workers)
        if found["status"] != "ok":
            return f"not measured ({found['status']})"
        return f"{float(found['median']) * 1e3:,.0f} ms"

    def mb(variant: str) -> str:
        found = row("peak RSS above baseline", variant)
        if found["status"] != "ok":
            return f"not measured ({found['status']})"
        return f"{int(found['median']) / 10**6:,.0f} MB"

    def spread(quantity: str, variant: str) -> str:
        found = row(quantity, variant)
        if found["status"] != "ok":
            return f"nothing ({found['status']})"
        low, high = float(found["min"]) * 1e3, float(found["max"]) * 1e3
        return f"from {low:,.0f} to {high:,.0f} ms"

    def ratio(quantity: str, variant: str, divisor: str) -> str:
        value, by = row(quantity, variant), row(quantity, divisor)
        if value["status"] != "ok" or by["status"] != "ok" or float(by["median"]) <= 0:
            return "-"
        return f"{float(value['median']) / float(by['median']):.2f}"

    machine = ", ".join(f"{name} {value}" for name, value in facts.items())
    first, epoch, peak = "first index", "epoch", "peak RSS above baseline"
    text = (
        f"Measured on: {machine}. At {size:,} samples on {world} ranks (rank {world - 1}, "
        f"medians of {GRID.repeats} fresh processes): the time to the first index is "
        f"{ms(first, REFERENCE)} for the stock sampler, {ms(first, 'ours')} for ours and "
        f"{ms(first, FLOOR)} for bare int64 `torch.randperm` (the floor), so ours takes "
        f"{ratio(first, 'ours', FLOOR)} x the floor and the stock sampler "
        f"{ratio(first, REFERENCE, FLOOR)} x; the floor itself took {spread(first, FLOOR)} "
        "over its processes, which is how far the machine's load moved the times. The peak "
        f"resident memory above the process's baseline is {mb(REFERENCE)} for the stock "
        f"sampler, {mb('ours')} for ours, "
        f"{mb(FLOOR)} for the floor and {mb('randperm int32')} for int32 `randperm` "
        f"(ours / floor {ratio(peak, 'ours', FLOOR)}, stock / floor "
        f"{ratio(peak, REFERENCE, FLOOR)}). Iterating the rank's whole epoch takes ours "
        f"{ratio(epoch, 'ours', REFERENCE)} x the stock sampler's time. Through a DataLoader "
        f"(batch size {GRID.batch_size}, rank {GRID.loader_world_size - 1} of "
        f"{GRID.loader_world_size}), the first batch arrives after "
        f"{ms(LOADER_QUANTITY, REFERENCE, 0)} (stock) and {ms(LOADER_QUANTITY, 'ours', 0)} "
        f"(ours) with `num_workers=0`, and {ms(LOADER_QUANTITY, REFERENCE, 2)} and "
        f"{ms(LOADER_QUANTITY, 'ours', 2)} with `num_workers=2`."
    )
    for name, status in dropped.items():
        text += f" The {name} variant was not measured anywhere: {status}."
    share, whole = MEMORY_HEADROOM
    method = (
        "How: each cell is measured in a fresh interpreter that imports torch, warms up on "
        f"{WARM_UP_SIZE:,} samples and takes its baseline resident set (psutil); the time "
        "to the first index runs from `iter()` to the first `next()`, the epoch time to "
        "the last index, and the peak is the kernel's high-water mark (`ru_maxrss`) minus "
        "the baseline. A variant whose peak, estimated from the dataset size, would take "
        f"more than {share}/{whole} of the available memory is skipped, never attempted. "
        "`dsampler bench` runs the same measurement on any machine, with 10**8 and 10**9 "
        "samples behind `--large`."
    )
    return f"{text}\n\n{method}"
