"""Finding: what Ray Train's prepare_data_loader does to a sampler; restarts from checkpoints.

The TorchTrainer runs take minutes (a local Ray cluster, worker groups that fail and
restart), so the finding renders what they observed from a record
(:mod:`studies.engines.ray_record`: ``python -m studies.engines.ray_record`` re-measures it,
``tests/test_ray.py`` runs them again and compares).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import pandas as pd

from studies.engines import ray_record, ray_runs
from studies.engines.ray_record import Observed, observe
from studies.engines.ray_resized import RESIZED_CHECKPOINT, RESIZED_EPOCHS, RESIZED_WORKERS
from studies.engines.ray_runs import (
    BATCH_SIZE,
    CASES,
    CHECKPOINT_STEP,
    DATASET_SIZE,
    EPOCHS,
    PATHS,
    SAMPLERS,
    WORKERS,
    Seen,
)
from studies.findings import Evidence, Table
from studies.findings.wording import joined

__all__ = ["Observed", "build", "cases_table", "claim", "evidence", "explain", "observe"]

NAME = "engines"
TITLE = "Inside Ray Train: what prepare_data_loader does to a sampler, and restarts"
GUARDED_BY = "tests/test_ray.py::test_engines_claims_hold_in_a_torch_trainer"

PREPARED = "prepared by"
SAMPLER = "sampler given"
ITERATES = "sampler the loader iterates"
STARTED = "started"
SIZES = "batch sizes"
NEVER = "never seen (most in an epoch)"
REPEATED = "repeated (most in an epoch)"
EXACT = "every sample exactly once, every epoch"
RESHUFFLED = "epoch 1 reshuffled"
RESTART = "restart continues from"
RESTART_NEVER = "never seen in the restarted epoch"
RESTART_REPEATED = "repeated in the restarted epoch"

RAY, KEPT, UNMOVED, OURS = (PATHS[path] for path in ("ray", "ray-kept", "ray-unmoved", "ours"))
RESTARTS = {
    "state": "the loader's state",
    "sampler state": "sampler.state_dict()",
    "epoch start": "the epoch's start",
}
YES, NO = "yes", "no"

WORLD = "workers"
EPOCH = "epoch"
STEPS = "steps per worker"
SEEN = "samples seen"
EPOCH_NEVER = "never seen"
EPOCH_REPEATED = "repeated"


def cases_table(cases: Mapping[str, Sequence[Seen]]) -> pd.DataFrame:
    """One row per case: what the workers' steps received, and after the restart."""
    rows = [_row(case, cases[case.name]) for case in CASES]
    table = pd.DataFrame(rows)
    for column in (NEVER, REPEATED, RESTART_NEVER, RESTART_REPEATED):
        table[column] = table[column].astype("Int64")  # empty where the run failed
    return table


def _row(case: ray_runs.Case, ranks: Sequence[Seen]) -> dict[str, object]:
    row: dict[str, object] = {PREPARED: PATHS[case.path], SAMPLER: SAMPLERS[case.sampler]}
    errors = sorted({rank.error for rank in ranks if rank.error is not None})
    if errors:
        row[ITERATES] = joined(sorted({rank.iterates for rank in ranks if rank.iterates}))
        return {
            **row,
            STARTED: f"no: {joined(errors)}",
            **dict.fromkeys((SIZES, EXACT, RESHUFFLED, RESTART), ""),
            **dict.fromkeys((NEVER, REPEATED, RESTART_NEVER, RESTART_REPEATED)),
        }
    row[ITERATES] = joined(sorted({rank.iterates for rank in ranks}))
    per_epoch = [[_epoch(rank.before, epoch) for rank in ranks] for epoch in range(EPOCHS)]
    counts = [
        Counter(i for batches in parts for batch in batches for i in batch) for parts in per_epoch
    ]
    last = EPOCHS - 1
    restarted = Counter(
        i
        for rank in ranks
        for batch in (*_epoch(rank.before, last)[:CHECKPOINT_STEP], *_epoch(rank.after, last))
        for i in batch
    )
    sizes = {len(batch) for rank in ranks for _, batch in rank.before}
    never = [DATASET_SIZE - len(count) for count in counts]
    repeated = [sum(count.values()) - len(count) for count in counts]
    return {
        **row,
        STARTED: YES,
        SIZES: ", ".join(str(size) for size in sorted(sizes, reverse=True)),
        NEVER: max(never),
        REPEATED: max(repeated),
        EXACT: YES if max(never) == 0 and max(repeated) == 0 else NO,
        RESHUFFLED: YES if per_epoch[0] != per_epoch[1] else NO,
        RESTART: RESTARTS[ranks[0].restart],
        RESTART_NEVER: DATASET_SIZE - len(restarted),
        RESTART_REPEATED: sum(restarted.values()) - len(restarted),
    }


