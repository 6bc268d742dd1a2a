"""``dsampler explain`` and ``dsampler report``, driven through ``main``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from studies.cli import main
from studies.core.cases import Case
from studies.core.simulate import COLUMNS, simulate
from studies.core.summary import COLUMNS as SUMMARY_TABLE_COLUMNS
from studies.core.summary import summarize
from studies.core.tables import to_csv_text, to_json_records, to_json_text
from studies.core.verdicts import verdicts

BASE = ["explain", "--dataset-size", "5", "--world-size", "2", "--batch-size", "4"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def expected_rows(case: Case) -> list[dict[str, Any]]:
    return simulate([case]).to_dict("records")


def test_csv_is_exactly_the_tidy_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *BASE, "--format", "csv")
    assert code == 0
    assert out.splitlines()[0] == ",".join(COLUMNS)
    table = pd.read_csv(io.StringIO(out))
    table["indices"] = table["indices"].map(json.loads)
    assert table.to_dict("records") == expected_rows(Case(5, 2, 4))


def test_json_is_one_object_with_rows_summary_and_verdicts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, *BASE, "--format", "json", "--no-shuffle", "--epochs", "1")
    assert code == 0
    answer = json.loads(out)
    assert list(answer) == ["rows", "summary", "verdicts"]
    records = answer["rows"]
    assert all(list(record) == list(COLUMNS) for record in records)
    assert [record["indices"] for record in records] == [[0, 2, 4], [1, 3, 0]]
    case = Case(5, 2, 4, shuffle=False, epochs=1)
    assert records == expected_rows(case)
    summary = summarize([case], simulate([case])).iloc[0].to_dict()
    assert answer["summary"] == summary
    assert list(answer["summary"]) == list(SUMMARY_TABLE_COLUMNS)
    assert answer["verdicts"] == [
        {"name": v.name, "finding": v.finding, "fix": v.fix} for v in verdicts(case, summary)
    ]
    assert [v["name"] for v in answer["verdicts"]] == ["padded-duplicates"]


def test_options_reach_the_case(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ("--dataset-size", "9", "--world-size", "2", "--batch-size", "2")
    flags = ("--drop-last", "--loader-drop-last", "--no-set-epoch")
    options = ("--epochs", "3", "--seed", "7", "--implementation", "samplers")
    _, out, _ = run(capsys, "explain", *sizes, *flags, *options, "--format", "json")
    case = Case(
        9, 2, 2, seed=7, drop_last=True, loader_drop_last=True, set_epoch=False, epochs=3,
        implementation="samplers",
    )  # fmt: skip
    rows = json.loads(out)["rows"]
    assert len(rows) == 12  # 4 per rank, 2 batches each, 2 ranks, 3 epochs
    assert rows == expected_rows(case)
    _, out, _ = run(capsys, *BASE, "--format", "json", "--no-shuffle", "--implementation", "none")
    rows = json.loads(out)["rows"]
    assert rows == expected_rows(Case(5, 2, 4, shuffle=False, implementation="none"))
    assert [row["indices"] for row in rows][:2] == [[0, 1, 2, 3], [4]]


def test_our_layouts_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    """--tail and --sampler run ours; every sample once with uneven; the fixes name them."""
    shape = ("--dataset-size", "1e1", "--world-size", "4", "--batch-size", "2", "--epochs", "1")
    _, out, _ = run(capsys, "explain", *shape, "--tail", "uneven", "--format", "json")
    answer = json.loads(out)
    case = Case(10, 4, 2, epochs=1, implementation="samplers", tail="uneven")
    assert answer["rows"] == expected_rows(case)
    assert {row["tail"] for row in answer["rows"]} == {"uneven"}
    assert answer["summary"]["duplicated_samples"] == answer["summary"]["dropped_samples"] == 0
    uneven = next(v for v in answer["verdicts"] if v["name"] == "uneven-batch-counts")
    assert "--sampler batch --tail uneven" in uneven["fix"]

    _, out, _ = run(
        capsys, "explain", *shape, "--sampler", "batch", "--tail", "uneven", "--format", "json"
    )
    answer = json.loads(out)
    batched = Case(10, 4, 2, epochs=1, implementation="samplers", tail="uneven", sampler="batch")
    assert answer["rows"] == expected_rows(batched)
    assert {row["sampler_kind"] for row in answer["rows"]} == {"batch"}
    assert not answer["summary"]["uneven_batches"]

    _, out, _ = run(capsys, *BASE, "--format", "json")  # the stock sampler pads
    padded = next(v for v in json.loads(out)["verdicts"] if v["name"] == "padded-duplicates")
    assert 'use ours with tail="uneven" (--implementation samplers --tail uneven)' in padded["fix"]


def test_table_lists_batches_summary_and_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *BASE)
    assert code == 0
    for epoch in range(2):
        assert f"Epoch {epoch}" in out
    for row in expected_rows(Case(5, 2, 4)):
        assert str(row["indices"]) in out
    assert "duplicated_samples  1" in out
    assert "[padded-duplicates]" in out
    assert "Fix: Harmless for training" in out
    assert "No problems found." not in out


def test_table_says_when_nothing_is_wrong_or_a_rank_is_empty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(
        capsys, "explain", "--dataset-size", "8", "--world-size", "2", "--batch-size", "4"
    )
    assert "No problems found." in out
    assert "Findings" not in out
    argv = ["explain", "--dataset-size", "6", "--world-size", "2", "--batch-size", "4"]
    _, out, _ = run(capsys, *argv, "--loader-drop-last")
    assert out.count("(no batches)") == 4  # 2 ranks x 2 epochs
    assert "[empty-loader]" in out and "[dropped-samples]" in out


def test_worker_options_reach_the_in_process_dataloaders(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import studies.core.simulate

    seen: list[dict[str, Any]] = []
    real = studies.core.simulate.case_rows

    def spy(case: Case, **options: Any) -> list[dict[str, Any]]:
        seen.append(options)
        return real(case, **options)

    monkeypatch.setattr(studies.core.simulate, "case_rows", spy)  # explain imports it when run
    _, without, _ = run(capsys, *BASE, "--format", "csv")
    code, with_workers, _ = run(capsys, *BASE, "--format", "csv", "--num-workers", "1")
    assert code == 0
    persistent = ("--num-workers", "2", "--persistent-workers", "--no-shuffle")
    code, _, _ = run(capsys, *BASE, "--format", "csv", *persistent)
    assert code == 0
    assert seen == [
        {},
        {"num_workers": 1, "persistent_workers": False},
        {"num_workers": 2, "persistent_workers": True},
    ]
    assert with_workers == without


def test_persistent_workers_change_a_loader_shuffled_order_in_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The one real-process difference, reproduced without processes: a shuffling
    DataLoader (no sampler) with persistent workers repeats its epoch-0 order."""
    options = [*BASE, "--implementation", "none", "--format", "json", "--num-workers", "1"]
    _, fresh, _ = run(capsys, *options)
    _, persistent, _ = run(capsys, *options, "--persistent-workers")
    assert json.loads(fresh)["rows"] != json.loads(persistent)["rows"]


