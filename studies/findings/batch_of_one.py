"""Finding: a last batch of one sample, and what it does to BatchNorm in train mode."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd
import torch

from studies.core.cases import Case
from studies.findings import Evidence, Table
from studies.findings.observe import batches, sampler_share
from studies.findings.wording import count_of, joined, listed, plural

NAME = "batch-of-one"
TITLE = "A last batch of one sample, and BatchNorm in train mode"
GUARDED_BY = "tests/test_findings.py::test_last_batch_of_one_breaks_batchnorm"

#: The configuration measured, without and with the DataLoader's drop_last.
CASES: tuple[Case, ...] = (Case(10, 2, 4), Case(10, 2, 4, loader_drop_last=True))

#: Features per sample fed to the BatchNorm1d layer.
FEATURES = 3


def batchnorm_outcome(batch: list[int], *, train: bool) -> str:
    """Run a fresh ``BatchNorm1d(FEATURES)`` on the batch; ``"ok"`` or the error raised."""
    layer = torch.nn.BatchNorm1d(FEATURES)
    layer.train(train)
    features = torch.tensor(batch, dtype=torch.float32).unsqueeze(1).repeat(1, FEATURES)
    try:
        layer(features)
    except Exception as error:  # recorded as measured, whatever torch raises
        return f"{type(error).__name__}: {error}"
    return "ok"


#: (layer, input shape) measured on one sample in train and eval mode: C = FEATURES.
SHAPES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("BatchNorm1d", (1, FEATURES)),
    ("BatchNorm1d", (1, FEATURES, 1)),
    ("BatchNorm1d", (1, FEATURES, 5)),
    ("BatchNorm2d", (1, FEATURES, 1, 1)),
    ("BatchNorm2d", (1, FEATURES, 4, 4)),
)


def shape_outcome(layer_name: str, shape: tuple[int, ...], *, train: bool) -> str:
    """A fresh layer of ``FEATURES`` channels on ``torch.ones(shape)``: ``"ok"`` or the error."""
    layer = getattr(torch.nn, layer_name)(FEATURES)
    layer.train(train)
    try:
        layer(torch.ones(shape))
    except Exception as error:  # recorded as measured, whatever torch raises
        return f"{type(error).__name__}: {error}"
    return "ok"


def shape_table() -> pd.DataFrame:
    """Each layer and one-sample input shape, in train and eval mode."""
    return pd.DataFrame(
        [
            {
                "layer": layer,
                "input shape": str(list(shape)),
                "values per channel": math.prod(shape) // FEATURES,
                "train mode": shape_outcome(layer, shape, train=True),
                "eval mode": shape_outcome(layer, shape, train=False),
            }
            for layer, shape in SHAPES
        ]
    )


@dataclass(frozen=True)
class Facts:
    """Which one-sample inputs BatchNorm refused in train mode, and how many values per
    channel the failing and the passing ones held."""

    failing: tuple[str, ...]
    passing: tuple[str, ...]
    failing_values: tuple[int, ...]
    passing_values: tuple[int, ...]
    eval_ok: int
    shapes: int


def facts(shapes: pd.DataFrame) -> Facts:
    """The names and counts the claim and the answers use, from the table of shapes."""
    failing = shapes[shapes["train mode"] != "ok"]
    passing = shapes[shapes["train mode"] == "ok"]
    return Facts(
        failing=tuple(_named(failing)),
        passing=tuple(_named(passing)),
        failing_values=tuple(sorted(set(failing["values per channel"]))),
        passing_values=tuple(sorted(set(passing["values per channel"]))),
        eval_ok=int((shapes["eval mode"] == "ok").sum()),
        shapes=len(shapes),
    )


def build() -> Evidence:
    size_rows, outcome_rows = [], []
    for case in CASES:
        received = batches(case)
        sizes: Counter[int] = Counter()
        examples: dict[int, list[int]] = {}
        for (epoch, rank), rank_batches in sorted(received.items(), key=lambda item: item[0][::-1]):
            size_rows.append(
                {
                    "DataLoader drop_last": case.loader_drop_last,
                    "rank": rank,
                    "epoch": epoch,
                    "sampler yields": len(sampler_share(case, rank, epoch)),
                    "batch sizes": listed(len(batch) for batch in rank_batches),
                }
            )
            for batch in rank_batches:
                sizes[len(batch)] += 1
                examples.setdefault(len(batch), batch)
        for size in sorted(sizes):
            outcome_rows.append(
                {
                    "DataLoader drop_last": case.loader_drop_last,
                    "batch size": size,
                    "batches of this size": sizes[size],
                    "train mode": batchnorm_outcome(examples[size], train=True),
                    "eval mode": batchnorm_outcome(examples[size], train=False),
                }
            )
    size_table = pd.DataFrame(size_rows)
    outcome_table = pd.DataFrame(outcome_rows)

    case = CASES[0]
    ones = outcome_table[
        ~outcome_table["DataLoader drop_last"] & (outcome_table["batch size"] == 1)
    ]
    kept = size_table[size_table["DataLoader drop_last"]]
    if ones.empty:
        ones_text = "No batch of one sample occurred without the DataLoader's drop_last."
    else:
        one = ones.iloc[0]
        ones_text = (
            f"Without the DataLoader's drop_last, {one['batches of this size']} batches held a "
            f"single sample; BatchNorm1d in train mode answered each with `{one['train mode']}` "
            f"(eval mode: `{one['eval mode']}`)."
        )
    held_back = sorted(
        {row["sampler yields"] - sum(json.loads(row["batch sizes"])) for _, row in kept.iterrows()}
    )
    prose = (
        f"With {case.dataset_size} samples on {case.world_size} ranks each rank's sampler yields "
        f"{joined(sorted(set(size_table['sampler yields'])))} samples per epoch, cut into "
        f"batches of {case.batch_size}. {ones_text} With the DataLoader's drop_last the batch "
        f"sizes are {' and '.join(sorted(set(kept['batch sizes'])))}: the short batch is "
        "dropped, and "
        f"with it {joined(held_back)} sample(s) per rank per epoch."
    )
    shapes = shape_table()
    found = facts(shapes)
    ones_count = 0 if ones.empty else int(ones.iloc[0]["batches of this size"])
    shares = joined(sorted(set(size_table["sampler yields"])))
    claim = (
        f"With {case.dataset_size} samples on {case.world_size} ranks and batch size "
        f"{case.batch_size}, each rank's share of {shares} left "
        f"{plural(ones_count, 'batch', 'batches')} of one sample over the run, which the "
        "DataLoader's drop_last removes. In train mode BatchNorm raised on one sample with "
        f"{joined(found.failing) or 'no input'} ({joined(found.failing_values)} value(s) per "
        f"channel) and ran with {joined(found.passing) or 'no input'} "
        f"({joined(found.passing_values)}); in eval mode "
        f"{count_of(found.eval_ok, found.shapes, 'inputs')} ran."
    )
    prose += (
        f"\n\nOn one sample in train mode, {joined(found.failing)} raised; "
        f"{joined(found.passing)} did not. The failing inputs have "
        f"{joined(found.failing_values)} value(s) per channel, the passing ones "
        f"{joined(found.passing_values)}: the batch statistics need more than one value per "
        "channel, so a batch of one breaks per-sample features (BatchNorm1d on [1, C]) and "
        "1x1 feature maps, while sequences and images are normalised over their positions. "
        f"In eval mode {found.eval_ok} of {found.shapes} inputs ran."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table("Batch sizes each rank receives", size_table),
            Table(
                "A fresh BatchNorm1d fed one batch of each size",
                outcome_table,
                note=(
                    f"Input: the batch's indices as floats, repeated over {FEATURES} features; "
                    "the error type and message are what torch raised in this run."
                ),
            ),
            Table(
                "BatchNorm on one sample, by input shape",
                shapes,
                note=f"A fresh layer with C = {FEATURES} channels fed torch.ones(shape).",
            ),
        ),
    )


def _named(rows: pd.DataFrame) -> list[str]:
    return [f"{row['layer']} on {row['input shape']}" for _, row in rows.iterrows()]
