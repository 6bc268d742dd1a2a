"""The benchmark's picture: time and memory against dataset size, log-log, per world size.

Guarantee: :func:`draw` plots only medians from the tidy table, one panel per quantity
(rows) and world size (columns), one line per variant with a style of its own (colour,
marker, dash and marker size, larger markers drawn first), so a line that coincides with
another stays visible around it. Cells without a measurement leave a gap. The figure's
size depends only on the number of world sizes (:func:`figure_size`).
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from studies.bench.grid import SAMPLER_QUANTITIES
from studies.bench.variants import VARIANTS

__all__ = ["STYLES", "draw", "figure_size"]

#: colour, marker, dash, marker size per variant; sizes shrink in drawing order.
STYLES: dict[str, tuple[str, str, str, float]] = {
    "stock": ("#d62728", "o", "-", 11.0),
    "ours": ("#1f77b4", "s", "--", 9.0),
    "randperm int64": ("#2ca02c", "D", "-.", 7.0),
    "randperm int32": ("#9467bd", "^", ":", 6.0),
    "feistel": ("#ff7f0e", "v", (0, (5, 1, 1, 1)), 5.0),  # type: ignore[dict-item]
}

_YLABELS = {
    "first index": ("time to first index (s)", 1.0),
    "epoch": ("time for the rank's epoch (s)", 1.0),
    "peak RSS above baseline": ("peak RSS above baseline (MB)", 1e-6),
}


def figure_size(world_sizes: int) -> tuple[float, float]:
    """Inches of the figure for ``world_sizes`` columns of panels."""
    return (1.5 + 3.2 * world_sizes, 8.5)


def draw(figure: Figure, frame: pd.DataFrame) -> None:
    """Fill ``figure`` from the tidy table (:data:`studies.bench.grid.COLUMNS`)."""
    rows = frame[frame["quantity"].isin(SAMPLER_QUANTITIES)]
    worlds = sorted(int(world) for world in rows["world size"].unique())
    sizes = sorted(int(size) for size in rows["dataset size"].unique())
    axes = figure.subplots(len(SAMPLER_QUANTITIES), len(worlds), squeeze=False, sharex=True)
    for row, quantity in enumerate(SAMPLER_QUANTITIES):
        label, scale = _YLABELS[quantity]
        for column, world in enumerate(worlds):
            panel = axes[row][column]
            cell = rows[(rows["quantity"] == quantity) & (rows["world size"] == world)]
            for variant in VARIANTS:
                mine = cell[cell["variant"] == variant.name].set_index("dataset size")
                values = [_median(mine, size, scale) for size in sizes]
                colour, marker, dash, size = STYLES[variant.name]
                measured = not all(math.isnan(value) for value in values)
                panel.plot(
                    sizes,
                    values,
                    color=colour,
                    marker=marker,
                    linestyle=dash,
                    markersize=size,
                    markerfacecolor="none" if variant.name == "stock" else colour,
                    linewidth=1.4,
                    label=variant.name if measured else f"{variant.name} (not measured)",
                )
            panel.set_xscale("log")
            panel.set_yscale("log")
            panel.grid(True, which="major", alpha=0.3)
            if row == 0:
                panel.set_title(f"world size {world} (rank {world - 1})")
            if row == len(SAMPLER_QUANTITIES) - 1:
                panel.set_xlabel("dataset size N (samples)")
            if column == 0:
                panel.set_ylabel(label)
    handles, labels = axes[0][0].get_legend_handles_labels()
    # Two entries per column of panels fit across the figure; more would be clipped.
    columns = min(len(labels), 2 * len(worlds))
    figure.legend(handles, labels, loc="outside lower center", ncols=columns, frameon=False)


def _median(rows: pd.DataFrame, size: int, scale: float) -> float:
    if size not in rows.index or rows.loc[size, "status"] != "ok":
        return float("nan")
    value = float(rows.loc[size, "median"]) * scale
    return value if value > 0 else float("nan")
