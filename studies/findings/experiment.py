"""The blog post's experiment: what it printed, what torch yields now, and where they differ."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from studies.core import blog_post
from studies.core.cases import EXPERIMENT, EXPERIMENT_DESCRIPTIONS
from studies.core.simulate import COLUMNS, simulate
from studies.core.summary import summarize
from studies.core.verdicts import verdicts
from studies.findings import Evidence, Table
from studies.findings.observe import batches
from studies.findings.padding import received_order, repeats
from studies.findings.wording import count_of, joined, listed

NAME = "experiment"
TITLE = "The blog post's experiment: what it printed and what torch yields now"
GUARDED_BY = "tests/test_experiment.py::test_simulation_reproduces_the_post"

#: The key of one batch in both tables.
_KEY = ["case", "epoch", "rank", "batch"]


def simulated() -> pd.DataFrame:
    """Every experiment run's tidy rows (:data:`studies.core.simulate.COLUMNS`), labelled
    ``case``."""
    parts = [simulate([case]).assign(case=label) for label, case in EXPERIMENT]
    return pd.concat(parts, ignore_index=True)[["case", *COLUMNS]]


def differences(printed: pd.DataFrame, yielded: pd.DataFrame) -> pd.DataFrame:
    """Every batch where the post's printed rows and torch's rows differ, by key.

    Columns: the key, ``printed`` and ``yielded`` (indices, or None where that side has no
    such batch). Empty when the two agree batch for batch.
    """
    merged = printed[[*_KEY, "indices"]].merge(
        yielded[[*_KEY, "indices"]],
        on=_KEY,
        how="outer",
        suffixes=("_printed", "_yielded"),
        sort=False,
    )
    printed_cells = merged["indices_printed"].map(_as_list)
    yielded_cells = merged["indices_yielded"].map(_as_list)
    differ = [p != y for p, y in zip(printed_cells, yielded_cells, strict=True)]
    result = merged.assign(printed=printed_cells, yielded=yielded_cells)[differ]
    return result[[*_KEY, "printed", "yielded"]].reset_index(drop=True)


def _as_list(value: object) -> list[int] | None:
    return [int(index) for index in value] if isinstance(value, list) else None


def _cells(rows: pd.DataFrame, label: str, epoch: int, rank: int) -> str:
    own = rows[(rows["case"] == label) & (rows["epoch"] == epoch) & (rows["rank"] == rank)]
    return " ".join(listed(indices) for indices in own.sort_values("batch")["indices"]) or "-"


def side_by_side(printed: pd.DataFrame, yielded: pd.DataFrame) -> pd.DataFrame:
    """One row per run and rank: what the post printed and what torch yields, per epoch."""
    rows = []
    for label, case in EXPERIMENT:
        for rank in range(case.world_size):
            row: dict[str, object] = {"case": label, "rank": rank}
            for epoch in range(case.epochs):
                row[f"post, epoch {epoch}"] = _cells(printed, label, epoch, rank)
                row[f"torch now, epoch {epoch}"] = _cells(yielded, label, epoch, rank)
            rows.append(row)
    return pd.DataFrame(rows)


def agreement(printed: pd.DataFrame, yielded: pd.DataFrame) -> str:
    """A sentence stating whether the post and torch agree, and exactly where they do not."""
    differing = differences(printed, yielded)
    runs = len(EXPERIMENT)
    if differing.empty:
        return (
            f"All {runs} runs agree: each of the {len(printed)} batches the post printed is "
            "the batch torch yields now, on the same rank, in the same epoch and position, "
            "and torch yields no batch the post did not print."
        )
    where = "; ".join(
        f"case {row.case}, epoch {row.epoch}, rank {row.rank}, batch {row.batch}: the post "
        f"printed {'nothing' if row.printed is None else listed(row.printed)}, torch yields "
        f"{'nothing' if row.yielded is None else listed(row.yielded)}"
        for row in differing.itertuples(index=False)
    )
    cases = sorted(set(differing["case"]), key=[label for label, _ in EXPERIMENT].index)
    return (
        f"{runs - len(cases)} of {runs} runs agree; {len(differing)} batches differ, in "
        f"case{'s' if len(cases) > 1 else ''} {joined(cases)}: {where}."
    )


def padding_table() -> pd.DataFrame:
    """Case 5 (5 samples, 2 ranks): each epoch's shuffled order, the padded copy, and the
    index the post names as the copy (from its transcription)."""
    named = {(row.case, row.epoch): row.index for row in blog_post.padding_claim().itertuples()}
    rows = []
    for label, case in EXPERIMENT:
        if not label.startswith("5"):
            continue
        for epoch in range(case.epochs):
            order = received_order(case, epoch)
            copies, positions = repeats(order)
            rows.append(
                {
                    "case": label,
                    "epoch": epoch,
                    "shuffled order": listed(order[: case.dataset_size]),
                    "padded copy": listed(copies),
                    "at position": listed(positions),
                    "the post names": named.get((label, epoch), "-"),
                    "copy = head of the order": copies == [order[0]],
                    "copy = index 0": copies == [0],
                }
            )
    return pd.DataFrame(rows)


def with_set_epoch(yielded: pd.DataFrame) -> pd.DataFrame:
    """The shuffled runs made without set_epoch, rerun with it: each rank's epoch 1.

    ``the post's own run`` names the post's run of the same configuration with
    set_epoch when there is one and its epoch 1 is the rerun's (else ``-``).
    """
    rows = []
    for label, case in EXPERIMENT:
        if case.set_epoch or not case.shuffle or case.implementation == "none":
            continue
        fixed = replace(case, set_epoch=True)
        received = batches(fixed)
        twin = next((other for other, run in EXPERIMENT if run == fixed), None)
        for rank in range(case.world_size):
            rerun = " ".join(listed(batch) for batch in received[1, rank]) or "-"
            as_run = _cells(yielded, label, 1, rank)
            if rerun == as_run == "-":
                continue
            same = twin is not None and _cells(yielded, twin, 1, rank) == rerun
            rows.append(
                {
                    "case": label,
                    "rank": rank,
                    "epoch 1 as run": as_run,
                    "epoch 1 with set_epoch": rerun,
                    "the post's own run with set_epoch": twin if same else "-",
                }
            )
    return pd.DataFrame(rows)


def build() -> Evidence:
    printed = blog_post.printed_rows()
    yielded = simulated()
    labels = [label for label, _ in EXPERIMENT]
    cases = [case for _, case in EXPERIMENT]
    summary = summarize(cases, simulate(cases))
    problems = [
        ", ".join(verdict.name for verdict in verdicts(case, row)) or "none"
        for case, (_, row) in zip(cases, summary.iterrows(), strict=True)
    ]
    totals = pd.DataFrame(
        {
            "case": labels,
            "what it is": [EXPERIMENT_DESCRIPTIONS[label] for label in labels],
            "samples per rank": [listed(v) for v in summary["samples_per_rank"]],
            "last batch sizes": [listed(v) for v in summary["last_batch_sizes"]],
            "copies handed out twice": summary["duplicated_samples"].tolist(),
            "samples no rank received": summary["dropped_samples"].tolist(),
            "epoch 1 repeats epoch 0": summary["order_repeats"].tolist(),
            "problems `dsampler explain` reports": problems,
        }
    )
    padding = padding_table()
    rerun = with_set_epoch(yielded)
    return Evidence(
        claim=_claim(printed, yielded, padding),
        prose=_prose(printed, yielded, padding, rerun),
        tables=(
            Table(
                "What the post printed and what torch yields now",
                side_by_side(printed, yielded),
                note=(
                    "Each cell lists the rank's batches in order; `-` means no batch. The "
                    "post's lines are read from its transcription "
                    "(`studies/data/blog_post_output.json`): device `cuda:R` is rank R, and "
                    "each rank's lines split evenly into epoch 0 then epoch 1. Every batch, "
                    "by case, epoch, rank and batch number, is in `experiment.csv`."
                ),
            ),
            Table("What each run adds up to (epoch 0)", totals),
            Table("The padding in case 5, measured", padding),
            Table("The runs without set_epoch, rerun with it", rerun),
        ),
    )


def _printed_runs(printed: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(runs the post printed batches for, runs it printed nothing for), in post order."""
    shown = set(printed["case"])
    labels = [label for label, _ in EXPERIMENT]
    return [label for label in labels if label in shown], [
        label for label in labels if label not in shown
    ]


