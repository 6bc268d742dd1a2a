"""Finding: token-budgeted batches against a fixed batch size, a length-grouped sampler and
a fairseq-style sort, on synthetic and real length distributions."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import pandas as pd
import torch
from matplotlib.figure import Figure

from samplers.tokens.held import copy_dtype
from studies.findings import Evidence, Finding, Picture, Table
from studies.findings.wording import count_of, joined
from studies.tokens import bench as token_bench
from studies.tokens.batching import (
    SAMPLERS,
    StepModel,
    batch_size_like,
    measure,
    order_change,
    step_balance,
)
from studies.tokens.lengths import CONTEXT, MAX_TOKENS, PACKAGE, SEED, datasets, load

NAME = "token-batches"
TITLE = "Variable-length samples: a token budget per batch against a fixed batch size"
GUARDED_BY = "tests/test_token_batches.py::test_the_claim_holds_in_the_tables"
SLOW = True

#: Packed rows: (max_length, rows per batch), the context and as many rows as fill MAX_TOKENS.
CONTEXT_ROWS = (CONTEXT, MAX_TOKENS // CONTEXT)
WORLD_SIZES = (4, 8)
MODEL = StepModel()
#: The configuration the picture shows.
PICTURED = ("torch source files", 8)

NAMES = {
    "ours": "ours: DistributedTokenBatchSampler",
    "stock": "stock DistributedSampler, fixed batch size",
    "length-grouped": (
        "transformers DistributedLengthGroupedSampler, called directly (not the Trainer's "
        "group_by_length path)"
    ),
    "sorted-by-size": "fairseq-style sort by length",
}
OURS = NAMES["ours"]
TARGETS = {"straggler ratio": 1.05, "padded efficiency": 0.90}


def describe(data: dict[str, torch.Tensor]) -> pd.DataFrame:
    recorded = load()
    sources = {
        "lognormal": f"exp(N(6, 0.9)), seed {SEED}",
        "torch source files": (
            f"{PACKAGE} {recorded['version']}: {recorded['files']:,} files, "
            f"{recorded['files'] - data['torch source files'].numel()} empty ones left out"
        ),
    }
    rows = []
    for name, lengths in data.items():
        values = lengths.to(torch.float64)
        rows.append(
            {
                "data": name,
                "source": sources[name],
                "samples": lengths.numel(),
                "mean length": float(values.mean()),
                "median": float(values.median()),
                "99th percentile": float(torch.quantile(values, 0.99)),
                f"share at the {CONTEXT}-token context": float(
                    (lengths == CONTEXT).double().mean()
                ),
            }
        )
    return pd.DataFrame(rows)


def compare(data: dict[str, torch.Tensor]) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    """One row per data set, world size and sampler; and the pictured steps' balance."""
    rows: list[dict[str, Any]] = []
    balance: dict[str, list[float]] = {}
    for name, lengths in data.items():
        for world in WORLD_SIZES:
            fixed = 0
            times: dict[str, float] = {}
            for key, run in SAMPLERS.items():
                first, second = (
                    run(lengths, world, epoch, SEED, MAX_TOKENS, fixed) for epoch in (0, 1)
                )
                if first is None or second is None:
                    continue  # an optional peer that is not installed
                if key == "ours":
                    fixed = batch_size_like(first)
                measured = measure(lengths, first, MAX_TOKENS, MODEL)
                times[key] = float(measured.pop("simulated epoch time"))
                rows.append(
                    {
                        "data": name,
                        "ranks": world,
                        "sampler": NAMES[key],
                        "batches of": (
                            f"up to {MAX_TOKENS:,} tokens"
                            if key in ("ours", "sorted-by-size")
                            else f"{fixed} samples"
                        ),
                        **measured,
                        "simulated epoch time / ours": times[key] / times["ours"],
                        **order_change(first, second, lengths.numel()),
                    }
                )
                if (name, world) == PICTURED:
                    balance[NAMES[key]] = step_balance(lengths, first)
    frame = pd.DataFrame(rows)
    frame["equal batch counts"] = frame["equal batch counts"].map({True: "yes", False: "no"})
    return frame, balance