def _epoch(batches: Sequence[tuple[int, tuple[int, ...]]], epoch: int) -> list[tuple[int, ...]]:
    return [batch for e, batch in batches if e == epoch]


def resized_table(seen: Sequence[tuple[int, int, int, int, tuple[int, ...]]]) -> pd.DataFrame:
    """Per epoch of the run restarted on fewer workers: what the steps counted from the
    checkpoint received (the first run's steps up to its checkpoint, then the second run's)."""
    second = RESIZED_WORKERS[1]
    rows = []
    for epoch in range(RESIZED_EPOCHS):
        kept = [
            (size, rank, step, batch)
            for size, rank, e, step, batch in seen
            if e == epoch and (size == second or (epoch, step) <= RESIZED_CHECKPOINT)
        ]
        count = Counter(i for *_, batch in kept for i in batch)
        worlds = sorted({size for size, *_ in kept}, reverse=True)
        steps = {size: max(step for s, _, step, _ in kept if s == size) + 1 for size in worlds}
        rows.append(
            {
                EPOCH: epoch,
                WORLD: " then ".join(str(size) for size in worlds),
                STEPS: " then ".join(str(steps[size]) for size in worlds),
                SEEN: sum(count.values()),
                EPOCH_NEVER: DATASET_SIZE - len(count),
                EPOCH_REPEATED: sum(count.values()) - len(count),
            }
        )
    return pd.DataFrame(rows)


def _count(count: int, total: int, noun: str = "loader") -> str:
    plural = f"{noun}s"
    if count == total:
        return f"both {plural}" if total == 2 else f"all {total} {plural}"
    if count == 0:
        return f"neither {noun}" if total == 2 else f"none of the {total} {plural}"
    return f"{count} of the {total} {plural}"


def _path(table: pd.DataFrame, path: str) -> pd.DataFrame:
    return table[table[PREPARED] == path]


def _exact_restart(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows[RESTART_NEVER] == 0) & (rows[RESTART_REPEATED] == 0)]


def claim(table: pd.DataFrame, resized: pd.DataFrame) -> str:
    """The claim, every count and quantifier read from the tables."""
    ray, ours = _path(table, RAY), _path(table, OURS)
    kept, unmoved = _path(table, KEPT), _path(table, UNMOVED)
    given_ours = ray[~ray[SAMPLER].isin([SAMPLERS["plain"], SAMPLERS["stock"]])]
    replaced = given_ours[given_ours[ITERATES].str.startswith("torch ")]
    failed = ray[ray[STARTED] != YES]
    started = ray[ray[STARTED] == YES]
    inexact_restart = started[(started[RESTART_NEVER] > 0) | (started[RESTART_REPEATED] > 0)]
    kept_ours = kept[kept[ITERATES].str.endswith("(ours)")]
    kept_lost = kept[kept[RESTART_NEVER] > 0]
    exact = ours[(ours[EXACT] == YES) & (ours[RESHUFFLED] == YES)]
    exact_epochs = int(((resized[EPOCH_NEVER] == 0) & (resized[EPOCH_REPEATED] == 0)).sum())
    return (
        f"In a real TorchTrainer run ({WORKERS} CPU workers, {DATASET_SIZE} samples, batch "
        f"size {BATCH_SIZE}, {EPOCHS} epochs), Ray's prepare_data_loader replaced "
        f"{_count(len(replaced), len(given_ours), 'sampler')} of ours it was given with a "
        f"stock DistributedSampler, {_count(len(failed), len(ray))} it prepared failed at "
        "their first batch, and a restart from a mid-epoch Ray checkpoint lost or repeated "
        f"samples in {_count(len(inexact_restart), len(started))} that ran. With "
        f"add_dist_sampler=False it kept {_count(len(kept_ours), len(kept), 'sampler')} of "
        "ours"
        + (
            ", but a restart from the sampler's own state lost samples in "
            f"{_count(len(kept_lost), len(kept))}, as its loader fetches a batch ahead"
            if len(kept_lost)
            else ", and although its loader fetches a batch ahead, a restart from the "
            "sampler's own state continued exactly in "
            f"{_count(len(_exact_restart(kept)), len(kept))}"
        )
        + "; with move_to_device=False as well, that restart continued exactly in "
        f"{_count(len(_exact_restart(unmoved)), len(unmoved))}. Through "
        f"samplers.integrations.ray, {_count(len(exact), len(ours))} saw every sample "
        "exactly once in every epoch with epoch 1 reshuffled, the restart continued "
        f"exactly in {_count(len(_exact_restart(ours)), len(ours))}, and a restart on "
        f"{RESIZED_WORKERS[1]} instead of {RESIZED_WORKERS[0]} workers saw every sample "
        f"exactly once in {_count(exact_epochs, len(resized), 'epoch')}."
    )


