"""A Ray Train run that loses a worker and goes on with fewer, observed in real runs.

:func:`resized` fails a ``TorchTrainer`` run of our sampler through
:mod:`samplers.integrations.ray` after a checkpoint, and continues it in a second run on
fewer workers; :func:`elastic` does the same in one elastic run on a local cluster that
loses a node. Both record every step of every worker (:func:`resized_seen`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from samplers import DistributedSampler
from studies.engines.ray_runs import (
    BATCH_SIZE,
    CHECKPOINT_SETTLE,
    Items,
    _indices,
    await_checkpoint,
    fit,
    importable_checkout,
)

__all__ = [
    "RESIZED_CHECKPOINT",
    "RESIZED_EPOCHS",
    "RESIZED_KILL",
    "RESIZED_WORKERS",
    "elastic",
    "resized",
    "resized_seen",
]

#: Epochs of the run, the step of epoch 1 after which it checkpoints, and the step after
#: which one worker dies; the workers of the first run and of the restarted one.
RESIZED_EPOCHS = 3
RESIZED_CHECKPOINT = (1, 1)
RESIZED_KILL = (1, 2)
RESIZED_WORKERS = (3, 2)


def resized(*, storage: str, out: str) -> None:
    """Train :data:`RESIZED_EPOCHS` epochs of ``DistributedSampler(tail="uneven")`` through
    :mod:`samplers.integrations.ray` on ``RESIZED_WORKERS[0]`` workers; after step
    :data:`RESIZED_CHECKPOINT` the workers report a checkpoint of the loader's state, and
    after step :data:`RESIZED_KILL` the last worker kills its own process, which fails the
    run. A second ``TorchTrainer`` of the same name and storage on ``RESIZED_WORKERS[1]``
    workers gets that checkpoint from ``ray.train.get_checkpoint()`` and continues. Each
    worker appends ``[world size, epoch, step, batch]`` lines to
    ``out/<world size>-<rank>.jsonl`` (read them with :func:`resized_seen`)."""
    from ray.train import WorkerGroupError

    first, second = RESIZED_WORKERS
    config = {"out": out, "storage": storage, "name": "resized"}
    try:
        fit(_resized_loop, config, workers=first, storage=storage, name="resized")
    except WorkerGroupError:
        pass  # the worker that died
    else:
        raise RuntimeError("the first run was to fail: its last worker kills itself")
    fit(_resized_loop, config, workers=second, storage=storage, name="resized")


def resized_seen(out: str) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
    """``(world size, rank, epoch, step, batch)`` of every step every worker recorded."""
    seen = []
    for path in sorted(Path(out).glob("*.jsonl")):
        rank = int(path.stem.split("-")[1])
        for line in path.read_text().splitlines():
            size, epoch, step, batch = json.loads(line)
            seen.append((size, rank, epoch, step, tuple(batch)))
    return seen


def _resized_loop(config: dict[str, Any]) -> None:
    import ray
    import ray.train
    import torch.distributed as dist
    from ray.train import Checkpoint

    import samplers.integrations.ray as ours

    context = ray.train.get_context()
    rank, size = context.get_world_rank(), context.get_world_size()
    sampler = DistributedSampler(Items(), tail="uneven", **ours.placement())
    loader = ours.prepare_data_loader(DataLoader(Items(), batch_size=BATCH_SIZE, sampler=sampler))
    resumed = ours.load_state(loader)
    path = Path(config["out"]) / f"{size}-{rank}.jsonl"
    for epoch in range(loader.epoch, RESIZED_EPOCHS):
        for step, batch in enumerate(loader):
            with path.open("a") as file:
                file.write(json.dumps([size, epoch, step, _indices(batch)]) + "\n")
            dist.all_reduce(torch.zeros(1))  # a collective per step, as DDP's
            if resumed:
                continue
            if (epoch, step) == RESIZED_CHECKPOINT:
                with tempfile.TemporaryDirectory() as directory:
                    ours.save_state(directory, loader)
                    saved = Checkpoint.from_directory(directory) if rank == 0 else None
                    ray.train.report({"epoch": epoch, "step": step}, checkpoint=saved)
            if (epoch, step) == RESIZED_KILL and rank == size - 1:
                await_checkpoint(config)
                if config.get("remove"):  # the driver removes this node, and this worker
                    node = ray.get_runtime_context().get_node_id()
                    (Path(config["out"]) / "remove-node").write_text(node)
                    time.sleep(CHECKPOINT_SETTLE)
                os.kill(os.getpid(), signal.SIGKILL)


# Elastic training on a cluster that loses a node -------------------------------------------


def elastic(*, out: str, storage: str, timeout: float = 600.0) -> Any:
    """The run of :func:`resized`, elastic: one ``TorchTrainer`` with
    ``ScalingConfig(num_workers=(RESIZED_WORKERS[1], RESIZED_WORKERS[0]))`` on a local
    cluster of that many nodes of one CPU each (``ray.cluster_utils.Cluster``, a head
    without CPUs). After step :data:`RESIZED_KILL` the last worker asks for its node to go,
    and the node is removed with the worker on it; Ray restarts the group on the nodes
    left, from the checkpoint. The cluster is shut down whatever happens; returns the
    run's result (records as for :func:`resized`)."""
    import threading

    import ray
    from ray.cluster_utils import Cluster

    fewest, most = RESIZED_WORKERS[1], RESIZED_WORKERS[0]
    config = {"out": out, "storage": storage, "name": "elastic", "remove": True}
    signal_file = Path(out) / "remove-node"
    done: dict[str, Any] = {}
    with importable_checkout():
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        try:
            nodes = [cluster.add_node(num_cpus=1) for _ in range(most)]
            ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)

            def run() -> None:
                try:
                    done["result"] = fit(
                        _resized_loop,
                        config,
                        workers=(fewest, most),
                        failures=1,
                        storage=storage,
                        name="elastic",
                        cpus_per_worker=1,
                    )
                except Exception as error:  # raised in the caller below
                    done["error"] = error

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            deadline = time.monotonic() + timeout
            while thread.is_alive() and not signal_file.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            if signal_file.exists():
                node = signal_file.read_text()
                cluster.remove_node(next(n for n in nodes if n.node_id == node))
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise TimeoutError(f"the elastic run did not finish in {timeout:g} s")
            if "error" in done:
                raise done["error"]
            return done["result"]
        finally:
            ray.shutdown()
            cluster.shutdown()
