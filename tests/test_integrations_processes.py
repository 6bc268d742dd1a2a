"""samplers.integrations in real processes: 2 gloo ranks, each framework as its users run it.

For every framework: two epochs see every sample exactly once each (and a reshuffled
second epoch), and a run interrupted mid-epoch by a checkpoint, restored into new objects
through the framework's own checkpointing, continues exactly where the interrupted run
stopped: the batches before the checkpoint and after the restore are the uninterrupted
run's. Each test is one launch, bounded in time; it skips when its framework is missing.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from samplers import DistributedBatchSampler, DistributedPackedMixtureSampler, DistributedSampler
from samplers.resharding import ReshardingWarning
from studies.engines.frameworks import (
    Items,
    RecordingModel,
    lightning_module,
    torchrun_environment,
)
from studies.engines.local_ranks import launch

SIZE = 43
BATCH = 4
EPOCHS = 2
#: Batches each rank trains on before the checkpoint.
STEPS = 2
KINDS = ("batches", "indices", "packed mixture")
#: The packed mixture's documents: the two halves of the dataset, every document 3 tokens
#: (rows of 6 hold two; its number of batches is the same every epoch, which the Trainer's
#: step count assumes), weighted by their tokens: every sample once per epoch.
HALVES = [range(20), range(20, SIZE)]

pytestmark = [pytest.mark.processes, pytest.mark.filterwarnings("ignore::UserWarning")]


def framework(name: str) -> Any:
    return pytest.importorskip(name, reason=f"{name.split('.')[0]} is not installed")


def sampler(kind: str) -> Any:
    """Ours over SIZE samples from the process group, exactly once per epoch."""
    if kind == "batches":
        return DistributedBatchSampler(range(SIZE), BATCH, tail="uneven")
    if kind == "packed mixture":
        return DistributedPackedMixtureSampler(HALVES, [20, 23], [3] * SIZE, 6, 2, window=8)
    return DistributedSampler(range(SIZE), tail="uneven")


def loader_arguments(kind: str, made: Any) -> dict[str, Any]:
    if kind != "indices":
        return {"batch_sampler": made}
    return {"batch_size": BATCH, "sampler": made}


def exactly_once(per_rank: list[list[list[int]]]) -> bool:
    """Whether the ranks' batches of one epoch hold every sample exactly once."""
    return Counter(i for batches in per_rank for batch in batches for i in batch) == Counter(
        range(SIZE)
    )


def check_run(results: list[dict[str, Any]]) -> None:
    """The two properties every framework's result must have (see the module docstring).

    Each rank's result holds ``epochs`` (its batches per epoch, uninterrupted), ``before``
    (batches before the checkpoint), ``after`` (batches per epoch after the restore) and
    ``warned`` (whether a sampler warned of re-sharding).
    """
    for epoch in range(EPOCHS):
        assert exactly_once([result["epochs"][epoch] for result in results]), epoch
        resumed = [result["before"] * (epoch == 0) + result["after"][epoch] for result in results]
        assert exactly_once(resumed), epoch
    for result in results:
        assert result["epochs"][0] != result["epochs"][1]  # set_epoch reached the sampler
        assert len(result["before"]) == STEPS
        # The restored run continues the interrupted one batch for batch.
        assert result["before"] + result["after"][0] == result["epochs"][0]
        assert result["after"][1] == result["epochs"][1]
        assert not result["warned"]


def _warned(caught: list[warnings.WarningMessage]) -> bool:
    return any(issubclass(w.category, ReshardingWarning) for w in caught)


