"""The real-process launcher: normal runs, failing ranks, hung ranks and busy ports.

Every test that starts processes is marked ``processes`` and has its own timeout; the
launcher's own ``timeout`` is well below it, so a regression shows up as a failed
assertion or exception, not as pytest-timeout killing a hung test.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.forkserver
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

import studies.engines.case_runs
import studies.engines.local_ranks as local_ranks
from samplers import DistributedSampler
from studies.core.cases import EXPERIMENT, Case
from studies.core.simulate import COLUMNS, IndexDataset, make_loader, make_sampler, simulate
from studies.engines.case_runs import Run, observe_on_rank, run_case, run_cases
from studies.engines.local_ranks import (
    JoinFailed,
    LaunchTimeout,
    RankFailed,
    launch,
    serve_store,
)

#: Seconds the launcher gets in the failure tests: failures must be reported well before.
LAUNCH_TIMEOUT = 60.0


# --- rank work used by the tests (module level, so the ranks can import it) -------------


def _placement(_: object) -> dict[str, object]:
    """What a rank sees: the group, and samplers built without num_replicas/rank."""
    dataset = IndexDataset(10)
    total = torch.tensor([dist.get_rank() + 1])
    dist.all_reduce(total)
    return {
        "backend": dist.get_backend(),
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "stock": (
            StockDistributedSampler(dataset).num_replicas,
            StockDistributedSampler(dataset).rank,
        ),
        "ours": (DistributedSampler(dataset).num_replicas, DistributedSampler(dataset).rank),
        "sum": int(total),
        "pid": os.getpid(),
    }


def _server_pid() -> int | None:
    """The pid of the fork server this process started its workers from (None: none)."""
    pid: int | None = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    return pid


def _raise_after_starting_workers(payload: tuple[int, str]) -> None:
    """Every rank starts persistent DataLoader workers and records all pids; then one raises.

    The others are blocked in a barrier the failing rank never reaches.
    """
    failing, directory = payload
    rank = dist.get_rank()
    case = Case(16, dist.get_world_size(), 2)
    dataset = IndexDataset(case.dataset_size)
    loader = make_loader(
        case, dataset, DistributedSampler(dataset), num_workers=2, persistent_workers=True
    )
    iterator = iter(loader)
    next(iterator)
    workers = [worker.pid for worker in iterator._workers]  # type: ignore[attr-defined]
    pids = [os.getpid(), _server_pid(), *workers]
    Path(directory, f"rank-{rank}").write_text(" ".join(map(str, pids)))
    dist.barrier()  # every rank has written its pids
    if rank == failing:
        raise ValueError(f"rank {rank} fails on purpose")
    dist.barrier()


class _ParentPids(torch.utils.data.Dataset[int]):
    """Each item is the pid of the process that started the worker fetching it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return os.getppid()


def _worker_parents(_: object) -> dict[str, object]:
    """Who started this rank's DataLoader workers, after a collective has just finished
    (when forking the rank could copy a lock held by gloo's thread)."""
    dist.all_reduce(torch.ones(1))
    loader = torch.utils.data.DataLoader(_ParentPids(), batch_size=2, num_workers=2)
    parents = {int(pid) for batch in loader for pid in batch}
    return {
        "rank": os.getpid(),
        "server": _server_pid(),
        "parents": sorted(parents),
    }


_KEPT: list[object] = []


def _workers_kept_at_the_end(_: object) -> list[int]:
    """Persistent workers whose iterator is still referenced when the rank ends."""
    loader = torch.utils.data.DataLoader(range(8), num_workers=2, persistent_workers=True)
    iterator = iter(loader)
    next(iterator)
    _KEPT.append(iterator)
    return [_server_pid(), *(worker.pid for worker in iterator._workers)]  # type: ignore[attr-defined]


