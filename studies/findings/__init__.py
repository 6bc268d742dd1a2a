"""The findings: named, generated sections of the reports, each built from measurements.

Guarantee: every number a finding shows (in its claim, its prose, its tables and its
pictures) is computed by its ``build()`` from what the samplers and DataLoaders actually
yield, or from what was measured while they ran; nothing is typed in by hand. So are the
quantifiers of its claim and prose ("every", "none", "only"): they come from counts over
its tables (:mod:`studies.findings.wording`), so a sentence never says more than its
table shows, and the test named by ``GUARDED_BY`` states each claim's condition against
the table, so a claim that stops holding fails the build.

How to add a finding
--------------------
1. Write a module in this package that defines:

   ``NAME: str``
       The report's file stem (lowercase words joined by ``-``), e.g. ``"padding"``:
       the finding is written to ``reports/padding.md`` and its pictures to
       ``reports/padding-<picture>.png``.
   ``TITLE: str``
       One line, the section's heading. It names the subject, not a measured result.
   ``GUARDED_BY: str``
       The test that fails when the claim stops holding, as
       ``"tests/<file>.py::test_<name>"`` (checked to exist by ``tests/test_findings.py``).
   ``build() -> Evidence``
       Runs the measurements and returns the :class:`Evidence`: its tables (DataFrames),
       its claim and prose (sentences over values read from those tables), optional
       :class:`Picture` s, and optionally ``facts``: the named values other parts of the
       report (:mod:`studies.answers`) read, computed from the same tables. It must be
       deterministic: two calls give equal tables, claim and prose, and pictures that
       render to the same bytes.
   ``SLOW: bool`` (optional, default ``False``)
       ``True`` when ``build()`` takes more than a few seconds (large sizes, real
       processes). The fast staleness test then checks only the section's generated
       header, not its body; ``write_reports`` always builds it.
   ``SECONDS: int`` (optional, default 1)
       Roughly how long ``build()`` takes: the report starts the longest parts first, so
       that the side-by-side build is not left waiting on one that started last.

   A table for a reader shows what varies: the report states columns that hold one
   value in every row in a single line, writes code-named headers in words, and writes
   a table longer than :data:`LONG_TABLE_ROWS` rows to a CSV file, showing the
   ``summary`` the :class:`Table` must then carry.

2. Add the module's name to :data:`MODULES`, where its position is its number in the
   reports.

:func:`modules` imports the registered modules and checks the protocol;
:func:`build` builds one and labels its evidence with the module's metadata.
``observe`` (what ranks receive, via :mod:`studies.core.simulate`), ``memory``
(deterministic byte counts), ``wording`` (numbers in sentences), ``mixture_record``
(the recorded mixture benchmark as tables and sentences), ``packed_mixture_words`` (the
packed mixtures in words) and ``packed_record`` (the recorded packed benchmark) are
helpers for findings, not findings themselves.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

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
    "expected_seconds",
    "facts_of",
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
    "zip_and_truncate",
    "wrapping_samplers",
    "tail_policies",
    "resume",
    "speed",
    "guarantees",
    "mesh_sharding",
    "frameworks",
    "token_batches",
    "token_costs",
    "mixtures",
    "engines",
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

    The report renders it with :func:`studies.common.figures.render_png` to
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
    """What a finding module's ``build()`` computed: claim, prose, tables and pictures.

    ``claim`` is one or two sentences; ``facts`` is whatever the module exports for other
    parts of the report (typically a frozen dataclass of values read from the tables).
    """

    claim: str
    prose: str
    tables: tuple[Table, ...]
    pictures: tuple[Picture, ...] = field(default=())
    facts: object = None

    def __post_init__(self) -> None:
        if not self.claim.strip():
            raise ValueError("claim must be a non-empty sentence")
        names = [picture.name for picture in self.pictures]
        if len(set(names)) != len(names):
            raise ValueError(f"pictures must have distinct names, got {names}")


@dataclass(frozen=True, eq=False)
class Finding:
    """A built finding: the module's metadata together with its :class:`Evidence`."""

    name: str
    title: str
    guarded_by: str
    evidence: Evidence

    @property
    def claim(self) -> str:
        return self.evidence.claim

    @property
    def facts(self) -> object:
        return self.evidence.facts

    @property
    def prose(self) -> str:
        return self.evidence.prose

    @property
    def tables(self) -> tuple[Table, ...]:
        return self.evidence.tables

    @property
    def pictures(self) -> tuple[Picture, ...]:
        return self.evidence.pictures


def facts_of(findings: Mapping[str, Finding], module: ModuleType) -> Any:
    """The facts the finding of ``module`` exported (an instance of ``module.Facts``).

    Raises ``KeyError`` naming the finding when it was not built, and ``TypeError`` when
    its facts are not the module's ``Facts``.
    """
    name = module.NAME
    if name not in findings:
        raise KeyError(f"the finding {name!r} is needed but was not built")
    found = findings[name].facts
    if not isinstance(found, module.Facts):
        raise TypeError(f"{name}'s facts must be a {module.__name__}.Facts, got {found!r}")
    return found


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


def expected_seconds(module: ModuleType) -> int:
    """The module's ``SECONDS`` hint (1 when it declares none)."""
    return int(getattr(module, "SECONDS", 1))


def build(module: ModuleType) -> Finding:
    """Build the module's evidence and label it with the module's metadata."""
    _check(module)
    evidence = module.build()
    if not isinstance(evidence, Evidence):
        raise TypeError(f"{module.__name__}.build() must return Evidence, got {evidence!r}")
    return Finding(module.NAME, module.TITLE, module.GUARDED_BY, evidence)


def _check(module: ModuleType) -> bool:
    for attribute in ("NAME", "TITLE", "GUARDED_BY"):
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
