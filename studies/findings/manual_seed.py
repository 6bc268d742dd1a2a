"""Finding: the sampler ignores ``torch.manual_seed``; only its ``seed`` argument counts."""

from __future__ import annotations

import pandas as pd
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from studies.cases import Implementation
from studies.findings import Evidence, Table
from studies.findings.wording import joined, listed
from studies.simulate import IndexDataset

NAME = "manual-seed"
TITLE = "The sampler ignores torch.manual_seed: every run has the same order unless seed is set"
CLAIM = (
    "DistributedSampler (stock and ours) shuffles with its own generator seeded from its seed "
    "argument (default 0) plus the epoch, never from torch's global generator: whatever "
    "torch.manual_seed a script calls, every run hands each rank the same order unless a "
    "seed is passed to the sampler. A DataLoader shuffling without a sampler follows "
    "torch.manual_seed instead."
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


def loader_order(manual_seed: int) -> list[int]:
    """A DataLoader(shuffle=True) without sampler or generator, after torch.manual_seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(manual_seed)
        loader = DataLoader(IndexDataset(DATASET_SIZE), batch_size=DATASET_SIZE, shuffle=True)
        return [index for batch in loader for index in batch.tolist()]


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
    distinct = {column: table[column].nunique() for column in table.columns[1:]}
    prose = (
        f"Over {len(MANUAL_SEEDS)} values of torch.manual_seed ({joined(MANUAL_SEEDS)}), rank 0 "
        f"of {WORLD_SIZE} received {distinct['stock, no seed argument']} distinct epoch-0 "
        f"order(s) from the stock sampler and {distinct['ours, no seed argument']} from ours "
        "when no seed was passed; passing the same values as the sampler's seed gave "
        f"{distinct['stock, seed=manual seed']} distinct orders, and a DataLoader shuffling "
        f"without a sampler gave {distinct['DataLoader shuffle=True, no sampler']}. So "
        "seeding torch does not vary the data order between runs (e.g. between repeated "
        "trials): pass seed= to the sampler, the same value on every rank (different seeds "
        "per rank lose samples, see the seed-per-rank finding)."
    )
    return Evidence(
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
