"""Finding: on a data-parallel x tensor-parallel mesh, shard over the data-parallel group."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pandas as pd

from studies.engines.mesh_runs import (
    CALLS,
    RESUME_TAIL,
    VARIANTS,
    Measured,
    MeshRun,
    measure,
)
from studies.findings import Evidence, Table
from studies.findings.wording import joined, listed

NAME = "mesh-sharding"
TITLE = (
    'Data x tensor parallelism: the defaults split tensor-parallel peers, group=mesh["dp"] '
    "keeps them together"
)
GUARDED_BY = "tests/test_groups_processes.py::test_mesh_sharding_finding_holds"
SLOW = True

#: The tables' words for the two phases of the resume.
PHASES = {"saved": "before the save", "resumed": "after the load"}


def _counts(values: pd.Series) -> Any:
    """One count as an int, several as ``"a to b"``."""
    unique = sorted({int(value) for value in values})
    return unique[0] if len(unique) == 1 else f"{unique[0]} to {unique[-1]}"


def replicas(reads: pd.DataFrame) -> pd.DataFrame:
    """Per variant: how many tensor-parallel groups read differing samples, and how much.

    A tensor-parallel group is the processes of one data-parallel coordinate; it reads
    differing samples when, in some epoch, its members' DataLoaders yield different lists.
    """
    rows = []
    for variant in VARIANTS:
        own = reads[reads["variant"] == variant]
        keyed = own.assign(key=own["samples"].map(tuple), count=own["samples"].map(len))
        per_group = keyed.groupby(["dp", "epoch"])["key"].nunique()
        differing = per_group[per_group > 1].index.get_level_values("dp").unique()
        union = keyed.groupby(["dp", "epoch"])["samples"].agg(
            lambda lists: len({index for samples in lists for index in samples})
        )
        job = keyed.groupby("epoch")["samples"].agg(
            lambda lists: len({index for samples in lists for index in samples})
        )
        groups = int(own["dp"].nunique())
        rows.append(
            {
                "samplers built with": variant,
                "num_replicas": _counts(own["num_replicas"]),
                "TP groups": groups,
                "TP groups whose members read different samples": len(differing),
                "fraction of TP groups": len(differing) / groups,
                "samples per process, per epoch": _counts(keyed["count"]),
                "distinct samples per TP group, per epoch": _counts(union),
                "distinct samples the job reads, per epoch": _counts(job),
            }
        )
    return pd.DataFrame(rows)


def outcomes(checks: pd.DataFrame) -> pd.DataFrame:
    """Per variant and call: how many processes raised, and what (the same on each?)."""
    rows = []
    for variant in VARIANTS:
        for call in CALLS:
            own = checks[(checks["variant"] == variant) & (checks["call"] == call)]
            raised = own[own["raised"]]
            messages = sorted(set(raised["message"]))
            rows.append(
                {
                    "samplers built with": variant,
                    "call": call,
                    "processes": len(own),
                    "processes that raised": len(raised),
                    "one message on all that raised": len(messages) == 1 if messages else "-",
                    "message": messages[0] if len(messages) == 1 else " | ".join(messages) or "-",
                }
            )
    return pd.DataFrame(rows)


def resumed(resume: pd.DataFrame) -> pd.DataFrame:
    """One row per process and phase: where it sits in the mesh and what it read."""
    rows = []
    for phase, words in PHASES.items():
        own = resume[resume["phase"] == phase].sort_values("global rank")
        for _, process in own.iterrows():
            rows.append(
                {
                    "phase": words,
                    "mesh": process["mesh"],
                    "global rank": int(process["global rank"]),
                    "DP rank": int(process["dp"]),
                    "TP rank": int(process["tp"]),
                    "samples read": len(process["samples"]),
                    "samples": listed(process["samples"]),
                }
            )
    return pd.DataFrame(rows)


def samples_of(resumed_table: pd.DataFrame) -> pd.Series:
    """The ``samples`` cells of :func:`resumed`'s table as lists."""
    return resumed_table["samples"].map(json.loads)


def peers_agree(resumed_table: pd.DataFrame) -> bool:
    """Whether the processes of each (phase, DP rank) read the same samples."""
    keyed = resumed_table.assign(key=samples_of(resumed_table).map(tuple))
    return bool((keyed.groupby(["phase", "DP rank"])["key"].nunique() == 1).all())


