"""``dsampler explain`` and ``observe`` for the token, packed and mixture samplers and the
wrapper (``--sampler tokens|packed|mixture|...``), and help without the study extra.

Every number the command prints is checked against the sampler itself, built here with
the library's own API: the batches each rank gets, their tokens and cost, the rows read
back with ``row_starts`` and their fill, each source's counts against the proportions.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader, RandomSampler

from samplers import (
    DistributedMixtureBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
    TokenCost,
)
from samplers.tokens.packing import row_starts
from studies import sampler_cli
from studies.cli import main
from studies.console import STUDY_MODULES
from studies.core import sampler_runs
from studies.core.sampler_runs import draw_lengths

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = [8, 1, 8, 6, 2, 4, 4, 2, 6, 7, 3, 5]
TOKENS = ["explain", "--sampler", "tokens", "--world-size", "2", "--max-tokens", "16"]


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


def batches_of(sampler: Any, epochs: int = 2) -> list[list[int]]:
    """What the sampler yields, epoch by epoch with set_epoch, as a loop sees it."""
    found = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        found += [list(batch) for batch in sampler]
    return found


def listed(rows: list[dict[str, Any]], rank: int) -> list[list[int]]:
    return [row["indices"] for row in rows if row["rank"] == rank]


def test_the_kinds_are_the_runs_kinds() -> None:
    """The command line names them without importing torch; they must agree."""
    assert sampler_cli.KINDS == sampler_runs.KINDS
    assert sampler_cli.MIXTURES == sampler_runs.MIXTURE_KINDS
    assert sampler_cli.INDEX_KINDS == sampler_runs.INDEX_KINDS


def test_token_batches_with_their_tokens_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    text = ",".join(map(str, LENGTHS))
    found = answer(capsys, *TOKENS, "--lengths", text)
    rows = found["rows"]
    for rank in range(2):
        sampler = DistributedTokenBatchSampler(LENGTHS, 16, num_replicas=2, rank=rank)
        assert listed(rows, rank) == batches_of(sampler)
    model = TokenCost("padded")
    for row in rows:
        lengths = [LENGTHS[i] for i in row["indices"]]
        assert row["tokens"] == sum(lengths)
        assert row["cost"] == model.batch(lengths) <= 16
        assert row["size"] == len(lengths)
    assert found["sampler"]["sampler"] == "DistributedTokenBatchSampler"
    assert found["sampler"]["lengths"] == [text] and found["sampler"]["tail"] == "uneven"
    for record in found["ranks"]:
        mine = [
            r
            for r in rows
            if r["epoch"] == record["epoch"] and record["rank"] in ("all", r["rank"])
        ]
        assert record["batches"] == len(mine)
        assert record["tokens"] == sum(r["tokens"] for r in mine)
        assert record["largest_cost"] == max(r["cost"] for r in mine)
    assert found["checks"][2] == "Every batch costs at most max_tokens=16 (cost padded)."
    assert "every sample exactly once" in found["checks"][1]


def test_a_quadratic_cost_is_the_samplers(capsys: pytest.CaptureFixture[str]) -> None:
    found = answer(
        capsys, *TOKENS, "--lengths", ",".join(map(str, LENGTHS)), "--cost", "sum,quadratic=8"
    )
    model = TokenCost("sum", quadratic=8)
    sampler = DistributedTokenBatchSampler(LENGTHS, 16, num_replicas=2, rank=0, cost=model)
    assert listed(found["rows"], 0) == batches_of(sampler)
    for row in found["rows"]:
        assert row["cost"] == pytest.approx(model.batch([LENGTHS[i] for i in row["indices"]]))
    assert found["sampler"]["cost"] == "sum, quadratic=8"


def test_drawn_and_filed_lengths_are_the_ones_the_sampler_gets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    drawn = answer(capsys, *TOKENS, "--lengths", "lognormal:6:0.5", "--dataset-size", "30")
    lengths = draw_lengths("lognormal", (6.0, 0.5), 30, 0)
    assert lengths == draw_lengths("lognormal", (6.0, 0.5), 30, 0)  # the same every time
    assert all(length >= 1 for length in lengths)
    sampler = DistributedTokenBatchSampler(lengths, 16, num_replicas=2, rank=1)
    assert listed(drawn["rows"], 1) == batches_of(sampler)
    uniform = draw_lengths("uniform", (3.0, 5.0), 100, 0)
    assert set(uniform) == {3, 4, 5}

    saved = tmp_path / "lengths.txt"
    saved.write_text("# one per sample\n" + "\n".join(f"{n}," for n in LENGTHS) + "\n")
    filed = answer(capsys, *TOKENS, "--lengths", str(saved))
    listing = answer(capsys, *TOKENS, "--lengths", ",".join(map(str, LENGTHS)))
    assert filed["rows"] == listing["rows"]
    spaced = answer(capsys, *TOKENS, "--lengths", ", ".join(map(str, LENGTHS)))
    assert spaced["rows"] == listing["rows"]  # "8, 1, 8" as written in a shell, quoted


def test_packed_rows_and_their_fill(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "--sampler", "packed", "--world-size", "2", "--max-length", "8"]
    found = answer(capsys, *argv, "--rows-per-batch", "2", "--lengths", "5,3,8,2,6,4,7,1,9")
    lengths = [5, 3, 8, 2, 6, 4, 7, 1, 9]
    with pytest.warns(UserWarning, match="longer than max_length=8"):
        sampler = DistributedPackedBatchSampler(lengths, 8, 2, num_replicas=2, rank=0)
    assert listed(found["rows"], 0) == batches_of(sampler)
    for row in found["rows"]:
        batch = [lengths[i] for i in row["indices"]]
        cuts = [*row_starts(batch, 8), len(batch)]
        assert row["rows"] == [row["indices"][a:b] for a, b in pairwise(cuts)]
        assert row["row_tokens"] == [sum(lengths[i] for i in r) for r in row["rows"]]
        assert row["fill"] == [round(t / 8, 3) for t in row["row_tokens"]]
        assert len(row["rows"]) <= 2
    over = sum(tokens > 8 for row in found["rows"] for tokens in row["row_tokens"])
    assert over == 2  # the document of 9 tokens, in each of the two epochs
    assert found["checks"][2].startswith(f"{over} of ")
    assert "--split long cuts them" in found["checks"][2]
    assert any("longer than max_length=8" in said for said in found["warnings"])

    cut = answer(
        capsys, *argv, "--rows-per-batch", "2", "--lengths", "5,3,8,2,6,4,7,1,9", "--split", "long"
    )
    assert cut["sampler"]["pieces"] == 10  # the document of 9 tokens is cut in two
    assert all(tokens <= 8 for row in cut["rows"] for tokens in row["row_tokens"])
    assert "every piece exactly once" in cut["checks"][1]
    assert cut["warnings"] == []


def test_mixture_batches_count_their_sources_against_the_weights(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["explain", "--sampler", "mixture-batch", "--source-sizes", "30,20"]
    found = answer(capsys, *argv, "--weights", "0.7,0.3", "--world-size", "2", "--batch-size", "4")
    datasets = [range(30), range(20)]
    sampler = DistributedMixtureBatchSampler(datasets, [0.7, 0.3], 4, num_replicas=2, rank=1)
    assert listed(found["rows"], 1) == batches_of(sampler)
    bounds = [0, 30, 50]
    for row in found["rows"]:
        sources = [bisect.bisect_right(bounds, i) - 1 for i in row["indices"]]
        assert row["sources"] == [sources.count(0), sources.count(1)]
    assert found["targets"] == {"draws": [float(p) for p in sampler.proportions]}
    together = [r for r in found["ranks"] if r["rank"] == "all"]
    for record in together:
        rows = [row for row in found["rows"] if row["epoch"] == record["epoch"]]
        assert record["sources"] == [sum(row["sources"][d] for row in rows) for d in (0, 1)]
        assert record["samples"] == sum(record["sources"])
    gap = max(
        abs(r["sources"][d] / r["samples"] - found["targets"]["draws"][d])
        for r in together
        for d in (0, 1)
    )
    assert f"largest gap {gap:.3f}" in found["checks"][-1]


def test_packed_mixture_tokens_per_source_with_lengths_per_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["explain", "--sampler", "packed-mixture", "--source-sizes", "4,6"]
    argv += ["--weights", "17,24", "--lengths", "7,3,5,2", "--lengths", "4,4,4,4,4,4"]
    found = answer(capsys, *argv, "--max-length", "8", "--rows-per-batch", "2", "--world-size", "1")
    lengths = [7, 3, 5, 2, 4, 4, 4, 4, 4, 4]
    sampler = DistributedPackedMixtureSampler(
        [range(4), range(6)], [17, 24], lengths, 8, 2, num_replicas=1, rank=0
    )
    assert listed(found["rows"], 0) == batches_of(sampler)
    for row in found["rows"]:
        tokens = [0, 0]
        for index in row["indices"]:
            tokens[int(index >= 4)] += lengths[index]
        assert row["source_tokens"] == tokens
    assert found["targets"]["tokens"] == [float(p) for p in sampler.token_proportions]
    epoch = next(r for r in found["ranks"] if r["rank"] == "all" and r["epoch"] == 0)
    assert epoch["source_tokens"] == [17, 24]  # every document once: the weights' tokens

    text = main([*argv, "--max-length", "8", "--rows-per-batch", "2", "--world-size", "1"])
    out = capsys.readouterr().out
    assert text == 0
    assert "Sources: tokens (share), against the target shares" in out
    assert "17 (0.415)" in out  # 17 of the epoch's 41 tokens


def test_the_wrapper_and_the_mixture_of_indices_go_through_the_loaders_batches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = answer(
        capsys, "explain", "--sampler", "wrapper", "--dataset-size", "10", "--world-size", "3",
        "--batch-size", "2", "--loader-drop-last", "--epochs", "1",
    )  # fmt: skip
    wrapped = DistributedSamplerWrapper(RandomSampler(range(10)), 3, 2, seed=0)
    loader = DataLoader(range(10), batch_size=2, sampler=wrapped, drop_last=True)
    wrapped.set_epoch(0)
    assert listed(found["rows"], 2) == [batch.tolist() for batch in loader]
    assert "2 repeated" in found["checks"][1]  # 4 per rank: 2 of 10 padded, 12 handed out
    mixture = answer(
        capsys, "explain", "--sampler", "mixture", "--source-sizes", "6,100,3", "--weights",
        "3,1,2", "--epoch-length", "12", "--world-size", "2", "--batch-size", "3",
    )  # fmt: skip
    assert [len(listed(mixture["rows"], rank)) for rank in (0, 1)] == [4, 4]
    assert mixture["targets"]["draws"] == [0.5, 1 / 6, 1 / 3]


def test_csv_carries_the_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "--sampler", "packed", "--world-size", "2", "--max-length", "8"]
    argv += ["--rows-per-batch", "2", "--lengths", "5,3,8,2,6,4,7,1"]
    rows = answer(capsys, *argv)["rows"]
    assert main([*argv, "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(table[0]) == [*rows[0]]
    decoded = [{name: json.loads(value) for name, value in row.items()} for row in table]
    assert decoded == rows


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-tokens", "16"], "--max-tokens is for --sampler tokens or mixture-tokens, got"),
        (["--sampler", "tokens"], "--sampler tokens needs --lengths"),
        (["--sampler", "tokens", "--lengths", "1,2"], "--sampler tokens needs --max-tokens"),
        (
            ["--sampler", "tokens", "--lengths", "1,2", "--max-tokens", "4", "--batch-size", "2"],
            "--batch-size does not apply to --sampler tokens, which takes --lengths",
        ),
        (["--sampler", "tokens", "--lengths", "uniform:5"], "invalid lengths 'uniform:5': uniform"),
        (["--sampler", "tokens", "--lengths", "uniform:9:3"], "whole numbers 1 <= LO <= HI"),
        (
            ["--sampler", "tokens", "--max-tokens", "16", "--lengths", "8,1,-8"],
            "invalid lengths '8,1,-8': '-8' is not a length",
        ),
        (
            ["--sampler", "tokens", "--max-tokens", "16", "--lengths", "8,1.5,8"],
            "invalid lengths '8,1.5,8': '1.5' is not a length",
        ),
        (["--sampler", "tokens", "--lengths", "lognormal:0:1"], "lognormal takes MEDIAN >= 1"),
        (
            ["--sampler", "tokens", "--max-tokens", "4", "--lengths", "no-such-file.txt"],
            "--lengths no-such-file.txt: no such file",
        ),
        (
            [
                "--sampler",
                "tokens",
                "--max-tokens",
                "4",
                "--lengths",
                "1,2,3",
                "--dataset-size",
                "4",
            ],
            "--dataset-size 4 disagrees with --lengths 1,2,3, which holds 3 lengths",
        ),
        (
            ["--sampler", "tokens", "--max-tokens", "4", "--lengths", "lognormal:40:1"],
            "--lengths lognormal:40:1 draws --dataset-size lengths: give --dataset-size",
        ),
        (
            ["--sampler", "tokens", "--max-tokens", "0", "--lengths", "1,2"],
            "--max-tokens must be at least 1, got 0",
        ),
        (["--sampler", "tokens", "--cost", "pad"], "invalid cost 'pad': give padded or sum"),
        (
            ["--sampler", "tokens", "--max-tokens", "4", "--lengths", "1", "--drop-last"],
            "--drop-last is for --sampler index; --sampler tokens takes --tail drop",
        ),
        (
            ["--sampler", "tokens", "--max-tokens", "4", "--lengths", "1", "--summary"],
            "--summary is for --sampler index or batch",
        ),
        (
            ["--sampler", "wrapper", "--implementation", "torch", "--batch-size", "2"],
            "--sampler wrapper is ours (implementation samplers), got --implementation torch",
        ),
        (
            [
                "--sampler",
                "packed",
                "--lengths",
                "1",
                "--max-length",
                "8",
                "--rows-per-batch",
                "1",
                "--cost",
                "padded",
            ],
            "--cost padded does not fit packed rows",
        ),
        (
            [
                "--sampler",
                "packed",
                "--lengths",
                "1",
                "--max-length",
                "512",
                "--rows-per-batch",
                "1",
                "--split",
                "600",
            ],
            "--split 600 is longer than --max-length 512",
        ),
        (["--sampler", "packed", "--split", "0"], "invalid split '0': give long or a piece"),
        (["--sampler", "mixture", "--weights", "0.7,x"], "invalid weights '0.7,x': 'x' is not"),
        (["--sampler", "mixture", "--weights", "0,0"], "invalid weights '0,0': all are 0"),
        (["--sampler", "mixture", "--source-sizes", "30,x"], "invalid size 'x'"),
        (
            [
                "--sampler",
                "mixture",
                "--source-sizes",
                "30,20",
                "--weights",
                "1,1,1",
                "--batch-size",
                "2",
            ],
            "--weights holds 3 weights for 2 sources (--source-sizes 30,20)",
        ),
        (
            [
                "--sampler",
                "mixture",
                "--source-sizes",
                "30,20",
                "--weights",
                "1,1",
                "--batch-size",
                "2",
                "--dataset-size",
                "10",
            ],
            "--dataset-size 10 disagrees with --source-sizes 30,20, 50 samples",
        ),
        (
            [
                "--sampler",
                "mixture-tokens",
                "--source-sizes",
                "2,2",
                "--weights",
                "1,1",
                "--max-tokens",
                "9",
                "--lengths",
                "1,2",
                "--lengths",
                "1,2",
                "--lengths",
                "3",
            ],
            "--lengths is given 3 times for 2 sources",
        ),
        (
            [
                "--sampler",
                "mixture-tokens",
                "--source-sizes",
                "2,2",
                "--weights",
                "1,1",
                "--max-tokens",
                "9",
                "--lengths",
                "1,2,3",
            ],
            "--lengths 1,2,3 holds 3 lengths, the sources' samples are 4",
        ),
        (
            [
                "--sampler",
                "mixture",
                "--source-sizes",
                "3,2",
                "--weights",
                "1,1",
                "--batch-size",
                "2",
                "--epoch-length",
                "0",
            ],
            "--epoch-length must be at least 1, got 0",
        ),
        (
            [
                "--sampler",
                "tokens",
                "--max-tokens",
                "4",
                "--lengths",
                "uniform:1:2",
                "--dataset-size",
                "100001",
            ],
            "--epochs must be at most 200,000, got 100001 x 2 = 200,002",
        ),
        (
            [
                "--sampler",
                "packed",
                "--max-length",
                "200000",
                "--rows-per-batch",
                "1",
                "--lengths",
                "200000",
                "--split",
                "1",
            ],
            "the pieces --split cuts them into, a mixture's --epoch-length) times --epochs "
            "must be at most 200,000, got 200000 x 2",
        ),
        (
            [
                "--sampler",
                "packed",
                "--max-length",
                "1000",
                "--rows-per-batch",
                "1",
                "--lengths",
                "uniform:1000:1000",
                "--dataset-size",
                "1000",
                "--split",
                "1",
            ],
            "got 1000000 x 2 = 2,000,000",  # the pieces of drawn lengths, counted once drawn
        ),
        (
            [
                "--sampler",
                "mixture",
                "--source-sizes",
                "3,2",
                "--weights",
                "1,1",
                "--batch-size",
                "2",
                "--epoch-length",
                "1e6",
            ],
            "got 1000000 x 2 = 2,000,000",
        ),
    ],
)
def test_bad_options_name_the_option_and_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["explain", "--world-size", "2", *argv])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert message in err
    assert "Traceback" not in err


def test_a_file_that_is_not_lengths_is_named_with_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "lengths.txt"
    saved.write_text("4, 5\n6 x\n")
    code = main([*TOKENS, "--lengths", str(saved)])
    assert code == 2
    assert f"--lengths {saved}: line 2 holds 'x', not a length" in capsys.readouterr().err


_HIDDEN = """
import sys
for name in {names!r}:
    sys.modules[name] = None  # as if the study extra were not installed
