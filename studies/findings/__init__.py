"""The findings: named, generated sections of the reports, each built from measurements.

Guarantee: every number a finding shows (in its tables, its prose and its pictures) is
computed by its ``build()`` from what the samplers and DataLoaders actually yield, or
from what was measured while they ran; nothing is typed in by hand.

How to add a finding
--------------------
1. Write a module in this package that defines:

   ``NAME: str``
       The report's file stem (lowercase words joined by ``-``), e.g. ``"padding"``:
       the finding is written to ``reports/padding.md`` and its pictures to
       ``reports/padding-<picture>.png``.
   ``TITLE: str``
       One line, the section's heading.
   ``CLAIM: str``
       The claim in one or two sentences. It is static text, so it names the
       configurations it covers but no measured result.
   ``GUARDED_BY: str``
       The test that fails when the claim stops holding, as
       ``"tests/<file>.py::test_<name>"`` (checked to exist by ``tests/test_findings.py``).
   ``build() -> Evidence``
       Runs the measurements and returns the :class:`Evidence`: its tables (DataFrames),
       its prose (an f-string over values read from those tables) and optional
       :class:`Picture` s. It must be deterministic: two calls give equal tables and
       prose, and pictures that render to the same bytes.
   ``SLOW: bool`` (optional, default ``False``)
       ``True`` when ``build()`` takes more than a few seconds (large sizes, real
       processes). The fast staleness test then checks only the section's generated
       header, not its body; ``write_reports`` always builds it.

   A table for a reader shows what varies: the report states columns that hold one
   value in every row in a single line, writes code-named headers in words, and writes
   a table longer than :data:`LONG_TABLE_ROWS` rows to a CSV file, showing the
   ``summary`` the :class:`Table` must then carry.

2. Add the module's name to :data:`MODULES`, where its position is its number in the
   reports.

:func:`modules` imports the registered modules and checks the protocol;
:func:`build` builds one and labels its evidence with the module's metadata.
``observe`` (what ranks receive, via :mod:`studies.simulate`) and ``memory``
(deterministic byte counts) are helpers for findings, not findings themselves.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import pandas as pd
from matplotlib.figure import Figure

__all__ = [
    "LONG_TABLE_ROWS",
    "MODULES",
    "Evidence",
    "Finding",
    "Picture",
    "Table",
    "build",
    "is_slow",
    "modules",
]

#: The registered findings, in report order (module names in this package).
MODULES: tuple[str, ...] = (
    "experiment",
    "set_epoch",
    "set_epoch_timing",
    "manual_seed",
    "padding",
    "drop_last",
    "batch_of_one",
    "tiny_datasets",
    "equal_batches",
    "seed_per_rank",
    "strided_prefix",
    "distributed_evaluation",
    "persistent_workers",
    "cost",
    "real_processes",
    "collective_evaluation",
    "exact_evaluation",
    "zip_collection",
    "wrapped_samplers",
    "tail_policies",
    "resume",
    "speed",
    "guarantees",
    "token_batches",
)

#: Tables with more rows go to CSV files (see :class:`Table`).
LONG_TABLE_ROWS = 30

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_GUARD = re.compile(r"^tests/[A-Za-z0-9_/]+\.py::test_[A-Za-z0-9_]+$")


@dataclass(frozen=True, eq=False)
class Table:
    """One evidence table: a title, the DataFrame, and how to print its floats.

    ``floatfmt`` and ``intfmt`` are tabulate's: one format for every column, or (floats)
    one per column. ``note`` is an optional sentence printed under the title.

    A table longer than :data:`LONG_TABLE_ROWS` rows is written whole to
    ``<finding>-<name>.csv`` and the Markdown shows its ``summary`` instead, so a long
    table needs both ``name`` (lowercase words joined by ``-``) and ``summary``.
    """

    title: str
    frame: pd.DataFrame
    floatfmt: str | Sequence[str] = "g"
    intfmt: str = ""
    note: str = ""
    name: str = ""
    summary: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        if self.name and not _NAME.match(self.name):
            raise ValueError(f"name must be lowercase words joined by '-', got {self.name!r}")
        if self.is_long() and (not self.name or self.summary is None):
            raise ValueError(
                f"table {self.title!r} has {len(self.frame)} rows (more than "
                f"{LONG_TABLE_ROWS}): give it a name for its CSV file and a summary"
            )

    def is_long(self) -> bool:
        """Whether the table goes to a CSV file, with its summary in the Markdown."""
        return len(self.frame) > LONG_TABLE_ROWS


@dataclass(frozen=True, eq=False)
class Picture:
    """One picture: ``draw`` fills a blank matplotlib Figure of ``size`` inches.

    The report renders it with :func:`studies.figures.render_png` to
    ``<finding name>-<name>.png``; ``caption`` is its alt text and caption.
    """

    name: str
    caption: str
    draw: Callable[[Figure], None]
    size: tuple[float, float] = (8.0, 4.0)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"name must be lowercase words joined by '-', got {self.name!r}")


@dataclass(frozen=True, eq=False)
class Evidence:
    """What a finding module's ``build()`` computed: prose, tables and pictures."""

    prose: str
    tables: tuple[Table, ...]
    pictures: tuple[Picture, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [picture.name for picture in self.pictures]
        if len(set(names)) != len(names):
            raise ValueError(f"pictures must have distinct names, got {names}")


@dataclass(frozen=True, eq=False)
class Finding:
    """A built finding: the module's metadata together with its :class:`Evidence`."""

    name: str
    title: str
    claim: str
    guarded_by: str
    evidence: Evidence

    @property
    def prose(self) -> str:
        return self.evidence.prose

    @property
    def tables(self) -> tuple[Table, ...]:
        return self.evidence.tables

    @property
    def pictures(self) -> tuple[Picture, ...]:
        return self.evidence.pictures


def modules() -> list[ModuleType]:
    """The registered finding modules, imported, in report order; checks the protocol."""
    loaded = [importlib.import_module(f"{__name__}.{name}") for name in MODULES]
    names = [module.NAME for module in loaded if _check(module)]
    if len(set(names)) != len(names):
        raise ValueError(f"findings must have distinct NAMEs, got {names}")
    return loaded


def is_slow(module: ModuleType) -> bool:
    """Whether the module declares ``SLOW = True``."""
    return bool(getattr(module, "SLOW", False))


def build(module: ModuleType) -> Finding:
    """Build the module's evidence and label it with the module's metadata."""
    _check(module)
    evidence = module.build()
    if not isinstance(evidence, Evidence):
        raise TypeError(f"{module.__name__}.build() must return Evidence, got {evidence!r}")
    return Finding(module.NAME, module.TITLE, module.CLAIM, module.GUARDED_BY, evidence)


def _check(module: ModuleType) -> bool:
    for attribute in ("NAME", "TITLE", "CLAIM", "GUARDED_BY"):
        value = getattr(module, attribute, None)
        if not isinstance(value, str) or not value.strip():
            raise TypeError(f"{module.__name__}.{attribute} must be a non-empty str, got {value!r}")
    if not _NAME.match(module.NAME):
        raise ValueError(
            f"{module.__name__}.NAME must be lowercase words joined by '-', got {module.NAME!r}"
        )
    if not _GUARD.match(module.GUARDED_BY):
        raise ValueError(
            f"{module.__name__}.GUARDED_BY must look like 'tests/<file>.py::test_<name>', "
            f"got {module.GUARDED_BY!r}"
        )
    if not callable(getattr(module, "build", None)):
        raise TypeError(f"{module.__name__}.build must be a function returning Evidence")
    return True
