"""The tidy table (``studies.core.simulate.COLUMNS``) as CSV or JSON, in one place.

The CLI's ``--format csv|json`` and the report's ``cases.csv`` both come from here, so
the two can never disagree on column order or on how a batch's indices are written.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from studies.core.simulate import COLUMNS

__all__ = ["to_csv_text", "to_json_records", "to_json_text", "to_labelled_csv_text"]


def _check(frame: pd.DataFrame, columns: tuple[str, ...] = COLUMNS) -> None:
    if list(frame.columns) != list(columns):
        raise ValueError(
            f"frame must have exactly the tidy columns {list(columns)}, got {list(frame.columns)}"
        )


def to_csv_text(frame: pd.DataFrame) -> str:
    """CSV with a header of exactly ``COLUMNS``, no index, ``\\n`` line ends.

    ``indices`` is written as a JSON list string (``json.dumps``, e.g. ``"[4, 1, 2]"``);
    booleans as ``True``/``False``. Raises ``ValueError`` when the columns differ.
    """
    _check(frame)
    return _csv(frame)


def to_labelled_csv_text(frame: pd.DataFrame, label: str) -> str:
    """As :func:`to_csv_text`, for a tidy table led by one ``label`` column (e.g. ``case``)."""
    _check(frame, (label, *COLUMNS))
    return _csv(frame)


def _csv(frame: pd.DataFrame) -> str:
    encoded = frame.assign(indices=[json.dumps(list(map(int, i))) for i in frame["indices"]])
    return encoded.to_csv(index=False, lineterminator="\n")


def to_json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per row with exactly the keys ``COLUMNS`` in order, plain Python values.

    ``indices`` is a list of ints. Raises ``ValueError`` when the columns differ.
    """
    _check(frame)
    values = {column: frame[column].tolist() for column in COLUMNS}
    values["indices"] = [[int(index) for index in indices] for indices in values["indices"]]
    return [
        dict(zip(COLUMNS, row, strict=True))
        for row in zip(*(values[column] for column in COLUMNS), strict=True)
    ]


def to_json_text(frame: pd.DataFrame) -> str:
    """A JSON list of :func:`to_json_records`, one row object per line, ending in a newline."""
    lines = ",\n".join(json.dumps(record) for record in to_json_records(frame))
    return f"[\n{lines}\n]\n" if lines else "[]\n"
