"""Finding: ranks seeded differently shard different permutations: overlaps and gaps."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import pandas as pd
import torch
from matplotlib.figure import Figure

from studies.common.figures import draw_lines
from studies.core.cases import Case, Implementation
from studies.core.simulate import IndexDataset, make_sampler
from studies.findings import Evidence, Picture, Table
from studies.findings.wording import count_of, joined, plural

NAME = "seed-per-rank"
TITLE = "Ranks seeded differently: samples seen twice and samples never seen"
GUARDED_BY = "tests/test_findings.py::test_seed_per_rank_loses_and_repeats_samples"

DATASET_SIZE = 12_800
WORLD_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def times_seen(
    dataset_size: int,
    world_size: int,
    *,
    seed_per_rank: bool,
    implementation: Implementation = "torch",
) -> torch.Tensor:
    """How many ranks receive each sample in epoch 0 (one count per dataset index).

    Every rank builds its sampler as a training script does, with ``seed=rank`` when
    ``seed_per_rank`` and ``seed=0`` otherwise.
    """
    dataset = IndexDataset(dataset_size)
    received = []
    for rank in range(world_size):
        case = Case(
            dataset_size,
            world_size,
            1,
            seed=rank if seed_per_rank else 0,
            implementation=implementation,
        )
        sampler = make_sampler(case, dataset, rank)
        if sampler is None:
            raise ValueError(f"implementation must build a sampler, got {implementation!r}")
        received.append(torch.tensor(list(sampler), dtype=torch.int64))
    return torch.bincount(torch.cat(received), minlength=dataset_size)


@dataclass(frozen=True)
class Facts:
    """Coverage over the world sizes of 2 ranks or more, from the table."""

    world_sizes: tuple[int, ...]
    lost: int
    repeated: int
    most_never: float
    widest_gap: float
    widest_at: int
    same_seed_never: int


def facts(table: pd.DataFrame) -> Facts:
    """The values the claim and the answers use, from the table."""
    spread = table[table["world size"] > 1]
    gaps = (spread["never seen (fraction)"] - spread["independent draws: never (fraction)"]).abs()
    return Facts(
        world_sizes=tuple(int(world) for world in spread["world size"]),
        lost=int((spread["never seen"] > 0).sum()),
        repeated=int((spread["seen twice or more (fraction)"] > 0).sum()),
        most_never=float(spread["never seen (fraction)"].max()),
        widest_gap=float(gaps.max()),
        widest_at=int(spread.loc[gaps.idxmax(), "world size"]),
        same_seed_never=int(table["same seed: never seen"].max()),
    )


def build() -> Evidence:
    rows = []
    for world_size in WORLD_SIZES:
        counts = times_seen(DATASET_SIZE, world_size, seed_per_rank=True)
        ours = times_seen(DATASET_SIZE, world_size, seed_per_rank=True, implementation="samplers")
        same_seed = times_seen(DATASET_SIZE, world_size, seed_per_rank=False)
        never = 1 - 1 / world_size
        rows.append(
            {
                "world size": world_size,
                "never seen": int((counts == 0).sum()),
                "never seen (fraction)": float((counts == 0).double().mean()),
                "seen once (fraction)": float((counts == 1).double().mean()),
                "seen twice or more (fraction)": float((counts >= 2).double().mean()),
                "most copies": int(counts.max()),
                "same seed: never seen": int((same_seed == 0).sum()),
                "same seed: seen twice or more": int((same_seed >= 2).sum()),
                "independent draws: never (fraction)": never**world_size,
                "ours identical": bool(torch.equal(ours, counts)),
            }
        )
    table = pd.DataFrame(rows)

    def draw(figure: Figure) -> None:
        draw_lines(
            figure,
            table["world size"].tolist(),
            {
                "(1 - 1/W)^W": table["independent draws: never (fraction)"].tolist(),
                "never seen, seed = rank": table["never seen (fraction)"].tolist(),
                "seen twice or more, seed = rank": table["seen twice or more (fraction)"].tolist(),
                "never seen, one seed for all": (
                    table["same seed: never seen"] / DATASET_SIZE
                ).tolist(),
            },
            xlabel="world size",
            ylabel=f"fraction of the {DATASET_SIZE} samples, one epoch",
            title="Seeding each rank differently",
            logx=True,
            xticks=table["world size"].tolist(),
        )

    found = facts(table)
    worlds_measured = len(found.world_sizes)
    claim = (
        "If each rank passes its own seed (seed=rank), each shards a different permutation: "
        f"in one epoch of {DATASET_SIZE} samples, on {min(found.world_sizes)} to "
        f"{max(found.world_sizes)} ranks, some samples reached several ranks in "
        f"{count_of(found.repeated, worlds_measured, 'world sizes')} and others none in "
        f"{count_of(found.lost, worlds_measured, 'world sizes')}, up to "
        f"{found.most_never:.4f} of the dataset. The fraction never seen stayed within "
        f"{found.widest_gap:.4f} of (1 - 1/W)^W, what independent draws give, which rises "
        f"with the world size W towards 1/e = {math.exp(-1):.4f}. With one seed for all "
        f"ranks, {plural(found.same_seed_never, 'sample')} went unseen."
    )
    largest = table.iloc[-1]
    spread = table[table["world size"] > 1]
    gaps = (spread["never seen (fraction)"] - spread["independent draws: never (fraction)"]).abs()
    widest = spread.loc[gaps.idxmax()]
    measured = spread["never seen (fraction)"].tolist()
    formula = spread["independent draws: never (fraction)"].tolist()
    worlds = spread["world size"].tolist()
    falls = [
        f"from {before:.4f} on {w_before} ranks to {after:.4f} on {w_after}"
        for (w_before, before), (w_after, after) in pairwise(zip(worlds, measured, strict=True))
        if after <= before
    ]
    shape = (
        f"does not rise at every step: it falls {joined(falls)}"
        if falls
        else "rises at every world size measured"
    )
    formula_rises = all(after > before for before, after in pairwise(formula))
    eight = table[table["world size"] == 8].iloc[0]
    prose = (
        f"With {DATASET_SIZE} samples and seed=rank, the fraction never seen in the epoch is "
        + joined(
            f"{fraction:.4f} on {world} ranks"
            for world, fraction in zip(spread["world size"], measured, strict=True)
        )
        + f". Each is one epoch, a single random draw, and the measured fraction {shape}. It "
        f"stays within {gaps.max():.4f} of (1 - 1/W)^W (widest on {widest['world size']} "
        "ranks), the fraction independent draws would leave unseen, which "
        + (
            f"rises at every world size measured, from {formula[0]:.4f} to {formula[-1]:.4f}, "
            if formula_rises
            else f"goes from {formula[0]:.4f} to {formula[-1]:.4f} "
        )
        + f"towards 1/e = {math.exp(-1):.4f}. On {eight['world size']} ranks "
        f"{eight['never seen']} samples go unseen while "
        f"{eight['seen twice or more (fraction)']:.4f} of the dataset is seen at least twice; "
        f"on {largest['world size']} ranks a sample is received up to "
        f"{largest['most copies']} times. With one seed shared by all ranks, the most samples "
        f"left unseen at any world size measured is {int(table['same seed: never seen'].max())}."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                f"How often each of {DATASET_SIZE} samples is received in one epoch",
                table,
                floatfmt=".4f",
                note=(
                    "Shuffle on; each rank builds the stock sampler with seed=rank, or with "
                    "seed 0 (`same seed`). `independent draws` is (1 - 1/W)^W, for reference; "
                    f"it tends to 1/e = {math.exp(-1):.4f} as W grows. "
                    "`ours identical`: our sampler gives the same counts."
                ),
            ),
        ),
        pictures=(
            Picture(
                "coverage",
                "Fraction of the dataset never seen and seen twice, by world size",
                draw,
                size=(6.4, 4.6),
            ),
        ),
    )
