"""Finding: what accelerate, the Hugging Face Trainer, Lightning and torchdata do to a sampler."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pandas as pd

from studies.engines.frameworks import (
    BATCH_SIZE,
    DATASET_SIZE,
    EPOCHS,
    PLAIN_SEED,
    SAMPLERS,
    SCENARIOS,
    WORLD_SIZE,
    Observed,
    Scenario,
    observe,
)
from studies.findings import Evidence, Finding, Table
from studies.findings.wording import joined

NAME = "frameworks"
TITLE = "Inside the frameworks: what accelerate, the HF Trainer, Lightning and torchdata do"
GUARDED_BY = "tests/test_frameworks.py::test_frameworks_claims_hold_in_real_processes"
SLOW = True

FRAMEWORKS = {
    "accelerate": "accelerate",
    "transformers": "Hugging Face Trainer",
    "lightning": "Lightning Trainer",
    "fabric": "Lightning Fabric",
    "torchdata": "torchdata",
}
PATHS = {
    "Accelerator.prepare": "accelerator.prepare(loader)",
    "Accelerator.prepare, no sampler": "accelerator.prepare(loader), no sampler",
    "prepare_data_loader": "prepare_data_loader(loader, accelerator)",
    "Trainer._get_train_sampler": "_get_train_sampler override",
    "Trainer, no sampler": "Trainer(train_dataset=...), no sampler",
    "ShardedTrainer": "ShardedTrainer(train_sampler=...)",
    "Trainer.fit": "trainer.fit(model, loader)",
    "setup_dataloaders": "fabric.setup_dataloaders(loader)",
    "ShardedDataLoader": "ShardedDataLoader(...)",
    "StatefulDataLoader": "StatefulDataLoader(...)",
    "nodes.SamplerWrapper": "nodes.SamplerWrapper(sampler)",
    "sampler_node": "sampler_node(sampler)",
}

FRAMEWORK = "framework"
HOW = "how the sampler is passed"
SAMPLER = "sampler"
OPTIONS = "options"
OURS = "through samplers.integrations"
STARTED = "started"
BATCHES = "batches per rank and epoch"
NEVER = "never seen (most in an epoch)"
NEVER_FEWEST = "never seen (fewest in an epoch)"
REPEATED = "repeated (most in an epoch)"
EXACT = "every sample exactly once, every epoch"
SET_EPOCH = "set_epoch reached the sampler"
RESHUFFLED = "epoch 1 reshuffled"
WARNED = "re-sharding warning"

#: The columns measured in a run that started (empty otherwise).
_MEASURED = (BATCHES, NEVER, NEVER_FEWEST, REPEATED, EXACT, SET_EPOCH, RESHUFFLED)

EVERY_EPOCH = "every epoch"
#: set_epoch and the re-sharding warning concern a sampler: empty for a plain loader.
NO_SAMPLER = SAMPLERS["none"]
NEVER_SET = "never"
YES, NO = "yes", "no"

RUNS = "runs"
FAILED = "failed to start"
EXACT_RUNS = "exactly once, every epoch"
LOSING_RUNS = "losing samples every epoch"
SET_RUNS = "set_epoch every epoch"
RESHUFFLED_RUNS = "epoch 1 reshuffled"


def configurations(observed: Sequence[Sequence[Observed]]) -> pd.DataFrame:
    """One row per scenario: what the ranks saw, set and warned, from ``observe()``."""
    rows = [_row(scenario, ranks) for scenario, ranks in zip(SCENARIOS, observed, strict=True)]
    table = pd.DataFrame(rows)
    for column in (NEVER, NEVER_FEWEST, REPEATED):
        table[column] = table[column].astype("Int64")  # empty where the run did not start
    return table


def _row(scenario: Scenario, ranks: Sequence[Observed]) -> dict[str, object]:
    row: dict[str, object] = {
        FRAMEWORK: FRAMEWORKS[scenario.framework],
        HOW: PATHS[scenario.path],
        SAMPLER: SAMPLERS[scenario.sampler],
        OPTIONS: scenario.option_text(),
        OURS: YES if scenario.supported else NO,
    }
    errors = sorted({rank.error for rank in ranks if rank.error is not None})
    row[STARTED] = YES if not errors else f"no: {joined(errors)}"
    row[WARNED] = (
        ""
        if scenario.sampler in ("stock", "none")
        else (YES if any(r.warned for r in ranks) else NO)
    )
    if errors:
        return {**row, **dict.fromkeys(_MEASURED)}
    per_epoch = [[_flat(rank, epoch) for rank in ranks] for epoch in range(EPOCHS)]
    counts = [Counter(index for part in parts for index in part) for parts in per_epoch]
    seen = [len(count) for count in counts]
    repeated = [sum(count.values()) - len(count) for count in counts]
    sizes = {
        sum(1 for e, _ in rank.batches if e == epoch) for rank in ranks for epoch in range(EPOCHS)
    }
    told = [set(rank.epochs_set) for rank in ranks]
    if scenario.sampler == "none":
        set_epoch = ""
    elif all(set(range(EPOCHS)) <= epochs for epochs in told):
        set_epoch = EVERY_EPOCH
    elif not any(told):
        set_epoch = NEVER_SET
    else:
        set_epoch = "epochs " + joined(sorted(set().union(*told)))
    return {
        **row,
        BATCHES: " or ".join(str(size) for size in sorted(sizes, reverse=True)),
        NEVER: DATASET_SIZE - min(seen),
        NEVER_FEWEST: DATASET_SIZE - max(seen),
        REPEATED: max(repeated),
        EXACT: YES if min(seen) == DATASET_SIZE and max(repeated) == 0 else NO,
        SET_EPOCH: set_epoch,
        RESHUFFLED: YES if any(a != b for a, b in zip(*per_epoch[:2], strict=True)) else NO,
    }


def _flat(rank: Observed, epoch: int) -> list[int]:
    return [index for e, batch in rank.batches if e == epoch for index in batch]


def by_path(table: pd.DataFrame) -> pd.DataFrame:
    """Per framework and way of passing the sampler: the usual ways next to ours."""
    rows = []
    for (framework, how), runs in table.groupby([FRAMEWORK, HOW], sort=False):
        started = runs[runs[STARTED] == YES]
        rows.append(
            {
                FRAMEWORK: framework,
                HOW: how,
                OURS: runs[OURS].iloc[0],
                RUNS: len(runs),
                FAILED: len(runs) - len(started),
                EXACT_RUNS: int((started[EXACT] == YES).sum()),
                LOSING_RUNS: int((started[NEVER_FEWEST] > 0).sum()),
                NEVER: _most(started[NEVER]),
                REPEATED: _most(started[REPEATED]),
                SET_RUNS: (
                    ""  # no sampler to set
                    if (runs[SAMPLER] == NO_SAMPLER).all()
                    else int((started[SET_EPOCH] == EVERY_EPOCH).sum())
                ),
                RESHUFFLED_RUNS: int((started[RESHUFFLED] == YES).sum()),
            }
        )
    return pd.DataFrame(rows)


def _sum(flags: pd.Series) -> int:
    return int(flags.sum())


def _most(values: pd.Series) -> int | None:
    return None if values.empty else int(values.max())


def _count(count: int, total: int, noun: str = "run") -> str:
    """``"all 12 runs"``, ``"none of the 12 runs"``, ``"3 of the 12 runs"``, ``"the one run"``."""
    plural = f"{noun}s"
    if total == 1:
        return f"the one {noun}" if count else f"not the one {noun}"
    if count == total:
        return f"both {plural}" if total == 2 else f"all {total} {plural}"
    if count == 0:
        return f"neither {noun}" if total == 2 else f"none of the {total} {plural}"
    return f"{count} of the {total} {plural}"


def explain(table: pd.DataFrame) -> str:
    """The finding's prose, every number and quantifier read from ``table``."""
    usual, ours = table[table[OURS] == NO], table[table[OURS] == YES]
    parts = []
    handed = usual[usual[SAMPLER] != NO_SAMPLER]
    for framework, verb in (
        ("accelerate", "Handing a DistributedSampler to accelerate"),
        ("Hugging Face Trainer", "Handing one to the Hugging Face Trainer"),
    ):
        runs = handed[(handed[FRAMEWORK] == framework) & (handed[STARTED] == YES)]
        losing = runs[runs[NEVER_FEWEST] > 0]
        parts.append(
            f"{verb} ({joined(runs[HOW].unique())}), {_count(len(losing), len(runs))} lost "
            f"samples in every epoch: up to {_most(runs[NEVER])} of {DATASET_SIZE} were never "
            "seen in an epoch" + _warned(runs[runs[NEVER] > 0]) + "."
        )
    parts.append(_plain(usual[(usual[SAMPLER] == NO_SAMPLER) & (usual[STARTED] == YES)]))
    lightning = usual[usual[FRAMEWORK].isin([FRAMEWORKS["lightning"], FRAMEWORKS["fabric"]])]
    index_runs = lightning[lightning[SAMPLER] != SAMPLERS["ours, batches"]]
    batches = lightning[lightning[SAMPLER] == SAMPLERS["ours, batches"]]
    failed = batches[batches[STARTED] != YES]
    ran = batches[batches[STARTED] == YES]
    text = (
        "Lightning's Trainer and Fabric kept a DistributedSampler as it was: "
        f"{_count(_sum(index_runs[NEVER] == 0), len(index_runs))} saw every sample, and "
        "set_epoch reached the sampler every epoch in "
        f"{_count(_sum(index_runs[SET_EPOCH] == EVERY_EPOCH), len(index_runs))}. With our "
        f"batch sampler, {_count(len(failed), len(batches))} failed to start"
    )
    if not failed.empty:
        errors = sorted(failed[STARTED].str.removeprefix("no: ").unique())
        text += (
            f" ({joined(sorted(failed[OPTIONS].unique()))}: {joined(errors)}, raised while "
            "Lightning re-instantiated the batch sampler around a sampler of its own)"
        )
    if not ran.empty:
        text += (
            f"; of the {len(ran)} that ran, set_epoch never reached the sampler in "
            f"{_count(_sum(ran[SET_EPOCH] == NEVER_SET), len(ran))}, and epoch 1 was "
            f"reshuffled in {_count(_sum(ran[RESHUFFLED] == YES), len(ran))}"
        )
    parts.append(text + ".")
    stateful = usual[usual[HOW] == PATHS["StatefulDataLoader"]]
    wrapper = usual[usual[HOW] == PATHS["nodes.SamplerWrapper"]]
    parts.append(
        "torchdata's StatefulDataLoader set the epoch in "
        f"{_count(_sum(stateful[SET_EPOCH] == EVERY_EPOCH), len(stateful))} and reshuffled "
        f"epoch 1 in {_count(_sum(stateful[RESHUFFLED] == YES), len(stateful))} (call "
        "set_epoch yourself, or pass auto_epoch=True); nodes' SamplerWrapper set it every "
        f"epoch in {_count(_sum(wrapper[SET_EPOCH] == EVERY_EPOCH), len(wrapper))}."
    )
    started = ours[ours[STARTED] == YES]
    parts.append(
        f"Through samplers.integrations, {_count(len(started), len(ours))} started; "
        f"{_count(_sum(started[EXACT] == YES), len(ours))} saw every sample exactly once in "
        "every epoch, set_epoch reached the sampler every epoch in "
        f"{_count(_sum(started[SET_EPOCH] == EVERY_EPOCH), len(ours))}, epoch 1 was "
        f"reshuffled in {_count(_sum(started[RESHUFFLED] == YES), len(ours))}, and a "
        f"re-sharding warning came in {_count(_sum(ours[WARNED] == YES), len(ours))}."
    )
    return " ".join(parts)