def recorded_bench() -> tuple[pd.DataFrame, dict[str, Any]]:
    """The recorded planning benchmark (:mod:`studies.tokens.bench`) as a table."""
    record = token_bench.load()
    frame = pd.DataFrame(record["rows"])
    frame["sampler"] = frame["sampler"].map(NAMES)
    frame["value"] = [
        f"{row['median']:,.2f}"
        + (f" ({row['min']:,.2f}..{row['max']:,.2f})" if row["processes"] > 1 else "")
        for _, row in frame.iterrows()
    ]
    table = frame.pivot_table(
        index=["size", "processes", "sampler"],
        columns="quantity",
        values="value",
        aggfunc="first",
        sort=False,
    )
    table = table[list(token_bench.QUANTITIES)].reset_index()
    table["size"] = [f"{size:,}" for size in table["size"]]
    table.columns.name = None
    return table.rename(columns={"size": "samples"}), record


def _unsigned_zero(text: str) -> str:
    """``-0.00`` (a small negative number rounded) written as ``0.00``."""
    return text[1:] if re.fullmatch(r"-0(\.0+)?%?", text) else text


def _range(values: pd.Series, form: str) -> str:
    """``low to high`` of ``values`` in ``form``, or one value when both read the same."""
    low, high = (
        bound.item() if hasattr(bound, "item") else bound for bound in values.agg(["min", "max"])
    )
    shown = tuple(_unsigned_zero(format(bound, form)) for bound in (low, high))
    return shown[0] if shown[0] == shown[1] else f"{shown[0]} to {shown[1]}"


