"""The per-case summary observes what ranks received; the verdicts read it correctly."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from samplers.plan import ShardSizes
from studies.core import plan_summary
from studies.core.cases import CASE_COLUMNS, EXPERIMENT, Case
from studies.core.plan_summary import loader_shares, planned_summary
from studies.core.simulate import frame, simulate
from studies.core.summary import COLUMNS, SUMMARY_COLUMNS, summarize
from studies.core.verdicts import VERDICT_NAMES, Verdict, verdicts


def summary_of(case: Case) -> dict[str, Any]:
    return summarize([case], simulate([case])).iloc[0].to_dict()


def test_columns_are_case_columns_epochs_then_summary() -> None:
    cases = [Case(5, 2, 4), Case(6, 2, 4, loader_drop_last=True)]
    table = summarize(cases, simulate(cases))
    assert list(table.columns) == [*CASE_COLUMNS, "epochs", *SUMMARY_COLUMNS]
    assert list(table.columns) == list(COLUMNS)
    assert len(table) == 2


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param(
            Case(5, 2, 4, shuffle=False),  # ranks get [0, 2, 4] and [1, 3, 0]
            {
                "samples_per_rank": [3, 3],
                "batches_per_rank": [1, 1],
                "last_batch_sizes": [3, 3],
                "duplicated_samples": 1,
                "dropped_samples": 0,
                "coverage": 1.0,
                "empty_loader": False,
                "batch_of_one": False,
                "order_repeats": True,  # no shuffling: the same order by design
                "uneven_batches": False,
            },
            id="5-samples-padding",
        ),
        pytest.param(
            Case(6, 2, 4, loader_drop_last=True),
            {
                "samples_per_rank": [0, 0],
                "batches_per_rank": [0, 0],
                "last_batch_sizes": [0, 0],
                "duplicated_samples": 0,
                "dropped_samples": 6,
                "coverage": 0.0,
                "empty_loader": True,
                "batch_of_one": False,
            },
            id="6-samples-empty-loader",
        ),
        pytest.param(
            Case(10, 2, 4),
            {
                "samples_per_rank": [5, 5],
                "batches_per_rank": [2, 2],
                "last_batch_sizes": [1, 1],
                "duplicated_samples": 0,
                "dropped_samples": 0,
                "batch_of_one": True,
                "empty_loader": False,
            },
            id="10-samples-batch-of-one",
        ),
        pytest.param(
            Case(10, 2, 4, loader_drop_last=True),
            {
                "samples_per_rank": [4, 4],
                "batches_per_rank": [1, 1],
                "dropped_samples": 2,
                "coverage": 0.8,
                "batch_of_one": False,
            },
            id="10-samples-loader-drop-last",
        ),
        pytest.param(
            Case(5, 2, 4, drop_last=True),
            {"samples_per_rank": [2, 2], "duplicated_samples": 0, "dropped_samples": 1},
            id="5-samples-sampler-drop-last",
        ),
        pytest.param(
            Case(3, 1, 3, shuffle=False, drop_last=True),
            {"samples_per_rank": [3], "coverage": 1.0, "dropped_samples": 0},
            id="one-rank",
        ),
        pytest.param(
            Case(3, 3, 2, shuffle=False),
            {"coverage": 1.0, "samples_per_rank": [1, 1, 1], "batch_of_one": True},
            id="one-sample-each",
        ),
        pytest.param(Case(8, 2, 4, set_epoch=False), {"order_repeats": True}, id="no-set-epoch"),
        pytest.param(Case(8, 2, 4, set_epoch=True), {"order_repeats": False}, id="set-epoch"),
        pytest.param(Case(8, 2, 4, epochs=1, set_epoch=False), {"order_repeats": False}, id="1-ep"),
        pytest.param(
            Case(8, 2, 4, implementation="none"),
            {
                "samples_per_rank": [8, 8],
                "duplicated_samples": 8,
                "dropped_samples": 0,
                "coverage": 1.0,
                "order_repeats": False,  # the loader's generator moves on between epochs
            },
            id="no-sampler",
        ),
        pytest.param(
            Case(0, 2, 4),
            {"samples_per_rank": [0, 0], "coverage": 1.0, "dropped_samples": 0},
            id="empty-dataset",
        ),
        pytest.param(
            Case(3, 7, 2, shuffle=False),
            {"duplicated_samples": 4, "samples_per_rank": [1] * 7, "coverage": 1.0},
            id="more-ranks-than-samples",
        ),
    ],
)
def test_hand_checked_values(case: Case, expected: dict[str, Any]) -> None:
    summary = summary_of(case)
    assert {name: summary[name] for name in expected} == expected
    assert summary["epochs"] == case.epochs
    assert {name: summary[name] for name in CASE_COLUMNS} == case.key()


def test_rows_follow_the_cases_order_and_ignore_other_cases() -> None:
    cases = [Case(10, 2, 4), Case(5, 2, 4), Case(6, 2, 4, loader_drop_last=True)]
    rows = simulate([*cases, Case(7, 3, 2)])
    table = summarize(list(reversed(cases)), rows)
    assert table["dataset_size"].tolist() == [6, 5, 10]
    assert table["samples_per_rank"].tolist() == [[0, 0], [3, 3], [5, 5]]


def test_case_without_rows_is_summarised_as_empty() -> None:
    case = Case(6, 2, 4, loader_drop_last=True)
    assert simulate([case]).empty
    summary = summarize([case], frame([])).iloc[0]
    assert summary["empty_loader"]
    assert summary["batches_per_rank"] == [0, 0]
    assert summary["dropped_samples"] == 6


def _row(case: Case, epoch: int, rank: int, batch: int, indices: list[int]) -> dict[str, Any]:
    return {**case.key(), "epoch": epoch, "rank": rank, "batch": batch, "indices": indices}


def test_observes_uneven_counts_and_later_batches_of_one() -> None:
    """Rows no sampler produces, to check that flags come from the rows, not formulas."""
    case = Case(5, 2, 2, shuffle=False)
    rows = frame(
        [
            _row(case, 0, 0, 1, [2, 4]),  # out of order on purpose: batch 1 before 0
            _row(case, 0, 0, 0, [0, 1]),
            _row(case, 0, 1, 0, [3, 0]),
            _row(case, 1, 0, 0, [0, 1]),
            _row(case, 1, 1, 0, [3]),
        ]
    )
    summary = summarize([case], rows).iloc[0]
    assert summary["batches_per_rank"] == [2, 1]
    assert summary["last_batch_sizes"] == [2, 2]
    assert summary["uneven_batches"]
    assert summary["batch_of_one"]  # only in epoch 1
    assert not summary["empty_loader"]
    assert summary["duplicated_samples"] == 1
    assert not summary["order_repeats"]  # rank 0 differs in epoch 1 ([0, 1] vs [0, 1, 2, 4])


def test_summary_rows_are_json_serialisable() -> None:
    cases = [case for _, case in EXPERIMENT]
    records = summarize(cases, simulate(cases)).to_dict("records")
    decoded = json.loads(json.dumps(records))
    assert [record["samples_per_rank"] for record in decoded] == [
        record["samples_per_rank"] for record in records
    ]


def test_rejects_cases_that_cannot_be_told_apart() -> None:
    with pytest.raises(ValueError, match="cases must differ"):
        summarize([Case(5, 2, 4, epochs=1), Case(5, 2, 4, epochs=2)], frame([]))


def test_rejects_rows_outside_the_case() -> None:
    case = Case(5, 2, 4, epochs=1)
    with pytest.raises(ValueError, match="epoch 0, rank 2"):
        summarize([case], frame([_row(case, 0, 2, 0, [1])]))


def test_rejects_a_table_without_the_tidy_columns() -> None:
    with pytest.raises(ValueError, match="missing"):
        summarize([Case(5, 2, 4)], frame([]).drop(columns="indices"))


def _common(draw: st.DrawFn) -> dict[str, Any]:
    """The settings every sampler case draws alike."""
    return {
        "dataset_size": draw(st.integers(0, 30)),
        "world_size": draw(st.integers(1, 5)),
        "batch_size": draw(st.integers(1, 6)),
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 100)),
        "set_epoch": draw(st.booleans()),
        "epochs": draw(st.integers(1, 2)),
    }


@st.composite
def sampler_cases(draw: st.DrawFn) -> Case:
    return Case(
        **_common(draw),
        drop_last=draw(st.booleans()),
        loader_drop_last=draw(st.booleans()),
        implementation=draw(st.sampled_from(["torch", "samplers"])),
    )


@st.composite
def our_layout_cases(draw: st.DrawFn) -> Case:
    """Ours with tail "uneven", or the batch sampler with any tail."""
    batch = draw(st.booleans())
    tail = draw(st.sampled_from(["pad", "drop", "uneven"] if batch else ["uneven"]))
    return Case(
        **_common(draw),
        drop_last=tail == "drop",
        loader_drop_last=not batch and draw(st.booleans()),
        implementation="samplers",
        tail=tail,
        sampler="batch" if batch else "index",
    )


@given(sampler_cases())
def test_summary_agrees_with_the_planned_sizes(case: Case) -> None:
    summary = summary_of(case)
    sizes = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last)
    share, batch = sizes.num_samples, case.batch_size
    received = share - share % batch if case.loader_drop_last else share
    batches = share // batch if case.loader_drop_last else -(-share // batch)
    assert summary["samples_per_rank"] == [received] * case.world_size
    assert summary["batches_per_rank"] == [batches] * case.world_size
    assert summary["empty_loader"] == (batches == 0)
    assert not summary["uneven_batches"]
    if case.loader_drop_last:
        assert summary["duplicated_samples"] <= sizes.padding
        assert summary["dropped_samples"] >= sizes.dropped
    else:
        assert summary["duplicated_samples"] == sizes.padding
        assert summary["dropped_samples"] == sizes.dropped
    # Occurrences = distinct + duplicates, distinct = dataset - dropped.
    assert sum(summary["samples_per_rank"]) == (
        case.dataset_size - summary["dropped_samples"] + summary["duplicated_samples"]
    )
    assert (summary["coverage"] == 1.0) == (summary["dropped_samples"] == 0)
    if case.epochs == 1:
        assert not summary["order_repeats"]
    elif not case.shuffle or not case.set_epoch:
        assert summary["order_repeats"]
    other = summary_of(case.using("samplers" if case.implementation == "torch" else "torch"))
    assert {k: other[k] for k in SUMMARY_COLUMNS} == {k: summary[k] for k in SUMMARY_COLUMNS}


EXPECTED_VERDICTS = {
    "1": ["no-sampler"],
    "2": ["order-repeated"],
    "3": [],
    "4a": ["order-repeated"],
    "4b": ["dropped-samples", "empty-loader"],
    "5a": ["padded-duplicates", "order-repeated"],
    "5b": ["padded-duplicates"],
    "6": ["batch-of-one", "order-repeated"],
    "7": ["dropped-samples", "order-repeated"],
}


@pytest.mark.parametrize(("label", "case"), EXPERIMENT, ids=[label for label, _ in EXPERIMENT])
def test_experiment_verdicts(label: str, case: Case) -> None:
    found = verdicts(case, summary_of(case))
    assert [v.name for v in found] == EXPECTED_VERDICTS[label]
    for verdict in found:
        assert verdict.finding.endswith(".") and verdict.fix.endswith(".")
        assert "\n" not in verdict.finding + verdict.fix


def test_findings_carry_the_numbers() -> None:
    (padded,) = verdicts(Case(5, 2, 4), summary_of(Case(5, 2, 4)))
    assert "6 samples for 5 distinct" in padded.finding
    assert "1 repeated index" in padded.finding
    trimmed = Case(10, 2, 4, loader_drop_last=True)
    (dropped,) = verdicts(trimmed, summary_of(trimmed))
    assert "2 of the 10 samples" in dropped.finding
    assert "coverage 0.8" in dropped.finding
    assert "DataLoader's drop_last" in dropped.finding
    case = Case(8, 2, 4, set_epoch=False)
    (repeated,) = verdicts(case, summary_of(case))
    assert "set_epoch(epoch)" in repeated.fix


def _observed(**changes: Any) -> dict[str, Any]:
    clean = {
        "samples_per_rank": [4, 4],
        "batches_per_rank": [1, 1],
        "last_batch_sizes": [4, 4],
        "duplicated_samples": 0,
        "dropped_samples": 0,
        "coverage": 1.0,
        "empty_loader": False,
        "batch_of_one": False,
        "order_repeats": False,
        "uneven_batches": False,
    }
    return {**clean, **changes}


def test_verdicts_read_the_row() -> None:
    case = Case(8, 2, 4)
    assert verdicts(case, _observed()) == []
    uneven = verdicts(case, _observed(uneven_batches=True, batches_per_rank=[2, 1]))
    assert [v.name for v in uneven] == ["uneven-batch-counts"]
    assert "[2, 1]" in uneven[0].finding and "all-reduce" in uneven[0].finding
    assert "join()" in uneven[0].fix
    some_empty = verdicts(case, _observed(empty_loader=True, batches_per_rank=[1, 0]))
    assert "Ranks [1]" in some_empty[0].finding and "hang" in some_empty[0].finding


def test_no_verdict_for_what_the_user_asked_for() -> None:
    # Batch size 1: every batch holds one sample by design.
    assert verdicts(Case(8, 2, 1), _observed(batch_of_one=True)) == []
    # set_epoch called: a repeat is chance (tiny datasets), not the missing call.
    assert verdicts(Case(2, 1, 2), _observed(order_repeats=True)) == []
    # No shuffling: the order repeats by design.
    assert (
        verdicts(Case(8, 2, 4, shuffle=False, set_epoch=False), _observed(order_repeats=True)) == []
    )


def test_verdict_names_are_the_documented_ones() -> None:
    cases = [case for _, case in EXPERIMENT]
    table = summarize(cases, simulate(cases))
    names = {
        v.name
        for case, (_, row) in zip(cases, table.iterrows(), strict=True)
        for v in verdicts(case, row)
    }
    assert names <= set(VERDICT_NAMES)
    assert all(isinstance(v, Verdict) for v in verdicts(cases[0], table.iloc[0]))


# --- the summary from the plan -------------------------------------------------------------


@st.composite
def planned_cases(draw: st.DrawFn) -> Case:
    implementation = draw(st.sampled_from(["torch", "samplers", "none"]))
    return Case(
        dataset_size=draw(st.integers(0, 40)),
        world_size=draw(st.integers(1, 6)),
        batch_size=draw(st.integers(1, 6)),
        shuffle=draw(st.booleans()) and implementation != "none",
        seed=draw(st.integers(-5, 100)),
        drop_last=draw(st.booleans()),
        loader_drop_last=draw(st.booleans()),
        set_epoch=draw(st.booleans()),
        epochs=draw(st.integers(1, 3)),
        implementation=implementation,
    )


@given(planned_cases())
def test_the_planned_summary_is_the_simulated_one(case: Case) -> None:
    planned = planned_summary(case)
    assert list(planned) == list(COLUMNS)
    assert planned == summary_of(case)


def test_the_planned_summary_compares_shuffled_epochs_chunk_by_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks smaller than a share give the same answer as one chunk."""
    cases = [Case(2, 1, 2), Case(1, 1, 1), Case(40, 3, 4), Case(9, 2, 3, loader_drop_last=True)]
    whole = [planned_summary(case)["order_repeats"] for case in cases]
    monkeypatch.setattr(plan_summary, "_CHUNK", 2)
    assert [planned_summary(case)["order_repeats"] for case in cases] == whole
    assert whole == [summary_of(case)["order_repeats"] for case in cases]