def explain(table: pd.DataFrame, resized: pd.DataFrame) -> str:
    """The finding's prose, every number and quantifier read from the tables."""
    ray = _path(table, RAY)
    parts = []
    failed = ray[ray[STARTED] != YES]
    if not failed.empty:
        errors = sorted(failed[STARTED].str.removeprefix("no: ").unique())
        parts.append(
            f"Ray rebuilt the loaders over {joined(failed[SAMPLER])} around a "
            "stock DistributedSampler without batching (the loader's batch_size is None "
            "when it has a batch sampler), and the default collate_fn then raised "
            f"{joined(errors)} at the first batch; nothing warned before."
        )
    ours_given = ~ray[SAMPLER].isin([SAMPLERS["plain"], SAMPLERS["stock"]])
    swapped = ray[ours_given & (ray[STARTED] == YES) & ray[ITERATES].str.startswith("torch ")]
    if not swapped.empty:
        parts.append(
            f"The loaders over {joined(swapped[SAMPLER])} ran on "
            f"{joined(sorted(set(swapped[ITERATES])))} of Ray's instead: the wrapped "
            "sampler's order (weights, subsets) or the mixture's weights were gone; Ray "
            "logs this on rank 0, and nothing reaches the training code."
        )
    state = ray[(ray[RESTART] == RESTARTS["sampler state"]) & (ray[STARTED] == YES)]
    for _, row in state.iterrows():
        parts.append(
            f"Ray left {row[SAMPLER]} in place but wraps the loader in one that fetches a "
            "batch ahead of the loop, so the sampler's own state_dict() saved in the loop "
            f"was a batch ahead: after the restart {row[RESTART_NEVER]} samples of the "
            "epoch were never seen."
            if row[RESTART_NEVER] > 0
            else f"Ray left {row[SAMPLER]} in place and wraps the loader in one that fetches "
            "a batch ahead of the loop; the sampler's own state_dict() saved in the loop "
            "leaves out the batch that loader holds, so the restart from it continued with "
            f"{row[RESTART_NEVER]} samples never seen and {row[RESTART_REPEATED]} repeated."
        )
    from_start = ray[(ray[RESTART] == RESTARTS["epoch start"]) & (ray[STARTED] == YES)]
    if not from_start.empty:
        parts.append(
            "Restarted at the epoch's start, as Ray's guide checkpoints (once an epoch), "
            f"{joined(from_start[SAMPLER])} repeated up to "
            f"{int(from_start[RESTART_REPEATED].max())} samples of the restarted epoch."
        )
    parts.append(_kept(table))
    first, second = RESIZED_WORKERS
    parts.append(
        f"The restart on fewer workers is two runs sharing one checkpoint: {first} workers "
        f"checkpointed after step {RESIZED_CHECKPOINT[1] + 1} of epoch "
        f"{RESIZED_CHECKPOINT[0]} and one of them was killed; a TorchTrainer of the same "
        f"name on {second} workers continued from ray.train.get_checkpoint(). (Ray Train's "
        "elastic policy sizes a restart from the nodes' resources, not the free ones, so on "
        "one machine it restarts at the size it had; on a cluster that loses a node it "
        "shrinks the group, which tests/test_ray.py checks.) Counted from the checkpoint, "
        f"each of the {len(resized)} epochs handed out "
        f"{joined(sorted(set(resized[SEEN])))} samples of {DATASET_SIZE}, with at most "
        f"{int(resized[EPOCH_NEVER].max())} never seen and "
        f"{int(resized[EPOCH_REPEATED].max())} repeated."
    )
    return " ".join(parts)


