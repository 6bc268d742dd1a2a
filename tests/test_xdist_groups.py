"""The test command's grouping under pytest-xdist (tests/xdist_groups.py) takes effect:
a small suite run with ``-n 2 --dist loadgroup`` and the plugin runs each group in one
worker, and a module's shared fixture is built once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent
#: As the README's test command runs the suite (no cache written into the temporary suite).
XDIST = ("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")

_RECORDING = """
import os
from pathlib import Path

import pytest

LOG = Path(__file__).parent / "ran.log"


def note(group, what):
    with LOG.open("a") as log:
        log.write(f"{group} {what} {os.environ.get('PYTEST_XDIST_WORKER', 'none')}\\n")
"""


def _module(group: str, marks: str, extra: str = "") -> str:
    """A test module: a module-scoped fixture and four tests of ``group`` using it (with
    ``marks`` above them), ``extra`` tests, and six tests of no group."""
    return _RECORDING + textwrap.dedent(
        f"""

        @pytest.fixture(scope="module")
        def built():
            note("{group}", "setup")


        {marks}
        @pytest.mark.parametrize("n", range(4))
        def test_uses(built, n):
            note("{group}", n)
        {extra}

        @pytest.mark.parametrize("n", range(6))
        def test_alone(n):
            note("alone", n)
        """
    )


_INSTALL = """
        @pytest.mark.install
        def test_install():
            note("processes", "install")
"""
_PROCESSES = _module("processes", "@pytest.mark.processes", _INSTALL)
_SHARED = _module("shared", "")


@pytest.mark.timeout(180)
def test_each_group_runs_in_one_worker_and_builds_its_fixture_once(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "test_processes.py").write_text(_PROCESSES)
    (tmp_path / "test_shared.py").write_text(_SHARED)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    processes: real processes\n    install: installs\n"
        "    xdist_group(name): a group\n"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(tmp_path)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *XDIST, "-p", "xdist_groups", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split() for line in (tmp_path / "ran.log").read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for group, _, worker in ran:
        workers.setdefault(group, set()).add(worker)
    setups = [group for group, what, _ in ran if what == "setup"]
    assert sorted(setups) == ["processes", "shared"], ran
    assert len(ran) == 2 + 5 + 4 + 12, ran
    assert len(workers["processes"]) == 1, workers
    assert len(workers["shared"]) == 1, workers
    # The tests of no group were shared out: xdist ran them on both workers.
    assert workers["alone"] == {"gw0", "gw1"}, workers


def test_each_test_process_runs_torch_on_the_threads_omp_num_threads_gives() -> None:
    """tests/conftest.py sets one thread unless OMP_NUM_THREADS is given: two workers on
    two cores each running a thread per core contend."""
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
