"""Finding: the sampler ignores ``torch.manual_seed``; only its ``seed`` argument counts,
added to the epoch, so runs one seed apart share epochs, and seeds ``2**32`` apart are one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from studies.core.cases import Implementation
from studies.core.simulate import IndexDataset
from studies.findings import Evidence, Table
from studies.findings.wording import joined, listed, plural

NAME = "manual-seed"
TITLE = (
    "torch.manual_seed and the sampler's order: only the seed argument counts, added to the epoch"
)
GUARDED_BY = "tests/test_findings.py::test_sampler_ignores_torch_manual_seed"

#: The global seeds a script might set, and the configuration measured (rank 0's epoch 0).
MANUAL_SEEDS: tuple[int, ...] = (0, 1, 2, 12345)
DATASET_SIZE = 10
WORLD_SIZE = 2
SAMPLERS: dict[str, type[StockDistributedSampler[int]]] = {
    "torch": StockDistributedSampler,
    "samplers": DistributedSampler,
}


def sampler_order(implementation: Implementation, manual_seed: int, seed: int | None) -> list[int]:
    """Rank 0's epoch-0 order after ``torch.manual_seed(manual_seed)``.

    ``seed=None`` builds the sampler as most scripts do, without a seed argument; otherwise
    ``seed`` is passed. The global generator's state is restored afterwards.
    """
    sampler_class = SAMPLERS[implementation]
    options = {} if seed is None else {"seed": seed}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(manual_seed)
        sampler = sampler_class(
            IndexDataset(DATASET_SIZE), num_replicas=WORLD_SIZE, rank=0, **options
        )
        return list(sampler)


#: Runs compared for seeds one apart and ``2**32`` apart: each sampler and its settings.
RUNS: dict[str, tuple[type[StockDistributedSampler[int]], dict[str, Any]]] = {
    "stock": (StockDistributedSampler, {}),
    "ours, default": (DistributedSampler, {}),
    "ours, permutation='feistel'": (DistributedSampler, {"permutation": "feistel"}),
}
#: Each run as the prose names it.
RUN_NAMES = {
    "stock": "the stock sampler",
    "ours, default": "ours by default",
    "ours, permutation='feistel'": "ours with permutation='feistel'",
}
#: Epochs of the run seeded 1 compared with those of the run seeded 0.
EPOCHS = 4
#: torch's CPU generator keeps a seed's low 32 bits.
WRAP = 2**32


def run_order(run: str, seed: int, epoch: int) -> list[int]:
    """The whole epoch's order (one rank) of ``run`` seeded ``seed`` at ``epoch``."""
    sampler_class, settings = RUNS[run]
    sampler = sampler_class(
        IndexDataset(DATASET_SIZE), num_replicas=1, rank=0, seed=seed, **settings
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def runs_table() -> pd.DataFrame:
    """Per run: how many of seed 1's first :data:`EPOCHS` epochs are seed 0's next ones
    (epoch ``e`` of seed 1 against epoch ``e + 1`` of seed 0), and whether seed
    :data:`WRAP` gives seed 0's epoch 0."""
    shared = f"epochs 0-{EPOCHS - 1} of seed 1 that are epochs 1-{EPOCHS} of seed 0"
    return pd.DataFrame(
        [
            {
                "sampler": run,
                shared: sum(
                    run_order(run, 1, epoch) == run_order(run, 0, epoch + 1)
                    for epoch in range(EPOCHS)
                ),
                "seed 2**32's epoch 0 is seed 0's": (
                    "yes" if run_order(run, WRAP, 0) == run_order(run, 0, 0) else "no"
                ),
            }
            for run in RUNS
        ]
    )


def loader_order(manual_seed: int) -> list[int]:
    """A DataLoader(shuffle=True) without sampler or generator, after torch.manual_seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(manual_seed)
        loader = DataLoader(IndexDataset(DATASET_SIZE), batch_size=DATASET_SIZE, shuffle=True)
        return [index for batch in loader for index in batch.tolist()]


@dataclass(frozen=True)
class Facts:
    """Distinct epoch-0 orders over the torch.manual_seed values, by column."""

    manual_seeds: int
    stock_unseeded: int
    ours_unseeded: int
    stock_seeded: int
    loader: int
    #: Per run of :data:`RUNS`: seed 1's epochs that are seed 0's next ones.
    shared: dict[str, int]
    #: The runs whose seed ``2**32`` gives seed 0's order.
    wrapped: tuple[str, ...]


def facts(table: pd.DataFrame, runs: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the tables of orders and runs."""
    shared = runs.columns[1]
    return Facts(
        manual_seeds=len(table),
        stock_unseeded=int(table["stock, no seed argument"].nunique()),
        ours_unseeded=int(table["ours, no seed argument"].nunique()),
        stock_seeded=int(table["stock, seed=manual seed"].nunique()),
        loader=int(table["DataLoader shuffle=True, no sampler"].nunique()),
        shared={str(row["sampler"]): int(row[shared]) for _, row in runs.iterrows()},
        wrapped=tuple(str(run) for run in runs.loc[runs[runs.columns[2]] == "yes", "sampler"]),
    )


def build() -> Evidence:
    rows = [
        {
            "torch.manual_seed": manual_seed,
            "stock, no seed argument": listed(sampler_order("torch", manual_seed, None)),
            "ours, no seed argument": listed(sampler_order("samplers", manual_seed, None)),
            "stock, seed=manual seed": listed(sampler_order("torch", manual_seed, manual_seed)),
            "DataLoader shuffle=True, no sampler": listed(loader_order(manual_seed)),
        }
        for manual_seed in MANUAL_SEEDS
    ]
    table = pd.DataFrame(rows)
    runs = runs_table()
    found = facts(table, runs)
    stock, ours, feistel = (found.shared[run] for run in RUNS)
    claim = (
        "DistributedSampler shuffles with its own generator, seeded from its seed argument "
        f"(default 0) plus the epoch: over {found.manual_seeds} values of torch.manual_seed, "
        f"rank 0 received {plural(found.stock_unseeded, 'distinct order')} from the stock "
        f"sampler and {found.ours_unseeded} from ours when no seed was passed, and "
        f"{found.stock_seeded} when the same values were passed as its seed. A DataLoader "
        f"shuffling without a sampler follows torch.manual_seed: {found.loader} orders. "
        f"Because seed and epoch are added, {stock} of {EPOCHS} epochs of a run seeded 1 "
        f"were epochs of the run seeded 0, one epoch later, with the stock sampler "
        f"({ours} with ours by default, {feistel} with permutation='feistel'), and seed "
        f"2**32 gave seed 0's order with {_runs(found.wrapped)}."
    )
    prose = (
        f"Over {found.manual_seeds} values of torch.manual_seed ({joined(MANUAL_SEEDS)}), rank 0 "
        f"of {WORLD_SIZE} received {plural(found.stock_unseeded, 'distinct epoch-0 order')} "
        f"from the stock sampler and {found.ours_unseeded} from ours when no seed was passed; "
        f"passing the same values as the sampler's seed gave {found.stock_seeded}, and a "
        f"DataLoader shuffling without a sampler gave {found.loader}. So seeding torch does "
        "not vary the sampler's order between runs (e.g. between repeated trials): pass "
        "seed= to the sampler, the same value on every rank (different seeds per rank lose "
        "samples, see the seed-per-rank finding). Runs meant to differ (repeated trials, "
        f"an ensemble) are less apart than their seeds look: the stock sampler seeds epoch "
        f"e with seed + e, so the run seeded 1 replayed {stock} of its first {EPOCHS} "
        "epochs from the run seeded 0, one epoch later, and torch keeps a seed's low 32 "
        f"bits, so seed 2**32 is seed 0 for {_runs(found.wrapped)}. Give such runs seeds "
        "further apart than their epochs and below 2**32, or use permutation='feistel', "
        f"which keys the seed and the epoch apart ({feistel} shared epochs)."
    )
    return Evidence(
        claim=claim,
        facts=found,
        prose=prose,
        tables=(
            Table(
                "Rank 0's epoch-0 order after torch.manual_seed",
                table,
                note=(
                    f"{DATASET_SIZE} samples, {WORLD_SIZE} ranks, shuffle on, no set_epoch; "
                    "the DataLoader column is the whole dataset's order on one process."
                ),
            ),
            Table(
                "Runs one seed apart, and 2**32 apart",
                runs,
                note=(
                    f"{DATASET_SIZE} samples, one rank's whole epoch compared, shuffle on, "
                    "set_epoch before each epoch."
                ),
            ),
        ),
    )


def _runs(names: tuple[str, ...]) -> str:
    """The runs named, for prose: ``"the stock sampler and ours by default"``, or
    ``"none of them"``."""
    return joined(RUN_NAMES[name] for name in names) if names else "none of them"
