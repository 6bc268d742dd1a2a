"""Finding: the two drop_lasts act at different stages, before and after sharding."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd
import torch

from samplers.plan import rank_positions
from studies.core.cases import Case, Implementation
from studies.core.simulate import simulate
from studies.core.summary import summarize
from studies.findings import Evidence, Table
from studies.findings.observe import batches, flat, plan, sampler_share
from studies.findings.wording import count_of, listed

NAME = "drop-last"
TITLE = "The sampler's drop_last trims before sharding, the DataLoader's after"
GUARDED_BY = "tests/test_findings.py::test_sampler_trims_before_sharding_and_loader_after"

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
    never = [index for index in plan(case, 0).order.materialise().tolist() if index not in yielded]
    received = batches(case)
    held_back = [
        index
        for rank, share in enumerate(shares)
        for index in share[len(flat(received[0, rank])) :]
    ]
    return never, held_back


def held_back_padding(case: Case) -> list[int]:
    """The held-back indices (as :func:`dropped_by` lists them) that are padded copies.

    A rank's held-back samples are the end of its share; the plan says which of those
    share positions lie past the dataset size, i.e. repeat the head of the order.
    """
    epoch_plan = plan(case, 0)
    received = batches(case)
    copies = []
    for rank in range(case.world_size):
        kept = len(flat(received[0, rank]))
        positions = rank_positions(epoch_plan.sizes.total_size, case.world_size, rank, lo=kept)
        padded = positions[epoch_plan.is_padding(positions)]
        copies.extend(epoch_plan.indices_at(padded).tolist())
    return copies


@dataclass(frozen=True)
class Facts:
    """What the table shows about the two drop_lasts, and the first empty epoch."""

    trimmed: int
    trimmed_tails: int
    trimmed_repeats: int
    loader_only: int
    loader_copies: int
    empty: int
    configurations: int
    #: (dataset size, world size, batch size) of the first configuration with an empty
    #: epoch, None when there is none.
    empty_example: tuple[int, int, int] | None


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table."""
    trimmed = table[table["sampler drop_last"]]
    loader_only = table[~table["sampler drop_last"] & table["DataLoader drop_last"]]
    empty = table[table["empty epoch"]]
    first = empty.iloc[0] if not empty.empty else None
    return Facts(
        trimmed=len(trimmed),
        trimmed_tails=int(trimmed["= tail of the order"].sum()),
        trimmed_repeats=int((trimmed["received twice or more"] != "[]").sum()),
        loader_only=len(loader_only),
        loader_copies=int((loader_only["padded copies held back"] != "[]").sum()),
        empty=len(empty),
        configurations=len(table),
        empty_example=None
        if first is None
        else (int(first["dataset size"]), int(first["world size"]), int(first["batch size"])),
    )


def empty_text(example: tuple[int, int, int] | None) -> str:
    """The first empty epoch in words."""
    if example is None:
        return "no configuration measured gave an empty epoch"
    size, world, batch = example
    return f"{size} samples on {world} ranks with batch size {batch} gave an empty epoch"