def _tcp_endpoints(_: object) -> list[tuple[str, str]]:
    """(local, remote) hex addresses of this rank's TCP sockets, from /proc (Linux)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    endpoints = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                endpoints.append((fields[1].split(":")[0], fields[2].split(":")[0]))
    dist.barrier()  # every rank's sockets are open while each one looks
    return endpoints


def _sampler_for_wrong_world(_: object) -> None:
    case = Case(6, dist.get_world_size() + 1, 2)
    make_sampler(case, IndexDataset(6), dist.get_rank(), from_process_group=True)


def _exit_early(failing: int) -> None:
    if dist.get_rank() == failing:
        os._exit(3)
    dist.barrier()


def _raise_at_once(_: object) -> None:
    raise ValueError("raised in work")


def _hang(_: object) -> None:
    threading.Event().wait()


# --- helpers ----------------------------------------------------------------------------


def _left_running(pid: int) -> bool:
    """Whether ``pid`` lives on: not gone, not a zombie, not exiting, not sent SIGKILL.

    SIGKILL is asynchronous: a process it was sent to may still show as running until it
    is next scheduled, but it can run no more user code; it has SIGKILL pending, or is
    already exiting (PF_EXITING), until it becomes a zombie.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields["State"].split()[0] in ("Z", "X"):
        return False
    pending = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    exiting = int(stat.rsplit(")", 1)[1].split()[6]) & 0x4  # PF_EXITING
    return not (pending & 1 << (signal.SIGKILL - 1) or exiting)


def _records(rows: pd.DataFrame) -> list[dict[str, object]]:
    return rows.to_dict("records")


