"""The README's answers table: numbers read from the findings, advice naming real APIs."""

from __future__ import annotations

import pytest

from samplers import DistributedSampler
from studies.answers import COLUMNS, NEEDED, answers
from studies.findings import build, is_slow, modules


@pytest.fixture(scope="module")
def built() -> dict[str, object]:
    return {module.NAME: build(module) for module in modules() if module.NAME in NEEDED}


def test_answers_cover_the_jobs_and_read_only_fast_findings(built: dict) -> None:
    fast = {module.NAME for module in modules() if not is_slow(module)}
    assert set(NEEDED) <= fast  # so the README is the same with or without slow findings
    table = answers(built)
    assert list(table.columns) == list(COLUMNS)
    jobs = table["if you are doing"].tolist()
    for job in ("evaluation", "training", "small datasets", "BatchNorm", "checkpointing"):
        assert job in jobs
    for because in table["because"]:
        assert any(f"]({name}.md)" in because for name in NEEDED), because


def test_answers_carry_the_findings_numbers(built: dict) -> None:
    rows = answers(built).set_index("if you are doing")
    evaluation = built["distributed-evaluation"].tables[0].frame
    worst = evaluation["summed counts: error"].abs().max()
    assert f"off by up to {worst:.1e}" in rows.loc["evaluation", "because"]
    norms = built["batch-of-one"].tables[2].frame
    for shape in norms[norms["train mode"] != "ok"]["input shape"]:
        assert shape in rows.loc["BatchNorm", "because"]
    repeats = built["set-epoch"].tables[0].frame
    without = repeats[~repeats["set_epoch"]]
    later = int((without["epochs"] - 1).sum())
    assert f"{later} of {later} later epochs" in rows.loc["training", "because"]


def test_checkpoint_advice_names_no_missing_api(built: dict) -> None:
    advice = answers(built).set_index("if you are doing").loc["checkpointing", "use"]
    assert "no resume API yet" in advice
    # The day a resume API exists, the advice must point to it instead.
    assert not any(
        hasattr(DistributedSampler, name) for name in ("resume", "set_start", "state_dict")
    )
    assert "no resume API yet" in built["strided-prefix"].prose


def test_answers_name_a_missing_finding(built: dict) -> None:
    partial = {name: finding for name, finding in built.items() if name != "set-epoch"}
    with pytest.raises(KeyError, match="the answers need the finding 'set-epoch'"):
        answers(partial)