def _prose(lengths: pd.DataFrame, table: pd.DataFrame, bench: pd.DataFrame, record: Any) -> str:
    by = {name: table[table["sampler"] == name] for name in table["sampler"].unique()}
    ours = by[OURS]
    configurations = len(ours)
    met = (
        (ours["straggler ratio"] <= TARGETS["straggler ratio"])
        & (ours["padded efficiency"] >= TARGETS["padded efficiency"])
    ).sum()
    text = (
        f"Over {configurations} configurations ({len(lengths)} length distributions of "
        f"{_range(lengths['samples'], ',')} samples, {' and '.join(map(str, WORLD_SIZES))} "
        f"ranks, max_tokens={MAX_TOKENS:,}), ours filled "
        f"{_range(ours['padded efficiency'], '.3f')} of what it computed with real tokens "
        "(padded efficiency), its straggler ratio (the "
        "sum over steps of the most expensive rank's padded tokens over the sum of the mean) "
        f"was {_range(ours['straggler ratio'], '.3f')}, "
        f"{int(ours['batches over max_tokens'].sum())} batches exceeded max_tokens and every "
        f"rank took the same number of steps in {int((ours['equal batch counts'] == 'yes').sum())} "
        f"of {configurations}: the targets (straggler ratio at most "
        f"{TARGETS['straggler ratio']}, padded efficiency at least "
        f"{TARGETS['padded efficiency']}) held in {int(met)} of {configurations}."
    )
    stock = by.get(NAMES["stock"])
    if stock is not None:
        over = stock["batches over max_tokens"] / stock["steps"] / stock["ranks"]
        text += (
            f"\n\nA fixed batch size of ours' mean samples per batch, rounded (batches of "
            f"{_range(stock['batches of'].str.split().str[0].astype(int), 'd')} samples; "
            f"{steps_against_ours(table, stock)}) "
            "through the stock sampler had a padded efficiency of "
            f"{_range(stock['padded efficiency'], '.3f')}, straggler ratios of "
            f"{_range(stock['straggler ratio'], '.3f')}, put {_range(over, '.0%')} of its "
            "batches over max_tokens (the largest "
            f"{_range(stock['largest batch / max_tokens'], '.1f')} times it, which is what the "
            "memory must hold) and its simulated epoch took "
            f"{_range(stock['simulated epoch time / ours'], '.2f')} times ours."
        )
    grouped = by.get(NAMES["length-grouped"])
    if grouped is None:
        text += " transformers is not installed: its length-grouped sampler was not measured."
    else:
        text += (
            " transformers' DistributedLengthGroupedSampler, called directly with the same "
            "batch size (it sorts random megabatches by length): padded efficiency "
            f"{_range(grouped['padded efficiency'], '.3f')}, "
            f"straggler ratio {_range(grouped['straggler ratio'], '.3f')}, batches over "
            f"max_tokens {_range(grouped['batches over max_tokens'], 'd')} per epoch, simulated "
            f"epoch time {_range(grouped['simulated epoch time / ours'], '.2f')} times ours. "
            + trainer_path()
        )
    fairseq = by[NAMES["sorted-by-size"]]
    unequal = int((fairseq["equal batch counts"] == "no").sum())
    text += (
        "\n\nThe fairseq-style global sort pads least "
        f"({_range(fairseq['padded efficiency'], '.3f')}), balances steps to "
        f"{_range(fairseq['straggler ratio'], '.3f')} and its simulated epoch takes "
        f"{_range(fairseq['simulated epoch time / ours'], '.2f')} times ours, but ranks got "
        f"different numbers of batches in {unequal} of {len(fairseq)} configurations (a "
        "per-step collective waits on the rank with more) and from one epoch to the next it "
        f"kept {_range(fairseq['batch-mate pairs kept'], '.0%')} of the pairs of samples that "
        "shared a batch: the same batches every epoch, only their order shuffled. Ours kept "
        f"{_range(ours['batch-mate pairs kept'], '.0%')} (the stock sampler "
        f"{_range(stock['batch-mate pairs kept'], '.1%') if stock is not None else '-'}); "
        "every sampler's order of samples was unrelated between epochs (position correlation "
        f"{_range(table['position correlation'], '.2f')})."
    )
    text += (
        f"\n\nSimulated time: per step, the slowest rank's {MODEL.overhead:g} + tokens + "
        f"sum of squared lengths / {1 / MODEL.per_square:g}, for batches padded to their "
        f"longest sample (a transformer of width {1 / (6 * MODEL.per_square):g}: attention "
        "costs about length / (6 x width) of the linear layers' work per token; the constant "
        "is a step's fixed overhead)."
    )
    machine = ", ".join(f"{key} {value}" for key, value in record["machine"].items())
    first, whole, peak = token_bench.QUANTITIES

    def cell(size: str, sampler: str, quantity: str) -> str:
        match = bench[(bench["samples"] == size) & (bench["sampler"] == sampler)]
        return str(match.iloc[0][quantity]).split(" ")[0] if len(match) else "-"

    held = copy_dtype(CONTEXT)  # the lengths are truncated to the context
    held_name = str(held).removeprefix("torch.")
    parts = []
    for size in dict.fromkeys(bench["samples"]):
        copy = held.itemsize * int(size.replace(",", "")) / 10**6
        parts.append(
            f"at {size} samples ours gave its first batch after {cell(size, OURS, first)} s "
            f"and its last after {cell(size, OURS, whole)} s (planning the epoch as it goes), "
            f"peaking {cell(size, OURS, peak)} MB above the baseline (its {held_name} copy "
            f"of the lengths takes {copy:,.0f} MB); the stock sampler "
            f"{cell(size, NAMES['stock'], first)} s, {cell(size, NAMES['stock'], whole)} s "
            f"and {cell(size, NAMES['stock'], peak)} MB"
        )
    sorting = [
        f"{name} {cell(size, NAMES[key], first)} s at {size}"
        for size in dict.fromkeys(bench["samples"])
        for key, name in (("length-grouped", "transformers'"), ("sorted-by-size", "the sort"))
        if cell(size, NAMES[key], first) != "-"
    ]
    against = _epoch_against_stock(record)
    text += (
        f"\n\nPlanning time and memory were recorded by `python -m studies.token_bench` on "
        f"{machine}, {record['threads']} torch thread per process, rank {record['rank']} of "
        f"{record['world size']}, lognormal lengths, medians over fresh processes (the "
        "table says how many): "
        + "; ".join(parts)
        + ". "
        + (against + " " if against else "")
        + "Samplers that sort the whole epoch first give nothing until it is sorted: "
        + ", ".join(sorting)
        + "."
    )
    return text