def _claim(printed: pd.DataFrame, yielded: pd.DataFrame, padding: pd.DataFrame) -> str:
    """The claim, from the printed and yielded rows and the padding table."""
    shown, silent = _printed_runs(printed)
    differing = set(differences(printed, yielded)["case"])
    agree = [label for label in shown if label not in differing]
    named = padding[padding["the post names"] != "-"]
    matching = sum(
        listed([row["the post names"]]) == row["padded copy"] for _, row in named.iterrows()
    )
    heads = int(padding["copy = head of the order"].sum())
    cases = [case for _, case in EXPERIMENT]

    def values(field: str) -> str:
        return joined(sorted({getattr(case, field) for case in cases}))

    return (
        f"The blog post made {len(EXPERIMENT)} runs ({values('world_size')} ranks, batch "
        f"size {values('batch_size')}, seed {values('seed')}, {values('epochs')} epochs; "
        f"cases {joined(label for label, _ in EXPERIMENT)}) and printed the batches "
        f"of {len(shown)}"
        + (f" (case {joined(silent)} printed nothing)" if silent else "")
        + "; configured as their printed output shows they ran, "
        f"{count_of(len(agree), len(shown), 'printed runs')} agree batch by batch with what "
        "the stock sampler and DataLoader yield now. The post says padding repeats the first "
        "sample and names the copies: they match the measured ones in "
        f"{count_of(matching, len(named), 'epochs')} it names, and the copy is the head of "
        f"the shuffled epoch order in {count_of(heads, len(padding), 'epochs')} of case 5."
    )


