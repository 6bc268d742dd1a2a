"""The recorded mixture benchmark (:mod:`studies.mixture_bench`) as tables and sentences.

Guarantee: every number and quantifier below is read from the record's rows (medians
over fresh processes); nothing is measured here. The speed finding shows these tables
and quotes :func:`prose`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.findings.wording import count_of, plural

__all__ = ["epoch_table", "first_index_table", "prose"]

EPOCH = "whole epoch (s)"
FIRST = "first index (s)"
PEAK = "peak RSS above baseline (MB)"
FIRST_ONLY = ", first index only"


def _rows(record: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(record["rows"])


def epoch_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per (total, world size): each variant's median epoch (ms) and the ratios
    of medians ours / stock, stock / floor and ours / floor."""
    rows = _rows(record)
    rows = rows[rows["quantity"] == EPOCH]
    table = rows.pivot_table(
        index=["total", "world size"], columns="variant", values="median", aggfunc="first"
    )
    out = pd.DataFrame(
        {
            "ours (ms)": table["ours"] * 1e3,
            "stock (ms)": table["stock"] * 1e3,
            "floor (ms)": table["floor"] * 1e3,
            "ours / stock": table["ours"] / table["stock"],
            "stock / floor": table["stock"] / table["floor"],
            "ours / floor": table["ours"] / table["floor"],
        }
    )
    return out.reset_index().rename(columns={"total": "samples"})


def first_index_table(record: dict[str, Any]) -> pd.DataFrame:
    """Ours' first index alone (from building the sampler, in a fresh process) and its
    peak memory above the baseline, per total: median, min and max."""
    rows = _rows(record)
    first = rows[rows["quantity"] == FIRST + FIRST_ONLY].set_index("total")
    peak = rows[rows["quantity"] == PEAK + FIRST_ONLY].set_index("total")
    return (
        pd.DataFrame(
            {
                "world size": first["world size"],
                "first index (ms)": first["median"] * 1e3,
                "min (ms)": first["min"] * 1e3,
                "max (ms)": first["max"] * 1e3,
                "peak RSS above baseline (MB)": peak["median"],
            }
        )
        .reset_index()
        .rename(columns={"total": "samples"})
    )


def prose(record: dict[str, Any], machine: str) -> str:
    """The mixture benchmark in words, from :func:`epoch_table` and
    :func:`first_index_table`."""
    epoch, first = epoch_table(record), first_index_table(record)
    ratios = epoch["ours / stock"]
    fastest, slowest = epoch.loc[ratios.idxmin()], epoch.loc[ratios.idxmax()]
    at_most = int((ratios <= 1).sum())

    def cell(row: pd.Series) -> str:
        world = int(row["world size"])
        return f"{int(row['samples']):,} samples on {world} rank{'s' if world > 1 else ''}"

    small, large = first.iloc[0], first.iloc[-1]
    return (
        f"Mixtures ({record['sources']} sources whose sizes span three orders of "
        f"magnitude, rank W - 1 of W, recorded by `python -m studies.mixture_bench "
        f"--record` on {machine}, {plural(record['threads'], 'torch thread')} per process, "
        f"medians of {plural(record['processes'], 'fresh process', 'fresh processes')}): "
        "over the rank's whole epoch ours took "
        f"from {ratios.min():.2f} x ({cell(fastest)}) to {ratios.max():.2f} x "
        f"({cell(slowest)}) the time of the stock `DistributedSampler` over a "
        f"`ConcatDataset` of the same sources; {count_of(at_most, len(epoch), 'cells')} "
        f"{'was' if at_most == 1 else 'were'} at most the stock sampler's time. Handing "
        "out a held list of the rank's "
        f"indices (the floor) is what neither can beat: the stock sampler took "
        f"{epoch['stock / floor'].min():.2f} to {epoch['stock / floor'].max():.2f} x it, "
        f"ours {epoch['ours / floor'].min():.2f} to {epoch['ours / floor'].max():.2f} x. "
        f"Ours' first index, from building the sampler in a fresh process (its mixing "
        f"period included), came after {small['first index (ms)']:,.1f} ms at "
        f"{int(small['samples']):,} samples and {large['first index (ms)']:,.1f} ms at "
        f"{int(large['samples']):,} samples on {int(large['world size'])} ranks, peaking "
        f"{small['peak RSS above baseline (MB)']:,.1f} MB and "
        f"{large['peak RSS above baseline (MB)']:,.1f} MB above the baseline."
    )
