"""Finding 2: padding repeats the head of the epoch's order, on the highest ranks."""

from __future__ import annotations

import pandas as pd
import torch
from matplotlib.figure import Figure

from samplers.plan import interleave
from studies.cases import Case, Implementation
from studies.figures import draw_layout
from studies.findings import Finding, Picture, Table
from studies.findings.observe import listed, plan, sampler_share

NAME = "padding"
TITLE = "Padding repeats the head of the shuffled order, on the highest ranks"
CLAIM = (
    "Without the sampler's drop_last, the samples handed out twice are the first "
    "total_size - N samples of that epoch's (shuffled) order, not dataset index 0, and the "
    "extra copies go to the highest ranks."
)
GUARDED_BY = "tests/test_findings.py::test_padding_repeats_head_of_order_on_highest_ranks"

#: (dataset size, world size) of the configurations measured; none divides evenly.
SHAPES: tuple[tuple[int, int], ...] = ((10, 4), (17, 8), (5, 4), (33, 4))
EPOCHS = 2


def cases(implementation: Implementation = "torch") -> list[Case]:
    """The measured cases (shuffle on, seed 0, set_epoch) for ``implementation``."""
    return [
        Case(size, world, 4, epochs=EPOCHS, implementation=implementation) for size, world in SHAPES
    ]


def received_order(case: Case, epoch: int) -> list[int]:
    """What all ranks' samplers yield in ``epoch``, put back in epoch-order positions."""
    shares = [sampler_share(case, rank, epoch) for rank in range(case.world_size)]
    return interleave([torch.tensor(share, dtype=torch.int64) for share in shares]).tolist()


def repeats(order: list[int]) -> tuple[list[int], list[int]]:
    """(samples received twice, positions of their second copies), in position order."""
    seen: set[int] = set()
    samples, positions = [], []
    for position, index in enumerate(order):
        if index in seen:
            samples.append(index)
            positions.append(position)
        seen.add(index)
    return samples, positions


def build() -> Finding:
    rows = []
    for case, ours in zip(cases("torch"), cases("samplers"), strict=True):
        for epoch in range(EPOCHS):
            order = received_order(case, epoch)
            epoch_plan = plan(case, epoch)
            padding = epoch_plan.sizes.padding
            head = epoch_plan.order[:padding].tolist()
            twice, positions = repeats(order)
            ranks = sorted(
                set(epoch_plan.owner(torch.tensor(positions, dtype=torch.int64)).tolist())
            )
            rows.append(
                {
                    "dataset size": case.dataset_size,
                    "world size": case.world_size,
                    "epoch": epoch,
                    "padding": padding,
                    "head of the epoch order": listed(head),
                    "received twice": listed(twice),
                    "twice = head": twice == head,
                    "index 0 received twice": 0 in twice,
                    "ranks given the copies": listed(ranks),
                    "highest ranks": ranks
                    == list(range(case.world_size - padding, case.world_size)),
                    "ours identical": received_order(ours, epoch) == order,
                }
            )
    table = pd.DataFrame(rows)

    picture_case = cases("torch")[0]
    picture_order = received_order(picture_case, 0)
    picture_plan = plan(picture_case, 0)
    positions = torch.arange(picture_plan.sizes.total_size, dtype=torch.int64)
    picture_padding = picture_plan.is_padding(positions).tolist()

    def draw(figure: Figure) -> None:
        draw_layout(
            figure,
            picture_order,
            picture_case.world_size,
            padding=picture_padding,
            title=(
                f"{picture_case.dataset_size} samples on {picture_case.world_size} ranks, "
                "epoch 0: hatched cells repeat the head of the order"
            ),
        )

    prose = (
        f"In {int(table['twice = head'].sum())} of {len(table)} epochs measured, the samples "
        "received twice were exactly the first `padding` entries of that epoch's order, and "
        f"the copies went to the highest ranks in {int(table['highest ranks'].sum())} of "
        f"{len(table)}. Dataset index 0 was among the repeats in "
        f"{int(table['index 0 received twice'].sum())} of {len(table)}: it is repeated only "
        "when the shuffle happens to put it at the head of the order. The copies sit at "
        "positions N to total_size - 1 of the padded order, which the strided layout deals "
        "to the last ranks' last slots."
    )
    return Finding(
        name=NAME,
        title=TITLE,
        claim=CLAIM,
        guarded_by=GUARDED_BY,
        prose=prose,
        tables=(
            Table(
                "Which samples are repeated, and where they go",
                table,
                note=(
                    "Shuffle on, seed 0, set_epoch called; measured on the stock sampler's "
                    "output for every rank. `ours identical`: our sampler yields the same."
                ),
            ),
        ),
        pictures=(
            Picture(
                "layout",
                f"Which sample each of {picture_case.world_size} ranks receives from "
                f"{picture_case.dataset_size} samples; hatched cells are padding",
                draw,
                size=(7.0, 3.2),
            ),
        ),
    )
