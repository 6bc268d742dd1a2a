"""Finding: the simulation predicts, batch for batch, what real processes receive."""

from __future__ import annotations

import pandas as pd

from studies.engines.versus_simulation import (
    PROCESSES,
    Comparison,
    compare,
    recorded,
    verification_runs,
)
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined, listed

NAME = "real-processes"
TITLE = "Simulation vs real processes, batch by batch and rank by rank"
GUARDED_BY = "tests/test_real_processes.py::test_real_processes_match_simulation"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
#: (It renders what the runs received from a record; launching them took a minute.)
SECONDS = 2


def comparison() -> Comparison:
    """Every verification run compared with its simulation: what the runs received in
    real processes as recorded (:data:`~studies.engines.versus_simulation.PROCESSES`;
    ``tests/test_real_processes.py`` launches them again and compares)."""
    labelled = verification_runs()
    runs = [run for _, run in labelled]
    return compare(runs, labels=[label for label, _ in labelled], real=recorded(runs))


def by_world_size(result: Comparison) -> pd.DataFrame:
    """How many runs of each world size matched, and how many batches they compared."""
    matches = result.matches.assign(with_workers=result.matches["num_workers"] > 0)
    table = matches.groupby("world_size", sort=True).agg(
        runs=("match", "size"),
        with_workers=("with_workers", "sum"),
        batches=("processes_rows", "sum"),
        matching=("match", "sum"),
    )
    return table.reset_index().rename(
        columns={"world_size": "world size", "with_workers": "with workers"}
    )


def differing_epochs(result: Comparison, label: str) -> list[int]:
    """The epochs in which a mismatching run's real rows differ from its simulated rows."""
    rows = result.mismatches[result.mismatches["label"] == label]
    epochs = sorted(int(epoch) for epoch in rows["epoch"].unique())

    def batches(source: str, epoch: int) -> list[tuple[int, int, list[int]]]:
        own = rows[(rows["source"] == source) & (rows["epoch"] == epoch)]
        return [
            (int(rank), int(batch), [int(index) for index in indices])
            for rank, batch, indices in zip(own["rank"], own["batch"], own["indices"], strict=True)
        ]

    return [epoch for epoch in epochs if batches("simulated", epoch) != batches("processes", epoch)]


def persistent_seed_draw(run: pd.Series, epochs: list[int]) -> bool:
    """Whether a mismatching run is the case the persistent-worker seed draw explains.

    That is: no DistributedSampler (the DataLoader shuffles with its own generator), more
    than zero persistent workers, reproduced in-process with the same options, and epoch 0
    the same from both sources while some later epoch differs.
    """
    return (
        run["implementation"] == "none"
        and bool(run["shuffle"])
        and int(run["num_workers"]) > 0
        and bool(run["persistent_workers"])
        and _is_true(run["same_in_process"])
        and bool(epochs)
        and min(epochs) > 0
    )


def explain(result: Comparison) -> str:
    """The finding's prose: counts, then each mismatch with only the causes its rows show."""
    matches = result.matches
    failing = matches[~matches["match"].astype(bool)]
    prose = (
        f"{result.matched} of {result.total} runs match row for row "
        f"({int(matches['processes_rows'].sum())} batches received in real processes, "
        f"{int((matches['num_workers'] > 0).sum())} runs with DataLoader workers, world sizes "
        f"{int(matches['world_size'].min())} to {int(matches['world_size'].max())})."
    )
    if failing.empty:
        return prose + (
            " No run differs. The DataLoader option known to change a shuffled order, "
            "persistent workers without a sampler, is measured in-process in the "
            "persistent-workers finding."
        )
    count = len(failing)
    prose += f" {count} run{' differs' if count == 1 else 's differ'}: {joined(failing['label'])}."
    reproduced = failing[failing["same_in_process"].map(_is_true)]
    if len(reproduced) == count:
        prose += (
            f" {'It is' if count == 1 else 'Each is'} reproduced in-process with the same "
            "DataLoader options, so it comes from those options, not from running in "
            "separate processes."
        )
    else:
        others = count - len(reproduced)
        prose += (
            f" {others} of them {'is' if others == 1 else 'are'} NOT reproduced in-process "
            "with the same DataLoader options: real processes behave differently (see the "
            "rows below)."
        )
    for _, run in failing.iterrows():
        epochs = differing_epochs(result, run["label"])
        prose += (
            f" In `{run['label']}` the batches differ in epoch{'' if len(epochs) == 1 else 's'} "
            f"{joined(epochs)}."
        )
        if persistent_seed_draw(run, epochs):
            prose += (
                " That run has no DistributedSampler and persistent workers, and its epoch 0 "
                "matches: the DataLoader shuffles with its generator and also draws each "
                "iterator's worker base seed from it; persistent workers keep one iterator, "
                "so later epochs draw one seed fewer and shuffle differently than without "
                "workers."
            )
    return prose


