"""Start real ranks on this machine, run one function in each, and never hang.

:func:`launch` starts ``world_size`` processes, joins them into a gloo process group on
127.0.0.1 and calls ``work(payload)`` in each, after ``torch.distributed`` is initialised,
so ``work`` reads its rank and world size from the group as training code does. It
returns each rank's result, or raises:

* :class:`RankFailed` when a rank raises (with the rank's traceback) or dies without
  answering (with its exit code), as soon as the parent sees it;
* :class:`LaunchTimeout` when the ranks have not all answered within ``timeout``.

Either way, before the exception leaves :func:`launch`, every rank's process group (the
rank, its fork server and the DataLoader workers started from it) has been sent SIGKILL
and every rank has been joined. The server and the workers are the rank's descendants,
not ours: they cannot run another instruction once SIGKILL is pending, and init reaps
them. A rank that ends normally leaves none running: on exit, multiprocessing terminates
its daemonic children (the workers), and then its server sees it gone. A rank that dies
without that (``os._exit``, a crash) would leave them running, since its workers hold
copies of the pipe by which the server sees the rank gone (seen); every failure path
kills the group.

**Start method: forkserver.** ``fork`` would copy the calling process as it is: its
threads' locks in whatever state they happen to be (torch's and OpenBLAS's thread pools,
and here the TCPStore server thread that :func:`launch` itself runs), plus any process
group a previous caller left behind. ``spawn`` is safe but starts a fresh interpreter per
rank, and importing torch costs seconds of CPU each (8 ranks on 2 cores: ~10 s per
launch). ``forkserver`` gets spawn's isolation at fork's price: the server is a fresh
interpreter started by exec that only imports :data:`PRELOAD` (no tensor ops, no process
group, no store; OpenBLAS's idle pool is fork-safe through its ``pthread_atfork``
handlers), and each rank is forked from that clean state in milliseconds. The gloo group
is created in the rank, after the fork, so no gloo state is ever shared.

**DataLoader workers start from a fork server too**, each rank's own
(:func:`start_workers_from_a_fork_server`, which torchrun's ranks call as well), not by
forking the rank. Forking a rank whose gloo group is running is not safe: when a
collective finishes, gloo's worker thread releases the tensors it held, and torch takes
the GIL for that from a new Python thread state, briefly holding CPython's runtime lock
without the GIL. A fork at that instant copies the lock held, and on CPython before the
fix of python/cpython#112275 (this machine's 3.11.7 has it) the worker deadlocks in
``PyOS_AfterFork_Child`` before running any Python: its rank waits for a batch, with no
timeout, and its peers wait in their next collective until the group's timeout. A
Lightning test hung so, in CI and in a loop of runs here (seen with ``gdb``: the worker
waiting on that lock in ``_PyThreadState_DeleteExcept``, gloo's thread entering
``PyThreadState_New``). The workers yield the same batches either way: the sampler runs
in the rank, and a worker only fetches the indices it is sent. The rank's fork server
imports :data:`WORKER_PRELOAD` once (about a second per rank that starts workers,
measured), so a worker does not import torch again.

**Rendezvous.** The parent hosts the ``TCPStore`` on a port the OS picks (binding port
0), as torchrun's agent does, and ranks connect to it as clients. The port is bound for
the whole launch, so there is no window in which another program can take it between
choosing and binding; a requested port that is busy is replaced by a free one. Gloo's
own sockets are kept on the loopback interface (``GLOO_SOCKET_IFNAME``).

**One retry, of joining only.** On a loaded machine gloo's mesh of connections between
the ranks can fail to form ("connectFullMesh failed ... Connection closed by peer"). A
rank that fails before its group exists (connecting to the store, or
``init_process_group``) says so; when every failure seen is such a one, the ranks are
killed and the launch starts again, once, with a new store, within the same ``timeout``
(:class:`JoinFailed` if it fails again). A failure in ``work`` (an assertion, an error),
a rank that dies, or a time-out is never retried.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "DEFAULT_TIMEOUT",
    "HOST",
    "JOIN_ATTEMPTS",
    "START_METHOD",
    "WORKER_PRELOAD",
    "JoinFailed",
    "LaunchError",
    "LaunchTimeout",
    "RankFailed",
    "launch",
    "serve_store",
    "start_workers_from_a_fork_server",
]

HOST = "127.0.0.1"
START_METHOD = "forkserver"
#: Imported once by the fork server, so ranks start without importing torch again.
PRELOAD = (
    "torch",
    "torch.distributed",
    "pandas",
    "studies.core.simulate",
    "studies.engines.local_ranks",
)
#: Imported once by each rank's own fork server, from which its DataLoader workers start.
WORKER_PRELOAD = ("torch", "studies.core.simulate")
#: Seconds a whole launch may take (start-up, rendezvous, work and exit) by default.
DEFAULT_TIMEOUT = 120.0
#: Launches tried when the ranks fail only while joining the group (see the docstring).
JOIN_ATTEMPTS = 2
#: Seconds to wait for killed processes to be reaped.
_REAP_TIMEOUT = 10.0
#: Seconds a peer's error waits for a silent death to be reported before it is blamed.
_DEATH_GRACE = 2.0


class LaunchError(RuntimeError):
    """A launch did not produce every rank's result."""