def test_launch_passes_the_case_and_a_failed_launch_is_a_clean_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring only; tests/test_launch.py runs --launch for real."""
    import studies.engines.case_runs

    calls: list[tuple[Case, dict[str, Any]]] = []

    def run_case(case: Case, **options: Any) -> pd.DataFrame:
        calls.append((case, options))
        raise RuntimeError("rank 1 of world_size=2 exited with code 1")

    monkeypatch.setattr(studies.engines.case_runs, "run_case", run_case)
    code, out, err = run(capsys, *BASE, "--num-workers", "2", "--launch")
    assert calls == [(Case(5, 2, 4), {"num_workers": 2, "persistent_workers": False})]
    assert code == 1
    assert "cannot run the case: rank 1 of world_size=2 exited with code 1" in err
    assert out == "" and "Traceback" not in err


def test_report_checks_the_output_then_delegates_with_progress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import studies.report

    calls: list[tuple[Path, bool, bool]] = []

    def write_reports(output: Path, progress: bool, force: bool) -> list[Path]:
        calls.append((output, progress, force))
        return [output / "cases.csv", output / "summary.md"]

    monkeypatch.setattr(studies.report, "write_reports", write_reports)
    code, out, err = run(capsys, "report", "--output", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [str(tmp_path / "cases.csv"), str(tmp_path / "summary.md")]
    assert calls[-1] == (tmp_path, True, False)  # progress also when stderr is no terminal
    run(capsys, "report", "--output", str(tmp_path), "--no-progress", "--force")
    assert calls[-1] == (tmp_path, False, True)


def _refuse_to_render(progress: bool = False) -> dict[str, bytes]:
    raise AssertionError("rendered before the output directory was checked")


def test_report_refuses_a_directory_it_did_not_generate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another project's reports/, even with its own MANIFEST, is left alone."""
    import studies.report

    monkeypatch.setattr(studies.report, "render", _refuse_to_render)
    theirs = tmp_path / "reports"
    theirs.mkdir()
    mine = {"MANIFEST": b"README.md\nnotes.md\n", "README.md": b"# ours\n", "notes.md": b"x"}
    for name, content in mine.items():
        (theirs / name).write_bytes(content)
    code, out, err = run(capsys, "report", "--output", str(theirs))
    assert (code, out) == (2, "")
    assert f"--output {theirs} is not empty and was not generated by dsampler report" in err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert {path.name: path.read_bytes() for path in theirs.iterdir()} == mine