def _prose(
    printed: pd.DataFrame, yielded: pd.DataFrame, padding: pd.DataFrame, rerun: pd.DataFrame
) -> str:
    named = padding[padding["the post names"] != "-"]
    agree = [
        f"{row['case']} epoch {row['epoch']}"
        for _, row in named.iterrows()
        if listed([row["the post names"]]) == row["padded copy"]
    ]
    first = padding.iloc[0]
    heads = int(padding["copy = head of the order"].sum())
    zeros = padding[padding["copy = index 0"]]
    zero_text = (
        " The copy is never index 0 here."
        if zeros.empty
        else (
            f" The copy is index 0 only in case {joined(sorted(set(zeros['case'])))}, epoch "
            f"{joined(sorted(set(zeros['epoch'])))}, because that epoch's order starts with 0."
        )
    )
    twins = rerun[rerun["the post's own run with set_epoch"] != "-"]
    pairs = sorted({(row.case, row[-1]) for row in twins.itertuples(index=False)})
    shown, silent = _printed_runs(printed)
    repeating = [
        label
        for label, case in EXPERIMENT
        if label in shown
        and all(
            _cells(printed, label, 0, rank) == _cells(printed, label, 1, rank)
            for rank in range(case.world_size)
        )
    ]
    lines = [
        f"Source: {blog_post.source()}",
        "",
        "The post's script shows one configuration per case in comments, but its printed "
        "output shows how each run was made, and the runs here follow the output. Case 1 "
        "has no DistributedSampler and a DataLoader without shuffling: every rank prints "
        f"the whole dataset in order. The post printed the same batches in both epochs for "
        f"case{'s' if len(repeating) > 1 else ''} {joined(repeating)}: apart from case 1, "
        "which does not shuffle, those ran without `set_epoch`. Case 5 was printed twice, "
        "without (5a) and then with (5b) `set_epoch`; case 4 ran with the DataLoader's "
        "drop_last False (4a) and True (4b).",
        "",
        agreement(printed, yielded)
        + (
            f" The post shows no output for case {joined(silent)} (its prose says every "
            "rank's samples are dropped), and torch yields no batch there either."
            if silent
            else ""
        ),
        "",
        "**The post's padding rule.** The post says the padding repeats the first sample, "
        f"and for case {named.iloc[0]['case']}, epoch {named.iloc[0]['epoch']}, names index "
        f"{named.iloc[0]['the post names']}, the head of that epoch's shuffled order "
        f"({'not' if named.iloc[0]['the post names'] != 0 else 'also'} the dataset's index "
        "0). The copies it names match the measured ones in "
        f"{len(agree)} of {len(named)} epochs. In case {first['case']}, epoch "
        f"{first['epoch']}, the shuffled epoch order is {first['shuffled order']}: the "
        f"padded copy, index {joined(json.loads(first['padded copy']))} at position "
        f"{joined(json.loads(first['at position']))}, is the head of that order. The copy "
        f"is the head of the order in {heads} of {len(padding)} epochs measured.{zero_text} "
        "The padding finding shows the rule at every size.",
        "",
        "Rerun with `set_epoch`, the shuffled runs made without it get a new order in epoch "
        "1; "
        + (
            "for "
            + joined(f"case {case}" for case, _ in pairs)
            + " that is exactly what the post printed for its own run with `set_epoch` ("
            + joined(f"{twin} for {case}" for case, twin in pairs)
            + ")."
            if pairs
            else "no run of the post with set_epoch shows the same configuration."
        ),
    ]
    return "\n".join(lines)
