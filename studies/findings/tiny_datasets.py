"""Finding: fewer samples than ranks: many repeats, or (drop_last) nothing at all."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from dataclasses import dataclass

import pandas as pd
import torch
from matplotlib.figure import Figure
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from samplers.plan import interleave
from studies.common.figures import draw_layout
from studies.core.cases import Case
from studies.core.simulate import IndexDataset
from studies.findings import Evidence, Picture, Table
from studies.findings.observe import batches, flat, layout, plan, sampler_share
from studies.findings.wording import count_of, joined, listed, plural

NAME = "tiny-datasets"
TITLE = "Fewer samples than ranks: repeats, or nothing at all"
GUARDED_BY = "tests/test_findings.py::test_tiny_datasets_repeat_or_vanish"

#: (dataset size, world size) of the configurations measured.
SHAPES: tuple[tuple[int, int], ...] = ((1, 8), (3, 8), (5, 8), (3, 4))
BATCH_SIZE = 4


def cases() -> list[Case]:
    """Every shape without and with the sampler's drop_last (shuffle on, seed 0)."""
    return [
        Case(size, world, BATCH_SIZE, drop_last=drop_last, epochs=1)
        for size, world in SHAPES
        for drop_last in (False, True)
    ]


def construction_warnings(
    sampler_class: type[StockDistributedSampler[int]], case: Case
) -> list[str]:
    """Messages of the warnings raised while building every rank's sampler of ``case``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rank in range(case.world_size):
            sampler_class(
                IndexDataset(case.dataset_size),
                num_replicas=case.world_size,
                rank=rank,
                shuffle=case.shuffle,
                seed=case.seed,
                drop_last=case.drop_last,
            )
    return [str(warning.message) for warning in caught]


@dataclass(frozen=True)
class Facts:
    """What the tiny configurations gave, without and with the sampler's drop_last."""

    padded: int
    most_copies: int
    trimmed: int
    emptied: int
    stock_warnings: int
    our_warnings: int
    samplers_built: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table."""
    padded = table[~table["sampler drop_last"]]
    trimmed = table[table["sampler drop_last"]]
    return Facts(
        padded=len(padded),
        most_copies=int(padded["copies of the most repeated sample"].max()),
        trimmed=len(trimmed),
        emptied=int((trimmed["distinct samples received"] == 0).sum()),
        stock_warnings=int(trimmed["stock warnings"].sum()),
        our_warnings=int(trimmed["our warnings"].sum()),
        samplers_built=int(trimmed["world size"].sum()),
    )


def build() -> Evidence:
    rows = []
    for case in cases():
        received = batches(case)
        counts = Counter(
            index for rank in range(case.world_size) for index in flat(received[0, rank])
        )
        shares = [len(sampler_share(case, rank, 0)) for rank in range(case.world_size)]
        stock_warnings = construction_warnings(StockDistributedSampler, case)
        our_warnings = construction_warnings(DistributedSampler, case)
        rows.append(
            {
                "dataset size": case.dataset_size,
                "world size": case.world_size,
                "sampler drop_last": case.drop_last,
                "samples per rank": joined(sorted(set(shares))),
                "distinct samples received": len(counts),
                "copies of the most repeated sample": max(counts.values(), default=0),
                "batches per rank": listed(
                    len(received[0, rank]) for rank in range(case.world_size)
                ),
                "stock warnings": len(stock_warnings),
                "our warnings": len(our_warnings),
            }
        )
    table = pd.DataFrame(rows)

    picture_case = Case(3, 8, BATCH_SIZE, epochs=1)
    shares = [sampler_share(picture_case, rank, 0) for rank in range(picture_case.world_size)]
    picture_order = interleave([torch.tensor(share, dtype=torch.int64) for share in shares])
    picture_layout = layout(plan(picture_case, 0))

    def draw(figure: Figure) -> None:
        draw_layout(
            figure,
            picture_order.tolist(),
            **picture_layout,
            title=(
                f"{picture_case.dataset_size} samples on {picture_case.world_size} ranks: "
                "hatched cells repeat earlier samples"
            ),
        )

    found = facts(table)
    padded = table[~table["sampler drop_last"]]
    dropped = table[table["sampler drop_last"]]
    batch_counts = sorted({n for cell in dropped["batches per rank"] for n in json.loads(cell)})
    example_message = construction_warnings(
        DistributedSampler, Case(1, 8, BATCH_SIZE, drop_last=True)
    )
    claim = (
        f"With fewer samples than ranks ({found.padded} configurations), padding handed a "
        f"sample out up to {found.most_copies} times in one epoch; with the sampler's "
        f"drop_last every rank received nothing in "
        f"{count_of(found.emptied, found.trimmed, 'configurations')}, while the stock sampler "
        f"raised {plural(found.stock_warnings, 'warning')} (ours: {found.our_warnings}, one "
        f"per sampler of the {found.samplers_built} built)."
    )
    prose = (
        "Without drop_last, every rank still receives "
        f"{joined(sorted(set(padded['samples per rank'])))} sample(s): the order is repeated "
        "until every rank has its share, so with "
        f"{padded.iloc[0]['dataset size']} sample on {padded.iloc[0]['world size']} ranks that "
        f"sample is handed out {padded.iloc[0]['copies of the most repeated sample']} times. "
        "With the sampler's drop_last, every rank's share is "
        f"{joined(sorted(set(dropped['samples per rank'])))} samples and its DataLoader yields "
        f"{joined(batch_counts)} batches, in "
        f"{found.emptied} of {found.trimmed} configurations; the stock sampler raised "
        f"{found.stock_warnings} warnings over all of them, ours raised "
        f"{found.our_warnings} over the {found.samplers_built} samplers built with drop_last, "
        f"e.g. `{example_message[0] if example_message else 'none'}`."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "What each rank receives from a tiny dataset (epoch 0)",
                table,
                note=(
                    f"Shuffle on, seed 0, batch size {BATCH_SIZE}; measured on the stock sampler "
                    "and DataLoader. Warnings are counted while building every rank's sampler."
                ),
            ),
        ),
        pictures=(
            Picture(
                "layout",
                f"{picture_case.dataset_size} samples dealt to {picture_case.world_size} ranks",
                draw,
                size=(6.0, 4.2),
            ),
        ),
    )