class RankFailed(LaunchError):
    """A rank raised or died: ``rank`` names it, ``traceback`` or ``exitcode`` says how.

    ``traceback`` is the rank's formatted traceback when it raised, ``None`` when it died
    without answering (then ``exitcode`` is its exit status; negative: killed by signal).
    """

    def __init__(
        self, rank: int, world_size: int, *, traceback: str | None, exitcode: int | None
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.traceback = traceback
        self.exitcode = exitcode
        if traceback is not None:
            detail = f"raised:\n{traceback.rstrip()}"
        else:
            detail = f"exited with code {exitcode} without reporting a result"
        super().__init__(f"rank {rank} of world_size={world_size} {detail}")


class JoinFailed(RankFailed):
    """A rank raised while joining the process group (before ``work`` ran): the only
    failure :func:`launch` retries."""


class LaunchTimeout(LaunchError, TimeoutError):
    """The ranks in ``pending`` had not answered after ``timeout`` seconds."""

    def __init__(self, world_size: int, timeout: float, pending: Sequence[int]) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self.pending = tuple(pending)
        super().__init__(
            f"ranks {list(self.pending)} of world_size={world_size} had not finished after "
            f"timeout={timeout} s; all ranks were killed"
        )


def launch(
    work: Callable[[Any], Any],
    payload: Any,
    world_size: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    port: int = 0,
) -> list[Any]:
    """``work(payload)``'s return value on each rank, in rank order.

    ``work`` must be importable (a module-level function) and its result picklable. It
    runs with the default process group initialised (gloo, ``world_size`` ranks, the
    collective timeout set to ``timeout``) and single-threaded torch, so 8 ranks share 2
    cores without oversubscription. The group is torn down after a final barrier, so a
    result is only returned once every rank has finished its collectives.

    Guarantee: within about ``timeout`` seconds this returns or raises
    :class:`RankFailed`/:class:`LaunchTimeout`, and no process it started is left running
    (on failure: ranks killed and joined, their DataLoader workers killed with them).
    ``port`` is the store's port (0: any free port; a busy one is replaced by a free one).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        try:
            return _launch_once(work, payload, world_size, deadline, timeout, port)
        except JoinFailed:
            if attempt == JOIN_ATTEMPTS:
                raise
            port = 0  # a new store, on a port the OS picks
    raise AssertionError("unreachable")  # pragma: no cover


def _launch_once(
    work: Callable[[Any], Any],
    payload: Any,
    world_size: int,
    deadline: float,
    timeout: float,
    port: int,
) -> list[Any]:
    """One launch of every rank, until ``deadline``; see :func:`launch`."""
    context = _context()
    store = serve_store(port, timeout=timeout)
    ranks: list[_Rank] = []
    finished = False
    try:
        for rank in range(world_size):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_main,
                args=(work, payload, _RankSetup(rank, world_size, store.port, timeout), sender),
                name=f"rank-{rank}",
            )
            process.start()
            sender.close()
            ranks.append(_Rank(rank, process, receiver))
        results = _collect(ranks, world_size, deadline, timeout)
        _reap(ranks, world_size, deadline, timeout)
        finished = True
        return results
    finally:
        if not finished:
            _kill(ranks)
        for entry in ranks:
            entry.receiver.close()
            with contextlib.suppress(ValueError):
                entry.process.close()
        del store


def serve_store(port: int = 0, *, timeout: float = DEFAULT_TIMEOUT) -> dist.TCPStore:
    """A TCPStore server on 127.0.0.1, on ``port`` or, if that is busy or 0, a free one.

    The OS picks the free port when the server binds port 0, so no other program can
    take it first. ``store.port`` is the port actually bound.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 2**16:
        raise ValueError(f"port must be an integer in [0, 65535], got {port!r}")
    try:
        return _store_server(port, timeout)
    except RuntimeError as error:  # DistNetworkError, or a plain RuntimeError on older torch
        text = str(error).lower()
        if port == 0 or not ("eaddrinuse" in text or "address already in use" in text):
            raise
        return _store_server(0, timeout)


def _store_server(port: int, timeout: float) -> dist.TCPStore:
    return dist.TCPStore(
        HOST, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout)
    )


