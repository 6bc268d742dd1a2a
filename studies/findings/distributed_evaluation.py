"""Finding: accuracy over padded shards is off; gathering and truncating is exact."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from samplers.plan import ShardSizes
from studies.common.figures import draw_lines
from studies.core.cases import Case
from studies.core.evaluation import PATTERNS, estimates, exact_accuracy, rank_results
from studies.core.simulate import IndexDataset, make_sampler
from studies.findings import Evidence, Picture, Table
from studies.findings.wording import count_of

NAME = "distributed-evaluation"
TITLE = "Distributed evaluation over padded shards: counting patterns against gathering"
GUARDED_BY = "tests/test_findings.py::test_padded_evaluation_is_off_and_gathering_is_exact"

DATASET_SIZES: tuple[int, ...] = (11, 101, 1_001, 10_001, 100_001)
WORLD_SIZES: tuple[int, ...] = (2, 3, 8, 64)

#: Column of each pattern's error in the table.
#: The evaluation patterns in words, for the table's headers.
PATTERN_WORDS = {
    "mean_of_rank_means": "mean of rank means",
    "pooled_counts": "summed counts",
    "gathered": "gathered",
}
ERROR_COLUMNS = {pattern: f"{PATTERN_WORDS[pattern]}: error" for pattern in PATTERNS}
#: Column of the difference between the two patterns that count the padding.
MEANS_MINUS_POOLED = "mean of rank means - summed counts"


def evaluate(dataset_size: int, world_size: int) -> dict[str, float]:
    """Every pattern's accuracy for the stock sampler's shards of an evaluation set."""
    case = Case(dataset_size, world_size, 1, shuffle=False)
    dataset = IndexDataset(dataset_size)
    shares = []
    for rank in range(world_size):
        sampler = make_sampler(case, dataset, rank)
        if sampler is None:
            raise ValueError("the evaluation case must build a sampler")
        shares.append(list(sampler))
    return estimates(rank_results(shares), dataset_size)


@dataclass(frozen=True)
class Facts:
    """How far each pattern's accuracy was from the exact one, over the table."""

    configurations: int
    padded: int
    pooled_off: int
    pooled_off_padded: int
    pooled_worst: float
    means_worst: float
    gathered_worst: float


def facts(table: pd.DataFrame) -> Facts:
    """The values the claim and the answers use, from the table."""
    pooled = table[ERROR_COLUMNS["pooled_counts"]]
    padded = table["padding"] > 0
    return Facts(
        configurations=len(table),
        padded=int(padded.sum()),
        pooled_off=int((pooled != 0).sum()),
        pooled_off_padded=int((pooled[padded] != 0).sum()),
        pooled_worst=float(pooled.abs().max()),
        means_worst=float(table[ERROR_COLUMNS["mean_of_rank_means"]].abs().max()),
        gathered_worst=float(table[ERROR_COLUMNS["gathered"]].abs().max()),
    )


def build() -> Evidence:
    rows = []
    for world_size in WORLD_SIZES:
        for dataset_size in DATASET_SIZES:
            exact = exact_accuracy(dataset_size)
            values = evaluate(dataset_size, world_size)
            rows.append(
                {
                    "dataset size": dataset_size,
                    "world size": world_size,
                    "padding": ShardSizes.of(dataset_size, world_size, drop_last=False).padding,
                    "exact": exact,
                    **{ERROR_COLUMNS[p]: values[p] - exact for p in PATTERNS},
                    MEANS_MINUS_POOLED: values["mean_of_rank_means"] - values["pooled_counts"],
                }
            )
    table = pd.DataFrame(rows)

    def draw(figure: Figure) -> None:
        series = {}
        for world_size in WORLD_SIZES:
            errors = table[table["world size"] == world_size][ERROR_COLUMNS["pooled_counts"]]
            series[f"{world_size} ranks"] = [abs(e) if e != 0 else math.nan for e in errors]
        draw_lines(
            figure,
            list(DATASET_SIZES),
            series,
            xlabel="dataset size",
            ylabel="|pooled accuracy - exact accuracy|",
            title="Error of the pooled accuracy over padded shards",
            logx=True,
            logy=True,
        )

    found = facts(table)
    claim = (
        "Evaluating the stock sampler's shards (shuffle off, no drop_last), the accuracy "
        "from summed correct and seen counts, which include the padded repeats, differed "
        "from the exact accuracy in "
        f"{count_of(found.pooled_off, found.configurations, 'configurations')} (in "
        f"{count_of(found.pooled_off_padded, found.padded, 'padded ones')}), by up to "
        f"{found.pooled_worst:.1e}, and the mean of per-rank accuracies by up to "
        f"{found.means_worst:.1e}; gathering per-sample results, interleaving them by rank "
        "and truncating to the dataset size "
        + (
            f"was off by at most {found.gathered_worst:.1e}."
            if found.gathered_worst
            else "gave the exact accuracy in every configuration."
        )
    )
    pooled = table[ERROR_COLUMNS["pooled_counts"]]
    gathered = table[ERROR_COLUMNS["gathered"]]
    worst = table.loc[pooled.abs().idxmax()]
    off = int((pooled != 0).sum())
    first_size, last_size = DATASET_SIZES[0], DATASET_SIZES[-1]
    at_first = pooled[table["dataset size"] == first_size].abs().max()
    at_last = pooled[table["dataset size"] == last_size].abs().max()
    prose = (
        f"Over {len(table)} configurations, the pooled accuracy differs from the exact one in "
        f"{off}; the largest error is {worst[ERROR_COLUMNS['pooled_counts']]:+.4f} "
        f"({int(worst['dataset size'])} samples on {int(worst['world size'])} ranks, "
        f"{int(worst['padding'])} padded). The largest absolute error is {at_first:.2e} at "
        f"{first_size} samples and {at_last:.2e} at {last_size}. The mean of per-rank means "
        f"differs from the pooled value by at most {table[MEANS_MINUS_POOLED].abs().max():.2e}, "
        "because every rank holds the same number of samples (padding included). Gathering, "
        f"interleaving and truncating is off by at most {gathered.abs().max():.2e}."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "Accuracy reported by each pattern minus the exact accuracy",
                table,
                floatfmt=("g", "g", "g", ".6f", "+.2e", "+.2e", "+.2e", "+.2e"),
                note=(
                    "The synthetic model of `studies/evaluation.py` is right on about 70% of "
                    "indices; ranks evaluate the stock sampler's shards with shuffle off."
                ),
            ),
        ),
        pictures=(
            Picture(
                "error",
                "Error of the pooled accuracy against dataset size, one line per world size",
                draw,
                size=(6.4, 3.8),
            ),
        ),
    )
