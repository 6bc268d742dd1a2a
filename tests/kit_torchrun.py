"""Start a job with torchrun as CI does, bounded in time: shared by the torchrun tests.

``python -m torch.distributed.run`` (the module torchrun's script runs) with
``--standalone``, which rendezvous on localhost with a free port, and gloo's sockets on the
loopback interface. Each run gets a wall-clock limit well under the calling test's own
timeout; on expiry its whole process group is killed, so a regression fails the test
instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from studies.distributed.torchrun import ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
#: Seconds one torchrun run may take (3 or 4 ranks importing torch on 2 shared cores).
TORCHRUN_TIMEOUT = 90.0


def _loopback() -> str:
    names = {name for _, name in socket.if_nameindex()}
    return "lo" if "lo" in names else "lo0"


def torchrun(*arguments: str, processes: int = 3) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node <processes> <arguments>``, killed after
    :data:`TORCHRUN_TIMEOUT` seconds."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(processes), *arguments]
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": _loopback(), "PYTHONPATH": str(ROOT)}
    for name in (*ENVIRONMENT, "LOCAL_RANK", "GROUP_RANK"):
        environment.pop(name, None)
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to kill the ranks with it
    )
    try:
        out, err = process.communicate(timeout=TORCHRUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"torchrun {' '.join(arguments)} ran past {TORCHRUN_TIMEOUT} s")
    return subprocess.CompletedProcess(command, process.returncode, out, err)
