"""The benchmark's tables: ratios of medians, and the views a reader looks at.

Guarantee: :func:`with_ratios` divides each measured median by the median of the stock
sampler (``/ stock``) and of bare int64 ``torch.randperm`` (``/ floor``) for the same
quantity, dataset size, world size and ``num_workers``; a ratio is empty (NaN) when
either median is missing or the divisor is not positive. The views only reformat those
numbers; they compute nothing else.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
from tabulate import tabulate

from studies.bench.grid import LOADER_QUANTITY, SAMPLER_QUANTITIES
from studies.bench.variants import FLOOR, REFERENCE, VARIANTS

__all__ = [
    "RATIO_COLUMNS",
    "SHOWN_RATIOS",
    "constant_statuses",
    "formatted",
    "ratio_view",
    "render_text",
    "to_csv_text",
    "to_json_text",
    "value_view",
    "with_ratios",
]

#: The ratio columns :func:`with_ratios` adds: to the stock sampler and to the floor.
RATIO_COLUMNS = {"/ stock": REFERENCE, "/ floor": FLOOR}
#: The ratios the views show, per divisor (the others are reciprocals or 1).
SHOWN_RATIOS = {
    "/ stock": ("ours", "feistel"),
    "/ floor": ("stock", "ours", "randperm int32", "feistel"),
}

_CELL = ["quantity", "dataset size", "world size", "num_workers"]
#: Display units: seconds as milliseconds, bytes as MB (10**6 bytes).
_SCALE = {"s": (1e3, "ms"), "bytes": (1e-6, "MB")}


def with_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (:data:`studies.bench.grid.COLUMNS`) with the :data:`RATIO_COLUMNS` added."""
    result = frame.copy()
    keys = [tuple(row) for row in frame[_CELL].astype(object).itertuples(index=False)]
    medians = dict(zip(zip(keys, frame["variant"], strict=True), frame["median"], strict=True))
    for column, divisor in RATIO_COLUMNS.items():
        result[column] = [
            _ratio(median, medians.get((key, divisor)))
            for key, median in zip(keys, frame["median"], strict=True)
        ]
    return result


def _ratio(value: Any, divisor: Any) -> float:
    if _missing(value) or _missing(divisor) or divisor <= 0:
        return math.nan
    return float(value) / float(divisor)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def constant_statuses(frame: pd.DataFrame) -> dict[str, str]:
    """Variants that were measured nowhere for one reason: variant -> that status."""
    found = {}
    for name, rows in frame.groupby("variant", sort=False):
        statuses = set(rows["status"])
        if len(statuses) == 1 and (status := statuses.pop()) != "ok":
            found[str(name)] = status
    return found


