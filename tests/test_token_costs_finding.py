"""The token-costs finding: its claim against its table, and its measurements on
hand-made cases."""

from __future__ import annotations

import pytest
import torch

from studies.findings import build, token_costs
from studies.findings.wording import count_of
from studies.tokens import epoch_record, fitting
from studies.tokens import timing as token_timing
from studies.tokens.costing import LHOTSE_TUNED, QUADRATIC, measure, quadratic_budget
from studies.tokens.shapes import distinct_shapes

NAMES = token_costs.NAMES


@pytest.fixture(scope="module")
def finding():
    return build(token_costs)


@pytest.fixture(scope="module")
def table(finding):
    return finding.tables[0].frame


def rows(table, key: str):
    return table[table["sampler"] == NAMES[key]].set_index(["data", "ranks"])


def test_the_claim_holds_in_the_tables(finding, table) -> None:
    ours = table[table["sampler"].isin([NAMES[k] for k in ("padded", "quadratic", "packed")])]
    assert len(ours) == 3 * 2 * len(token_costs.WORLD_SIZES)
    assert (ours["batches over its limit"] == 0).all()
    assert (ours["equal batch counts"] == "yes").all()
    assert (ours["samples repeated"] == 0).all() and (ours["samples not seen"] == 0).all()
    assert (ours["resumed elsewhere, each sample once"] == "yes").all()
    packed, padded, quadratic = (rows(table, k) for k in ("packed", "padded", "quadratic"))
    assert (packed["efficiency"] >= token_costs.PACKED_TARGET).all()
    weighted = "straggler ratio, with attention"
    assert (quadratic[weighted] < padded[weighted]).all()
    rebalance, trl = rows(table, "rebalance"), rows(table, "trl-bfd")
    assert (rebalance["batches over its limit"] > 0).all()
    assert (rebalance["resumed elsewhere, each sample once"] == "no state").all()
    assert (trl["samples repeated"] > 0).all()
    assert (packed[weighted] < trl[weighted]).all()
    grouped = rows(table, "trainer-grouped")
    assert (grouped["batches over its limit"] > 0).all()
    lhotse = rows(table, "lhotse")
    assert lhotse["resumed elsewhere, each sample once"].str.startswith("refused").all()
    fixed = rows(table, "fixed")
    assert (fixed["steps"] > padded["steps"]).all()
    assert (fixed["resumed elsewhere, each sample once"] == "no state").all()
    # The peers under their defaults and a recommended setting, named.
    trainer = rows(table, "rebalance-trainer")
    assert (trainer["samples not seen"] == 0).all()
    assert (rebalance["samples not seen"] > 0).all()  # its own default, drop_last=True
    tuned = rows(table, f"lhotse-{LHOTSE_TUNED}")
    assert (tuned["efficiency"] > lhotse["efficiency"]).all()
    assert "num_buckets=10 (default)" in NAMES["lhotse"] and "(tuned)" in NAMES["lhotse-30"]
    # Measured against simulated (the timed table, from the committed record).
    timed = finding.tables[1].frame
    # Every sampler the record timed is one the finding runs, on the same batches; those
    # it did not time are named.
    at_ranks = table[table["ranks"] == token_timing.RANKS]
    for data, group in at_ranks.groupby("data"):
        assert set(timed[timed["data"] == data]["sampler"]) <= set(group["sampler"]), data
    timed_names = set(timed["sampler"])
    untimed = [name for name in dict.fromkeys(at_ranks["sampler"]) if name not in timed_names]
    if untimed:
        assert f"the next `--record` times them): {'; '.join(untimed)}." in finding.prose
    assert "The recorded batches are the ones the samplers give now" in finding.prose
    assert (timed["steps timed"] == token_timing.load()["steps per run"]).all()
    padded = timed[timed["sampler"] == NAMES["padded"]]
    assert (padded[token_costs.MEASURED] == 1).all() and (padded[token_costs.SIMULATED] == 1).all()
    # The claim's order and gap, recomputed from the table.
    same, gap = 0, 0.0
    groups = timed.groupby(["data", "ranks"])
    for _, group in groups:
        measured = group.sort_values(token_costs.MEASURED)["sampler"].tolist()
        simulated = group.sort_values(token_costs.SIMULATED)["sampler"].tolist()
        same += measured == simulated
        ratios = group[token_costs.MEASURED] / group[token_costs.SIMULATED]
        gap = max(gap, float((ratios - 1).abs().max()))
    words = (
        "the samplers came in the simulated order of time per sample in "
        f"{count_of(same, len(groups), 'configurations timed')}, each one's ratio to ours "
        f"padded within {gap:.0%} of the simulated ratio"
    )
    assert words in finding.claim


