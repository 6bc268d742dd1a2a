"""The guarantee matrix's search: the full one, recorded, and the cheaper one the report runs.

The full search is ``dsampler check``'s (:func:`samplers.testing.check_guarantee` with its
defaults) of every guarantee on every column of :data:`studies.kit.peers.COLUMNS`: minutes
on two cores. :data:`RECORD` holds what it found, cell by cell (``holds``, the shrunk
configuration and the counterexample as the report shows it), with the machine and
versions it ran on; ``python -m studies.kit.search_record`` re-measures it.

The report runs :func:`search` with ``full=False``, which finds every counterexample the
full search found, at a fraction of the cost. For each cell:

* the counterexamples the full search found for the guarantee are tried first
  (:func:`known`: this sampler's own, then the other samplers', smallest first); the first
  that violates it is made smaller as the search makes a found one smaller, so the full
  search's own counterexample comes back unchanged;
* where the full search found none (the guarantee held, or does not apply), hypothesis
  generates :func:`examples` configurations: a quarter of the full search's, at least
  :data:`FEWEST`;
* where it found one and none of the known ones violates any more (the sampler changed),
  the full search runs.

Every cell is still computed by running the check on the sampler as it is now; the record
only says where to look first. ``tests/test_guarantee_matrix.py`` checks that the report's
matrix shows every counterexample of the record, and re-runs the full search on a sample
of cells to compare with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from samplers import testing
from studies.common import records
from studies.common.extras import require
from studies.common.parts import spawned_pool
from studies.kit.cli import counterexample_text
from studies.kit.peers import COLUMNS, Column

__all__ = [
    "COMMAND",
    "FEWEST",
    "RECORD",
    "Cell",
    "check_cell",
    "examples",
    "known",
    "load",
    "record",
    "search",
]

#: The command that re-measures :data:`RECORD`.
COMMAND = "python -m studies.kit.search_record"
#: The full search's outcome, cell by cell.
RECORD = records.DATA / "guarantee-search.json"
#: The fewest configurations the cheaper search generates where the full search found none.
FEWEST = 2
#: The cheaper search generates this fraction of the full search's configurations there.
FRACTION = 4


@dataclass(frozen=True)
class Cell:
    """The full search's outcome for one sampler and guarantee."""

    sampler: str
    guarantee: str
    #: True: held; False: violated; None: not supported.
    holds: bool | None
    #: When violated, the configuration it shrank to (fields of ``Configuration``).
    configuration: dict[str, Any] | None
    #: When violated, the counterexample as the matrix shows it.
    counterexample: str
    #: Configurations the search tried.
    tried: int


def full_examples(guarantee: str) -> int:
    """The configurations the full search generates for ``guarantee`` (at most)."""
    default = testing.EXAMPLES[False]
    return min(default, testing.REGISTRY[guarantee].max_examples or default)


