"""Epoch bookkeeping shared by the samplers: ``set_epoch``, ``auto_epoch``, and a warning.

Guarantee: a shuffling sampler never repeats an epoch's order silently. When ``iter()`` is
called a second time at the same epoch with no ``set_epoch`` (and no write to ``epoch``)
in between, it either advances the epoch by one (``auto_epoch=True``) or emits one
``UserWarning`` per sampler that says how to fix the loop; the order itself is what the
stock sampler gives (the same as before), so the default stays a drop-in. An iterator
never asked for an item does not count: a DataLoader with workers calls ``iter()`` twice
per epoch (see ``Resumable._begin_iteration``).
"""

from __future__ import annotations

import warnings
from typing import Any

from samplers import checks

__all__ = ["EpochCounter"]


class EpochCounter:
    """Mixin for samplers with ``epoch``, ``shuffle`` and a ``seed``."""

    epoch: Any
    shuffle: Any
    seed: Any

    def _init_epochs(self, auto_epoch: Any) -> None:
        self.auto_epoch = checks.as_flag("auto_epoch", auto_epoch)
        self._last_epoch: int | None = None
        self._epoch_set = False
        self._warned_repeat = False

    def set_epoch(self, epoch: int) -> None:
        """Use ``seed + epoch`` for the next iteration's permutation.

        Call it before every epoch, with a different ``epoch`` each time; without it,
        every epoch repeats the order of epoch 0 (unless ``auto_epoch=True``). ``epoch``
        must be an integer, and with shuffling ``seed + epoch`` must fit
        ``torch.Generator.manual_seed``.
        """
        epoch = checks.epoch(epoch)
        if self.shuffle is True and isinstance(self.seed, int):
            # Fail here rather than at iter() when the permutation cannot be seeded.
            checks.shuffle_key_fits(self.seed, epoch, getattr(self, "permutation", "randperm"))
        self.epoch = epoch
        self._epoch_set = True

    def _start_epoch(self, shuffle: bool) -> None:
        """Called by ``iter()`` before planning: advance or warn on a repeated epoch."""
        repeated = (
            shuffle
            and self._last_epoch is not None
            and not self._epoch_set
            and self.epoch == self._last_epoch
        )
        if repeated and self.auto_epoch:
            self.epoch = checks.epoch(self.epoch) + 1
        elif repeated and not self._warned_repeat:
            self._warned_repeat = True
            warnings.warn(
                f"{type(self).__name__} is iterated again at epoch {self.epoch} without "
                "set_epoch: this epoch repeats the previous one's order. Call "
                "sampler.set_epoch(epoch) before each epoch, or pass auto_epoch=True",
                UserWarning,
                stacklevel=4,  # warn -> _begin_iteration -> __iter__ -> caller
            )
        self._last_epoch = self.epoch
        self._epoch_set = False
