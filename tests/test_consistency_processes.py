"""``check_consistent`` when one rank fails locally: every rank raises at once, naming the
failing rank and its error, instead of the healthy ranks waiting in the collective until the
process group's timeout.

Real processes (CPU, gloo on 127.0.0.1, the launch bounded by its timeout, the group
destroyed at the end), through :func:`studies.engines.local_ranks.launch`: 4 ranks as a
2 x 2 mesh (``dp`` x ``tp``), as in ``tests/test_groups_processes.py``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch.distributed as dist

from samplers import DistributedSampler, RankFailedError
from studies.engines.local_ranks import launch

pytestmark = pytest.mark.processes

#: The launch's bound, also the collective timeout: a healthy rank left waiting in the
#: collective would use all of it, and the launch would fail.
LAUNCH_TIMEOUT = 90.0
#: What a prompt check takes at most, on a loaded machine.
PROMPT = 30.0


class Flaky:
    """A dataset whose ``len()`` raises once ``broken`` is set."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.broken = False

    def __len__(self) -> int:
        if self.broken:
            raise OSError("the dataset's index file is gone")
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


def _timed(action: Any) -> tuple[str, str, bool, float]:
    """(exception type, message, whether its cause is the rank's own error, seconds)."""
    began = time.monotonic()
    try:
        action()
    except Exception as error:
        own = isinstance(error.__cause__, OSError)
        return type(error).__name__, str(error), own, time.monotonic() - began
    return "ok", "", False, time.monotonic() - began


def _one_rank_fails(_: object) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    rank = dist.get_rank()
    data = Flaky(20)
    sampler = DistributedSampler(data, shuffle=False)
    data.broken = rank == 1
    result: dict[str, Any] = {"rank": rank, "world": _timed(sampler.check_consistent)}
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    meshed = Flaky(20)
    on_mesh = DistributedSampler(meshed, group=mesh["dp"], shuffle=False)
    meshed.broken = rank == 2
    result["mesh"] = _timed(lambda: on_mesh.check_consistent(replicas=mesh["tp"]))
    healthy = DistributedSampler(Flaky(20), shuffle=False)
    result["after"] = _timed(healthy.check_consistent)  # the collectives are still aligned
    return result


@pytest.mark.timeout(200)
def test_every_rank_raises_promptly_naming_the_failing_rank() -> None:
    results = launch(_one_rank_fails, None, 4, timeout=LAUNCH_TIMEOUT)
    for key, failing in (("world", 1), ("mesh", 2)):
        for result in results:
            kind, message, own, seconds = result[key]
            assert kind == RankFailedError.__name__, (key, result["rank"], message)
            assert f"rank {failing}: OSError: the dataset's index file is gone" in message
            assert message.count("rank ") == 1, message  # only the failing one is named
            assert own == (result["rank"] == failing), "the failing rank keeps its cause"
            assert seconds < PROMPT, (key, result["rank"], seconds)
    assert [result["after"][0] for result in results] == ["ok"] * 4


def test_without_a_process_group_the_error_is_the_ranks_own() -> None:
    data = Flaky(5)
    sampler = DistributedSampler(data, num_replicas=1, rank=0)
    data.broken = True
    with pytest.raises(OSError, match="index file is gone"):
        sampler.check_consistent()
    assert not dist.is_initialized()
