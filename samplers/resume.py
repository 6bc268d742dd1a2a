"""Checkpoint and resume mid-epoch, on the same or another world size.

Guarantee: a sampler's :meth:`~Resumable.state_dict` is small (a dozen numbers, whatever
the dataset size), JSON-serialisable and versioned; loading it into a sampler of the same
configuration continues exactly where the saved iteration stopped, and loading it into
samplers of another world size, batch size or tail policy shares out exactly the rest of
that epoch. Why it works: every layout hands out a prefix of the epoch order, so the
ranks' progress (in lockstep, as under DDP) is one global position; the rest of the order
is laid out over the new ranks from there. Resuming costs drawing the epoch order (O(1)
without shuffling), never replaying the epoch.

Over the resumed epoch, with the ranks in lockstep: with tail ``"uneven"`` every sample is
seen exactly once; with ``"pad"`` at least once, and fewer than the new world size (times
the batch size, for the batch sampler) repeated; with ``"drop"`` none twice.

With a loaded state pending, ``len(sampler)`` is what iterating it will yield (the rest of
the epoch on this rank). Fields that contradict each other (a ``stop`` that the dataset
length, world size, tail and start do not give, more taken than the rank had) raise;
a state that is consistent but from another run cannot be told apart.

A state saved once the iteration has handed out its last index describes what the
sampler does next: a fresh iteration at its current epoch (after ``set_epoch(e + 1)``,
epoch ``e + 1``), exactly as the uninterrupted sampler would.

The state records what the sampler *handed out*. A plain DataLoader with workers fetches
ahead, so pass what the training loop actually consumed: ``state_dict(consumed=n)``, with
``n`` indices (batches, for the batch sampler) of the current epoch. torchdata's
``StatefulDataLoader`` calls ``state_dict()``/``load_state_dict()`` itself, at the right
moments, and then uses this state instead of replaying the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from samplers import checks, consistency
from samplers.epochs import EpochCounter
from samplers.plan import TAILS, Batched, EpochPlan, Layout, ShardSizes, Strided, strided_stop

__all__ = ["STATE_VERSION", "Resumable"]

#: The version :meth:`Resumable.state_dict` writes and :meth:`~Resumable.load_state_dict`
#: reads.
STATE_VERSION = 1

_INT_FIELDS = ("epoch", "seed", "dataset_length", "world_size", "rank", "start", "stop", "taken")
_BOOL_FIELDS = ("shuffle",)
_STR_FIELDS = ("sampler", "tail", "permutation")


class Resumable(EpochCounter):
    """Mixin: ``state_dict``/``load_state_dict`` over the sampler's plans, and the
    settings the ranks must agree on (``settings``, ``check_consistent``).

    A sampler provides ``_dataset_length()``, ``_fresh_layout(start)`` (its current
    settings' layout from a global ``start``), ``_batch_size()`` (``None`` for index
    samplers) and ``_new_iterator(plan)``, and builds plans with ``_plan_with(layout)``.
    """

    _iterator: Any = None
    _pending: dict[str, Any] | None = None
    #: The epoch bookkeeping before the last ``iter()``, and the epoch it left.
    _undo: tuple[Any, ...] | None = None

    # Hooks -------------------------------------------------------------------------

    def _dataset_length(self) -> int:
        raise NotImplementedError

    def _fresh_layout(self, start: int) -> Layout:
        raise NotImplementedError

    def _batch_size(self) -> int | None:
        return None

    def _permutation(self) -> str:
        """How the epoch order is drawn: ``"randperm"``, ``"feistel"``, or a stream."""
        return getattr(self, "permutation", "randperm")

    def _plan_with(self, layout: Layout, sizes: ShardSizes | None = None) -> EpochPlan:
        """The plan of ``layout`` over this sampler's epoch order, validated as it is now."""
        shuffle = checks.as_flag("shuffle", self.shuffle)  # type: ignore[attr-defined]
        seed = checks.seed(self.seed)  # type: ignore[attr-defined]
        epoch = checks.epoch(self.epoch)
        permutation = checks.permutation(self._permutation())
        if shuffle:
            checks.shuffle_key_fits(seed, epoch, permutation)
        if sizes is None:
            sizes = ShardSizes.of(layout.dataset_size, layout.world_size, self._tail() == "drop")
        return EpochPlan(sizes, shuffle, seed, epoch, layout, permutation)

    # Agreement --------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, as plain values (see :meth:`check_consistent`)."""
        values = {
            "sampler": type(self).__name__,
            "dataset length": self._dataset_length(),
            "num_replicas": self.num_replicas,  # type: ignore[attr-defined]
            "rank": self.rank,  # type: ignore[attr-defined]
            "shuffle": self.shuffle,  # type: ignore[attr-defined]
            "seed": self.seed,  # type: ignore[attr-defined]
            "epoch": self.epoch,
            "tail": self._tail(),
            "permutation": self._permutation(),
        }
        batch_size = self._batch_size()
        if batch_size is not None:
            values["batch_size"] = batch_size
        return values

    def check_consistent(self, group: Any = None, *, replicas: Any = None) -> None:
        """Collective: raise on every rank unless all ranks' samplers agree.

        Over ``group`` (default: the group the sampler shards over) compares
        :meth:`settings` (dataset length, ``num_replicas``, seed, epoch, shuffle, tail,
        permutation, batch size), that the ranks are ``0 .. W - 1`` once each and that
        ``num_replicas`` is the group's size ``W``; over ``replicas`` (e.g. ``mesh["tp"]``),
        that every member's settings are identical, rank included. The error names the
        ranks that differ and their values (see :mod:`samplers.consistency`). Call it on
        every rank at the same point, e.g. after building the sampler and after each
        ``set_epoch``.
        """
        own = getattr(self, "group", None) if group is None else group
        consistency.check_consistent(self.settings(), own, replicas=replicas)

    # Epochs -----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if self._pending is not None and self._pending["epoch"] != self.epoch:
            self._pending = None  # another epoch starts afresh

    def _next_iterator(self, iterator_type: Any) -> Any:
        """``iter()``: start (or resume) the epoch and return its iterator, kept for
        :meth:`state_dict`. ``iterator_type`` is ``ShareIterator`` or ``BatchIterator``."""
        resumed = self._begin_iteration(self.shuffle is True)  # type: ignore[attr-defined]
        if resumed is None:
            plan, taken = self.plan(), 0  # type: ignore[attr-defined]
        else:
            plan, taken = self._plan_with(resumed[0]), resumed[1]
        self._iterator = iterator_type(plan, self.rank, taken)  # type: ignore[attr-defined]
        return self._iterator

    def _begin_iteration(self, shuffle: bool) -> tuple[Layout, int] | None:
        """At ``iter()``: the epoch's bookkeeping, then the pending resumed layout.

        An iterator that was never asked for an item did not start the epoch: torch's
        DataLoader with workers calls ``iter()`` on a batch sampler twice before it
        fetches, and torchdata's ``StatefulDataLoader`` calls it before restoring. So
        when the previous iterator has not been advanced and the epoch was not set
        since, a new ``iter()`` first undoes what the previous one did (the repeated-epoch
        check, ``auto_epoch``'s step, the resumed state it took up) and replaces it.
        """
        previous, undo = self._iterator, self._undo
        if (
            previous is not None
            and undo is not None
            and not previous.started
            and not self._epoch_set
            and self.epoch == undo[-1]
        ):
            self._last_epoch, self.epoch, self._epoch_set, self._pending = undo[:-1]
        before = (self._last_epoch, self.epoch, self._epoch_set, self._pending)
        self._start_epoch(shuffle)
        resumed = self._resumed_layout()
        self._undo = (*before, self.epoch)
        return resumed

    def _resumed_layout(self) -> tuple[Layout, int] | None:
        """At ``iter()``: the pending resumed layout and how far into it, consumed once.

        With the saved world size, tail and batch size, the saved layout itself, from
        where the saved rank stopped; otherwise this sampler's layout from the global
        position the saved ranks reached.
        """
        resumed = self._peek_resumed()
        self._pending = None
        return resumed

    def _peek_resumed(self) -> tuple[Layout, int] | None:
        """What :meth:`_resumed_layout` would return now, without taking the state up."""
        pending = self._pending
        if pending is None or pending["epoch"] != self.epoch or pending["seed"] != self.seed:  # type: ignore[attr-defined]
            return None
        saved = _saved_layout(pending)
        same = (
            pending["world_size"] == checks.world_size(self.num_replicas)  # type: ignore[attr-defined]
            and pending["tail"] == self._tail()
            and pending["batch_size"] == self._batch_size()
        )
        if same:
            return saved, pending["taken"]
        return self._fresh_layout(saved.consumed(pending["taken"])), 0

    def _tail(self) -> str:
        return self.tail  # type: ignore[attr-defined,no-any-return]

    def _remaining_count(self) -> int | None:
        """With a loaded state pending for this epoch: what iterating it will yield."""
        resumed = self._peek_resumed()
        if resumed is None:
            return None
        layout, taken = resumed
        return layout.count(checks.as_int("rank", self.rank)) - taken  # type: ignore[attr-defined]

    def _accepted_stop(self, state: Mapping[str, Any], natural: int) -> bool:
        """Whether a strided state's ``stop`` fits (a subclass may allow overridden sizes)."""
        return state["stop"] == natural

    # State ------------------------------------------------------------------------------

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """This rank's progress through the current epoch, small and JSON-serialisable.

        ``consumed``: how many indices (batches, for the batch sampler) of the current
        epoch the training loop has actually consumed, when that is fewer than the
        sampler handed out (a DataLoader with workers fetches ahead); default: what the
        sampler handed out.
        """
        iterator = self._iterator
        if self._pending is not None:
            state = dict(self._pending)  # loaded, not iterated yet: still the same
            if consumed is not None:
                raise ValueError(
                    "consumed cannot be given before the resumed epoch is iterated, got "
                    f"consumed={consumed}"
                )
            return state
        layout: Layout | None = None
        taken = 0
        if iterator is not None:
            taken = iterator.taken
            if consumed is not None:
                consumed = checks.as_int("consumed", consumed)
                if not 0 <= consumed <= taken:
                    raise ValueError(
                        f"consumed must be in [0, {taken}] (what this epoch's iterator handed "
                        f"out so far), got {consumed}"
                    )
                taken = consumed
            layout = iterator.plan.layout
            # In lockstep, this rank's count tells how far all ranks got; once that is the
            # layout's end the epoch is over and the state is that of a fresh iteration.
            if layout.consumed(taken) >= layout.stop:
                layout = None
        last_epoch = self._last_epoch
        if layout is None:
            layout = self._fresh_layout(0)
            plan_epoch, start, taken = self.epoch, 0, 0
        else:
            plan_epoch, start = iterator.plan.epoch, layout.start
            if taken == 0 and start == 0 and self._undo is not None:
                # Nothing of this epoch consumed yet: the state is its start, so the
                # epoch bookkeeping is as it was before this iteration began.
                last_epoch = self._undo[0]
        return {
            "version": STATE_VERSION,
            "sampler": type(self).__name__,
            "epoch": checks.epoch(plan_epoch),
            "last_epoch": last_epoch,
            "seed": checks.seed(self.seed),  # type: ignore[attr-defined]
            "shuffle": bool(self.shuffle),  # type: ignore[attr-defined]
            "permutation": self._permutation(),
            "tail": layout.tail if isinstance(layout, Batched) else self._tail(),
            "dataset_length": self._dataset_length(),
            "world_size": layout.world_size,
            "rank": checks.as_int("rank", self.rank),  # type: ignore[attr-defined]
            "batch_size": layout.batch_size if isinstance(layout, Batched) else None,
            "start": start,
            "stop": layout.stop,
            "taken": taken,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (from any rank of the saved run, any world size).

        The state's seed and epoch replace this sampler's; the next ``iter()`` at that
        epoch continues it (a ``set_epoch`` to another epoch starts that one afresh).
        Raises ``ValueError`` naming the field for a state that does not fit: another
        dataset length, shuffle setting or sampler kind, an unknown version, a missing,
        mistyped, negative or inconsistent field.
        """
        checked = _checked(state, type(self).__name__, self._dataset_length())
        if checked["batch_size"] is None:
            natural = strided_stop(
                checked["dataset_length"], checked["world_size"], checked["tail"], checked["start"]
            )
            if not self._accepted_stop(checked, natural):
                raise ValueError(
                    f"state field 'stop' is {checked['stop']}, but {checked['dataset_length']} "
                    f"samples over world_size={checked['world_size']} with tail "
                    f"{checked['tail']!r} from start={checked['start']} end at {natural}: "
                    "the state is corrupted"
                )
        if checked["permutation"] != self._permutation():
            raise ValueError(
                f"state field 'permutation' is {checked['permutation']!r}, this sampler draws "
                f"{self._permutation()!r}: the saved epoch's order cannot be continued"
            )
        if checked["shuffle"] != bool(self.shuffle):  # type: ignore[attr-defined]
            raise ValueError(
                f"state field 'shuffle' is {checked['shuffle']}, this sampler's shuffle is "
                f"{self.shuffle}: the saved epoch's order cannot be continued"  # type: ignore[attr-defined]
            )
        self.seed = checked["seed"]
        self.epoch = checked["epoch"]
        self._epoch_set = False
        self._iterator = None
        self._undo = None
        if checked["taken"] == 0 and checked["start"] == 0:
            self._pending = None
            self._last_epoch = checked["last_epoch"]
        else:
            self._pending = checked
            self._last_epoch = None


def _saved_layout(state: Mapping[str, Any]) -> Layout:
    if state["batch_size"] is None:
        return Strided(state["dataset_length"], state["world_size"], state["start"], state["stop"])
    return Batched(
        state["dataset_length"],
        state["world_size"],
        state["batch_size"],
        state["tail"],
        state["start"],
    )


def _field(state: Mapping[str, Any], name: str) -> Any:
    if name not in state:
        raise ValueError(f"state field {name!r} is missing (a truncated or foreign state?)")
    return state[name]


def _checked(state: Any, kind: str, dataset_length: int) -> dict[str, Any]:
    """The state's fields, validated; a ValueError names the first field that is wrong."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    version = _field(state, "version")
    if version != STATE_VERSION or isinstance(version, bool):
        raise ValueError(
            f"state field 'version' is {version!r}; this version of dsampler reads state "
            f"version {STATE_VERSION}"
        )
    checked: dict[str, Any] = {"version": version}
    for name in _INT_FIELDS:
        value = _field(state, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"state field {name!r} must be an integer, got {value!r}")
        checked[name] = value
    for name in _BOOL_FIELDS:
        value = _field(state, name)
        if not isinstance(value, bool):
            raise ValueError(f"state field {name!r} must be a bool, got {value!r}")
        checked[name] = value
    for name in _STR_FIELDS:
        value = _field(state, name)
        if not isinstance(value, str):
            raise ValueError(f"state field {name!r} must be a string, got {value!r}")
        checked[name] = value
    for name in ("batch_size", "last_epoch"):
        value = _field(state, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"state field {name!r} must be an integer or null, got {value!r}")
        checked[name] = value
    for name, minimum in (
        ("dataset_length", 0),
        ("world_size", 1),
        ("rank", 0),
        ("start", 0),
        ("stop", 0),
        ("taken", 0),
    ):
        if checked[name] < minimum:
            raise ValueError(
                f"state field {name!r} must be at least {minimum}, got {checked[name]}"
            )
    if checked["batch_size"] is not None and checked["batch_size"] < 1:
        raise ValueError(
            f"state field 'batch_size' must be at least 1, got {checked['batch_size']}"
        )
    if checked["sampler"] != kind:
        raise ValueError(
            f"state field 'sampler' is {checked['sampler']!r}, not {kind!r}: a state loads "
            "into the kind of sampler that saved it"
        )
    if checked["tail"] not in TAILS:
        raise ValueError(f"state field 'tail' must be one of {TAILS}, got {checked['tail']!r}")
    if checked["dataset_length"] != dataset_length:
        raise ValueError(
            f"state field 'dataset_length' is {checked['dataset_length']}, but the dataset "
            f"now has {dataset_length} samples: the state belongs to another dataset"
        )
    if checked["rank"] >= checked["world_size"]:
        raise ValueError(
            f"state field 'rank' is {checked['rank']}, outside world_size={checked['world_size']}"
        )
    try:
        layout = _saved_layout(checked)
    except ValueError as error:
        raise ValueError(f"state fields 'start'/'stop'/'batch_size' do not fit: {error}") from None
    if checked["batch_size"] is not None and checked["stop"] != layout.stop:
        raise ValueError(
            f"state field 'stop' is {checked['stop']}, but the batches it describes end at "
            f"{layout.stop}: the state is corrupted"
        )
    count = layout.count(checked["rank"])
    if checked["taken"] > count:
        raise ValueError(
            f"state field 'taken' is {checked['taken']}, more than the {count} the saved rank "
            "was handed that epoch"
        )
    return checked
