"""The cost fitted to the recorded CPU step times, and ours balanced by it, as the fit
predicts.

:func:`cpu_fit` fits :func:`samplers.fit_cost` (``kind="padded"``, a quarter of the
batches held out, seed 0) to every non-empty padded batch of the CPU record
(:mod:`studies.tokens.timing`), each batch as its samples' full-scale lengths: the
record's model ran them at 1 / its ``scale``, and a fit on the full-scale lengths is in
the sampler's own units. :func:`budget` is the sampler's ``max_tokens`` under it: the
fitted time of the fullest padded batch (``max_tokens / context`` samples of the
context) turned into a budget by :meth:`~samplers.FittedCost.max_tokens`.

:func:`predicted` gives every padded sampler's epoch, and ours under the fitted cost
(``"fitted"``), as the fit predicts it: each batch's fitted time
(:meth:`~samplers.FittedCost.predict`, 0 for no batch), the whole epoch the sum over
steps of the slowest rank's, the straggler ratio that sum over the sum of the ranks'
mean. Predicted, not measured: the CPU record holds no epoch of ours under the fitted
cost (the device recorder, :mod:`studies.tokens.epoch_timing`, times one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import torch

from samplers import FittedCost, fit_cost
from studies.tokens.batching import Shares
from studies.tokens.costing import PACKED, ours_under
from studies.tokens.epoch_record import GOAL_FASTER, GOAL_STRAGGLER, OURS
from studies.tokens.lengths import CONTEXT, MAX_TOKENS, SEED

__all__ = ["budget", "cpu_fit", "fit_table", "goal", "padded_steps", "predicted"]

#: The fullest padded batch: max_tokens / context samples of the context.
ROWS = MAX_TOKENS // CONTEXT
#: Held out of the fit to check it.
HOLDOUT = 0.25


def padded_steps(recorded: dict[str, Any]) -> tuple[list[list[int]], list[float]]:
    """Every non-empty padded batch of a CPU record (full-scale lengths) and its seconds."""
    batches, seconds = [], []
    for run in recorded["runs"]:
        if run["packed"]:
            continue
        for step_batches, step_seconds in zip(run["batches"], run["seconds"], strict=True):
            for batch, time_ in zip(step_batches, step_seconds, strict=True):
                if batch:
                    batches.append(batch)
                    seconds.append(time_)
    return batches, seconds


def cpu_fit(recorded: dict[str, Any]) -> FittedCost:
    """The padded cost fitted to a CPU record's padded batches (see the module)."""
    batches, seconds = padded_steps(recorded)
    return fit_cost(batches, seconds, "padded", holdout=HOLDOUT, seed=SEED)


def budget(fitted: FittedCost) -> int:
    """``max_tokens`` under ``fitted.cost``: the budget of the fullest padded batch's
    fitted time."""
    return fitted.max_tokens(fitted.predict([CONTEXT] * ROWS))


def fit_table(fitted: FittedCost, source: str) -> pd.DataFrame:
    """The fit in one row: its coefficients, the sampler's cost and budget, and its
    check on the held-out batches."""
    check = fitted.check
    assert check is not None
    return pd.DataFrame(
        [
            {
                "fitted to": source,
                "overhead (s)": fitted.overhead,
                "per token (s)": fitted.per_token,
                "per token² (s)": fitted.per_attention,
                "cost (as a checkpoint records it)": fitted.label,
                "max_tokens": budget(fitted),
                "batches fitted": check.fitted_on,
                "held out": check.batches,
                "held-out R²": check.r2,
                "held-out largest relative error": check.max_relative_error,
                "held-out mean relative error": check.mean_relative_error,
            }
        ]
    )


def _epoch(fitted: FittedCost, shares: Shares, values: list[int]) -> tuple[float, float]:
    steps = max((len(share) for share in shares), default=0)
    slowest = mean = 0.0
    for step in range(steps):
        times = [
            fitted.predict([values[i] for i in share[step]])
            if step < len(share) and share[step]
            else 0.0
            for share in shares
        ]
        slowest += max(times)
        mean += sum(times) / len(times)
    return slowest, (slowest / mean if mean else 1.0)


def predicted(
    fitted: FittedCost,
    shares: Mapping[tuple[str, int, str], tuple[Shares, list[int]]],
    lengths: Mapping[str, torch.Tensor],
) -> pd.DataFrame:
    """Per (data, ranks): ours under the fitted cost and every padded sampler of
    ``shares`` (keyed ``(data, ranks, sampler key)``), their predicted whole epoch and
    straggler ratio (see the module)."""
    rows = []
    configurations = dict.fromkeys((data, ranks) for data, ranks, _ in shares)
    run = ours_under(fitted.cost, budget(fitted))
    for data, ranks in configurations:
        values = lengths[data].tolist()
        mine = run(lengths[data], ranks, 0, SEED)
        found = {"fitted": (mine, values)}
        found |= {
            key: shares[(d, r, key)]
            for d, r, key in shares
            if (d, r) == (data, ranks) and key not in PACKED
        }
        for key, (share, of) in found.items():
            whole, straggler = _epoch(fitted, share, of)
            rows.append(
                {
                    "data": data,
                    "ranks": ranks,
                    "sampler": key,
                    "predicted epoch (s)": whole,
                    "predicted straggler ratio": straggler,
                }
            )
    return pd.DataFrame(rows)


def goal(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (data, ranks) of :func:`predicted`: ours under the fitted cost against the
    padded peer of the shortest predicted epoch, and issue 39's goal (straggler ratio at
    most :data:`~studies.tokens.epoch_record.GOAL_STRAGGLER`, an epoch at least
    :data:`~studies.tokens.epoch_record.GOAL_FASTER` shorter) on these predictions."""
    rows = []
    for (data, ranks), group in frame.groupby(["data", "ranks"], sort=False):
        by = group.set_index("sampler")
        peers = group[~group["sampler"].isin(OURS)]
        peer = peers.loc[peers["predicted epoch (s)"].idxmin()]
        ours = by.loc["fitted"]
        shorter = 1 - ours["predicted epoch (s)"] / peer["predicted epoch (s)"]
        met = ours["predicted straggler ratio"] <= GOAL_STRAGGLER and shorter >= GOAL_FASTER
        rows.append(
            {
                "data": data,
                "ranks": ranks,
                "ours fitted: straggler ratio": ours["predicted straggler ratio"],
                "ours fitted: epoch (s)": ours["predicted epoch (s)"],
                "ours padded: epoch (s)": by.loc["padded", "predicted epoch (s)"],
                "ours quadratic: epoch (s)": by.loc["quadratic", "predicted epoch (s)"],
                "best padded peer": peer["sampler"],
                "its epoch (s)": peer["predicted epoch (s)"],
                "ours fitted shorter by": shorter,
                "goal met (predicted)": "yes" if met else "no",
            }
        )
    return pd.DataFrame(rows)
