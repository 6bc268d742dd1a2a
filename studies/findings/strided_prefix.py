"""Finding: after k steps the samples consumed are a prefix of the epoch order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd
import torch
from matplotlib.figure import Figure

from studies.common.figures import draw_layout
from studies.core.cases import Case
from studies.findings import Evidence, Picture, Table
from studies.findings.observe import batches, layout, plan
from studies.findings.wording import count_of

NAME = "strided-prefix"
TITLE = "After k steps, the samples consumed and the epoch order's first positions"
GUARDED_BY = "tests/test_findings.py::test_consumed_samples_are_a_prefix_of_the_order"

#: (dataset size, world size, batch size) of the configurations measured.
SHAPES: tuple[tuple[int, int, int], ...] = ((20, 4, 2), (23, 4, 2), (24, 3, 3))


def cases() -> list[Case]:
    """The measured cases: shuffle on, seed 0, one epoch, no drop_last."""
    return [Case(size, world, batch, epochs=1) for size, world, batch in SHAPES]


def consumed_after(case: Case) -> list[list[int]]:
    """For each step k = 1, 2, ...: every index all ranks consumed in steps 1..k (epoch 0).

    A step is one batch on every rank; ranks with fewer batches contribute none.
    """
    received = batches(case)
    steps = max(len(received[0, rank]) for rank in range(case.world_size))
    return [
        [
            index
            for rank in range(case.world_size)
            for batch in received[0, rank][:step]
            for index in batch
        ]
        for step in range(1, steps + 1)
    ]


@dataclass(frozen=True)
class Facts:
    """Steps after which the consumed samples were a prefix of the order."""

    prefixes: int
    steps: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table."""
    return Facts(int(table["= first positions of the order"].sum()), len(table))


def build() -> Evidence:
    rows = []
    for case in cases():
        epoch_plan = plan(case, 0)
        order = epoch_plan.global_indices()
        for step, consumed in enumerate(consumed_after(case), start=1):
            count = len(consumed)
            positions = torch.arange(count, dtype=torch.int64)
            rows.append(
                {
                    "dataset size": case.dataset_size,
                    "world size": case.world_size,
                    "batch size": case.batch_size,
                    "step": step,
                    "samples consumed": count,
                    "= first positions of the order": Counter(consumed)
                    == Counter(order[:count].tolist()),
                    "padding among them": int(epoch_plan.is_padding(positions).sum()),
                }
            )
    table = pd.DataFrame(rows)

    picture_case = cases()[0]
    picture_plan = plan(picture_case, 0)
    picture_order = picture_plan.global_indices().tolist()
    step_of: list[int] = []
    for step, consumed in enumerate(consumed_after(picture_case)):
        step_of.extend([step] * (len(consumed) - len(step_of)))
    picture_layout = layout(picture_plan)

    def draw(figure: Figure) -> None:
        draw_layout(
            figure,
            picture_order,
            **picture_layout,
            steps=step_of,
            title=(
                f"{picture_case.dataset_size} samples, {picture_case.world_size} ranks, batch "
                f"size {picture_case.batch_size}: colour = step that consumes the sample"
            ),
        )

    found = facts(table)
    claim = (
        "Rank r takes positions r, r + W, r + 2W, ... of the epoch order, so the samples all "
        "ranks had consumed after k steps of batch size B were exactly the first k * B * W "
        f"positions of that order after {count_of(found.prefixes, found.steps, 'steps')} "
        f"measured ({len(SHAPES)} shapes): progress through an epoch is one number, "
        "whatever the world size."
    )
    last_steps = table.groupby(["dataset size", "world size", "batch size"])["step"].transform(
        "max"
    )
    padded = table[table["padding among them"] > 0]
    padding_sentence = (
        "Padding is consumed only in the last step."
        if bool((padded["step"] == last_steps[padded.index]).all())
        else "Padding is consumed before the last step."
    )
    prose = (
        f"In {int(table['= first positions of the order'].sum())} of {len(table)} steps "
        "measured, the samples consumed so far were exactly the first positions of the "
        "padded epoch order (as a multiset). So the position in an epoch is one number, "
        "the samples consumed, and a checkpoint needs only that, the epoch and the seed: the "
        "rest of the epoch is the rest of the order, which any number of ranks could share "
        "out again. "
        f"{padding_sentence} The stock sampler cannot start an epoch part-way, so a job "
        "restarted from such a checkpoint replays the epoch from its start, or skips "
        "batches by iterating past them. Ours checkpoints that one number: "
        "`sampler.state_dict()` (a small JSON-serialisable dict, the same on every rank: "
        "the epoch and that one position; `consumed=` tells it the position when the loop "
        "is one the sampler cannot see) and `sampler.load_state_dict(state)` on every rank "
        "of the resumed job, on the "
        "same or another world size, continues with the rest of the order (the resume "
        "finding measures it)."
        if bool(table["= first positions of the order"].all())
        else f"In only {int(table['= first positions of the order'].sum())} of {len(table)} "
        "steps were the samples consumed the first positions of the epoch order."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "What all ranks have consumed after each step (epoch 0)",
                table,
                note=(
                    "Shuffle on, seed 0; measured on the stock sampler and DataLoader. A step "
                    "is one batch on every rank."
                ),
            ),
        ),
        pictures=(
            Picture(
                "steps",
                "Which step consumes each position of the epoch order, rank by rank",
                draw,
                size=(7.0, 3.4),
            ),
        ),
    )
