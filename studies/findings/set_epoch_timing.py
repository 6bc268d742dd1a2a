"""Finding: ``set_epoch`` called after iteration has started does not change that epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from studies.core.cases import Case, Implementation
from studies.core.simulate import IndexDataset, make_loader, make_sampler
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined, listed, plural

NAME = "set-epoch-timing"
TITLE = "set_epoch after iteration has started, and the running epoch"
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


@dataclass(frozen=True)
class Facts:
    """Moments at which set_epoch(1) left the running order at epoch 0, and the others."""

    kept: int
    moments: int
    #: (what was iterated, when set_epoch was called) where the new epoch was picked up.
    changed: tuple[tuple[str, str], ...]
    ours_same: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table of moments."""
    changed = table[table["that is epoch"] == 1]
    return Facts(
        kept=int((table["that is epoch"] == 0).sum()),
        moments=len(table),
        changed=tuple(zip(changed["iterating"], changed["set_epoch(1) called"], strict=True)),
        ours_same=int(table["ours the same"].sum()),
    )


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
    found = facts(table)
    where = joined(
        f"the {iterated}, set_epoch(1) called {moment}" for iterated, moment in found.changed
    )
    claim = (
        "sampler.set_epoch(1) called during epoch 0 left the running order at epoch 0 in "
        f"{count_of(found.kept, found.moments, 'moments measured')} (the stock sampler; ours "
        f"the same in {count_of(found.ours_same, found.moments, 'moments')}): an iterator "
        "keeps the order it started with, and a DataLoader with workers fetches indices as "
        "soon as iter() is called. "
        + (
            f"It took effect in {plural(len(found.changed), 'moment')}: {where}. "
            if where
            else "It took effect in no moment. "
        )
        + "Call set_epoch before the epoch's loop starts."
    )
    prose = (
        f"Rank 0 of {WORLD_SIZE}, {DATASET_SIZE} samples, batch size {BATCH_SIZE}; epoch 0's "
        f"order is {listed(zero)} and epoch 1's {listed(one)}. With the stock sampler, "
        f"set_epoch(1) left the running order at epoch 0 in {found.kept} of {found.moments} "
        "moments measured"
        + (
            f"; it changed it for {where} (the DataLoader creates its sampler iterator "
            "lazily, at the first batch). "
            if where
            else ". "
        )
        + f"Ours gives the same order in {found.ours_same} of {found.moments} moments."
    )
    return Evidence(
        claim=claim,
        facts=found,
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
