"""Finding 3: the sampler's ``drop_last`` and the DataLoader's drop different samples."""

from __future__ import annotations

import pandas as pd

from studies.cases import Case, Implementation
from studies.findings import Finding, Table
from studies.findings.observe import batches, flat, listed, plan, sampler_share
from studies.simulate import simulate
from studies.summary import summarize

NAME = "drop-last"
TITLE = "The sampler's drop_last and the DataLoader's drop_last drop different samples"
CLAIM = (
    "The sampler's drop_last trims the tail of the epoch order, so those samples reach no "
    "rank; the DataLoader's drop_last discards each rank's short last batch, which can be "
    "the rank's whole share: with 6 samples, 2 ranks and batch size 4 the epoch is empty."
)
GUARDED_BY = "tests/test_findings.py::test_sampler_and_loader_drop_last_drop_different_samples"

#: (dataset size, world size, batch size) of the configurations measured.
SHAPES: tuple[tuple[int, int, int], ...] = ((6, 2, 4), (10, 2, 4), (11, 4, 2))


def cases(implementation: Implementation = "torch") -> list[Case]:
    """Every shape with every combination of the two flags (shuffle on, seed 0)."""
    return [
        Case(
            size,
            world,
            batch,
            drop_last=drop_last,
            loader_drop_last=loader_drop_last,
            epochs=1,
            implementation=implementation,
        )
        for size, world, batch in SHAPES
        for drop_last in (False, True)
        for loader_drop_last in (False, True)
    ]


def dropped_by(case: Case) -> tuple[list[int], list[int]]:
    """(indices the sampler never yields, indices it yields that the DataLoader holds back).

    Both in the order of the epoch (sampler) and rank by rank (DataLoader), epoch 0.
    """
    shares = [sampler_share(case, rank, 0) for rank in range(case.world_size)]
    yielded = {index for share in shares for index in share}
    never = [index for index in plan(case, 0).order.tolist() if index not in yielded]
    received = batches(case)
    held_back = [
        index
        for rank, share in enumerate(shares)
        for index in share[len(flat(received[0, rank])) :]
    ]
    return never, held_back


def build() -> Finding:
    measured = cases("torch")
    summary = summarize(measured, simulate(measured))
    ours = summarize(cases("samplers"), simulate(cases("samplers")))
    rows = []
    for case, (_, row), (_, our_row) in zip(
        measured, summary.iterrows(), ours.iterrows(), strict=True
    ):
        never, held_back = dropped_by(case)
        rows.append(
            {
                "dataset size": case.dataset_size,
                "world size": case.world_size,
                "batch size": case.batch_size,
                "sampler drop_last": case.drop_last,
                "DataLoader drop_last": case.loader_drop_last,
                "sampler yields per rank": listed(
                    len(sampler_share(case, rank, 0)) for rank in range(case.world_size)
                ),
                "batches per rank": listed(row["batches_per_rank"]),
                "never yielded by the sampler": listed(never),
                "held back by the DataLoader": listed(held_back),
                "coverage": row["coverage"],
                "empty epoch": all(count == 0 for count in row["batches_per_rank"]),
                "ours identical": _observed(our_row) == _observed(row),
            }
        )
    table = pd.DataFrame(rows)

    def row_of(shape: tuple[int, int, int], drop_last: bool, loader_drop_last: bool) -> pd.Series:
        size, world, batch = shape
        return table[
            (table["dataset size"] == size)
            & (table["world size"] == world)
            & (table["batch size"] == batch)
            & (table["sampler drop_last"] == drop_last)
            & (table["DataLoader drop_last"] == loader_drop_last)
        ].iloc[0]

    tiny, _, contrast = SHAPES
    sampler_only = row_of(contrast, True, False)
    loader_only = row_of(contrast, False, True)
    emptied = row_of(tiny, False, True)
    prose = (
        f"With {contrast[0]} samples on {contrast[1]} ranks and batch size {contrast[2]}, the "
        f"sampler's drop_last alone never yields {sampler_only['never yielded by the sampler']}"
        " (the tail of the shuffled order, so a different tail each epoch with set_epoch), "
        f"while the DataLoader's drop_last alone holds back "
        f"{loader_only['held back by the DataLoader']} (the last sample of each rank's share: "
        "its short last batch). "
        f"With {tiny[0]} samples on {tiny[1]} ranks and batch size {tiny[2]}, each rank's share "
        f"({emptied['sampler yields per rank']}) is one short batch, so the DataLoader's "
        f"drop_last leaves batches per rank {emptied['batches per rank']} and coverage "
        f"{emptied['coverage']:g}: the training loop never takes a step. "
        f"{int(table['empty epoch'].sum())} of the {len(table)} configurations measured have "
        "an empty epoch."
    )
    return Finding(
        name=NAME,
        title=TITLE,
        claim=CLAIM,
        guarded_by=GUARDED_BY,
        prose=prose,
        tables=(
            Table(
                "What each drop_last drops (epoch 0)",
                table,
                note=(
                    "Shuffle on, seed 0; measured on the stock sampler and DataLoader. "
                    "`coverage`: distinct samples received / dataset size. `ours identical`: "
                    "our sampler's summary row is the same."
                ),
            ),
        ),
    )


def _observed(row: pd.Series) -> dict[str, object]:
    """A summary row without its implementation column."""
    return {key: value for key, value in row.items() if key != "implementation"}