def _plain(runs: pd.DataFrame) -> str:
    """What a plain shuffled DataLoader that the framework shards itself got (``runs``)."""
    if runs.empty:
        return ""
    uneven = runs[runs[BATCHES].str.contains(" or ")]
    lost = _count(_sum(runs[NEVER] > 0), len(runs))
    text = (
        "A plain shuffled DataLoader, which accelerate shards itself "
        f"({joined(runs[HOW].unique())}), lost samples in {lost} "
        f"and repeated up to {_most(runs[REPEATED])} per epoch to even out the ranks; epoch 1 "
        f"was reshuffled in {_count(_sum(runs[RESHUFFLED] == YES), len(runs))}"
    )
    if not uneven.empty:
        counts = joined(sorted(uneven[BATCHES].unique()))
        options = joined(sorted(uneven[OPTIONS].unique()))
        text += (
            f"; ranks got different numbers of batches ({counts}) in "
            f"{_count(len(uneven), len(runs))} ({options})"
        )
    return text + "."


def _warned(losing: pd.DataFrame) -> str:
    """How many of the runs that lost samples through a sampler of ours warned of it."""
    through_ours = losing[losing[SAMPLER] != SAMPLERS["stock"]]
    if through_ours.empty:
        return ""
    warned = _sum(through_ours[WARNED] == YES)
    return (
        "; where the sampler was one of ours, it warned of re-sharding in "
        f"{_count(warned, len(through_ours))}"
    )