def trainer_path() -> str:
    """What the installed transformers' Trainer builds for ``group_by_length``, read from
    its source: whether it calls ``DistributedLengthGroupedSampler`` at all."""
    import inspect

    from transformers import Trainer

    version = importlib.metadata.version("transformers")
    source = inspect.getsource(Trainer)
    if "DistributedLengthGroupedSampler(" in source:
        return (
            f"The Trainer of transformers {version} builds it for group_by_length on "
            "several processes."
        )
    return (
        f"It is not what the Trainer does: transformers {version}'s Trainer never calls it "
        'and, for train_sampling_strategy="group_by_length", builds LengthGroupedSampler '
        "over the whole dataset on every process (megabatches of the per-device batch size "
        "times the accumulation steps) and lets accelerate shard its batches over the ranks "
        "(that path is measured in the token-costs finding, as Trainer group_by_length)."
    )


def _epoch_against_stock(record: dict[str, Any]) -> str:
    """Ours' whole epoch over the stock sampler's (medians), at each size both were
    recorded at, and whether it was shorter at all of them, from the record."""
    whole = token_bench.QUANTITIES[1]
    medians = {
        (row["sampler"], row["size"]): row["median"]
        for row in record["rows"]
        if row["quantity"] == whole
    }
    sizes = [size for sampler, size in medians if sampler == "ours" and ("stock", size) in medians]
    if not sizes:
        return ""
    ratios = [medians["ours", size] / medians["stock", size] for size in sizes]
    listed = joined([f"{ratio:.2f} at {size:,}" for ratio, size in zip(ratios, sizes, strict=True)])
    shorter = sum(ratio < 1 for ratio in ratios)
    where = "every size" if shorter == len(ratios) else f"{shorter} of {len(ratios)} sizes"
    return f"Ours' whole epoch over the stock sampler's: {listed} samples (shorter at {where})."


def steps_ratio(table: pd.DataFrame, other: pd.DataFrame) -> pd.Series:
    """Per configuration, ``other``'s steps per epoch over ours'."""
    ours = table[table["sampler"] == OURS].set_index(["data", "ranks"])["steps"]
    return other.set_index(["data", "ranks"])["steps"] / ours


def steps_against_ours(table: pd.DataFrame, other: pd.DataFrame) -> str:
    """How many steps the fixed batch size took against ours, in words: the same mean
    tokens per step only where it took the same steps and repeated no sample."""
    ratio = steps_ratio(table, other)
    repeated = other.set_index(["data", "ranks"])["samples repeated"]
    ours = table[table["sampler"] == OURS]
    same = int(((ratio == 1) & (repeated == 0)).sum())
    return (
        f"{_range(other['steps'], 'd')} steps per epoch against ours' "
        f"{_range(ours['steps'], 'd')}, {_range(ratio, '.3f')} times ours: the same steps "
        f"and so the same mean tokens per step in "
        f"{count_of(same, len(ratio), 'configurations')}, more steps in "
        f"{count_of(int((ratio > 1).sum()), len(ratio), 'configurations')}"
    )


def claim(table: pd.DataFrame) -> str:
    """The claim, every count and quantifier read from the side-by-side table."""
    ours = table[table["sampler"] == OURS].set_index(["data", "ranks"])
    total = len(ours)
    configurations = f"configurations ({len(ours.index.unique('data'))} length distributions x "
    configurations += f"{joined(WORLD_SIZES)} ranks)"

    def of(count: int) -> str:
        return count_of(int(count), total, "configurations")

    within = (ours["batches over max_tokens"] == 0).sum()
    equal = (ours["equal batch counts"] == "yes").sum()
    met = (
        (ours["straggler ratio"] <= TARGETS["straggler ratio"])
        & (ours["padded efficiency"] >= TARGETS["padded efficiency"])
    ).sum()
    text = (
        f"Over {total} {configurations}, DistributedTokenBatchSampler kept every batch within "
        f"max_tokens in {of(within)}, gave every rank the same number of steps in {of(equal)}, "
        f"and met both targets (padded efficiency at least {TARGETS['padded efficiency']}, "
        f"straggler ratio at most {TARGETS['straggler ratio']}) in {of(met)}."
    )
    subjects = {
        "stock": "A fixed batch size of ours' mean samples per batch (rounded), through the "
        "stock sampler,",
        "length-grouped": "The same batch size through transformers' "
        "DistributedLengthGroupedSampler (called directly)",
    }
    for key, subject in subjects.items():
        if NAMES[key] not in set(table["sampler"]):
            continue  # an optional peer that is not installed
        other = table[table["sampler"] == NAMES[key]].set_index(["data", "ranks"])
        padded_more = (other["padded efficiency"] < ours["padded efficiency"]).sum()
        over = (other["batches over max_tokens"] > 0).sum()
        text += (
            f" {subject} padded more than ours in {of(padded_more)} and exceeded max_tokens "
            f"in {of(over)}."
        )
    fairseq = table[table["sampler"] == NAMES["sorted-by-size"]].set_index(["data", "ranks"])
    least = sum(
        group.set_index("sampler")["padded efficiency"].idxmax() == NAMES["sorted-by-size"]
        for _, group in table.groupby(["data", "ranks"])
    )
    unequal = (fairseq["equal batch counts"] == "no").sum()
    same = (fairseq["batch-mate pairs kept"] == 1.0).sum()
    text += (
        f" A fairseq-style global sort padded least in {of(least)}, but gave ranks different "
        f"numbers of batches in {of(unequal)} and the same batches in the next epoch in "
        f"{of(same)}."
    )
    return text


