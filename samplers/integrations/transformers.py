"""Hugging Face Trainer: train with a sampler of ours, sharded once, its state in checkpoints.

The Trainer's documented way to use a custom sampler, overriding ``_get_train_sampler``,
puts the sampler into a DataLoader that the Trainer then hands to
``accelerator.prepare``, which shards its batches over the processes a second time (the
report's frameworks finding measures what is lost). :class:`ShardedTrainer` takes the
sampler as an argument instead and prepares its loader with
:func:`samplers.integrations.accelerate.prepare_data_loader`.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import os
import warnings
from typing import Any

from torch.utils.data import DataLoader

from samplers.checks import SamplerWarning
from samplers.integrations.loop import BATCH_SAMPLERS, INDEX_SAMPLERS, framework

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

    ``train_sampler`` is a batch sampler of ours (every rank the same number of batches,
    which DDP's per-step gradient all-reduce needs: :class:`~samplers.DistributedBatchSampler`
    and :class:`~samplers.DistributedMixtureBatchSampler`, whose ``batch_size`` must be
    ``per_device_train_batch_size``, or the token, packed and packed mixture samplers,
    whose batches the budget sizes), or an index sampler of ours
    (:class:`~samplers.DistributedSampler`, :class:`~samplers.DistributedSamplerWrapper`,
    :class:`~samplers.DistributedMixtureSampler`), batched with
    ``per_device_train_batch_size`` and ``dataloader_drop_last``. Build it
    after ``TrainingArguments`` (which starts the process group), over ``train_dataset``.

    Resume with the same number of processes: the Trainer maps its global step to an epoch
    by the number of steps per epoch. The Trainer runs the first epoch's number of steps in
    every epoch: with a token or packed sampler, whose number of batches can differ between
    epochs by a few, a longer epoch's last batches are not trained on, and a
    ``SamplerWarning`` says how many at the start of that epoch. In the resumed epoch the
    Trainer counts its steps afresh, so with ``gradient_accumulation_steps > 1`` and an
    epoch whose batches it does not divide, the last, partial accumulation of that epoch
    is not stepped (it warns).
    """

    def __init__(self, *args: Any, train_sampler: Any, **kwargs: Any) -> None:
        if not isinstance(train_sampler, (*BATCH_SAMPLERS, *INDEX_SAMPLERS)):
            ours = ", ".join(kind.__name__ for kind in (*BATCH_SAMPLERS, *INDEX_SAMPLERS))
            raise TypeError(
                f"train_sampler must be a sampler of samplers ({ours}, or a subclass), got "
                f"{type(train_sampler).__name__}"
            )
        super().__init__(*args, **kwargs)
        batch_size = self.args.per_device_train_batch_size
        # A batch sampler of a fixed batch size (the batch and mixture batch samplers).
        fixed = getattr(train_sampler, "batch_size", None)
        if isinstance(train_sampler, BATCH_SAMPLERS) and fixed not in (None, batch_size):
            raise ValueError(
                f"train_sampler's batch_size is {fixed}, but per_device_train_batch_size is "
                f"{batch_size}: make them equal"
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
        if isinstance(sampler, BATCH_SAMPLERS):
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
        #: The batches per epoch the Trainer plans every epoch with (the first one's).
        self._planned_batches = len(self._sharded_loader)
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
        if resumed is None and loader is not None:
            warn_shorter_plan(trainer.train_sampler, round(state.epoch), trainer._planned_batches)
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


def epoch_batches(sampler: Any, epoch: int) -> int:
    """How many batches ``sampler`` gives this rank in ``epoch`` (counted on a copy: the
    sampler itself is left as it is)."""
    counted = copy.copy(sampler)
    counted.set_epoch(epoch)
    return len(counted)


def warn_shorter_plan(sampler: Any, epoch: int, planned: int | None) -> None:
    """Warn when ``epoch`` has more batches than the Trainer plans every epoch with: the
    Trainer runs the first epoch's number of steps in each epoch, so the rest of a longer
    one is not trained on (token and packed samplers' counts can differ between epochs by
    a few batches)."""
    if planned is None or epoch < 1 or getattr(sampler, "batch_size", None) is not None:
        return
    found = epoch_batches(sampler, epoch)
    if found > planned:
        warnings.warn(
            f"epoch {epoch} has {found} batches on this rank, but the Trainer runs the first "
            f"epoch's {planned} in every epoch: its last {found - planned} are not trained "
            "on in this epoch (a token or packed sampler's count varies by epoch, and the "
            "Trainer's plan of steps cannot run them; to train on every batch, loop over "
            "samplers.integrations.accelerate.prepare_data_loader's loader yourself)",
            SamplerWarning,
            stacklevel=2,
        )
