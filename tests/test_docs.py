"""Every code block of the docs runs, and says what the code does.

The convention, for every page of ``docs/`` and for ``README.md``:

* a ```` ```python ```` block is a complete example, executed in a fresh namespace in a
  temporary directory, on CPU;
* one preceded (on the line directly above its fence) by
  ``<!-- run: torchrun --nproc-per-node N -->`` is run as a script under torchrun, N
  processes, gloo on 127.0.0.1, bounded in time;
* one preceded by ``<!-- file: NAME -->`` is saved as ``NAME`` for the page's bash blocks,
  which must run it;
* a ```` ```bash ```` block runs in ``bash -euo pipefail`` in that directory, with
  ``python``, ``dsampler`` and ``torchrun`` this test's interpreter and this checkout
  (whatever is in ``.venv/bin``);
* a block preceded by ``<!-- run: no, <reason> -->`` is only shown; such blocks are rare
  (:data:`SHOWN_ONLY_BOUND`) and never Python.

A block between ``<!-- name:start -->`` and ``<!-- name:end -->`` whose name is in
:data:`CHECKS` also has its output checked. README's two bash blocks are the main and test
commands, which CI runs (``.ci/run``).
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import pytest
from torch.utils.data.distributed import DistributedSampler as StockSampler
from torchrun_runs import VARIABLES, kill_tree, loopback, torchrun

import samplers.batch_sampler
import samplers.feistel
import samplers.plan.epoch
import samplers.sampler
import samplers.tokens.sampler
import samplers.wrapper
from samplers import DistributedBatchSampler, DistributedSampler

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

#: At most this fraction of the code blocks of docs/ may be shown only; none of them Python.
SHOWN_ONLY_BOUND = 0.25
#: Seconds one block may take: one torchrun run (2 to 4 ranks importing a framework on 2
#: cores), or a bash block (it may start two torchrun jobs).
BLOCK_TIMEOUT = 240.0

MARK = re.compile(r"^<!-- (run|file): (.+) -->$")
TORCHRUN_MARK = re.compile(r"^torchrun --nproc-per-node (\d+)$")
NAME = re.compile(r"^<!-- ([a-z0-9-]+):(start|end) -->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    code: str
    mark: tuple[str, str] | None  # ("run", "no, ...") / ("run", "torchrun ...") / ("file", name)
    name: str | None  # the innermost <!-- name:start --> ... <!-- name:end --> around it

    @property
    def id(self) -> str:
        where = f"{self.page.relative_to(ROOT)}:{self.line}"
        return f"{where}[{self.name}]" if self.name else where

    @property
    def shown_only(self) -> bool:
        return self.mark is not None and self.mark[0] == "run" and self.mark[1].startswith("no")

    @property
    def processes(self) -> int | None:
        """The number of torchrun processes its mark asks for, if any."""
        if self.mark is None or self.mark[0] != "run":
            return None
        found = TORCHRUN_MARK.match(self.mark[1])
        return int(found.group(1)) if found else None


def parse(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, with their marks and names."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    names: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        named = NAME.match(line)
        if named and named.group(2) == "start":
            names.append(named.group(1))
        elif named:
            assert names and names[-1] == named.group(1), f"{page}:{index + 1}: {line}"
            names.pop()
        if line.startswith("```"):
            language = line[3:].strip()
            end = lines.index("```", index + 1)
            above = MARK.match(lines[index - 1]) if index else None
            mark = (above.group(1), above.group(2)) if above else None
            code = "\n".join(lines[index + 1 : end]) + "\n"
            name = names[-1] if names else None
            blocks.append(Block(page, index + 1, language, code, mark, name))
            index = end
        index += 1
    assert not names, f"{page}: unclosed {names}"
    return blocks


BLOCKS = [block for page in PAGES for block in parse(page)]
DOC_BLOCKS = [block for block in BLOCKS if block.page != README]


def runnable(block: Block) -> bool:
    if block.shown_only or (block.mark is not None and block.mark[0] == "file"):
        return False
    return not (block.page == README and block.language == "bash")  # CI runs those


def _files(page: Path) -> list[Block]:
    """The file blocks of ``page`` (``<!-- file: name -->``), written before its bash
    blocks run."""
    return [
        saved
        for saved in BLOCKS
        if saved.page == page and saved.mark is not None and saved.mark[0] == "file"
    ]


def _with_files(block: Block) -> list[str]:
    """The code ``block`` runs: its own, and that of each file block of its page it names."""
    return [block.code, *(f.code for f in _files(block.page) if f.mark and f.mark[1] in block.code)]


def parameters() -> list[object]:
    found = []
    for block in BLOCKS:
        if not runnable(block):
            continue
        starts = block.processes is not None or "torchrun" in block.code or "--launch" in block.code
        # A block that starts a Ray cluster (itself, or by running a file block of its
        # page) runs with the other process tests, one at a time: ray.init() joins a
        # cluster another test started on this machine instead.
        starts = starts or any("ray.init(" in code for code in _with_files(block))
        marks = [pytest.mark.processes] if starts else []
        found.append(pytest.param(block, id=block.id, marks=marks))
    return found


# --- the convention itself ----------------------------------------------------------------


def test_every_block_is_python_or_bash_with_a_known_mark() -> None:
    assert len(DOC_BLOCKS) > 20
    for block in BLOCKS:
        assert block.language in ("python", "bash"), block.id
        if block.mark is None:
            continue
        kind, value = block.mark
        if kind == "file":
            assert block.language == "python" and re.fullmatch(r"[\w-]+\.py", value), block.id
        elif value.startswith("no"):
            assert re.fullmatch(r"no, \S.{8,}", value), f"{block.id}: give the reason: {value}"
        else:
            assert block.processes is not None, f"{block.id}: unknown mark {value!r}"
            assert block.language == "python" and 2 <= block.processes <= 4, block.id


def test_the_torchrun_commands_that_run_rendezvous_on_a_free_port() -> None:
    # --standalone: a free port on localhost, so parallel runs cannot collide on 29500.
    for block in BLOCKS:
        if block.language == "bash" and runnable(block):
            for line in block.code.splitlines():
                assert "torchrun" not in line or "--standalone" in line, block.id


def test_shown_only_blocks_are_rare_and_never_python() -> None:
    shown = [block for block in DOC_BLOCKS if block.shown_only]
    assert [block.id for block in shown if block.language == "python"] == []
    assert len(shown) <= SHOWN_ONLY_BOUND * len(DOC_BLOCKS), [block.id for block in shown]


def test_every_saved_file_is_run_by_a_bash_block_of_its_page() -> None:
    for block in BLOCKS:
        if block.mark is not None and block.mark[0] == "file":
            commands = [b.code for b in BLOCKS if b.page == block.page and b.language == "bash"]
            assert any(block.mark[1] in code for code in commands), block.id


def test_readme_has_only_the_two_commands_as_bash_blocks() -> None:
    bash = [block.name for block in BLOCKS if block.page == README and block.language == "bash"]
    assert bash == ["main-command", "test-command"]


def test_every_check_has_exactly_one_block() -> None:
    named = Counter(block.name for block in BLOCKS if block.name in CHECKS and runnable(block))
    assert named == Counter(list(CHECKS)), "a checked example is missing or shown only"


# --- running the blocks -------------------------------------------------------------------


def shims(directory: Path) -> dict[str, str]:
    """An environment whose ``python``, ``dsampler`` and ``torchrun`` are this interpreter
    with this checkout, whatever ``.venv/bin`` holds (``torchrun`` retried once when its
    ranks fail to form their group, as in the other torchrun tests)."""
    directory.mkdir()
    commands = {
        "python": "",
        "dsampler": "-m studies.console",
        "torchrun": f'"{ROOT / "tests" / "torchrun_runs.py"}"',  # retries joining failures
    }
    for name, module in commands.items():
        shim = directory / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {module} "$@"\n')
        shim.chmod(0o755)
    variables = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    variables.update(
        PATH=f"{directory}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(ROOT),
        GLOO_SOCKET_IFNAME=loopback(),
        PYTHONWARNINGS="ignore",
    )
    return variables


def run_bash(block: Block, directory: Path) -> str:
    for saved in _files(block.page):
        assert saved.mark is not None
        (directory / saved.mark[1]).write_text(saved.code)
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=directory,
        env=shims(directory / ".bin"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to kill what it started with it
    )
    try:
        out, err = process.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)
        process.communicate()
        pytest.fail(f"{block.id} ran past {BLOCK_TIMEOUT} s")
    assert process.returncode == 0, f"{block.id}:\n{out[-2000:]}\n{err[-3000:]}"
    return out


def run_torchrun(block: Block, directory: Path) -> dict[int, str]:
    """What each rank printed (torchrun writes one log file per rank)."""
    (directory / "example.py").write_text(block.code)
    logs = directory / "logs"
    done = torchrun(
        "--log-dir",
        str(logs),
        "--redirects",
        "1",
        "example.py",
        processes=block.processes or 0,
        timeout=BLOCK_TIMEOUT,
        cwd=directory,
        environment={"PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {int(path.parent.name): path.read_text() for path in logs.rglob("stdout.log")}


def run_python(block: Block) -> str:
    output = io.StringIO()
    with contextlib.redirect_stdout(output), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
        exec(compile(block.code, str(block.page), "exec"), {"__name__": "__main__"})
    return output.getvalue()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", parameters())
def test_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.language == "python" and block.name in NEEDS:
        pytest.importorskip(NEEDS[block.name], reason=f"{NEEDS[block.name]} is not installed")
    check = CHECKS.get(block.name or "")
    if block.processes is not None:
        outputs = run_torchrun(block, tmp_path)
        assert sorted(outputs) == list(range(block.processes))
        if check is not None:
            check(outputs, tmp_path)
        return
    if block.language == "bash":
        output = run_bash(block, tmp_path)
    else:
        monkeypatch.chdir(tmp_path)
        output = run_python(block)
    if check is not None:
        check(output, tmp_path)


# --- what the examples print --------------------------------------------------------------


def check_first_run(output: str, directory: Path) -> None:
    # Rank 3 of 4 over 10 samples: 3 samples each epoch, one of them padding.
    epochs = [line.split(" ", 1) for line in output.splitlines()]
    assert [epoch for epoch, _ in epochs] == ["0", "1"]
    for _, batches in epochs:
        received = [index for batch in ast.literal_eval(batches) for index in batch]
        assert len(received) == 3 and set(received) <= set(range(10))


def resumed_counts(output: str) -> Counter[int]:
    """What the example's 3 resumed ranks print, one line each, as counts."""
    lines = [line.split(" ", 1) for line in output.splitlines()]
    assert [rank for rank, _ in lines] == ["0", "1", "2"]
    return Counter(i for _, batches in lines for batch in ast.literal_eval(batches) for i in batch)


