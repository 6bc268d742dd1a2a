"""The examples in the docs run and say what the code does."""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import json
import re
import warnings
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest
from torch.utils.data.distributed import DistributedSampler as StockSampler
from torchrun_runs import torchrun

import samplers.batch_sampler
import samplers.feistel
import samplers.plan.epoch
import samplers.sampler
import samplers.tokens.sampler
import samplers.wrapper
from samplers import DistributedBatchSampler, DistributedSampler

README = Path(__file__).resolve().parents[1] / "README.md"


DOCUMENTED = [
    samplers.plan.epoch,
    samplers.sampler,
    samplers.batch_sampler,
    samplers.wrapper,
    samplers.feistel,
    samplers.tokens.sampler,
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


def test_readme_epoch_end_example_yields_nothing_then_the_next_epoch() -> None:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(readme_example("resume-epoch-end"), str(README), "exec"), {})
    lines = output.getvalue().splitlines()
    assert lines[0] == "2 True"
    expected = DistributedSampler(range(10), num_replicas=3, rank=0, seed=0, tail="uneven")
    expected.set_epoch(3)
    assert lines[1:] == ["2 []", f"3 {list(expected)}"]


def test_readme_resume_example_with_a_stateful_dataloader_sees_each_sample_once() -> None:
    pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    resumed = run_resume_example("resume-stateful")
    seen = Counter(resumed)
    for rank in range(4):
        sampler = DistributedBatchSampler(range(100), 4, 4, rank, seed=0, tail="uneven")
        sampler.set_epoch(2)
        seen.update(i for batch in islice(sampler, 5) for i in batch)
    assert seen == Counter(range(100))


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_readme_mesh_example_is_exact_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "mesh_example.py"
    script.write_text(readme_example("mesh"))
    # As the README runs it: --tee 1 keeps each rank's lines whole, labelled "[defaultN]:".
    done = torchrun("--tee", "1", "--log-dir", str(tmp_path / "logs"), str(script), processes=4)
    assert done.returncode == 0, done.stderr
    printed = {}
    for line in done.stdout.splitlines():
        label, printed_line = line.split(":", 1)
        rank, dp, tp, epoch, batches = printed_line.split(" ", 4)
        assert label == f"[default{rank}]"
        assert (int(dp), int(tp)) == divmod(int(rank), 2)  # the mesh is row-major
        printed[int(rank), int(epoch)] = ast.literal_eval(batches)
    assert sorted(printed) == [(rank, epoch) for rank in range(4) for epoch in range(2)]
    for (rank, epoch), batches in printed.items():
        # Exactly the stock sampler's shard of data-parallel rank rank // 2 of 2, for both
        # tensor-parallel peers.
        stock = StockSampler(range(16), num_replicas=2, rank=rank // 2, seed=0)
        stock.set_epoch(epoch)
        share = list(stock)
        assert batches == [share[:4], share[4:]], (rank, epoch)


def readme_command(name: str) -> str:
    """The shell command between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    text = README.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    assert text.count(start) == text.count(end) == 1, name
    block = text.split(start)[1].split(end)[0]
    lines = [line for line in block.strip().splitlines() if not line.startswith("```")]
    assert len(lines) == 1, block
    return lines[0]


def test_readme_commands_are_the_ones_ci_runs() -> None:
    command = readme_command("test-command")
    assert "pytest" in command and "ruff check" in command
    assert "-c constraints.txt" in command
    main = readme_command("main-command")
    assert main.endswith("dsampler report") and "-c constraints.txt" in main
    ci = (README.parent / ".ci" / "run").read_text()
    assert "readme_command test-command" in ci and "readme_command main-command" in ci
    assert "git clone" in ci and "status --porcelain -- reports" in ci


def _extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    return {
        extra: [re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0] for requirement in names]
        for extra, names in project["optional-dependencies"].items()
    }


def test_the_main_command_installs_what_the_report_imports() -> None:
    """Its extras hold every module the report checks for (hypothesis included), and
    the report checks the extras the main command installs."""
    from studies.extras import EXTRAS

    main = readme_command("main-command")
    installed = re.search(r"-e '\.\[([a-z,]+)\]'", main)
    assert installed is not None, main
    extras = installed.group(1).split(",")
    declared = _extras()
    assert sorted(extras) == sorted(EXTRAS) == ["peers", "study"]
    for extra in extras:
        assert sorted(EXTRAS[extra]) == sorted(declared[extra]), extra
    assert "hypothesis" in declared["study"]


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


# --- the framework recipes, each run as torchrun runs it (2 processes, gloo) ------------

#: Seconds one recipe may take under torchrun (2 ranks importing a framework on 2 cores).
RECIPE_TIMEOUT = 240.0


def run_recipe(name: str, directory: Path) -> str:
    """Run README's ``name`` block as ``torchrun --nproc-per-node 2`` in ``directory``;
    what the ranks printed, each rank's lines whole (torchrun writes them to one log file
    per rank, so lines of different ranks cannot interleave)."""
    (directory / "recipe.py").write_text(readme_example(name))
    logs = directory / "logs"
    done = torchrun(
        "--log-dir",
        str(logs),
        "--redirects",
        "1",
        "recipe.py",
        processes=2,
        timeout=RECIPE_TIMEOUT,
        cwd=directory,
        environment={"PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return "".join(path.read_text() for path in sorted(logs.rglob("stdout.log")))


def printed(out: str) -> dict[tuple[int, str], list[list[int]]]:
    """The recipe's ``rank label batches`` lines, by (rank, label); other lines ignored."""
    lines = {}
    for rank, label, batches in re.findall(r"^(\d+) (\d+|resumed) (\[.*\])$", out, re.M):
        lines[int(rank), label] = ast.literal_eval(batches)
    expected = {(rank, label) for rank in (0, 1) for label in ("0", "1")}
    assert expected <= set(lines), out
    return lines


