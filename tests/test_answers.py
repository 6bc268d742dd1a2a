"""The README's answers table: numbers read from the findings, advice naming real APIs."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch

from samplers import DistributedBatchSampler, DistributedSampler, DistributedSamplerWrapper
from studies.answers import COLUMNS, LINKED, NEEDED, answers
from studies.findings import (
    batch_of_one,
    build,
    distributed_evaluation,
    modules,
    resume,
    set_epoch,
)
from studies.report import chosen_modules

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built() -> dict[str, object]:
    return {module.NAME: build(module) for module in modules() if module.NAME in NEEDED}


def test_answers_cover_the_jobs_and_their_findings_are_always_built(built: dict) -> None:
    chosen = {module.NAME for _, module in chosen_modules(slow=False)}
    assert set(NEEDED) <= chosen  # so the README is the same with or without slow findings
    table = answers(built)
    assert list(table.columns) == list(COLUMNS)
    jobs = table["if you are doing"].tolist()
    for job in ("evaluation", "training", "small datasets", "BatchNorm", "checkpointing"):
        assert job in jobs
    for because in table["because"]:
        linked = [name for name in (*NEEDED, *LINKED) if f"]({name}.md)" in because]
        assert linked, because
        if not set(linked) & set(NEEDED):  # a finding not always built: no number of its own
            assert not re.search(r"[0-9]", because.replace(".md)", ")")), because


def test_answers_carry_the_findings_numbers(built: dict) -> None:
    """The numbers are the ones the findings' tables hold (read here from the tables)."""
    rows = answers(built).set_index("if you are doing")
    evaluation = built["distributed-evaluation"].tables[0].frame
    errors = distributed_evaluation.ERROR_COLUMNS
    worst = evaluation[errors["pooled_counts"]].abs().max()
    assert f"off by up to {worst:.1e}" in rows.loc["evaluation", "because"]
    norms = built["batch-of-one"].tables[2].frame
    for shape in norms[norms["train mode"] != "ok"]["input shape"]:
        assert shape in rows.loc["BatchNorm", "because"]
    repeats = built["set-epoch"].tables[0].frame
    without = repeats[~repeats["set_epoch"]]
    later = int((without["epochs"] - 1).sum())
    assert f"{later} of {later} later epochs" in rows.loc["training", "because"]
    # The evaluation row says when the batch sampler's uneven counts differ.
    assert "only with batch size 1 or fewer samples than ranks" in rows.loc["evaluation", "use"]
    assert set_epoch.facts(repeats).later == later
    assert batch_of_one.facts(norms).failing


def test_checkpoint_advice_names_the_resume_api_that_exists(built: dict) -> None:
    rows = answers(built).set_index("if you are doing")
    advice = rows.loc["checkpointing", "use"]
    prose = built["strided-prefix"].prose
    for text in (advice, prose):
        called = set(re.findall(r"`sampler\.(\w+)\(", text))
        assert {"state_dict", "load_state_dict"} <= called, text
        for cls in (DistributedSampler, DistributedBatchSampler, DistributedSamplerWrapper):
            assert all(callable(getattr(cls, name, None)) for name in called), (cls, called)
        assert "no resume API" not in text
    assert (
        "consumed=" in advice
        and "consumed" in inspect.signature(DistributedSampler.state_dict).parameters
    )
    # The reason quotes the resume finding's measurements.
    resumed = built["resume"].tables[2].frame
    moved = resumed[resumed["old world size"] != resumed["new world size"]]
    skipping = moved[moved["how the job resumes"] == resume.SKIP]
    because = rows.loc["checkpointing", "because"]
    assert "](resume.md)" in because
    assert f"left up to {skipping['samples never seen'].max()} samples never seen" in because


def test_answers_name_a_missing_finding(built: dict) -> None:
    partial = {name: finding for name, finding in built.items() if name != "set-epoch"}
    with pytest.raises(KeyError, match="the finding 'set-epoch' is needed but was not built"):
        answers(partial)


def test_the_split_and_evaluation_rows_agree_on_uneven(built: dict) -> None:
    """Splitting rules out uneven splits for training; evaluation recommends them."""
    rows = answers(built).set_index("if you are doing")
    split = rows.loc["splitting data across ranks", "use"]
    assert 'not ours with `tail="uneven"`' in split and "evaluation gathered once" in split
    assert 'tail="uneven"' in rows.loc["evaluation", "use"]


def test_every_api_the_answers_name_exists(built: dict) -> None:
    import importlib
    import inspect
    import re

    import samplers

    text = " ".join(answers(built)["use"])
    called = set(re.findall(r"`([A-Za-z_]+)\(", text))
    methods = set(re.findall(r"`sampler\.([a-z_]+)\(", text))
    assert {"DistributedBatchSampler", "gather_unsharded", "DistributedSamplerWrapper"} <= called
    integrations = [
        importlib.import_module(f"samplers.integrations.{name}")
        for name in ("accelerate", "transformers", "lightning", "torchdata")
    ]
    places = [samplers, samplers.DistributedSampler, *integrations]
    for name in called - {"sampler"}:
        assert any(hasattr(place, name) for place in places), name
    for name in methods:
        assert hasattr(samplers.DistributedSampler, name), name
    keywords = set(re.findall(r"`?([a-z_]+)=", text))
    classes = [
        samplers.DistributedSampler,
        samplers.DistributedBatchSampler,
        samplers.DistributedTokenBatchSampler,
        samplers.integrations.transformers.ShardedTrainer,
        samplers.integrations.lightning.ShardedDataLoader,
        torch.utils.data.DataLoader,
    ]
    options = {parameter for cls in classes for parameter in inspect.signature(cls).parameters} | {
        "drop_last",
        "shuffle",
        "seed",
        "consumed",
        "train_sampler",
    }
    assert keywords <= options, keywords - options


def test_packed_rows_mixtures_and_ray_have_their_rows(built: dict) -> None:
    import samplers

    rows = answers(built).set_index("if you are doing")
    expected = {
        "training on packed rows (documents concatenated, no padding)": (
            "token-costs",
            ["DistributedPackedBatchSampler", "packed_collate"],
        ),
        "mixing datasets by weight": (
            "mixtures",
            [
                "DistributedMixtureSampler",
                "DistributedMixtureBatchSampler",
                "DistributedMixtureTokenBatchSampler",
                "DistributedPackedMixtureSampler",
            ],
        ),
        "training with Ray Train": ("engines", []),
    }
    for job, (finding, names) in expected.items():
        assert f"[{finding}]({finding}.md)" in rows.loc[job, "because"]
        for name in names:
            assert f"`{name}" in rows.loc[job, "use"] and hasattr(samplers, name), name
    assert "set_weights" in rows.loc["mixing datasets by weight", "use"]
    assert callable(samplers.DistributedMixtureSampler.set_weights)
    ray = (ROOT / "samplers" / "integrations" / "ray.py").read_text()
    for name in ("prepare_data_loader", "save_state", "load_state"):
        assert f"`{name}" in rows.loc["training with Ray Train", "use"]
        assert f"\ndef {name}(" in ray, name
    for kind in ("packed", "mixture"):
        assert f"dsampler explain --sampler {kind}`" in " ".join(rows["use"])
