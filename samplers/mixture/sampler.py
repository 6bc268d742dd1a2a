"""Mixing several datasets by weight: :class:`DistributedMixtureSampler` (indices) and
:class:`DistributedMixtureBatchSampler` (batches, the same number on every rank).

Thin adapters over :class:`~samplers.mixture.order.MixtureOrder` (each stream position)
and :mod:`samplers.plan`'s layouts (each rank's positions); epochs, iteration, states and
agreement are :mod:`samplers.core`'s. The weight schedule is all a state adds.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from torch.utils.data import ConcatDataset, Sampler

from samplers import checks, consistency, groups, resharding, state
from samplers.core import SamplerCore
from samplers.iterators import BatchIterator, Progress, ShareIterator
from samplers.mixture.checks import (
    checked_datasets,
    checked_weights,
    decoded_schedule,
    epoch_length,
    is_int,
    stream_epoch,
)
from samplers.mixture.merge import Mixing, over_passes
from samplers.mixture.order import MixtureOrder
from samplers.mixture.schedule import Schedule, parts
from samplers.options import Tail
from samplers.plan import Batched, EpochPlan, Layout, ShardSizes, Strided

__all__ = ["DistributedMixtureBatchSampler", "DistributedMixtureSampler"]

#: The state fields a mixture adds: its sources' sizes (checked) and its schedule.
SIZES_FIELD = "sizes"
SCHEDULE_FIELD = "schedule"


class _Mixture(SamplerCore):
    """What both mixture samplers share: sources, weights, schedule, state."""

    datasets: list[Any]
    dataset: ConcatDataset[Any]
    sizes: tuple[int, ...]
    epoch_length: int
    schedule: Mixing

    def _init_mixture(
        self,
        datasets: Any,
        weights: Any,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int | None,
        epoch_length_value: int | None,
        tail: Tail,
        auto_epoch: bool,
        group: groups.Group,
        sizes: tuple[int, ...] | None = None,
    ) -> None:
        self.datasets, self.sizes = checked_datasets(datasets, weights)
        if sizes is not None:  # the sources' items are pieces of their documents
            self.sizes = sizes
        self.dataset = (
            datasets if isinstance(datasets, ConcatDataset) else ConcatDataset(self.datasets)
        )
        self.weights = checked_weights(weights, len(self.sizes))
        self.epoch_length = epoch_length(epoch_length_value, self.sizes)
        self.group = groups.reference(group)
        self.num_replicas, self.rank = groups.placement(num_replicas, rank, self.group)
        self.tail = checks.tail(tail, drop_last=False)
        self.shuffle = checks.as_flag("shuffle", shuffle)
        self.seed = consistency.seed_or_agreed(seed)
        self.permutation = "feistel"
        self.epoch = 0
        self.schedule = self._schedule_of(((0, self._parts(self.weights)),))
        #: Weights set during an iteration, applied where it stops (see :meth:`set_weights`).
        self._pending_weights: tuple[tuple[Any, ...], tuple[int, ...]] | None = None
        self._init_core(auto_epoch)

    # Weights ------------------------------------------------------------------------------

    def _parts(self, weights: tuple[float | int | Fraction, ...]) -> tuple[int, ...]:
        """The schedule's integer parts (per sample) for checked ``weights``."""
        return parts(weights)

    def _schedule_of(self, segments: tuple[tuple[int, tuple[int, ...]], ...]) -> Mixing:
        """The stream's schedule over ``segments`` (each a start position and its parts)."""
        return Schedule(segments)

    def _reweight_position(self, position: int) -> int:
        """Where new weights set at stream ``position`` take effect: there."""
        return position

    @property
    def proportions(self) -> tuple[Fraction, ...]:
        """Each source's exact share under the newest weights (normalised, rounded as
        :func:`~samplers.mixture.schedule.parts` says), from now or where an iteration stops."""
        pending = self._pending_weights
        current = self.schedule.segments[-1][1] if pending is None else pending[1]
        return tuple(Fraction(a, sum(current)) for a in current)

    def position(self) -> int:
        """The stream position the ranks stand at (``epoch * epoch_length`` + the state's)."""
        saved = self._saved(None)
        return saved.epoch * self.epoch_length + saved.position

    def set_weights(self, weights: Any) -> None:
        """Draw from the sources in proportion to ``weights`` from the current position on.

        Every source's pass stays where it is (its next sample is the one it would have
        given), so nothing is repeated; the change is recorded in the state, so a resume
        reproduces the schedule. Call it on every rank at the same step. A weight of 0
        pauses its source. Raises ``ValueError`` naming the weight for a negative, NaN or
        infinite weight, the wrong count, all zero, or more positive weights than
        :data:`~samplers.mixture.schedule.MAX_PERIOD`.

        During an iteration (started, its loop not at the epoch's end) the iteration in
        progress cannot change what it, or DataLoader workers for it, already handed out,
        so it keeps the old weights (a ``SamplerWarning`` says so), and the new ones
        apply from where it stops: from the epoch's end when its loop runs on to the end,
        or from where the loop is left (the next ``iter()`` continues the epoch from
        there under the new weights). Nothing is repeated or skipped either way. A state
        taken before then (:meth:`state_dict`) records the new weights from its own
        position, so a resume from it applies them there.
        """
        self._require_init("set_weights")
        values = checked_weights(weights, len(self.sizes))
        new_parts = self._parts(values)  # refused here, before anything changes
        current = self._current_state()
        running, book = self._iterator, self._book
        in_progress = running is not None and running.started and not current["finished"]
        if in_progress and not book.epoch_set and book.pending is None:
            position = current["epoch"] * self.epoch_length + current["position"]
            warnings.warn(
                "set_weights during an iteration: the iteration in progress keeps the old "
                "weights to where it stops, and the new ones apply from there: leave its "
                f"loop now and iterate the sampler again to continue from stream position "
                f"{position} under them, or let the loop run on to the epoch's end",
                checks.SamplerWarning,
                stacklevel=2,
            )
            self._pending_weights = (values, new_parts)
            self.weights = values
            return
        self._pending_weights = None
        self._apply_weights(values, new_parts, current)

    def _current_state(self) -> dict[str, Any]:
        """Its state now with its schedule (also what a ``torchdata.nodes`` pipeline took)."""
        return self.state_dict_with(self._encoded(self._saved(None, ahead_ok=True)))

    def _apply_weights(
        self, values: tuple[Any, ...], new_parts: tuple[int, ...], current: dict[str, Any]
    ) -> None:
        """The schedule changed to ``new_parts`` from ``current`` (this sampler's state)."""
        position = current["epoch"] * self.epoch_length + current["position"]
        self.schedule = self.schedule.changed(self._reweight_position(position), new_parts)
        self.weights = values
        self._internal_load = True
        try:
            self.load_state_dict(self.state_dict_with(current))
        finally:
            self._internal_load = False

    def _before_iteration(self) -> None:
        """Apply weights set during an iteration from where it stopped (its state now)."""
        pending = self._pending_weights
        if pending is None:
            return
        current = self._current_state()
        self._pending_weights = None
        self._apply_weights(*pending, current)

    def set_epoch(self, epoch: int) -> None:
        """As :meth:`samplers.DistributedSampler.set_epoch`; ``epoch`` at least 0, its
        stream positions below ``2**63`` (``ValueError`` naming both otherwise). Weights
        set during the iteration that ended apply from where it stopped."""
        if self._initialised:
            stream_epoch(checks.epoch(epoch), self.epoch_length)
            self._before_iteration()
        super().set_epoch(epoch)

    # Hooks --------------------------------------------------------------------------------

    def _dataset_length(self) -> int:
        return self.epoch_length

    def _end_position(self) -> int:
        return self.epoch_length

    def _mixture_order(self) -> MixtureOrder:
        """The current epoch's window of the stream (a merge over the passes of now)."""
        seed, shuffle = checks.seed(self.seed), checks.as_flag("shuffle", self.shuffle)
        self.schedule = over_passes(self.schedule, seed, shuffle)
        return MixtureOrder(
            self.sizes,
            self.schedule,
            seed,
            shuffle,
            stream_epoch(checks.epoch(self.epoch), self.epoch_length),
            self.epoch_length,
        )

    def _layout(self, start: int) -> Layout:
        raise NotImplementedError

    def _plan(self, start: int) -> EpochPlan:
        order = self._mixture_order()
        layout = self._layout(start)
        drop = checks.tail(self.tail, drop_last=False) == "drop"
        sizes = ShardSizes.of(self.epoch_length, layout.world_size, drop)
        return EpochPlan(
            sizes, order.shuffle, order.seed, order.epoch, layout, "feistel", given=order
        )

    def _order_fields(self) -> dict[str, int | str]:
        return {SIZES_FIELD: ",".join(map(str, self.sizes))}

    # State --------------------------------------------------------------------------------

    def state_dict_with(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (a state of this sampler) with the current schedule (and weights set
        during the iteration in progress, from ``base``'s position on)."""
        schedule = self.schedule
        if self._pending_weights is not None:
            position = base["epoch"] * self.epoch_length + base["position"]
            schedule = schedule.changed(self._reweight_position(position), self._pending_weights[1])
        return {
            **base,
            SCHEDULE_FIELD: [[start, list(p)] for start, p in schedule.segments],
        }

    def state_dict(
        self, consumed: int | None = None, *, batch_size: int | None = None
    ) -> dict[str, Any]:
        """The core's state (one global position; ``consumed`` and ``batch_size`` as
        there) plus the sources' sizes and the weight schedule: ``[[position, parts],
        ...]``, each segment's stream position and integer parts (``parts[d] / sum(parts)``
        is source ``d``'s share)."""
        return self.state_dict_with(super().state_dict(consumed, batch_size=batch_size))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a state saved by a mixture of the same sources (sizes), seed and
        epoch length on any world size, with its weight schedule. Raises ``ValueError``
        naming the field for a state of another mixture."""
        self._require_init("load_state_dict")
        if not isinstance(state_dict, dict):
            raise ValueError(
                f"state must be a dict from state_dict(), got {type(state_dict).__name__}"
            )
        rest = dict(state_dict)
        if SCHEDULE_FIELD not in rest:
            raise ValueError(f"state field {SCHEDULE_FIELD!r} is missing (not a mixture's state?)")
        saved, count = rest.pop(SCHEDULE_FIELD), len(self.sizes)
        schedule = self._schedule_of(decoded_schedule(saved, count, SCHEDULE_FIELD, self._parts))
        saved_length = rest.get("dataset_length")
        if is_int(saved_length) and saved_length != self.epoch_length:
            raise ValueError(
                f"state field 'dataset_length' is {saved_length}, the epoch_length of the "
                f"mixture that saved it; this mixture's epoch_length is {self.epoch_length}: "
                "its epochs are other windows of the stream (build it with "
                f"epoch_length={saved_length} to continue)"
            )
        state.decode(
            rest,
            sampler=type(self).__name__,
            dataset_length=self._dataset_length(),
            shuffle=checks.as_flag("shuffle", self.shuffle),
            permutation=self.permutation,
            order_fields=self._order_fields(),
        )
        if rest["seed"] != self.seed:
            raise ValueError(
                f"state field 'seed' is {rest['seed']}, this mixture's seed is {self.seed}: "
                "its sources' passes were drawn from another seed"
            )
        try:
            stream_epoch(rest["epoch"], self.epoch_length)
        except ValueError as error:
            raise ValueError(f"state field 'epoch' does not fit: {error}") from None
        super().load_state_dict(rest)
        self.schedule = schedule
        self.weights = schedule.segments[-1][1]
        self._pending_weights = None

    # Agreement and copies -----------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, including the sources' sizes and the schedule
        (and weights set during the iteration in progress)."""
        values = {
            **super().settings(),
            "sizes": list(self.sizes),
            "schedule": [[start, list(p)] for start, p in self.schedule.segments],
        }
        if self._pending_weights is not None:
            values["pending weights"] = list(self._pending_weights[1])
        return values

    def _rank(self) -> int:
        return checks.rank(self.rank, checks.world_size(self.num_replicas))


class DistributedMixtureSampler(_Mixture, Sampler[int]):
    """Indices into ``ConcatDataset(datasets)``, mixed by weight, this rank's share.

    Guarantees (over all ranks together, whatever the world size):

    * **exact proportions at every prefix**: after any ``k`` positions of the stream
      (since the last change of weights), each source has been drawn ``c_d`` times with
      ``|c_d - k * p_d| < 1``, ``p_d`` its share (:attr:`proportions`);
    * **once per pass**: each source is read in passes, each a fresh shuffle seeded from
      ``(seed, source, pass)``; no sample repeats within a pass, and a source that runs
      out starts its next pass (small sources are upsampled);
    * **epochs are windows of one stream**: epoch ``e`` is positions
      ``[e * epoch_length, (e + 1) * epoch_length)``, so passes continue across epochs;
    * **resume on any world size** from one number (:meth:`state_dict`), and
      :meth:`set_weights` mid-run repeats nothing and is reproduced by a resume.

    Rank ``r`` takes the positions ``r, r + W, ...`` of the epoch (as
    :class:`samplers.DistributedSampler`; ``tail`` as there: ``"pad"`` repeats the
    epoch's head to a multiple of ``num_replicas``, ``"drop"`` trims, ``"uneven"`` gives
    every position once). A rank computes only its own positions, each in O(1).

    Example::

        >>> sampler = DistributedMixtureSampler([range(6), range(100), range(3)],
        ...     [3, 1, 2], num_replicas=2, rank=0, epoch_length=12)
        >>> sampler.proportions
        (Fraction(1, 2), Fraction(1, 6), Fraction(1, 3))
        >>> len(list(sampler))
        6

    Args:
        datasets: the sources, a sequence of sized datasets or a ``ConcatDataset``;
            the indices index ``ConcatDataset(datasets)`` (also :attr:`dataset`).
        weights: one non-negative number per source, not all 0 (0 pauses a source);
            only their ratios matter.
        num_replicas: as for :class:`samplers.DistributedSampler`.
        rank: as for :class:`samplers.DistributedSampler`.
        shuffle: as for :class:`samplers.DistributedSampler` (``shuffle=False`` reads each
            pass in order; the mixing schedule is the same).
        seed: as for :class:`samplers.DistributedSampler`.
        tail: as for :class:`samplers.DistributedSampler`.
        auto_epoch: as for :class:`samplers.DistributedSampler`.
        group: as for :class:`samplers.DistributedSampler`.
        epoch_length: positions per epoch; default: the sum of the sources' sizes.
    """

    def __init__(
        self,
        datasets: Any,
        weights: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        *,
        epoch_length: int | None = None,
        tail: Tail = "pad",
        auto_epoch: bool = False,
        group: groups.Group = None,
    ) -> None:
        self._init_mixture(
            datasets,
            weights,
            num_replicas,
            rank,
            shuffle,
            seed,
            epoch_length,
            tail,
            auto_epoch,
            group,
        )

    def _layout(self, start: int) -> Layout:
        world = checks.world_size(self.num_replicas)
        checks.rank(self.rank, world)
        return Strided.of(self.epoch_length, world, checks.tail(self.tail, False), start)

    def _new_iterator(self, plan: EpochPlan) -> Progress[Any]:
        return ShareIterator.of(plan, self._rank())

    def __iter__(self) -> Iterator[int]:
        resharding.check(self)
        iterator: Iterator[int] = self._begin()
        return iterator

    def __len__(self) -> int:
        remaining = self._remaining_count()
        if remaining is not None:
            return remaining
        return self._layout(0).count(self._rank())

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(sizes={list(self.sizes)}, weights={list(self.weights)}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, tail={self.tail!r}, epoch_length={self.epoch_length}, "
            f"epoch={self.epoch})"
        )


class DistributedMixtureBatchSampler(_Mixture, Sampler[list[int]]):
    """Batches of indices into ``ConcatDataset(datasets)``, mixed by weight; every rank
    yields the same number of batches.

    The same stream and guarantees as :class:`DistributedMixtureSampler`; the positions
    are laid out a step at a time, one batch per rank per step (as
    :class:`samplers.DistributedBatchSampler`), so after ``k`` steps the ranks have
    consumed exactly the stream's first positions and each step's ``W * batch_size``
    samples hold every source within 1 of its share of the prefix. ``tail`` as there
    (``"uneven"`` gives equal counts whenever at least ``num_replicas`` positions remain
    and ``batch_size >= 2``, with a warning otherwise).

    Example::

        >>> sampler = DistributedMixtureBatchSampler([range(6), range(100)], [1, 1], 2,
        ...     num_replicas=2, rank=1, epoch_length=8, shuffle=False)
        >>> list(sampler)
        [[1, 7], [3, 9]]
    """

    def __init__(
        self,
        datasets: Any,
        weights: Any,
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        *,
        epoch_length: int | None = None,
        tail: Tail = "pad",
        auto_epoch: bool = False,
        group: groups.Group = None,
    ) -> None:
        self.batch_size = checks.positive("batch_size", batch_size)
        self._warned_unequal = False
        self._init_mixture(
            datasets,
            weights,
            num_replicas,
            rank,
            shuffle,
            seed,
            epoch_length,
            tail,
            auto_epoch,
            group,
        )

    def _layout(self, start: int) -> Layout:
        world = checks.world_size(self.num_replicas)
        checks.rank(self.rank, world)
        batch_size = checks.positive("batch_size", self.batch_size)
        return Batched(self.epoch_length, world, batch_size, checks.tail(self.tail, False), start)

    def _batch_size(self) -> int | None:
        return checks.positive("batch_size", self.batch_size)

    def _new_iterator(self, plan: EpochPlan) -> Progress[Any]:
        return BatchIterator.of(plan, self._rank())

    def __iter__(self) -> Iterator[list[int]]:
        resharding.check(self)
        iterator = self._begin()
        counts = set(iterator.plan.layout.counts())
        if len(counts) > 1 and not self._warned_unequal:
            self._warned_unequal = True
            warnings.warn(
                f"{type(self).__name__}(tail='uneven') gives ranks {min(counts)} or "
                f"{max(counts)} batches this epoch: a collective run once per batch would "
                "wait on the ranks with fewer; use tail='pad' or DDP's join()",
                checks.SamplerWarning,
                stacklevel=2,
            )
        batches: Iterator[list[int]] = iterator
        return batches

    def __len__(self) -> int:
        remaining = self._remaining_count()
        if remaining is not None:
            return remaining
        return self._layout(0).count(self._rank())

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(sizes={list(self.sizes)}, weights={list(self.weights)}, "
            f"batch_size={self.batch_size}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"tail={self.tail!r}, epoch_length={self.epoch_length}, epoch={self.epoch})"
        )