from studies.console import main
code = main(sys.argv[1:])
print("EXIT", code, "TORCH", "torch" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--help"], 0),
        (["explain", "--help"], 0),
        (["observe", "-h"], 0),
        ([], 2),  # dsampler alone prints its help, with or without the extra
        (["explain", "--dataset-size", "4", "--world-size", "2", "--batch-size", "2"], 1),
    ],
)
def test_help_works_without_the_study_extra(argv: list[str], status: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HIDDEN.format(names=sorted(STUDY_MODULES)), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stderr.splitlines()[-1] == f"EXIT {status} TORCH False", done.stderr
    hint = (
        "install the study extra: pip install -e '.[study]' in the clone, or pip install -e "
        f"'{ROOT}[study]'"
    )
    assert hint in done.stderr
    assert "Traceback" not in done.stderr
    if status == 1:
        assert done.stdout == "" and "dsampler: error: " in done.stderr
    else:
        assert done.stdout.startswith("usage: dsampler"), done.stdout
        assert "dsampler: note: the commands need the study extra" in done.stderr
    if argv[:1] == ["explain"] and status == 0:
        assert "--lengths" in done.stdout and "--source-sizes" in done.stdout


_IMPORTED = """
import sys
from studies.console import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "pandas", "samplers") if m in sys.modules)
print("EXIT", code, "IMPORTED", heavy, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        [*TOKENS, "--lengths", "uniform:9:3"],
        [*TOKENS, "--lengths", "no-such-file.txt"],
        [*TOKENS[:3], "--world-size", "2", "--lengths", "1,2"],
        ["explain", "--sampler", "mixture", "--world-size", "2", "--weights", "0,0"],
        ["observe", "--sampler", "packed", "--lengths", "1", "--max-length", "4"],
    ],
)
def test_the_new_options_errors_are_answered_before_torch(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stderr.splitlines()[-1] == "EXIT 2 IMPORTED []", done.stderr


def test_observe_outside_torchrun_names_the_dsampler_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    code = main(["observe", "--sampler", "tokens", "--lengths", "1,2", "--max-tokens", "4"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "start it as: torchrun --nproc-per-node N --no-python dsampler observe ..." in err


def test_observes_help_gives_the_dsampler_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "torchrun --standalone --nproc-per-node 3 --no-python dsampler observe" in out
    assert "studies.cli" not in out


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_observe_under_torchrun_prints_what_explain_prints() -> None:
    from torchrun_runs import TORCHRUN_TIMEOUT, torchrun

    options = ["--sampler", "packed-mixture", "--source-sizes", "6,4", "--weights", "1,1"]
    options += ["--lengths", "uniform:2:9", "--max-length", "12", "--rows-per-batch", "2"]
    options += ["--format", "json"]
    done = torchrun("-m", "studies.cli", "observe", *options, processes=2, timeout=TORCHRUN_TIMEOUT)
    assert done.returncode == 0, done.stderr
    observed = json.loads(done.stdout)
    batches = len(observed["rows"])
    assert observed["agreement"] == {
        "simulated_rows": batches,
        "processes_rows": batches,
        "match": True,
    }
    assert observed["backend"] == "gloo"
    assert {row.pop("source") for row in observed["rows"]} == {"processes"}
    explained = subprocess.run(
        [sys.executable, "-m", "studies.cli", "explain", *options, "--world-size", "2"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=TORCHRUN_TIMEOUT,
    )
    expected = json.loads(explained.stdout)
    for key in ("sampler", "rows", "ranks", "targets", "checks"):
        assert observed[key] == expected[key], key


def test_the_listing_limits_are_the_commands() -> None:
    """The bounds the new samplers share with the index and batch samplers."""
    from studies import cli

    expected = sampler_cli.Limits(
        cli.EXPLAIN_MAX_LISTED,
        cli.EXPLAIN_MAX_WORLD_SIZE,
        cli.EXPLAIN_MAX_PASSES,
        cli.MAX_EPOCHS,
        cli.MAX_NUM_WORKERS,
    )
    assert expected == cli.LIMITS


def test_check_without_hypothesis_gives_the_command_that_works(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # as if it were not installed
    assert main(["check", "tests.kit_factories:ours"]) == 2
    err = capsys.readouterr().err
    assert "dsampler check: error: needs hypothesis, which is not installed" in err
    assert f"pip install -e '.[study]' in the clone, or pip install -e '{ROOT}[study]'" in err
    assert "'dsampler[study]'" not in err


def test_unequal_batch_counts_and_the_samplers_warnings_are_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["explain", "--sampler", "tokens", "--lengths", "8,1,8", "--world-size", "3"]
    argv += ["--max-tokens", "100", "--epochs", "1"]
    found = answer(capsys, *argv)
    counts = [len(listed(found["rows"], rank)) for rank in range(3)]
    assert sorted(counts) == [0, 1, 1]
    assert found["checks"][0] == (
        "Ranks yield different numbers of batches in epoch 0 (1 batch on 2 ranks, 0 batches "
        "on 1 rank)."
    )
    (said,) = found["warnings"]
    assert "gives ranks 0 or 1 batches this epoch" in said
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "(no batches)" in out and "Sampler warnings\n- " in out
    assert err == ""  # the warning is in the output, not repeated on stderr


def test_a_budget_past_exact_integers_is_accepted_and_every_batch_kept_within_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A quadratic cost times a budget of 2**62 passes 2**63: the sampler computes the
    costs exactly (it once overflowed here and was refused), so explain runs."""
    argv = ["--sampler", "tokens", "--lengths", "8,1", "--max-tokens", str(2**62)]
    code = main(["explain", "--world-size", "2", *argv, "--cost", "padded,quadratic=4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"Every batch costs at most max_tokens={2**62}" in out
