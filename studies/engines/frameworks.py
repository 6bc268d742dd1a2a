"""What the frameworks do to a DistributedSampler, observed in real processes.

Each :class:`Scenario` hands one sampler to one framework the way its users do (or through
the path :mod:`samplers.integrations` supports) and trains or iterates for
:data:`EPOCHS` epochs over :data:`DATASET_SIZE` samples, batch size :data:`BATCH_SIZE`,
with no ``set_epoch`` call of its own: whatever sets the epoch is the framework. Every
rank records the indices its training step (or loop) received, per epoch, the epochs the
sampler was told (its ``set_epoch`` calls), whether a sampler of ours warned that it was
sharded a second time, and the error if the framework refused to start.

All scenarios run in one launch of :data:`WORLD_SIZE` ranks
(:func:`studies.engines.local_ranks.launch`, gloo on 127.0.0.1): each rank first gets
the environment ``torchrun`` would give it, so the frameworks find the process group
already initialised and use it. The frameworks' own console output is discarded.

With 43 samples, batch size 4 and 2 ranks every sampler measured gives both ranks the same
number of batches, so the frameworks' per-step collectives (DDP's gradient all-reduce,
Lightning's per-step broadcast) pair up in every scenario. (A plain loader that accelerate
shards with ``even_batches=False`` gives the ranks different numbers of batches: it is
only iterated, with no collective per step.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedBatchSampler, DistributedSampler
from samplers.resharding import ReshardingWarning
from studies.engines.local_ranks import HOST, launch

__all__ = [
    "BATCH_SIZE",
    "DATASET_SIZE",
    "EPOCHS",
    "PLAIN_SEED",
    "SAMPLERS",
    "SCENARIOS",
    "WORLD_SIZE",
    "Items",
    "Observed",
    "RecordingModel",
    "Scenario",
    "lightning_module",
    "observe",
    "torchrun_environment",
]

DATASET_SIZE = 43
BATCH_SIZE = 4
EPOCHS = 2
WORLD_SIZE = 2
#: Seconds the whole launch may take (importing four frameworks on 2 shared cores).
TIMEOUT = 600.0

#: The samplers handed to the frameworks, by the name the tables use. ``none``: no
#: sampler at all, a plain ``DataLoader(shuffle=True)`` that the framework shards itself
#: (accelerate's own path, and the Trainer's when no sampler is given to it).
SAMPLERS = {
    "stock": "torch DistributedSampler",
    "ours": 'DistributedSampler(tail="uneven")',
    "ours, batches": 'DistributedBatchSampler(tail="uneven")',
    "none": "none: DataLoader(shuffle=True)",
}
#: The seed of the global generator before a plain loader is built (its shuffle draws
#: from it), so every run shuffles alike.
PLAIN_SEED = 0

BOTH_OURS = ("ours", "ours, batches")
ALL = ("stock", *BOTH_OURS)


@dataclass(frozen=True)
class Scenario:
    """One framework, one way of passing the sampler, one sampler, the framework's options.

    ``supported``: the path :mod:`samplers.integrations` provides, rather than the usual one.
    """

    framework: str
    path: str
    sampler: str
    options: tuple[tuple[str, bool], ...] = ()
    supported: bool = False

    def option_text(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.options)


@dataclass
class Observed:
    """What one rank saw in one scenario."""

    batches: list[tuple[int, list[int]]] = field(default_factory=list)
    epochs_set: list[int] = field(default_factory=list)
    warned: bool = False
    error: str | None = None


def _scenarios() -> tuple[Scenario, ...]:
    found: list[Scenario] = []
    options: tuple[tuple[str, bool], ...]
    for split in (False, True):
        for even in (True, False):
            options = (("split_batches", split), ("even_batches", even))
            found += [Scenario("accelerate", "Accelerator.prepare", s, options) for s in ALL]
    for split in (False, True):
        for even in (True, False):
            options = (("split_batches", split), ("even_batches", even))
            found += [Scenario("accelerate", "Accelerator.prepare, no sampler", "none", options)]
    found += [Scenario("accelerate", "prepare_data_loader", s, supported=True) for s in BOTH_OURS]
    found += [Scenario("transformers", "Trainer._get_train_sampler", s) for s in ("stock", "ours")]
    found += [Scenario("transformers", "Trainer, no sampler", "none")]
    found += [Scenario("transformers", "ShardedTrainer", s, supported=True) for s in BOTH_OURS]
    for framework, path in (("lightning", "Trainer.fit"), ("fabric", "setup_dataloaders")):
        for distributed in (True, False):
            options = (("use_distributed_sampler", distributed),)
            found += [Scenario(framework, path, s, options) for s in ALL]
        found += [Scenario(framework, "ShardedDataLoader", s, supported=True) for s in BOTH_OURS]
    found += [Scenario("torchdata", "StatefulDataLoader", s) for s in ALL]
    found += [Scenario("torchdata", "nodes.SamplerWrapper", "stock")]
    found += [Scenario("torchdata", "sampler_node", s, supported=True) for s in BOTH_OURS]
    return tuple(found)


#: Every scenario measured, in the order the finding lists them.
SCENARIOS = _scenarios()


def observe(
    scenarios: tuple[Scenario, ...] = SCENARIOS, *, timeout: float = TIMEOUT
) -> list[list[Observed]]:
    """``result[scenario][rank]``: what each rank saw, in one launch of all scenarios."""
    by_rank = launch(_on_rank, scenarios, WORLD_SIZE, timeout=timeout)
    return [[by_rank[rank][i] for rank in range(WORLD_SIZE)] for i in range(len(scenarios))]


def torchrun_environment(port: int = 29500) -> dict[str, str]:
    """The variables torchrun sets for this rank of the current group (one node).

    ``port`` only fills ``MASTER_PORT``: the group exists, and frameworks that find it
    initialised use it instead of starting another.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "NODE_RANK": "0",
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": HOST,
        "MASTER_PORT": str(port),
    }


