"""The blog post's experiment: its transcription, and torch's batches against it.

The expected batches are rebuilt here with torch alone (a DataLoader per rank, the stock
sampler or none), so a change in torch, in the simulation or in the transcription that
makes them disagree fails here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockSampler

import studies.core.blog_post as blog_post
from studies.core.cases import EXPERIMENT, Case
from studies.core.simulate import COLUMNS, IndexDataset, make_loader
from studies.core.tables import to_labelled_csv_text
from studies.findings import build, experiment

POST_LABELS = ["1", "2", "3", "4a", "4b", "5a", "5b", "6", "7"]


def torch_rows(label: str, case: Case) -> list[tuple[str, int, int, int, list[int]]]:
    """(case, epoch, rank, batch, indices) from DataLoaders built with torch directly."""
    rows = []
    for rank in range(case.world_size):
        if case.implementation == "none":
            assert not case.shuffle  # the post's only run without a sampler reads in order
            sampler = None
            loader = DataLoader(
                range(case.dataset_size),
                batch_size=case.batch_size,
                drop_last=case.loader_drop_last,
            )
        else:
            sampler = StockSampler(
                range(case.dataset_size), num_replicas=case.world_size, rank=rank, seed=case.seed
            )
            loader = DataLoader(
                range(case.dataset_size),
                batch_size=case.batch_size,
                sampler=sampler,
                drop_last=case.loader_drop_last,
            )
        for epoch in range(case.epochs):
            if sampler is not None and case.set_epoch:
                sampler.set_epoch(epoch)
            for number, batch in enumerate(loader):
                rows.append((label, epoch, rank, number, batch.tolist()))
    return sorted(rows, key=lambda row: (POST_LABELS.index(row[0]), *row[1:4]))


def as_tuples(frame: pd.DataFrame) -> list[tuple[str, int, int, int, list[int]]]:
    return [
        (str(c), int(e), int(r), int(b), [int(i) for i in indices])
        for c, e, r, b, indices in zip(
            frame["case"], frame["epoch"], frame["rank"], frame["batch"], frame["indices"],
            strict=True,
        )
    ]  # fmt: skip


def test_simulation_reproduces_the_post() -> None:
    """Every batch the post printed is what torch and the simulation yield, and nothing more."""
    assert [label for label, _ in EXPERIMENT] == POST_LABELS
    printed = blog_post.printed_rows()
    expected = [row for label, case in EXPERIMENT for row in torch_rows(label, case)]
    assert as_tuples(printed) == expected
    simulated = experiment.simulated()
    assert as_tuples(simulated) == expected
    assert experiment.differences(printed, simulated).empty

    finding = build(experiment)
    assert "All 9 runs agree: each of the 40 batches the post printed" in finding.prose
    # The post made 9 runs and printed 8: 4b printed nothing.
    assert "made 9 runs" in finding.claim and "printed the batches of 8" in finding.claim
    assert "(case 4b printed nothing)" in finding.claim
    assert "lazurite.vercel.app" in finding.prose  # the post's address
    assert "004_56e07c84a9b4a6e9.txt" in finding.prose
    assert "DistributedSampler做了什么" in finding.prose  # cited by its title
    assert "in both epochs for cases 1, 2, 4a, 5a, 6 and 7" in finding.prose
    assert "(3 for 2 and 5b for 5a)" in finding.prose  # the post's set_epoch runs, rerun
    side = finding.tables[0].frame
    assert (side["post, epoch 0"] == side["torch now, epoch 0"]).all()
    assert (side["post, epoch 1"] == side["torch now, epoch 1"]).all()


def test_the_runs_are_configured_as_the_output_shows() -> None:
    cases = dict(EXPERIMENT)
    assert cases["1"].implementation == "none" and not cases["1"].shuffle
    assert [label for label, case in EXPERIMENT if case.set_epoch] == ["3", "5b"]
    assert not cases["4a"].loader_drop_last and cases["4b"].loader_drop_last
    assert {case.seed for case in cases.values()} == {0}
    assert {(case.world_size, case.batch_size, case.epochs) for case in cases.values()} == {
        (2, 4, 2)
    }


def test_a_changed_transcription_is_reported_where_it_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = json.loads(json.dumps(blog_post.load()))
    run = next(run for run in data["runs"] if run["case"] == "5a")
    run["printed"][2] = "tensor([0, 3, 1], device='cuda:1')"  # rank 1's epoch-1 batch
    monkeypatch.setattr(blog_post, "load", lambda: data)
    printed = blog_post.printed_rows()
    simulated = experiment.simulated()
    differing = experiment.differences(printed, simulated)
    assert differing.to_dict("records") == [
        {
            "case": "5a",
            "epoch": 1,
            "rank": 1,
            "batch": 0,
            "printed": [0, 3, 1],
            "yielded": [0, 3, 4],
        }
    ]
    text = experiment.agreement(printed, simulated)
    assert text.startswith("8 of 9 runs agree; 1 batches differ, in case 5a: case 5a, epoch 1")
    assert "the post printed [0, 3, 1], torch yields [0, 3, 4]" in text

    run["printed"].pop()  # a missing line: the rank's lines no longer split into epochs
    with pytest.raises(ValueError, match=r"run '5a': rank \d printed 1 batches"):
        blog_post.printed_rows()
    run["printed"] = ["tensor([0, 3], device='cpu')"]
    with pytest.raises(ValueError, match="run '5a', printed line 0: cannot read"):
        blog_post.printed_rows()


def test_the_post_says_padding_repeats_the_first_sample_and_it_is_the_order_head() -> None:
    claimed = blog_post.padding_claim()
    table = experiment.padding_table()
    merged = table.merge(claimed, on=["case", "epoch"])
    assert len(merged) == len(claimed) == 3
    assert (merged["padded copy"] == merged["index"].map(lambda i: json.dumps([i]))).all()
    for row in table.itertuples(index=False):
        order = json.loads(row[2])
        assert json.loads(row[3]) == [order[0]]  # the head of the shuffled order
    assert not table.iloc[0]["copy = index 0"]
    finding = build(experiment)
    # The post's rule, the first sample, names the head of the shuffled order: no
    # correction, and the claim counts the epochs it names.
    assert "names index 4, the head of that epoch's shuffled order" in finding.prose
    assert "correction" not in finding.prose.lower()
    assert "match the measured ones in all 3 epochs it names" in finding.claim


def test_no_sampler_loader_adds_nothing_the_case_does_not_set() -> None:
    dataset = IndexDataset(8)
    plain = make_loader(Case(8, 2, 4, shuffle=False, implementation="none"), dataset, None)
    assert plain.generator is None
    assert [batch.tolist() for batch in plain] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    shuffled = make_loader(Case(8, 2, 4, seed=3, implementation="none"), dataset, None)
    direct = DataLoader(
        range(8), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    assert [b.tolist() for b in shuffled] == [b.tolist() for b in direct]
    assert sorted(index for batch in shuffled for index in batch.tolist()) == list(range(8))


def test_experiment_csv_is_the_tidy_table_by_case(tmp_path: Path) -> None:
    frame = experiment.simulated()
    text = to_labelled_csv_text(frame, "case")
    read = pd.read_csv(io.StringIO(text), dtype={"case": str})
    assert list(read.columns) == ["case", *COLUMNS]
    assert read["case"].drop_duplicates().tolist() == [
        label for label in POST_LABELS if label != "4b"
    ]
    assert [json.loads(cell) for cell in read["indices"]] == frame["indices"].tolist()
    with pytest.raises(ValueError, match="exactly the tidy columns"):
        to_labelled_csv_text(frame.drop(columns="case"), "case")
