"""The resume state: where every rank stood in the epoch, as one global position.

Guarantee: a state is a small dict of JSON types (ints, bools, strings) whatever the
dataset size, the same on every rank at the same step, and :func:`decode` refuses any state
this version did not write or that cannot be true (a field missing or of the wrong type, a
position past the epoch, a seed and epoch the permutation cannot be drawn from), naming the
field. Fields (version 2):

``sampler``, ``dataset_length``, ``shuffle``, ``permutation``
    What the saved epoch's order was drawn from; loading needs the same.
``seed``, ``epoch``
    The saved epoch; loading takes them over.
``position``
    The positions ``[0, position)`` of the epoch's order have been handed out, over all
    ranks together (see :mod:`samplers.plan`): this is the whole of the progress.
``finished``
    Nothing more of the epoch is handed out (its last step is done).

A sampler whose order depends on more than these (the token sampler's budget, cost,
window, and the sum and a digest of its lengths) adds those settings as further fields,
which loading also needs to match. A field of :data:`LATER_FIELDS` may be missing: version 2
states written before it existed load, checked on the fields they have.

A state no ``state_dict()`` writes is refused, naming the fields: ``finished`` with a
``position`` short of the dataset's length, for one.

States of format version 1 (one rank's count in its layout, the format before version 2)
are read and converted to the position they describe; one whose ``last_epoch`` is its
``epoch`` with nothing taken is the end of that epoch (version 1 wrote a finished epoch as a
fresh iteration of an epoch that had already run), so it loads as a finished epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from samplers import checks
from samplers.options import TAILS
from samplers.plan import Batched, Layout, Strided

__all__ = [
    "LATER_FIELDS",
    "STATE_VERSION",
    "Saved",
    "ambiguous",
    "decode",
    "encode",
    "other_order",
]

#: The version :func:`encode` writes.
STATE_VERSION = 2

#: Order fields added to version 2 after states without them were written: such a state
#: still loads, checked on the fields it has (the token and packed samplers'
#: ``length_digest``, the packed samplers' ``split``, the packed mixture's ``passes``).
LATER_FIELDS = frozenset({"length_digest", "split", "passes"})

_FIELDS: dict[str, type] = {
    "version": int,
    "sampler": str,
    "dataset_length": int,
    "shuffle": bool,
    "permutation": str,
    "seed": int,
    "epoch": int,
    "position": int,
    "finished": bool,
}


@dataclass(frozen=True)
class Saved:
    """A state's progress: epoch ``epoch`` (drawn from ``seed``) stood at ``position``."""

    epoch: int
    seed: int
    position: int
    finished: bool

    @property
    def fresh(self) -> bool:
        """Nothing of the epoch was handed out: it starts afresh."""
        return self.position == 0 and not self.finished


def ambiguous(name: str, epoch: int, taken: int) -> ValueError:
    """The error of ``name.state_dict()`` while two iterations are in progress (``iter()``
    called while one of ``epoch`` had handed out ``taken`` items): either's position
    would do, and a wrong one skips or repeats samples."""
    return ValueError(
        f"{name}.state_dict() is ambiguous: iter() was called while an "
        f"iteration of epoch {epoch} was still being iterated ({taken} items handed out, "
        "not finished), so two iterations of this sampler are in progress and a state "
        "records one position. To peek at the order without starting an iteration, "
        "iterate a copy at the same epoch (peek = copy.copy(sampler); "
        "peek.set_epoch(sampler.epoch)); a new iteration (the next epoch's iter() or "
        "load_state_dict) ends this"
    )


def encode(
    sampler: str,
    dataset_length: int,
    shuffle: bool,
    permutation: str,
    saved: Saved,
    order_fields: Mapping[str, int | str] | None = None,
) -> dict[str, Any]:
    """The state dict of ``saved`` (plain Python types only)."""
    extra = {name: _plain(value) for name, value in (order_fields or {}).items()}
    return {
        **extra,
        "version": STATE_VERSION,
        "sampler": str(sampler),
        "dataset_length": int(dataset_length),
        "shuffle": bool(shuffle),
        "permutation": str(permutation),
        "seed": int(saved.seed),
        "epoch": int(saved.epoch),
        # A finished epoch's position is its end, whichever rank tells it.
        "position": int(dataset_length if saved.finished else min(saved.position, dataset_length)),
        "finished": bool(saved.finished),
    }


def _plain(value: int | str) -> int | str:
    return str(value) if isinstance(value, str) else int(value)


def _field(state: Mapping[str, Any], name: str, kind: type) -> Any:
    if name not in state:
        raise ValueError(f"state field {name!r} is missing (a truncated or foreign state?)")
    value = state[name]
    wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    if wrong:
        raise ValueError(f"state field {name!r} must be {kind.__name__}, got {value!r}")
    return value


def other_order(name: str, value: Any, expected: Any) -> ValueError:
    """The error for a state whose order field ``name`` is not this sampler's."""
    return ValueError(
        f"state field {name!r} is {value!r}, this sampler's is {expected!r}: the saved "
        "epoch's order cannot be continued"
    )


