"""docs/guides/packing.md: every python block runs (each in a fresh namespace), and the
docstring examples of the cost, packing and collate modules hold."""

from __future__ import annotations

import doctest
import re
import warnings
from pathlib import Path

import pytest

import samplers.tokens.cost
import samplers.tokens.packed

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "packing.md"


def blocks() -> list[str]:
    text = GUIDE.read_text()
    found = re.findall(r"(<!-- run: [^>]*-->\n)?```python\n(.*?)```", text, flags=re.DOTALL)
    return [code for marker, code in found if not marker.startswith("<!-- run: no")]


def test_the_guide_has_examples() -> None:
    assert len(blocks()) >= 4


@pytest.mark.parametrize("number", range(len(blocks())))
def test_each_guide_block_runs(number: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a block's warnings would be unexplained
        exec(compile(blocks()[number], f"{GUIDE.name} block {number + 1}", "exec"), {})


@pytest.mark.parametrize("module", [samplers.tokens.cost, samplers.tokens.packed])
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
