"""The frameworks finding: its claim in real processes, and its prose and row from its table.

The test named by the finding's ``GUARDED_BY`` runs the finding's own measurement once
(2 gloo ranks, every framework), checks each part of the claim against the table the
finding shows and, independently of that table's code, against the ranks' raw batches,
then builds the finding's evidence from the same measurement. The other tests feed made-up
observations to the table, prose and answer code, without processes.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import pytest

from samplers import DistributedSampler
from studies.engines.frameworks import (
    BATCH_SIZE,
    DATASET_SIZE,
    EPOCHS,
    SAMPLERS,
    SCENARIOS,
    WORLD_SIZE,
    Observed,
    Scenario,
    observe,
)
from studies.findings import Finding, frameworks
from studies.findings.frameworks import (
    EVERY_EPOCH,
    EXACT,
    FRAMEWORKS,
    HOW,
    NEVER,
    NEVER_FEWEST,
    NEVER_SET,
    NO,
    NO_SAMPLER,
    OPTIONS,
    OURS,
    PATHS,
    REPEATED,
    RESHUFFLED,
    SAMPLER,
    SET_EPOCH,
    STARTED,
    WARNED,
    YES,
)

NEEDED = ("accelerate", "transformers", "lightning", "torchdata")


@pytest.fixture(scope="module")
def observed() -> list[list[Observed]]:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the frameworks finding needs {', '.join(missing)} (the test extra)")
    return observe()


def rows(table: Any, **where: str) -> Any:
    """The table's rows whose columns (by their constant names here) hold these values."""
    columns = {"framework": "framework", "how": HOW, "sampler": SAMPLER, "ours": OURS}
    selected = table
    for key, value in where.items():
        selected = selected[selected[columns[key]] == value]
    assert not selected.empty, where
    return selected