def answer(finding: Finding) -> tuple[str, str, str]:
    """The reports' "if you are doing X, use Y" row for this finding, from its tables."""
    return answer_from(finding.tables[0].frame, finding.name)


def answer_from(table: pd.DataFrame, name: str = NAME) -> tuple[str, str, str]:
    """:func:`answer` from the runs table itself: the built one, or the one the reports
    keep as ``frameworks-runs.csv`` (read with ``pandas.read_csv``), which gives the same
    row."""
    usual, ours = table[table[OURS] == NO], table[table[OURS] == YES]
    handed = usual[(usual[SAMPLER] != NO_SAMPLER) & (usual[STARTED] == YES)]
    plain = usual[(usual[SAMPLER] == NO_SAMPLER) & (usual[STARTED] == YES)]
    worst = {
        framework: _most(handed[handed[FRAMEWORK] == framework][NEVER])
        for framework in ("accelerate", "Hugging Face Trainer")
    }
    failed = usual[usual[STARTED] != YES]
    exact = int((ours[EXACT] == YES).sum())
    return (
        "training with accelerate, the Hugging Face Trainer, Lightning or torchdata",
        "Ours through `samplers.integrations`: `prepare_data_loader(loader, accelerator)` "
        "(accelerate), `ShardedTrainer(..., train_sampler=sampler)` (Hugging Face Trainer), "
        "`ShardedDataLoader(dataset, batch_sampler=sampler)` (Lightning Trainer and Fabric), "
        "`sampler_node(sampler)` (torchdata.nodes); torchdata's `StatefulDataLoader` takes "
        "ours as it is (call `set_epoch`). Do not pass a DistributedSampler to "
        "`accelerator.prepare` or the Trainer's `_get_train_sampler`.",
        f"[{name}]({name}.md): a DistributedSampler handed to them lost up to "
        f"{worst['accelerate']} of {DATASET_SIZE} samples per epoch with accelerate and up to "
        f"{worst['Hugging Face Trainer']} with the Hugging Face Trainer; a plain shuffled "
        f"loader that accelerate shards itself lost up to {_most(plain[NEVER])} and repeated "
        f"up to {_most(plain[REPEATED])}; "
        f"{_count(len(failed), len(usual), 'other run')} failed to start; through "
        f"samplers.integrations {_count(exact, len(ours))} saw every sample exactly once in "
        "every epoch.",
    )


