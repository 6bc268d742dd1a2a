"""Finding: padding repeats the head of the epoch's order, on the highest ranks."""

from __future__ import annotations

import json

import pandas as pd
import torch
from matplotlib.figure import Figure

from samplers.plan import interleave
from studies.common.figures import draw_layout
from studies.core.cases import Case, Implementation
from studies.findings import Evidence, Picture, Table
from studies.findings.observe import layout, plan, sampler_share
from studies.findings.wording import count_of, listed

NAME = "padding"
TITLE = "Which samples padding repeats, and which ranks receive them"
GUARDED_BY = "tests/test_findings.py::test_padding_repeats_head_of_order_on_highest_ranks"

#: (dataset size, world size) of the configurations measured; none divides evenly, and
#: the last needs more copies (5) than there are samples (3).
SHAPES: tuple[tuple[int, int], ...] = ((10, 4), (17, 8), (5, 4), (33, 4), (3, 8))
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
    """(every copy of a sample already seen, the positions of those copies), in order."""
    seen: set[int] = set()
    samples, positions = [], []
    for position, index in enumerate(order):
        if index in seen:
            samples.append(index)
            positions.append(position)
        seen.add(index)
    return samples, positions


def build() -> Evidence:
    rows = []
    for case, ours in zip(cases("torch"), cases("samplers"), strict=True):
        for epoch in range(EPOCHS):
            order = received_order(case, epoch)
            epoch_plan = plan(case, epoch)
            sizes = epoch_plan.sizes
            padded = torch.arange(sizes.dataset_size, sizes.total_size, dtype=torch.int64)
            head = epoch_plan.indices_at(padded).tolist()
            owners = sorted(set(epoch_plan.owner(padded).tolist()))
            copies, positions = repeats(order)
            ranks = sorted(
                set(epoch_plan.owner(torch.tensor(positions, dtype=torch.int64)).tolist())
            )
            rows.append(
                {
                    "dataset size": case.dataset_size,
                    "world size": case.world_size,
                    "epoch": epoch,
                    "padding": sizes.padding,
                    "epoch order": listed(epoch_plan.order.materialise().tolist()),
                    "head of the order, wrapping": listed(head),
                    "copies received": listed(copies),
                    "copies = head": copies == head,
                    "index 0 among copies": 0 in copies,
                    "copy positions": listed(positions),
                    "ranks given the copies": listed(ranks),
                    "= owners of the padding": ranks == owners,
                    "highest ranks": ranks == list(range(case.world_size))[-len(ranks) :],
                    "ours identical": received_order(ours, epoch) == order,
                }
            )
    table = pd.DataFrame(rows)

    picture_case = cases("torch")[0]
    picture_order = received_order(picture_case, 0)
    picture_layout = layout(plan(picture_case, 0))

    def draw(figure: Figure) -> None:
        draw_layout(
            figure,
            picture_order,
            **picture_layout,
            title=(
                f"{picture_case.dataset_size} samples on {picture_case.world_size} ranks, "
                "epoch 0: hatched cells repeat the head of the order"
            ),
        )

    epochs = len(table)
    heads = int(table["copies = head"].sum())
    highest = int(table["highest ranks"].sum())
    wrapping = table[table["padding"] > table["dataset size"]]
    wrapped = wrapping[wrapping["copies = head"]]
    zero = table[table["index 0 among copies"]]
    zero_at_head = all(0 in json.loads(head) for head in zero["head of the order, wrapping"])
    claim = (
        "Without the sampler's drop_last, the total_size - N extra copies handed out were "
        "that epoch's shuffled order read again from its head, not dataset indices 0, 1, "
        f"..., in {count_of(heads, epochs, 'epochs measured')}"
        + (
            f" (starting over from the head in {count_of(len(wrapped), len(wrapping), 'epochs')} "
            "whose padding exceeds N)"
            if not wrapping.empty
            else ""
        )
        + f", and went to the highest ranks in {count_of(highest, epochs, 'epochs')}."
    )
    prose = (
        f"In {heads} of {epochs} epochs measured, the extra copies received were exactly the "
        "order read again from its head, one per padding position, and they went to the "
        f"highest ranks in {highest} of {epochs} (the ranks the plan assigns the padding "
        f"positions in {int(table['= owners of the padding'].sum())} of {epochs})."
    )
    if not wrapping.empty:
        example = wrapping.iloc[0]
        prose += (
            f" In {len(wrapping)} epochs padding exceeds N, and in {len(wrapped)} of them the "
            "copies start over from the head: with "
            f"{example['dataset size']} samples on {example['world size']} ranks the "
            f"{example['padding']} copies are {example['copies received']} for the order "
            f"{example['epoch order']}."
        )
    prose += f" Dataset index 0 was among the copies in {len(zero)} of {epochs} epochs" + (
        ", each time because the head of that epoch's order holds it."
        if zero_at_head and not zero.empty
        else "."
    )
    return Evidence(
        claim=claim,
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
