"""``dsampler observe`` under torchrun: 3 gloo ranks on 127.0.0.1, bounded in time.

The processes tests run torchrun as CI does (see ``tests/torchrun_runs.py``): each run
gets a wall-clock limit well under the test's own timeout, so a regression fails the test
instead of hanging it.
"""

from __future__ import annotations

import json
import multiprocessing.forkserver
import subprocess
import sys

import pytest
import torch.distributed as dist
from torchrun_runs import ROOT, TORCHRUN_TIMEOUT
from torchrun_runs import torchrun as run_torchrun

from studies.cli import main
from studies.core.cases import Case
from studies.core.simulate import simulate
from studies.core.summary import summarize
from studies.core.tables import to_json_records
from studies.core.verdicts import verdicts
from studies.engines import torchrun as torchrun_ranks
from studies.engines.local_ranks import WORKER_PRELOAD
from studies.engines.torchrun import ENVIRONMENT

OBSERVE = ["observe", "--dataset-size", "11", "--batch-size", "2", "--format", "json"]


def torchrun(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 3 <arguments>``, killed after the limit."""
    return run_torchrun(*arguments, processes=3, timeout=TORCHRUN_TIMEOUT)


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_observe_under_torchrun_prints_what_explain_prints() -> None:
    done = torchrun("-m", "studies.cli", *OBSERVE)

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)  # stdout holds this one object and nothing else
    assert list(answer) == ["rows", "summary", "verdicts", "backend", "agreement"]
    case = Case(11, 3, 2)
    simulated = simulate([case])
    assert [row.pop("source") for row in answer["rows"]] == ["processes"] * len(simulated)
    assert answer["rows"] == to_json_records(simulated)
    summary = summarize([case], simulated).iloc[0].to_dict()
    assert answer["summary"] == summary
    assert [v["name"] for v in answer["verdicts"]] == [v.name for v in verdicts(case, summary)]
    assert answer["backend"] == "gloo"
    assert answer["agreement"] == {
        "simulated_rows": len(simulated),
        "processes_rows": len(simulated),
        "match": True,
        "same_in_process": None,
    }
    explained = ["explain", *OBSERVE[1:], "--world-size", "3"]
    out = subprocess.run(
        [sys.executable, "-m", "studies.cli", *explained],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=TORCHRUN_TIMEOUT,
    ).stdout
    assert {key: answer[key] for key in ("summary", "verdicts")} == {
        key: json.loads(out)[key] for key in ("summary", "verdicts")
    }


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_a_failing_rank_fails_the_job_with_its_error() -> None:
    done = torchrun(str(ROOT / "tests" / "torchrun_failing_rank.py"), *OBSERVE[1:])

    assert done.returncode != 0
    assert done.stdout == ""
    assert "dsampler observe: error on rank 1: rank 1 cannot read sample" in done.stderr
    # torchrun's summary names the rank and shows its traceback (recorded by the rank).
    assert "rank      : 1 (local_rank: 1)" in done.stderr
    assert "OSError: rank 1 cannot read sample" in done.stderr


def test_a_torchrun_rank_starts_its_dataloader_workers_from_a_fork_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not by forking the rank (see studies.engines.local_ranks): the group is faked."""
    for name, value in zip(ENVIRONMENT, ("0", "1", "127.0.0.1", "29500"), strict=True):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torchrun_ranks, "backend", lambda: "gloo")
    for name in ("init_process_group", "barrier", "destroy_process_group"):
        monkeypatch.setattr(dist, name, lambda *args, **kwargs: None)
    server = multiprocessing.forkserver._forkserver  # type: ignore[attr-defined]
    monkeypatch.setattr(server, "_preload_modules", server._preload_modules)  # restored
    previous = multiprocessing.get_start_method(allow_none=True)
    try:
        with torchrun_ranks.process_group():
            assert multiprocessing.get_start_method() == "forkserver"
            assert server._preload_modules == list(WORKER_PRELOAD)
    finally:
        multiprocessing.set_start_method(previous, force=True)


def test_observe_outside_torchrun_says_how_to_start_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    code = main(OBSERVE)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "the environment lacks RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT" in err
    assert "torchrun --nproc-per-node N --no-python dsampler observe" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["--timeout", "0"], "--timeout must be a number of seconds in (0, 604800], got 0.0"),
        (["--timeout", "inf"], "--timeout must be a number of seconds in (0, 604800], got inf"),
        (["--timeout", "nan"], "--timeout must be a number of seconds in (0, 604800], got nan"),
        (
            ["--dataset-size", "100001"],
            "observe lists every batch of every epoch: --dataset-size times --epochs must be "
            "at most 200,000",
        ),
        (["--world-size", "3"], "unrecognized option --world-size\n"),  # the group gives it
        (["--persistent-workers"], "--persistent-workers needs --num-workers 1 or more"),
    ],
)
def test_observe_checks_its_options_before_joining_a_group(
    capsys: pytest.CaptureFixture[str], changes: list[str], message: str
) -> None:
    code = main([*OBSERVE, *changes])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert message in err