def check_resume_dataloader(output: str, directory: Path) -> None:
    # What the 4 ranks consumed before the checkpoint: 5 batches of 4 each, epoch 2.
    seen = resumed_counts(output)
    for rank in range(4):
        sampler = DistributedSampler(range(100), num_replicas=4, rank=rank, seed=0)
        sampler.set_epoch(2)
        seen.update(islice(sampler, 20))
    assert set(seen) == set(range(100))
    assert 0 <= sum(seen.values()) - 100 < 3  # the resumed epoch's padding, on 3 ranks


def check_resume_epoch_end(output: str, directory: Path) -> None:
    lines = output.splitlines()
    assert lines[0] == "2 True"
    expected = DistributedSampler(range(10), num_replicas=3, rank=0, seed=0, tail="uneven")
    expected.set_epoch(3)
    assert lines[1:] == ["2 []", f"3 {list(expected)}"]


def check_resume_stateful(output: str, directory: Path) -> None:
    seen = resumed_counts(output)
    for rank in range(4):
        sampler = DistributedBatchSampler(range(100), 4, 4, rank, seed=0, tail="uneven")
        sampler.set_epoch(2)
        seen.update(i for batch in islice(sampler, 5) for i in batch)
    assert seen == Counter(range(100))


def check_token_batches(output: str, directory: Path) -> None:
    lines = [list(map(int, line.split())) for line in output.splitlines()]
    assert [rank for rank, _, _ in lines] == [0, 1, 2, 3]
    assert len({count for _, count, _ in lines}) == 1
    assert all(0 < largest <= 4096 for _, _, largest in lines)


