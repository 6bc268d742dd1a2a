"""One row per case: what its ranks actually received, reduced to the numbers that matter.

Everything is observed from the tidy rows (what each rank's DataLoader yielded), never
computed from the sharding formulas, so the summary also describes implementations the
formulas do not model (``"none"``: no sampler at all).

The summary table has the columns :data:`COLUMNS`: the case's :data:`CASE_COLUMNS`, its
``epochs``, then :data:`SUMMARY_COLUMNS`:

``samples_per_rank``
    List, one entry per rank: samples the rank received in epoch 0 (after the
    DataLoader's ``drop_last``).
``batches_per_rank``
    List, one entry per rank: batches the rank received in epoch 0.
``last_batch_sizes``
    List, one entry per rank: size of the rank's last batch in epoch 0, 0 when the rank
    received no batch.
``duplicated_samples``
    Epoch 0: received occurrences over all ranks minus distinct indices received, i.e.
    how many extra copies were handed out (what padding repeats; without a sampler,
    every rank's copy of the dataset beyond the first).
``most_copies``
    Epoch 0: the most times any one index was received over all ranks (0 when nothing
    was received; 1 when nothing repeats).
``dropped_samples``
    Epoch 0: dataset indices that no rank received.
``coverage``
    Epoch 0: distinct indices received / ``dataset_size``, rounded to 6 places (1.0 for
    an empty dataset: there is nothing to miss).
``empty_loader``
    Some rank receives zero batches in some epoch.
``batch_of_one``
    Some batch of any rank in any epoch holds exactly one sample (also True when the
    batch size itself is 1).
``order_repeats``
    Every rank's epoch-1 sequence of indices equals its epoch-0 sequence. False when the
    case ran a single epoch: there is nothing to compare.
``uneven_batches``
    Ranks differ in batch count in some epoch.

List columns hold Python ints and every value is a plain Python value, so a summary
row serialises with :func:`json.dumps` as is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import pandas as pd

from studies.core.cases import CASE_COLUMNS, Case
from studies.core.simulate import COLUMNS as ROW_COLUMNS

__all__ = ["COLUMNS", "SUMMARY_COLUMNS", "summarize"]

#: The observed quantities, in table order (see the module docstring for each).
SUMMARY_COLUMNS = (
    "samples_per_rank",
    "batches_per_rank",
    "last_batch_sizes",
    "duplicated_samples",
    "most_copies",
    "dropped_samples",
    "coverage",
    "empty_loader",
    "batch_of_one",
    "order_repeats",
    "uneven_batches",
)

#: The summary table's columns, in order.
COLUMNS = (*CASE_COLUMNS, "epochs", *SUMMARY_COLUMNS)

#: Batches of one case: (epoch, rank) -> the batches' indices, in batch order.
_Received = dict[tuple[int, int], list[list[int]]]


def summarize(cases: Iterable[Case], rows: pd.DataFrame) -> pd.DataFrame:
    """One summary row per case, in the cases' order, with exactly :data:`COLUMNS`.

    ``rows`` is a tidy table (``studies.core.simulate.COLUMNS``) holding the cases' batches;
    rows of other cases are ignored. A case with no rows at all (every rank's loader
    was empty) is summarised as such. Raises ``ValueError`` when two cases share their
    identifying columns (their rows could not be told apart), when ``rows`` lacks a
    tidy column, or when a row's rank or epoch lies outside its case.
    """
    cases = list(cases)
    missing = [column for column in ROW_COLUMNS if column not in rows.columns]
    if missing:
        raise ValueError(f"rows must have the tidy columns, missing {missing}")
    keys = [_key(case) for case in cases]
    seen: set[tuple[Any, ...]] = set()
    for case, key in zip(cases, keys, strict=True):
        if key in seen:
            raise ValueError(f"cases must differ in {', '.join(CASE_COLUMNS)}, got twice {case!r}")
        seen.add(key)
    received = _received_by_case(rows, seen)
    records = [_summary(case, received.get(key, {})) for case, key in zip(cases, keys, strict=True)]
    return pd.DataFrame(records, columns=list(COLUMNS))


def _key(case: Case) -> tuple[Any, ...]:
    return tuple(case.key().values())


def _received_by_case(
    rows: pd.DataFrame, keys: set[tuple[Any, ...]]
) -> dict[tuple[Any, ...], _Received]:
    """The wanted cases' batches, from the rows, as plain Python values."""
    values = {column: rows[column].tolist() for column in ROW_COLUMNS}
    numbered: dict[tuple[Any, ...], dict[tuple[int, int], list[tuple[int, list[int]]]]]
    numbered = defaultdict(lambda: defaultdict(list))
    case_values = zip(*(values[column] for column in CASE_COLUMNS), strict=True)
    for key, epoch, rank, batch, indices in zip(
        case_values,
        values["epoch"],
        values["rank"],
        values["batch"],
        values["indices"],
        strict=True,
    ):
        if key in keys:
            numbered[key][int(epoch), int(rank)].append((int(batch), [int(i) for i in indices]))
    return {
        key: {place: [indices for _, indices in sorted(batches)] for place, batches in by.items()}
        for key, by in numbered.items()
    }


def _summary(case: Case, received: _Received) -> dict[str, Any]:
    """The summary record of one case from the batches its ranks received."""
    for epoch, rank in received:
        if not (0 <= epoch < case.epochs and 0 <= rank < case.world_size):
            raise ValueError(f"rows hold epoch {epoch}, rank {rank}, outside the case {case!r}")
    ranks = range(case.world_size)
    epochs = range(case.epochs)

    def batches(epoch: int, rank: int) -> list[list[int]]:
        return received.get((epoch, rank), [])

    def sequence(epoch: int, rank: int) -> list[int]:
        return [index for batch in batches(epoch, rank) for index in batch]

    first = [sequence(0, rank) for rank in ranks]
    copies = Counter(index for share in first for index in share)
    occurrences = sum(copies.values())
    distinct = set(copies)
    counts = [[len(batches(epoch, rank)) for rank in ranks] for epoch in epochs]
    size = case.dataset_size
    covered = len({index for index in distinct if 0 <= index < size})
    return {
        **case.key(),
        "epochs": case.epochs,
        "samples_per_rank": [len(share) for share in first],
        "batches_per_rank": counts[0],
        "last_batch_sizes": [
            len(batches(0, rank)[-1]) if batches(0, rank) else 0 for rank in ranks
        ],
        "duplicated_samples": occurrences - len(distinct),
        "most_copies": max(copies.values(), default=0),
        "dropped_samples": size - covered,
        "coverage": round(covered / size, 6) if size else 1.0,
        "empty_loader": any(0 in per_rank for per_rank in counts),
        "batch_of_one": any(
            len(batch) == 1 for batches_ in received.values() for batch in batches_
        ),
        "order_repeats": case.epochs > 1
        and all(sequence(1, rank) == first[rank] for rank in ranks),
        "uneven_batches": any(len(set(per_rank)) > 1 for per_rank in counts),
    }
