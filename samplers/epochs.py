"""Epoch bookkeeping: which epoch an ``iter()`` runs, and from which position.

Guarantee: a shuffling sampler never repeats an epoch's order silently, and a loaded state
is continued exactly once, by the iteration of its epoch.

* ``iter()`` a second time at the same epoch with no ``set_epoch`` (or write to
  ``epoch``) in between either advances the epoch by one (``auto_epoch=True``) or emits
  one ``SamplerWarning`` (a ``UserWarning``) per sampler that says how to fix the loop;
  the order itself is what the stock sampler gives (the same as before), so the default
  stays a drop-in.
* A loaded state of epoch ``e`` is taken up by the next ``iter()`` at epoch ``e``: it
  continues from the saved position. A state of a finished epoch makes every ``iter()``
  at epoch ``e`` yield nothing (a DataLoader may call ``iter()`` more than once per
  pass), until the epoch changes; with ``auto_epoch=True`` and no ``set_epoch`` the next
  ``iter()`` is a fresh epoch ``e + 1`` instead. Iterating such a state without ever
  choosing epoch ``e`` with ``set_epoch`` warns once, since the empty pass may be a
  surprise. ``set_epoch`` to another epoch discards the state, with a warning when that
  drops the unfinished rest of its epoch.
* An ``iter()`` whose iterator was never advanced did not start the epoch: torch's
  DataLoader calls ``iter()`` on a batch sampler twice before it fetches, and torchdata's
  ``StatefulDataLoader`` calls it before restoring. Nor did one advanced only by a
  DataLoader's workers whose batches never reached the loop: torchdata, restoring a state
  taken after an epoch's loop ended, prefetches the next epoch with an iterator it then
  discards. The sampler core keeps an :class:`Undo` so that the next ``iter()`` replaces
  such an iteration instead of counting it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from samplers.checks import SamplerWarning
from samplers.state import Saved

__all__ = ["EpochBook", "Undo"]


@dataclass
class EpochBook:
    """What ``iter()`` needs to know about the sampler's past iterations."""

    auto_epoch: bool = False
    #: The epoch the last iteration ran at (``None``: none since building or loading).
    last_epoch: int | None = None
    #: ``set_epoch`` was called since the last iteration began.
    epoch_set: bool = False
    #: A loaded state not yet taken up by an iteration (a finished one stays).
    pending: Saved | None = None
    #: ``set_epoch`` chose the pending state's epoch (before or after loading it).
    chosen: bool = False
    #: The repeated-epoch warning was given.
    warned_repeat: bool = False
    #: The finished-epoch warning was given.
    warned_finished: bool = False

    def copy(self) -> EpochBook:
        return replace(self)

    def set_epoch(self, epoch: int, name: str, stacklevel: int) -> None:
        """Record ``set_epoch(epoch)``: the next iteration runs ``epoch``."""
        self.discard_other(epoch, name, stacklevel + 1)
        self.epoch_set = True
        if self.pending is not None:
            self.chosen = True

    def discard_other(self, epoch: int, name: str, stacklevel: int) -> None:
        """Drop a pending state of another epoch than ``epoch``, warning when that drops
        the unfinished rest of its epoch."""
        pending = self.pending
        if pending is None or pending.epoch == epoch:
            return
        self.pending = None
        self.chosen = False
        if not pending.finished and pending.position > 0:
            warnings.warn(
                f"{name}: epoch {epoch} replaces the loaded state of epoch {pending.epoch}, "
                f"which had handed out positions [0, {pending.position}) of its order; the "
                f"rest of epoch {pending.epoch} is skipped. To finish it first, call "
                f"set_epoch({pending.epoch}) and iterate once before moving on",
                SamplerWarning,
                stacklevel=stacklevel + 1,
            )

    def begin(
        self, epoch: int, seed: int, shuffle: bool, name: str, stacklevel: int
    ) -> tuple[int, int | None]:
        """At ``iter()``: the epoch this iteration runs and the global position it starts
        from (``None``: the epoch is finished, nothing is handed out)."""
        pending = self.pending
        if pending is not None and pending.seed != seed:
            self.pending = pending = None  # the seed was changed since loading
        if pending is not None and pending.epoch != epoch:
            self.discard_other(epoch, name, stacklevel + 1)
            pending = None
        start: int | None = 0
        if pending is not None and pending.finished:
            # set_epoch chose the finished epoch (before loading, as torchdata loads inside
            # the loader's iter()): the empty pass is intended, auto_epoch or not.
            if self.auto_epoch and not self.epoch_set and not self.chosen:
                self.pending = None
                epoch += 1
            else:
                start = None  # the epoch is over; the state stays for further iter()s
                if not self.chosen and not self.warned_finished:
                    self.warned_finished = True
                    warnings.warn(
                        f"{name} yields nothing: it continues the loaded state of epoch "
                        f"{epoch}, which is finished. Call set_epoch({epoch + 1}) (or pass "
                        "auto_epoch=True) to start the next epoch; call "
                        f"set_epoch({epoch}) first to say this empty pass is intended",
                        SamplerWarning,
                        stacklevel=stacklevel + 1,
                    )
        elif pending is not None:
            self.pending = None
            start = pending.position
        elif self.last_epoch is not None and not self.epoch_set and epoch == self.last_epoch:
            # Another pass without set_epoch: auto_epoch makes it the next epoch, shuffled
            # or not (a state then records which epoch ended); else it repeats the epoch,
            # which changes nothing without shuffling, and a shuffled one is warned of.
            if self.auto_epoch:
                epoch += 1
            elif shuffle and not self.warned_repeat:
                self.warned_repeat = True
                warnings.warn(
                    f"{name} is iterated again at epoch {epoch} without set_epoch: this epoch "
                    "repeats the previous one's order. Call sampler.set_epoch(epoch) before "
                    "each epoch, or pass auto_epoch=True",
                    SamplerWarning,
                    stacklevel=stacklevel + 1,
                )
        self.last_epoch = epoch
        self.epoch_set = False
        return epoch, start

    def peek(self, epoch: int, seed: int) -> tuple[int, int | None] | None:
        """What :meth:`begin` would return for a pending state, without taking it up
        (``None`` when no state is pending for this epoch and seed)."""
        pending = self.pending
        if pending is None or pending.epoch != epoch or pending.seed != seed:
            return None
        if pending.finished and self.auto_epoch and not self.epoch_set and not self.chosen:
            return epoch + 1, 0
        return epoch, None if pending.finished else pending.position


@dataclass(frozen=True)
class Undo:
    """The bookkeeping before an ``iter()`` and the epoch that ``iter()`` ran."""

    book: EpochBook
    epoch_before: int
    epoch_after: int