def build() -> Evidence:
    data = datasets()
    lengths = describe(data)
    table, balance = compare(data)
    bench, record = recorded_bench()

    def draw(figure: Figure) -> None:
        left, right = figure.subplots(1, 2)
        for name, values in balance.items():
            left.plot(range(1, len(values) + 1), sorted(values, reverse=True), label=name)
        left.set_xlabel("steps, most unbalanced first")
        left.set_ylabel("slowest rank's padded tokens / mean")
        left.set_title(f"{PICTURED[0]}, {PICTURED[1]} ranks")
        left.legend(fontsize=7)
        for name in table["sampler"].unique():
            rows = table[table["sampler"] == name]
            right.scatter(rows["padded efficiency"], rows["straggler ratio"], label=name)
        right.axvline(TARGETS["padded efficiency"], color="grey", linestyle=":")
        right.axhline(TARGETS["straggler ratio"], color="grey", linestyle=":")
        right.set_xlabel("padded efficiency (real / padded tokens)")
        right.set_ylabel("straggler ratio")
        right.set_title("every configuration (dotted: the targets)")

    return Evidence(
        claim=claim(table),
        prose=_prose(lengths, table, bench, record),
        tables=(
            Table(
                "The length distributions",
                lengths,
                floatfmt=("", "", "", ".0f", ".0f", ".0f", ".3f"),
                intfmt=",",
            ),
            Table(
                "One epoch per sampler, side by side",
                table,
                floatfmt=".3f",
                note=(
                    f"Seed {SEED}, epoch 0 (pairs kept and position correlation: epoch 0 "
                    f"against epoch 1); max_tokens={MAX_TOKENS:,}, padded cost."
                ),
            ),
            Table(
                "Planning an epoch: time (s) and peak memory (MB), recorded",
                bench,
                note="Median (min..max) over fresh processes; see the prose for the machine.",
            ),
        ),
        pictures=(
            Picture(
                "balance",
                "Left: each step's slowest rank against the mean, steps sorted; right: padded "
                "efficiency against straggler ratio for every configuration",
                draw,
                size=(11.0, 4.4),
            ),
        ),
    )


def answer(finding: Finding) -> tuple[str, str, str]:
    """The reports' "if you are doing X, use Y" row, read from the built finding."""
    table = finding.tables[1].frame
    ours = table[table["sampler"] == OURS]
    stock = table[table["sampler"] == NAMES["stock"]]
    return (
        "training on variable-length samples (text, audio) on several ranks",
        "Ours: `DistributedTokenBatchSampler(lengths, max_tokens)` as the DataLoader's "
        "`batch_sampler`: batches under a token budget, the same number on every rank, "
        "balanced per step, resumable on any world size.",
        f"[{NAME}]({NAME}.md): padded efficiency {_range(ours['padded efficiency'], '.2f')} "
        f"against {_range(stock['padded efficiency'], '.2f')} for a fixed batch size of ours' "
        f"mean samples per batch, straggler ratio at most {ours['straggler ratio'].max():.3f}, "
        f"{int(ours['batches over max_tokens'].sum())} batches over max_tokens (fixed batch "
        f"size: up to {stock['largest batch / max_tokens'].max():.1f} times it).",
    )
