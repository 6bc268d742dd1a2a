"""Finding: without ``set_epoch`` every epoch repeats epoch 0's order on every rank."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from studies.core.cases import Case
from studies.findings import Evidence, Table
from studies.findings.observe import batches, flat
from studies.findings.wording import count_of, listed

NAME = "set-epoch"
TITLE = "Without set_epoch, later epochs repeat epoch 0's order"
GUARDED_BY = "tests/test_findings.py::test_without_set_epoch_every_epoch_repeats"

#: (dataset size, world size) of the configurations measured.
SHAPES: tuple[tuple[int, int], ...] = ((8, 2), (10, 4), (33, 8))
EPOCHS = 3
BATCH_SIZE = 4

#: Every case measured: both implementations, with and without set_epoch.
CASES: tuple[Case, ...] = tuple(
    Case(size, world, BATCH_SIZE, set_epoch=set_epoch, epochs=EPOCHS, implementation=name)
    for name in ("torch", "samplers")
    for size, world in SHAPES
    for set_epoch in (False, True)
)


def repeats(case: Case) -> tuple[int, int]:
    """(later epochs identical to epoch 0 on every rank, fewest distinct orders on a rank)."""
    received = batches(case)
    sequences = [
        [flat(received[epoch, rank]) for epoch in range(case.epochs)]
        for rank in range(case.world_size)
    ]
    repeated = sum(
        all(per_rank[epoch] == per_rank[0] for per_rank in sequences)
        for epoch in range(1, case.epochs)
    )
    distinct = min(len({tuple(sequence) for sequence in per_rank}) for per_rank in sequences)
    return repeated, distinct


@dataclass(frozen=True)
class Facts:
    """What the table of runs shows: later epochs that repeated epoch 0 on every rank."""

    runs: int
    repeated: int
    later: int
    repeated_with: int
    later_with: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table of runs."""
    without, with_ = table[~table["set_epoch"]], table[table["set_epoch"]]
    return Facts(
        runs=len(without),
        repeated=int(without["later epochs equal to epoch 0"].sum()),
        later=int((without["epochs"] - 1).sum()),
        repeated_with=int(with_["later epochs equal to epoch 0"].sum()),
        later_with=int((with_["epochs"] - 1).sum()),
    )


def build() -> Evidence:
    rows = []
    for case in CASES:
        repeated, distinct = repeats(case)
        rows.append(
            {
                "implementation": case.implementation,
                "dataset size": case.dataset_size,
                "world size": case.world_size,
                "set_epoch": case.set_epoch,
                "epochs": case.epochs,
                "later epochs equal to epoch 0": repeated,
                "distinct orders on a rank (fewest)": distinct,
            }
        )
    table = pd.DataFrame(rows)

    example_size, example_world = SHAPES[0]
    example = {
        set_epoch: batches(
            Case(example_size, example_world, BATCH_SIZE, set_epoch=set_epoch, epochs=EPOCHS)
        )
        for set_epoch in (False, True)
    }
    example_rows = [
        {
            "rank": rank,
            "epoch": epoch,
            "without set_epoch": listed(flat(example[False][epoch, rank])),
            "with set_epoch": listed(flat(example[True][epoch, rank])),
        }
        for rank in range(example_world)
        for epoch in range(EPOCHS)
    ]
    found = facts(table)
    claim = (
        "With shuffle=True but no call to sampler.set_epoch(epoch), "
        f"{count_of(found.repeated, found.later, 'later epochs')} of {found.runs} runs (both "
        "samplers) handed every rank exactly epoch 0's sequence again; with set_epoch, "
        f"{count_of(found.repeated_with, found.later_with, 'later epochs')} did."
    )
    prose = (
        f"Over {found.runs} runs without set_epoch (both implementations, {len(SHAPES)} "
        f"shapes, {EPOCHS} epochs each), {found.repeated} of {found.later} later epochs "
        "repeated epoch 0 exactly on every rank; over the same runs with set_epoch, "
        f"{found.repeated_with} did. The sampler draws each epoch's permutation from "
        "seed + epoch, and epoch stays 0 until set_epoch changes it."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "Epochs that repeat epoch 0",
                table,
                note=(
                    "Shuffle on, seed 0, batch size 4; a rank's order is the concatenation of "
                    "the batches its DataLoader yields."
                ),
            ),
            Table(
                f"What each rank receives, {example_size} samples on {example_world} ranks",
                pd.DataFrame(example_rows),
            ),
        ),
    )
