"""The recorded packed benchmark (:mod:`studies.bench.packed`) as tables and sentences, for
the speed finding.

Guarantee: every number and quantifier is read from the record's rows (medians over fresh
processes); nothing is measured here. Without a record, :func:`prose` says so and names
the command that makes one, and :func:`tables` gives none.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.bench import packed as packed_bench
from studies.findings import Table
from studies.findings.wording import count_of, joined, plural

__all__ = [
    "FIRST_BATCH_TARGET",
    "FIRST_RATIO",
    "RATIO_TARGET",
    "epoch_table",
    "first_table",
    "prose",
    "tables",
]

#: The targets the sentences count against (issues 37 and 40): a whole epoch, and the
#: packed mixture's first batch, within this multiple of the reference's, and a first
#: batch at the largest size within this (s).
RATIO_TARGET = 2.0
FIRST_BATCH_TARGET = 0.2
COMMAND = "python -m studies.bench.packed --record"
TOKEN, PACKED, MIXTURE = packed_bench.VARIANTS
FIRST, EPOCH, PEAK = packed_bench.QUANTITIES


def _medians(record: dict[str, Any], quantity: str) -> pd.DataFrame:
    """The medians of ``quantity``: one row per size, one column per variant."""
    rows = pd.DataFrame(record["rows"])
    rows = rows[rows["quantity"] == quantity]
    table = rows.pivot_table(index="size", columns="variant", values="median", aggfunc="first")
    return table.reindex(columns=[v for v in packed_bench.VARIANTS if v in set(table.columns)])


def epoch_table(record: dict[str, Any]) -> pd.DataFrame:
    """The rank's whole epoch (ms) of each variant per size, and the ratios of medians
    packed / token, packed mixture / token and packed mixture / packed."""
    medians = _medians(record, EPOCH)
    out = pd.DataFrame({f"{v} (ms)": medians[v] * 1e3 for v in medians.columns})
    if TOKEN in medians and PACKED in medians:
        out["packed / token"] = medians[PACKED] / medians[TOKEN]
    if TOKEN in medians and MIXTURE in medians:
        out["packed mixture / token"] = medians[MIXTURE] / medians[TOKEN]
    if PACKED in medians and MIXTURE in medians:
        out["packed mixture / packed"] = medians[MIXTURE] / medians[PACKED]
    return out.reset_index().rename(columns={"size": "samples"})


#: The first-batch table's ratio column, counted against :data:`RATIO_TARGET`.
FIRST_RATIO = "packed mixture / packed: first batch"


def first_table(record: dict[str, Any]) -> pd.DataFrame:
    """The first batch (ms, from building the sampler) of each variant per size, the
    ratio of medians packed mixture / packed, and the peak resident memory above the
    baseline (MB)."""
    first, peak = _medians(record, FIRST), _medians(record, PEAK)
    out = pd.DataFrame({f"{v}: first batch (ms)": first[v] * 1e3 for v in first.columns})
    if PACKED in first and MIXTURE in first:
        out[FIRST_RATIO] = first[MIXTURE] / first[PACKED]
    for v in peak.columns:
        out[f"{v}: peak (MB)"] = peak[v]
    return out.reset_index().rename(columns={"size": "samples"})


def _how(record: dict[str, Any]) -> str:
    machine = ", ".join(f"{name} {value}" for name, value in record["machine"].items())
    processes = int(pd.DataFrame(record["rows"])["processes"].min())
    return (
        f"recorded by `{COMMAND}` on {machine}, rank {record['rank']} of "
        f"{record['world size']}, rows of {record['max_length']:,} tokens, "
        f"{record['rows_per_batch']} per batch (the token sampler's budget their product), "
        f"lognormal lengths, the mixture over {record['sources']} sources; medians of "
        f"{plural(processes, 'fresh process', 'fresh processes')} on "
        f"{plural(record['threads'], 'torch thread')}"
    )


def _ratios(table: pd.DataFrame, column: str) -> str:
    if column not in table:
        return "not measured"
    values = table[column].dropna()
    within = int((values <= RATIO_TARGET).sum())
    listed = joined(f"{v:.2f} x" for v in values)
    sizes = joined(f"{int(s):,}" for s in table.loc[values.index, "samples"])
    return (
        f"{listed} at {sizes} samples ({count_of(within, len(values), 'sizes')} within "
        f"{RATIO_TARGET:g} x)"
    )


def prose(record: dict[str, Any] | None) -> str:
    """The packed benchmark in words, or that it is not yet recorded."""
    if record is None:
        return (
            "Packed samplers: not yet recorded. `"
            + COMMAND
            + "` measures the token sampler, the packed sampler and the packed mixture over "
            f"{packed_bench.SOURCES} sources at "
            f"{joined(f'{s:,}' for s in packed_bench.SIZES)} samples, each in fresh "
            "processes, and writes the record this finding shows."
        )
    epoch, first = epoch_table(record), _medians(record, FIRST)
    largest = int(first.index.max())
    at_largest = first.loc[largest].dropna()
    under = int((at_largest <= FIRST_BATCH_TARGET).sum())
    firsts = joined(f"{name} {value:.3f} s" for name, value in at_largest.items())
    return (
        f"Packed samplers ({_how(record)}): the rank's whole epoch of the packed sampler, "
        f"as a multiple of the token sampler's, was {_ratios(epoch, 'packed / token')}; "
        "the packed mixture's, as a multiple of the packed sampler's, "
        f"{_ratios(epoch, 'packed mixture / packed')}, and of the token sampler's, "
        f"{_ratios(epoch, 'packed mixture / token')}. The packed mixture's first batch, "
        "from building the sampler, as a multiple of the packed sampler's, was "
        f"{_ratios(first_table(record), FIRST_RATIO)}. The first batch at "
        f"{largest:,} samples, from building the sampler, came after {firsts}: "
        f"{count_of(under, len(at_largest), 'samplers')} within {FIRST_BATCH_TARGET:g} s."
    )


def tables(record: dict[str, Any] | None) -> tuple[Table, ...]:
    """The record's two tables (none without a record)."""
    if record is None:
        return ()
    note = f"{_how(record)[0].upper()}{_how(record)[1:]}."
    return (
        Table(
            "Packed samplers: the rank's whole epoch (ms), and ratios of medians",
            epoch_table(record),
            floatfmt=".2f",
            intfmt=",",
            note=note,
        ),
        Table(
            "Packed samplers: the first batch (ms), its ratio of medians, and the peak memory (MB)",
            first_table(record),
            floatfmt=".2f",
            intfmt=",",
            note=note,
        ),
    )
