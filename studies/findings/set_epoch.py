"""Finding: without ``set_epoch`` every epoch repeats epoch 0's order on every rank."""

from __future__ import annotations

import pandas as pd

from studies.cases import Case
from studies.findings import Evidence, Table
from studies.findings.observe import batches, flat
from studies.findings.wording import listed

NAME = "set-epoch"
TITLE = "Without set_epoch, every epoch repeats the same order"
CLAIM = (
    "With shuffle=True but no call to sampler.set_epoch(epoch), every rank receives exactly "
    "the same sequence of samples in every epoch; calling it gives each epoch a new order."
)
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
    without = table[~table["set_epoch"]]
    with_ = table[table["set_epoch"]]
    later = int((without["epochs"] - 1).sum())
    prose = (
        f"Over {len(without)} runs without set_epoch (both implementations, "
        f"{len(SHAPES)} shapes, {EPOCHS} epochs each), "
        f"{int(without['later epochs equal to epoch 0'].sum())} of {later} later epochs "
        "repeated epoch 0 exactly on every rank; over the same runs with set_epoch, "
        f"{int(with_['later epochs equal to epoch 0'].sum())} did. The sampler draws each "
        "epoch's permutation from seed + epoch, and epoch stays 0 until set_epoch changes it."
    )
    return Evidence(
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
