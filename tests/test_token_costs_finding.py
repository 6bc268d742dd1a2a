"""The token-costs finding: its claim against its table, and its measurements on
hand-made cases."""

from __future__ import annotations

import pytest
import torch

from studies.findings import build, token_costs
from studies.findings.wording import count_of
from studies.tokens import timing as token_timing
from studies.tokens.costing import QUADRATIC, measure, quadratic_budget

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
    # Measured against simulated (the timed table, from the committed record).
    timed = finding.tables[1].frame
    # Every sampler of the runs at the timed world size was timed, on the same batches.
    for data, group in table[table["ranks"] == token_timing.RANKS].groupby("data"):
        assert set(timed[timed["data"] == data]["sampler"]) == set(group["sampler"]), data
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
