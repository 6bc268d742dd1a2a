"""The core every sampler here shares: epochs, iteration, resume state and agreement.

Guarantee: a sampler built on :class:`SamplerCore` hands out, at each ``iter()``, exactly
``plan(start)``'s share for its rank, where the epoch and ``start`` follow the rules of
:mod:`samplers.epochs`; its ``state_dict()`` at any step is the same on every rank (one
global position, :mod:`samplers.state`), and a state loaded into samplers of any world size
continues the epoch from that position. Copies and pickles (of the sampler or of its
iterator) carry the bookkeeping and behave as the original would.

A sampler provides four hooks: ``_dataset_length()``, ``_plan(start)`` (its epoch plan
from a global position, from the attributes as they are now), ``_new_iterator(plan)`` and
``_batch_size()``; the attributes below are declared here and set by its ``__init__``
(``_init_core``).

Reading a resumed ``iter()``: ``__iter__`` -> :meth:`SamplerCore._begin` ->
:meth:`samplers.epochs.EpochBook.begin`, which returns the saved position the plan starts
from.
"""

from __future__ import annotations

import copy
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, cast

from samplers import checks, consistency, loader_progress, readers, side_reads, state
from samplers.epochs import EpochBook, Undo
from samplers.iterators import Progress, handed_out_all, held_elsewhere, take_over
from samplers.options import Tail
from samplers.plan import EpochPlan, Layout, ShardSizes

__all__ = ["SamplerCore"]


