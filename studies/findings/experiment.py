"""The shared experiment: the exact batches each rank receives in each labelled case."""

from __future__ import annotations

import pandas as pd

from studies.cases import EXPERIMENT
from studies.findings import Evidence, Table
from studies.findings.observe import batches, listed
from studies.simulate import simulate
from studies.summary import summarize
from studies.verdicts import verdicts

NAME = "experiment"
TITLE = "The shared experiment: what each rank's DataLoader yields"
CLAIM = (
    "Two ranks, batch size 4, shuffling with seed 0, two epochs: the labelled cases of the "
    "shared experiment show, on a handful of samples, the effects the other findings "
    "measure at scale."
)
GUARDED_BY = "tests/test_findings.py::test_experiment_batches"


def build() -> Evidence:
    labels = [label for label, _ in EXPERIMENT]
    cases = [case for _, case in EXPERIMENT]
    rows = []
    for label, case in EXPERIMENT:
        received = batches(case)
        for rank in range(case.world_size):
            rows.append(
                {
                    "case": label,
                    "rank": rank,
                    **{
                        f"epoch {epoch}": _cell(received[epoch, rank])
                        for epoch in range(case.epochs)
                    },
                }
            )
    batches_table = pd.DataFrame(rows)

    summary = summarize(cases, simulate(cases))
    problems = [
        ", ".join(verdict.name for verdict in verdicts(case, row)) or "none"
        for case, (_, row) in zip(cases, summary.iterrows(), strict=True)
    ]
    totals = pd.DataFrame(
        {
            "case": labels,
            "samples per rank": [listed(v) for v in summary["samples_per_rank"]],
            "last batch sizes": [listed(v) for v in summary["last_batch_sizes"]],
            "duplicated": summary["duplicated_samples"].tolist(),
            "dropped": summary["dropped_samples"].tolist(),
            "epoch 1 repeats epoch 0": summary["order_repeats"].tolist(),
            "problems": problems,
        }
    )
    return Evidence(
        prose=_prose(totals),
        tables=(
            Table(
                "Batches by case and rank",
                batches_table,
                note="Each cell lists the rank's batches in order; `-` means no batch at all.",
            ),
            Table(
                "What the batches add up to (epoch 0)",
                totals,
                note=(
                    "`duplicated`: hand-outs beyond the first of each index, over all ranks; "
                    "`dropped`: indices no rank received; `problems`: the verdicts "
                    "`dsampler explain` prints for the case."
                ),
            ),
        ),
    )


def _cell(rank_batches: list[list[int]]) -> str:
    return " ".join(listed(batch) for batch in rank_batches) or "-"


def _prose(totals: pd.DataFrame) -> str:
    lines = [
        "Each case was run once per rank with its own sampler and DataLoader, as a training "
        "script does; the tables are what those DataLoaders yielded.",
        "",
    ]
    for row in totals.itertuples(index=False):
        lines.append(
            f"- {row.case}: {row.duplicated} duplicated, {row.dropped} dropped, problems: "
            f"{row.problems}."
        )
    return "\n".join(lines)
