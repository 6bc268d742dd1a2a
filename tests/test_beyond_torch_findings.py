"""The findings on what the samplers beyond torch fix: exact evaluation, collection, wrapping
and tail policies.

Expected values are derived here from definitions (pairwise ROC AUC, the stock padding
written out, strided parts built by hand), not read from the study code.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from fractions import Fraction

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import RandomSampler, WeightedRandomSampler

from samplers import DistributedSamplerWrapper
from studies import findings
from studies.core.evaluation import (
    SCORE_LEVELS,
    is_correct,
    label,
    roc_auc,
    score,
    zip_and_truncate,
)
from studies.engines import collection, unsharded_evaluation
from studies.findings import exact_evaluation, tail_policies, wrapping_samplers
from studies.findings import zip_and_truncate as zip_finding

# --- ROC AUC ------------------------------------------------------------------------------


def pairwise_auc(labels: list[bool], scores: list[int]) -> Fraction:
    """The definition: over every (positive, negative) pair, 1 if the positive scores
    higher, 1/2 on a tie."""
    positives = [s for lab, s in zip(labels, scores, strict=True) if lab]
    negatives = [s for lab, s in zip(labels, scores, strict=True) if not lab]
    wins = sum(
        Fraction(1) if p > n else Fraction(1, 2) if p == n else Fraction(0)
        for p in positives
        for n in negatives
    )
    return wins / (len(positives) * len(negatives))


@given(
    st.lists(st.tuples(st.booleans(), st.integers(-3, 3)), min_size=2, max_size=30).filter(
        lambda pairs: len({lab for lab, _ in pairs}) == 2
    )
)
def test_roc_auc_is_the_pairwise_definition(pairs: list[tuple[bool, int]]) -> None:
    labels, scores = [lab for lab, _ in pairs], [s for _, s in pairs]
    assert roc_auc(labels, scores) == pairwise_auc(labels, scores)
    assert roc_auc(labels[::-1], scores[::-1]) == roc_auc(labels, scores)  # order-free


def test_roc_auc_examples_and_errors() -> None:
    assert roc_auc([False, True], [0, 1]) == 1
    assert roc_auc([True, False], [0, 1]) == 0
    assert roc_auc([True, False, True, False], [5, 5, 5, 5]) == Fraction(1, 2)
    assert roc_auc([True, False, True], [3, 2, 2]) == Fraction(3, 4)
    with pytest.raises(ValueError, match=r"both classes.*got 2 positive and 0 negative"):
        roc_auc([True, True], [1, 2])
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        roc_auc([True, False], [1])


def test_the_model_predicts_from_its_score() -> None:
    indices = torch.arange(2000)
    scores = score(indices)
    assert int(scores.min()) >= 0 and int(scores.max()) < SCORE_LEVELS
    assert len(set(scores.tolist())) == SCORE_LEVELS  # ties: more samples than levels
    predicted = scores >= SCORE_LEVELS // 2
    assert torch.equal(predicted == label(indices), is_correct(indices))
    assert torch.equal(score(torch.tensor([17])), scores[17:18])  # a function of the index


# --- exact evaluation in real processes -----------------------------------------------------


def _padded(size: int, world: int) -> list[int]:
    """The stock sampler's order without shuffling: 0..N-1, then its head again."""
    total = -(-size // world) * world
    return [position % size for position in range(total)]


def _truth(indices: list[int]) -> tuple[list[bool], list[bool], list[int]]:
    tensor = torch.tensor(indices, dtype=torch.int64)
    return is_correct(tensor).tolist(), label(tensor).tolist(), score(tensor).tolist()


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_uneven_gathering_is_exact_in_real_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = unsharded_evaluation.measure(timeout=120)
    sizes, worlds = unsharded_evaluation.DATASET_SIZES, unsharded_evaluation.WORLD_SIZES
    assert len(measured) == len(sizes) * len(worlds)
    for _, row in measured.iterrows():
        size, world = int(row["dataset_size"]), int(row["world_size"])
        correct, labels, scores = _truth(list(range(size)))
        accuracy, auc = Fraction(sum(correct), size), pairwise_auc(labels, scores)
        for run in ("in_order", "shuffled", "at_rank_0"):
            assert row[f"ours_{run}_accuracy"] == accuracy, (size, world, run)
            assert row[f"ours_{run}_auc"] == auc, (size, world, run)
        assert row["ours_dataset_order"] and row["ours_same_on_every_rank"]

        padded = _padded(size, world)
        assert row["padding"] == len(padded) - size
        p_correct, p_labels, p_scores = _truth(padded)
        assert row["pooled_counts"] == Fraction(sum(p_correct), len(padded))
        assert row["padded_auc"] == pairwise_auc(p_labels, p_scores)
        shares = [p_correct[rank::world] for rank in range(world)]
        means = sum(Fraction(sum(share), len(share)) for share in shares) / world
        assert row["mean_of_rank_means"] == pytest.approx(float(means), abs=1e-12)
        if row["padding"] == 0:
            assert row["pooled_counts"] == accuracy and row["padded_auc"] == auc
    # The stock patterns do miss: the claim is not vacuous on this grid.
    padded_rows = measured[measured["padding"] > 0]
    assert (padded_rows["pooled_counts"] != padded_rows["exact_accuracy"]).sum() >= 10
    assert (padded_rows["padded_auc"] != padded_rows["exact_auc"]).sum() >= 10

    monkeypatch.setattr(exact_evaluation, "measure", lambda: measured)
    finding = findings.build(exact_evaluation)
    frame = finding.tables[0].frame
    assert frame[exact_evaluation.EXACT_ACCURACY].all() and frame[exact_evaluation.EXACT_AUC].all()
    assert frame[exact_evaluation.IN_ORDER].all()
    pairs = len(measured)
    assert finding.prose.startswith(f"Over {pairs} (dataset size, world size) pairs")
    assert f"single-process accuracy and ROC AUC in {pairs}, compared" in finding.prose


def test_exact_evaluation_prose_counts_what_its_table_shows() -> None:
    third = Fraction(1, 3)
    rows = []
    for size, padding, pooled, auc in ((3, 1, Fraction(1, 2), Fraction(1, 2)), (4, 0, 0, 0)):
        rows.append(
            {
                "dataset_size": size,
                "world_size": 2,
                "padding": padding,
                "exact_accuracy": third,
                "exact_auc": third,
                **{
                    f"ours_{run}_{m}": third
                    for run in ("in_order", "shuffled", "at_rank_0")
                    for m in ("accuracy", "auc")
                },
                "ours_dataset_order": True,
                "ours_same_on_every_rank": True,
                "mean_of_rank_means": float(third),
                "pooled_counts": third + pooled,
                "padded_auc": third + auc,
            }
        )
    rows[1]["ours_shuffled_auc"] = Fraction(1, 4)  # one run off: not exact
    frame = exact_evaluation.table(pd.DataFrame(rows))
    prose = exact_evaluation.describe(frame)
    assert frame[exact_evaluation.EXACT_AUC].tolist() == [True, False]
    assert "single-process accuracy and ROC AUC in 1, compared" in prose
    assert "1 pairs are padded; in them summed counts were off in 1 (by up to 5.00e-01)" in prose
    assert f"off by more than {exact_evaluation.ROUNDING:g}) in 0 (" in prose


# --- zip and truncate ---------------------------------------------------------------------


@given(st.integers(1, 200), st.integers(1, 16))
def test_zip_and_truncate_loses_the_last_round_of_uneven_parts(size: int, world: int) -> None:
    uneven = [list(range(rank, size, world)) for rank in range(world)]
    collected = zip_and_truncate(uneven, size)
    full_rounds = size // world * world
    assert collected == list(range(full_rounds))  # the last size % world are lost
    padded = _padded(size, world)
    equal = [padded[rank::world] for rank in range(world)]
    assert zip_and_truncate(equal, size) == list(range(size))


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_zip_and_truncate_loses_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    assert zip_and_truncate([["a", "c"], ["b", "d"]], 3) == ["a", "b", "c"]
    assert zip_and_truncate([["a", "c", "e"], ["b", "d"]], 5) == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="dataset_size must be at least 0, got -1"):
        zip_and_truncate([[1]], -1)
    pytest.importorskip("mmengine", reason="mmengine (the peers extra) is not installed")

    sizes, worlds = (1, 2, 3, 5, 8, 13, 33, 101), (2, 3, 8)
    measured = collection.measure(dataset_sizes=sizes, world_sizes=worlds, timeout=120)
    assert len(measured) == len(collection.SAMPLERS) * len(sizes) * len(worlds) * 3
    monkeypatch.setattr(zip_finding, "measure", lambda: measured)
    finding = findings.build(zip_finding)
    shown = finding.tables[0].frame
    assert shown["collection"].tolist() == [
        zip_finding.COLLECTION_WORDS[name] for name in measured["collection"]
    ]

    # The claim's conditions, against the table.
    def rows(sampler: str, collection_name: str) -> pd.DataFrame:
        return measured[
            (measured["sampler"] == sampler) & (measured["collection"] == collection_name)
        ]

    wrong = collection.WRONG
    stock = rows(zip_finding.STOCK, "zip")
    assert not stock["part lengths differ"].any() and (stock[wrong] == 0).all()
    uneven = rows(zip_finding.UNEVEN, "zip")
    remainder = uneven["dataset size"] % uneven["world size"]
    assert (uneven[collection.LOST] == remainder).all() and (uneven[wrong] > 0).any()
    assert (uneven[collection.REPEATED] == 0).all()  # lost, not repeated
    assert (rows(zip_finding.UNEVEN, "mmengine")[wrong] == 0).all()  # zip_longest: exact
    for batched in zip_finding.BATCHED:
        for name in ("zip", "mmengine"):
            assert (rows(batched, name)[wrong] > 0).any(), (batched, name)
    assert (rows(zip_finding.BATCHED[-1], "mmengine")[collection.REPEATED] > 0).any()
    assert (measured[measured["collection"] == "gather_unsharded"][wrong] == 0).all()
    assert f"mmengine {zip_finding.mmengine_version()}'s collect_results" in finding.claim


