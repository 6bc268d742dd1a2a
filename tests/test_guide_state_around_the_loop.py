"""Every python block of docs/guides/state-around-the-loop.md runs, each in a fresh namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "state-around-the-loop.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_page_has_its_examples() -> None:
    assert len(blocks()) == 7


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:DistributedSampler is iterated again:UserWarning")
@pytest.mark.parametrize("number", range(7))
def test_each_python_block_runs(number: int) -> None:
    code = blocks()[number]
    exec(compile(code, f"{PAGE.name}[{number}]", "exec"), {"__name__": "__main__"})