def own_batches(rank: int, epoch: int) -> list[list[int]]:
    """What our DistributedSampler(tail="uneven") gives ``rank``, batched, on its own."""
    sampler = DistributedSampler(range(DATASET_SIZE), WORLD_SIZE, rank, tail="uneven")
    sampler.set_epoch(epoch)
    share = list(sampler)
    return [share[i : i + BATCH_SIZE] for i in range(0, len(share), BATCH_SIZE)]


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_frameworks_claims_hold_in_real_processes(observed: list[list[Observed]]) -> None:
    table = frameworks.configurations(observed)
    assert len(table) == len(SCENARIOS)

    # accelerate and the Trainer shard the share again and lose samples every epoch; ours warns.
    for framework, how in (
        ("accelerate", "Accelerator.prepare"),
        ("transformers", "Trainer._get_train_sampler"),
    ):
        usual = rows(table, framework=FRAMEWORKS[framework], how=PATHS[how])
        assert (usual[SAMPLER] != NO_SAMPLER).all()
        assert (usual[STARTED] == YES).all() and (usual[NEVER_FEWEST] > 0).all()
        assert (usual[usual[SAMPLER] != SAMPLERS["stock"]][WARNED] == YES).all()
    # ... by keeping every second batch of the rank's own share (no split, no evening out).
    position = SCENARIOS.index(
        Scenario(
            "accelerate",
            "Accelerator.prepare",
            "ours",
            (("split_batches", False), ("even_batches", False)),
        )
    )
    for rank, seen in enumerate(observed[position]):
        for epoch in range(EPOCHS):
            kept = [batch for e, batch in seen.batches if e == epoch]
            assert kept == own_batches(rank, epoch)[rank::WORLD_SIZE]

    # accelerate's own path: a plain shuffled loader that it shards itself (directly, or in
    # the Trainer given no sampler) loses nothing and pads with repeats; checked on the raw
    # batches too.
    plain = rows(table, sampler=NO_SAMPLER)
    assert set(plain["framework"]) == {FRAMEWORKS["accelerate"], FRAMEWORKS["transformers"]}
    assert (plain[STARTED] == YES).all() and (plain[NEVER] == 0).all()
    assert (plain[SET_EPOCH] == "").all() and (plain[WARNED] == "").all()
    for scenario, ranks in zip(SCENARIOS, observed, strict=True):
        if scenario.sampler == "none":
            for epoch in range(EPOCHS):
                got = {i for r in ranks for e, b in r.batches if e == epoch for i in b}
                assert got == set(range(DATASET_SIZE)), (scenario, epoch)

    # Lightning: our batch sampler fails to start under the defaults, and without them its
    # epoch is never set; a DistributedSampler is kept and its epoch set.
    for framework in ("lightning", "fabric"):
        runs = table[table["framework"] == FRAMEWORKS[framework]]
        batches = runs[(runs[SAMPLER] == SAMPLERS["ours, batches"]) & (runs[OURS] != YES)]
        defaults = batches[batches[OPTIONS] == "use_distributed_sampler=True"]
        assert (defaults[STARTED] == "no: TypeError").all()
        off = batches[batches[OPTIONS] == "use_distributed_sampler=False"]
        assert (off[SET_EPOCH] == NEVER_SET).all() and (off[RESHUFFLED] != YES).all()
        index = runs[runs[SAMPLER] != SAMPLERS["ours, batches"]]
        assert (index[NEVER] == 0).all() and (index[SET_EPOCH] == EVERY_EPOCH).all()

    # StatefulDataLoader never sets the epoch.
    stateful = rows(table, how=PATHS["StatefulDataLoader"])
    assert (stateful[SET_EPOCH] == NEVER_SET).all()
    # nodes' SamplerWrapper sets it: one run (the other nodes rows are sampler_node's).
    wrapper = rows(table, how=PATHS["nodes.SamplerWrapper"])
    assert len(wrapper) == 1 and (wrapper[SET_EPOCH] == EVERY_EPOCH).all()

    # Through samplers.integrations: exactly once every epoch, the epoch set, no warning.
    ours = rows(table, ours=YES)
    assert {scenario.framework for scenario in SCENARIOS if scenario.supported} == set(FRAMEWORKS)
    assert (ours[STARTED] == YES).all() and (ours[EXACT] == YES).all()
    assert (ours[SET_EPOCH] == EVERY_EPOCH).all() and (ours[RESHUFFLED] == YES).all()
    assert (ours[WARNED] != YES).all()
    for scenario, ranks in zip(SCENARIOS, observed, strict=True):  # from the raw batches
        if scenario.supported:
            for epoch in range(EPOCHS):
                got = Counter(i for r in ranks for e, b in r.batches if e == epoch for i in b)
                assert got == Counter(range(DATASET_SIZE)), (scenario, epoch)

    evidence = frameworks.evidence(observed)
    assert "nodes' SamplerWrapper set it every epoch in the one run." in evidence.prose
    handed = table[(table[OURS] == NO) & (table[SAMPLER] != NO_SAMPLER)]
    worst = int(handed[handed["framework"] == FRAMEWORKS["accelerate"]][NEVER].max())
    assert f"up to {worst} of {DATASET_SIZE} were never seen" in evidence.prose
    assert f"all {len(ours)} runs saw every sample exactly once" in evidence.prose
    # The claim says what the table shows, no more.
    resharding = handed[
        handed["framework"].isin([FRAMEWORKS["accelerate"], FRAMEWORKS["transformers"]])
    ]
    assert (
        "a DistributedSampler handed to accelerate or to the Hugging Face Trainer "
        "(accelerator.prepare, a _get_train_sampler override) lost samples in every epoch "
        f"in all {len(resharding)} runs" in evidence.claim
    )
    assert "the usual way" not in evidence.claim + evidence.prose
    assert (
        "while a plain shuffled DataLoader that accelerate shards itself lost samples in "
        f"none of the {len(plain)} runs (repeating up to {int(plain[REPEATED].max())} per "
        "epoch)" in evidence.claim
    )
    failed = int((table[(table[OURS] == NO)][STARTED] != YES).sum())
    assert failed > 0  # Lightning with our batch sampler under its defaults
    assert f"{failed} of the {int((table[OURS] == NO).sum())} other runs failed" in evidence.claim
    assert (
        f"Through samplers.integrations, all {len(ours)} runs saw every sample exactly once "
        f"in every epoch, with set_epoch reaching the sampler every epoch in all {len(ours)} runs"
        in evidence.claim
    )


# --- the table, prose and answer code on made-up observations ---------------------------


def exact_ranks(scenario: Scenario) -> list[Observed]:
    """Ranks that saw every sample once per epoch, in another order each epoch."""
    ranks = []
    for rank in range(WORLD_SIZE):
        batches = []
        for epoch in range(EPOCHS):
            share = list(range(rank, DATASET_SIZE, WORLD_SIZE))
            share = share[epoch:] + share[:epoch]
            batches += [(epoch, share[i : i + 4]) for i in range(0, len(share), 4)]
        ranks.append(Observed(batches=batches, epochs_set=list(range(EPOCHS))))
    return ranks


def made_up(change: dict[Scenario, list[Observed]] | None = None) -> list[list[Observed]]:
    change = change or {}
    return [change.get(scenario, exact_ranks(scenario)) for scenario in SCENARIOS]


