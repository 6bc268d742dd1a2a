"""Finding: time and memory of the stock sampler, ours, bare randperm and feistel.

Unlike the other findings, its numbers are wall-clock times and resident memory, which
depend on the machine and its load, so the report does not measure them: it renders one
run recorded by ``dsampler bench --record`` (:mod:`studies.bench.record`), committed
with the machine it ran on, and quotes only medians and ratios measured in that run.
``dsampler bench`` measures the same grid (and more, with options) on any machine.
The mixture sampler's tables and sentence come the same way from the run recorded by
``python -m studies.mixtures.bench --record`` (:mod:`studies.findings.mixture_record`),
and the packed samplers' from ``python -m studies.bench.packed --record``
(:mod:`studies.findings.packed_record`), which says "not yet recorded" while there is no
record.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from studies.bench import packed as packed_bench
from studies.bench.grid import LOADER_QUANTITY, MEMORY_HEADROOM, SAMPLER_QUANTITIES, Grid
from studies.bench.plot import draw, figure_size
from studies.bench.probe import WARM_UP_SIZE
from studies.bench.record import load
from studies.bench.tables import (
    constant_statuses,
    formatted,
    ratio_view,
    value_view,
    with_ratios,
)
from studies.bench.variants import FLOOR, REFERENCE
from studies.findings import Evidence, Picture, Table, packed_record
from studies.findings import mixture_record as mixture
from studies.findings.wording import plural
from studies.mixtures import bench as mixture_bench

NAME = "speed"
TITLE = "Speed and memory: the stock sampler, ours, bare torch.randperm and feistel"
GUARDED_BY = "tests/test_bench.py::test_the_speed_claim_quotes_the_recorded_run"

#: The world size the prose quotes.
QUOTED_WORLD_SIZE = 8
#: The draw ours makes: the same permutation as the stock sampler's, in int32.
OURS_FLOOR = "randperm int32"

_TITLES = {
    "first index": "Time to the first index (ms)",
    "epoch": "Time for the rank's whole epoch (ms)",
    "peak RSS above baseline": "Peak RSS above the process's baseline (MB)",
    "first batch": "DataLoader: time to the first batch (ms)",
}


def build() -> Evidence:
    recorded = load()
    frame, grid, facts = recorded.frame, recorded.grid, recorded.machine
    dropped = constant_statuses(frame)
    drop = tuple(dropped)
    tables: list[Table] = []
    for quantity in (*SAMPLER_QUANTITIES, LOADER_QUANTITY):
        title = _TITLES[quantity]
        note = _note(grid, quantity, dropped)
        tables.append(Table(title, formatted(value_view(frame, quantity, drop=drop)), note=note))
        tables.append(
            Table(
                f"{title}: ratios of medians",
                formatted(ratio_view(frame, quantity, drop=drop)),
                floatfmt=".2f",
                note=(
                    "/ floor divides by bare int64 `torch.randperm`, the draw the stock "
                    "sampler makes; ours draws the same permutation in int32, so its floor "
                    "is the int32 draw (randperm int32 / floor is that draw's own ratio)."
                ),
            )
        )

    mixtures = mixture_bench.load()
    tables.append(
        Table(
            "Mixtures: the rank's whole epoch (ms), ours, stock and the floor",
            mixture.epoch_table(mixtures),
            floatfmt=".2f",
            intfmt=",",
            note=(
                f"{mixtures['sources']} sources, rank W - 1 of W, medians of "
                f"{plural(mixtures['processes'], 'fresh process', 'fresh processes')}; "
                "stock: `DistributedSampler` over "
                "`ConcatDataset` of the sources; floor: handing out a held list of the "
                "rank's indices."
            ),
        )
    )
    tables.append(
        Table(
            "Mixtures: ours' first index, from building the sampler",
            mixture.first_index_table(mixtures),
            floatfmt=".2f",
            intfmt=",",
            note=(
                "Median, min and max of "
                f"{plural(mixtures['processes'], 'fresh process', 'fresh processes')}."
            ),
        )
    )

    packed = packed_bench.load()
    tables.extend(packed_record.tables(packed))

    def picture(figure: Figure) -> None:
        draw(figure, frame)

    return Evidence(
        claim=_claim(frame, grid, facts),
        prose=(
            f"{_prose(frame, grid, facts, dropped)}\n\n{_mixture_prose(mixtures)}\n\n"
            f"{packed_record.prose(packed)}"
        ),
        tables=tuple(tables),
        pictures=(
            Picture(
                "time-memory",
                "Median time to the first index, time for the epoch and peak RSS above "
                "baseline against dataset size, log-log, one panel per world size",
                picture,
                size=figure_size(len(grid.world_sizes)),
            ),
        ),
    )


def _note(grid: Grid, quantity: str, dropped: dict[str, str]) -> str:
    parts = [f"Median (min..max) of {grid.repeats} fresh processes, rank W - 1 of W."]
    if quantity == LOADER_QUANTITY:
        parts = [
            f"Median (min..max) of {grid.repeats} fresh processes; DataLoader with batch size "
            f"{grid.batch_size} over rank {grid.loader_world_size - 1} of "
            f"{grid.loader_world_size}'s sampler."
        ]
    parts += [f"{name}: {status}." for name, status in dropped.items()]
    return " ".join(parts)


class _Quoted:
    """The recorded run's cells at the quoted size and world size, in words."""

    def __init__(self, frame: pd.DataFrame, grid: Grid) -> None:
        self.frame, self.grid = frame, grid
        self.size, self.world = max(grid.sizes), QUOTED_WORLD_SIZE

    def row(self, quantity: str, variant: str, workers: int | None = None) -> pd.Series:
        frame = self.frame
        match = (
            (frame["quantity"] == quantity)
            & (frame["dataset size"] == self.size)
            & (frame["variant"] == variant)
        )
        if workers is None:
            match &= frame["world size"] == self.world
        else:
            match &= frame["num_workers"] == workers
        return frame[match].iloc[0]

    def ms(self, quantity: str, variant: str, workers: int | None = None) -> str:
        found = self.row(quantity, variant, workers)
        if found["status"] != "ok":
            return f"not measured ({found['status']})"
        return f"{float(found['median']) * 1e3:,.0f} ms"

    def mb(self, variant: str) -> str:
        found = self.row("peak RSS above baseline", variant)
        if found["status"] != "ok":
            return f"not measured ({found['status']})"
        return f"{int(found['median']) / 10**6:,.0f} MB"

    def spread(self, quantity: str, variant: str) -> str:
        found = self.row(quantity, variant)
        if found["status"] != "ok":
            return f"nothing ({found['status']})"
        low, high = float(found["min"]) * 1e3, float(found["max"]) * 1e3
        return f"from {low:,.0f} to {high:,.0f} ms"

    def ratio(self, quantity: str, variant: str, divisor: str) -> str:
        value, by = self.row(quantity, variant), self.row(quantity, divisor)
        if value["status"] != "ok" or by["status"] != "ok" or float(by["median"]) <= 0:
            return "-"
        return f"{float(value['median']) / float(by['median']):.2f}"


