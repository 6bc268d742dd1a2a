"""Finding: tail="uneven" + gather_unsharded gives the single-process metrics exactly."""

from __future__ import annotations

import pandas as pd

from studies.engines.unsharded_evaluation import BATCH_SIZE, measure
from studies.findings import Evidence, Table
from studies.findings.collective_evaluation import ROUNDING
from studies.findings.wording import count_of

NAME = "exact-evaluation"
TITLE = 'Exact distributed evaluation: tail="uneven" and gather_unsharded, in real processes'
GUARDED_BY = "tests/test_beyond_torch_findings.py::test_uneven_gathering_is_exact_in_real_processes"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
SECONDS = 10
SLOW = True

#: The table's columns, in words.
EXACT_ACCURACY = "ours: accuracy = single process"
EXACT_AUC = "ours: ROC AUC = single process"
IN_ORDER = "ours: sample i's result at [i] on every rank"
STOCK_ERRORS = {
    "mean_of_rank_means": "stock, mean of rank means: accuracy error",
    "pooled_counts": "stock, summed counts: accuracy error",
    "padded_auc": "stock, AUC over gathered padded scores: error",
}
_RUNS = ("in_order", "shuffled", "at_rank_0")


def table(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset size, world size): ours exact or not, the stock patterns' errors.

    Ours counts as exact only when all three runs (in order and shuffled, gathered on every
    rank; in order, gathered on rank 0) equal the single-process value.
    """
    rows = []
    for _, row in measured.iterrows():
        exact_accuracy, exact_auc = row["exact_accuracy"], row["exact_auc"]
        rows.append(
            {
                "dataset size": row["dataset_size"],
                "world size": row["world_size"],
                "stock padding": row["padding"],
                "accuracy": float(exact_accuracy),
                "ROC AUC": float(exact_auc),
                EXACT_ACCURACY: all(row[f"ours_{run}_accuracy"] == exact_accuracy for run in _RUNS),
                EXACT_AUC: all(row[f"ours_{run}_auc"] == exact_auc for run in _RUNS),
                IN_ORDER: bool(row["ours_dataset_order"] and row["ours_same_on_every_rank"]),
                STOCK_ERRORS["mean_of_rank_means"]: row["mean_of_rank_means"]
                - float(exact_accuracy),
                STOCK_ERRORS["pooled_counts"]: float(row["pooled_counts"] - exact_accuracy),
                STOCK_ERRORS["padded_auc"]: float(row["padded_auc"] - exact_auc),
            }
        )
    return pd.DataFrame(rows)


def claim(frame: pd.DataFrame) -> str:
    """The claim, from :func:`table`."""
    ours = int((frame[EXACT_ACCURACY] & frame[EXACT_AUC]).sum())
    padded = frame[frame["stock padding"] > 0]
    missed = {
        pattern: int((padded[column].abs() > (ROUNDING if "means" in pattern else 0)).sum())
        for pattern, column in STOCK_ERRORS.items()
    }
    return (
        'In real processes (gloo), samplers.DistributedSampler(tail="uneven") with '
        "samplers.gather_unsharded gave exactly the single-process accuracy and ROC AUC (a "
        "metric that does not decompose per sample), shuffled or not, on every rank or on "
        f"rank 0 alone, in {count_of(ours, len(frame), '(dataset size, world size) pairs')} "
        "measured. The stock sampler's padding made summed counts miss the accuracy in "
        f"{count_of(missed['pooled_counts'], len(padded), 'padded pairs')}, the mean of "
        f"per-rank accuracies in {missed['mean_of_rank_means']} and the AUC over the gathered "
        f"scores in {missed['padded_auc']}."
    )


def describe(frame: pd.DataFrame) -> str:
    """The prose, from :func:`table`."""
    ours = frame[EXACT_ACCURACY] & frame[EXACT_AUC]
    padded = frame["stock padding"] > 0
    pooled = frame[STOCK_ERRORS["pooled_counts"]].abs()
    auc = frame[STOCK_ERRORS["padded_auc"]].abs()
    means = frame[STOCK_ERRORS["mean_of_rank_means"]].abs()
    worst = frame.loc[auc.idxmax()]
    sizes = sorted(frame["dataset size"].unique())
    worlds = sorted(frame["world size"].unique())
    prose = (
        f"Over {len(frame)} (dataset size, world size) pairs ({min(sizes)} to {max(sizes)} "
        f"samples, {min(worlds)} to {max(worlds)} ranks), ours gave exactly the "
        f"single-process accuracy and ROC AUC in {int(ours.sum())}, compared as fractions, "
        f"and every rank's unsharded list held each sample's result at its index in "
        f"{int(frame[IN_ORDER].sum())}. With the stock sampler, {int(padded.sum())} pairs "
        f"are padded; in them summed counts were off in {int((pooled[padded] > 0).sum())} "
        f"(by up to {pooled.max():.2e}), the mean of rank means (a float, off by more than "
        f"{ROUNDING:g}) in {int((means[padded] > ROUNDING).sum())} (by up to "
        f"{means.max():.2e}), and the ROC AUC "
        f"over the gathered, padded scores in {int((auc[padded] > 0).sum())} (by up to "
        f"{auc.max():.2e}: {int(worst['dataset size'])} samples on "
        f"{int(worst['world size'])} ranks, {int(worst['stock padding'])} padded). "
        f"Without padding the stock patterns were off by at most "
        f"{max(pooled[~padded].max(), auc[~padded].max(), means[~padded].max()):.2e}. "
        "gather_unsharded is exact because it places each result by the sampler's own "
        'plan, and with tail="uneven" the plan hands every sample out exactly once.'
    )
    return prose


def build() -> Evidence:
    frame = table(measure())
    return Evidence(
        claim=claim(frame),
        prose=describe(frame),
        tables=(
            Table(
                "Ours against the single-process metrics, and the stock patterns' errors",
                frame,
                floatfmt=("g", "g", "g", ".4f", ".4f", "g", "g", "g", "+.2e", "+.2e", "+.2e"),
                note=(
                    "Real gloo processes, batch size "
                    f"{BATCH_SIZE}. The synthetic model of `studies/evaluation.py`; accuracy "
                    "and ROC AUC are the single-process values. Ours: "
                    '`DistributedSampler(tail="uneven")` + `gather_unsharded`, shuffle off '
                    "and on (every rank) and shuffle off gathered on rank 0 only; the stock "
                    "sampler pads, shuffle off."
                ),
            ),
        ),
    )