def value_view(frame: pd.DataFrame, quantity: str, *, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per cell, one column per variant: ``median (min..max)`` or the status.

    Variants in ``drop`` are left out (a caller names them elsewhere).
    """
    rows = frame[frame["quantity"] == quantity]
    unit = str(rows["unit"].iloc[0])
    scale, label = _SCALE[unit]
    index = _index(quantity)
    cells = {(*_key(row, index), row["variant"]): _cell(row, scale) for _, row in rows.iterrows()}
    keys = list(dict.fromkeys(_key(row, index) for _, row in rows.iterrows()))
    names = [v.name for v in VARIANTS if v.name not in drop]
    data = [
        {**_labels(index, key), **{f"{name} ({label})": cells[(*key, name)] for name in names}}
        for key in keys
    ]
    return pd.DataFrame(data)


def ratio_view(frame: pd.DataFrame, quantity: str, *, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per cell; ``<variant> / stock`` and ``<variant> / floor`` ratio columns.

    Shown: :data:`SHOWN_RATIOS`, less variants in ``drop`` and columns with no ratio.
    """
    rows = with_ratios(frame)
    rows = rows[rows["quantity"] == quantity]
    index = _index(quantity)
    keys = list(dict.fromkeys(_key(row, index) for _, row in rows.iterrows()))
    ratios = {
        (*_key(row, index), row["variant"], column): row[column]
        for _, row in rows.iterrows()
        for column in RATIO_COLUMNS
    }
    columns = [
        (name, column)
        for column, names in SHOWN_RATIOS.items()
        for name in names
        if name not in drop
    ]
    data = [
        {
            **_labels(index, key),
            **{f"{name} {column}": ratios[(*key, name, column)] for name, column in columns},
        }
        for key in keys
    ]
    view = pd.DataFrame(data)
    empty = [column for column in view.columns if view[column].isna().all()]
    return view.drop(columns=empty)


def render_text(frame: pd.DataFrame, header: str) -> str:
    """The benchmark as plain-text tables: per quantity, the values, then the ratios."""
    parts = [header.rstrip()]
    unavailable = constant_statuses(frame)
    drop = tuple(unavailable)
    for name, status in unavailable.items():
        parts.append(f"{name}: {status}")
    for quantity in (*SAMPLER_QUANTITIES, LOADER_QUANTITY):
        if not (frame["quantity"] == quantity).any():
            continue
        title = _title(frame, quantity)
        values = value_view(frame, quantity, drop=drop)
        ratios = ratio_view(frame, quantity, drop=drop)
        parts.append(f"{title}: median (min..max)\n" + _tabulate(values))
        parts.append(f"{title}: ratios of medians\n" + _tabulate(ratios))
    return "\n\n".join(parts) + "\n"


def to_csv_text(frame: pd.DataFrame) -> str:
    """The tidy table with its ratios as CSV (empty cells where nothing was measured)."""
    return str(with_ratios(frame).to_csv(index=False, lineterminator="\n"))


def to_json_text(frame: pd.DataFrame) -> str:
    """The tidy table with its ratios as a JSON list of row objects (null: not measured)."""
    table = with_ratios(frame)
    records = [
        {column: _plain(value) for column, value in zip(table.columns, row, strict=True)}
        for row in table.itertuples(index=False)
    ]
    lines = ",\n".join(json.dumps(record) for record in records)
    return f"[\n{lines}\n]\n" if lines else "[]\n"


def _plain(value: Any) -> Any:
    if _missing(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def _title(frame: pd.DataFrame, quantity: str) -> str:
    if quantity == LOADER_QUANTITY:
        world = int(frame.loc[frame["quantity"] == quantity, "world size"].iloc[0])
        return f"DataLoader time to first batch (rank {world - 1} of {world})"
    names = {
        "first index": "Time to first index",
        "epoch": "Time for the rank's whole epoch",
        "peak RSS above baseline": "Peak RSS above the process's baseline",
    }
    return names[quantity]


def _index(quantity: str) -> tuple[str, ...]:
    if quantity == LOADER_QUANTITY:
        return ("dataset size", "num_workers")
    return ("dataset size", "world size")


def _key(row: pd.Series, index: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(int(row[column]) for column in index)


def _labels(index: tuple[str, ...], key: tuple[int, ...]) -> dict[str, Any]:
    return {column: f"{value:,}" for column, value in zip(index, key, strict=True)}


def _cell(row: pd.Series, scale: float) -> str:
    if row["status"] != "ok":
        return str(row["status"])
    median, low, high = (float(row[column]) * scale for column in ("median", "min", "max"))
    return f"{_number(median)} ({_number(low)}..{_number(high)})"


def _number(value: float) -> str:
    """Three significant digits, without an exponent for the sizes measured here."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def formatted(view: pd.DataFrame) -> pd.DataFrame:
    """A view with every cell as printed text (ratios with two decimals, ``-`` for none)."""
    return pd.DataFrame(
        [
            {column: _text(value) for column, value in record.items()}
            for record in view.to_dict("records")
        ],
        columns=view.columns,
    )


def _tabulate(view: pd.DataFrame) -> str:
    return str(tabulate(formatted(view), headers="keys", showindex=False, disable_numparse=True))


def _text(value: Any) -> str:
    """A cell as printed: ratios with two decimals, ``-`` where there is none."""
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)