def _mixture_prose(recorded: dict[str, Any]) -> str:
    """The recorded mixture benchmark in words (:func:`studies.findings.mixture_record.prose`)."""
    facts = {name: str(value) for name, value in recorded["machine"].items()}
    return mixture.prose(recorded, _machine(facts))


def _machine(facts: dict[str, str]) -> str:
    return ", ".join(f"{name} {value}" for name, value in facts.items())


def _claim(frame: pd.DataFrame, grid: Grid, facts: dict[str, str]) -> str:
    """The claim, from the recorded run's table."""
    quoted = _Quoted(frame, grid)
    first, epoch, peak = "first index", "epoch", "peak RSS above baseline"
    return (
        f"In one recorded run of `dsampler bench` ({_machine(facts)}), at {quoted.size:,} "
        f"samples on {quoted.world} ranks (the last rank, medians of {grid.repeats} fresh "
        f"processes): ours took {quoted.ratio(first, 'ours', OURS_FLOOR)} x the time of its "
        "own draw, an int32 `torch.randperm` of the same permutation (the floor for the "
        f"identical order), to its first index, and the stock sampler "
        f"{quoted.ratio(first, REFERENCE, FLOOR)} x the int64 draw it makes; over the "
        f"rank's whole epoch ours took {quoted.ratio(epoch, 'ours', REFERENCE)} x the stock "
        f"sampler's time, and its peak resident memory was "
        f"{quoted.ratio(peak, 'ours', REFERENCE)} x the stock sampler's."
    )