def test_the_planned_summary_refuses_a_loader_that_shuffles() -> None:
    with pytest.raises(ValueError, match="DataLoader's random generator"):
        planned_summary(Case(8, 2, 4, implementation="none"))


def test_loader_shares_at_sizes_no_simulation_reaches() -> None:
    shares = loader_shares(Case(10**12 + 1, 1000, 7, loader_drop_last=True))
    assert shares.share == 10**9 + 1  # ceil((10**12 + 1) / 1000)
    assert (shares.batches, shares.samples, shares.last_batch) == (142_857_143, 10**9 + 1, 7)
    assert shares.received == (10**9 + 1) * 1000
    summary = planned_summary(Case(10**12 + 1, 1000, 7, set_epoch=False))
    assert summary["duplicated_samples"] == 999
    assert summary["most_copies"] == 2
    assert summary["last_batch_sizes"] == [7] * 1000  # 7 divides 10**9 + 1
    assert summary["batch_of_one"] is False


# --- verdicts true at every size -----------------------------------------------------------


def test_an_empty_dataset_gets_its_own_verdict_alone() -> None:
    for case in (Case(0, 2, 4), Case(0, 3, 1, drop_last=True, set_epoch=False)):
        assert [v.name for v in verdicts(case, summary_of(case))] == ["empty-dataset"]