def run_kinds(matches: pd.DataFrame) -> pd.DataFrame:
    """The runs grouped by kind (experiment or grid), sampler and DataLoader workers."""
    kind = matches["label"].map(lambda label: str(label).split(" ", 1)[0])
    table = (
        matches.assign(kind=kind)
        .groupby(["kind", "implementation", "num_workers", "persistent_workers"], sort=True)
        .agg(
            runs=("match", "size"),
            matching=("match", "sum"),
            batches=("processes_rows", "sum"),
        )
        .reset_index()
    )
    return table.rename(columns={"kind": "runs of"})


def mismatch_runs(mismatches: pd.DataFrame) -> pd.DataFrame:
    """Each mismatching run: how many rows each source gave."""
    table = mismatches.groupby(["label", "source"], sort=True).size().reset_index(name="rows")
    return table


def claim(result: Comparison) -> str:
    """The claim, from the comparison's tables."""
    matches = result.matches
    sampled = matches[matches["implementation"] != "none"]
    failing = matches[~matches["match"].astype(bool)]
    reproduced = int(failing["same_in_process"].map(_is_true).sum())
    text = (
        "Run in real processes (a gloo group on 127.0.0.1, the sampler reading its world "
        "size and rank from the group, DataLoader workers "
        f"{joined(sorted(set(int(n) for n in matches['num_workers'])))}, persistent or not), "
        f"the shared experiment and a grid over world sizes {int(matches['world_size'].min())} "
        f"to {int(matches['world_size'].max())} gave exactly the batches of the in-process "
        f"simulation in {count_of(result.matched, result.total, 'runs')}; with a "
        f"DistributedSampler in {count_of(int(sampled['match'].sum()), len(sampled), 'runs')}. "
        + (
            f"An in-process run with the same DataLoader options reproduced "
            f"{count_of(reproduced, len(failing), 'runs that differ')}, so the simulation "
            "(no workers) lacks those options, not the processes."
            if len(failing)
            else ""
        )
    )
    return text.strip()


def build() -> Evidence:
    result = comparison()
    matches = result.matches
    counts = by_world_size(result)
    mismatches = result.mismatches.assign(indices=result.mismatches["indices"].map(listed))
    prose = (
        explain(result)
        + "\n\n"
        + PROCESSES.provenance(
            "Launching these runs takes a minute and more on two cores",
            "what their ranks received",
            "tests/test_real_processes.py launches every run again and compares",
        )
    )
    return Evidence(
        claim=claim(result),
        prose=prose,
        tables=(
            Table("Runs per world size", counts),
            Table(
                "Every run: real processes vs the simulation",
                matches,
                note=(
                    "`reproduced in-process` is filled for mismatches only: whether an "
                    "in-process run with the same DataLoader options gives the real rows."
                ),
                name="runs",
                summary=run_kinds(matches),
            ),
            Table(
                "Every row of every mismatching run, from both sources",
                mismatches,
                note="Empty when every run matches.",
                name="mismatches",
                summary=mismatch_runs(result.mismatches),
            ),
        ),
    )


def _is_true(value: object) -> bool:
    """A ``same_in_process`` cell that says yes (``None``/NaN: not checked)."""
    return bool(pd.notna(value) and value)
