"""What Ray Train does to a loader, observed in real ``TorchTrainer`` runs on a local cluster.

:func:`cluster` starts a local Ray cluster on this machine (no dashboard) and always shuts
it down. :func:`observe` runs one ``TorchTrainer`` of :data:`WORKERS` CPU workers in it:
each worker builds every :data:`CASES` loader over one of :data:`SAMPLERS` and prepares it
one of the :data:`PATHS` ways: Ray's ``ray.train.torch.prepare_data_loader`` as Ray's
guide writes it (calling ``loader.sampler.set_epoch(epoch)`` before each epoch), Ray's with
``add_dist_sampler=False`` (which keeps the sampler; the user calls ``set_epoch`` on it),
with ``move_to_device=False`` too, or :func:`samplers.integrations.ray.prepare_data_loader`;
and it records the indices each step received over :data:`EPOCHS` epochs. At step
:data:`CHECKPOINT_STEP` of the last epoch each case notes what a Ray user would checkpoint
(ours: the loader's state; Ray's paths: the epoch and step, and a sampler of ours Ray kept
its own ``state_dict()``); after all cases, the workers report one Ray checkpoint holding
those notes and fail on purpose. Ray restarts the worker group
(``FailureConfig(max_failures=1)``), ``ray.train.get_checkpoint()`` hands the restarted
workers the checkpoint, and every case continues the last epoch from it the way its user
would; what the restarted steps received is recorded too.

The workers write what they saw to files in a directory the driver reads afterwards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Subset
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

__all__ = [
    "BATCH_SIZE",
    "CASES",
    "CHECKPOINT_SETTLE",
    "CHECKPOINT_STEP",
    "DATASET_SIZE",
    "EPOCHS",
    "LENGTHS",
    "MAX_TOKENS",
    "OURS",
    "PATHS",
    "ROWS",
    "SAMPLERS",
    "SPLIT",
    "WORKERS",
    "Case",
    "Items",
    "Seen",
    "await_checkpoint",
    "cluster",
    "fit",
    "importable_checkout",
    "observe",
]

DATASET_SIZE = 43
BATCH_SIZE = 4
EPOCHS = 2
WORKERS = 2
#: Steps of the last epoch taken before its checkpoint.
CHECKPOINT_STEP = 3
#: Token lengths of the samples, and the budget, for the token sampler; the packed
#: samplers pack rows of at most MAX_TOKENS tokens, ROWS rows a batch.
LENGTHS = [1 + (7 * index) % 13 for index in range(DATASET_SIZE)]
MAX_TOKENS = 16
ROWS = 2
#: The mixtures mix the dataset's first SPLIT samples and the rest, weighted by their
#: sizes (in samples, or in tokens for the token and packed mixtures): each sample once an
#: epoch.
SPLIT = 20
#: CPUs of the local cluster, and each worker's share (workers fit with room to spare).
CLUSTER_CPUS = 4
WORKER_CPUS = 1.0
#: Seconds a worker about to fail waits, at most, for Ray's controller to take the
#: reported checkpoint in (it does when it next polls the workers; a failure before that
#: loses the checkpoint).
CHECKPOINT_SETTLE = 120.0

ROOT = Path(__file__).resolve().parents[2]


#: The ways a loader is prepared, by name: the ``prepare_data_loader`` called, as the
#: tables write it.
PATHS = {
    "ray": "ray.train.torch.prepare_data_loader",
    "ray-kept": "ray.train.torch.prepare_data_loader(add_dist_sampler=False)",
    "ray-unmoved": (
        "ray.train.torch.prepare_data_loader(add_dist_sampler=False, move_to_device=False)"
    ),
    "ours": "samplers.integrations.ray.prepare_data_loader",
}


@dataclass(frozen=True)
class Case:
    """One loader handed to Ray: its sampler, and which of :data:`PATHS` prepares it."""

    name: str
    sampler: str
    path: str

    @property
    def ours(self) -> bool:
        """Through :mod:`samplers.integrations.ray` (else one of Ray's calls)."""
        return self.path == "ours"


#: The samplers, by the name the tables use.
SAMPLERS = {
    "plain": "none (DataLoader(shuffle=True))",
    "stock": "torch DistributedSampler",
    "ours": 'DistributedSampler(tail="uneven")',
    "batches": 'DistributedBatchSampler(tail="uneven")',
    "tokens": 'DistributedTokenBatchSampler(tail="uneven")',
    "packed": 'DistributedPackedBatchSampler(tail="uneven")',
    "wrapper": 'DistributedSamplerWrapper(RandomSampler, tail="uneven")',
    "mixture": 'DistributedMixtureSampler(tail="uneven")',
    "mixture-batches": 'DistributedMixtureBatchSampler(tail="uneven")',
    "mixture-tokens": 'DistributedMixtureTokenBatchSampler(tail="uneven")',
    "packed-mixture": 'DistributedPackedMixtureSampler(tail="uneven")',
}
#: Every sampler we ship.
OURS = tuple(name for name in SAMPLERS if name not in ("plain", "stock"))

#: Ray's default call on every loader; each other path on every sampler of ours (Ray's
#: calls that keep the sampler would leave a plain or stock loader unsharded).
CASES: tuple[Case, ...] = (
    *(Case(f"ray-{name}", name, "ray") for name in SAMPLERS),
    *(Case(f"{path}-{name}", name, path) for path in PATHS if path != "ray" for name in OURS),
)


@dataclass(frozen=True)
class Seen:
    """What one worker's steps received in one case: ``(epoch, batch)`` before the
    restart and after it, the error if the case failed, how the restart continued
    (``"state"``, ``"sampler state"`` or ``"epoch start"``), and the class of the sampler
    the prepared loader drew from."""

    rank: int
    before: tuple[tuple[int, tuple[int, ...]], ...]
    after: tuple[tuple[int, tuple[int, ...]], ...]
    error: str | None
    restart: str
    iterates: str


@contextlib.contextmanager
def cluster(cpus: int = CLUSTER_CPUS) -> Iterator[None]:
    """A local Ray cluster of ``cpus`` CPUs for the block; shut down whatever happens.

    Workers import this checkout (``PYTHONPATH``); Ray's console output is not shown.
    """
    import ray

    with importable_checkout():
        try:
            ray.init(
                num_cpus=cpus,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=False,
            )
            yield
        finally:
            ray.shutdown()


@contextlib.contextmanager
def importable_checkout() -> Iterator[None]:
    """For the block: this checkout first on ``PYTHONPATH`` (Ray's workers import it) and
    Ray Train's v2 API on; both variables as they were afterwards."""
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "RAY_TRAIN_V2_ENABLED")}
    path = saved["PYTHONPATH"] or ""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fit(
    loop: Any,
    config: dict[str, Any],
    *,
    workers: int | tuple[int, int] = WORKERS,
    failures: int = 0,
    storage: str,
    name: str,
    cpus_per_worker: float = WORKER_CPUS,
) -> Any:
    """Run ``loop(config)`` on ``workers`` Ray Train workers (in a running cluster); the
    result, or the run's error raised."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=cast(Any, workers), resources_per_worker={"CPU": cpus_per_worker}
        ),
        run_config=RunConfig(
            name=name, storage_path=storage, failure_config=FailureConfig(max_failures=failures)
        ),
    )
    result = trainer.fit()
    if result.error is not None:
        raise result.error
    return result


def observe() -> dict[str, list[Seen]]:
    """Every case's records, per worker, from one run that restarts once (see the module)."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as storage:
        with cluster():
            config = {"out": out, "storage": storage, "name": "cases"}
            fit(_cases_loop, config, failures=1, storage=storage, name="cases")
        seen: dict[str, list[Seen]] = {}
        for case in CASES:
            ranks = []
            for rank in range(WORKERS):
                record = json.loads((Path(out) / f"{case.name}-{rank}.json").read_text())
                ranks.append(
                    Seen(
                        rank,
                        _batches(record["before"]),
                        _batches(record["after"]),
                        record["error"],
                        record["restart"],
                        record["iterates"],
                    )
                )
            seen[case.name] = ranks
        return seen


