"""Run cases in-process: one DataLoader per rank, built exactly as a user builds it.

Each rank gets its own sampler with explicit ``num_replicas``/``rank`` and its own
``torch.utils.data.DataLoader`` over an index dataset, so what is recorded is what the
DataLoader hands the training loop, batch by batch.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedBatchSampler, DistributedSampler
from studies.core.cases import CASE_COLUMNS, Case

#: The tidy table's columns: one row per (case, epoch, rank, batch).
COLUMNS = (*CASE_COLUMNS, "epoch", "rank", "batch", "indices")

#: The warning our batch sampler gives when ranks get different numbers of batches.
UNEQUAL_BATCHES = r".*gives ranks \d+ or \d+ batches"


@contextlib.contextmanager
def expecting_unequal_batches() -> Iterator[None]:
    """Silence :data:`UNEQUAL_BATCHES` where a study provokes it on purpose: the
    configurations that give ranks unequal batch counts are what it measures, and its
    finding says so. Every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", UNEQUAL_BATCHES, UserWarning)
        yield


class IndexDataset(Dataset[int]):
    """A dataset whose sample ``i`` is the integer ``i``, so batches show indices."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} samples")
        return index


def make_sampler(
    case: Case, dataset: Dataset[int], rank: int, *, from_process_group: bool = False
) -> Sampler[Any] | None:
    """The sampler the case's implementation builds for ``rank`` (None: no sampler).

    Ours gets the case's ``tail`` (and is ``DistributedBatchSampler`` for ``sampler``
    ``"batch"``); the stock sampler its ``drop_last``. With ``from_process_group`` the
    sampler is built without ``num_replicas``/``rank``, so it reads them from the
    initialised default process group (real processes); both must then equal the case's.
    """
    if case.implementation == "none":
        return None
    replicas = None if from_process_group else case.world_size
    placed = None if from_process_group else rank
    sampler: Any
    with warnings.catch_warnings():
        # Ours warns when drop_last empties every rank; the study records that instead.
        warnings.simplefilter("ignore", UserWarning)
        if case.implementation == "torch":
            sampler = StockDistributedSampler(
                dataset,
                replicas,
                placed,
                shuffle=case.shuffle,
                seed=case.seed,
                drop_last=case.drop_last,
            )
        elif case.sampler_kind == "batch":
            sampler = DistributedBatchSampler(
                dataset,
                case.batch_size,
                replicas,
                placed,
                shuffle=case.shuffle,
                seed=case.seed,
                tail=case.layout_tail,  # type: ignore[arg-type]
            )
        else:
            sampler = DistributedSampler(
                dataset,
                replicas,
                placed,
                shuffle=case.shuffle,
                seed=case.seed,
                tail=case.layout_tail,  # type: ignore[arg-type]
            )
    if from_process_group and (sampler.num_replicas, sampler.rank) != (case.world_size, rank):
        raise ValueError(
            f"the process group gives num_replicas={sampler.num_replicas}, "
            f"rank={sampler.rank}, but the case needs world_size={case.world_size}, rank={rank}"
        )
    return sampler  # type: ignore[no-any-return]


def make_loader(
    case: Case, dataset: Dataset[int], sampler: Sampler[Any] | None, **loader_options: Any
) -> DataLoader[int]:
    """The DataLoader a user writes for the case (``loader_options``: workers etc.).

    With no sampler it is ``DataLoader(dataset, batch_size, shuffle=case.shuffle,
    drop_last=case.loader_drop_last)``; only a shuffling case adds
    ``generator=torch.Generator().manual_seed(case.seed)``, which is what the case's seed
    means without a sampler. An unshuffled case gets no generator: nothing is added that
    the case does not set. A batch sampler is passed as ``batch_sampler``.
    """
    if sampler is None:
        if case.shuffle:
            generator = torch.Generator()
            generator.manual_seed(case.seed)
            loader_options = {"generator": generator, **loader_options}
        return DataLoader(
            dataset,
            batch_size=case.batch_size,
            shuffle=case.shuffle,
            drop_last=case.loader_drop_last,
            **loader_options,
        )
    if case.sampler_kind == "batch":
        return DataLoader(dataset, batch_sampler=sampler, **loader_options)
    return DataLoader(
        dataset,
        batch_size=case.batch_size,
        sampler=sampler,
        drop_last=case.loader_drop_last,
        **loader_options,
    )


def rank_batches(
    case: Case, rank: int, *, from_process_group: bool = False, **loader_options: Any
) -> Iterator[tuple[int, int, list[int]]]:
    """(epoch, batch number, indices) for every batch ``rank`` receives in the case.

    ``from_process_group``: the sampler reads its placement from the process group
    (see :func:`make_sampler`).
    """
    dataset = IndexDataset(case.dataset_size)
    sampler = make_sampler(case, dataset, rank, from_process_group=from_process_group)
    loader = make_loader(case, dataset, sampler, **loader_options)
    for epoch in range(case.epochs):
        if case.set_epoch and sampler is not None:
            sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        with warnings.catch_warnings():
            # Ours warns when an epoch repeats without set_epoch, and the batch sampler
            # when ranks get unequal batch counts; the study records both instead.
            warnings.filterwarnings("ignore", "Distributed(Batch)?Sampler is iterated again")
            warnings.filterwarnings("ignore", UNEQUAL_BATCHES, UserWarning)
            batches = [batch.tolist() for batch in loader]
        for number, batch in enumerate(batches):
            yield epoch, number, batch


def case_rows(case: Case, **loader_options: Any) -> list[dict[str, Any]]:
    """The tidy rows of one case, ranks in order."""
    return tidy_rows(
        case, [rank_batches(case, rank, **loader_options) for rank in range(case.world_size)]
    )


def tidy_rows(
    case: Case, batches: Sequence[Iterable[tuple[int, int, list[int]]]]
) -> list[dict[str, Any]]:
    """The tidy rows of one case from ``batches[rank]``, each rank's (epoch, batch, indices).

    Shared by the simulation and the real-process run, so both tables are assembled and
    ordered (epoch, rank, batch) the same way and can only differ in what ranks received.
    """
    key = case.key()
    rows = [
        {**key, "epoch": epoch, "rank": rank, "batch": number, "indices": indices}
        for rank, received in enumerate(batches)
        for epoch, number, indices in received
    ]
    return sorted(rows, key=lambda row: (row["epoch"], row["rank"], row["batch"]))


def simulate(cases: Iterable[Case], progress: Any = None) -> pd.DataFrame:
    """The tidy table of every case: one row per (case, epoch, rank, batch).

    ``progress`` wraps the case iterable (e.g. ``tqdm``) when given.
    """
    cases = list(cases)
    rows = [row for case in (progress(cases) if progress else cases) for row in case_rows(case)]
    return frame(rows)


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with exactly the tidy columns, in order, even when empty."""
    return pd.DataFrame(rows, columns=list(COLUMNS))