def test_fewer_samples_than_ranks_is_its_own_verdict() -> None:
    padded = Case(3, 8, 2)
    found = {v.name: v for v in verdicts(padded, summary_of(padded))}
    assert "3 samples for 8 ranks" in found["fewer-samples-than-ranks"].finding
    assert "up to 3 times" in found["fewer-samples-than-ranks"].finding
    assert found["fewer-samples-than-ranks"].fix.startswith("Use at most 3 ranks")
    trimmed = Case(3, 8, 2, drop_last=True)
    found = {v.name: v for v in verdicts(trimmed, summary_of(trimmed))}
    assert "every rank gets nothing" in found["fewer-samples-than-ranks"].finding
    assert "empty-loader" in found
    for enough in (Case(8, 8, 2), Case(9, 8, 2)):
        names = [v.name for v in verdicts(enough, summary_of(enough))]
        assert "fewer-samples-than-ranks" not in names


def test_the_real_multiplicity_of_repeated_samples() -> None:
    case = Case(3, 24, 2, shuffle=False)
    summary = summary_of(case)
    assert summary["most_copies"] == 8
    found = {v.name: v for v in verdicts(case, summary)}
    assert "each sample counts up to 8 times" in found["padded-duplicates"].finding
    assert "twice" not in found["padded-duplicates"].finding
    (padded,) = verdicts(Case(5, 2, 4), summary_of(Case(5, 2, 4)))
    assert "up to twice" in padded.finding