def check_kit(output: str, directory: Path) -> None:
    assert "exactly-once" in output and "resumes-other-world-size" in output


def check_unshard(output: str, directory: Path) -> None:
    assert output.splitlines() == [
        "uneven 10 result of 0 0",
        "pad 10 result of 0 0",
        "drop 10 result of 0 2",
    ]


def check_tails(output: str, directory: Path) -> None:
    lines = dict(line.split(" [", 1) for line in output.splitlines())
    shares = {key: ast.literal_eval("[" + value) for key, value in lines.items()}
    assert shares["DistributedSampler pad"][3] == [3, 7, 1]  # samples 0 and 1 repeated
    assert sorted(i for share in shares["DistributedSampler drop"] for i in share) == list(range(8))
    assert sorted(i for s in shares["DistributedSampler uneven"] for i in s) == list(range(10))
    tails = ("pad", "drop", "uneven")
    batches = {tail: shares[f"DistributedBatchSampler {tail}"] for tail in tails}
    assert {len(rank) for tail in batches.values() for rank in tail} <= {1, 2}
    for tail, ranks in batches.items():
        assert len({len(rank) for rank in ranks}) == 1, tail  # equal batch counts
    padded = Counter(i for rank in batches["pad"] for batch in rank for i in batch)
    assert sum(padded.values()) - 10 == 6 and set(padded) == set(range(10))
    assert sorted(i for rank in batches["uneven"] for batch in rank for i in batch) == list(
        range(10)
    )


