"""Real processes against the simulation, and evaluation through real collectives.

The two tests named by the findings' ``GUARDED_BY`` run the findings' own measurements
once (module-scoped fixtures) and check their claims, then build the findings from those
same measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

import studies.engines.versus_simulation
from samplers.plan import EpochPlan, ShardSizes
from studies import findings
from studies.core.cases import EXPERIMENT, Case
from studies.core.evaluation import exact_accuracy, is_correct
from studies.core.simulate import case_rows
from studies.engines.case_runs import Run, run_many
from studies.engines.collectives import (
    COLLECTIVES,
    COLUMNS,
    DATASET_SIZES,
    WORLD_SIZES,
    evaluation_case,
    measure,
)
from studies.engines.versus_simulation import (
    MATCH_COLUMNS,
    MISMATCH_COLUMNS,
    Comparison,
    compare,
    recorded,
    verification_runs,
)
from studies.findings import collective_evaluation, real_processes


@pytest.fixture(scope="module")
def launched() -> list[list[dict[str, Any]]]:
    """What every verification run receives in real processes, launched now."""
    return run_many([run for _, run in verification_runs()])


@pytest.fixture(scope="module")
def comparison(launched: list[list[dict[str, Any]]]) -> Comparison:
    labelled = verification_runs()
    return compare(
        [run for _, run in labelled], labels=[label for label, _ in labelled], real=launched
    )


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_the_record_is_what_real_processes_receive_now(
    launched: list[list[dict[str, Any]]],
) -> None:
    """The report renders the record (python -m studies.engines.versus_simulation
    --record); every run launched again receives exactly what it holds."""
    assert recorded() == launched
    assert real_processes.comparison().matches.equals(
        compare(
            [run for _, run in verification_runs()],
            labels=[label for label, _ in verification_runs()],
            real=launched,
        ).matches
    )


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    return measure()


def _returning(value: object) -> Callable[..., object]:
    return lambda *args, **kwargs: value


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_real_processes_match_simulation(
    comparison: Comparison, monkeypatch: pytest.MonkeyPatch
) -> None:
    matches = comparison.matches
    assert list(matches.columns) == list(MATCH_COLUMNS)
    assert comparison.total == len(verification_runs()) == 2 * len(EXPERIMENT) + 64

    # The grid covers what the claim says it covers.
    grid = matches[matches["label"].str.startswith("grid")]
    assert grid["label"].nunique() >= 30
    assert sorted(grid["world_size"].unique()) == list(range(1, 9))
    assert all(size % 2 == 1 for size in grid["dataset_size"])
    assert set(grid["drop_last"]) == set(grid["loader_drop_last"]) == {False, True}
    assert set(grid["num_workers"]) == {0, 2}
    assert set(grid["persistent_workers"]) == {False, True}
    assert set(grid["implementation"]) == {"torch", "samplers"}
    assert (grid.groupby("label")["implementation"].nunique() == 2).all()

    # Every run with a DistributedSampler matches, and so does the plain experiment.
    with_sampler = matches[matches["implementation"] != "none"]
    assert with_sampler["match"].all(), with_sampler[~with_sampler["match"]]
    assert matches[matches["num_workers"] == 0]["match"].all()
    assert (matches["processes_rows"] == matches["simulated_rows"]).all()
    assert matches["processes_rows"].sum() > 1000

    # Every difference is a DataLoader option, reproduced in-process, shown in full.
    failing = matches[~matches["match"]]
    assert failing["same_in_process"].eq(True).all()
    mismatches = comparison.mismatches
    assert list(mismatches.columns) == list(MISMATCH_COLUMNS)
    assert set(mismatches["label"]) == set(failing["label"])
    expected_rows = int(failing["simulated_rows"].sum() + failing["processes_rows"].sum())
    assert len(mismatches) == expected_rows

    monkeypatch.setattr(real_processes, "comparison", _returning(comparison))
    finding = findings.build(real_processes)
    assert finding.prose.startswith(f"{comparison.matched} of {comparison.total} runs match")
    assert finding.tables[1].frame is matches
    assert finding.tables[0].frame["runs"].sum() == comparison.total


def test_compare_shows_a_mismatch_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [Run(Case(5, 2, 2)), Run(Case(7, 3, 2, implementation="samplers"), 2)]
    real = [case_rows(run.case) for run in runs]
    real[1][0] = {**real[1][0], "indices": [999]}
    monkeypatch.setattr(studies.engines.versus_simulation, "run_many", _returning(real))

    result = compare(runs, labels=["good", "bad"])

    assert (result.matched, result.total) == (1, 2)
    assert result.matches["match"].tolist() == [True, False]
    assert result.matches["same_in_process"].tolist() == [None, False]
    assert set(result.mismatches["label"]) == {"bad"}
    by_source = dict(tuple(result.mismatches.groupby("source")))
    assert len(by_source["simulated"]) == len(by_source["processes"]) == len(real[1])
    assert by_source["processes"]["indices"].iloc[0] == [999]
    assert by_source["simulated"]["indices"].iloc[0] != [999]
    assert (result.mismatches["num_workers"] == 2).all()
    with pytest.raises(ValueError, match="labels must name each of the 2 runs, got 1"):
        compare(runs, labels=["one"])


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_collective_evaluation_matches_formulas(
    measured: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert list(measured.columns) == list(COLUMNS)
    assert len(measured) == len(DATASET_SIZES) * len(WORLD_SIZES) * len(COLLECTIVES)
    assert (measured["exact"] == measured["dataset_size"].map(exact_accuracy)).all()
    assert (measured["error"] == measured["accuracy"] - measured["exact"]).all()

    pattern = measured["pattern"]
    # The real collectives give what the pure formulas give on the simulated shares:
    # exactly for integer counts and gathered samples, to rounding for averaged means.
    exact_patterns = measured[pattern != "mean_of_rank_means"]
    assert (exact_patterns["accuracy"] == exact_patterns["formula"]).all()
    means = measured[pattern == "mean_of_rank_means"]
    assert ((means["accuracy"] - means["formula"]).abs() <= 1e-12).all()

    # Gathering, interleaving and truncating is exact, always.
    assert (measured[pattern == "gathered"]["error"] == 0.0).all()

    # Summed counts are the mean over the padded order, padding counted twice.
    pooled = measured[pattern == "pooled_counts"]
    for row in pooled.itertuples():
        case = evaluation_case(row.dataset_size, row.world_size)
        sizes = ShardSizes.of(case.dataset_size, case.world_size, case.drop_last)
        plan = EpochPlan.stock(sizes, shuffle=False, seed=case.seed, epoch=0)
        padded_order = plan.global_indices()
        assert row.accuracy == int(is_correct(padded_order).sum()) / len(padded_order)
    assert (pooled[pooled["padding"] == 0]["error"] == 0.0).all()
    assert (pooled[pooled["padding"] > 0]["error"] != 0.0).sum() >= len(WORLD_SIZES)
    keys = ["dataset_size", "world_size"]
    both = means.merge(pooled.drop_duplicates(keys), on=keys, suffixes=("", "_pooled"))
    assert len(both) == len(means)
    assert ((both["accuracy"] - both["accuracy_pooled"]).abs() <= 1e-12).all()

    # All-reduce and all-gather give every rank the same value; reduce/gather only rank 0.
    delivered_to_all = measured["collective"].str.startswith("all_")
    assert measured[delivered_to_all]["same_on_every_rank"].eq(True).all()
    assert measured[~delivered_to_all]["same_on_every_rank"].isna().all()

    monkeypatch.setattr(collective_evaluation, "measure", _returning(measured))
    finding = findings.build(collective_evaluation)
    summary = finding.tables[0].frame
    assert summary["error = 0"].tolist()[-2:] == [len(DATASET_SIZES) * len(WORLD_SIZES)] * 2
    assert "gathering, interleaving and truncating is off by at most 0.00e+00" in finding.prose