def test_prose_counts_what_the_table_shows() -> None:
    exact = frameworks.explain(frameworks.configurations(made_up()))
    assert "none of the 12 runs lost samples in every epoch: up to 0 of 43" in exact
    assert "none of the 4 runs failed to start" in exact
    assert "all 10 runs saw every sample exactly once in every epoch" in exact
    claimed = frameworks.claim(frameworks.configurations(made_up()))
    assert "lost samples in every epoch in none of the 14 runs" in claimed
    assert "frameworks, none of the 35 other runs failed to start" in claimed
    assert "set_epoch missed the sampler in some epoch in none of the 30 runs with a" in claimed
    assert (
        "A plain shuffled DataLoader, which accelerate shards itself (accelerator.prepare("
        "loader), no sampler and Trainer(train_dataset=...), no sampler), lost samples in "
        "none of the 5 runs and repeated up to 0 per epoch" in exact
    )

    accelerate = next(s for s in SCENARIOS if s.framework == "accelerate" and s.sampler == "ours")
    lost = exact_ranks(accelerate)
    for rank in lost:  # rank 1 keeps only its first batch in epoch 0
        rank.batches = [b for b in rank.batches if b[0] == 1 or b in rank.batches[:1]]
        rank.warned = True
    lightning = next(
        s for s in SCENARIOS if s.framework == "lightning" and s.sampler == "ours, batches"
    )
    failed = [Observed(error="TypeError") for _ in range(WORLD_SIZE)]
    prose = frameworks.explain(
        frameworks.configurations(made_up({accelerate: lost, lightning: failed}))
    )
    assert "none of the 12 runs lost samples in every epoch" in prose  # epoch 1 was whole
    assert f"up to {DATASET_SIZE - 2 * 4} of 43 were never seen in an epoch" in prose
    assert "where the sampler was one of ours, it warned of re-sharding in the one run" in prose
    assert "1 of the 4 runs failed to start (use_distributed_sampler=True: TypeError" in prose


def test_answer_row_reads_the_table() -> None:
    observed = made_up()
    evidence = frameworks.evidence(observed)
    finding = Finding(frameworks.NAME, frameworks.TITLE, frameworks.GUARDED_BY, evidence)
    job, use, because = frameworks.answer(finding)
    assert "accelerate" in job and "prepare_data_loader(loader, accelerator)" in use
    assert "lost up to 0 of 43 samples per epoch with accelerate" in because
    assert "none of the 35 other runs failed to start" in because
    assert because.startswith("[frameworks](frameworks.md)")
    for name in ("prepare_data_loader", "ShardedTrainer", "ShardedDataLoader", "sampler_node"):
        assert f"`{name}(" in use


def test_answer_row_names_apis_that_exist() -> None:
    import importlib
    import inspect
    import re

    import samplers

    for name in NEEDED:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    evidence = frameworks.evidence(made_up())
    finding = Finding(frameworks.NAME, frameworks.TITLE, frameworks.GUARDED_BY, evidence)
    use = frameworks.answer(finding)[1]
    modules = [samplers] + [
        importlib.import_module(f"samplers.integrations.{name}")
        for name in ("accelerate", "transformers", "lightning", "torchdata")
    ]
    found = {}
    for called in set(re.findall(r"`([A-Za-z_]+)\(", use)) - {"set_epoch"}:
        owners = [getattr(module, called) for module in modules if hasattr(module, called)]
        assert owners, called
        found[called] = owners[0]
    for called, keyword in re.findall(r"`([A-Za-z_]+)\([^`]*?\b([a-z_]+)=", use):
        owner = found[called]  # a class passing **kwargs on takes its base's keywords
        takers = owner.__mro__[:-1] if isinstance(owner, type) else (owner,)
        assert any(keyword in inspect.signature(t).parameters for t in takers), keyword


def test_answer_row_from_the_reports_csv_is_the_same(tmp_path: Any) -> None:
    import pandas as pd

    from studies.report import _frame_csv, _readable

    evidence = frameworks.evidence(made_up())
    table = evidence.tables[0].frame
    csv = tmp_path / "frameworks-runs.csv"
    csv.write_text(_frame_csv(_readable(table)))
    assert frameworks.answer_from(pd.read_csv(csv)) == frameworks.answer_from(table)


def test_each_sentence_counts_only_its_own_rows() -> None:
    """nodes' SamplerWrapper is one run (sampler_node's runs are ours); a plain loader's
    runs are not counted among the DistributedSamplers handed to accelerate."""
    wrapper = next(s for s in SCENARIOS if s.path == "nodes.SamplerWrapper")
    plain = next(s for s in SCENARIOS if s.sampler == "none" and s.framework == "accelerate")
    unset = [Observed(batches=r.batches) for r in exact_ranks(wrapper)]
    lost = exact_ranks(plain)
    for rank in lost:  # every sample of epoch 0 but the first batch's, twice over
        rank.batches = [b for b in rank.batches if b[0] == 1 or b not in rank.batches[:1]]
    table = frameworks.configurations(made_up({wrapper: unset, plain: lost}))
    prose = frameworks.explain(table)
    assert "nodes' SamplerWrapper set it every epoch in not the one run." in prose
    assert "lost samples in 1 of the 5 runs" in prose
    assert "none of the 12 runs lost samples in every epoch" in prose
    claimed = frameworks.claim(table)
    assert "lost samples in every epoch in none of the 14 runs" in claimed
    assert "accelerate shards itself lost samples in 1 of the 5 runs" in claimed