# --- wrapping any sampler -------------------------------------------------------------------


def test_wrapped_streams_overlap_unless_seeded() -> None:
    # By hand: two ranks whose global RNGs differ draw different RandomSampler streams.
    streams = []
    for rank in range(2):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(rank)
            streams.append(list(RandomSampler(range(50))))
    assert streams[0] != streams[1]
    common = [streams[rank][rank::2] for rank in range(2)]
    assert set(common[0]) & set(common[1]) and set(range(50)) - set(common[0] + common[1])

    # Ours: whatever each rank's RNG, disjoint parts of one stream, the caller's RNG kept.
    weighted = [1.0 + index % 3 for index in range(40)]
    for world in (2, 5):
        parts = []
        for rank in range(world):
            torch.manual_seed(100 + rank)
            state = torch.random.get_rng_state()
            inner = WeightedRandomSampler(weighted, 40, replacement=False)
            parts.append(list(DistributedSamplerWrapper(inner, world, rank, tail="uneven")))
            assert torch.equal(torch.random.get_rng_state(), state)
        assert sorted(itertools.chain(*parts)) == list(range(40)), world

    pytest.importorskip("lightning", reason="Lightning (the peers extra) is not installed")
    finding = findings.build(wrapping_samplers)
    frame = finding.tables[0].frame
    ours = frame[frame["pattern"] == wrapping_samplers.OURS]
    common_rows = frame[frame["pattern"] == wrapping_samplers.COMMON]
    lightning = frame[frame["pattern"] == wrapping_samplers.LIGHTNING]
    assert set(frame["world size"]) == set(range(2, 17))
    assert frame["wrapped sampler"].nunique() == 3
    # Lightning's wrapper under per-rank seeding: another stream per rank, samples lost.
    assert (lightning[wrapping_samplers.STREAMS] == lightning["world size"]).all()
    assert (lightning[wrapping_samplers.NEVER] > 0).all()
    assert not lightning[wrapping_samplers.EXACT].any()
    assert (ours[[wrapping_samplers.ON_SEVERAL, wrapping_samplers.NEVER]] == 0).all().all()
    assert ours[wrapping_samplers.EXACT].all() and (ours[wrapping_samplers.STREAMS] == 1).all()
    assert (common_rows[wrapping_samplers.NEVER] > 0).all()
    assert (common_rows[wrapping_samplers.ON_SEVERAL] > 0).all()
    assert (common_rows[wrapping_samplers.STREAMS] == common_rows["world size"]).all()
    assert not common_rows[wrapping_samplers.EXACT].any()
    assert f"no sample was on more than one rank in {len(ours)} of {len(ours)}" in finding.prose