def coverage(resumed_table: pd.DataFrame, dataset_size: int) -> pd.DataFrame:
    """Per TP rank, over the resumed epoch (both phases): samples read once, more, never.

    Each tensor-parallel rank (one process per data-parallel rank in each phase) must read
    the epoch once, as a single-process job would."""
    rows = []
    table = resumed_table.assign(samples=samples_of(resumed_table))
    for tp, own in table.groupby("TP rank", sort=True):
        seen = Counter(index for samples in own["samples"] for index in samples)
        rows.append(
            {
                "TP rank": int(tp),
                "read once": sum(count == 1 for count in seen.values()),
                "read more than once": sum(count > 1 for count in seen.values()),
                "never read": dataset_size - len(seen),
            }
        )
    return pd.DataFrame(rows)


def _row(table: pd.DataFrame, variant: str) -> dict[str, Any]:
    """The table's row for ``variant``, each cell with its column's own type."""
    own = table[table["samplers built with"] == variant]
    return {column: own[column].iloc[0] for column in table.columns}


def _differing(row: dict[str, Any]) -> str:
    count = int(row["TP groups whose members read different samples"])
    total = int(row["TP groups"])
    if count == 0:
        return f"in none of the {total} tensor-parallel groups"
    if count == total:
        return f"in every one of the {total} tensor-parallel groups"
    return f"in {count} of the {total} tensor-parallel groups"


def _raised(checked: pd.DataFrame, variant: str, call: str) -> str:
    row = checked[(checked["samplers built with"] == variant) & (checked["call"] == call)].iloc[0]
    count, total = int(row["processes that raised"]), int(row["processes"])
    if count == 0:
        return "passes on every process" if total > 1 else "passes"
    where = "every process" if count == total else f"{count} of the {total} processes"
    same = " with one message" if row["one message on all that raised"] is True else ""
    return f"raises on {where}{same}"


def _outcome(covered: pd.DataFrame, dataset_size: int) -> str:
    """What each tensor-parallel rank read over the resumed epoch, from :func:`coverage`."""
    if (covered["read once"] == dataset_size).all():
        return f"reads every one of the {dataset_size} samples exactly once that epoch"
    return (
        f"reads at least {covered['read once'].min()} of the {dataset_size} samples "
        f"once, up to {covered['read more than once'].max()} more than once, and misses up "
        f"to {covered['never read'].max()}"
    )


def claim(
    run: MeshRun, table: pd.DataFrame, checked: pd.DataFrame, resumed_table: pd.DataFrame
) -> str:
    """The claim, every number and quantifier read from the tables."""
    defaults_name, sharded_name, agreed_name = VARIANTS
    defaults, sharded, agreed = (_row(table, name) for name in VARIANTS)
    with_replicas = list(CALLS)[1]
    processes = run.mesh[0] * run.mesh[1]
    return (
        f"In {processes} real gloo processes arranged as a {run.mesh[0]} x {run.mesh[1]} "
        "DeviceMesh on CPU (data-parallel x tensor-parallel), DistributedSampler built with "
        f"the {defaults_name} shards over {defaults['num_replicas']} ranks, and the members "
        f"read different samples {_differing(defaults)}; built with {sharded_name} it shards "
        f"over {sharded['num_replicas']} ranks, and they read different samples "
        f"{_differing(sharded)} ({_differing(agreed)} with seed={VARIANTS[agreed_name][1]}). "
        f"{with_replicas} {_raised(checked, defaults_name, with_replicas)} for the defaults "
        f"and {_raised(checked, sharded_name, with_replicas)} with "
        f"{sharded_name}. A state saved part-way through an epoch on the {run.mesh[0]} x "
        f"{run.mesh[1]} mesh and loaded on a {run.resumed_mesh[0]} x {run.resumed_mesh[1]} "
        f'mesh (tail "{RESUME_TAIL}"): each tensor-parallel rank '
        f"{_outcome(coverage(resumed_table, run.dataset_size), run.dataset_size)}."
    )


