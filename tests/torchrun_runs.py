"""Run a script under torchrun as CI does, bounded in time (a helper for the tests).

``python -m torch.distributed.run`` (the module torchrun's script runs) with
``--standalone``, which rendezvous on localhost with a free port, gloo's sockets on the
loopback interface, and this checkout first on the path. The variables a surrounding
torchrun job would have set are removed. On expiry of the wall-clock limit the whole
process group is killed, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from studies.distributed.torchrun import ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
#: Seconds one torchrun run may take by default (3 or 4 ranks importing torch on 2 cores).
TORCHRUN_TIMEOUT = 90.0
#: What torchrun sets in each rank's environment (removed from the caller's).
VARIABLES = (*ENVIRONMENT, "LOCAL_RANK", "GROUP_RANK")


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
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(processes), *arguments]
    variables = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    variables.update(GLOO_SOCKET_IFNAME=loopback(), PYTHONPATH=str(ROOT), **(environment or {}))
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=variables,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to kill the ranks with it
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"torchrun {' '.join(arguments)} ran past {timeout} s")
    return subprocess.CompletedProcess(command, process.returncode, out, err)