def decode(
    state: Any,
    *,
    sampler: str,
    dataset_length: int,
    shuffle: bool,
    permutation: str,
    order_fields: Mapping[str, int | str] | None = None,
) -> Saved:
    """The progress of ``state``, checked against the sampler it is loaded into.

    Raises ``ValueError`` naming the field: a state from another kind of sampler, dataset
    length, shuffle setting, permutation or ``order_fields``; an unknown version or field;
    a value of the wrong type or outside its possible range.
    """
    own = dict(order_fields or {})
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    for key in state:
        if not isinstance(key, str):
            raise ValueError(
                f"state field names are strings; this state has the field {key!r} "
                f"({type(key).__name__})"
            )
    version = state.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version == 1:
        return _decode_version_1(
            state,
            sampler=sampler,
            dataset_length=dataset_length,
            shuffle=shuffle,
            permutation=permutation,
        )
    values = {name: _field(state, name, kind) for name, kind in _FIELDS.items()}
    if values["version"] != STATE_VERSION:
        raise ValueError(
            f"state field 'version' is {values['version']!r}; this version of dsampler reads "
            f"state versions 1 and {STATE_VERSION}"
        )
    # Which kind of sampler wrote it first: its own fields are no surprise then.
    _check_origin(values, sampler, dataset_length, shuffle, permutation)
    unknown = sorted(set(state) - set(_FIELDS) - set(own))
    if unknown:
        raise ValueError(f"state field {unknown[0]!r} is not one dsampler writes")
    for name, expected in own.items():
        if name not in state and name in LATER_FIELDS:
            continue  # written before the field existed: checked without it
        value = _field(state, name, type(expected))
        if value != expected:
            raise other_order(name, value, expected)
    position = values["position"]
    if not 0 <= position <= dataset_length:
        raise ValueError(
            f"state field 'position' is {position}, outside the epoch's positions "
            f"[0, {dataset_length}]"
        )
    if values["finished"] and position != dataset_length:
        raise ValueError(
            f"state fields 'finished' and 'position' contradict each other: finished=True "
            f"with position={position}, but a finished epoch's position is its end, "
            f"{dataset_length}"
        )
    _check_key(values["seed"], values["epoch"], shuffle, permutation)
    return Saved(values["epoch"], values["seed"], position, values["finished"])


def _check_origin(
    values: Mapping[str, Any], sampler: str, dataset_length: int, shuffle: bool, permutation: str
) -> None:
    """The saved epoch's order can be drawn again by this sampler."""
    if values["sampler"] != sampler:
        raise ValueError(
            f"state field 'sampler' is {values['sampler']!r}, not {sampler!r}: a state loads "
            "into the kind of sampler that saved it"
        )
    if values["dataset_length"] != dataset_length:
        raise ValueError(
            f"state field 'dataset_length' is {values['dataset_length']}, but the dataset now "
            f"has {dataset_length} samples: the state belongs to another dataset"
        )
    if values["shuffle"] != shuffle:
        raise ValueError(
            f"state field 'shuffle' is {values['shuffle']}, this sampler's shuffle is "
            f"{shuffle}: the saved epoch's order cannot be continued"
        )
    if values["permutation"] != permutation:
        raise ValueError(
            f"state field 'permutation' is {values['permutation']!r}, this sampler draws "
            f"{permutation!r}: the saved epoch's order cannot be continued"
        )


def _check_key(seed: int, epoch: int, shuffle: bool, permutation: str) -> None:
    if shuffle:
        try:
            checks.shuffle_key_fits(seed, epoch, permutation)
        except ValueError as error:
            raise ValueError(f"state fields 'seed' and 'epoch' do not fit: {error}") from None


def _decode_version_1(
    state: Mapping[str, Any],
    *,
    sampler: str,
    dataset_length: int,
    shuffle: bool,
    permutation: str,
) -> Saved:
    """A version 1 state (one rank's count ``taken`` in its layout) as a position."""
    values = {
        name: _field(state, name, kind)
        for name, kind in (
            ("sampler", str),
            ("dataset_length", int),
            ("shuffle", bool),
            ("permutation", str),
            ("seed", int),
            ("epoch", int),
            ("tail", str),
            ("world_size", int),
            ("start", int),
            ("stop", int),
            ("taken", int),
        )
    }
    _check_origin(values, sampler, dataset_length, shuffle, permutation)
    _check_key(values["seed"], values["epoch"], shuffle, permutation)
    batch_size = state.get("batch_size")
    if values["tail"] not in TAILS:
        raise ValueError(f"state field 'tail' must be one of {TAILS}, got {values['tail']!r}")
    try:
        layout: Layout
        if batch_size is None:
            layout = Strided(dataset_length, values["world_size"], values["start"], values["stop"])
        else:
            layout = Batched(
                dataset_length, values["world_size"], batch_size, values["tail"], values["start"]
            )
        if values["taken"] < 0 or layout.start > dataset_length:
            raise ValueError(f"taken={values['taken']}, start={layout.start}")
    except (TypeError, ValueError) as error:
        raise ValueError(f"version 1 state fields do not fit: {error}") from None
    last_epoch = state.get("last_epoch")
    if last_epoch is not None and (isinstance(last_epoch, bool) or not isinstance(last_epoch, int)):
        raise ValueError(f"state field 'last_epoch' must be an integer or null, got {last_epoch!r}")
    position = layout.position_after(values["taken"])
    # Version 1 wrote an epoch whose last step was done as a fresh iteration of the same
    # epoch that had already run (``last_epoch == epoch``): that is a finished epoch.
    ended = values["start"] == 0 and values["taken"] == 0 and last_epoch == values["epoch"]
    # A rank whose share is empty (``stop == 0``) that has taken nothing has not begun the
    # epoch: it is at the epoch's start, as a version 2 state saved there says.
    begun = values["taken"] > 0 or values["start"] > 0
    if ended or (begun and position >= layout.stop):
        return Saved(values["epoch"], values["seed"], dataset_length, finished=True)
    return Saved(values["epoch"], values["seed"], min(position, dataset_length), finished=False)