def check_drop_in(output: str, directory: Path) -> None:
    assert output == "the same indices\n"


def check_explain(output: str, directory: Path) -> None:
    # Three answers: two tables around one JSON object (6 samples, 2 ranks, batch size 4:
    # the loader's drop_last leaves each rank nothing).
    assert output.count("Case: implementation=") == 2
    start, end = output.index("\n{") + 1, output.index("\n}\n") + 2
    answer = json.loads(output[start:end])
    assert list(answer) == ["rows", "summary", "verdicts"]
    assert "sampler_kind=batch, tail=uneven" in output[end:]


def check_exact_evaluation(outputs: dict[int, str], directory: Path) -> None:
    # Rank 0 alone prints; every sample exactly once, as on one process.
    exact = sum(index % 3 == 0 for index in range(10)) / 10
    assert outputs == {0: f"accuracy {exact:.4f} over 10 samples\n", 1: "", 2: ""}


def check_mesh(outputs: dict[int, str], directory: Path) -> None:
    printed = {}
    for log_rank, text in outputs.items():
        for line in text.splitlines():
            rank, dp, tp, epoch, batches = line.split(" ", 4)
            assert int(rank) == log_rank
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


def recipe_lines(outputs: dict[int, str]) -> dict[tuple[int, str], list[list[int]]]:
    """The recipe's ``rank label batches`` lines, by (rank, label); other lines ignored."""
    lines = {}
    out = "".join(outputs[rank] for rank in sorted(outputs))
    for rank, label, batches in re.findall(r"^(\d+) (\d+|resumed) (\[.*\])$", out, re.M):
        lines[int(rank), label] = ast.literal_eval(batches)
    expected = {(rank, label) for rank in (0, 1) for label in ("0", "1")}
    assert expected <= set(lines), out
    return lines


def epochs_and_resume(first: int) -> Callable[[dict[int, str], Path], None]:
    """Each epoch holds every sample once; each rank's resumed batches are the rest of its
    epoch 0 after its first 2 batches."""

    def check(outputs: dict[int, str], directory: Path) -> None:
        lines = recipe_lines(outputs)
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

    return check