def build() -> Evidence:
    measured = cases("torch")
    summary = summarize(measured, simulate(measured))
    ours = summarize(cases("samplers"), simulate(cases("samplers")))
    rows = []
    for case, (_, row), (_, our_row) in zip(
        measured, summary.iterrows(), ours.iterrows(), strict=True
    ):
        never, held_back = dropped_by(case)
        epoch_plan = plan(case, 0)
        sizes = epoch_plan.sizes
        tail = epoch_plan.indices_at(
            torch.arange(sizes.dataset_size - sizes.dropped, sizes.dataset_size, dtype=torch.int64)
        ).tolist()
        received = batches(case)
        counts = Counter(
            index for rank in range(case.world_size) for index in flat(received[0, rank])
        )
        rows.append(
            {
                "dataset size": case.dataset_size,
                "world size": case.world_size,
                "batch size": case.batch_size,
                "sampler drop_last": case.drop_last,
                "DataLoader drop_last": case.loader_drop_last,
                "epoch order": listed(epoch_plan.order.materialise().tolist()),
                "sampler yields per rank": listed(
                    len(sampler_share(case, rank, 0)) for rank in range(case.world_size)
                ),
                "batches per rank": listed(row["batches_per_rank"]),
                "never yielded by the sampler": listed(never),
                "= tail of the order": never == tail,
                "held back by the DataLoader": listed(held_back),
                "padded copies held back": listed(held_back_padding(case)),
                "received by no rank": listed(
                    index for index in range(case.dataset_size) if index not in counts
                ),
                "received twice or more": listed(
                    sorted(index for index, count in counts.items() if count >= 2)
                ),
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
    neither = row_of(contrast, False, False)
    sampler_only = row_of(contrast, True, False)
    loader_only = row_of(contrast, False, True)
    emptied = row_of(tiny, False, True)
    coverage = (
        f"coverage is {sampler_only['coverage']:g} either way"
        if sampler_only["coverage"] == loader_only["coverage"]
        else f"coverage is {sampler_only['coverage']:g} and {loader_only['coverage']:g}"
    )
    found = facts(table)
    trimmed_tails, trimmed_repeats = found.trimmed_tails, found.trimmed_repeats
    trimmed = table[table["sampler drop_last"]]
    claim = (
        "The sampler's drop_last trims the tail of the epoch order before sharding: what it "
        f"never yields was the order's tail in "
        f"{count_of(trimmed_tails, found.trimmed, 'configurations')} with it, and a sample "
        f"reached a rank twice in {count_of(trimmed_repeats, found.trimmed, 'configurations')}. "
        "The DataLoader's drop_last discards each rank's short last batch after sharding, "
        "padded copies of samples still received among them in "
        f"{count_of(found.loader_copies, found.loader_only, 'configurations')} with it alone, "
        f"and it can take a rank's whole share: {empty_text(found.empty_example)}."
    )
    prose = (
        f"With {contrast[0]} samples on {contrast[1]} ranks and batch size {contrast[2]} "
        f"(epoch order {neither['epoch order']}), without either drop_last the samples "
        f"received twice or more are {neither['received twice or more']}. The sampler's "
        f"drop_last alone never yields {sampler_only['never yielded by the sampler']}, so the "
        f"samples no rank receives are {sampler_only['received by no rank']} and those "
        f"received twice or more are {sampler_only['received twice or more']}. The "
        f"DataLoader's drop_last alone holds back {loader_only['held back by the DataLoader']} "
        f"after sharding, padded copies among them {loader_only['padded copies held back']}; "
        f"the samples no rank receives are {loader_only['received by no rank']} and those "
        f"received twice or more are {loader_only['received twice or more']}, and "
        f"{coverage}. Over the {len(trimmed)} configurations with the sampler's drop_last, "
        f"what it never yields is the tail of the order in {trimmed_tails}, and some sample "
        f"is received twice or more in {trimmed_repeats}. "
        f"With {tiny[0]} samples on {tiny[1]} ranks and batch size {tiny[2]}, each rank's share "
        f"({emptied['sampler yields per rank']}) is one short batch, so the DataLoader's "
        f"drop_last leaves batches per rank {emptied['batches per rank']} and coverage "
        f"{emptied['coverage']:g}: the training loop never takes a step. "
        f"{int(table['empty epoch'].sum())} of the {len(table)} configurations measured have "
        "an empty epoch."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "What each drop_last drops (epoch 0)",
                table,
                note=(
                    "Shuffle on, seed 0; measured on the stock sampler and DataLoader. "
                    "`= tail of the order`: what the sampler never yields is the end of the "
                    "epoch order past total_size. `padded copies held back`: held-back "
                    "entries at padding positions of the order. `coverage`: distinct samples "
                    "received / dataset size. `ours identical`: our sampler's summary row is "
                    "the same."
                ),
            ),
        ),
    )


def _observed(row: pd.Series) -> dict[str, object]:
    """A summary row without its implementation column."""
    return {key: value for key, value in row.items() if key != "implementation"}