# --- normal path -------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_ranks_take_world_size_and_rank_from_the_gloo_group() -> None:
    results = launch(_placement, None, 3, timeout=LAUNCH_TIMEOUT)

    assert [r["rank"] for r in results] == [0, 1, 2]
    for rank, result in enumerate(results):
        assert result["backend"] == "gloo"
        assert result["world_size"] == 3
        assert result["stock"] == result["ours"] == (3, rank)
        assert result["sum"] == 1 + 2 + 3  # a real all_reduce across the three ranks
    assert len({r["pid"] for r in results}) == 3
    assert os.getpid() not in {r["pid"] for r in results}


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_dataloader_workers_come_from_the_rank_s_own_fork_server() -> None:
    """Never forked from the rank: see local_ranks' docstring (a worker forked while gloo's
    thread held CPython's runtime lock deadlocked before running any Python)."""
    results = launch(_worker_parents, None, 2, timeout=LAUNCH_TIMEOUT)

    servers = [result["server"] for result in results]
    assert None not in servers and len(set(servers)) == 2  # one server per rank
    for result in results:
        assert result["parents"] == [result["server"]]
        assert result["server"] != result["rank"]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_rank_that_ends_leaves_no_fork_server_or_worker_running() -> None:
    """The rank ends holding a persistent iterator, which never shuts its workers down:
    multiprocessing's exit handler must end them, and the server then sees the rank gone
    (see local_ranks' docstring)."""
    pids = [pid for result in launch(_workers_kept_at_the_end, None, 2) for pid in result]
    assert len(pids) == 2 * 3
    deadline = time.monotonic() + 30  # ended soon after the ranks, not at once
    while (running := [pid for pid in pids if _left_running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running == []


@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads Linux /proc")
def test_every_socket_of_every_rank_is_on_127_0_0_1() -> None:
    loopback = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it; IPv6 maps it at the end
    unbound = {"00000000", "0" * 32}  # the remote end of a listening socket

    per_rank = launch(_tcp_endpoints, None, 3, timeout=LAUNCH_TIMEOUT)

    for endpoints in per_rank:
        assert len(endpoints) >= 3  # the store client and gloo's pairs to both peers
        for local, remote in endpoints:
            assert local.endswith(loopback), endpoints
            assert remote.endswith(loopback) or remote in unbound, endpoints


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_run_case_returns_the_simulated_table() -> None:
    case = Case(5, 3, 2, drop_last=False, loader_drop_last=False)

    real = run_case(case, timeout=LAUNCH_TIMEOUT)

    assert list(real.columns) == list(COLUMNS)
    assert _records(real) == _records(simulate([case]))
    assert sorted(real["rank"].unique()) == [0, 1, 2]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_run_cases_with_workers_matches_the_simulation_in_order() -> None:
    cases = [case for _, case in EXPERIMENT[1:]] + [
        Case(17, 3, 4, implementation="samplers"),
        Case(7, 3, 2, drop_last=True, loader_drop_last=True),
    ]

    for options in ({"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}):
        real = run_cases(cases, timeout=LAUNCH_TIMEOUT, **options)
        assert _records(real) == _records(simulate(cases)), options


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_run_cases_launches_once_per_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[tuple[int, int]] = []
    real_launch = studies.engines.case_runs.launch

    def counting(work, payload, world_size, **options):  # type: ignore[no-untyped-def]
        launched.append((world_size, len(payload)))
        return real_launch(work, payload, world_size, **options)

    monkeypatch.setattr(studies.engines.case_runs, "launch", counting)
    cases = [Case(3, 2, 2), Case(9, 1, 4), Case(4, 2, 1, implementation="samplers")]
    cases.append(Case(8, 2, 4, implementation="none"))

    real = run_cases(cases, timeout=LAUNCH_TIMEOUT)

    assert sorted(launched) == [(1, 1), (2, 3)]
    assert _records(real) == _records(simulate(cases))  # given order, not launch order


# --- failures are answers ---------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_group_that_does_not_fit_the_case_fails_with_the_reason() -> None:
    with pytest.raises(RankFailed) as failure:
        launch(_sampler_for_wrong_world, None, 2, timeout=LAUNCH_TIMEOUT)
    assert failure.value.traceback is not None
    assert "the process group gives num_replicas=2, rank=" in failure.value.traceback
    assert "but the case needs world_size=3" in failure.value.traceback

    with pytest.raises(RankFailed, match="case world_size=3 launched in a group of 2"):
        launch(observe_on_rank, [Run(Case(6, 3, 2))], 2, timeout=LAUNCH_TIMEOUT)


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_rank_that_raises_is_named_with_its_traceback_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    with pytest.raises(RankFailed) as failure:
        launch(_raise_after_starting_workers, (1, str(tmp_path)), 3, timeout=LAUNCH_TIMEOUT)
    elapsed = time.monotonic() - started

    assert failure.value.rank == 1
    assert not isinstance(failure.value, JoinFailed)  # failed in work: never retried
    assert failure.value.world_size == 3
    assert failure.value.exitcode is None
    assert failure.value.traceback is not None
    assert "ValueError: rank 1 fails on purpose" in failure.value.traceback
    assert "rank 1 of world_size=3 raised" in str(failure.value)
    assert elapsed < LAUNCH_TIMEOUT / 2  # reported when it happens, not at the deadline
    pids = [int(pid) for f in sorted(tmp_path.iterdir()) for pid in f.read_text().split()]
    assert len(pids) == 3 * 4  # every rank, its fork server and two workers were running
    assert [pid for pid in pids if _left_running(pid)] == []


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_rank_that_exits_early_is_named_with_its_exit_code() -> None:
    started = time.monotonic()
    with pytest.raises(RankFailed) as failure:
        launch(_exit_early, 2, 3, timeout=LAUNCH_TIMEOUT)

    assert failure.value.rank == 2
    assert failure.value.exitcode == 3
    assert failure.value.traceback is None
    assert "exited with code 3" in str(failure.value)
    assert time.monotonic() - started < LAUNCH_TIMEOUT / 2


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_hung_ranks_time_out_and_are_killed() -> None:
    started = time.monotonic()
    with pytest.raises(LaunchTimeout) as failure:
        launch(_hang, None, 2, timeout=3.0)

    assert failure.value.pending == (0, 1)
    assert isinstance(failure.value, TimeoutError)
    assert 3.0 <= time.monotonic() - started < 30.0


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_busy_port_is_replaced_by_a_free_one() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        store = serve_store(port, timeout=10.0)
        assert store.port not in (0, port)
        del store

        results = launch(_placement, None, 2, timeout=LAUNCH_TIMEOUT, port=port)
        assert [r["sum"] for r in results] == [3, 3]


# --- joining the group: the one failure retried -----------------------------------------


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_rank_that_cannot_join_says_so_and_a_working_rank_does_not() -> None:
    """The rank's own report of where it failed, which launch retries on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once closed
    context = local_ranks._context()
    messages = []
    for work in (_hang, _raise_at_once):
        receiver, sender = context.Pipe(duplex=False)
        # A world of one needs no peer: with a store it joins, without one it cannot.
        store = serve_store(timeout=10.0) if work is _raise_at_once else None
        setup = local_ranks._RankSetup(0, 1, store.port if store else port, 2.0)
        process = context.Process(target=local_ranks._rank_main, args=(work, None, setup, sender))
        process.start()
        sender.close()
        assert receiver.poll(60), "the rank did not report"
        messages.append(receiver.recv())
        process.join(30)
        del store
    (joining, _, join_text), (working, _, work_text) = messages
    assert joining == "join" and "_hang" not in join_text
    assert working == "error" and "ValueError: raised in work" in work_text


def test_launch_retries_a_failure_to_join_once_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[int] = []

    def failing(kind: type[RankFailed], times: int) -> object:
        def launch_once(*_: object) -> list[int]:
            attempts.append(_[-1])  # the port of this attempt
            if len(attempts) <= times:
                raise kind(1, 2, traceback="connectFullMesh failed", exitcode=None)
            return [0, 1]

        return launch_once

    monkeypatch.setattr(local_ranks, "_launch_once", failing(JoinFailed, 1))
    assert launch(_hang, None, 2, port=1234) == [0, 1]
    assert attempts == [1234, 0]  # the retry takes a new port

    attempts.clear()
    monkeypatch.setattr(local_ranks, "_launch_once", failing(JoinFailed, 5))
    with pytest.raises(JoinFailed):
        launch(_hang, None, 2)
    assert len(attempts) == local_ranks.JOIN_ATTEMPTS == 2

    attempts.clear()
    monkeypatch.setattr(local_ranks, "_launch_once", failing(RankFailed, 5))
    with pytest.raises(RankFailed):
        launch(_hang, None, 2)
    assert len(attempts) == 1


_MESH = (
    "torch.distributed.DistBackendError: [../third_party/gloo/gloo/transport/tcp/pair.cc:144]"
    " Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144]"
    " Connection closed by peer [127.0.0.1]:30645"
)


@pytest.mark.parametrize(
    ("stderr", "retried"),
    [
        (_MESH, True),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", True),
        (f"{_MESH}\nAssertionError: assert 3 == 4", False),
        ("ValueError: rank 1 fails on purpose\nConnection closed by peer", False),
        ("", False),
    ],
)
def test_torchrun_runs_are_retried_once_on_joining_failures_only(
    monkeypatch: pytest.MonkeyPatch, stderr: str, retried: bool
) -> None:
    import torchrun_runs

    runs: list[int] = []

    def run(command: list[str], *_: object) -> subprocess.CompletedProcess[str]:
        runs.append(len(runs))
        return subprocess.CompletedProcess(command, 1, "", stderr)

    monkeypatch.setattr(torchrun_runs, "_run", run)
    done = torchrun_runs.torchrun("script.py", processes=2)
    assert done.returncode == 1
    assert len(runs) == (torchrun_runs.ATTEMPTS if retried else 1) and torchrun_runs.ATTEMPTS == 2

    runs.clear()
    fixed = iter([1, 0])
    monkeypatch.setattr(
        torchrun_runs,
        "_run",
        lambda command, *_: (
            runs.append(0) or subprocess.CompletedProcess(command, next(fixed), "", stderr)
        ),
    )
    assert torchrun_runs.torchrun("script.py", processes=2).returncode == (0 if retried else 1)


@pytest.mark.parametrize(
    ("stderr", "retried"), [(_MESH, True), (f"{_MESH}\nAssertionError", False)]
)
def test_the_documentation_s_torchrun_is_retried_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stderr: str,
    retried: bool,
) -> None:
    import torchrun_runs

    commands: list[list[str]] = []
    results = iter([(1, "first\n", stderr), (0, "second\n", "")])

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, *next(results))

    monkeypatch.setattr(torchrun_runs, "_run_here", run)
    code = torchrun_runs.main(["--nproc-per-node", "2", "script.py"])
    out, err = capsys.readouterr()
    assert commands[0][1:] == ["-m", "torch.distributed.run", "--nproc-per-node", "2", "script.py"]
    assert len(commands) == (2 if retried else 1)
    assert (code, out, err) == ((0, "second\n", "") if retried else (1, "first\n", stderr))


@pytest.mark.timeout(60)
def test_a_timed_out_torchrun_run_is_killed_with_the_ranks_in_their_own_sessions() -> None:
    """torchrun starts each rank with start_new_session=True, outside the run's group."""
    import psutil
    import torchrun_runs

    script = (  # an 'agent' with one 'rank' in its own session and one in its group
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "subprocess.Popen(['sleep', '300'])\n"
        "time.sleep(300)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)

    def outside(process: psutil.Process) -> bool:
        with contextlib.suppress(ProcessLookupError):
            return os.getsid(process.pid) != run.pid
        return False

    deadline = time.monotonic() + 30
    below = psutil.Process(run.pid).children(recursive=True)
    try:
        while len(below) < 2 or not any(outside(process) for process in below):
            assert time.monotonic() < deadline, "the test's processes did not start"
            time.sleep(0.05)
            below = psutil.Process(run.pid).children(recursive=True)
    finally:
        torchrun_runs.kill_tree(run.pid)
    run.wait(timeout=10)
    assert [p.pid for p in below if _left_running(p.pid)] == []


# --- arguments (no processes) -----------------------------------------------------------


def test_arguments_are_checked_before_anything_starts() -> None:
    case = Case(4, 2, 2)
    with pytest.raises(ValueError, match="persistent_workers=True needs num_workers >= 1"):
        Run(case, persistent_workers=True)
    with pytest.raises(ValueError, match="num_workers must be a non-negative integer, got -1"):
        Run(case, num_workers=-1)
    with pytest.raises(ValueError, match="world_size must be a positive integer, got 0"):
        launch(_hang, None, 0)
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        launch(_hang, None, 1, timeout=0)
    with pytest.raises(ValueError, match="port must be an integer in \\[0, 65535\\], got 70000"):
        serve_store(70000)
    assert Run(case).loader_options() == {}
    assert Run(case, 2, True).loader_options() == {"num_workers": 2, "persistent_workers": True}


@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("output", ["table", "json"])
def test_explain_with_launch_prints_what_the_simulation_prints(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real CLI path, no stand-ins: ``--launch`` starts gloo ranks with 2 workers."""
    from studies.cli import main

    options = ["explain", "--dataset-size", "10", "--world-size", "3", "--batch-size", "4"]
    options += ["--format", output, "--num-workers", "2"]
    assert main(options) == 0
    simulated = capsys.readouterr().out
    assert main([*options, "--launch"]) == 0
    launched = capsys.readouterr().out
    assert launched == simulated
    if output == "json":
        rows = json.loads(simulated)["rows"]
        assert {row["rank"] for row in rows} == {0, 1, 2}
        assert {i for row in rows if row["epoch"] == 0 for i in row["indices"]} == set(range(10))
    else:
        assert "Epoch 0" in simulated and "padded-duplicates" in simulated
