"""Pictures for the reports, rendered to byte-identical PNGs.

Guarantee: :func:`render_png` gives the same bytes for the same drawing on every run:
the Agg canvas is used directly (no pyplot state, no GUI backend), the style is
matplotlib's built-in default plus :data:`STYLE` (a user's matplotlibrc is ignored),
the size and dpi are fixed, and the PNG carries no software or date metadata.

The drawing helpers take plain lists computed by the findings and draw nothing else.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence

import matplotlib
import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

__all__ = ["DPI", "STYLE", "draw_layout", "draw_lines", "render_png"]

#: Dots per inch of every picture.
DPI = 100

#: Settings on top of matplotlib's defaults.
STYLE: dict[str, object] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "figure.facecolor": "white",
}

_PLAIN = "#cfe3f3"
_PADDING = "#f4a261"
_MARKERS = ("o", "s", "^", "D", "v")
_TEXT_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"}
#: Points within this relative distance of another series' point overlap it.
_OVERLAP = 0.03
_LINES = ("-", "--", "-.", ":")
_STEPS = ("#264653", "#2a9d8f", "#8ab17d", "#e9c46a", "#f4a261", "#e76f51", "#9c6644", "#6d597a")


def render_png(draw: Callable[[Figure], None], size: tuple[float, float]) -> bytes:
    """The PNG bytes of a ``size``-inch figure that ``draw`` fills."""
    width, height = size
    if not (width > 0 and height > 0):
        raise ValueError(f"size must be two positive numbers of inches, got {size!r}")
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        figure = Figure(figsize=size, dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def draw_layout(
    figure: Figure,
    order: Sequence[int],
    *,
    ranks: Sequence[int],
    slots: Sequence[int],
    world_size: int,
    padding: Sequence[bool],
    steps: Sequence[int] | None = None,
    title: str = "",
) -> None:
    """Rank-by-slot grid of a padded epoch order: who receives which sample, and where.

    ``order[p]`` is the dataset index at position ``p`` of the padded/trimmed epoch order;
    rank ``ranks[p]`` receives it as the ``slots[p]``-th sample of its share (both as
    :meth:`samplers.plan.EpochPlan.owner` and :meth:`~samplers.plan.EpochPlan.slot` give
    them: this module does no sharding arithmetic of its own). The grid has one row per
    rank ``0 .. world_size - 1`` and shows position ``p`` in row ``ranks[p]``, column
    ``slots[p]``, labelled with the index and, small, the position. ``padding[p]`` marks
    repeated samples (hatched). Cells are coloured by ``steps[p]`` (the training step that
    consumes the position) when given, else plain, with padding in a second colour.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    lengths = {
        "ranks": len(ranks),
        "slots": len(slots),
        "padding": len(padding),
        **({} if steps is None else {"steps": len(steps)}),
    }
    if any(length != len(order) for length in lengths.values()):
        raise ValueError(
            f"every list must have one entry per position ({len(order)}), got {lengths}"
        )
    if any(not 0 <= rank < world_size for rank in ranks) or any(slot < 0 for slot in slots):
        raise ValueError(f"ranks must lie in [0, {world_size}) and slots be non-negative")
    cells = list(zip(ranks, slots, strict=True))
    if len(set(cells)) != len(cells):
        raise ValueError("two positions share one (rank, slot) cell")
    columns = max(max(slots, default=0) + 1, 1)
    axes = figure.add_subplot()
    codes = [[float("nan")] * columns for _ in range(world_size)]
    if steps is None:
        for (rank, slot), padded in zip(cells, padding, strict=True):
            codes[rank][slot] = 1.0 if padded else 0.0
        colours = ListedColormap([_PLAIN, _PADDING])
        norm = BoundaryNorm([-0.5, 0.5, 1.5], colours.N)
    else:
        for (rank, slot), step in zip(cells, steps, strict=True):
            codes[rank][slot] = float(step)
        count = max(steps, default=0) + 1
        colours = ListedColormap([_STEPS[step % len(_STEPS)] for step in range(count)])
        norm = BoundaryNorm([step - 0.5 for step in range(count + 1)], colours.N)
        for step in range(count):
            axes.bar(0, 0, color=_STEPS[step % len(_STEPS)], label=f"step {step + 1}")
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes.imshow(codes, cmap=colours, norm=norm, aspect="auto")
    text_colour = "black" if steps is None else "white"
    for position, (index, (rank, slot)) in enumerate(zip(order, cells, strict=True)):
        # On a hatched cell the digits sit on a plain box drawn above the hatching.
        box = _TEXT_BOX if padding[position] else None
        colour = "black" if padding[position] else text_colour
        axes.text(
            slot,
            rank,
            str(index),
            ha="center",
            va="center",
            fontsize=11,
            color=colour,
            fontweight="bold",
            bbox=box,
            zorder=3,
        )
        axes.text(
            slot + 0.45,
            rank + 0.42,
            f"p{position}",
            ha="right",
            va="bottom",
            fontsize=7,
            color=colour,
            bbox=box,
            zorder=3,
        )
        if padding[position]:
            axes.add_patch(
                Rectangle(
                    (slot - 0.5, rank - 0.5), 1, 1, fill=False, hatch="//", linewidth=0, zorder=2
                )
            )
    axes.set_xticks(range(columns), [str(column) for column in range(columns)])
    axes.set_yticks(range(world_size), [str(rank) for rank in range(world_size)])
    axes.set_xticks([column - 0.5 for column in range(1, columns)], minor=True)
    axes.set_yticks([rank - 0.5 for rank in range(1, world_size)], minor=True)
    axes.grid(which="minor", color="white", linewidth=2)
    axes.tick_params(which="minor", length=0)
    axes.set_xlabel("sample number in the rank's share (p: position in the epoch order)")
    axes.set_ylabel("rank")
    if title:
        axes.set_title(title)


