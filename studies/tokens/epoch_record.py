"""The recorded device epochs (:mod:`studies.tokens.epoch_timing`) read back and reduced to
what the token-costs finding shows.

:func:`newest` finds the newest record in ``studies/data`` (``token-epochs-*.json``,
marked, not a smoke run), or ``None``. :func:`epochs` reduces each run to its whole
epoch: the sum over steps of the slowest rank's seconds, and the straggler ratio (that
sum over the sum of the ranks' mean, a rank without a batch counting 0); :func:`slowdown`
sets each padded sampler's default-backend and padded-to-a-multiple epochs against its
flash one; :func:`goal` checks issue 39's goal for ours under the fitted cost: a
straggler ratio of at most :data:`GOAL_STRAGGLER` and a whole epoch at least
:data:`GOAL_FASTER` shorter than the best padded peer's, both under flash, and whether
ours packed was the fastest of all.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from studies.tokens.epoch_timing import DATA, MARK, PACKED_MODE, PADDED_MODES

__all__ = [
    "GOAL_FASTER",
    "GOAL_STRAGGLER",
    "OURS",
    "epochs",
    "failed",
    "goal",
    "load",
    "newest",
    "slowdown",
]

#: Issue 39's goal for ours under the fitted cost, on the recorded GPU run.
GOAL_STRAGGLER, GOAL_FASTER = 1.03, 0.03
#: Our samplers' keys (the others are peers).
OURS = ("padded", "quadratic", "packed", "fitted")
DEFAULT, FLASH, MULTIPLE = PADDED_MODES


def load(path: Path) -> dict[str, Any]:
    """The record in ``path``; ``ValueError`` naming the file when it is not one."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get(MARK[0]) != MARK[1]:
        raise ValueError(f"{path} is not a recorded epoch timing (no {MARK[0]!r} mark)")
    return data


def newest(directory: Path = DATA) -> tuple[Path, dict[str, Any]] | None:
    """The newest record (by its ``"recorded at"``) in ``directory`` that is not a smoke
    run, with its path; ``None`` when there is none."""
    found = []
    for path in sorted(directory.glob("token-epochs-*.json")):
        recorded = load(path)
        if not recorded["smoke"]:
            found.append((recorded["recorded at"], path, recorded))
    if not found:
        return None
    _, path, recorded = max(found, key=lambda item: item[0])
    return path, recorded


def _epoch(seconds: list[list[float]]) -> tuple[float, float]:
    """(whole epoch, straggler ratio) of per-step, per-rank seconds."""
    slowest = sum(max(step) for step in seconds)
    mean = sum(sum(step) / len(step) for step in seconds)
    return slowest, (slowest / mean if mean else 1.0)


def epochs(recorded: dict[str, Any]) -> pd.DataFrame:
    """One row per run: steps, whole epoch (s), straggler ratio, the backends its batches
    ran on (with counts) and how many of its attention shapes were new to the backend."""
    names = recorded["backends"]
    rows = []
    for run in recorded["runs"]:
        if "error" in run:
            continue  # see failed()
        whole, straggler = _epoch(run["seconds"])
        used = Counter(names[code] for step in run["backend"] for code in step if code >= 0)
        rows.append(
            {
                "data": run["data"],
                "sampler": run["sampler"],
                "mode": run["mode"],
                "steps": len(run["seconds"]),
                "whole epoch (s)": whole,
                "straggler ratio": straggler,
                "backends": ", ".join(f"{name} x{count}" for name, count in sorted(used.items())),
                "shapes new to the backend": sum(map(sum, run["new shape"])),
            }
        )
    return pd.DataFrame(rows)


def failed(recorded: dict[str, Any]) -> list[str]:
    """The runs that failed, as ``"data, sampler, mode: error"``."""
    return [
        f"{run['data']}, {run['sampler']}, {run['mode']}: {run['error']}"
        for run in recorded["runs"]
        if "error" in run
    ]


def slowdown(frame: pd.DataFrame) -> pd.DataFrame:
    """Per data and padded sampler: the default backend's and the padded-to-a-multiple
    epochs over flash's, the default's backends and its shapes new to them."""
    rows = []
    padded = frame[frame["mode"] != PACKED_MODE]
    for (data, sampler), group in padded.groupby(["data", "sampler"], sort=False):
        by = group.set_index("mode")
        if not {DEFAULT, FLASH, MULTIPLE} <= set(by.index):
            continue  # a mode failed: see failed()
        rows.append(
            {
                "data": data,
                "sampler": sampler,
                "flash epoch (s)": by.loc[FLASH, "whole epoch (s)"],
                "default / flash": by.loc[DEFAULT, "whole epoch (s)"]
                / by.loc[FLASH, "whole epoch (s)"],
                f"{MULTIPLE} / flash": by.loc[MULTIPLE, "whole epoch (s)"]
                / by.loc[FLASH, "whole epoch (s)"],
                "default's backends": by.loc[DEFAULT, "backends"],
                "default's new shapes": by.loc[DEFAULT, "shapes new to the backend"],
            }
        )
    return pd.DataFrame(rows)


def goal(frame: pd.DataFrame) -> pd.DataFrame:
    """Per data: ours under the fitted cost (flash) against the best padded peer (flash):
    its straggler ratio, how much shorter its epoch was, whether the goal held, and
    whether ours packed (varlen) was the fastest of every run in flash or varlen."""
    rows = []
    for data, group in frame.groupby("data", sort=False):
        best_mode = group[group["mode"].isin([FLASH, PACKED_MODE])]
        peers = best_mode[~best_mode["sampler"].isin(OURS) & (best_mode["mode"] == FLASH)]
        fitted = best_mode[(best_mode["sampler"] == "fitted") & (best_mode["mode"] == FLASH)]
        packed = best_mode[best_mode["sampler"] == "packed"]
        if peers.empty or fitted.empty:
            continue
        peer = peers.loc[peers["whole epoch (s)"].idxmin()]
        ours = fitted.iloc[0]
        faster = 1 - ours["whole epoch (s)"] / peer["whole epoch (s)"]
        fastest = best_mode.loc[best_mode["whole epoch (s)"].idxmin(), "sampler"]
        rows.append(
            {
                "data": data,
                "ours fitted: straggler ratio": ours["straggler ratio"],
                "ours fitted: epoch (s)": ours["whole epoch (s)"],
                "best padded peer": peer["sampler"],
                "its epoch (s)": peer["whole epoch (s)"],
                "ours fitted shorter by": faster,
                "goal met": "yes"
                if ours["straggler ratio"] <= GOAL_STRAGGLER and faster >= GOAL_FASTER
                else "no",
                "ours packed: epoch (s)": packed["whole epoch (s)"].min()
                if not packed.empty
                else float("nan"),
                "fastest of all": fastest,
            }
        )
    return pd.DataFrame(rows)
