"""How far a training loop got, when a torch ``DataLoader`` reads a sampler ahead of it.

Guarantee: for a sampler of this package read by a ``torch.utils.data.DataLoader`` (any
``num_workers``, as its ``sampler`` or its ``batch_sampler``), :func:`loop_progress` gives
what the loop has received: the batches the DataLoader yielded to it, in the sampler's
units (indices: batches times the batch size; batches: batches), and whether the loop has
received its last batch. A DataLoader with workers fetches ahead (``prefetch_factor``
batches per worker), so what the sampler handed out is more than the loop used; this is
what lets ``state_dict()`` record the loop's step instead.

How: when the sampler's ``iter()`` is called, :func:`find_loader` looks a few frames up the
call stack for the DataLoader iterator that called it (``_SingleProcessDataLoaderIter`` or
``_MultiProcessingDataLoaderIter``) and keeps a reference to that iterator's attribute
dictionary, not to the iterator: the DataLoader's workers shut down as usual when the loop
ends or is left with ``break``, and the counts stay readable afterwards. It reads two
attributes torch's DataLoader iterators have had since torch 1.x (``_num_yielded``,
``_index_sampler``); a DataLoader without them is not recognised, and the sampler's own
count is used.

torchdata's ``StatefulDataLoader`` is a reader too, read differently: it asks the sampler
for its state itself while it fetches ahead (its snapshots pair the sampler's state with
how many batches it fetched), and after a restore its counts start from the restored
step rather than from the sampler's iteration. So when a DataLoader iterator is on the
call stack (:func:`asked_by_loader`: torchdata taking a snapshot, or
``loader.state_dict()``), the state is what the sampler handed out, as torchdata expects;
when anyone else asks (the training loop), it is what the loop received: the batches the
sampler handed out less those fetched but not yet yielded (``_sampler_iter_yielded -
_num_yielded``, torchdata's counts since the iteration began or was restored).

A ``torchdata.nodes`` pipeline is no reader: its prefetchers hold items the loop has not
received, and the sampler cannot see the loop. An iteration it began
(:func:`find_pipeline`) gives its state only to the pipeline itself
(:func:`asked_by_pipeline`: ``SamplerWrapper.get_state``, which records it with each item
the prefetchers hold, so the pipeline's ``state_dict()`` is exact); anyone else is refused,
and pointed at the pipeline's state.

Ray Train's own ``ray.train.torch.prepare_data_loader`` wraps the DataLoader in a loader
that always holds the next batch, fetched before the loop asks for it (so that it can move
it to the device meanwhile). :func:`find_mover` finds that wrapper iterating the DataLoader
at ``iter()`` (further up the call stack), and :func:`held_ahead` says whether it holds a
batch the loop has not received, fetched from this iteration's DataLoader iterator: the
loop's progress is then one batch less than the DataLoader yielded. It reads two
attributes of the wrapper (``dataloader_iter``, ``next_batch``), without importing Ray.

Any DataLoader iterator (torch's or torchdata's) is also remembered, weakly, as the
iteration's *loader*: :func:`received_nothing` tells whether the loop has received
anything from it, which decides whether an iteration that workers only prefetched from
counts as an epoch (see :mod:`samplers.epochs`).
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import CodeType
from typing import TYPE_CHECKING, Any

from torch.utils.data import BatchSampler
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from samplers import checks
from samplers.callers import callers
from samplers.plan import ceil_div

if TYPE_CHECKING:
    from samplers.iterators import Progress

__all__ = [
    "LoopProgress",
    "asked_by_loader",
    "asked_by_pipeline",
    "check_steps",
    "find_loader",
    "find_mover",
    "find_pipeline",
    "held_ahead",
    "is_stateful",
    "loop_progress",
    "loop_received",
    "out_of_order",
    "prefetched_only",
    "reader_of",
    "received_nothing",
    "restored_finished",
    "stateful_progress",
    "unit_of",
]

#: How many frames above ``iter()`` a DataLoader iterator may be: the sampler's
#: ``__iter__`` and its core, a ``BatchSampler`` generator, ``_next_index``,
#: ``_try_put_index`` and ``_reset``.
_DEPTH = 8

_READERS = (_SingleProcessDataLoaderIter, _MultiProcessingDataLoaderIter)
#: The count torchdata's ``StatefulDataLoader`` iterators keep of the batches they fetched
#: from the sampler (since the iteration began or was restored); torch's have none.
_FETCHED = "_sampler_iter_yielded"
#: How many frames above ``state_dict()`` a DataLoader iterator asking for it may be: the
#: sampler's own ``state_dict`` and its core's, torchdata's batch sampler iterator, its
#: ``try_to_serialize``, ``_get_main_state`` / ``state_dict`` and ``_try_put_index``.
_ASKING_DEPTH = 12

#: How many frames above ``iter()`` Ray Train's loader wrapper may be: those of
#: :data:`_DEPTH`, then the DataLoader's ``__iter__`` and ``_get_iterator``, the iterator's
#: ``__init__`` and the wrapper's ``_prefetch_next_batch`` and ``__iter__``.
_MOVER_DEPTH = 16
#: The module and name of Ray Train's loader wrapper (not imported: Ray is optional).
_MOVER = ("ray.train.torch.train_loop_utils", "_WrappedDataLoader")

#: torchdata's ``StatefulDataLoader`` (module, name; not imported: torchdata is optional).
_STATEFUL_LOADER = ("torchdata.stateful_dataloader.stateful_dataloader", "StatefulDataLoader")
#: The line of its ``__iter__`` that checks whether the iterator it restored is finished.
_FINISHED_CHECK = "if self._iterator._finished:"

#: (indices or batches the loop received, whether it received the last batch)
LoopProgress = tuple[int, bool]


def find_loader(skip: int = 1) -> _BaseDataLoaderIter | None:
    """The DataLoader iterator (torch's or torchdata's) calling ``iter()`` on a sampler now
    (directly, or through the ``BatchSampler`` the DataLoader built around it), or ``None``;
    ``skip``: frames above the caller to start from."""
    for owner in callers(skip + 1, _DEPTH):
        if isinstance(owner, _BaseDataLoaderIter):
            return owner
    return None


def find_mover(skip: int = 1) -> object | None:
    """Ray Train's loader wrapper (``ray.train.torch.prepare_data_loader``'s) iterating
    the DataLoader that calls ``iter()`` on a sampler now, or ``None``; ``skip``: frames
    above the caller to start from."""
    for owner in callers(skip + 1, _MOVER_DEPTH):
        kind = type(owner)
        if (kind.__module__, kind.__name__) == _MOVER:
            return owner
    return None


def held_ahead(mover: object | None, loader: object | None) -> int:
    """Batches the loop has not received of those the DataLoader iterator ``loader``
    yielded: 1 while Ray's wrapper ``mover`` holds the batch it fetched ahead from it
    (the iteration it is in is ``loader``'s), else 0."""
    if mover is None or loader is None:
        return 0
    attributes = getattr(mover, "__dict__", {})
    holds = attributes.get("dataloader_iter") is loader and attributes.get("next_batch") is not None
    return int(holds)


def reader_of(loader: object | None, sampler: object) -> dict[str, Any] | None:
    """The attribute dictionary of ``loader`` when it is a DataLoader iterator (torch's, or
    torchdata's ``StatefulDataLoader``'s) whose counts tell what the loop received of
    ``sampler``, else ``None``."""
    if isinstance(loader, _READERS) or (
        isinstance(loader, _BaseDataLoaderIter) and _FETCHED in loader.__dict__
    ):
        attributes: dict[str, Any] = loader.__dict__
        return attributes if unit_of(attributes, sampler) is not None else None
    return None


def _in_pipeline(owner: object) -> bool:
    """Whether ``owner`` is a ``torchdata.nodes`` node, or of a subclass of one (as
    :func:`samplers.integrations.torchdata.sampler_node`'s)."""
    # A loop, not any() over a generator: no generator object at every iter() (the cost
    # finding counts the heap to the first index).
    for kind in type(owner).__mro__:  # noqa: SIM110
        if kind.__module__.startswith("torchdata.nodes"):
            return True
    return False


def find_pipeline(skip: int = 1) -> bool:
    """Whether a ``torchdata.nodes`` node (its ``SamplerWrapper``) is calling ``iter()``
    on a sampler now; ``skip``: frames above the caller to start from."""
    # A loop, not any() over a generator expression: the expression's frame would shift
    # ``skip`` by one (and reading the caller's own locals keeps them alive).
    for owner in callers(skip + 1, _DEPTH):  # noqa: SIM110
        if _in_pipeline(owner):
            return True
    return False


def asked_by_pipeline(skip: int = 1) -> bool:
    """Whether a ``torchdata.nodes`` node is taking the sampler's state (its
    ``SamplerWrapper.get_state``, within a few frames above the caller)."""
    for owner in callers(skip + 1, _ASKING_DEPTH):  # noqa: SIM110 (see find_pipeline)
        if _in_pipeline(owner):
            return True
    return False


def asked_by_loader(skip: int = 1) -> bool:
    """Whether a DataLoader iterator is on the call stack above the caller (within a few
    frames): a ``StatefulDataLoader`` taking the sampler's state itself."""
    for owner in callers(skip + 1, _ASKING_DEPTH):  # noqa: SIM110 (see find_pipeline)
        if isinstance(owner, _BaseDataLoaderIter):
            return True
    return False


def received_nothing(loader: object | None) -> bool:
    """Whether ``loader``, a DataLoader iterator with workers (torch's or torchdata's), has
    given the loop nothing since its iteration began: what its workers fetched was never
    used. ``False`` when it cannot be told (no workers, or not a DataLoader iterator)."""
    if not isinstance(loader, _BaseDataLoaderIter):
        return False
    received = loader.__dict__.get("_rcvd_idx")
    return isinstance(received, int) and received == 0


def prefetched_only(previous: object | None, current: object | None) -> bool:
    """Whether an iteration read by the DataLoader iterator ``previous`` was only fetched
    ahead by workers, never received by the loop, now that ``current`` (the DataLoader
    iterator calling ``iter()`` again, or ``None``) starts another.

    torch's own DataLoader with persistent workers reuses its iterator and zeroes its
    counts before it asks for the next epoch, so when torch's iterator asks again, its
    previous iteration was the loop's (counted as an epoch); torchdata's iterators count
    what they prefetched while restoring a finished epoch and threw away."""
    if previous is current and type(current) in _READERS:
        return False
    return received_nothing(previous)


def unit_of(reader: dict[str, Any], sampler: object) -> int | None:
    """Items of ``sampler`` per DataLoader batch: 1 when it is the batch sampler, the batch
    size when the DataLoader batches it with a ``BatchSampler``; else ``None``."""
    index_sampler = reader.get("_index_sampler")
    if index_sampler is sampler:
        return 1
    # Exactly torch's BatchSampler or torchdata's (which batches in order too): another
    # subclass (accelerate's BatchSamplerShard) may not batch the sampler's items in
    # order, so its batches are not the loop's progress.
    if not isinstance(index_sampler, BatchSampler) or not _in_order(type(index_sampler)):
        return None
    return int(index_sampler.batch_size) if index_sampler.sampler is sampler else None


def _in_order(kind: type) -> bool:
    """torch's ``BatchSampler`` or torchdata's ``StatefulDataLoader`` one (no import)."""
    return kind is BatchSampler or (
        kind.__name__ == "BatchSampler"
        and kind.__module__ == "torchdata.stateful_dataloader.sampler"
        and issubclass(kind, BatchSampler)
    )


def loop_progress(
    reader: dict[str, Any],
    sampler: object,
    count: int,
    ahead: int = 0,
    yielded: int | None = None,
) -> LoopProgress | None:
    """What the loop reading ``sampler`` through the DataLoader iterator ``reader`` has
    received of an iteration of ``count`` items, or ``None`` if it cannot be told;
    ``ahead``: batches yielded but held by a wrapper (:func:`held_ahead`); ``yielded``:
    the batches it had yielded when it began another iteration, if it has
    (:func:`samplers.readers.watch_reset`), for its count now is the other iteration's.

    Received items are counted as the DataLoader counts them (batches times the batch size
    for an index sampler, even when the last batch was smaller), which is the count every
    rank agrees on at the same step.
    """
    unit = unit_of(reader, sampler)
    batches = reader.get("_num_yielded") if yielded is None else yielded
    if unit is None or not isinstance(batches, int):
        return None
    batches = max(batches - ahead, 0)
    drop_last = bool(getattr(reader.get("_index_sampler"), "drop_last", False)) and unit > 1
    total = count // unit if drop_last else ceil_div(count, unit)
    return batches * unit, batches >= total


def stateful_progress(
    reader: dict[str, Any], sampler: object, count: int, taken: int, ahead: int = 0
) -> LoopProgress | None:
    """:func:`loop_progress` for a ``StatefulDataLoader`` iterator (``reader``), whose
    sampler iteration handed out ``taken`` of its ``count`` items: the batches they made
    less those fetched and not yet yielded to the loop (and the ``ahead`` a wrapper holds);
    ``None`` for another reader."""
    unit = unit_of(reader, sampler)
    fetched, received = reader.get(_FETCHED), reader.get("_num_yielded")
    if unit is None or not isinstance(fetched, int) or not isinstance(received, int):
        return None
    drop_last = bool(getattr(reader.get("_index_sampler"), "drop_last", False)) and unit > 1
    handed = taken // unit if drop_last else ceil_div(taken, unit)
    batches = max(handed - max(fetched - received, 0) - ahead, 0)
    total = count // unit if drop_last else ceil_div(count, unit)
    return batches * unit, batches >= total


def out_of_order(reader: dict[str, Any]) -> bool:
    """Whether the DataLoader iterator ``reader`` may yield batches out of the sampler's
    order (``in_order=False`` with workers: a worker's batch ready first comes first), so
    that the batches the loop received are not the first ones handed out."""
    workers = reader.get("_num_workers")
    return reader.get("_in_order") is False and isinstance(workers, int) and workers > 0


def is_stateful(reader: dict[str, Any]) -> bool:
    """Whether ``reader`` is a ``StatefulDataLoader`` iterator's attributes."""
    return _FETCHED in reader


def check_steps(
    sampler: object, rank: int, consumed: int, iterator: Any, batch_size: int | None
) -> None:
    """Raise ``ValueError`` unless ``consumed`` counts whole steps of rank ``rank``'s loop
    over ``iterator`` (an iteration of ``sampler``): an index sampler's items are steps
    times the batch size (``batch_size``, or the DataLoader's reading it)."""
    name = type(sampler).__name__
    layout = iterator.plan.layout
    if layout.batched:
        if batch_size is not None:
            raise ValueError(
                f"batch_size is for index samplers: {name}'s consumed counts batches, got "
                f"batch_size={batch_size!r}"
            )
        return
    if batch_size is None and iterator.reader is not None:
        batch_size = unit_of(iterator.reader, sampler)
    if batch_size is not None:
        size = checks.positive("batch_size", batch_size)
        if consumed % size:
            expected = ceil_div(consumed, size) * size
            raise ValueError(
                f"consumed={consumed} is not a whole number of steps of batch_size={size} "
                f"on rank {rank}: count steps x batch size, as a DataLoader does, even when "
                f"this rank's last batch was smaller; expected {expected}"
            )
        return
    share, longest = iterator.count, layout.count(0)
    if consumed == share < longest:
        raise ValueError(
            f"consumed={consumed} is rank {rank}'s whole share, shorter than rank 0's "
            f"({longest} items), so it may not be a whole number of steps: a DataLoader "
            "counts steps x batch size even when this rank's last batch was smaller, "
            f"which is at least {longest} after this rank's last step (unless the batch "
            f"size divides {consumed}); pass that count, with batch_size= to have it "
            "checked"
        )


def loop_received(
    iterator: Progress[Any],
    sampler: object,
    consumed: int | None,
    *,
    strict: bool = True,
    internal: bool = False,
) -> tuple[int, bool]:
    """What the loop reading ``iterator``, an iteration of ``sampler``, has received of it
    (in the sampler's items) and whether it received all of it: ``consumed`` when the
    caller says, else counted from the DataLoader iterator reading it (less the batch a
    Ray wrapper holds ahead), else what ``iterator`` handed out. A ``ValueError`` for a
    ``consumed`` above what was handed out, and (``strict``, for a state) for a DataLoader
    that yields out of order (no position of the epoch is what its loop received before
    the epoch's end). ``internal``: the sampler asks for itself (weights set in a loop
    apply from the loop's progress), so a ``StatefulDataLoader`` on the call stack is
    starting an iteration, not taking its snapshot (which records what was handed out),
    and nothing is refused."""
    strict = strict and not internal
    if consumed is not None:
        taken = iterator.taken
        if consumed > taken and not iterator.exhausted:
            raise ValueError(
                f"consumed must be at most {taken} (what this iteration handed out so "
                f"far), got {consumed}"
            )
        return consumed, False
    reader = iterator.reader
    # Ray's prepare_data_loader holds a batch the DataLoader yielded and the loop has
    # not received yet.
    ahead = held_ahead(iterator.mover(), iterator.loader())
    progress: tuple[int, bool] | None = None
    if reader is not None and is_stateful(reader):
        # torchdata's StatefulDataLoader: its own snapshots take what was handed out;
        # the loop is told what it received.
        if not internal and asked_by_loader(3):
            return iterator.taken, iterator.exhausted
        progress = stateful_progress(reader, sampler, iterator.count, iterator.taken, ahead)
    elif reader is not None:
        progress = loop_progress(reader, sampler, iterator.count, ahead, iterator.yielded_at_reset)
    if progress is None:
        progress = iterator.taken, iterator.exhausted
    if strict and reader is not None and out_of_order(reader) and not progress[1]:
        raise ValueError(
            "the DataLoader reading this sampler has in_order=False and workers: it "
            "yields each batch when a worker has it ready, not in the sampler's order, "
            "so what the loop received before the epoch's end is not a position of the "
            "epoch and no state can resume it exactly; build the DataLoader with "
            "in_order=True (the default) to take states in the loop"
        )
    return progress


def copy_at_loop(iterator: Progress[Any] | None, sampler: object) -> Progress[Any] | None:
    """For a copy or a pickle of ``sampler``: a copy of its iteration ``iterator`` at what
    the loop reading it received (the batches DataLoader workers or Ray's wrapper fetched
    ahead left out, as :meth:`state_dict` leaves them out), so that the copy's state and
    what it hands out next are the loop's; ``None`` where no loop reads ahead of it (the
    iterator is copied as it is)."""
    if iterator is None or (iterator.reader is None and iterator.mover() is None):
        return None
    try:
        taken, ended = loop_received(iterator, sampler, None, strict=False)
    except ValueError:
        return None
    # A loop counts whole batches of the DataLoader's batch size: past a smaller last
    # batch, more than the share holds.
    taken = min(taken, iterator.taken)
    if (taken, ended) == (iterator.taken, iterator.exhausted):
        return None
    return iterator.copy_at(taken, ended)


def restored_finished(restored: object | None, skip: int = 1) -> bool:
    """Whether torchdata's ``StatefulDataLoader`` calls ``iter()`` for the iterator it makes
    in place of ``restored``, the DataLoader iterator it restored, which replayed the
    batches since its last snapshot (the loop had them before the state) and finished the
    epoch: its ``__iter__`` is past its check that the restored iterator is finished (only
    a restore makes one finished at once). ``restored`` having received nothing, its
    workers only fetched ahead: not a replay (see :func:`prefetched_only`)."""
    if received_nothing(restored):
        return False
    kind = getattr(sys.modules.get(_STATEFUL_LOADER[0]), _STATEFUL_LOADER[1], None)
    code = getattr(getattr(kind, "__iter__", None), "__code__", None)
    get_frame = getattr(sys, "_getframe", None)
    if not isinstance(code, CodeType) or get_frame is None:
        return False
    frame = get_frame(skip + 1)
    for _ in range(_MOVER_DEPTH):
        if frame is None:
            return False
        if frame.f_code is code:
            line = _finished_check(code)
            return line is not None and frame.f_lineno > line
        frame = frame.f_back
    return False


@functools.cache
def _finished_check(code: CodeType) -> int | None:
    """The line of ``StatefulDataLoader.__iter__`` (``code``) that checks whether its
    iterator is finished, or ``None`` (another torchdata: nothing is recognised)."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    for number, line in enumerate(lines):
        if line.strip() == _FINISHED_CHECK:
            return first + number
    return None
