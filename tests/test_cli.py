"""``dsampler explain`` and ``dsampler report``, driven through ``main``."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from studies.cases import Case
from studies.cli import main
from studies.simulate import COLUMNS, simulate
from studies.tables import to_csv_text, to_json_records, to_json_text

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


def test_json_is_a_list_of_row_objects(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *BASE, "--format", "json", "--no-shuffle", "--epochs", "1")
    assert code == 0
    records = json.loads(out)
    assert all(list(record) == list(COLUMNS) for record in records)
    assert [record["indices"] for record in records] == [[0, 2, 4], [1, 3, 0]]
    assert records == expected_rows(Case(5, 2, 4, shuffle=False, epochs=1))


def test_options_reach_the_case(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ("--dataset-size", "9", "--world-size", "2", "--batch-size", "2")
    flags = ("--drop-last", "--loader-drop-last", "--no-set-epoch")
    options = ("--epochs", "3", "--seed", "7", "--implementation", "samplers")
    _, out, _ = run(capsys, "explain", *sizes, *flags, *options, "--format", "json")
    case = Case(
        9, 2, 2, seed=7, drop_last=True, loader_drop_last=True, set_epoch=False, epochs=3,
        implementation="samplers",
    )  # fmt: skip
    assert len(json.loads(out)) == 12  # 4 per rank, 2 batches each, 2 ranks, 3 epochs
    assert json.loads(out) == expected_rows(case)
    _, out, _ = run(capsys, *BASE, "--format", "json", "--no-shuffle", "--implementation", "none")
    assert json.loads(out) == expected_rows(Case(5, 2, 4, shuffle=False, implementation="none"))
    assert [row["indices"] for row in json.loads(out)][:2] == [[0, 1, 2, 3], [4]]


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


def test_num_workers_reach_the_dataloader(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import studies.cli

    seen: list[dict[str, Any]] = []
    real = studies.cli.case_rows

    def spy(case: Case, **options: Any) -> list[dict[str, Any]]:
        seen.append(options)
        return real(case, **options)

    monkeypatch.setattr(studies.cli, "case_rows", spy)
    _, without, _ = run(capsys, *BASE, "--format", "csv")
    code, with_workers, _ = run(capsys, *BASE, "--format", "csv", "--num-workers", "1")
    assert code == 0
    assert seen == [{"num_workers": 0}, {"num_workers": 1}]
    assert with_workers == without


def test_launch_passes_the_case_and_a_failed_launch_is_a_clean_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring only; tests/test_launch.py runs --launch for real."""
    calls: list[tuple[Case, int]] = []

    def run_case(case: Case, num_workers: int = 0) -> pd.DataFrame:
        calls.append((case, num_workers))
        raise RuntimeError("rank 1 of world_size=2 exited with code 1")

    launch = types.ModuleType("studies.distributed.case_runs")
    launch.run_case = run_case  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "studies.distributed.case_runs", launch)
    code, out, err = run(capsys, *BASE, "--num-workers", "2", "--launch")
    assert calls == [(Case(5, 2, 4), 2)]
    assert code == 1
    assert "cannot run the case: rank 1 of world_size=2 exited with code 1" in err
    assert out == "" and "Traceback" not in err


def test_report_delegates_and_prints_paths(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[Path, bool]] = []

    def write_reports(output: Path, progress: bool) -> list[Path]:
        calls.append((output, progress))
        return [output / "cases.csv", output / "summary.md"]

    report = types.ModuleType("studies.report")
    report.write_reports = write_reports  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "studies.report", report)

    code, out, _ = run(capsys, "report", "--output", str(tmp_path))
    assert code == 0
    assert out.splitlines() == [str(tmp_path / "cases.csv"), str(tmp_path / "summary.md")]
    assert calls[-1] == (tmp_path, False)  # captured stderr is not a TTY

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run(capsys, "report")
    assert calls[-1] == (Path("reports"), True)
    run(capsys, "report", "--no-progress")
    assert calls[-1] == (Path("reports"), False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["--world-size", "0"], "--world-size must be at least 1, got 0"),
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--dataset-size", "-1"], "--dataset-size must be at least 0, got -1"),
        (["--epochs", "0"], "--epochs must be at least 1, got 0"),
        (["--seed", str(-(2**63) - 1)], f"--seed must be at least {-(2**63)}, got"),
        (["--seed", str(2**64 - 1)], "--seed must keep seed + epoch within"),
        (["--dataset-size", "100001"], "--dataset-size must be at most 100000 for explain"),
        (["--num-workers", "-1"], "--num-workers must be at least 0, got -1"),
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
    code, _, err = run(capsys)
    assert code == 2
    assert "COMMAND" in err


def test_negative_seeds_run_like_the_sampler(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *BASE, "--seed", "-2", "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)


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