def describe(
    run: MeshRun, table: pd.DataFrame, checked: pd.DataFrame, resumed_table: pd.DataFrame
) -> str:
    """The prose, every number and quantifier read from the tables."""
    defaults_name, sharded_name, _ = VARIANTS
    defaults, sharded, agreed = (_row(table, name) for name in VARIANTS)
    covered = coverage(resumed_table, run.dataset_size)
    alone, with_replicas = CALLS
    messages = checked[checked["message"] != "-"]["message"].unique()
    quoted = f': "{messages[0]}"' if len(messages) == 1 else ""
    before = resumed_table[resumed_table["phase"] == PHASES["saved"]]
    after = resumed_table[resumed_table["phase"] == PHASES["resumed"]]
    job = sorted({str(value) for value in table["distinct samples the job reads, per epoch"]})
    outcome = _outcome(covered, run.dataset_size)
    peers = "the same samples" if peers_agree(resumed_table) else "not always the same samples"
    passes = _raised(checked, defaults_name, alone)
    why = ""
    if passes.startswith("passes"):
        why = (
            f": the samplers hold ranks 0 to {int(defaults['num_replicas']) - 1} once each, a "
            f"consistent {defaults['num_replicas']}-way split"
        )
    return (
        f"With the defaults each process is a rank of its own (num_replicas "
        f"{defaults['num_replicas']}), and the members read different samples "
        f"{_differing(defaults)}: {defaults['samples per process, per epoch']} samples per "
        f"process per epoch, out of the {defaults['distinct samples per TP group, per epoch']} "
        f"its group was given between them. With {sharded_name} the samplers shard over the "
        f"data-parallel ranks (num_replicas {sharded['num_replicas']}) and the members read "
        f"different samples {_differing(sharded)}: each process reads "
        f"{sharded['samples per process, per epoch']} samples per epoch, the same ones as its "
        f"tensor-parallel peer. With seed=None the seed is agreed over the whole job, and the "
        f"members read different samples {_differing(agreed)}. Either way the job reads "
        f"{joined(job)} distinct samples per epoch, so nothing looks wrong from the data's "
        f"side.\n\n"
        f"For the defaults, {alone} {passes}{why}; {with_replicas} "
        f"{_raised(checked, defaults_name, with_replicas)}{quoted}. With {sharded_name}, "
        f"{alone} {_raised(checked, sharded_name, alone)} and {with_replicas} "
        f"{_raised(checked, sharded_name, with_replicas)}.\n\n"
        f"Resume: on the {before['mesh'].iloc[0]} mesh each process read "
        f"{joined(sorted(set(before['samples read'])))} samples of epoch {run.resume_epoch} "
        f"({run.resume_steps} steps of {run.batch_size}) before the save; on the "
        f"{after['mesh'].iloc[0]} mesh, having loaded global rank 0's state, each of its "
        f"{len(after)} processes read the {joined(sorted(set(after['samples read'])))} samples "
        f"left. Tensor-parallel peers "
        f"read {peers} in both phases, and each tensor-parallel rank {outcome}."
    )


def build() -> Evidence:
    return evidence(measure())


def evidence(measured: Measured) -> Evidence:
    """The finding's tables and prose from what :func:`measure` measured."""
    run = measured.run
    table = replicas(measured.reads)
    checked = outcomes(measured.checks)
    resumed_table = resumed(measured.resume)
    saved = measured.resume[measured.resume["phase"] == "saved"]["state"].iloc[0]
    note = (
        f"{run.mesh[0] * run.mesh[1]} gloo processes as a {run.mesh[0]} x {run.mesh[1]} "
        f'DeviceMesh ("dp", "tp") on CPU; {run.dataset_size} samples, DataLoader batch size '
        f"{run.batch_size}, {run.epochs} epochs with set_epoch."
    )
    return Evidence(
        claim=claim(run, table, checked, resumed_table),
        prose=describe(run, table, checked, resumed_table),
        tables=(
            Table("What the members of each tensor-parallel group read", table, note=note),
            Table("What check_consistent reports on each process", checked),
            Table(
                f"Resume from DP {run.mesh[0]} x TP {run.mesh[1]} to DP "
                f"{run.resumed_mesh[0]} x TP {run.resumed_mesh[1]}, epoch {run.resume_epoch}",
                resumed_table,
                note=(
                    f'group=mesh["dp"], tail "{RESUME_TAIL}", seed {saved["seed"]}; saved after '
                    f"{run.resume_steps} steps; every new process loads global rank 0's state."
                ),
            ),
        ),
    )
