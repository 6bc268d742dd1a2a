"""Every warning the samplers raise is a ``SamplerWarning``, and the test run turns one
that a test does not assert into an error, so the run ends without unexplained warnings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import samplers
from samplers import SamplerWarning
from samplers.resharding import ReshardingWarning

SAMPLERS = Path(samplers.__file__).resolve().parent
CATEGORIES = {"SamplerWarning", "ReshardingWarning"}


def _warn_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.warn"
    ]


def test_every_warning_of_the_samplers_is_a_sampler_warning() -> None:
    found = 0
    for path in sorted(SAMPLERS.rglob("*.py")):
        for call in _warn_calls(path):
            found += 1
            given = [k.value for k in call.keywords if k.arg == "category"] + call.args[1:2]
            names = {ast.unparse(category).rsplit(".", 1)[-1] for category in given}
            assert names and names <= CATEGORIES, f"{path.name}:{call.lineno} warns {names}"
    assert found >= 10  # the samplers' warnings, not an empty scan
    assert issubclass(ReshardingWarning, SamplerWarning)
    assert issubclass(SamplerWarning, UserWarning)  # filters on UserWarning still apply


def test_an_unasserted_sampler_warning_fails_the_run(request: pytest.FixtureRequest) -> None:
    assert "error::samplers.SamplerWarning" in request.config.getini("filterwarnings")
    with pytest.raises(SamplerWarning, match="gives every rank 0 samples"):
        samplers.DistributedSampler(range(1), 2, 0, drop_last=True)
    with pytest.warns(SamplerWarning, match="gives every rank 0 samples"):  # asserted: fine
        samplers.DistributedSampler(range(1), 2, 0, drop_last=True)