# --- rank work ------------------------------------------------------------------------


def _on_rank(scenarios: tuple[Scenario, ...]) -> list[Observed]:
    os.environ.update(torchrun_environment())
    results = []
    with _quiet(), tempfile.TemporaryDirectory() as directory:
        for scenario in scenarios:
            results.append(_run(scenario, directory))
            dist.barrier()
    return results


def _run(scenario: Scenario, directory: str) -> Observed:
    observed = Observed()
    sampler = _sampler(scenario.sampler, observed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            observed.batches = RUNNERS[scenario.framework](scenario, sampler, directory)
        except (TypeError, ValueError, RuntimeError) as error:
            observed.error = type(error).__name__
    observed.warned = any(issubclass(w.category, ReshardingWarning) for w in caught)
    return observed


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Discard the frameworks' console output (progress, tips, logs) in this rank."""
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


class _RecordsEpochs:
    """Mixin: remembers every epoch ``set_epoch`` is called with."""

    observed: Observed

    def set_epoch(self, epoch: int) -> None:
        self.observed.epochs_set.append(int(epoch))
        super().set_epoch(epoch)  # type: ignore[misc]


class _Stock(_RecordsEpochs, StockSampler):  # type: ignore[type-arg]
    pass


class _Ours(_RecordsEpochs, DistributedSampler):  # type: ignore[type-arg]
    pass


class _OursBatches(_RecordsEpochs, DistributedBatchSampler):
    pass


def _options(scenario: Scenario) -> dict[str, Any]:
    """The scenario's framework options, as keyword arguments."""
    return dict(scenario.options)


def _sampler(name: str, observed: Observed) -> Any:
    dataset: Any = range(DATASET_SIZE)
    made: Any
    if name == "none":
        torch.manual_seed(PLAIN_SEED)
        return None
    if name == "stock":
        made = _Stock(dataset)
    elif name == "ours":
        made = _Ours(dataset, tail="uneven")
    else:
        made = _OursBatches(dataset, BATCH_SIZE, tail="uneven")
    made.observed = observed
    return made


def _loader(sampler: Any, loader_type: Any = DataLoader, **options: Any) -> Any:
    """The usual DataLoader over ``sampler`` (its batch sampler, for ours); a plain
    shuffled one for ``None``."""
    dataset = list(range(DATASET_SIZE))
    if sampler is None:
        return loader_type(dataset, batch_size=BATCH_SIZE, shuffle=True, **options)
    if isinstance(sampler, DistributedBatchSampler):
        return loader_type(dataset, batch_sampler=sampler, **options)
    return loader_type(dataset, batch_size=BATCH_SIZE, sampler=sampler, **options)


def _epochs(loader: Any) -> list[tuple[int, list[int]]]:
    return [(epoch, batch.tolist()) for epoch in range(EPOCHS) for batch in loader]


def _accelerate(scenario: Scenario, sampler: Any, directory: str) -> list[tuple[int, list[int]]]:
    from accelerate import Accelerator, DataLoaderConfiguration  # type: ignore[import-untyped]

    config = DataLoaderConfiguration(**_options(scenario))
    accelerator = Accelerator(cpu=True, dataloader_config=config, project_dir=directory)
    if scenario.supported:
        from samplers.integrations.accelerate import prepare_data_loader

        return _epochs(prepare_data_loader(_loader(sampler), accelerator))
    return _epochs(accelerator.prepare(_loader(sampler)))


class Items(Dataset[dict[str, torch.Tensor]]):
    """Sample ``i`` is ``{"x": [i], "labels": 0}``: the model sees which samples it got."""

    def __len__(self) -> int:
        return DATASET_SIZE

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.tensor([float(index)]), "labels": torch.tensor(0.0)}


