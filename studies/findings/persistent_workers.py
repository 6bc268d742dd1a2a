"""Finding: persistent DataLoader workers change a shuffled DataLoader's later epochs, and a
peek at a batch in the loop (``next(iter(loader))``) restarts the loop's own iterator."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from torch.utils.data import DataLoader

from studies.core.cases import Case
from studies.core.simulate import IndexDataset, make_loader, make_sampler
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined, listed

NAME = "persistent-workers"
TITLE = "Persistent workers: a shuffled DataLoader's later epochs, and a peek in the loop"
GUARDED_BY = "tests/test_findings.py::test_persistent_workers_change_later_epochs"

DATASET_SIZE = 10
BATCH_SIZE = 4
EPOCHS = 3
WORKERS = 2

#: (DataLoader options in words, num_workers, persistent_workers).
LOADERS: tuple[tuple[str, int, bool], ...] = (
    ("no workers", 0, False),
    (f"{WORKERS} workers", WORKERS, False),
    (f"{WORKERS} persistent workers", WORKERS, True),
)


def orders(case: Case, num_workers: int, persistent: bool) -> list[list[int]]:
    """Rank 0's order in each epoch (set_epoch called when the case has a sampler)."""
    dataset = IndexDataset(case.dataset_size)
    sampler = make_sampler(case, dataset, 0)
    loader: DataLoader[int] = make_loader(
        case, dataset, sampler, num_workers=num_workers, persistent_workers=persistent
    )
    result = []
    for epoch in range(case.epochs):
        if sampler is not None and case.set_epoch:
            sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        result.append([index for batch in loader for index in batch.tolist()])
    return result


#: The two set-ups: a shuffling DataLoader without sampler, and the stock sampler.
CASES: dict[str, Case] = {
    "DataLoader(shuffle=True, generator seeded 0), no sampler": Case(
        DATASET_SIZE, 1, BATCH_SIZE, epochs=EPOCHS, implementation="none"
    ),
    "stock DistributedSampler (1 rank), set_epoch": Case(
        DATASET_SIZE, 1, BATCH_SIZE, epochs=EPOCHS
    ),
}


#: The loop peeks (``next(iter(loader))``) after this step (0-based).
PEEK_AFTER = 1
#: The set-up of the peek: the stock sampler.
PEEKED = "stock DistributedSampler (1 rank), set_epoch"


def peeked_loop(num_workers: int, persistent: bool) -> list[int]:
    """What one epoch's loop received over the stock sampler when it peeks at a batch,
    ``next(iter(loader))``, after step :data:`PEEK_AFTER`."""
    case = CASES[PEEKED]
    dataset = IndexDataset(case.dataset_size)
    sampler = make_sampler(case, dataset, 0)
    loader: DataLoader[int] = make_loader(
        case, dataset, sampler, num_workers=num_workers, persistent_workers=persistent
    )
    received: list[int] = []
    for step, batch in enumerate(loader):
        received += batch.tolist()
        if step == PEEK_AFTER:
            next(iter(loader))  # a look at a batch, say for logging
    return received


def peeks_table() -> pd.DataFrame:
    """Per DataLoader set-up: what the loop that peeked received."""
    rows = []
    for words, workers, persistent in LOADERS:
        received = peeked_loop(workers, persistent)
        rows.append(
            {
                "DataLoader": words,
                "samples the loop received": len(received),
                "distinct": len(set(received)),
                "received twice or more": sum(n > 1 for n in Counter(received).values()),
            }
        )
    return pd.DataFrame(rows)


