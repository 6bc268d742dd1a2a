"""Finding: which sampler guarantees what, checked by the kit on ours and on the peers."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pandas as pd

from samplers import testing
from studies.check_cli import SHOWN, counterexample_text
from studies.findings import Evidence, Table
from studies.findings.wording import joined
from studies.peers import COLUMNS, NOT_AVAILABLE, NOT_INSTALLED, Column, unavailable

NAME = "guarantees"
TITLE = (
    "Which sampler guarantees what: ten guarantees checked on ours and on the samplers people use"
)
CLAIM = (
    "Searched by the same derandomised hypothesis search as `dsampler check` (dataset sizes "
    "0 to 3000, world sizes and batch sizes 1 to 16), no sampler gives all ten guarantees: "
    "a sampler that pads repeats samples, one that drops loses them, one that neither pads "
    "nor drops gives ranks unequal batch counts somewhere (ours, laying out batches a step "
    "at a time, only with fewer samples than ranks or with batch size 1 when the world "
    "size does not divide the dataset), and only samplers with state_dict can resume, of "
    "which torchdata's loses samples when resumed on another world size and ours does not."
)
GUARDED_BY = "tests/test_kit.py::test_the_matrix_claim_holds_for_its_samplers"
SLOW = True

SAMPLER, GUARANTEE, RESULT = "sampler", "guarantee", "result"
COUNTEREXAMPLE, EXPERIENCE, DETAIL = (
    "smallest counterexample",
    "what a user experiences",
    "detail",
)


def _version(column: Column) -> str:
    if not column.distribution:
        return "this checkout"
    try:
        # The local build label (e.g. torch's "+cpu") is not part of the release.
        return version(column.distribution).split("+")[0]
    except PackageNotFoundError:
        return "-"


def cells() -> pd.DataFrame:
    """One row per sampler and guarantee: the kit's result for every column of
    :data:`studies.peers.COLUMNS` (unavailable columns marked in every row)."""
    rows = []
    for column in COLUMNS:
        missing = unavailable(column)
        if missing:
            results = [testing.Result(g, None, None, missing) for g in testing.GUARANTEES]
        else:
            results = testing.check_all(column.factory)
        for result in results:
            found = result.counterexample or {}
            rows.append(
                {
                    SAMPLER: column.name,
                    GUARANTEE: result.guarantee,
                    RESULT: missing or SHOWN[result.holds],
                    "dataset size": found.get("dataset_size", ""),
                    "world size": found.get("world_size", ""),
                    "batch size": found.get("batch_size", ""),
                    "rank": "" if found.get("rank") is None else found["rank"],
                    "epoch": found.get("epoch", ""),
                    COUNTEREXAMPLE: counterexample_text(result.counterexample),
                    EXPERIENCE: result.experience or "-",
                    DETAIL: result.detail,
                }
            )
    return pd.DataFrame(rows)


def _anchor(guarantee: str) -> str:
    return f"#where-{guarantee}-fails"


def matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per guarantee, one column per sampler; a violated cell gives the smallest
    counterexample's sizes and links to the table of what a user experiences."""

    def cell(row: pd.Series) -> str:
        if row[RESULT] != SHOWN[False]:
            return str(row[RESULT])
        sizes = f"N={row['dataset size']} W={row['world size']} B={row['batch size']}"
        return f"[violated]({_anchor(row[GUARANTEE])}): {sizes}"

    shown = frame.assign(cell=frame.apply(cell, axis=1))
    wide = shown.pivot(index=GUARANTEE, columns=SAMPLER, values="cell")
    wide = wide.loc[list(testing.GUARANTEES), [column.name for column in COLUMNS]]
    return wide.reset_index().rename_axis(columns=None)


def _names(frame: pd.DataFrame, guarantee: str, result: str) -> list[str]:
    rows = frame[(frame[GUARANTEE] == guarantee) & (frame[RESULT] == result)]
    return rows[SAMPLER].tolist()


def build() -> Evidence:
    frame = cells()
    checked = frame[~frame[RESULT].isin([NOT_INSTALLED, NOT_AVAILABLE])]
    samplers = checked[SAMPLER].unique().tolist()
    held = checked[checked[RESULT] == SHOWN[True]].groupby(SAMPLER, sort=False).size()
    best, total = int(held.max()), len(testing.GUARANTEES)
    missing = sorted(set(frame[SAMPLER]) - set(samplers), key=frame[SAMPLER].tolist().index)
    legend = pd.DataFrame(
        [{SAMPLER: c.name, "what it is": c.what, "version": _version(c)} for c in COLUMNS]
    )
    tables = [
        Table(
            "Every sampler and guarantee",
            frame,
            name="cells",
            summary=matrix(frame),
            note=(
                "N: dataset size, W: world size, B: batch size of the smallest counterexample "
                "the search shrank to; each violated cell links to what a user experiences. "
                "Not supported: the sampler lacks what the guarantee needs (set_epoch, "
                "state_dict)."
            ),
        ),
        Table("The samplers", legend),
    ]
    for guarantee, statement in testing.GUARANTEES.items():
        failing = frame[(frame[GUARANTEE] == guarantee) & (frame[RESULT] == SHOWN[False])]
        if failing.empty:
            continue
        tables.append(
            Table(
                f"Where {guarantee} fails",
                failing[[SAMPLER, COUNTEREXAMPLE, EXPERIENCE]].reset_index(drop=True),
                note=f"The guarantee: {statement}.",
            )
        )
    once = _names(frame, "exactly-once", SHOWN[True])
    equal = _names(frame, "equal-batch-counts", SHOWN[True])
    both = [name for name in once if name in equal]
    resumed = _names(frame, "resumes-other-world-size", SHOWN[True])
    lost = _names(frame, "resumes-other-world-size", SHOWN[False])
    leaders = joined(held[held == best].index.tolist())
    if best < total:
        ranking = f"No sampler holds them all; the most any holds is {best} ({leaders})"
    else:
        ranking = f"{leaders} hold all of them"
    prose = (
        f"{len(samplers)} samplers were checked against the {total} "
        "guarantees of `samplers.testing`, each by a derandomised search of "
        f"{testing.EXAMPLES[False]} configurations per guarantee, shrunk to the smallest "
        "counterexample"
        + (f" ({joined(missing)}: not checked here, see the table)" if missing else "")
        + f". {ranking}. Every index exactly once each "
        f"epoch: {joined(once) or 'none'}. The same number of batches on every rank: "
        f"{joined(equal) or 'none'}. Both at once: {joined(both) or 'none'}. Resuming on "
        f"another world size without losing or repeating samples: {joined(resumed) or 'none'}"
        + (f"; {joined(lost)} violate it" if lost else "")
        + ". Check a sampler of your own with `dsampler check MODULE:FACTORY`."
    )
    return Evidence(prose=prose, tables=tuple(tables))