def test_report_writes_new_empty_generated_or_forced_directories(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import studies.report

    stamp = studies.report.finding_header.__globals__["_STAMP"]
    generated = {"README.md": f"{stamp}\n# index\n".encode(), "cases.csv": b"a\n1\n"}
    monkeypatch.setattr(studies.report, "render", lambda progress=False: dict(generated))
    empty, new = tmp_path / "empty", tmp_path / "new" / "reports"
    empty.mkdir()
    for output in (empty, new, new):  # the second run into new: it generated that one
        code, _, err = run(capsys, "report", "--output", str(output), "--no-progress")
        assert (code, err) == (0, "")
        assert (output / "README.md").read_bytes() == generated["README.md"]
    assert studies.report.is_generated(new)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    (foreign / "MANIFEST").write_text("keep.md\n")
    (foreign / "keep.md").write_text("listed in a MANIFEST that is not ours")
    code, _, _ = run(capsys, "report", "--output", str(foreign), "--force", "--no-progress")
    assert code == 0
    assert (foreign / "keep.txt").read_text() == "mine"
    assert (foreign / "keep.md").is_file()  # a foreign MANIFEST never names files to remove
    assert (foreign / "MANIFEST").read_text() == "README.md\ncases.csv\n"


def test_an_unwritable_output_fails_at_once_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import studies.report

    monkeypatch.setattr(studies.report, "render", _refuse_to_render)
    blocker = tmp_path / "file"
    blocker.write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [
        (blocker / "reports", "cannot be created: "),
        (blocker, "exists and is not a directory"),
    ]
    if os.geteuid() != 0:  # root writes into read-only directories
        cases.append((locked / "reports", "cannot be written (Permission denied"))
    elif Path("/sys").is_dir():
        cases.append((Path("/sys/dsampler-reports"), "cannot be written ("))
    try:
        for output, message in cases:
            code, out, err = run(capsys, "report", "--output", str(output))
            assert (code, out) == (2, "")
            assert f"--output {output} {message}" in err
            assert len(err.strip().splitlines()) == 1
            assert "Traceback" not in err
            assert not output.exists() or output == blocker
    finally:
        locked.chmod(0o700)


def _part_a() -> dict[str, bytes]:
    return {"a": b""}


def _part_b() -> dict[str, bytes]:
    return {"b": b""}


def test_progress_is_one_line_per_part_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from studies.common.parts import Part, run_parts

    parts = [Part("cases", _part_a), Part("padding", _part_b)]
    done = run_parts(parts, progress=True)
    assert [result for result, _ in done] == [{"a": b""}, {"b": b""}]
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(", ", 1)[0] for line in lines] == [
        "dsampler report: 1/2 cases",
        "dsampler report: 2/2 padding",
    ]
    assert all(line.endswith(" s") for line in lines)  # each with the seconds it took
    run_parts(parts, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.timeout(120)
def test_parts_in_worker_processes_come_back_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from studies.common.parts import Part, run_parts

    parts = [Part(f"part {n}", _part_b if n % 2 else _part_a) for n in range(4)]
    done = run_parts(parts, workers=2)
    assert [result for result, _ in done] == [{"a": b""}, {"b": b""}] * 2


def test_report_names_the_extra_it_needs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import studies.common.extras as extras
    import studies.report

    monkeypatch.setattr(studies.report, "render", _refuse_to_render)
    monkeypatch.setitem(extras.EXTRAS, "peers", (*extras.EXTRAS["peers"], "no_such_peer_lib"))
    code, out, err = run(capsys, "report", "--output", str(tmp_path / "reports"))
    assert (code, out) == (1, "")
    assert "dsampler report: error: the report needs its extras: no_such_peer_lib is not" in err
    assert "install the peers extra" in err and "-e '.[peers]'" in err
    assert not (tmp_path / "reports").exists()


def test_a_failed_report_writes_nothing_and_a_rerun_is_accepted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import studies.report

    def failing(progress: bool = False) -> dict[str, bytes]:
        raise RuntimeError("a finding failed")

    output = tmp_path / "reports"
    monkeypatch.setattr(studies.report, "render", failing)
    with pytest.raises(RuntimeError, match="a finding failed"):
        run(capsys, "report", "--output", str(output), "--no-progress")
    assert list(tmp_path.iterdir()) == []  # no directory, no temporary one

    stamp = studies.report.finding_header.__globals__["_STAMP"]
    generated = {"README.md": f"{stamp}\n# index\n".encode(), "cases.csv": b"a\n1\n"}
    monkeypatch.setattr(studies.report, "render", lambda progress=False: dict(generated))
    real_replace = studies.report.os.replace
    calls: list[str] = []

    def interrupted(source: str, target: Any) -> None:  # the second file fails to land
        calls.append(str(target))
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(source, target)

    code, _, _ = run(capsys, "report", "--output", str(output), "--no-progress")
    assert code == 0 and sorted(p.name for p in output.iterdir()) == ["MANIFEST", *generated]
    generated["cases.csv"] = b"a\n2\n"
    generated["README.md"] += b"changed\n"
    monkeypatch.setattr(studies.report.os, "replace", interrupted)
    code, _, err = run(capsys, "report", "--output", str(output), "--no-progress")
    assert code == 130 and "dsampler report: interrupted" in err  # Ctrl-C
    monkeypatch.setattr(studies.report.os, "replace", real_replace)
    assert not [p for p in output.iterdir() if p.name.endswith(".partial")]
    assert studies.report.is_generated(output)  # the old MANIFEST is still there
    code, _, err = run(capsys, "report", "--output", str(output), "--no-progress")
    assert (code, err) == (0, "")
    assert (output / "cases.csv").read_bytes() == b"a\n2\n"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["--world-size", "0"], "--world-size must be at least 1, got 0"),
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--dataset-size", "-1"], "--dataset-size must be at least 0, got -1"),
        (["--epochs", "0"], "--epochs must be at least 1, got 0"),
        (["--seed", str(-(2**63) - 1)], f"--seed must be at least {-(2**63)}, got"),
        (["--seed", str(2**64 - 1)], "--seed must keep seed + epoch within"),
        (
            ["--dataset-size", "100001"],
            "--dataset-size times --epochs must be at most 200,000, got 100001 x 2 = 200,002",
        ),
        (["--dataset-size", "1e5", "--epochs", "3"], "got 100000 x 3 = 300,000"),
        (["--dataset-size", "100001"], "--summary takes any size"),
        (["--dataset-size", "1.55e1"], "invalid size '1.55e1': 15.5 is not a whole number"),
        (["--dataset-size", "1e65"], "invalid size '1e65': more than 65 digits"),
        (
            ["--dataset-sise", "1000"],
            "unrecognized option --dataset-sise; did you mean --dataset-size?",
        ),
        (["--drop_last"], "unrecognized option --drop_last; did you mean --drop-last?"),
        (
            ["--format=jsn"],
            "invalid choice: 'jsn' (choose from 'table', 'csv', 'json'); did you mean json?",
        ),
        (
            ["--world-size", "1024", "--epochs", "3"],
            "--world-size times --epochs must be at most 2,048, got 1024 x 3 = 3,072",
        ),
        (["--tail", "uneven", "--implementation", "torch"], "need implementation samplers"),
        (["--tail", "pad", "--drop-last"], "--drop-last contradicts --tail pad"),
        (["--sampler", "batch", "--loader-drop-last"], "--loader-drop-last needs sampler index"),
        (["--tail", "uneven", "--summary"], "--tail uneven and --sampler batch give ranks"),
        (["--dataset-size", str(2**63), "--summary"], "--dataset-size must be at most 2**63"),
        (["--num-workers", "-1"], "--num-workers must be at least 0 and at most 16, got -1"),
        (["--num-workers", "17"], "--num-workers must be at least 0 and at most 16, got 17"),
        (["--persistent-workers"], "--persistent-workers needs --num-workers 1 or more"),
        (["--epochs", "101"], "--epochs must be at most 100, got 101"),
        (["--world-size", "1025"], "--world-size must be at most 1024 for explain"),
        (["--world-size", "65537", "--summary"], "--world-size must be at most 65536, got"),
        (["--world-size", "9", "--num-workers", "7", "--launch"], "72 processes; at most 64"),
        (["--summary", "--launch"], "--summary computes from the plan and --launch runs"),
        (["--summary", "--format", "csv"], "--format csv lists batches"),
        (["--summary", "--implementation", "none"], "add --no-shuffle or drop --summary"),
        (
            ["--summary", "--dataset-size", str(10**9)],
            "--dataset-size must be at most 200000000 for --summary of a shuffled case",
        ),
        (["--batch-size", "x"], "argument --batch-size: invalid int value: 'x'"),
        (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
        (["--implementation", "mine"], "argument --implementation: invalid choice: 'mine'"),
    ],
)
def test_bad_options_name_the_option_and_value(
    capsys: pytest.CaptureFixture[str], changes: list[str], message: str
) -> None:
    code, out, err = run(capsys, *BASE, *changes)  # argparse: the last occurrence wins
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert out == ""


