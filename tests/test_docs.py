"""The examples in the docs run and say what the code does."""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
from pathlib import Path

import pytest

import samplers.batch_sampler
import samplers.feistel
import samplers.plan
import samplers.sampler
import samplers.wrapper

README = Path(__file__).resolve().parents[1] / "README.md"


DOCUMENTED = [
    samplers.plan,
    samplers.sampler,
    samplers.batch_sampler,
    samplers.wrapper,
    samplers.feistel,
]


@pytest.mark.parametrize("module", DOCUMENTED, ids=lambda m: m.__name__)
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_readme_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README.md has no python example"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(blocks[0], str(README), "exec"), {})
    # Rank 3 of 4 over 10 samples: 3 samples each epoch, one of them padding.
    epochs = [line.split(" ", 1) for line in output.getvalue().splitlines()]
    assert [epoch for epoch, _ in epochs] == ["0", "1"]
    for _, batches in epochs:
        received = [index for batch in ast.literal_eval(batches) for index in batch]
        assert len(received) == 3 and set(received) <= set(range(10))


def test_readme_commands_are_the_ones_ci_runs() -> None:
    text = README.read_text()
    start, end = "<!-- test-command:start -->", "<!-- test-command:end -->"
    assert text.count(start) == text.count(end) == 1
    command = text.split(start)[1].split(end)[0]
    assert "pytest" in command and "ruff check" in command
    assert "-c constraints.txt" in command


def test_readme_shows_the_generated_tail_policy_table() -> None:
    from studies.findings import tail_policies

    text = README.read_text()
    start, end = tail_policies.README_START, tail_policies.README_END
    assert text.count(start) == text.count(end) == 1
    shown = text.split(start)[1].split(end)[0]
    assert shown == "\n" + tail_policies.readme_table(), (
        "README.md's tail-policy table is stale; paste tail_policies.readme_table() between "
        "its markers"
    )
    # The section sits right after the 30-second example.
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[sections.index("30-second example") + 1] == "Which sampler and tail policy"
