"""The examples in the docs run and say what the code does."""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
import warnings
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest

import samplers.batch_sampler
import samplers.feistel
import samplers.plan
import samplers.sampler
import samplers.token_sampler
import samplers.wrapper
from samplers import DistributedBatchSampler, DistributedSampler

README = Path(__file__).resolve().parents[1] / "README.md"


DOCUMENTED = [
    samplers.plan,
    samplers.sampler,
    samplers.batch_sampler,
    samplers.wrapper,
    samplers.feistel,
    samplers.token_sampler,
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


def readme_example(name: str) -> str:
    """The python block between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    text = README.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    assert text.count(start) == text.count(end) == 1, name
    blocks = re.findall(r"```python\n(.*?)```", text.split(start)[1].split(end)[0], re.DOTALL)
    assert len(blocks) == 1, name
    return blocks[0]


def run_resume_example(name: str) -> Counter[int]:
    """Run the example; what its 3 resumed ranks print, one line each, as counts."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
        exec(compile(readme_example(name), str(README), "exec"), {})
    lines = [line.split(" ", 1) for line in output.getvalue().splitlines()]
    assert [rank for rank, _ in lines] == ["0", "1", "2"]
    return Counter(i for _, batches in lines for batch in ast.literal_eval(batches) for i in batch)


def test_readme_resume_example_with_a_dataloader_finishes_the_epoch() -> None:
    resumed = run_resume_example("resume-dataloader")
    # What the 4 ranks consumed before the checkpoint: 5 batches of 4 each, epoch 2.
    seen = Counter(resumed)
    for rank in range(4):
        sampler = DistributedSampler(range(100), num_replicas=4, rank=rank, seed=0)
        sampler.set_epoch(2)
        seen.update(islice(sampler, 20))
    assert set(seen) == set(range(100))
    assert 0 <= sum(seen.values()) - 100 < 3  # the resumed epoch's padding, on 3 ranks


def test_readme_resume_example_with_a_stateful_dataloader_sees_each_sample_once() -> None:
    pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    resumed = run_resume_example("resume-stateful")
    seen = Counter(resumed)
    for rank in range(4):
        sampler = DistributedBatchSampler(range(100), 4, 4, rank, seed=0, tail="uneven")
        sampler.set_epoch(2)
        seen.update(i for batch in islice(sampler, 5) for i in batch)
    assert seen == Counter(range(100))


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


def test_readme_token_batch_example_gives_equal_counts_within_the_budget() -> None:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(readme_example("token-batches"), str(README), "exec"), {})
    lines = [list(map(int, line.split())) for line in output.getvalue().splitlines()]
    assert [rank for rank, _, _ in lines] == [0, 1, 2, 3]
    assert len({count for _, count, _ in lines}) == 1
    assert all(0 < largest <= 4096 for _, _, largest in lines)