def test_missing_options_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "explain", "--world-size", "2", "--batch-size", "4")
    assert code == 2
    assert "the following arguments are required: --dataset-size" in err
    code, out, err = run(capsys)
    assert (code, err) == (2, "")
    assert out.startswith("usage: dsampler")
    for command in ("explain", "observe", "report"):
        assert command in out


def test_version_comes_from_the_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out == f"dsampler {version('dsampler')}\n"


def test_version_answers_without_the_study_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import studies.console
    from studies.common.extras import MissingExtra

    def missing(extra: str) -> None:
        raise MissingExtra(["pandas"], [extra])

    monkeypatch.setattr(studies.console, "require", missing)
    assert studies.console.main(["--version"]) == 0
    assert capsys.readouterr().out == f"dsampler {version('dsampler')}\n"
    assert studies.console.main(BASE) == 1  # a command still needs the extra
    assert "study extra" in capsys.readouterr().err


def test_negative_seeds_run_like_the_sampler(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *BASE, "--seed", "-2", "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["rows"] == expected_rows(Case(5, 2, 4, seed=-2))


@given(
    size=st.integers(0, 24),
    world=st.integers(1, 6),
    batch=st.integers(1, 5),
    flags=st.lists(
        st.sampled_from(["--drop-last", "--loader-drop-last", "--no-set-epoch", "--no-shuffle"]),
        unique=True,
    ),
    implementation=st.sampled_from(["torch", "samplers"]),
)
def test_summary_mode_says_what_the_listing_says(
    size: int, world: int, batch: int, flags: list[str], implementation: str
) -> None:
    options = ["--dataset-size", str(size), "--world-size", str(world)]
    options += ["--batch-size", str(batch), "--implementation", implementation, *flags]
    listed = _json_of(["explain", *options, "--format", "json"])
    summarised = _json_of(["explain", *options, "--format", "json", "--summary"])
    assert list(summarised) == ["summary", "memory", "verdicts"]
    assert summarised["summary"] == listed["summary"]
    assert summarised["verdicts"] == listed["verdicts"]


def _json_of(argv: list[str]) -> dict[str, Any]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert main(argv) == 0
    return json.loads(output.getvalue())


def test_summary_mode_answers_for_a_hundred_million_samples() -> None:
    sizes = ["--dataset-size", str(10**8 + 3), "--world-size", "8", "--batch-size", "32"]
    answer = _json_of(["explain", *sizes, "--format", "json", "--summary", "--no-set-epoch"])
    summary = answer["summary"]
    assert summary["samples_per_rank"] == [12_500_001] * 8  # ceil((10**8 + 3) / 8)
    assert summary["batches_per_rank"] == [390_626] * 8
    assert summary["last_batch_sizes"] == [1] * 8
    assert (summary["duplicated_samples"], summary["most_copies"]) == (5, 2)
    assert summary["order_repeats"]  # no set_epoch: the same permutation every epoch
    names = [verdict["name"] for verdict in answer["verdicts"]]
    assert names == ["padded-duplicates", "batch-of-one", "order-repeated"]
    larger = ["--dataset-size", str(10**12), "--world-size", "65536", "--batch-size", "4"]
    answer = _json_of(["explain", *larger, "--format", "json", "--summary", "--no-shuffle"])
    assert answer["summary"]["samples_per_rank"] == [15_258_790] * 65536


def test_summary_table_shows_long_rank_lists_by_value(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "--dataset-size", "3", "--world-size", "24", "--batch-size", "2"]
    code, out, _ = run(capsys, *argv, "--summary")
    assert code == 0
    assert "samples_per_rank    1 on each of the 24 ranks" in out
    assert "most_copies         8" in out
    assert "[fewer-samples-than-ranks]" in out
    assert "a sample is handed out up to 8 times" in out
    assert "\nEpoch 0\n" not in out
    assert "last batch sizes in epoch 0: 1 on every rank" in out


def test_help_returns_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "--help")
    assert code == 0
    assert "--loader-drop-last" in out