def _kept(table: pd.DataFrame) -> str:
    """Ray's calls that keep the sampler, from the tables."""
    kept, unmoved, ours = _path(table, KEPT), _path(table, UNMOVED), _path(table, OURS)
    lost = kept[kept[RESTART_NEVER] > 0]
    exact = unmoved[(unmoved[EXACT] == YES) & (unmoved[RESHUFFLED] == YES)]
    return (
        "Ray's own call keeps a sampler when told to: with add_dist_sampler=False, "
        f"{_count(int(kept[ITERATES].str.endswith('(ours)').sum()), len(kept), 'loader')} "
        "iterated the sampler of ours they were given, with its epoch set by the loop "
        "(sampler.set_epoch(epoch)), and "
        f"{_count(int((kept[EXACT] == YES).sum()), len(kept))} saw every sample exactly "
        "once in every epoch. "
        + (
            "But its loader still fetches a batch ahead of the loop "
            "(move_to_device=True, the default), so the sampler's state_dict() saved in the "
            "loop was a batch ahead on each worker: after the restart, "
            f"{_count(len(lost), len(kept))} had samples of the epoch never seen, from "
            f"{int(kept[RESTART_NEVER].min())} to {int(kept[RESTART_NEVER].max())}. "
            if len(lost)
            else "Its loader fetches a batch ahead of the loop (move_to_device=True, the "
            "default), and the sampler's state_dict() saved in the loop leaves out the "
            "batch that loader holds: the restart from it continued exactly in "
            f"{_count(len(_exact_restart(kept)), len(kept))}. "
        )
        + "With move_to_device=False as well, Ray hands back the loader it was given: "
        f"{_count(len(exact), len(unmoved))} saw every sample exactly once with epoch 1 "
        "reshuffled, and the restart from the sampler's state continued exactly in "
        f"{_count(len(_exact_restart(unmoved)), len(unmoved))}; the loop sets each epoch "
        "and saves and loads the sampler's state itself, which samplers.integrations.ray "
        f"does for it (loader.epoch, save_state, load_state: exact in "
        f"{_count(len(_exact_restart(ours)), len(ours))})."
    )


def _recorded() -> str:
    """Where the runs' observations come from: the record, its machine and versions."""
    machine, versions = ray_record.machine_and_versions()
    return (
        "These TorchTrainer runs take minutes, so this finding renders what they observed "
        f"from a record (`studies/data/ray-runs.json`, made with `{ray_record.COMMAND}`, "
        "which re-measures it; tests/test_ray.py runs them again and compares): on "
        + ", ".join(f"{key} {value}" for key, value in machine.items())
        + "; "
        + ", ".join(f"{key} {value}" for key, value in versions.items())
        + "."
    )


def build() -> Evidence:
    return evidence(ray_record.load())


#: The tables of loaders, one per way of preparing them: the call, and what the loop does.
_TABLES = (
    (
        RAY,
        "ray.train.torch.prepare_data_loader(loader)",
        "the loop calls loader.sampler.set_epoch(epoch) each epoch, as Ray's guide does",
    ),
    (
        KEPT,
        "ray.train.torch.prepare_data_loader(loader, add_dist_sampler=False)",
        "the loop calls set_epoch(epoch) on its sampler each epoch and saves its state_dict()",
    ),
    (
        UNMOVED,
        "ray.train.torch.prepare_data_loader(loader, add_dist_sampler=False, move_to_device=False)",
        "the loop calls set_epoch(epoch) on its sampler each epoch and saves its state_dict()",
    ),
    (
        OURS,
        "samplers.integrations.ray.prepare_data_loader(loader)",
        "the loader counts the epochs; save_state and load_state hold its state",
    ),
)


def evidence(observed: Observed) -> Evidence:
    """The finding's evidence from what :func:`observe` returned (or the record holds)."""
    table = cases_table(observed.cases)
    resized = resized_table(observed.resized)
    restart = (
        f"The restart: a Ray checkpoint after step {CHECKPOINT_STEP} of epoch {EPOCHS - 1}, "
        "a planned failure, Ray restarting the workers."
    )
    loaders = tuple(
        Table(
            f"{call}: what the workers' steps received, and after a restart",
            _path(table, path).drop(columns=[PREPARED]).reset_index(drop=True),
            note=(
                f"{WORKERS} workers, {DATASET_SIZE} samples, batch size {BATCH_SIZE}, "
                f"{EPOCHS} epochs, worst epoch; {loop}. {restart}"
            ),
        )
        for path, call, loop in _TABLES
    )
    return Evidence(
        claim=claim(table, resized),
        prose=explain(table, resized) + "\n\n" + _recorded(),
        tables=(
            *loaders,
            Table(
                f"A restart on {RESIZED_WORKERS[1]} of {RESIZED_WORKERS[0]} workers through "
                "samplers.integrations.ray, counted from the checkpoint",
                resized,
                note='DistributedSampler(tail="uneven"), batch size '
                f"{BATCH_SIZE}, {DATASET_SIZE} samples.",
            ),
        ),
    )