# --- tail policies -------------------------------------------------------------------------


def test_tail_policy_prose_counts_are_consistent() -> None:
    frame, identical = tail_policies.measure()
    summary = tail_policies.table(frame)
    found = tail_policies.facts(summary, identical, len(frame) // frame["sampler"].nunique())
    prose = tail_policies.describe(frame, found)
    unequal, batch_one, larger, below = map(
        int,
        re.search(
            r"unequal batch counts in (\d+) configurations: (\d+) with batch size 1 .*?"
            r"and (\d+) with batch size 2 or more, of which (\d+) had",
            prose,
        ).groups(),
    )
    assert batch_one + larger == unequal
    assert below <= larger


def test_tail_policy_table() -> None:
    frame, identical = tail_policies.measure()
    grid = list(
        itertools.product(
            tail_policies.DATASET_SIZES, tail_policies.WORLD_SIZES, tail_policies.BATCH_SIZES
        )
    )
    assert identical == {ours: len(grid) for ours, _ in tail_policies.DROP_INS}
    table = tail_policies.table(frame).set_index("sampler")
    worst_padding = max(-(-n // w) * w - n for n, w, _ in grid)
    worst_trim = max(n % w for n, w, _ in grid)
    for name in (tail_policies.STOCK_PAD, tail_policies.OURS_PAD):
        assert table.loc[name, tail_policies.REPEATED] == worst_padding
        assert table.loc[name, tail_policies.DROPPED] == 0
    for name in (tail_policies.STOCK_DROP, tail_policies.OURS_DROP):
        assert table.loc[name, tail_policies.DROPPED] == worst_trim
    # Every sample exactly once in every configuration: the two uneven tails only.
    every = f"{len(grid)} of {len(grid)}"
    once = table[table[tail_policies.ONCE] == every].index.tolist()
    assert once == [tail_policies.UNEVEN, tail_policies.BATCHED_UNEVEN]
    # Equal batch counts everywhere except the uneven tails; the batch sampler's unequal
    # ones all have fewer samples than ranks or batch size 1, as its claim says.
    unequal = table[table[tail_policies.UNEQUAL] > 0].index.tolist()
    assert unequal == [tail_policies.UNEVEN, tail_policies.BATCHED_UNEVEN]
    assert table.loc[tail_policies.BATCHED_UNEVEN, tail_policies.UNEQUAL_LARGE] == 0
    assert table.loc[tail_policies.UNEVEN, tail_policies.UNEQUAL_LARGE] > 0
    batched = frame[frame["sampler"] == tail_policies.BATCHED_UNEVEN]
    odd = batched[~batched["equal"]]
    assert ((odd["dataset size"] < odd["world size"]) | (odd["batch size"] == 1)).all()
    assert len(odd) == table.loc[tail_policies.BATCHED_UNEVEN, tail_policies.UNEQUAL]
    # The drop batch sampler can drop a whole epoch: N=16, W=8, B=4 drops all 16.
    drop = frame[frame["sampler"] == tail_policies.BATCHED_DROP].set_index(
        ["dataset size", "world size", "batch size"]
    )
    assert drop.loc[(16, 8, 4), "dropped"] == 16 and drop.loc[(16, 8, 4), "no batch"]
    assert table.loc[tail_policies.BATCHED_DROP, tail_policies.EMPTY] == int(drop["no batch"].sum())
    full = table[table[tail_policies.SMALLEST] == "1.00"].index.tolist()
    assert full == ['DistributedBatchSampler, tail="pad"', tail_policies.BATCHED_DROP]
    # The batch-aware uneven layout: no batch below B // 2 once N >= W * B.
    assert float(table.loc[tail_policies.BATCHED_UNEVEN, tail_policies.SMALLEST]) >= 0.5
    drop_in = table[table[tail_policies.USE].str.contains("drop-in")].index.tolist()
    assert drop_in == [tail_policies.OURS_PAD, tail_policies.OURS_DROP]
    finding = findings.build(tail_policies)
    assert f"skipped up to {worst_trim}" in finding.claim

    # By hand, 5 samples on 2 ranks, batch size 2: stock padding repeats sample 0.
    by_rank = tail_policies.batches(tail_policies.LOADERS[tail_policies.STOCK_PAD], 5, 2, 2)
    assert by_rank == [[[0, 2], [4]], [[1, 3], [0]]]
    described = tail_policies.describe_configuration(by_rank, 5)
    assert (described["repeated"], described["dropped"], described["once"]) == (1, 0, False)
    assert Counter(i for rank in by_rank for b in rank for i in b)[0] == 2


def test_use_when_reads_the_numbers() -> None:
    row = {
        tail_policies.ONCE: "96 of 96",
        tail_policies.UNEQUAL: 51,
        tail_policies.UNEQUAL_LARGE: 11,
        tail_policies.SMALLEST: "0.25",
        tail_policies.DROPPED: 0,
        tail_policies.REPEATED: 0,
        tail_policies.EMPTY: 0,
    }
    assert tail_policies.use_when(row, "x").startswith("exact evaluation gathered once")
    row[tail_policies.UNEQUAL_LARGE] = 0
    assert "when N ≥ W and B ≥ 2" in tail_policies.use_when(row, "x")
    row[tail_policies.UNEQUAL] = 0
    assert tail_policies.use_when(row, "x").startswith("exact evaluation with per-batch")
    row[tail_policies.ONCE], row[tail_policies.DROPPED] = "14 of 96", 3
    assert tail_policies.use_when(row, "x") == (
        "training without repeats (up to 3 samples skipped)"
    )
    row[tail_policies.SMALLEST], row[tail_policies.EMPTY] = "1.00", 2
    assert tail_policies.use_when(row, tail_policies.OURS_DROP) == (
        "training without repeats (up to 3 samples skipped; 2 epochs emptied), full batches; "
        "drop-in for the stock sampler"
    )
    row[tail_policies.UNEQUAL] = 4
    assert tail_policies.use_when(row, "x") == "nothing measured here"