def _prose(frame: pd.DataFrame, grid: Grid, facts: dict[str, str], dropped: dict[str, str]) -> str:
    quoted = _Quoted(frame, grid)
    ms, mb, spread, ratio = quoted.ms, quoted.mb, quoted.spread, quoted.ratio
    size, world = quoted.size, quoted.world
    first, epoch, peak = "first index", "epoch", "peak RSS above baseline"
    text = (
        f"Recorded on: {_machine(facts)}. At {size:,} samples on {world} ranks (rank "
        f"{world - 1}, medians of {grid.repeats} fresh processes): the time to the first "
        f"index is {ms(first, REFERENCE)} for the stock sampler, {ms(first, 'ours')} for ours, "
        f"{ms(first, FLOOR)} for bare int64 `torch.randperm` (the stock sampler's draw) and "
        f"{ms(first, OURS_FLOOR)} for int32 `torch.randperm` (ours draws the same "
        f"permutation in int32). So ours takes {ratio(first, 'ours', OURS_FLOOR)} x its "
        f"int32 floor and the stock sampler {ratio(first, REFERENCE, FLOOR)} x its int64 "
        f"floor; the int64 draw itself took {spread(first, FLOOR)} over its processes, which "
        "is how far the machine's load moved the times. The peak resident memory above the "
        f"process's baseline is {mb(REFERENCE)} for the stock sampler, {mb('ours')} for "
        f"ours, {mb(FLOOR)} for the int64 draw and {mb(OURS_FLOOR)} for the int32 draw "
        f"(ours / int32 draw {ratio(peak, 'ours', OURS_FLOOR)}, stock / int64 draw "
        f"{ratio(peak, REFERENCE, FLOOR)}). Iterating the rank's whole epoch takes ours "
        f"{ratio(epoch, 'ours', REFERENCE)} x the stock sampler's time. Through a "
        f"DataLoader (batch size {grid.batch_size}, rank {grid.loader_world_size - 1} of "
        f"{grid.loader_world_size}), the first batch arrives after "
        f"{ms(LOADER_QUANTITY, REFERENCE, 0)} (stock) and {ms(LOADER_QUANTITY, 'ours', 0)} "
        f"(ours) with `num_workers=0`, and {ms(LOADER_QUANTITY, REFERENCE, 2)} and "
        f"{ms(LOADER_QUANTITY, 'ours', 2)} with `num_workers=2`."
    )
    for name, status in dropped.items():
        text += f" The {name} variant was not measured anywhere: {status}."
    text += f"\n\n{against_stock(frame)}"
    share, whole = MEMORY_HEADROOM
    method = (
        "How: each cell is measured in a fresh interpreter that imports torch, warms up on "
        f"{WARM_UP_SIZE:,} samples and takes its baseline resident set (psutil); the time "
        "to the first index runs from `iter()` to the first `next()`, the epoch time to "
        "the last index, and the peak is the kernel's high-water mark (`ru_maxrss`) minus "
        "the baseline. A variant whose peak, estimated from the dataset size, would take "
        f"more than {share}/{whole} of the available memory is skipped, never attempted. "
        "The times are one recorded run, not remeasured by `dsampler report`: "
        "`dsampler bench --record` measures them again and replaces the record, and "
        "`dsampler bench` runs the same measurement on any machine, with 10**8 and 10**9 "
        "samples behind `--large`."
    )
    return f"{text}\n\n{method}"