def build() -> Evidence:
    rows = []
    for setup, case in CASES.items():
        baseline = orders(case, 0, False)
        for words, workers, persistent in LOADERS:
            measured = baseline if workers == 0 else orders(case, workers, persistent)
            for epoch, order in enumerate(measured):
                rows.append(
                    {
                        "set-up": setup,
                        "DataLoader": words,
                        "epoch": epoch,
                        "order": listed(order),
                        "same as without workers": order == baseline[epoch],
                    }
                )
    table = pd.DataFrame(rows)
    peeks = peeks_table()
    repeating = list(peeks.loc[peeks["received twice or more"] > 0, "DataLoader"])
    differing = table[~table["same as without workers"]]
    no_sampler = next(iter(CASES))
    shuffled = differing[differing["set-up"] == no_sampler]
    with_sampler = differing[differing["set-up"] != no_sampler]
    later = table[(table["set-up"] == no_sampler) & (table["epoch"] > 0)]
    persistent = later[later["DataLoader"] == LOADERS[-1][0]]
    changed = int((~persistent["same as without workers"]).sum())
    sampled = table[table["set-up"] != no_sampler]
    epochs_text = (
        f"epoch{'s' if shuffled['epoch'].nunique() > 1 else ''} "
        f"{joined(sorted(set(shuffled['epoch'])))} with "
        f"{joined(sorted(set(shuffled['DataLoader'])))}"
        if not shuffled.empty
        else "no epoch"
    )
    others = table[(table["set-up"] == no_sampler) & (table["DataLoader"] == LOADERS[1][0])]
    others_changed = int((~others["same as without workers"]).sum())
    claim = (
        "A DataLoader that shuffles with its own generator (no sampler) draws each new "
        "iterator's worker seed from that generator too, and persistent workers keep one "
        f"iterator: with {LOADERS[-1][0]} its order differed from the run without workers "
        f"in {count_of(changed, len(persistent), 'epochs after the first')}, with "
        f"{LOADERS[1][0]} in {count_of(others_changed, len(others), 'epochs')}. With the stock "
        f"DistributedSampler the order differed in "
        f"{count_of(len(with_sampler), len(sampled), 'epochs')}, whatever the workers. "
        f"A peek at a batch in the loop, next(iter(loader)), made the loop read samples "
        f"again with {joined(repeating) if repeating else 'none of the set-ups'} (persistent "
        f"workers: the DataLoader keeps one iterator, which the peek resets): "
        f"{_peeks(peeks)}."
    )
    prose = (
        f"{DATASET_SIZE} samples, batch size {BATCH_SIZE}, {EPOCHS} epochs, in this process. "
        f"Without a sampler, the DataLoader's order differed from the run without workers in "
        f"{epochs_text}; with the stock DistributedSampler, in {len(with_sampler)} epochs. "
        "Every new DataLoader iterator, with or without workers, draws one number from the "
        "generator for the workers' base seed besides the permutation; persistent workers "
        "keep the first iterator, so from epoch 1 on only the permutation is drawn and it "
        "comes from another generator state. Seeding a run therefore does not make its "
        "order independent of the worker settings: compare runs with the same num_workers "
        "and persistent_workers, or shuffle with a DistributedSampler. A loop that peeks "
        f"at a batch after its step {PEEK_AFTER} with next(iter(loader)) (the stock "
        f"sampler, one epoch of {DATASET_SIZE} samples): {_peeks(peeks)}. With persistent "
        "workers iter(loader) resets the one iterator the loop is reading, so the rest of "
        "the loop reads the epoch again, after the batch the peek took; peek at another "
        "DataLoader over a copy of the sampler instead."
    )
    return Evidence(
        claim=claim,
        prose=prose,
        tables=(
            Table("Rank 0's order per epoch, by DataLoader workers", table),
            Table(
                "A loop that peeks at a batch, next(iter(loader)), by DataLoader workers",
                peeks,
                note=(
                    f"The stock sampler, one rank, one epoch of {DATASET_SIZE} samples, "
                    f"batch size {BATCH_SIZE}; the peek after step {PEEK_AFTER}."
                ),
            ),
        ),
    )


def _peeks(peeks: pd.DataFrame) -> str:
    """Per DataLoader set-up, what its peeking loop received, for prose."""
    return "; ".join(
        f"with {row['DataLoader']} the loop received {row['samples the loop received']} "
        f"samples, {row['received twice or more']} of them more than once"
        for _, row in peeks.iterrows()
    )