class SamplerCore(ABC):
    """Base of :class:`~samplers.DistributedSampler`, :class:`~samplers.DistributedBatchSampler`
    and :class:`~samplers.DistributedSamplerWrapper` (see the module docstring)."""

    num_replicas: int
    rank: int
    shuffle: bool
    seed: int
    epoch: int
    tail: Tail
    #: ``"randperm"``, ``"feistel"``, or ``"stream"`` (a wrapped sampler's).
    permutation: str
    auto_epoch: bool
    #: The data-parallel group the ranks come from, and that :meth:`check_consistent` checks
    #: over: the ``group=`` given (a process group or 1-D device mesh), held as a
    #: :class:`~samplers.groups.GroupRef` (``None`` on a subclass that skips ``__init__``).
    group: Any = None
    #: Set by ``_init_core``; a subclass that skips ``__init__`` keeps the stock behaviour.
    _initialised: bool = False
    _book: EpochBook
    _iterator: Progress[Any] | None = None
    _undo: Undo | None = None
    _side: side_reads.SideRead | None = None  # the loop's, the latest maybe a peek
    #: Set when this iteration began while an earlier one was still being iterated (that
    #: one's epoch and items handed out then): :meth:`state_dict` refuses to choose.
    _ambiguous: tuple[int, int] | None = None
    #: Set while a subclass loads a state of its own making (a mixture's new weights from
    #: where it stands): not the caller's load, so no warning about an iteration in progress.
    _internal_load: bool = False

    def _init_core(self, auto_epoch: Any) -> None:
        self.auto_epoch = checks.as_flag("auto_epoch", auto_epoch)
        self._book = EpochBook(auto_epoch=self.auto_epoch)
        self._iterator = None
        self._undo = None
        self._ambiguous = None
        self._initialised = True

    # Hooks ------------------------------------------------------------------------------

    @abstractmethod
    def _dataset_length(self) -> int:
        """The number of positions of the epoch order (the dataset's length)."""

    @abstractmethod
    def _plan(self, start: int) -> EpochPlan:
        """The current epoch's plan from global position ``start``, validated as now."""

    @abstractmethod
    def _new_iterator(self, plan: EpochPlan) -> Progress[Any]:
        """An iterator over this rank's share of ``plan``."""

    def _batch_size(self) -> int | None:
        """Samples per batch for a batch sampler, ``None`` for an index sampler."""
        return None

    def _before_iteration(self) -> None:  # noqa: B027 (a hook, empty by default)
        """Called by ``iter()`` before the new iteration is planned; nothing by default
        (the mixtures apply weights set during the previous iteration)."""

    def _order_fields(self) -> dict[str, int | str]:
        """Settings beyond the shared ones that decide the epoch order (saved in the
        state, and refused when they differ on loading); none by default."""
        return {}

    def _end_position(self) -> int:
        """A global position from which this sampler's layout hands out nothing."""
        return self._plan(0).layout.stop

    def plan(self) -> EpochPlan:
        """The current epoch's plan, read from the attributes as they are now."""
        return self._plan(0)

    def iteration_plan(self) -> EpochPlan:
        """The plan of the results of this epoch (``unshard`` reads it): its last iteration's
        (a resumed one's, from the loaded position), or a loaded state's, or :meth:`plan`."""
        side_reads.back_to_loop(self)
        epoch, iterator = checks.epoch(self.epoch), self._iterator
        if iterator is not None and iterator.plan.epoch == epoch:
            return iterator.plan
        peeked = self._book.peek(epoch, checks.seed(self.seed))
        return self._plan_from(peeked[1]) if peeked and peeked[0] == epoch else self.plan()

    def _settings_plan(self, layout: Layout, sizes: ShardSizes | None = None) -> EpochPlan:
        """The plan of ``layout`` over this sampler's epoch order, validated as it is now."""
        shuffle = checks.as_flag("shuffle", self.shuffle)
        seed = checks.seed(self.seed)
        epoch = checks.epoch(self.epoch)
        permutation = checks.permutation(self.permutation)
        if shuffle:
            checks.shuffle_key_fits(seed, epoch, permutation)
        if sizes is None:
            sizes = ShardSizes.of(layout.dataset_size, layout.world_size, self.tail == "drop")
        return EpochPlan(sizes, shuffle, seed, epoch, layout, permutation)

    def _require_init(self, what: str) -> None:
        if not self._initialised:
            raise TypeError(
                f"{type(self).__name__} did not run {SamplerCore.__name__}'s __init__ "
                f"(via super().__init__), which {what} needs"
            )

    # Iteration --------------------------------------------------------------------------

    def _begin(self) -> Progress[Any]:
        """``iter()``: settle the epoch and its start (a loaded state's position, or 0),
        plan it and return this rank's iterator, kept for :meth:`state_dict`. It is marked
        ambiguous when the iteration it replaces was started, has items left, is held
        elsewhere (a loop may still iterate it), no ``set_epoch`` moved to another epoch
        since, and no DataLoader called this ``iter()``."""
        loader = loader_progress.find_loader()
        side_reads.back_to_loop(self)  # the latest iteration a peek: the loop's back
        self._before_iteration()
        previous, undo = self._iterator, self._undo
        # torchdata replayed, after a restore, the rest of previous's epoch (see below)
        replayed = previous is not None and loader is not None and handed_out_all(previous)
        replayed = replayed and loader_progress.restored_finished(previous and previous.loader())
        if (
            previous is not None
            and undo is not None
            and not self._book.epoch_set
            and self.epoch == undo.epoch_after
            and (
                not previous.started
                or (previous.taken and loader_progress.prefetched_only(previous.loader(), loader))
                or replayed
            )
        ):
            # Never advanced, or only by workers whose batches never reached the loop, or
            # by torchdata replaying what the loop had before its state: not a pass of the
            # loop. One that had nothing to hand out (a rank's empty rest) was: it counts.
            self._book, self.epoch = undo.book.copy(), undo.epoch_before
            if replayed:  # the restored epoch is over: as a finished state loaded
                plan = previous.plan
                self._book.pending = state.Saved(plan.epoch, plan.seed, plan.layout.stop, True)
            if not previous.started:  # if its holder begins it after all: see _began_after
                previous.replan = weakref.WeakMethod(self._began_after)
            previous = None  # not an iteration of its own
        book_before, epoch_before = self._book, checks.epoch(self.epoch)
        # Bool-likes written as attributes (numpy.True_, 1) count as what they mean.
        shuffle = checks.as_flag("shuffle", self.shuffle)
        # Settled on a copy of the book, put in place after the iterator (the one before
        # kept for an undo): a state read meanwhile sees the loaded position, not epoch 0.
        book = book_before.copy()
        book.auto_epoch = checks.as_flag("auto_epoch", self.auto_epoch)
        try:
            epoch, start = book.begin(
                epoch_before, checks.seed(self.seed), shuffle, type(self).__name__, 3
            )
            if epoch != epoch_before:
                self.epoch = epoch
            iterator = self._new_iterator(self._plan_from(start))
        except BaseException:
            self.epoch = epoch_before
            raise
        readers.attach(iterator, loader, self)
        self._ambiguous = None
        # A DataLoader starting an iteration starts the loop's (it dropped its previous one).
        # One that handed out its whole share is over even before its StopIteration (a
        # loop that took len(sampler) items and still holds the iterator), and so is one
        # whose epoch set_epoch() left for another before this iter().
        if (
            loader is None
            and previous is not None
            and previous.started
            and not previous.exhausted
            and not handed_out_all(previous)
            and not (book_before.epoch_set and epoch != previous.plan.epoch)
            and held_elsewhere(previous)
        ):
            self._ambiguous = (previous.plan.epoch, previous.taken)
        self._iterator = iterator
        self._book, self._undo = book, Undo(book_before, epoch_before, epoch)
        self._side = side_reads.side_read(previous, iterator, loader, undo, self._undo, self._side)
        return iterator

    def _plan_from(self, start: int | None) -> EpochPlan:
        """The plan from ``start``; ``None``: from the epoch's end (nothing left)."""
        return self._plan(self._end_position() if start is None else start)

    def _remaining_count(self) -> int | None:
        """With a loaded state pending for this epoch: how many items iterating yields.
        Every ``__len__`` asks this first, so the loop's iteration is taken back from a
        peek before (:func:`samplers.side_reads.back_to_loop`)."""
        side_reads.back_to_loop(self)
        self._book.auto_epoch = checks.as_flag("auto_epoch", self.auto_epoch)
        peeked = self._book.peek(checks.epoch(self.epoch), checks.seed(self.seed))
        if peeked is None:
            return None
        epoch, start = peeked
        if epoch != self.epoch:
            return None  # a fresh next epoch: the usual length
        return self._plan_from(start).layout.count(checks.as_int("rank", self.rank))

    # Epochs -----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Use ``seed + epoch`` for the next iteration's order.

        Call it before every epoch, with a different ``epoch`` each time; without it, every
        epoch repeats the order of epoch 0 (unless ``auto_epoch=True``). ``epoch`` must be
        an integer, and with shuffling ``seed + epoch`` must fit
        ``torch.Generator.manual_seed``. After :meth:`load_state_dict`, ``set_epoch`` with
        the saved epoch continues it; another epoch discards the loaded state.
        """
        if not self._initialised:
            self.epoch = epoch  # the stock behaviour, for subclasses that skip __init__
            return
        epoch = checks.epoch(epoch)
        if checks.set_flag("shuffle", self.shuffle) and isinstance(self.seed, int):
            # Fail here rather than at iter() when the permutation cannot be seeded.
            checks.shuffle_key_fits(self.seed, epoch, self.permutation)
        side_reads.back_to_loop(self)  # a peek's bookkeeping undone before the change
        self._book.set_epoch(epoch, type(self).__name__, 2)
        self.epoch = epoch

    # State ------------------------------------------------------------------------------

    def state_dict(
        self, consumed: int | None = None, *, batch_size: int | None = None
    ) -> dict[str, Any]:
        """Where the ranks stand in the current epoch: the same small dict on every rank.

        It is one global position in the epoch's order (see :mod:`samplers.state`), read
        from this rank's iterator: what it handed out, or, when a torch ``DataLoader`` or
        torchdata's ``StatefulDataLoader`` reads it (any ``num_workers``), what the
        DataLoader has yielded to the loop (less the batch Ray Train's
        ``prepare_data_loader`` holds ahead of the loop, when it wraps the DataLoader).
        While a ``torchdata.nodes`` pipeline reads it
        (its prefetchers ahead of the loop) this raises ``ValueError``: save the pipeline's
        state, which holds this one at the item the loop received.
        Taken once the epoch's last step is done, it says the epoch is finished. It may be
        called from another thread while the loop iterates (a checkpoint or monitoring
        thread): the position is then one the loop's iterator reached during the call.
        One exception to "the same on every rank": with ``tail="uneven"`` through a
        DataLoader, a rank whose share is shorter says the epoch is finished from the step
        where it receives its last batch (it cannot tell that step from the end of its
        loop), while longer shares still have a step to take; rank 0's state is right then.

        A state is one iteration's position. When ``iter()`` is called (not by a
        DataLoader) while an earlier iteration is still held and not finished, e.g. a
        callback that peeks with ``next(iter(sampler))`` in the middle of the loop, two
        iterations are in progress and this raises ``ValueError`` saying so, until the
        next iteration or :meth:`load_state_dict`; peek at a copy at the same epoch
        instead (``peek = copy.copy(sampler); peek.set_epoch(sampler.epoch)``). An
        iteration nobody holds any more (a loop left with ``break``) does not count. A
        peek through a DataLoader (``next(iter(loader))`` in its loop) leaves the state
        the loop's (:mod:`samplers.side_reads`).

        ``consumed``: for loops the sampler cannot see (something between it and the loop
        that fetches ahead), how many items of the current iteration (since the ``iter()``
        that started or resumed the epoch) this rank's loop has consumed, counted as a
        DataLoader counts them: steps times the batch size for an index sampler, even when
        this rank's last batch was smaller; batches for a batch sampler. For an index
        sampler, a count that is not a whole number of steps raises ``ValueError`` naming
        the expected count: checked against ``batch_size`` when given (or the batch size
        of the DataLoader reading the sampler); without either, this rank's whole share
        passed when it is shorter than other ranks' (``tail="uneven"``) is refused, since
        the count then decides whether the epoch is finished.
        """
        self._require_init("state_dict")
        return self._encoded(self._saved(consumed, batch_size))

    def _encoded(self, saved: state.Saved) -> dict[str, Any]:
        """The state dict of ``saved``, a progress of this sampler."""
        return state.encode(
            type(self).__name__,
            self._dataset_length(),
            checks.as_flag("shuffle", self.shuffle),
            self.permutation,
            saved,
            self._order_fields(),
        )

    def _saved(
        self, consumed: int | None, batch_size: int | None = None, *, ahead_ok: bool = False
    ) -> state.Saved:
        """The progress a state records (see :meth:`state_dict`); ``ahead_ok``, for the
        sampler's own use: a ``torchdata.nodes`` pipeline's (else refused), and the loop's
        progress even within a DataLoader's ``iter()`` (not its snapshot's)."""
        side_reads.back_to_loop(self)
        pending = self._book.pending
        iterator = self._iterator
        ambiguous = self._ambiguous  # two iterations in progress: either's state would do
        if pending is None and iterator is not None and not self._book.epoch_set and ambiguous:
            raise state.ambiguous(type(self).__name__, *ambiguous)
        if consumed is not None:
            consumed = checks.as_int("consumed", consumed)
            if consumed < 0:
                raise ValueError(f"consumed must be at least 0, got {consumed}")
        if pending is not None or iterator is None or self._book.epoch_set:
            if consumed:
                raise ValueError(
                    f"consumed={consumed}, but this sampler has not started the iteration it "
                    "would count in: the next iter() "
                    + ("continues a loaded state" if pending is not None else "starts afresh")
                )
            if pending is not None:
                return pending
            return state.Saved(checks.epoch(self.epoch), checks.seed(self.seed), 0, False)
        if iterator.pipeline and not ahead_ok and not loader_progress.asked_by_pipeline(2):
            raise ValueError(
                f"{type(self).__name__}.state_dict(): this iteration is read by a "
                "torchdata.nodes pipeline, whose prefetchers hold items the loop has not "
                "received yet, so this sampler's own position is ahead of the loop; save the "
                "pipeline's state instead (loader.state_dict() of its nodes.Loader, which "
                "holds this sampler's state at the item the loop received)"
            )
        plan = iterator.plan
        layout = plan.layout
        if not iterator.started and not consumed:
            # iter() without next(): the iteration's start (a finished epoch's empty one
            # starts at its end).
            finished = 0 < layout.start >= layout.stop
            return state.Saved(plan.epoch, plan.seed, layout.start, finished)
        if consumed is not None:
            rank = checks.as_int("rank", self.rank)
            loader_progress.check_steps(self, rank, consumed, iterator, batch_size)
        steps, ended = self._progress(iterator, consumed, internal=ahead_ok)
        position = layout.position_after(steps)
        return state.Saved(plan.epoch, plan.seed, position, ended or position >= layout.stop)

    def _progress(
        self, iterator: Progress[Any], consumed: int | None, *, internal: bool = False
    ) -> tuple[int, bool]:
        """(items this rank's loop consumed of the iteration, whether the loop ended)."""
        return loader_progress.loop_received(iterator, self, consumed, internal=internal)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` (saved by any rank of a run of any world size).

        Its seed and epoch replace this sampler's. The next ``iter()`` at that epoch (with
        or without ``set_epoch(epoch)``) continues the epoch from the saved position; a
        state of a finished epoch yields nothing more of it (with ``auto_epoch=True`` and
        no ``set_epoch``, the next iteration is the next epoch). ``set_epoch`` to another
        epoch discards it. Raises ``ValueError`` naming the field for a state that does
        not fit (see :func:`samplers.state.decode`).
        """
        self._require_init("load_state_dict")
        saved = state.decode(
            state_dict,
            sampler=type(self).__name__,
            dataset_length=self._dataset_length(),
            shuffle=checks.as_flag("shuffle", self.shuffle),
            permutation=self.permutation,
            order_fields=self._order_fields(),
        )
        side_reads.back_to_loop(self)
        iterator, undo = self._iterator, self._undo
        unstarted = iterator is not None and not iterator.started and undo is not None
        if unstarted and undo is not None:
            # An iter() never advanced did not start anything: as if it never happened.
            self._book, self.epoch = undo.book.copy(), undo.epoch_before
        elif (
            iterator is not None
            and iterator.started
            and not iterator.exhausted
            and not self._internal_load
            and not self._book.epoch_set
            and not handed_out_all(iterator)
            and held_elsewhere(iterator)
        ):
            warnings.warn(
                f"load_state_dict during an iteration of {type(self).__name__} (begun by an "
                f"iter() that handed out {iterator.taken} items already, to DataLoader "
                "workers maybe): that iteration keeps yielding the epoch it began, from "
                "where it is; the loaded state applies from the next iter(). Load the state "
                "before iter(sampler) or iter(loader), or iterate again after loading it",
                checks.SamplerWarning,
                stacklevel=2,
            )
        book = self._book
        book.chosen = book.epoch_set and checks.epoch(self.epoch) == saved.epoch
        book.pending = None if saved.fresh else saved
        book.epoch_set = False
        book.last_epoch = None
        self.seed = saved.seed
        self.epoch = saved.epoch
        self._iterator = None
        self._undo = self._side = None
        self._ambiguous = None
        if unstarted and iterator is not None:
            # Whoever holds it (a DataLoader iterator made before the state was loaded)
            # gets, at its first next(), what iter() would give then.
            iterator.replan = weakref.WeakMethod(self._continue_in)

    def _continue_in(self, iterator: Progress[Any]) -> None:
        """At the first ``next()`` of ``iterator``, an ``iter()`` made before a state was
        loaded: it yields what ``iter()`` gives now (the loaded position, after any
        ``set_epoch`` since), still the iterator of whoever began it (its DataLoader);
        unless another iteration began since (that one is the sampler's; this one keeps
        its plan)."""
        if self._iterator is not None:
            return
        iter(cast("Iterable[Any]", self))  # each sampler's own iter() (its hooks)
        assert self._iterator is not None
        take_over(iterator, self._iterator)
        self._iterator = iterator

    def _began_after(self, iterator: Progress[Any]) -> None:
        """At the first ``next()`` of ``iterator``, an ``iter()`` a later one replaced: if
        that one handed out items (a peek), :meth:`state_dict` refuses to choose."""
        current = self._iterator
        if current is not None and current is not iterator and current.taken:
            self._ambiguous = (current.plan.epoch, current.taken)

    # Agreement --------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, as plain values (see :meth:`check_consistent`)."""
        self._require_init("settings")
        values: dict[str, Any] = {
            "sampler": type(self).__name__,
            "dataset length": self._dataset_length(),
            "num_replicas": self.num_replicas,
            "rank": self.rank,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self.epoch,
            "tail": self.tail,
            "permutation": self.permutation,
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
        ranks that differ and their values (see :mod:`samplers.consistency`); when a rank
        cannot compute its settings (``len(dataset)`` raises, say), every rank raises
        :class:`~samplers.consistency.RankFailedError` naming it and its error. Call it on
        every rank at the same point, e.g. after building the sampler and after each
        ``set_epoch``.
        """
        own = self.group if group is None else group
        consistency.check_consistent(self.settings, own, replicas=replicas)

    # Copies -----------------------------------------------------------------------------

    def __copy__(self) -> SamplerCore:
        clone = type(self).__new__(type(self))
        clone.__dict__.update(SamplerCore.__getstate__(self))
        for name in ("_book", "_iterator", "_undo"):
            if name in self.__dict__:
                clone.__dict__[name] = copy.deepcopy(clone.__dict__[name])
        return clone

    def __getstate__(self) -> dict[str, Any]:
        """The attributes; the iteration at what its loop received (prefetched items out)."""
        side_reads.back_to_loop(self)
        state = {k: v for k, v in self.__dict__.items() if k != "_side"}
        at_loop = loader_progress.copy_at_loop(state.get("_iterator"), self)
        return state if at_loop is None else {**state, "_iterator": at_loop}