#: The variants :func:`against_stock` compares with the stock sampler, and the times its
#: largest ratios are quoted for.
COMPARED = ("ours", "feistel")
COMPARED_TIMES = ("first index", "epoch")


def worse_than_stock(frame: pd.DataFrame) -> pd.DataFrame:
    """Every measured cell of :data:`COMPARED`, of every quantity (the times, the peak
    memory and the DataLoader's first batch), whose median exceeds the stock sampler's
    in the same cell (``/ stock`` above 1)."""
    rows = with_ratios(frame)
    rows = rows[rows["variant"].isin(COMPARED) & rows["/ stock"].notna()]
    return rows[rows["/ stock"] > 1]


def _compared(frame: pd.DataFrame) -> pd.DataFrame:
    rows = with_ratios(frame)
    keep = rows["quantity"].isin(COMPARED_TIMES) & rows["variant"].isin(COMPARED)
    return rows[keep & rows["/ stock"].notna()]


def cell_words(row: pd.Series) -> str:
    """One cell of :func:`worse_than_stock`, in words, with its ratio."""
    size = f"{int(row['dataset size']):,} samples"
    if row["quantity"] == LOADER_QUANTITY:
        where = (
            f"the DataLoader's first batch at {size}, {int(row['num_workers'])} workers, "
            f"rank {int(row['world size']) - 1} of {int(row['world size'])}"
        )
    else:
        world = int(row["world size"])
        where = f"{_quantity_words(str(row['quantity']))} at {size} on {world} {_ranks(world)}"
    return f"{row['variant']}, {where} ({row['/ stock']:.2f} x)"


def against_stock(frame: pd.DataFrame) -> str:
    """Every recorded cell of ours and feistel against the stock sampler, in words: the
    largest ratio of medians per variant and time (for feistel's epoch, on one rank and
    on more), then which cells, if any, were slower than the stock sampler."""
    rows = _compared(frame)
    if rows.empty:
        return "No cell of ours or feistel was measured against the stock sampler."

    def largest(variant: str, quantity: str, ranks: str = "any") -> str:
        cells = rows[(rows["variant"] == variant) & (rows["quantity"] == quantity)]
        if ranks == "one":
            cells = cells[cells["world size"] == 1]
        elif ranks == "more":
            cells = cells[cells["world size"] > 1]
        if cells.empty:
            return "not measured"
        top = cells.loc[cells["/ stock"].idxmax()]
        world = int(top["world size"])
        return (
            f"{top['/ stock']:.2f} ({int(top['dataset size']):,} samples, {world} {_ranks(world)})"
        )

    parts = [
        "Cell by cell against the stock sampler (ratios of medians over every recorded "
        "dataset size and world size), the largest ratios were: to the first index, ours "
        f"{largest('ours', 'first index')} and feistel {largest('feistel', 'first index')};"
        f" over the rank's whole epoch, ours {largest('ours', 'epoch')}, feistel "
        f"{largest('feistel', 'epoch', 'one')} and, on more ranks, "
        f"{largest('feistel', 'epoch', 'more')}."
    ]
    worse = worse_than_stock(frame)
    if worse.empty:
        parts.append(
            "No cell of either, of any quantity (times, peak memory, the DataLoader's first "
            "batch), was above the stock sampler's."
        )
    else:
        cells = "; ".join(cell_words(row) for _, row in worse.iterrows())
        parts.append(
            f"Above the stock sampler's median, of every quantity (times, peak memory, the "
            f"DataLoader's first batch), {_cells(len(worse))}: {cells}."
        )
    return " ".join(parts)


def _cells(count: int) -> str:
    return "1 cell" if count == 1 else f"{count} cells"


def _ranks(world: int) -> str:
    return "rank" if world == 1 else "ranks"


def _quantity_words(quantity: str) -> str:
    return {
        "first index": "time to the first index",
        "epoch": "whole epoch",
        "peak RSS above baseline": "peak memory",
    }[quantity]
