"""docs/guides/cli.md: the memory summary and the warnings examples say what the page says
(the docs harness runs every block; these check what they print)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "cli.md"
BLOCKS = [
    block
    for block in re.findall(r"(?<!-->\n)```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    if "--summary" in block or "SamplerWarning" in block
]


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_python_block_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block, str(PAGE), "exec"), {})
    out = capsys.readouterr().out
    if "--summary" in block:
        assert "[memory-beyond-any-machine]" in out and "No problems found" not in out


def test_the_page_counts_the_guarantee_matrix_as_the_study_builds_it() -> None:
    from samplers.testing.registry import GUARANTEES
    from studies.kit.peers import COLUMNS

    said = re.search(
        r"searches\s+(\d+)\s+guarantees\s+on\s+each\s+of\s+its\s+(\d+)\s+samplers", PAGE.read_text()
    )
    assert said, "the page no longer says how many guarantees and samplers the matrix has"
    assert (int(said[1]), int(said[2])) == (len(GUARANTEES), len(COLUMNS))