def test_tables_reject_other_columns() -> None:
    table = simulate([Case(5, 2, 4)])
    for write in (to_csv_text, to_json_records, to_json_text):
        with pytest.raises(ValueError, match="tidy columns"):
            write(table.drop(columns="batch"))
    assert to_json_text(table.iloc[:0]) == "[]\n"
    assert to_csv_text(table.iloc[:0]) == ",".join(COLUMNS) + "\n"


@given(
    size=st.integers(0, 20),
    world=st.integers(1, 4),
    batch=st.integers(1, 5),
    drop=st.booleans(),
    loader_drop=st.booleans(),
)
def test_csv_and_json_carry_the_same_rows(
    size: int, world: int, batch: int, drop: bool, loader_drop: bool
) -> None:
    table = simulate([Case(size, world, batch, drop_last=drop, loader_drop_last=loader_drop)])
    from_csv = pd.read_csv(io.StringIO(to_csv_text(table)))
    from_csv["indices"] = from_csv["indices"].map(json.loads)
    records = to_json_records(table)
    assert json.loads(to_json_text(table)) == records
    assert len(from_csv) == len(records)
    if records:
        assert from_csv.to_dict("records") == records
    assert records == table.to_dict("records")


def test_the_console_names_the_study_extra_when_a_module_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import studies.common.extras as extras
    from studies.console import main as console_main

    monkeypatch.setitem(extras.EXTRAS, "study", (*extras.EXTRAS["study"], "no_such_study_lib"))
    assert console_main(BASE) == 1
    err = capsys.readouterr().err
    assert err.startswith("dsampler: error: no_such_study_lib is not installed: install the")
    assert "install the study extra" in err and err.count("\n") == 1
    # The command that works from the clone, and the clone's path for anywhere else.
    root = Path(__file__).resolve().parents[1]
    assert f"pip install -e '.[study]' in the clone, or pip install -e '{root}[study]'" in err


