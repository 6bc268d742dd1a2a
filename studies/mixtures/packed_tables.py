"""The packed mixtures' tables: every way of :mod:`studies.mixtures.packing` run on the
corpus and measured by :mod:`studies.mixtures.token_measures`.

Every way's epoch is cut to the rows of ours' (``split="long"``), :func:`~studies.mixtures.
packing.ours_rows`, in step order, so that each hands out the same budget of rows: a
way's epoch that is shorter stays as it is. The resume and the reweight happen after
:data:`STEPS_BEFORE` steps; what follows is cut so that the whole run holds the same
budget.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from studies.mixtures.corpus import (
    MAX_LENGTH,
    NEW_TOKEN_WEIGHTS,
    TOKEN_WEIGHTS,
    Shares,
    corpus,
    epoch_rows,
)
from studies.mixtures.packing import WAYS, Ours, ours_rows
from studies.mixtures.token_measures import (
    Stream,
    beyond_even_spread,
    lost_and_repeated,
    prefix_deviation,
    repeated_within_passes,
    step_deviation,
)

__all__ = [
    "OTHER",
    "SPLITS",
    "STEPS_BEFORE",
    "WORLD",
    "mixing_table",
    "rows_table",
    "stream",
]

#: The world size every table is measured on, and the one the state is loaded into.
WORLD, OTHER = 8, 4
#: Steps before the state is saved, or the weights change.
STEPS_BEFORE = 40
#: Ours' choices of ``split`` in the rows table, beyond the two settings of every way.
SPLITS = (128, 64)

WAY, SETTING = "way", "setting"
STEP = "tokens off target within a step (largest)"
PREFIX = "tokens off target at a prefix (largest)"
REPEATED = "tokens repeated within a pass, as handed out"
SPREAD = "tokens handed out beyond an even spread"
LOST = "resumed: tokens lost"
RESUME_REPEATED = "resumed: tokens repeated or added"
REWEIGHT_SPREAD = "reweighted: tokens beyond an even spread"
REWEIGHT_PREFIX = "reweighted: tokens off the new shares at a prefix"
EFFICIENCY = "row efficiency"
OVER = "rows longer than the context"
CUT = "documents cut across rows"
DROPPED = "tokens dropped by packing"
PIECE = "tokens per piece (mean)"
ATTENTION = "attention per token (sum of span² / tokens)"
MIXED = "attention spans holding several documents"


def stream(shares: Shares, limit: int | None = None, before: Shares | None = None) -> Stream:
    """The rows of ``shares`` in step order, after those of ``before`` (if given), the whole
    cut at ``limit`` rows."""
    head_rows, head_steps = epoch_rows(before or [])
    left = None if limit is None else max(limit - len(head_rows), 0)
    rows, steps = epoch_rows(shares, left)
    return Stream.of(corpus(), head_rows + rows, head_steps + [len(head_rows) + s for s in steps])


def _steps(counts: list[int]) -> str:
    """The ranks' steps: one number when every rank takes as many, else the range."""
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}..{high}"


def _row(way: Any) -> dict[str, Any]:
    budget = ours_rows()
    whole = stream(way.epoch(WORLD), budget)
    head, rest = way.resumed(WORLD, OTHER, STEPS_BEFORE)
    lost, repeated = lost_and_repeated(whole, stream(rest, budget, before=head))
    head, after = way.reweighted(WORLD, STEPS_BEFORE, NEW_TOKEN_WEIGHTS)
    return {
        WAY: way.name,
        SETTING: way.setting,
        "steps on each rank": _steps(way.steps(WORLD)),
        STEP: step_deviation(whole, TOKEN_WEIGHTS),
        PREFIX: prefix_deviation(whole, TOKEN_WEIGHTS),
        REPEATED: repeated_within_passes(whole),
        SPREAD: beyond_even_spread(whole),
        LOST: lost,
        RESUME_REPEATED: repeated,
        REWEIGHT_SPREAD: beyond_even_spread(stream(after, budget, before=head)),
        REWEIGHT_PREFIX: prefix_deviation(stream(after, budget), NEW_TOKEN_WEIGHTS),
    }


@functools.cache
def mixing_table(ways: Sequence[Any] = WAYS) -> pd.DataFrame:
    """Token shares, passes, resume and reweighting: one row per way."""
    return pd.DataFrame([_row(way) for way in ways])


@functools.cache
def rows_table(ways: Sequence[Any] = (*WAYS, *(Ours(k) for k in SPLITS))) -> pd.DataFrame:
    """What each way packs: the rows' fill, the documents cut and the tokens dropped, the
    pieces and the attention their spans cost."""
    made = []
    for way in ways:
        # Ours' other splits on one rank: its rows, in order, are the same on any world size.
        rows = stream(way.epoch(WORLD if way in WAYS else 1), ours_rows())
        made.append(
            {
                WAY: way.name,
                SETTING: way.setting,
                "rows": len(rows.rows) - 1,
                EFFICIENCY: rows.efficiency(MAX_LENGTH),
                OVER: rows.rows_over(MAX_LENGTH),
                CUT: rows.documents_cut(),
                DROPPED: way.dropped(),
                PIECE: rows.mean_piece(),
                ATTENTION: rows.attention() / max(len(rows.tokens), 1),
                MIXED: rows.mixed_spans(),
            }
        )
    return pd.DataFrame(made)
