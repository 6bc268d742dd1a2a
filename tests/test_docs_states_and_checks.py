"""The python blocks of docs/guides/states-and-checks.md run as written (each in a fresh
namespace), except the one marked not to run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "states-and-checks.md"
BLOCKS = re.findall(r"(<!-- run: [^>]*-->\n)?```python\n(.*?)```", PAGE.read_text(), re.DOTALL)


def test_the_page_has_its_blocks() -> None:
    assert len(BLOCKS) == 6
    assert [bool(mark) for mark, _ in BLOCKS].count(True) == 1


@pytest.mark.parametrize("code", [code for mark, code in BLOCKS if not mark])
def test_a_block_runs(code: str) -> None:
    exec(compile(code, str(PAGE), "exec"), {"__name__": "__docs__"})
