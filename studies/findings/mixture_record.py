"""The recorded mixture benchmark (:mod:`studies.mixtures.bench`) as tables and sentences.

Guarantee: every number and quantifier below is read from the record's rows (medians
over fresh processes); nothing is measured here. The speed finding shows these tables
and quotes :func:`prose`; the mixtures finding shows :func:`ways_table` and quotes
:func:`ways_prose`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.findings import Table
from studies.findings.wording import count_of, joined, plural

__all__ = ["epoch_table", "first_index_table", "prose", "ways_prose", "ways_table"]

EPOCH = "whole epoch (s)"
FIRST = "first index (s)"
PEAK = "peak RSS above baseline (MB)"
FIRST_ONLY = ", first index only"
SKIPPED = "skipped"
TIMEOUT = "timeout (s)"
WAY = "way of mixing"


def first_index_column(total: int) -> str:
    """The :func:`ways_table` column of the first index (ms) at ``total`` samples."""
    return f"first index at {total:,} (ms)"


def peak_column(total: int) -> str:
    """The :func:`ways_table` column of the peak above the baseline (MB) at ``total``."""
    return f"peak at {total:,} (MB)"


def skipped_cell(timeout: float) -> str:
    """A :func:`ways_table` cell of a way whose first process took over ``timeout`` s."""
    return f"over {timeout:g} s (skipped)"


def _cell(value: float) -> str:
    """A measured :func:`ways_table` cell: text, so that a column with skipped cells shows
    every number alike."""
    return f"{value:.2f}"


def _ways(record: dict[str, Any]) -> pd.DataFrame:
    """The record's ways rows (a ``timeout (s)`` column even when none was skipped)."""
    rows = pd.DataFrame(record["ways"])
    if TIMEOUT not in rows:
        rows[TIMEOUT] = float("nan")
    return rows


def ways_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per way of mixing (in the record's order): the median time (ms) and peak
    resident memory above the baseline (MB) to its first index at each total, as text to
    two decimals, or :func:`skipped_cell` where its first process took over the timeout."""
    rows = _ways(record)
    out = pd.DataFrame(index=pd.Index(list(dict.fromkeys(rows["variant"])), name=WAY))
    for total in dict.fromkeys(rows["total"]):
        at = rows[rows["total"] == total]
        first = at[at["quantity"] == FIRST].set_index("variant")["median"] * 1e3
        peak = at[at["quantity"] == PEAK].set_index("variant")["median"]
        skipped = at[at["quantity"] == SKIPPED].set_index("variant")[TIMEOUT]
        first_cells: pd.Series = first.map(_cell)
        peak_cells: pd.Series = peak.map(_cell)
        for name, timeout in skipped.items():
            first_cells[name] = peak_cells[name] = skipped_cell(timeout)
        out[first_index_column(int(total))] = first_cells
        out[peak_column(int(total))] = peak_cells
    return out.reset_index()


def ways_evidence_table(record: dict[str, Any]) -> Table:
    """:func:`ways_table` as the mixtures finding's table, with how it was measured."""
    world = int(record["ways"][0]["world size"])
    return Table(
        "Time and memory to the first index, by way of mixing (recorded)",
        ways_table(record),
        floatfmt=".2f",
        note=(
            f"Rank {world - 1} of {world}, from building the sampler to its first index, the "
            "sources built before the clock; peak: resident memory above the baseline; "
            f"medians of {plural(record['processes'], 'fresh process', 'fresh processes')}, "
            "recorded by `python -m studies.mixture_bench --record`."
        ),
    )


def _facts(record: dict[str, Any]) -> str:
    """The recording machine's facts, as the speed finding writes them."""
    return ", ".join(f"{name} {value}" for name, value in record["machine"].items())


def _measured(table: pd.DataFrame, column: str) -> pd.Series:
    """The column's measured cells (skipped ones left out), as floats, by way."""
    cells = pd.to_numeric(table.set_index(WAY)[column], errors="coerce")
    return cells.dropna().astype(float)


def ways_prose(record: dict[str, Any], ours: str) -> str:
    """:func:`ways_table` in words: at each total, where ``ours`` (its name) stands among
    the ways measured, the others' range, and the ways skipped."""
    table = ways_table(record)
    totals = [int(t) for t in dict.fromkeys(_ways(record)["total"])]
    ways = len(table)
    rows = _ways(record)
    sentences = []
    for total in totals:
        first = _measured(table, first_index_column(total))
        peak = _measured(table, peak_column(total))
        others, others_peak = first.drop(ours), peak.drop(ours)
        sooner = int((others < first[ours]).sum())
        sentence = (
            f"At {total:,} samples ours came after {first[ours]:,.2f} ms, peaking "
            f"{peak[ours]:,.1f} MB above the baseline"
        )
        if len(others):
            sentence += (
                f"; {count_of(sooner, len(others), 'other ways measured')} came sooner; "
                f"they took from {others.min():,.2f} ms ({others.idxmin()}) to "
                f"{others.max():,.2f} ms ({others.idxmax()}), peaking up to "
                f"{others_peak.max():,.1f} MB ({others_peak.idxmax()})"
            )
        skipped = rows[(rows["total"] == total) & (rows["quantity"] == SKIPPED)]
        if len(skipped):
            sentence += (
                f"; {count_of(len(skipped), ways, 'ways')} took over "
                f"{skipped[TIMEOUT].max():g} s and "
                f"{'was' if len(skipped) == 1 else 'were'} skipped: "
                f"{joined(skipped['variant'])}"
            )
        sentences.append(sentence + ".")
    return (
        "Time and memory to the first index (recorded by `python -m studies.mixture_bench "
        f"--record` on {_facts(record)}, rank {record['ways'][0]['world size'] - 1} of "
        f"{record['ways'][0]['world size']}, the finding's sources scaled to each total, "
        "built before the clock; medians of "
        f"{plural(record['processes'], 'fresh process', 'fresh processes')} on "
        f"{plural(record['threads'], 'torch thread')}): " + " ".join(sentences)
    )


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


def _by_world(epoch: pd.DataFrame) -> str:
    """Ours / stock at each world size (largest first), every size listed, and how many
    sizes were at most the stock sampler's time."""
    parts = []
    for world in sorted(set(epoch["world size"]), reverse=True):
        at = epoch[epoch["world size"] == world].sort_values("samples")
        ratios = at["ours / stock"]
        at_most = int((ratios <= 1).sum())
        listed = joined(f"{ratio:.2f} x" for ratio in ratios)
        sizes = joined(f"{int(samples):,}" for samples in at["samples"])
        parts.append(
            f"on {plural(int(world), 'rank')} (rank {int(world) - 1}) {listed} at {sizes} "
            f"samples, {count_of(at_most, len(at), 'sizes')} at most its time"
        )
    return "; ".join(parts)


def prose(record: dict[str, Any], machine: str) -> str:
    """The mixture benchmark in words, from :func:`epoch_table` and
    :func:`first_index_table`."""
    epoch, first = epoch_table(record), first_index_table(record)
    small, large = first.iloc[0], first.iloc[-1]
    return (
        f"Mixtures ({record['sources']} sources whose sizes span three orders of "
        f"magnitude, rank W - 1 of W, recorded by `python -m studies.mixture_bench "
        f"--record` on {machine}, {plural(record['threads'], 'torch thread')} per process, "
        f"medians of {plural(record['processes'], 'fresh process', 'fresh processes')}): "
        "over the rank's whole epoch, ours took, as a multiple of the time of the stock "
        f"`DistributedSampler` over a `ConcatDataset` of the same sources, {_by_world(epoch)}. "
        "Handing out a held list of the rank's "
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
