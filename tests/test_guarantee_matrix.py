"""The guarantee matrix (reports/guarantees.md): the token sampler's column, the guarantees
that do not apply to a sampler, and the resume claim, against the committed table; the
report's cheaper search against the full search's record (studies/data/guarantee-search.json,
re-measured by ``python -m studies.kit.search_record``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from samplers import testing as kit
from studies.common import records
from studies.findings import guarantees
from studies.kit import peers, search_record
from studies.kit.cli import SHOWN, counterexample_text

CELLS = Path(__file__).resolve().parents[1] / "reports" / "guarantees-cells.csv"
TOKENS = "ours tokens"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_csv(CELLS, dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def found(frame: pd.DataFrame) -> guarantees.Facts:
    return guarantees.facts(frame)


def test_the_token_sampler_is_a_column_with_what_does_not_apply_to_it(
    found: guarantees.Facts,
) -> None:
    column = next(c for c in peers.COLUMNS if c.name == TOKENS)
    assert column.factory is peers.ours_tokens
    inapplicable = dict(column.not_applicable)
    assert set(inapplicable) == {"equal-length-across-ranks", "no-tiny-batch"}
    assert set(inapplicable) <= set(kit.GUARANTEES)
    assert TOKENS in found.samplers
    for guarantee in inapplicable:
        assert TOKENS in found.inapplicable[guarantee], guarantee
        assert TOKENS not in found.violated[guarantee] + found.held[guarantee], guarantee
    # What the kit finds where it applies: only the documented exception of tail="uneven"
    # (fewer samples than ranks: one rank gets no batch).
    violated = [g for g in found.guarantees if TOKENS in found.violated[g]]
    assert violated == ["equal-batch-counts"]
    applies = len(found.guarantees) - len(inapplicable)
    assert found.count[TOKENS] == applies - len(violated)


def test_a_guarantee_that_does_not_apply_keeps_what_the_kit_found(frame: pd.DataFrame) -> None:
    rows = frame[frame[guarantees.RESULT] == guarantees.INAPPLICABLE]
    assert set(rows[guarantees.SAMPLER]) == {TOKENS}
    assert (rows[guarantees.REASON] != "").all()
    others = frame[frame[guarantees.RESULT] != guarantees.INAPPLICABLE]
    assert (others[guarantees.REASON] == "").all()
    assert (others[guarantees.KIT] == others[guarantees.RESULT]).all()
    wide = guarantees.matrix(frame).set_index("guarantee")
    for _, row in rows.iterrows():
        cell = wide.loc[row[guarantees.GUARANTEE], TOKENS]
        assert cell.startswith("[does not apply](#guarantees-that-do-not-apply) (the kit: ")
        assert row[guarantees.KIT] in cell


def test_the_kit_grades_the_token_sampler_as_the_matrix_shows() -> None:
    uneven = kit.check_guarantee(peers.ours_tokens, "equal-batch-counts")
    assert uneven.holds is False and uneven.counterexample is not None
    example = uneven.counterexample
    assert (example["dataset_size"], example["world_size"]) == (1, 2)
    assert kit.check_guarantee(peers.ours_tokens, "exactly-once").holds is True


def test_the_resume_claim_says_what_the_table_shows(found: guarantees.Facts) -> None:
    """Every one of ours resumes on another world size within its tail (ours batches drop
    included: its empty epoch at N=2 W=1 B=3 once made the kit misjudge it); only
    torchdata's sampler violates it; the claim does not promise more than the tail."""
    ours = [name for name in found.samplers if name.startswith("ours")]
    assert set(found.held["resumes-other-world-size"]) == set(ours)
    assert found.violated["resumes-other-world-size"] == ("torchdata",)
    resumed, inexact = guarantees.within_tail(found)
    assert set(inexact) == {n for n in ours if n in found.violated["exactly-once"]}
    assert {"ours pad", "ours drop", "ours batches pad", "ours batches drop"} <= set(inexact)
    text = guarantees.claim(found)
    assert "without losing or repeating" not in text
    assert (
        f"{len(resumed)} samplers resumed on another world size losing and repeating nothing "
        "beyond what their own tail policy does" in text
    )
    assert f"{len(inexact)} of the {len(resumed)} of them repeat or leave out" in text
    committed = (CELLS.parent / "guarantees.md").read_text()
    assert text in committed
    assert "without losing or repeating" not in committed


# --- the report's search against the full search's record -------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, str], search_record.Cell]:
    return search_record.load()


def test_the_reports_search_finds_every_counterexample_of_the_full_search(
    frame: pd.DataFrame, recorded: dict[tuple[str, str], search_record.Cell]
) -> None:
    """The committed table is the report's cheaper search (CI regenerates it byte for
    byte): it found every counterexample the full search found, the same one, and agrees
    with the full search on every other cell."""
    shown = {
        (row[guarantees.SAMPLER], row[guarantees.GUARANTEE]): row for _, row in frame.iterrows()
    }
    assert set(shown) == set(recorded)
    violated = [cell for cell in recorded.values() if cell.holds is False]
    assert len(violated) >= 50
    for cell in violated:
        row = shown[(cell.sampler, cell.guarantee)]
        assert row[guarantees.KIT] == guarantees.VIOLATED, (cell.sampler, cell.guarantee)
        assert row[guarantees.COUNTEREXAMPLE] == cell.counterexample, (cell.sampler, cell.guarantee)
    for key, cell in recorded.items():
        assert shown[key][guarantees.KIT] == SHOWN[cell.holds], key


def test_the_reports_search_tries_a_fraction_of_the_full_searchs_configurations(
    frame: pd.DataFrame, recorded: dict[tuple[str, str], search_record.Cell]
) -> None:
    """What makes the matrix fast, counted without a clock: the configurations its search
    tried, against the full search's."""
    cheap = int(frame[guarantees.TRIED].astype(int).sum())
    full = sum(cell.tried for cell in recorded.values())
    assert 0 < cheap <= full / 3, (cheap, full)


def test_the_full_searchs_record_names_its_machine_and_versions() -> None:
    data = records.load(search_record.RECORD, search_record.COMMAND)
    assert {"CPU", "cores", "memory"} <= set(data["machine"])
    distributions = {column.distribution for column in peers.COLUMNS if column.distribution}
    assert {"Python", "hypothesis", *distributions} <= set(data["versions"])
    assert data["search"]["guarantees"] == list(kit.GUARANTEES)


def _sample(recorded: dict[tuple[str, str], search_record.Cell]) -> list[search_record.Cell]:
    """One cell per guarantee: the first sampler the full search found violating it, else
    the first it held for, else the first."""
    sample = []
    for guarantee in kit.GUARANTEES:
        cells = [recorded[(column.name, guarantee)] for column in peers.COLUMNS]
        ranked = [c for c in cells if c.holds is False] or [c for c in cells if c.holds] or cells
        sample.append(ranked[0])
    return sample


@pytest.mark.timeout(900)
def test_the_full_search_finds_what_its_record_holds_on_a_sample(
    recorded: dict[tuple[str, str], search_record.Cell],
) -> None:
    """The record re-run on a cheap sample: the full search (``dsampler check``'s) of one
    cell per guarantee gives the recorded outcome and counterexample."""
    factories = {column.name: column.factory for column in peers.COLUMNS}
    for cell in _sample(recorded):
        result = kit.check_guarantee(factories[cell.sampler], cell.guarantee)
        found = (result.holds, counterexample_text(result.counterexample))
        assert found == (cell.holds, cell.counterexample), (cell.sampler, cell.guarantee)
        assert result.configuration == cell.configuration, (cell.sampler, cell.guarantee)