def test_the_quadratic_budget_fits_the_fullest_padded_batch() -> None:
    # 4 samples of 4096: 4 x (4096 + 4096² / q) must fit, and one token more would not.
    budget = quadratic_budget(16384, 4096)
    assert QUADRATIC * budget >= 4 * (QUADRATIC * 4096 + 4096**2)
    assert QUADRATIC * (budget - 1) < 4 * (QUADRATIC * 4096 + 4096**2)


def test_measure_counts_packed_rows_and_padded_batches() -> None:
    lengths = torch.tensor([6, 2, 5, 3, 8])
    packed = [[[0, 1, 2, 3]], [[4]]]  # rank 0: rows [6, 2] [5, 3]; rank 1: row [8]
    found = measure("packed", lengths, packed, 16, 8)
    assert found["efficiency"] == 24 / 24
    assert found["straggler ratio, tokens"] == 16 / 12
    padded = measure("padded", lengths, [[[0, 1]], [[2, 3, 4]]], 16, 8)
    assert padded["efficiency"] == 24 / (12 + 24)
    assert padded["batches over its limit"] == 1  # 3 x 8 = 24 > 16


def test_the_fitted_cost_and_the_goal_are_read_from_their_tables(finding) -> None:
    fit, goals, shapes = (finding.tables[i].frame for i in (2, 3, 4))
    r2 = float(fit["held-out R²"].iloc[0])
    held = int(fit["held out"].iloc[0])
    assert f"predicted the {held} held-out batches with R² {r2:.3f}" in finding.claim
    refit = fitting.cpu_fit(token_timing.load())
    assert fit["cost (as a checkpoint records it)"].iloc[0] == refit.label
    straggler = goals["ours fitted: straggler ratio"]
    words = f"{straggler.min():.3f} to {straggler.max():.3f}"
    assert f"predicted straggler ratio of {words}" in finding.claim
    met = int((goals["goal met (predicted)"] == "yes").sum())
    assert f"held in {count_of(met, len(goals), 'configurations')})" in finding.claim
    expected = (straggler <= epoch_record.GOAL_STRAGGLER) & (
        goals["ours fitted shorter by"] >= epoch_record.GOAL_FASTER
    )
    assert int(expected.sum()) == met
    assert (
        (goals["its epoch (s)"] * (1 - goals["ours fitted shorter by"]))
        .round(9)
        .equals(goals["ours fitted: epoch (s)"].round(9))
    )
    # The shapes: packed rows ask for few, ours padded's are in the prose.
    packed = shapes[shapes["sampler"] == NAMES["packed"]]
    assert (packed["distinct shapes"] < packed["batches"] / 10).all()
    ours = shapes[shapes["sampler"] == NAMES["padded"]]
    low, high = ours["distinct shapes"].min(), ours["distinct shapes"].max()
    span = f"{low:,}" if low == high else f"{low:,} to {high:,}"
    assert f"(ours padded: {span} shapes in" in finding.prose
    assert "reasoned from PyTorch's source, not measured here" in finding.prose
    for path in token_costs.SLOWDOWN_SOURCES:
        assert f"`{path}`" in finding.prose