def _context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context(START_METHOD)
    # Only takes effect before the fork server starts; later launches reuse the server.
    context.set_forkserver_preload(list(PRELOAD))  # type: ignore[attr-defined]
    return context


@dataclass(frozen=True)
class _RankSetup:
    """What a rank needs to join the group."""

    rank: int
    world_size: int
    port: int
    timeout: float


@dataclass
class _Rank:
    """The parent's handle on one rank."""

    rank: int
    process: BaseProcess
    receiver: Connection
    #: The rank has answered or failed; it is no longer waited for.
    done: bool = False
    #: The rank's end of the pipe is closed without a message: only its exit is awaited.
    hung_up: bool = False

    def handles(self) -> list[Any]:
        """What to wait on: its message (until it hangs up) and its exit."""
        if self.hung_up:
            return [self.process.sentinel]
        return [self.receiver, self.process.sentinel]


@dataclass(frozen=True)
class _Failure:
    rank: int
    traceback: str | None
    exitcode: int | None
    #: time.monotonic() when it failed (CLOCK_MONOTONIC is shared by all processes).
    at: float
    #: It raised while joining the group, before ``work`` ran.
    joining: bool = False

    def error(self, world_size: int) -> RankFailed:
        kind = JoinFailed if self.joining else RankFailed
        return kind(self.rank, world_size, traceback=self.traceback, exitcode=self.exitcode)


def _collect(ranks: list[_Rank], world_size: int, deadline: float, timeout: float) -> list[Any]:
    """Every rank's answer, or the first failure as :class:`RankFailed`.

    When several failures are seen at once, a rank that died silently is blamed first
    (others' errors are then usually its peers noticing the closed connection), then the
    earliest-stamped traceback: a rank's own error is always sent before its exit can
    break a peer's collective. Errors alone wait briefly for a silent death to be
    reported (:func:`_silent_deaths`), since a peer's error can arrive before it.
    """
    results: dict[int, Any] = {}
    while len(results) < world_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LaunchTimeout(world_size, timeout, [r.rank for r in ranks if not r.done])
        owners = {handle: entry for entry in ranks if not entry.done for handle in entry.handles()}
        ready = {id(owners[handle]): owners[handle] for handle in wait(list(owners), remaining)}
        failures: list[_Failure] = []
        for entry in ready.values():
            answer = _answer(entry)
            if isinstance(answer, _Failure):
                failures.append(answer)
            elif answer is not None:
                results[entry.rank] = answer[0]
            entry.done = answer is not None
        if failures:
            if all(failure.traceback is not None for failure in failures):
                failures += _silent_deaths(ranks)
            silent = [f for f in failures if f.traceback is None]
            first = min(silent, key=_by_rank) if silent else min(failures, key=_by_time)
            if first.joining and not all(failure.joining for failure in failures):
                first = replace(first, joining=False)  # retried only if all failed joining
            raise first.error(world_size)
    return [results[rank] for rank in range(world_size)]