def test_a_misspelt_option_is_named_with_the_closest_before_required_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # argparse alone said "required: --dataset-size" for the first and showed the top-level
    # usage for the second.
    code, _, err = run(capsys, "explain", "--dataset-sise", "1000", "--world-size", "2")
    assert code == 2
    assert err.startswith("usage: dsampler explain")
    assert "required" not in err
    assert err.endswith(
        "dsampler explain: error: unrecognized option --dataset-sise; "
        "did you mean --dataset-size?\n"
    )
    code, _, err = run(capsys, *BASE, "--drop_last")
    assert code == 2
    assert err.startswith("usage: dsampler explain")
    assert "did you mean --drop-last?" in err
    code, _, err = run(capsys, "explian")
    assert code == 2
    assert err.endswith("; did you mean explain?\n")
    code, _, err = run(capsys, "bench", "--world-sizez", "3")
    assert code == 2
    assert (
        "dsampler bench: error: unrecognized option --world-sizez; did you mean --world-sizes?"
        in err
    )
    # What argparse accepts is still accepted: a unique prefix, --option=value, "--".
    code, out, err = run(capsys, *BASE, "--drop", "--format=json", "--epochs", "1")
    assert (code, err) == (0, "")
    assert json.loads(out)["summary"]["drop_last"] is True


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5e3", 1500), ("1500.0", 1500), ("15e2", 1500), ("10**3", 1000), ("1E3", 1000)],
)
def test_sizes_written_as_whole_floats_are_read_exactly(
    capsys: pytest.CaptureFixture[str], text: str, value: int
) -> None:
    code, out, err = run(
        capsys,
        "explain",
        "--dataset-size",
        text,
        "--world-size",
        "2",
        "--batch-size",
        "4",
        "--summary",
        "--format",
        "json",
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["summary"]["dataset_size"] == value


_IMPORTED = """
import sys
from studies.console import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "pandas", "tabulate", "samplers", "hypothesis")
               if m in sys.modules)
print("EXIT", code, "IMPORTED", heavy, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["explain", "--help"],
        ["check", "--help"],
        ["bench", "--help"],
        ["explain", "--dataset-sise", "1000"],
        ["explain", "--dataset-size", "1.5", "--world-size", "2", "--batch-size", "4"],
        ["explain", *BASE[1:], "--world-size", "0"],
        ["explain", *BASE[1:], "--persistent-workers"],
        ["check", "mod:factory", "--timeout", "0"],
        ["explain", *BASE[1:], "--summary", "--implementation", "none"],
        ["observe", "--dataset-size", "6", "--batch-size", "2", "--timeout", "0"],
        ["explian"],
    ],
)
def test_help_and_argument_errors_import_neither_torch_nor_the_studies(argv: list[str]) -> None:
    # Importing torch and pandas took 1.5 to 16 s before --help or an error was printed.
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    last = done.stderr.splitlines()[-1]
    assert last.startswith("EXIT 0" if "--help" in argv else "EXIT 2"), done.stderr
    assert last.endswith("IMPORTED []"), done.stderr


def test_the_check_commands_argument_names_are_the_kits() -> None:
    from samplers.testing import ARGUMENTS
    from studies.kit.cli import ARGUMENTS as NAMED

    assert NAMED == ARGUMENTS
