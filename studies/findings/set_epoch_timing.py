"""Finding: ``set_epoch`` called after iteration has started does not change that epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from studies.cases import Case, Implementation
from studies.findings import Evidence, Table
from studies.findings.wording import listed
from studies.simulate import IndexDataset, make_loader, make_sampler

NAME = "set-epoch-timing"
TITLE = "set_epoch after iteration has started does not change the running epoch"
CLAIM = (
    "sampler.set_epoch(e) takes effect at the next iter(): an iterator over the sampler, "
    "or a DataLoader iterator that has yielded a batch or has workers (they fetch indices "
    "as soon as iter() is called), keeps the order it started with. Only a DataLoader "
    "without workers, between iter() and its first batch, still picks the new epoch up. "
    "Call set_epoch before the epoch's loop starts."
)
GUARDED_BY = "tests/test_findings.py::test_set_epoch_after_iter_keeps_the_running_order"

DATASET_SIZE = 10
WORLD_SIZE = 2
BATCH_SIZE = 2
IMPLEMENTATIONS: tuple[Implementation, ...] = ("torch", "samplers")

#: (what is iterated, when set_epoch(1) is called): the moments measured.
MOMENTS: tuple[tuple[str, str, int], ...] = (
    ("sampler", "after iter(sampler)", 0),
    ("sampler", "after the first index", 1),
    ("DataLoader, no workers", "after iter(loader)", 0),
    ("DataLoader, no workers", "after the first batch", 1),
    ("DataLoader, 2 workers", "after iter(loader)", 0),
    ("DataLoader, 2 workers", "after the first batch", 1),
)


def _sampler(implementation: Implementation) -> StockDistributedSampler[int]:
    case = Case(DATASET_SIZE, WORLD_SIZE, BATCH_SIZE, implementation=implementation)
    sampler = make_sampler(case, IndexDataset(DATASET_SIZE), 0)
    if not isinstance(sampler, StockDistributedSampler):
        raise ValueError(f"implementation must build a sampler, got {implementation!r}")
    return sampler


def _flat(items: Iterator[object]) -> list[int]:
    values: list[int] = []
    for item in items:
        values += item.tolist() if hasattr(item, "tolist") else [int(item)]  # type: ignore[arg-type]
    return values


def received(implementation: Implementation, iterated: str, taken: int) -> list[int]:
    """Rank 0's order when set_epoch(1) is called after ``taken`` items of the iterator."""
    sampler = _sampler(implementation)
    source: Callable[[], Iterator[object]]
    if iterated == "sampler":
        source = lambda: iter(sampler)  # noqa: E731
    else:
        workers = 2 if "2 workers" in iterated else 0
        case = Case(DATASET_SIZE, WORLD_SIZE, BATCH_SIZE, implementation=implementation)
        loader: DataLoader[int] = make_loader(
            case, IndexDataset(DATASET_SIZE), sampler, num_workers=workers
        )
        source = lambda: iter(loader)  # noqa: E731
    iterator = source()
    first = [next(iterator) for _ in range(taken)]
    sampler.set_epoch(1)
    return _flat(iter(first)) + _flat(iterator)


def epoch_order(implementation: Implementation, epoch: int) -> list[int]:
    """Rank 0's order when set_epoch(epoch) is called before iter()."""
    sampler = _sampler(implementation)
    sampler.set_epoch(epoch)
    return list(sampler)


def build() -> Evidence:
    zero, one = epoch_order("torch", 0), epoch_order("torch", 1)
    rows = []
    for iterated, moment, taken in MOMENTS:
        order = received("torch", iterated, taken)
        rows.append(
            {
                "iterating": iterated,
                "set_epoch(1) called": moment,
                "rank 0 received": listed(order),
                "that is epoch": 0 if order == zero else 1 if order == one else "neither",
                "ours the same": received("samplers", iterated, taken) == order,
            }
        )
    table = pd.DataFrame(rows)
    kept = table[table["that is epoch"] == 0]
    changed = table[table["that is epoch"] == 1]
    same = bool(table["ours the same"].all())
    prose = (
        f"Rank 0 of {WORLD_SIZE}, {DATASET_SIZE} samples, batch size {BATCH_SIZE}; epoch 0's "
        f"order is {listed(epoch_order('torch', 0))} and epoch 1's "
        f"{listed(epoch_order('torch', 1))}. With the stock sampler, set_epoch(1) left the "
        f"running order at epoch 0 in {len(kept)} of {len(table)} moments measured; it "
        "changed it only "
        + "; ".join(
            f"for the {row['iterating']}, called {row['set_epoch(1) called']}"
            for _, row in changed.iterrows()
        )
        + (
            " (the DataLoader creates its sampler iterator lazily, at the first batch). "
            if not changed.empty
            else ". "
        )
        + f"Ours {'gives the same in every moment' if same else 'differs in some moment'}."
    )
    return Evidence(
        prose=prose,
        tables=(
            Table(
                "Rank 0's order when set_epoch(1) is called during epoch 0",
                table,
                note=(
                    "Stock sampler; `that is epoch`: which epoch's order the iterator yielded "
                    "(0: set_epoch had no effect on it)."
                ),
            ),
        ),
    )