class RecordingModel(torch.nn.Module):
    """A model with one weight that records the samples of each batch it is given, with
    its ``epoch`` attribute (which a Trainer callback sets)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[int, list[int]]] = []
        self.epoch = -1

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, Any]:
        self.seen.append((self.epoch, [int(value) for value in x.view(-1).tolist()]))
        return {"loss": (self.weight * x).sum() * 0}


def _transformers(scenario: Scenario, sampler: Any, directory: str) -> list[tuple[int, list[int]]]:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    model = RecordingModel()

    class EpochCounter(TrainerCallback):  # type: ignore[misc]
        def on_epoch_begin(self, *args: Any, **kwargs: Any) -> None:
            model.epoch += 1

    class SamplerOverride(Trainer):  # type: ignore[misc]
        """The documented way: override ``_get_train_sampler``."""

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return sampler

    arguments = TrainingArguments(
        output_dir=os.path.join(directory, "trainer"),
        per_device_train_batch_size=BATCH_SIZE,
        num_train_epochs=EPOCHS,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    common: dict[str, Any] = {"model": model, "args": arguments, "train_dataset": Items()}
    if scenario.supported:
        from samplers.integrations.transformers import ShardedTrainer

        trainer: Any = ShardedTrainer(**common, train_sampler=sampler, callbacks=[EpochCounter()])
    elif sampler is None:  # the Trainer's own sampler, sharded by accelerate
        trainer = Trainer(**common, callbacks=[EpochCounter()])
    else:
        trainer = SamplerOverride(**common, callbacks=[EpochCounter()])
    trainer.train()
    return model.seen


def lightning_module(seen: list[tuple[int, list[int]]]) -> Any:
    """A LightningModule with one weight whose training step appends (epoch, batch) to
    ``seen`` (its loss has zero gradient)."""
    import lightning

    class Recording(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
            seen.append((self.current_epoch, batch.tolist()))
            return (self.weight * batch.float()).sum() * 0

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    return Recording()


def _lightning(scenario: Scenario, sampler: Any, directory: str) -> list[tuple[int, list[int]]]:
    import lightning

    seen: list[tuple[int, list[int]]] = []
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=WORLD_SIZE,
        strategy="ddp",
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=directory,
        **_options(scenario),
    )
    trainer.fit(lightning_module(seen), _lightning_loader(scenario, sampler))
    return seen


def _lightning_loader(scenario: Scenario, sampler: Any) -> Any:
    if scenario.supported:
        from samplers.integrations.lightning import ShardedDataLoader

        return _loader(sampler, ShardedDataLoader)
    return _loader(sampler)


_FABRIC: list[Any] = []


def _fabric(scenario: Scenario, sampler: Any, directory: str) -> list[tuple[int, list[int]]]:
    from lightning.fabric import Fabric

    if not _FABRIC:  # one Fabric per process: it joins the existing group once
        fabric = Fabric(accelerator="cpu", devices=WORLD_SIZE, strategy="ddp")
        fabric.launch()
        _FABRIC.append(fabric)
    loader = _FABRIC[0].setup_dataloaders(
        _lightning_loader(scenario, sampler), **_options(scenario)
    )
    return _epochs(loader)


def _torchdata(scenario: Scenario, sampler: Any, directory: str) -> list[tuple[int, list[int]]]:
    if scenario.path == "StatefulDataLoader":
        from torchdata.stateful_dataloader import (  # type: ignore[import-untyped]
            StatefulDataLoader,
        )

        return _epochs(_loader(sampler, StatefulDataLoader))
    import torchdata.nodes as nodes  # type: ignore[import-untyped]

    from samplers.integrations.torchdata import sampler_node

    source = sampler_node(sampler) if scenario.supported else nodes.SamplerWrapper(sampler)
    if not isinstance(sampler, DistributedBatchSampler):
        source = nodes.Batcher(source, BATCH_SIZE, drop_last=False)
    return _epochs(nodes.Loader(nodes.Mapper(source, torch.tensor)))


#: How each framework is run, by its name in :class:`Scenario`.
RUNNERS: dict[str, Callable[[Scenario, Any, str], list[tuple[int, list[int]]]]] = {
    "accelerate": _accelerate,
    "transformers": _transformers,
    "lightning": _lightning,
    "fabric": _fabric,
    "torchdata": _torchdata,
}