def check_epochs_and_resume(lines: dict[tuple[int, str], list[list[int]]], first: int) -> None:
    """Each epoch holds every sample once; each rank's resumed batches are the rest of its
    epoch 0 after its first 2 batches."""
    samples = Counter(range(first, first + 43))
    for epoch in ("0", "1"):
        got = Counter(i for rank in (0, 1) for batch in lines[rank, epoch] for i in batch)
        assert got == samples, epoch
    assert lines[0, "0"] != lines[0, "1"]  # the epoch was set
    for rank in (0, 1):
        resumed = lines[rank, "resumed"]
        if len(resumed) == len(lines[rank, "0"]):  # the recipe printed the first 2 too
            assert resumed == lines[rank, "0"]
        else:
            assert resumed == lines[rank, "0"][2:]


def recipe_framework(name: str) -> None:
    pytest.importorskip(name, reason=f"{name.split('.')[0]} is not installed")


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_readme_accelerate_recipe_is_exact_and_resumes(tmp_path: Path) -> None:
    recipe_framework("accelerate")
    check_epochs_and_resume(printed(run_recipe("frameworks-accelerate", tmp_path)), 0)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_readme_transformers_recipe_keeps_the_sampler_state_in_checkpoints(
    tmp_path: Path,
) -> None:
    recipe_framework("transformers")
    run_recipe("frameworks-transformers", tmp_path)
    state = json.loads((tmp_path / "out" / "checkpoint-2" / "sampler_state.json").read_text())
    assert state["epoch"] == 0 and state["sampler"] == "DistributedBatchSampler"
    last = json.loads((tmp_path / "out" / "checkpoint-12" / "trainer_state.json").read_text())
    assert last["global_step"] == 12  # 6 steps per epoch, the resumed run finished both


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_readme_lightning_recipe_is_exact_and_checkpoints_the_sampler(tmp_path: Path) -> None:
    recipe_framework("lightning")
    lines = printed(run_recipe("frameworks-lightning", tmp_path))
    samples = Counter(range(43))
    for epoch in ("0", "1"):
        assert Counter(i for r in (0, 1) for b in lines[r, epoch] for i in b) == samples
    assert lines[0, "0"] != lines[0, "1"]
    import torch

    checkpoint = torch.load(tmp_path / "checkpoints" / "epoch=0-step=2.ckpt", weights_only=False)
    (loader,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader["batches"] == 2 and loader["sampler"]["epoch"] == 0


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_readme_nodes_recipe_is_exact_and_resumes(tmp_path: Path) -> None:
    recipe_framework("torchdata.nodes")
    check_epochs_and_resume(printed(run_recipe("frameworks-nodes", tmp_path)), 100)


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_readme_exact_evaluation_example_runs_under_torchrun(tmp_path: Path) -> None:
    from test_observe import torchrun

    script = tmp_path / "evaluate.py"
    script.write_text(readme_example("exact-evaluation"))
    done = torchrun(str(script))
    assert done.returncode == 0, done.stderr
    # Rank 0 alone prints; every sample exactly once, as on one process.
    exact = sum(index % 3 == 0 for index in range(10)) / 10
    assert done.stdout == f"accuracy {exact:.4f} over 10 samples\n"