def test_no_fix_that_empties_the_loader() -> None:
    """One sample per rank: the DataLoader's drop_last would leave every rank nothing."""
    case = Case(3, 3, 2)
    (batch_of_one,) = verdicts(case, summary_of(case))
    assert "drop_last=True" not in batch_of_one.fix
    assert batch_of_one.fix == (
        'Use ours DistributedBatchSampler with tail="pad", whose batches are all full '
        "(--implementation samplers --sampler batch --tail pad)."
    )


_ADVICE = (
    (re.compile(r"the DataLoader's drop_last=True"), lambda m: {"loader_drop_last": True}),
    (re.compile(r"the DataLoader's drop_last=False"), lambda m: {"loader_drop_last": False}),
    (re.compile(r"the sampler's drop_last=False"), lambda m: {"drop_last": False}),
    (re.compile(r"use batch size (\d+)"), lambda m: {"batch_size": int(m[1])}),
    (re.compile(r"batch size of at most (\d+)"), lambda m: {"batch_size": int(m[1])}),
    (re.compile(r"[Uu]se at most (\d+) ranks?"), lambda m: {"world_size": int(m[1])}),
    (
        re.compile(r'DistributedBatchSampler with tail="(pad|uneven)"'),
        lambda m: {
            "implementation": "samplers",
            "sampler": "batch",
            "tail": m[1],
            "drop_last": False,
            "loader_drop_last": False,
        },
    ),
    (re.compile(r'Use tail="pad"'), lambda m: {"drop_last": False, "tail": None}),
    (
        re.compile(r'use ours with tail="uneven"'),
        lambda m: {"implementation": "samplers", "tail": "uneven", "drop_last": False},
    ),
)


@given(st.one_of(sampler_cases(), our_layout_cases()))
def test_every_fix_removes_its_problem_and_leaves_every_rank_batches(case: Case) -> None:
    """Each alternative a fix advises ("...; or ..."), simulated with all its changes,
    leaves no rank without batches, and a batch-of-one fix leaves no batch of one."""
    for verdict in verdicts(case, summary_of(case)):
        for alternative in re.split(r"; or |, or a dataset", verdict.fix):
            changes: dict[str, Any] = {}
            for pattern, change in _ADVICE:
                for match in pattern.finditer(alternative):
                    changes.update(change(match))
            if not changes:
                continue
            fixed = summary_of(replace(case, **changes))
            assert not fixed["empty_loader"], (verdict, alternative)
            if verdict.name == "batch-of-one":
                assert not fixed["batch_of_one"], (verdict, alternative)
            if verdict.name == "padded-duplicates":
                assert fixed["duplicated_samples"] == 0, (verdict, alternative)
            if verdict.name == "uneven-batch-counts":
                assert not fixed["uneven_batches"], (verdict, alternative)
