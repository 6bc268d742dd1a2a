"""Finding: the sampler ignores ``torch.manual_seed``; only its ``seed`` argument counts."""

from __future__ import annotations

from dataclasses import dataclass

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
TITLE = "torch.manual_seed and the sampler's order: only the seed argument counts"
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


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table of orders."""
    return Facts(
        manual_seeds=len(table),
        stock_unseeded=int(table["stock, no seed argument"].nunique()),
        ours_unseeded=int(table["ours, no seed argument"].nunique()),
        stock_seeded=int(table["stock, seed=manual seed"].nunique()),
        loader=int(table["DataLoader shuffle=True, no sampler"].nunique()),
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
    found = facts(table)
    claim = (
        "DistributedSampler shuffles with its own generator, seeded from its seed argument "
        f"(default 0) plus the epoch: over {found.manual_seeds} values of torch.manual_seed, "
        f"rank 0 received {plural(found.stock_unseeded, 'distinct order')} from the stock "
        f"sampler and {found.ours_unseeded} from ours when no seed was passed, and "
        f"{found.stock_seeded} when the same values were passed as its seed. A DataLoader "
        f"shuffling without a sampler follows torch.manual_seed: {found.loader} orders."
    )
    prose = (
        f"Over {found.manual_seeds} values of torch.manual_seed ({joined(MANUAL_SEEDS)}), rank 0 "
        f"of {WORLD_SIZE} received {plural(found.stock_unseeded, 'distinct epoch-0 order')} "
        f"from the stock sampler and {found.ours_unseeded} from ours when no seed was passed; "
        f"passing the same values as the sampler's seed gave {found.stock_seeded}, and a "
        f"DataLoader shuffling without a sampler gave {found.loader}. So seeding torch does "
        "not vary the sampler's order between runs (e.g. between repeated trials): pass "
        "seed= to the sampler, the same value on every rank (different seeds per rank lose "
        "samples, see the seed-per-rank finding)."
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
        ),
    )
