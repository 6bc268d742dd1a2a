"""Hugging Face Trainer: train with a sampler of ours, sharded once, its state in checkpoints.

The Trainer's documented way to use a custom sampler, overriding ``_get_train_sampler``,
puts the sampler into a DataLoader that the Trainer then hands to
``accelerator.prepare``, which shards its batches over the processes a second time (the
report's frameworks finding measures what is lost). :class:`ShardedTrainer` takes the
sampler as an argument instead and prepares its loader with
:func:`samplers.integrations.accelerate.prepare_data_loader`.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import warnings
from typing import Any

from torch.utils.data import DataLoader

from samplers.batch_sampler import DistributedBatchSampler
from samplers.checks import SamplerWarning
from samplers.integrations.loop import INDEX_SAMPLERS, framework

try:
    import transformers
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint, seed_worker
except ImportError as missing:  # pragma: no cover - the error names the extra
    raise framework("transformers", "transformers") from missing

from samplers.integrations.accelerate import prepare_data_loader

__all__ = ["STATE_FILE", "ShardedTrainer"]

#: The file, in each checkpoint folder, that holds the sampler's state (JSON).
STATE_FILE = "sampler_state.json"


class ShardedTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that trains on the batches a sampler of ours gives each rank.

    Guarantee: each rank trains on exactly the batches ``train_sampler`` gives it, each
    epoch at the Trainer's epoch (the sampler's ``set_epoch`` is called before each epoch),
    sharded once: the loader is prepared with
    :func:`samplers.integrations.accelerate.prepare_data_loader`, which keeps the Trainer's
    device placement and gradient accumulation. Every checkpoint the Trainer saves holds
    the sampler's state at the step it was saved (``sampler_state.json``), and
    ``train(resume_from_checkpoint=...)`` continues the interrupted epoch from that state
    instead of skipping batches, as if ``ignore_data_skip`` were set for that call.

    ``train_sampler`` is a :class:`~samplers.DistributedBatchSampler` (every rank the
    same number of batches, which DDP's per-step gradient all-reduce needs; its
    ``batch_size`` must be ``per_device_train_batch_size``), or a
    :class:`~samplers.DistributedSampler` / :class:`~samplers.DistributedSamplerWrapper`,
    batched with ``per_device_train_batch_size`` and ``dataloader_drop_last``. Build it
    after ``TrainingArguments`` (which starts the process group), over ``train_dataset``.

    Resume with the same number of processes: the Trainer maps its global step to an epoch
    by the number of steps per epoch. In the resumed epoch the Trainer counts its steps
    afresh, so with ``gradient_accumulation_steps > 1`` and an epoch whose batches it does
    not divide, the last, partial accumulation of that epoch is not stepped (it warns).
    """

    def __init__(self, *args: Any, train_sampler: Any, **kwargs: Any) -> None:
        if not isinstance(train_sampler, (DistributedBatchSampler, *INDEX_SAMPLERS)):
            raise TypeError(
                "train_sampler must be a DistributedBatchSampler, DistributedSampler or "
                f"DistributedSamplerWrapper of samplers, got {type(train_sampler).__name__}"
            )
        super().__init__(*args, **kwargs)
        batch_size = self.args.per_device_train_batch_size
        if isinstance(train_sampler, DistributedBatchSampler) and (
            train_sampler.batch_size != batch_size
        ):
            raise ValueError(
                f"train_sampler's batch_size is {train_sampler.batch_size}, but "
                f"per_device_train_batch_size is {batch_size}: make them equal"
            )
        self.train_sampler = train_sampler
        self._sharded_loader: Any = None
        self._resumed_state: dict[str, Any] | None = None
        self.add_callback(_SamplerCallback(self))

    def get_train_dataloader(self) -> DataLoader[Any]:
        """The training loader: ``train_sampler``'s batches, sharded once."""
        if self.train_dataset is None:
            raise ValueError("ShardedTrainer: training requires a train_dataset.")
        dataset, collator = self.train_dataset, self.data_collator
        if hasattr(dataset, "column_names") and hasattr(self, "_remove_unused_columns"):
            dataset = self._remove_unused_columns(dataset, description="training")
        elif hasattr(self, "_get_collator_with_removed_columns"):
            collator = self._get_collator_with_removed_columns(collator, description="training")
        args = self.args
        options: dict[str, Any] = {
            "collate_fn": collator,
            "num_workers": args.dataloader_num_workers,
            "pin_memory": args.dataloader_pin_memory,
            "persistent_workers": args.dataloader_persistent_workers,
            "prefetch_factor": args.dataloader_prefetch_factor,
            "worker_init_fn": _worker_init(args.dataloader_num_workers, args.process_index),
        }
        sampler = self.train_sampler
        if isinstance(sampler, DistributedBatchSampler):
            loader = DataLoader(dataset, batch_sampler=sampler, **options)
        else:
            loader = DataLoader(
                dataset,
                sampler=sampler,
                batch_size=self._train_batch_size,
                drop_last=args.dataloader_drop_last,
                **options,
            )
        self._sharded_loader = prepare_data_loader(loader, self.accelerator)
        return self._sharded_loader

    def train(
        self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``Trainer.train``; a checkpoint with a sampler state continues from it."""
        path = resume_from_checkpoint
        if path is True:
            path = get_last_checkpoint(self.args.output_dir)
        state_file = os.path.join(path, STATE_FILE) if isinstance(path, str) else None
        if state_file is None or not os.path.isfile(state_file):
            return super().train(resume_from_checkpoint, *args, **kwargs)
        with open(state_file, encoding="utf-8") as file:
            self._resumed_state = json.load(file)
        skipping = self.args.ignore_data_skip
        self.args.ignore_data_skip = True  # the sampler's state continues the epoch
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self.args.ignore_data_skip = skipping
            self._resumed_state = None


def _worker_init(num_workers: int, rank: int) -> Any:
    """The Trainer's own DataLoader worker seeding, as this transformers version takes it."""
    parameters = inspect.signature(seed_worker).parameters
    if "num_workers" in parameters and "rank" in parameters:
        return functools.partial(seed_worker, num_workers=num_workers, rank=rank)
    return seed_worker


class _SamplerCallback(transformers.TrainerCallback):
    """Loads a resumed state before its epoch starts; writes the state into checkpoints."""

    def __init__(self, trainer: ShardedTrainer) -> None:
        self.trainer = trainer

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        resumed, trainer._resumed_state = trainer._resumed_state, None
        loader = trainer._sharded_loader
        if resumed is None or loader is None:
            return
        batches = len(loader)  # the Trainer counted its steps per epoch from this length
        loader.load_state_dict(resumed)
        accumulation = args.gradient_accumulation_steps
        if accumulation > 1 and batches % accumulation and len(loader) < batches:
            warnings.warn(
                f"resuming mid-epoch with gradient_accumulation_steps={accumulation} and "
                f"{batches} batches per epoch: the Trainer counts the resumed epoch's steps "
                f"afresh, so its last {batches % accumulation} batches' gradients are not "
                "stepped in this epoch",
                SamplerWarning,
                stacklevel=2,
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = self.trainer._sharded_loader
        if loader is None or not args.should_save:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if not os.path.isdir(folder):
            raise FileNotFoundError(
                f"the checkpoint folder {folder} the Trainer reported saving does not exist; "
                "ShardedTrainer writes the sampler's state next to the checkpoint it saves"
            )
        with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as file:
            json.dump(loader.state_dict(), file)