def _silent_deaths(ranks: list[_Rank]) -> list[_Failure]:
    """Ranks not yet answered that turn out, within :data:`_DEATH_GRACE`, to have died silently.

    A peer notices a dead rank's closed connection and sends its own error within
    milliseconds, while the fork server reports the death only once it has reaped the
    process, so the peer's error often arrives first; the death is what to blame.
    """
    pending = [entry for entry in ranks if not entry.done]
    deadline = time.monotonic() + _DEATH_GRACE
    found = []
    while pending and (remaining := deadline - time.monotonic()) > 0:
        ready = wait([entry.process.sentinel for entry in pending], remaining)
        if not ready:
            break
        for entry in [entry for entry in pending if entry.process.sentinel in ready]:
            pending.remove(entry)
            answer = _answer(entry)
            if isinstance(answer, _Failure) and answer.traceback is None:
                found.append(answer)
    return found


def _by_rank(failure: _Failure) -> int:
    return failure.rank


def _by_time(failure: _Failure) -> float:
    return failure.at


def _answer(entry: _Rank) -> tuple[Any] | _Failure | None:
    """``(result,)`` if the rank answered, a failure if it raised or died, else None."""
    if not entry.hung_up and entry.receiver.poll():
        try:
            message = entry.receiver.recv()
        except EOFError:
            entry.hung_up = True
        else:
            if message[0] == "ok":
                return (message[1],)
            kind, at, text = message
            return _Failure(entry.rank, text, None, at, joining=kind == "join")
    if entry.process.is_alive():
        return None
    entry.process.join()
    return _Failure(entry.rank, None, entry.process.exitcode, time.monotonic())


def _reap(ranks: list[_Rank], world_size: int, deadline: float, timeout: float) -> None:
    """Wait for every rank to exit after answering; a non-zero exit is still a failure."""
    for entry in ranks:
        entry.process.join(max(deadline - time.monotonic(), 0))
        if entry.process.exitcode is None:
            raise LaunchTimeout(world_size, timeout, [entry.rank])
        if entry.process.exitcode != 0:
            raise RankFailed(
                entry.rank, world_size, traceback=None, exitcode=entry.process.exitcode
            )


def _kill(ranks: list[_Rank]) -> None:
    """SIGKILL every rank's process group (the rank, its fork server and its DataLoader
    workers), reap the ranks."""
    for entry in ranks:
        pid = entry.process.pid
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if entry.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                entry.process.kill()
    for entry in ranks:
        if entry.process.pid is not None:
            entry.process.join(_REAP_TIMEOUT)


def _rank_main(
    work: Callable[[Any], Any], payload: Any, setup: _RankSetup, sender: Connection
) -> None:
    """A rank's whole life: join the group, work, tear down, send exactly one message."""
    # Its own process group, so the parent can kill it together with its workers.
    os.setpgid(0, 0)
    phase = "join"
    try:
        _join(setup)
        phase = "error"
        message: tuple[Any, ...] = ("ok", _work(work, payload))
        sender.send(message)
    except BaseException:
        with contextlib.suppress(Exception):
            sender.send((phase, time.monotonic(), traceback.format_exc()))
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a half-used process group may block in destructors.
        os._exit(1)
    finally:
        sender.close()


def _join(setup: _RankSetup) -> None:
    """Set the rank up and join the gloo group through the parent's store."""
    start_workers_from_a_fork_server()
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    timeout = timedelta(seconds=setup.timeout)
    store = dist.TCPStore(HOST, setup.port, is_master=False, timeout=timeout)
    dist.init_process_group(
        "gloo", store=store, rank=setup.rank, world_size=setup.world_size, timeout=timeout
    )


def start_workers_from_a_fork_server() -> None:
    """Make the processes this one starts by default (DataLoader workers) come from a fork
    server of its own that has imported :data:`WORKER_PRELOAD`, never from a fork of this
    process. For a rank, before it joins its group: see the module docstring for why.
    The server starts with the first such process.
    """
    multiprocessing.set_start_method(START_METHOD, force=True)
    multiprocessing.set_forkserver_preload(list(WORKER_PRELOAD))


def _work(work: Callable[[Any], Any], payload: Any) -> Any:
    """``work(payload)`` in the joined group, then a final barrier and the teardown."""
    result = work(payload)
    dist.barrier()
    dist.destroy_process_group()
    return result


def _loopback_interface() -> str:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS)."""
    names = {name for _, name in socket.if_nameindex()}
    for name in ("lo", "lo0"):
        if name in names:
            return name
    raise RuntimeError(f"no loopback interface among {sorted(names)}; gloo needs 127.0.0.1")