def _batches(items: list[Any]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    return tuple((int(epoch), tuple(int(i) for i in batch)) for epoch, batch in items)


# In the workers -------------------------------------------------------------------------


def _cases_loop(config: dict[str, Any]) -> None:
    import ray.train
    from ray.train import Checkpoint

    out = Path(config["out"])
    rank = ray.train.get_context().get_world_rank()
    checkpoint = ray.train.get_checkpoint()
    notes: dict[str, Any] = {}
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            notes = json.loads((Path(directory) / "notes.json").read_text())
    for case in CASES:
        _run_case(case, out, rank, notes, restarted=checkpoint is not None)
    if checkpoint is not None:
        return
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "notes.json").write_text(json.dumps(notes))
        saved = Checkpoint.from_directory(directory) if rank == 0 else None
        ray.train.report({"step": CHECKPOINT_STEP}, checkpoint=saved)
    await_checkpoint(config)
    raise RuntimeError("a planned failure after the checkpoint (Ray restarts the workers)")


def _run_case(case: Case, out: Path, rank: int, notes: dict[str, Any], *, restarted: bool) -> None:
    path = out / f"{case.name}-{rank}.json"
    record: dict[str, Any] = (
        json.loads(path.read_text())
        if restarted
        else {"before": [], "after": [], "error": None, "restart": "", "iterates": ""}
    )
    if record["error"] is None:
        try:
            _train(case, record, notes, restarted=restarted)
        except Exception as error:  # what the case's user would see
            record["error"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    path.write_text(json.dumps(record))


def _train(case: Case, record: dict[str, Any], notes: dict[str, Any], *, restarted: bool) -> None:
    loader, sampler = _prepared(case)
    record["iterates"] = _iterated(case, loader)
    last = EPOCHS - 1
    if restarted:
        _continue(case, loader, sampler, notes[case.name], record)
        return
    for epoch in range(EPOCHS):
        if case.path == "ray":
            loader.sampler.set_epoch(epoch)  # as Ray's guide writes it
        elif not case.ours:
            sampler.set_epoch(epoch)  # the sampler Ray kept, as its user would
        for step, batch in enumerate(loader):
            record["before"].append((epoch, _indices(batch)))
            if epoch == last and step + 1 == CHECKPOINT_STEP:
                notes[case.name] = _note(case, loader, sampler, epoch, step + 1)


def _note(case: Case, loader: Any, sampler: Any, epoch: int, steps: int) -> dict[str, Any]:
    """What this case's user checkpoints at a step."""
    if case.ours:
        return {"state": loader.state_dict()}
    if sampler is not None:  # a sampler of ours that Ray kept
        return {"epoch": epoch, "steps": steps, "sampler": sampler.state_dict()}
    return {"epoch": epoch, "steps": steps}


def _continue(
    case: Case, loader: Any, sampler: Any, note: dict[str, Any], record: dict[str, Any]
) -> None:
    """Continue the checkpoint's epoch the way this case's user would."""
    if case.ours:
        loader.load_state_dict(note["state"])
        record["restart"] = "state"
        epoch = loader.epoch
    elif "sampler" in note:
        sampler.load_state_dict(note["sampler"])  # the sampler Ray left in place
        record["restart"] = "sampler state"
        epoch = note["epoch"]
        sampler.set_epoch(epoch)
    else:
        record["restart"] = "epoch start"  # Ray's guide resumes at an epoch
        epoch = note["epoch"]
        loader.sampler.set_epoch(epoch)
    for batch in loader:
        record["after"].append((epoch, _indices(batch)))


def _iterated(case: Case, loader: Any) -> str:
    """The sampler the prepared loader draws its batches from: ``"torch <class>"`` or
    ``"<class> (ours)"``."""
    if case.ours:
        held = loader._position.sampler
    else:
        inner = getattr(loader, "_dataloader", loader)
        held = inner.batch_sampler
        if held is None or type(held).__name__ == "BatchSampler":
            held = inner.sampler
    kind = type(held)
    return (
        f"torch {kind.__name__}"
        if kind.__module__.startswith("torch.")
        else f"{kind.__name__} (ours)"
    )


def _indices(batch: Any) -> list[int]:
    return [int(i) for i in torch.as_tensor(batch).reshape(-1).tolist()]


def _prepared(case: Case) -> tuple[Any, Any]:
    """The case's loader, prepared by Ray or by us, and the sampler of ours Ray left in it
    (``None`` when Ray replaced it, or when ours prepared it)."""
    import ray.train.torch

    import samplers.integrations.ray as ours

    loader, original = loader_of(case.sampler)
    if case.ours:
        return ours.prepare_data_loader(loader), None
    options = {
        "ray": {},
        "ray-kept": {"add_dist_sampler": False},
        "ray-unmoved": {"add_dist_sampler": False, "move_to_device": False},
    }[case.path]
    prepared = ray.train.torch.prepare_data_loader(loader, **options)
    inner = getattr(prepared, "_dataloader", prepared)
    kept = original is not None and original in (inner.sampler, inner.batch_sampler)
    return prepared, original if kept else None


class Items(Dataset[torch.Tensor]):
    """Sample ``i`` is ``tensor([i])``: batches of any size (one included) carry indices."""

    def __len__(self) -> int:
        return DATASET_SIZE

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index])


