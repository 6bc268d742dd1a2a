"""The mixtures finding's claim, stated against its table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from studies.findings import mixture_record as mixture
from studies.findings import mixtures
from studies.findings import packed_mixture_words as packed_words
from studies.mixtures import bench as mixture_bench
from studies.mixtures import packed_tables as packed
from studies.mixtures import packing
from studies.mixtures import ways as mixture_ways
from studies.mixtures.corpus import MAX_LENGTH, ROWS


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return mixtures.table()


@pytest.fixture(scope="module")
def packed_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return packed.mixing_table(), packed.rows_table()


def of(frame: pd.DataFrame, way: Any) -> pd.Series:
    match = (frame[packed.WAY] == way.name) & (frame[packed.SETTING] == way.setting)
    assert match.sum() == 1
    return frame[match].iloc[0]


def test_the_claim_holds_in_the_table(
    frame: pd.DataFrame, packed_frames: tuple[pd.DataFrame, pd.DataFrame]
) -> None:
    exact = mixtures.exact_rows(frame)
    # Ours holds all four on every world size; every other way fails one on each.
    assert set(frame.loc[exact, "sampler"]) == {mixture_ways.OURS}
    assert exact[frame["sampler"] == mixture_ways.OURS].all()
    assert not exact[frame["sampler"] != mixture_ways.OURS].any()
    megatron = frame[frame["sampler"] == mixture_ways.MEGATRON]
    assert (megatron["largest deviation over all prefixes (samples)"] < 1).all()
    assert (megatron["reweighted: repeats within a pass"].astype(int) > 0).all()
    unsupported = frame["reweighted: repeats within a pass"] == mixtures.NOT_REWEIGHTED
    assert set(frame.loc[unsupported, "sampler"]) == {
        mixture_ways.WEIGHTED,
        mixture_ways.STOCK,
        mixture_ways.TORCHDATA,
    }
    _first_index_holds_as_the_prose_states_it()
    # Packed: ours with split="long" alone holds all five; the Megatron-style blend (both
    # settings, the same rows) keeps the token shares closest at every prefix, within a
    # row's tokens, and ours further off.
    mixing, rows = packed_frames
    held = packed_words.holding(mixing, rows)
    ours = packing.WAYS[1]
    assert list(zip(held[packed.WAY], held[packed.SETTING], strict=True)) == [
        (ours.name, ours.setting)
    ]
    closest = mixing[mixing[packed.PREFIX] == mixing[packed.PREFIX].min()]
    assert set(closest[packed.WAY]) == {packing.MegatronStyle.name}
    assert (closest[packed.PREFIX] < MAX_LENGTH).all()
    assert of(mixing, ours)[packed.PREFIX] > closest[packed.PREFIX].max()


def test_the_packed_rows_as_the_prose_states_them(
    packed_frames: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    mixing, rows = packed_frames
    none, long, megatron, masked, short, hf = packing.WAYS
    # Counted as handed out, ours repeats nothing within a pass (a window holding the end
    # of a source's pass goes out pass by pass) and the Megatron-style blend does; over
    # the epoch neither goes beyond an even spread, and datasets + TRL's recommended
    # setting does.
    for way in (none, long):
        assert of(mixing, way)[packed.REPEATED] == 0
    assert of(mixing, megatron)[packed.REPEATED] > 0
    for way in (none, long, megatron):
        assert of(mixing, way)[packed.SPREAD] == 0
    assert of(mixing, hf)[packed.SPREAD] > 0
    # Resume: ours loses and repeats nothing; datasets + TRL do; the Megatron-style blend
    # differs in its last partial global batch at most (none when the rows make whole ones).
    for way in (none, long):
        assert of(mixing, way)[packed.LOST] == of(mixing, way)[packed.RESUME_REPEATED] == 0
    assert of(mixing, hf)[packed.LOST] + of(mixing, hf)[packed.RESUME_REPEATED] > 0
    batch_tokens = packed.WORLD * ROWS * MAX_LENGTH
    assert of(mixing, megatron)[packed.LOST] <= batch_tokens
    assert of(mixing, megatron)[packed.RESUME_REPEATED] <= batch_tokens
    # Reweight: ours adds no repeat but applies the weights from its next window.
    assert of(mixing, long)[packed.REWEIGHT_SPREAD] == 0
    assert of(mixing, megatron)[packed.REWEIGHT_SPREAD] > 0
    assert of(mixing, long)[packed.REWEIGHT_PREFIX] > of(mixing, megatron)[packed.REWEIGHT_PREFIX]
    # Rows: the two Megatron-style settings hold the same tokens; only the defaults
    # attend across documents. Without split, ours makes rows longer than the context;
    # TRL's default drops tokens and its first_exhausted mix stops early.
    assert of(rows, megatron)[packed.CUT] == of(rows, masked)[packed.CUT] > 0
    assert of(rows, megatron)[packed.MIXED] > 0 == of(rows, masked)[packed.MIXED]
    assert of(rows, none)[packed.OVER] > 0 == of(rows, long)[packed.OVER]
    assert of(rows, short)[packed.DROPPED] > 0
    assert of(rows, short)["rows"] < packing.ours_rows()
    # Each finer split fills rows at least as well, cuts more documents and spends less
    # attention per token than whole documents.
    splits = [of(rows, long)] + [of(rows, packing.Ours(k)) for k in packed.SPLITS]
    cuts = [row[packed.CUT] for row in splits]
    assert cuts == sorted(cuts)
    assert all(row[packed.ATTENTION] < of(rows, none)[packed.ATTENTION] for row in splits)


def test_the_stock_sampler_and_the_all_exhausted_mix_as_the_prose_states_them() -> None:
    """ConcatDataset + the stock sampler follows the sources' sizes, never the weights;
    the all_exhausted Dataset's mix is longer than an epoch, each rank reading the first
    rows of its chunk."""
    shares, weighted = mixtures.stock_shares()
    sizes = [n / mixture_ways.LENGTH for n in mixture_ways.SIZES]
    assert shares == pytest.approx(sizes)
    assert shares != pytest.approx(weighted)
    from datasets.distributed import split_dataset_by_node

    mix = mixture_ways.hf_dataset_mix(mixture_ways.WEIGHTS, "all_exhausted")
    assert len(mix) > mixture_ways.LENGTH
    for world in mixtures.WORLD_SIZES:
        for rank in range(world):
            chunk = len(split_dataset_by_node(mix, rank, world))
            assert chunk > len(range(rank, mixture_ways.LENGTH, world))


def _first_index_holds_as_the_prose_states_it() -> None:
    """The recorded time to the first index: every way of the table at every size, ours
    measured at each, and at the largest size no other way measured came sooner."""
    record = mixture_bench.load()
    table = mixture.ways_table(record).set_index(mixture.WAY)
    assert list(table.index) == list(mixture_ways.BUILDERS)
    for total in mixture_bench.WAY_SIZES:
        first = pd.to_numeric(table[mixture.first_index_column(total)], errors="coerce")
        assert first.notna()[mixture_ways.OURS], total
    largest = max(mixture_bench.WAY_SIZES)
    first = pd.to_numeric(table[mixture.first_index_column(largest)], errors="coerce")
    others = first.drop(mixture_ways.OURS).dropna()
    assert (others > first[mixture_ways.OURS]).all()
    said = f"none of the {len(others)} other ways measured came sooner"
    assert said in mixture.ways_prose(record, mixture_ways.OURS).split(f"At {largest:,}")[1]


def test_the_hugging_face_rows_as_the_prose_states_them(frame: pd.DataFrame) -> None:
    def rows(name: str) -> pd.DataFrame:
        return frame[frame["sampler"] == name].reset_index(drop=True)

    # The default stopping strategy ends the mix when its smallest source runs out.
    assert (rows(mixture_ways.HF_MAP)["samples in the epoch"] < mixture_ways.LENGTH).all()
    whole = [
        mixture_ways.HF_MAP_ALL,
        mixture_ways.HF_MAP_ONCE,
        mixture_ways.HF_STREAM,
        mixture_ways.HF_SPLIT_FIRST,
    ]
    for name in whole:
        row = rows(name)
        assert (row["samples in the epoch"] == mixture_ways.LENGTH).all(), name
        # Resumed on the other world size (state_dict, or skipping the steps done), every
        # mix of a whole epoch loses and repeats samples, and a rebuilt mix with the new
        # probabilities repeats samples within a pass.
        assert (row["resumed: samples lost"] > 0).all(), name
        assert (row["resumed: samples repeated"] > 0).all(), name
        assert (row["reweighted: repeats within a pass"].astype(int) > 0).all(), name
    # A Dataset's mix cut in contiguous chunks repeats samples within a pass; without
    # replacement it repeats none and leaves the weights as its sources run out.
    assert (rows(mixture_ways.HF_MAP_ALL)["repeats within a pass"] > 0).all()
    once = rows(mixture_ways.HF_MAP_ONCE)
    assert (once["repeats within a pass"] == 0).all()
    assert (once["largest deviation over all prefixes (samples)"] > 1).all()
    # Every rank of a streamed mix draws with the same seed: a step is further off than
    # any of ours.
    step = "largest deviation within a step (samples)"
    assert rows(mixture_ways.HF_STREAM)[step].max() > rows(mixture_ways.OURS)[step].max()
    # datasets#7868's order (split each source, then mix) gives the same rows as splitting
    # the mix, in the installed datasets.
    measures = [column for column in frame.columns if column != "sampler"]
    assert rows(mixture_ways.HF_SPLIT_FIRST)[measures].equals(
        rows(mixture_ways.HF_STREAM)[measures]
    )


def test_the_measures_on_hand_made_streams() -> None:
    # Sources 0 and 1 of sizes 20 and 60, weights 3 : 1 of 6 sources (3/10 and 1/10).
    weights = (3, 1, 0, 0, 0, 0)
    good = [0, 20, 1, 2]  # 0, 1, 0, 0: within 1 of 3/4, 1/4 at every prefix
    assert mixtures.largest_deviation(good, weights) < 1
    assert mixtures.largest_deviation([20, 21, 22], weights) == pytest.approx(2.25)
    assert mixtures.repeats_within_passes([0, 1, 0]) == 1
    assert mixtures.repeats_within_passes([*range(20), 0]) == 0  # a new pass
    # Steps of 2 ranks against 1.5 and 0.5: (0, 20) is 1 and 1; (20, 21) is 0 and 2.
    assert mixtures.largest_step_deviation([0, 20], weights, 2) == pytest.approx(0.5)
    assert mixtures.largest_step_deviation([0, 20, 20, 21], weights, 2) == pytest.approx(1.5)
    assert mixtures.largest_step_deviation([0], weights, 2) == 0.0  # no whole step


def test_the_findings_import_datasets_only_when_the_mix_is_built() -> None:
    """datasets (the peers extra) is imported by the rows that use it, not by importing
    the findings, so the report's argument checks and --help run without it."""
    script = (
        "import sys\nimport studies.findings as findings\nfindings.modules()\n"
        "print('datasets' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["False"]


def test_the_recorded_hugging_face_rows_are_what_datasets_gives_now() -> None:
    """The record (python -m studies.findings.mixtures --record) holds a row for every
    recorded way on both world sizes; a cheap sample of them, run again, is the same."""
    recorded = mixtures.PEERS.load()
    assert sorted({name for name, _ in recorded}) == sorted(mixtures.RECORDED)
    assert all(name.startswith("datasets: ") for name in mixtures.RECORDED)
    for world in mixtures.WORLD_SIZES:
        assert (
            mixtures.PEERS.row(mixture_ways.HF_MAP, world) == recorded[(mixture_ways.HF_MAP, world)]
        )


def test_the_finding_says_where_the_recorded_rows_come_from() -> None:
    """The committed report (regenerated byte for byte by CI) names the record, its
    command and the versions it was made with."""
    report = (Path(__file__).resolve().parents[1] / "reports" / "mixtures.md").read_text()
    assert "studies/data/mixture-peers.json" in report and mixtures.COMMAND in report
    versions = mixtures.PEERS.provenance("x", "y", "z").split("; ", 2)[2]
    assert versions in report