def check_transformers(outputs: dict[int, str], directory: Path) -> None:
    state = json.loads((directory / "out" / "checkpoint-2" / "sampler_state.json").read_text())
    assert state["epoch"] == 0 and state["sampler"] == "DistributedBatchSampler"
    last = json.loads((directory / "out" / "checkpoint-12" / "trainer_state.json").read_text())
    assert last["global_step"] == 12  # 6 steps per epoch, the resumed run finished both


def check_lightning(outputs: dict[int, str], directory: Path) -> None:
    import torch

    lines = recipe_lines(outputs)
    samples = Counter(range(43))
    for epoch in ("0", "1"):
        assert Counter(i for r in (0, 1) for b in lines[r, epoch] for i in b) == samples
    assert lines[0, "0"] != lines[0, "1"]
    checkpoint = torch.load(directory / "checkpoints" / "epoch=0-step=2.ckpt", weights_only=False)
    (loader,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader["batches"] == 2 and loader["sampler"]["epoch"] == 0


STEP = re.compile(r"rank (\d) epoch (\d) step (\d+) samples (\[[\d, ]*\])")


def check_torchrun_resume(output: str, directory: Path) -> None:
    killed, resumed = output.split("killed (exit status 1)\n")
    before = STEP.findall(killed)
    # 3 ranks, steps 1 to 3 of epoch 0, then killed; the checkpoint is step 2's.
    assert sorted((int(rank), int(step)) for rank, _, step, _ in before) == [
        (rank, step) for rank in range(3) for step in (1, 2, 3)
    ]
    assert re.findall(r"rank (\d) resumed at step 2 in epoch 0", resumed) != []
    assert sorted(re.findall(r"rank (\d) resumed at step 2 in epoch 0", resumed)) == ["0", "1"]
    after = STEP.findall(resumed)
    assert {rank for rank, _, _, _ in after} == {"0", "1"}
    epoch_0 = Counter(i for _, e, step, s in before if int(step) <= 2 for i in ast.literal_eval(s))
    epoch_0.update(i for _, e, _, s in after if e == "0" for i in ast.literal_eval(s))
    assert epoch_0 == Counter(range(60))  # the interrupted epoch: every sample once
    epoch_1 = Counter(i for _, e, _, s in after if e == "1" for i in ast.literal_eval(s))
    assert epoch_1 == Counter(range(60))
    assert "epoch 1 done" in resumed and (directory / "checkpoint.pt").exists()


CHECKS: dict[str, Callable[..., None]] = {
    "first-run": check_first_run,
    "readme-first-run": check_first_run,
    "resume-dataloader": check_resume_dataloader,
    "resume-epoch-end": check_resume_epoch_end,
    "resume-stateful": check_resume_stateful,
    "token-batches": check_token_batches,
    "kit": check_kit,
    "unshard": check_unshard,
    "tails": check_tails,
    "drop-in": check_drop_in,
    "explain": check_explain,
    "exact-evaluation": check_exact_evaluation,
    "mesh": check_mesh,
    "frameworks-accelerate": epochs_and_resume(0),
    "frameworks-transformers": check_transformers,
    "frameworks-lightning": check_lightning,
    "frameworks-nodes": epochs_and_resume(100),
    "torchrun-resume": check_torchrun_resume,
}

#: The module a block needs, for the blocks that use an optional framework.
NEEDS = {
    "resume-stateful": "torchdata.stateful_dataloader",
    "frameworks-accelerate": "accelerate",
    "frameworks-transformers": "transformers",
    "frameworks-lightning": "lightning",
    "frameworks-nodes": "torchdata.nodes",
}


# --- the docstrings' examples -------------------------------------------------------------

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


# --- the README's commands and table ------------------------------------------------------


def readme_command(name: str, page: Path = README) -> str:
    """The shell command between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    text = page.read_text()
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
    assert ".venv/bin/mkdocs build --strict" in command
    main = readme_command("main-command")
    assert main.endswith("dsampler report") and "-c constraints.txt" in main
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_command test-command" in ci and "readme_command main-command" in ci
    assert "git clone" in ci and "status --porcelain -- reports" in ci
    assert "apt-get install" in ci and "chromium" in ci  # for tests/test_site.py


def test_the_commands_come_first_and_the_readme_is_short() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[0] == "Set-up"
    assert text.index("<!-- main-command:start -->") < text.index("```python")
    assert "source .venv/bin/activate" in text


def test_getting_started_shows_the_readme_commands() -> None:
    page = (DOCS / "getting-started.md").read_text()
    for name in ("main-command", "test-command"):
        assert f"\n{readme_command(name)}\n" in page, name


def _extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        extra: [re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0] for requirement in names]
        for extra, names in project["optional-dependencies"].items()
    }


def test_the_main_command_installs_what_the_report_imports() -> None:
    """Its extras hold every module the report checks for (hypothesis included), and
    the report checks the extras the main command installs."""
    from studies.common.extras import EXTRAS

    main = readme_command("main-command")
    installed = re.search(r"-e '\.\[([a-z,]+)\]'", main)
    assert installed is not None, main
    extras = installed.group(1).split(",")
    declared = _extras()
    assert sorted(extras) == sorted(EXTRAS) == ["peers", "study"]
    for extra in extras:
        assert sorted(EXTRAS[extra]) == sorted(declared[extra]), extra
    assert "hypothesis" in declared["study"]


def test_the_test_extra_installs_the_docs_tools() -> None:
    declared = _extras()
    assert {"mkdocs", "mkdocs-material", "mkdocstrings-python"} <= set(declared["docs"])
    assert "dsampler" in declared["test"]
    project = (ROOT / "pyproject.toml").read_text()
    assert '"dsampler[study,docs]"' in project
    assert {"build", "playwright"} <= set(declared["test"])
    constraints = (ROOT / "constraints.txt").read_text().split()
    pinned = {line.split("==")[0].lower() for line in constraints}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings-python", "build", "playwright"} <= pinned


@pytest.mark.parametrize("page", [README, DOCS / "guides" / "tail-policies.md"], ids=str)
def test_the_generated_tail_policy_table_is_current(page: Path) -> None:
    from studies.findings import tail_policies

    text = page.read_text()
    start, end = tail_policies.README_START, tail_policies.README_END
    assert text.count(start) == text.count(end) == 1
    shown = text.split(start)[1].split(end)[0]
    assert shown == "\n" + tail_policies.readme_table(), (
        f"{page.name}'s tail-policy table is stale; paste tail_policies.readme_table() "
        "between its markers"
    )


def test_readme_tail_table_sits_right_after_the_example() -> None:
    sections = re.findall(r"^## (.+)$", README.read_text(), flags=re.MULTILINE)
    assert sections[sections.index("30-second example") + 1] == "Which sampler and tail policy"


# --- sentences that name what the code does -----------------------------------------------


def test_the_kit_names_the_extra_that_holds_hypothesis() -> None:
    import samplers.testing

    (holding,) = [name for name, names in _extras().items() if "hypothesis" in names]
    assert holding == "study"
    assert f"``{holding}`` extra (hypothesis" in " ".join(samplers.testing.__doc__.split())


def test_the_resume_guide_names_the_state_format_versions() -> None:
    from samplers.state import STATE_VERSION

    text = " ".join((DOCS / "guides" / "resume.md").read_text().split())
    assert f"the current format is version {STATE_VERSION}" in text
    assert "states of version 1" in text
    assert STATE_VERSION == 2
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    for page in PAGES:  # the package's version is not the state's
        assert f"dsampler {version.group(1)}" not in page.read_text(), page


def test_the_first_example_is_the_same_everywhere_it_is_shown() -> None:
    readme = [b.code for b in BLOCKS if b.name == "readme-first-run"]
    started = [b.code for b in BLOCKS if b.name == "first-run"]
    home = [b.code for b in BLOCKS if b.page == DOCS / "index.md" and b.language == "python"]
    assert len(readme) == len(started) == len(home) == 1
    assert readme == started == home
