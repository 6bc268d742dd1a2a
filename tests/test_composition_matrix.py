"""The composition matrix (tests/composition.py): sampler x loader x checkpoint point x
state x resume world size, every cell exactly once or clearly refused.

CI runs a sample of the cells drawn with a fixed seed (every sampler, loader, point, state
and world size among them); ``DSAMPLER_COMPOSITION=full`` runs every cell. The terminal
summary counts the cells run and how each ended.

The one refusal expected: the sampler's own ``state_dict()`` while a ``torchdata.nodes``
pipeline reads it (its prefetchers are ahead of the loop; the pipeline's state is exact).
Any other refusal fails, as does any skip or repeat.
"""

from __future__ import annotations

import os

import composition
import pytest

pytest.importorskip("torchdata.nodes", reason="torchdata is not installed")

#: ``full``: every cell; otherwise a fixed sample of this many.
VARIABLE = "DSAMPLER_COMPOSITION"
SAMPLED = 96

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

CELLS = (
    composition.all_cells()
    if os.environ.get(VARIABLE) == "full"
    else composition.sampled_cells(SAMPLED)
)


@pytest.mark.parametrize("cell", CELLS, ids=[cell.id for cell in CELLS])
def test_every_cell_is_exactly_once_or_clearly_refused(
    cell: composition.Cell, record_property: pytest.RecordProperty
) -> None:
    ended = composition.run_cell(cell)
    record_property("composition", ended.split(":")[0])
    if ended != "exactly once":
        assert cell.loader == "nodes" and cell.state == "sampler", ended
        assert "read by a torchdata.nodes pipeline" in ended
        assert "loader.state_dict() of its nodes.Loader" in ended


def test_the_sample_covers_every_value_of_every_axis() -> None:
    sample = composition.sampled_cells(SAMPLED)
    assert len(sample) == SAMPLED
    for field, values in (
        ("sampler", composition.SAMPLERS),
        ("loader", composition.LOADERS),
        ("point", composition.POINTS),
        ("state", composition.STATES),
        ("world", composition.NEW_WORLDS),
    ):
        assert {getattr(cell, field) for cell in sample} == set(values), field
    assert sample == composition.sampled_cells(SAMPLED)  # the same cells every run
    # Every sampler x loader x point x world size with the sampler's state, and again
    # with the loader's state for the 4 loaders that have one.
    assert len(composition.STATEFUL) == 4
    per_sampler = len(composition.LOADERS) * 4 * 3 + 4 * 4 * 3
    assert len(composition.all_cells()) == len(composition.SAMPLERS) * per_sampler