def test_without_a_device_record_the_finding_says_the_gpu_goal_is_unmeasured(finding) -> None:
    if epoch_record.newest() is not None:
        pytest.skip("a device record is committed: its section is rendered instead")
    assert "On a GPU: no GPU record exists yet." in finding.prose
    assert "is not measured" in finding.prose
    assert len(finding.tables) == 5


def test_distinct_shapes_counts_padded_rounded_and_packed_shapes() -> None:
    values = [100, 90, 100, 300, 250, 4000, 50]
    shares = [[[0, 1], [3, 4]], [[2, 1], [5], [6]]]  # (2, 100) twice, (2, 300), (1, 4000), (1, 50)
    found = distinct_shapes(shares, values, False, 4096, 128)
    assert found == {
        "batches": 5,
        "distinct shapes": 4,
        # (2, 128), (2, 384), (1, 4096), (1, 128)
        "distinct shapes, lengths to a multiple of 128": 4,
    }
    rounded = distinct_shapes([[[0, 1], [2, 6]]], [100, 90, 120, 0, 0, 0, 50], False, 4096, 128)
    assert (
        rounded["distinct shapes"] == 2
        and rounded["distinct shapes, lengths to a multiple of 128"] == 1
    )
    packed = distinct_shapes([[[0, 1, 2], [3]]], [60, 50, 40, 90], True, 100, 128)
    assert packed["distinct shapes"] == 2  # 2 rows (60 | 50 40) and 1 row, of 100


def test_the_fit_predicts_epochs_and_the_goal_by_hand() -> None:
    from samplers import FittedCost

    fitted = FittedCost("padded", overhead=1.0, per_token=0.001, per_attention=0.0)
    lengths = torch.tensor([1000, 1000, 500, 500])
    values = lengths.tolist()
    shares = {
        ("d", 2, "padded"): ([[[0]], [[1]]], values),  # 2 + 2 per step: ratio 1
        ("d", 2, "quadratic"): ([[[0], [2]], [[1], [3]]], values),  # 2 + 2, then 1.5 + 1.5
        ("d", 2, "fixed"): ([[[0, 2]], [[3]]], values),  # 1 + 2 = 3 and 1 + 0.5
    }
    frame = fitting.predicted(fitted, shares, {"d": lengths})
    by = frame.set_index("sampler")
    assert by.loc["padded", "predicted epoch (s)"] == pytest.approx(2.0)
    assert by.loc["padded", "predicted straggler ratio"] == pytest.approx(1.0)
    assert by.loc["quadratic", "predicted epoch (s)"] == pytest.approx(3.5)
    assert by.loc["fixed", "predicted epoch (s)"] == pytest.approx(3.0)
    assert by.loc["fixed", "predicted straggler ratio"] == pytest.approx(3.0 / 2.25)
    goal = fitting.goal(frame).iloc[0]
    assert goal["best padded peer"] == "fixed" and goal["its epoch (s)"] == pytest.approx(3.0)
    ours = by.loc["fitted"]
    assert goal["ours fitted shorter by"] == pytest.approx(1 - ours["predicted epoch (s)"] / 3.0)
    met = ours["predicted straggler ratio"] <= 1.03 and goal["ours fitted shorter by"] >= 0.03
    assert goal["goal met (predicted)"] == ("yes" if met else "no")


def test_the_recorded_lhotse_runs_are_what_lhotse_gives_now(finding) -> None:
    """The record (python -m studies.findings.token_costs --record) holds every lhotse
    run the table shows; a sample of them, run again, is the same, and the finding says
    where its rows come from."""
    recorded = token_costs.PEERS.load()
    assert {key for _, _, key in recorded} == set(token_costs.RECORDED)
    assert len(token_costs.RECORDED) == 4
    data, world = "lognormal", 4
    for key in ("lhotse", f"lhotse-quadratic-{LHOTSE_TUNED}"):
        assert token_costs.PEERS.row(data, world, key) == recorded[(data, world, key)]
    assert "studies/data/token-costs-peers.json" in finding.prose
    assert token_costs.COMMAND in finding.prose