def interrupted_and_restored(
    make: Callable[[], Any], save: Callable[[Any], object], load: Callable[[Any], object]
) -> dict[str, Any]:
    """What :func:`check_run` checks, for loaders ``make()`` builds: two epochs, then
    ``STEPS`` batches, ``save`` (a checkpoint of that loader), and in a new loader
    ``load`` (its restore) and two epochs more."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        running = make()
        epochs = [[batch.tolist() for batch in running] for _ in range(EPOCHS)]
        interrupted = make()
        iterator = iter(interrupted)
        before = [next(iterator).tolist() for _ in range(STEPS)]
        save(interrupted)
        del iterator
        restored = make()
        load(restored)
        after = [[batch.tolist() for batch in restored] for _ in range(EPOCHS)]
    return {"epochs": epochs, "before": before, "after": after, "warned": _warned(caught)}


# --- accelerate -----------------------------------------------------------------------


def _accelerate(directory: str) -> dict[str, Any]:
    os.environ.update(torchrun_environment())
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from samplers.integrations.accelerate import prepare_data_loader

    results: dict[str, Any] = {}
    for kind in KINDS:

        def prepared(kind: str = kind) -> tuple[Any, Any, Any]:
            accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
            made = sampler(kind)
            loader = DataLoader(list(range(SIZE)), num_workers=2, **loader_arguments(kind, made))
            loader = prepare_data_loader(loader, accelerator)
            return accelerator, loader, accelerator.prepare(torch.nn.Linear(1, 1))

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            accelerator, loader, model = prepared()
            epochs, syncs = [], []
            for _ in range(EPOCHS):
                batches = []
                for batch in loader:
                    with accelerator.accumulate(model):
                        batches.append(batch.tolist())
                        syncs.append(accelerator.sync_gradients)
                epochs.append(batches)
            accelerator, loader, model = prepared()
            iterator = iter(loader)
            before = [next(iterator).tolist() for _ in range(STEPS)]
            accelerator.save_state(os.path.join(directory, kind))
            del iterator
            accelerator, loader, model = prepared()
            accelerator.load_state(os.path.join(directory, kind))
            after = [[batch.tolist() for batch in loader] for _ in range(EPOCHS)]
        results[kind] = {
            "epochs": epochs,
            "before": before,
            "after": after,
            "warned": _warned(caught),
            "syncs": syncs,
            # Batches are placed where the accelerator trains (CPU here).
            "placed on": str(loader.device),
            "device": str(accelerator.device),
        }
    return results


@pytest.mark.timeout(300)
def test_accelerate_prepared_loader_is_exact_and_resumes_through_save_state(
    tmp_path: Path,
) -> None:
    framework("accelerate")
    by_rank = launch(_accelerate, str(tmp_path), 2, timeout=240)
    for kind in KINDS:
        results = [result[kind] for result in by_rank]
        check_run(results)
        for result in results:
            # Gradient accumulation (4 steps) syncs on every 4th batch and on the loader's
            # last batch (the 6th), which only the end-of-loader signal can tell.
            assert result["syncs"] == [False, False, False, True, False, True] * EPOCHS
            assert result["placed on"] == result["device"]


# --- Hugging Face Trainer ---------------------------------------------------------------


def _by_epoch(seen: list[tuple[int, list[int]]], first: int = 0) -> list[list[list[int]]]:
    return [[batch for e, batch in seen if e == epoch] for epoch in range(first, EPOCHS)]


def _transformers(directory: str) -> dict[str, Any]:
    os.environ.update(torchrun_environment())
    from transformers import TrainerCallback, TrainingArguments

    from samplers.integrations.transformers import STATE_FILE, ShardedTrainer

    class Epochs(TrainerCallback):  # type: ignore[misc]
        def __init__(self, model: RecordingModel, per_epoch: int, stop_at: int | None) -> None:
            self.model, self.per_epoch, self.stop_at = model, per_epoch, stop_at

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.model.epoch = state.global_step // self.per_epoch

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == self.stop_at:  # the job is interrupted here
                control.should_training_stop = True

    results: dict[str, Any] = {}
    for kind in KINDS:

        def train(
            output: str,
            stop_at: int | None = None,
            resume: bool = False,
            kind: str = kind,
            **save: Any,
        ) -> Any:
            model = RecordingModel()
            arguments = TrainingArguments(
                output_dir=output,
                per_device_train_batch_size=BATCH,
                num_train_epochs=EPOCHS,
                learning_rate=0.0,
                use_cpu=True,
                report_to=[],
                logging_strategy="no",
                disable_tqdm=True,
                dataloader_num_workers=2,
                **save,
            )
            made = sampler(kind)
            per_epoch = len(made) if kind != "indices" else -(-len(made) // BATCH)
            trainer = ShardedTrainer(
                model=model,
                args=arguments,
                train_dataset=Items(),
                train_sampler=made,
                callbacks=[Epochs(model, per_epoch, stop_at)],
            )
            trainer.train(resume_from_checkpoint=resume or None)
            return model.seen

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            epochs = _by_epoch(train(os.path.join(directory, kind, "full"), save_strategy="no"))
            output = os.path.join(directory, kind, "interrupted")
            steps = {"save_strategy": "steps", "save_steps": STEPS}
            before = [batch for _, batch in train(output, stop_at=STEPS, **steps)]
            saved = json.loads(Path(output, f"checkpoint-{STEPS}", STATE_FILE).read_text())
            after = _by_epoch(train(output, resume=True, **steps))
        results[kind] = {
            "epochs": epochs,
            "before": before,
            "after": after,
            "warned": _warned(caught),
            "saved": saved,
        }
    return results


@pytest.mark.timeout(420)
def test_sharded_trainer_is_exact_and_resumes_from_its_checkpoints(tmp_path: Path) -> None:
    framework("transformers")
    by_rank = launch(_transformers, str(tmp_path), 2, timeout=360)
    for kind in KINDS:
        results = [result[kind] for result in by_rank]
        check_run(results)
        assert results[0]["saved"]["epoch"] == 0  # the checkpoint holds the sampler's state


# --- Lightning ---------------------------------------------------------------------------


def _lightning(directory: str) -> dict[str, Any]:
    os.environ.update(torchrun_environment())
    import lightning
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    from samplers.integrations.lightning import ShardedDataLoader

    class Interrupt(Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == STEPS:
                trainer.should_stop = True

    def fit(kind: str, root: str, callbacks: list[Any], checkpoint: str | None = None) -> Any:
        seen: list[tuple[int, list[int]]] = []
        trainer = lightning.Trainer(  # the defaults: use_distributed_sampler=True
            accelerator="cpu",
            devices=2,
            strategy="ddp",
            max_epochs=EPOCHS,
            logger=False,
            enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
            callbacks=callbacks,
        )
        arguments = loader_arguments(kind, sampler(kind))
        loader = ShardedDataLoader(list(range(SIZE)), num_workers=2, **arguments)
        trainer.fit(lightning_module(seen), loader, ckpt_path=checkpoint)
        return seen

    results: dict[str, Any] = {}
    for kind in KINDS:
        root = os.path.join(directory, kind)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            epochs = _by_epoch(fit(kind, root, []))
            saving = ModelCheckpoint(dirpath=root, every_n_train_steps=STEPS, save_top_k=-1)
            before = [batch for _, batch in fit(kind, root, [saving, Interrupt()])]
            checkpoint = os.path.join(root, f"epoch=0-step={STEPS}.ckpt")
            after = _by_epoch(fit(kind, root, [], checkpoint))
            fabric = _fabric(kind, root)
        results[kind] = {
            "epochs": epochs,
            "before": before,
            "after": after,
            "warned": _warned(caught),
            "fabric": fabric,
        }
    return results


_FABRIC: list[Any] = []


def _fabric(kind: str, directory: str) -> dict[str, Any]:
    """The same under Fabric: set up, save and load the loader with fabric.save/load."""
    from lightning.fabric import Fabric

    from samplers.integrations.lightning import ShardedDataLoader

    if not _FABRIC:  # one per process: it joins the existing group
        _FABRIC.append(Fabric(accelerator="cpu", devices=2, strategy="ddp"))
        _FABRIC[0].launch()
    fabric = _FABRIC[0]

    def loader() -> Any:
        made = sampler(kind)
        arguments = loader_arguments(kind, made)
        return fabric.setup_dataloaders(ShardedDataLoader(list(range(SIZE)), **arguments))

    path = os.path.join(directory, "fabric.ckpt")
    return interrupted_and_restored(
        loader,
        lambda interrupted: fabric.save(path, {"loader": interrupted}),
        lambda restored: fabric.load(path, {"loader": restored}),
    )


@pytest.mark.timeout(420)
def test_lightning_leaves_the_sharded_loader_alone_and_resumes_it(tmp_path: Path) -> None:
    framework("lightning")
    by_rank = launch(_lightning, str(tmp_path), 2, timeout=360)
    for kind in KINDS:
        check_run([result[kind] for result in by_rank])
        check_run([result[kind]["fabric"] for result in by_rank])


# --- torchdata.nodes ---------------------------------------------------------------------


def _nodes(_: object) -> dict[str, Any]:
    import torchdata.nodes as nodes

    from samplers.integrations.torchdata import Loader, sampler_node

    def pipeline(kind: str) -> Any:
        source = sampler_node(sampler(kind))
        if kind == "indices":
            source = nodes.Batcher(source, BATCH, drop_last=False)
        mapped = nodes.ParallelMapper(source, torch.tensor, num_workers=2, method="thread")
        return Loader(nodes.Prefetcher(mapped, 4))

    saved: list[Any] = []
    return {
        kind: interrupted_and_restored(
            lambda kind=kind: pipeline(kind),
            lambda interrupted: saved.append(interrupted.state_dict()),
            lambda restored: restored.load_state_dict(saved.pop()),
        )
        for kind in KINDS
    }


@pytest.mark.timeout(240)
def test_sampler_node_round_trips_through_the_pipeline_state() -> None:
    framework("torchdata.nodes")
    by_rank = launch(_nodes, None, 2, timeout=180)
    for kind in KINDS:
        check_run([result[kind] for result in by_rank])
