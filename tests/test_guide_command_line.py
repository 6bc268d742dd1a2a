"""docs/guides/command-line.md: every python block runs (until the docs harness runs them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "command-line.md"
BLOCKS = re.findall(r"(?<!-->\n)```python\n(.*?)```", PAGE.read_text(), re.DOTALL)


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_python_block_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block, str(PAGE), "exec"), {})
    out = capsys.readouterr().out
    if "--summary" in block:
        assert "[memory-beyond-any-machine]" in out and "No problems found" not in out