def loader_of(name: str) -> tuple[DataLoader[Any], Any]:
    """The loader over the sampler named ``name`` (a key of :data:`SAMPLERS`), placed by
    the process group Ray initialised, and the sampler of ours in it (``None`` for the
    plain and stock loaders). A mixture's loader reads its ``ConcatDataset`` of the
    dataset's two parts, in which index ``i`` is sample ``i``."""
    dataset = Items()
    parts = [Subset(dataset, range(SPLIT)), Subset(dataset, range(SPLIT, DATASET_SIZE))]
    counts = [SPLIT, DATASET_SIZE - SPLIT]
    tokens = [sum(LENGTHS[:SPLIT]), sum(LENGTHS[SPLIT:])]
    if name == "plain":
        return DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True), None
    if name == "stock":
        return DataLoader(dataset, batch_size=BATCH_SIZE, sampler=StockSampler(dataset)), None
    indices: Any
    if name == "ours":
        indices = DistributedSampler(dataset, tail="uneven")
    elif name == "wrapper":
        indices = DistributedSamplerWrapper(RandomSampler(dataset), tail="uneven")
    elif name == "mixture":
        indices = DistributedMixtureSampler(parts, counts, tail="uneven")
    else:
        batches = _batch_sampler(name, dataset, parts, counts, tokens)
        return DataLoader(getattr(batches, "dataset", dataset), batch_sampler=batches), batches
    source = getattr(indices, "dataset", dataset)
    return DataLoader(source, batch_size=BATCH_SIZE, sampler=indices), indices