def examples(guarantee: str) -> int:
    """The configurations the cheaper search generates where the full search found none."""
    return max(FEWEST, full_examples(guarantee) // FRACTION)


def known(cells: Mapping[tuple[str, str], Cell], sampler: str, guarantee: str) -> list[Any]:
    """The configurations to try first: the full search's counterexample of this cell,
    then those of the other samplers for the same guarantee, smallest first, each once."""
    own = cells.get((sampler, guarantee))
    others = sorted(
        (
            cell.configuration
            for (name, found), cell in cells.items()
            if found == guarantee and name != sampler and cell.configuration is not None
        ),
        key=lambda c: tuple(c[name] for name in _ORDER),
    )
    first = [own.configuration] if own is not None and own.configuration is not None else []
    distinct: list[dict[str, Any]] = []
    for configuration in [*first, *others]:
        if configuration not in distinct:
            distinct.append(configuration)
    return [testing.Configuration(**configuration) for configuration in distinct]


#: The fields of a configuration, the ones the search makes smaller first.
_ORDER = (
    "dataset_size",
    "world_size",
    "batch_size",
    "epoch",
    "taken",
    "seed",
    "other_world_size",
)


def check_cell(
    column: Column,
    guarantee: str,
    *,
    full: bool,
    cells: Mapping[tuple[str, str], Cell],
    fresh: Mapping[str, Any] | None,
) -> testing.Result:
    """One cell: the full search, or the cheaper one (see the module's docstring)."""
    if full:
        return testing.check_guarantee(column.factory, guarantee, fresh=fresh)
    first = known(cells, column.name, guarantee)
    result = testing.check_guarantee(
        column.factory, guarantee, fresh=fresh, first=first, examples=examples(guarantee)
    )
    recorded = cells.get((column.name, guarantee))
    if result.holds is False or recorded is None or recorded.holds is not False:
        return result
    # The full search found a counterexample that no longer violates: search in full.
    return testing.check_guarantee(column.factory, guarantee, fresh=fresh)


def check_column(
    name: str,
    full: bool,
    cells: Mapping[tuple[str, str], Cell],
    fresh: Mapping[str, Any] | None,
) -> list[testing.Result]:
    """Every guarantee of the column named ``name``, in the kit's order (run in a worker)."""
    column = next(column for column in COLUMNS if column.name == name)
    testing.validated(column.factory)
    return [
        check_cell(column, guarantee, full=full, cells=cells, fresh=fresh)
        for guarantee in testing.GUARANTEES
    ]


def search(
    columns: Sequence[Column] = COLUMNS,
    *,
    full: bool = False,
    cells: Mapping[tuple[str, str], Cell] | None = None,
) -> dict[str, list[testing.Result]]:
    """Every column's results, by name, in the kit's guarantee order, computed in parallel
    processes (each check is deterministic, so the processes only make it quicker).

    ``full=False`` (the report): the cheaper search, guided by ``cells`` (default: the
    record's). Raises :class:`studies.common.extras.MissingExtra` when a peer library is
    not installed: a missing peer fails the search, it never drops a column.
    """
    require("peers")
    if cells is None:
        cells = {} if full else load()
    names = [column.name for column in columns]
    # One fresh interpreter for every column's determinism check, not one per column.
    references = [
        reference for column in columns if (reference := testing.reference(column.factory))
    ]
    try:
        fresh: dict[str, object] | None = testing.fresh_outputs(references)
    except (RuntimeError, subprocess.TimeoutExpired):
        fresh = None  # each column's check then starts a fresh process of its own
    workers = max(1, min(len(names), os.cpu_count() or 1))
    arguments = ([full] * len(names), [cells] * len(names), [fresh] * len(names))
    if workers == 1:
        return {name: check_column(name, full, cells, fresh) for name in names}
    with spawned_pool(workers) as pool:
        found = pool.map(check_column, names, *arguments)
        return dict(zip(names, found, strict=True))


def cells_of(results: Mapping[str, Sequence[testing.Result]]) -> list[Cell]:
    """The record's cells from :func:`search`'s results."""
    return [
        Cell(
            name,
            result.guarantee,
            result.holds,
            result.configuration,
            counterexample_text(result.counterexample),
            result.examples,
        )
        for name, found in results.items()
        for result in found
    ]


def record() -> dict[str, Any]:
    """Run the full search on every column: the record's content (minutes)."""
    cells = cells_of(search(COLUMNS, full=True))
    distributions = sorted({column.distribution for column in COLUMNS if column.distribution})
    return {
        "machine": records.machine(),
        "versions": records.versions("hypothesis", *distributions),
        "search": {
            "guarantees": list(testing.GUARANTEES),
            "examples": {guarantee: full_examples(guarantee) for guarantee in testing.GUARANTEES},
            "derandomized": True,
        },
        "cells": [
            {
                "sampler": cell.sampler,
                "guarantee": cell.guarantee,
                "holds": cell.holds,
                "configuration": cell.configuration,
                "counterexample": cell.counterexample,
                "tried": cell.tried,
            }
            for cell in cells
        ],
    }


def load(path: Path = RECORD) -> dict[tuple[str, str], Cell]:
    """The recorded cells by (sampler, guarantee); ``RecordError`` naming the file when it
    is not the record."""
    data = records.load(path, COMMAND)
    return {(cell["sampler"], cell["guarantee"]): Cell(**cell) for cell in data["cells"]}


def frame_of(results: Sequence[testing.Result]) -> pd.DataFrame:
    """Results as :func:`samplers.testing.check` returns them."""
    columns = ["guarantee", "holds", "counterexample", "detail", "experience"]
    return pd.DataFrame(
        [{column: getattr(result, column) for column in columns} for result in results],
        columns=columns,
    )


if __name__ == "__main__":
    records.save(RECORD, COMMAND, record())
    print(f"wrote {RECORD}", file=sys.stderr)