def claim(table: pd.DataFrame) -> str:
    """The claim, every count and quantifier read from ``table``."""
    usual, ours = table[table[OURS] == NO], table[table[OURS] == YES]
    started = usual[usual[STARTED] == YES]
    accelerated = started[
        started[FRAMEWORK].isin([FRAMEWORKS["accelerate"], FRAMEWORKS["transformers"]])
    ]
    resharding = accelerated[accelerated[SAMPLER] != NO_SAMPLER]
    plain = accelerated[accelerated[SAMPLER] == NO_SAMPLER]
    lost = _sum(resharding[NEVER_FEWEST] > 0)
    failed = usual[usual[STARTED] != YES]
    with_sampler = started[started[SAMPLER] != NO_SAMPLER]
    unset = with_sampler[with_sampler[SET_EPOCH] != EVERY_EPOCH]
    exact = ours[(ours[STARTED] == YES) & (ours[EXACT] == YES)]
    frameworks = len(FRAMEWORKS)
    return (
        f"In real processes ({WORLD_SIZE} gloo ranks, {DATASET_SIZE} samples, batch size "
        f"{BATCH_SIZE}, {EPOCHS} epochs), a DistributedSampler handed to accelerate or to "
        "the Hugging Face Trainer (accelerator.prepare, a _get_train_sampler override) lost "
        f"samples in every epoch in {_count(lost, len(resharding))}, while a plain shuffled "
        f"DataLoader that accelerate shards itself lost samples in "
        f"{_count(_sum(plain[NEVER] > 0), len(plain))} (repeating up to "
        f"{_most(plain[REPEATED])} per epoch); across the {frameworks} frameworks, "
        f"{_count(len(failed), len(usual), 'other run')} failed to start, and set_epoch "
        "missed the sampler in some epoch in "
        f"{_count(len(unset), len(with_sampler))} with a sampler that started. Through "
        f"samplers.integrations, {_count(len(exact), len(ours))} saw every sample exactly "
        "once in every epoch, with set_epoch reaching the sampler every epoch in "
        f"{_count(_sum(ours[SET_EPOCH] == EVERY_EPOCH), len(ours))}."
    )


def build() -> Evidence:
    return evidence(observe())


def evidence(observed: Sequence[Sequence[Observed]]) -> Evidence:
    """The finding's evidence from what :func:`observe` returned."""
    table = configurations(observed)
    summary = by_path(table)
    return Evidence(
        claim=claim(table),
        prose=explain(table),
        tables=(
            Table(
                "Every run: what the ranks' training steps received",
                table,
                note=(
                    f"{WORLD_SIZE} ranks, {DATASET_SIZE} samples, batch size {BATCH_SIZE}, "
                    f"{EPOCHS} epochs; worst epoch of the {EPOCHS}. Samplers shuffle with "
                    'seed 0; the stock one pads, ours use tail="uneven". A plain loader '
                    f"(no sampler) shuffles after torch.manual_seed({PLAIN_SEED}); set_epoch "
                    "and the re-sharding warning concern a sampler: empty without one."
                ),
                name="runs",
                summary=summary,
            ),
        ),
    )
