"""Run a script under torchrun as CI does, bounded in time (a helper for the tests).

``python -m torch.distributed.run`` (the module torchrun's script runs) with
``--standalone``, which rendezvous on localhost with a free port, gloo's sockets on the
loopback interface, and this checkout first on the path. The variables a surrounding
torchrun job would have set are removed. On expiry of the wall-clock limit the run's
process group and every process under it are killed (:func:`kill_tree`: torchrun starts
each rank in a session of its own), so a regression fails the test instead of hanging it.

The rendezvous port is chosen and held by torchrun itself (``--standalone`` binds port 0
and keeps the socket). On a loaded machine gloo's mesh between the ranks can still fail
to form ("connectFullMesh failed ... Connection closed by peer"): a run that failed with
such a message (:func:`failed_joining`), and with no assertion, is run once more. The
documentation's bash blocks call ``torchrun`` through this file too (``python
tests/torchrun_runs.py <torchrun's arguments>``, see :func:`main`), with the same retry.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil
import pytest

from studies.engines.torchrun import ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
#: Seconds one torchrun run may take by default (3 or 4 ranks importing torch on 2 cores).
TORCHRUN_TIMEOUT = 90.0
#: What torchrun sets in each rank's environment (removed from the caller's).
VARIABLES = (*ENVIRONMENT, "LOCAL_RANK", "GROUP_RANK")
#: What a failure to form the group says (gloo's mesh, torchrun's rendezvous, the store).
JOINING = re.compile(
    r"connectFullMesh|Rendezvous(Connection|Timeout|Closed)Error|EADDRINUSE"
    r"|[Aa]ddress already in use"
)
#: What says a run failed for another reason, even if the group then broke too.
NOT_JOINING = re.compile(r"AssertionError")
#: How torchrun is run: its module, by this interpreter.
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
#: Runs tried when a run failed joining the group.
ATTEMPTS = 2


def loopback() -> str:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS)."""
    names = {name for _, name in socket.if_nameindex()}
    return "lo" if "lo" in names else "lo0"


def torchrun(
    *arguments: str,
    processes: int,
    timeout: float = TORCHRUN_TIMEOUT,
    cwd: Path = ROOT,
    environment: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node <processes> <arguments>``, killed after
    ``timeout`` seconds (the test then fails)."""
    command = [*TORCHRUN, "--standalone"]
    command += ["--nproc-per-node", str(processes), *arguments]
    variables = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    variables.update(GLOO_SOCKET_IFNAME=loopback(), PYTHONPATH=str(ROOT), **(environment or {}))
    return _retried(lambda: _run(command, cwd, variables, timeout))


def _retried(
    run: Callable[[], subprocess.CompletedProcess[str]],
) -> subprocess.CompletedProcess[str]:
    """``run()``, once more when it failed joining the group (:func:`failed_joining`)."""
    for attempt in range(1, ATTEMPTS + 1):
        done = run()
        if done.returncode == 0 or attempt == ATTEMPTS or not failed_joining(done.stderr):
            return done
    raise AssertionError("unreachable")  # pragma: no cover


def failed_joining(stderr: str) -> bool:
    """Whether a failed run's ``stderr`` says the ranks could not form their group, and
    nothing says an assertion failed (a rank's assertion breaks its peers' connections
    too: that run is not retried)."""
    return bool(JOINING.search(stderr)) and not NOT_JOINING.search(stderr)


def _run(
    command: Sequence[str], cwd: Path, variables: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=variables,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)
        process.communicate()
        pytest.fail(f"{' '.join(command[3:])} ran past {timeout} s")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def kill_tree(pid: int) -> None:
    """SIGKILL process group ``pid`` and every process under ``pid``: torchrun starts each
    rank in a session of its own, outside the group, and a rank left running would keep
    the run's output pipes open."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        below = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for process in below:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _run_here(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``command`` in this process's directory and environment, its output captured."""
    return subprocess.run(command, capture_output=True, text=True, check=False)


def main(arguments: Sequence[str]) -> int:
    """``torchrun <arguments>`` here, retried as :func:`torchrun` retries; prints what the
    run kept (its output, after it ends) and returns its exit code."""
    command = [*TORCHRUN, *arguments]
    done = _retried(lambda: _run_here(command))
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    # Killed by a signal: the status a shell gives (exec'ing torchrun gave the same).
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
