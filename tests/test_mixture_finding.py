"""The mixtures finding's claim, stated against its table."""

from __future__ import annotations

import pandas as pd
import pytest

from studies.findings import mixtures


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return mixtures.table()


def test_the_claim_holds_in_the_table(frame: pd.DataFrame) -> None:
    exact = mixtures.exact_rows(frame)
    # Ours holds all four on every world size; every other way fails one on each.
    assert set(frame.loc[exact, "sampler"]) == {mixtures.OURS}
    assert exact[frame["sampler"] == mixtures.OURS].all()
    assert not exact[frame["sampler"] != mixtures.OURS].any()
    megatron = frame[frame["sampler"] == mixtures.MEGATRON]
    assert (megatron["largest deviation over all prefixes (samples)"] < 1).all()
    assert (megatron["reweighted: repeats within a pass"].astype(int) > 0).all()
    unsupported = frame["reweighted: repeats within a pass"] == mixtures.NOT_REWEIGHTED
    assert set(frame.loc[unsupported, "sampler"]) == {
        mixtures.WEIGHTED,
        mixtures.STOCK,
        mixtures.TORCHDATA,
    }


def test_the_measures_on_hand_made_streams() -> None:
    # Sources 0 and 1 of sizes 20 and 60, weights 3 : 1 of 6 sources (3/10 and 1/10).
    weights = (3, 1, 0, 0, 0, 0)
    good = [0, 20, 1, 2]  # 0, 1, 0, 0: within 1 of 3/4, 1/4 at every prefix
    assert mixtures.largest_deviation(good, weights) < 1
    assert mixtures.largest_deviation([20, 21, 22], weights) == pytest.approx(2.25)
    assert mixtures.repeats_within_passes([0, 1, 0]) == 1
    assert mixtures.repeats_within_passes([*range(20), 0]) == 0  # a new pass