def draw_lines(
    figure: Figure,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    xticks: Sequence[float] | None = None,
) -> None:
    """One line with markers per series over the shared ``x`` values; none hidden.

    A series that a later one overlaps (at half the points or more, the two values within
    3 % of each other) is drawn wide and translucent underneath, so it still shows around
    the later one, whose legend entry names it (and at how many points, if not all).
    Single crossings are told apart by marker shape. The legend sits below the axes.
    """
    axes = figure.add_subplot()
    items = list(series.items())
    for label, values in items:
        if len(values) != len(x):
            raise ValueError(f"series {label!r} must have {len(x)} values, got {len(values)}")
    enough = max(1, (len(x) + 1) // 2)  # overlapping at half the points or more
    for number, (label, values) in enumerate(items):
        notes = []
        for name, other in items[:number]:
            close = _close_points(values, other)
            if close == len(x):
                notes.append(name)
            elif close >= enough:
                notes.append(f"{name} at {close} of {len(x)} points")
        covered = any(_close_points(values, other) >= enough for _, other in items[number + 1 :])
        shown = f"{label} (overlaps {'; '.join(notes)})" if notes else label
        axes.plot(
            x,
            values,
            marker=_MARKERS[number % len(_MARKERS)],
            linestyle=_LINES[number % len(_LINES)],
            linewidth=4.5 if covered else 1.5,
            markersize=10 if covered else 5,
            alpha=0.6 if covered else 1.0,
            label=shown,
            zorder=2 + number,
        )
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    if logx:
        axes.set_xscale("log")
    if logy:
        axes.set_yscale("log")
    if xticks is not None:
        axes.set_xticks(list(xticks), [f"{tick:g}" for tick in xticks])
        axes.minorticks_off()
    longest = max((len(text) for text in axes.get_legend_handles_labels()[1]), default=0)
    axes.legend(
        frameon=False,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncols=1 if longest > 40 else 2,
    )
    if title:
        axes.set_title(title)


def _close_points(values: Sequence[float], other: Sequence[float]) -> int:
    """At how many points ``values`` lie within :data:`_OVERLAP` (relative) of ``other``."""
    return sum(
        abs(a - b) <= _OVERLAP * max(abs(a), abs(b)) for a, b in zip(values, other, strict=True)
    )