def _batch_sampler(
    name: str, dataset: Items, parts: list[Any], counts: list[int], tokens: list[int]
) -> Any:
    if name == "batches":
        return DistributedBatchSampler(dataset, BATCH_SIZE, tail="uneven")
    if name == "tokens":
        return DistributedTokenBatchSampler(LENGTHS, MAX_TOKENS)
    if name == "packed":
        return DistributedPackedBatchSampler(LENGTHS, MAX_TOKENS, ROWS, window=MAX_TOKENS)
    if name == "mixture-batches":
        return DistributedMixtureBatchSampler(parts, counts, BATCH_SIZE, tail="uneven")
    if name == "mixture-tokens":
        return DistributedMixtureTokenBatchSampler(parts, tokens, LENGTHS, MAX_TOKENS)
    if name == "packed-mixture":
        return DistributedPackedMixtureSampler(parts, tokens, LENGTHS, MAX_TOKENS, ROWS)
    raise ValueError(f"name must be one of {sorted(SAMPLERS)}, got {name!r}")


def await_checkpoint(config: dict[str, Any]) -> None:
    """Wait until Ray's controller has recorded a checkpoint of this run (in its snapshot)."""
    snapshot = Path(config["storage"]) / config["name"] / "checkpoint_manager_snapshot.json"
    deadline = time.monotonic() + CHECKPOINT_SETTLE
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):  # not written yet, or half written
            if json.loads(snapshot.read_text()).get("latest_checkpoint_result"):
                return
        time.sleep(0.2)
    raise TimeoutError(f"Ray recorded no checkpoint in {snapshot} in {CHECKPOINT_SETTLE:g} s")
