"""The epoch order of a packed sampler: windows packed best-fit decreasing into rows.

Guarantee: :class:`PackedOrder` is a :class:`~samplers.tokens.order.TokenOrder` (a
permutation of ``[0, N)``, its batches consecutive ranges of positions, each within one
window, a function of the lengths and the settings only, never of the world size) whose
batches are made of whole **rows**: runs of consecutive positions whose lengths sum to at
most ``max_length``, except a row of one sample longer than that. A batch holds
``rows_per_batch`` rows (the last batch of a window may hold fewer).

How, window by window (windows as in :mod:`samplers.tokens.order`):

1. the window's samples, sorted longest first (ties in permutation order), are packed
   best-fit decreasing: each goes into the open row with the least room that still
   fits it (the earliest such row on a tie), or opens a new row; a sample longer than
   ``max_length`` is a row of its own. That is TRL's default packing (``"bfd"``) and
   the one with the least padding of the usual greedy ones;
2. the window's positions hold its rows in the order they were opened, each row's
   samples in the order they went in (longest first), and every ``rows_per_batch``
   consecutive rows are a batch;
3. the batches are ordered by cost (under the cost model, summed over each batch's
   samples), as :class:`~samplers.tokens.order.TokenOrder` orders them.

**The rows can be read back from the lengths alone** (:func:`row_starts`): cutting a
batch's lengths greedily (a row takes the next sample while the sum stays within
``max_length``) gives exactly its rows. A row's first sample did not fit into any row
opened before it when it was placed, and rows only fill up, so it does not fit after
them; the rest of a row fits with it. That is why a packed batch reaches the DataLoader
as a flat list of indices and :func:`samplers.tokens.collate.packed_collate` rebuilds
its rows from the samples' lengths.

**With phases** (:attr:`~samplers.tokens.order.TokenOrder.phases`, a packed mixture's
windows that end a source's pass), a window's samples of each phase must be handed out
before the next phase's: each phase is packed on its own and into the last row before
it, the free samples (phase -1) then fill what is left and rows of their own
(:func:`packed_in_phases`); the rows go out in the order opened, phase after phase,
the free rows last, and every ``rows_per_batch`` of them make a batch; the phases'
batches keep that order and the free rows' batches are spread between them
(:func:`~samplers.tokens.arrays.by_cost_level`). Such a batch also reads back as its
rows: in that order, a row's first sample fits into no row before it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch

from samplers.plan import Order, Permutation
from samplers.tokens.cost import BUDGET_LIMIT, TokenCost
from samplers.tokens.order import MIN_WINDOWS, LengthSource, TokenOrder, length_sum

__all__ = [
    "WINDOW_ROWS",
    "PackedOrder",
    "best_fit_decreasing",
    "default_packing_window",
    "packed_in_phases",
    "row_starts",
]

#: The default window holds about this many rows' worth of samples at the mean length.
WINDOW_ROWS = 512


def default_packing_window(
    lengths: torch.Tensor, max_length: int, *, total: int | None = None
) -> int:
    """Samples per window: :data:`WINDOW_ROWS` rows at the mean length, at most
    ``N //`` :data:`~samplers.tokens.order.MIN_WINDOWS` (and at least 1). ``total`` is the
    lengths' sum when the caller knows it (they are then not read).

    Best-fit leaves room mostly in a window's last few rows, so a window of a few hundred
    rows packs to within about 1% of full rows; integer arithmetic, the same on every rank.
    """
    size = lengths.numel()
    total = length_sum(lengths) if total is None else total
    per_row = max(1, max_length * size // max(total, 1))
    return max(1, min(WINDOW_ROWS * per_row, size // MIN_WINDOWS))


def best_fit_decreasing(lengths: Sequence[int], max_length: int) -> list[int]:
    """The row of each of ``lengths`` (sorted longest first), rows numbered in the order
    they are opened: each length goes into the open row with the least room that fits it
    (the lowest-numbered on a tie), else opens a row; one longer than ``max_length`` is a
    row of its own, closed at once."""
    rows: list[int] = []
    _fill(lengths, max_length, [], 0, rows)
    return rows


#: An open row's key: its room times this, plus its number (rows of a window fit below it).
_SHIFT = 1 << 32


def _fill(
    lengths: Sequence[int], max_length: int, room: list[int], opened: int, rows: list[int]
) -> int:
    """Best-fit decreasing of ``lengths`` into the open rows ``room`` (sorted keys, room *
    :data:`_SHIFT` + row, updated), opening rows from number ``opened`` on; each length's
    row is appended to ``rows``. Returns the rows opened so far."""
    for length in lengths:
        at = bisect.bisect_left(room, length * _SHIFT)
        if at < len(room):
            key = room.pop(at)
            row = key & (_SHIFT - 1)
            bisect.insort(room, key - length * _SHIFT)
        else:
            row, opened = opened, opened + 1
            if length <= max_length:
                bisect.insort(room, (max_length - length) * _SHIFT + row)
        rows.append(row)
    return opened


def packed_in_phases(
    lengths: Sequence[int] | torch.Tensor, phases: Sequence[int] | torch.Tensor, max_length: int
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A window's samples (sorted longest first) packed phase by phase: each phase ``k >=
    0`` best-fit decreasing on its own, into rows after the phase before's and into the
    last row opened before it (handed out right before them, so its samples still come
    first), then the free samples (phase -1) best-fit into every row left open and into
    rows of their own.

    Returns each sample's row and its place in the packing (int64 tensors; rows hold
    their samples in that order: a row's earlier phases' samples, then later ones', then
    free ones), and each row's phase (the one it was opened in; -1 for the free samples'
    own rows). Rows come in the order they were opened: a phase's rows before the next
    one's, so handing the rows out in that order hands out each phase before the next;
    and a row's first sample fits into no row before it, in that order."""
    marks = torch.as_tensor(phases, dtype=torch.int64)
    count = marks.numel()
    # The samples phase by phase (0, 1, ...), the free ones last, each phase's in the
    # window's order: the packing's places.
    last_key = int(marks.max()) + 1 if count else 0
    keys = torch.where(marks < 0, last_key, marks)
    places = torch.argsort(keys, stable=True)
    grouped, sizes = torch.unique_consecutive(keys.index_select(0, places), return_counts=True)
    values: list[int] = torch.as_tensor(lengths, dtype=torch.int64)[places].tolist()
    groups = [
        (-1 if key == last_key else key, size)
        for key, size in zip(grouped.tolist(), sizes.tolist(), strict=True)
    ]
    if not groups or groups[-1][0] >= 0:
        groups.append((-1, 0))  # no free samples: the open rows still close here
    found: list[int] = []  # each sample's row, in the packing's order
    row_phases: list[int] = []
    left: list[int] = []  # the rooms of the phases' rows, for the free samples
    last: list[int] = []  # the room of the last row opened, while open
    opened = 0
    start = 0
    for phase, size in groups:
        room = list(last) if phase >= 0 else left
        if phase < 0:
            for key in last:
                bisect.insort(left, key)
        before = opened
        opened = _fill(values[start : start + size], max_length, room, opened, found)
        start += size
        row_phases += [phase] * (opened - before)
        if phase >= 0:
            last = [key for key in room if key & (_SHIFT - 1) == opened - 1]
            for key in room:
                if key not in last:
                    bisect.insort(left, key)
    rows = torch.empty(count, dtype=torch.int64)
    rows[places] = torch.tensor(found, dtype=torch.int64)
    return rows, places, row_phases


def row_starts(lengths: Sequence[int], max_length: int) -> list[int]:
    """Where the rows of a packed batch begin (indices into ``lengths``): a row takes the
    next length while the sum stays within ``max_length`` (a longer length alone)."""
    starts: list[int] = []
    used = max_length + 1
    for number, length in enumerate(lengths):
        if used + length > max_length:
            starts.append(number)
            used = 0
        used += length
    return starts


class PackedOrder(TokenOrder):
    """An epoch's samples packed into rows of ``max_length`` and batches of
    ``rows_per_batch`` rows (see the module); ``cost`` orders the batches and must be
    summed (a packed row holds its samples without padding between them). With
    ``stream`` (e.g. a mixture's draws) the windows hold the stream's positions, as in
    :class:`~samplers.tokens.order.TokenOrder`."""

    def __init__(
        self,
        lengths: torch.Tensor,
        max_length: int,
        rows_per_batch: int,
        cost: TokenCost,
        window: int,
        *,
        shuffle: bool,
        seed: int,
        epoch: int,
        permutation: Permutation = "randperm",
        stream: Order | None = None,
        source: LengthSource | None = None,
    ) -> None:
        if cost.kind != "sum":
            raise ValueError(f"a packed order's cost must be summed, got {cost.label!r}")
        super().__init__(
            lengths,
            max_length * rows_per_batch,
            cost,
            window,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            permutation=permutation,
            stream=stream,
            source=source,
        )
        self.max_length = max_length
        self.rows_per_batch = rows_per_batch
        # The first chunk is one window: packing runs in Python (a few microseconds a
        # sample), so the first batch waits for one window's rows, not for the token
        # order's first chunk of windows. Chunks only group the work: each window is
        # packed and its batches ordered on its own, so the order is the same.
        self.chunk_windows = 1

    def __repr__(self) -> str:
        return (
            f"PackedOrder(size={self.size}, max_length={self.max_length}, "
            f"rows_per_batch={self.rows_per_batch}, cost={self.model.label!r}, "
            f"window={self.window}, shuffle={self.shuffle}, seed={self.seed}, "
            f"epoch={self.epoch}, permutation={self.permutation!r})"
        )

    def _batches(
        self,
        lengths: torch.Tensor,
        local: torch.Tensor,
        count: int,
        phases: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        if phases is not None and bool((phases >= 0).any()):
            return self._phased_batches(lengths, phases, count)
        window = self.window
        values: list[int] = lengths.tolist()
        # Each sample's row, numbered across the chunk (a window's rows after the last's).
        row = torch.empty(count, dtype=torch.int64)
        opened = 0
        for low in range(0, count, window):
            high = min(low + window, count)
            numbers = best_fit_decreasing(values[low:high], self.max_length)
            row[low:high] = torch.tensor(numbers, dtype=torch.int64) + opened
            opened += max(numbers) + 1
        # Rows in the order they were opened, each row's samples in the order they went in.
        arranged = torch.argsort(row, stable=True)
        row = row[arranged]
        first = torch.ones(count, dtype=torch.bool)
        first[1:] = row[1:] != row[:-1]
        starts = torch.nonzero(first).squeeze(1)
        # Every rows_per_batch rows of a window are a batch.
        windows = starts // window
        window_first = torch.ones(starts.numel(), dtype=torch.bool)
        window_first[1:] = windows[1:] != windows[:-1]
        first_row = torch.cummax(
            torch.where(window_first, torch.arange(starts.numel()), 0), dim=0
        ).values
        batch_start = (torch.arange(starts.numel()) - first_row) % self.rows_per_batch == 0
        return arranged, lengths[arranged], starts[batch_start]

    def _phased_batches(
        self, lengths: torch.Tensor, marks: torch.Tensor, count: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_batches` of windows with phases (``marks``, as sorted): each window
        packed by :func:`packed_in_phases`, its rows in the order opened (phase after
        phase, the free rows last), every ``rows_per_batch`` of them a batch. A batch
        begins at a row's first sample: a phase's, but in the free rows, which come last
        (so a batch whose first sample is free holds no phase's sample)."""
        row = torch.empty(count, dtype=torch.int64)  # each sample's row, across the chunk
        place = torch.arange(count, dtype=torch.int64)  # its place in its row's packing
        begins: list[bool] = []  # each row: whether it begins a batch
        opened = 0
        for low in range(0, count, self.window):
            high = min(low + self.window, count)
            numbers, places, row_phases = packed_in_phases(
                lengths[low:high], marks[low:high], self.max_length
            )
            place[low:high] = places.argsort() + low
            row[low:high] = numbers + opened
            begins += [at % self.rows_per_batch == 0 for at in range(len(row_phases))]
            opened += len(row_phases)
        # Rows in the order opened (phase after phase, the free rows last), each row's
        # samples in the order they went in.
        arranged = torch.argsort(row * count + place)
        row = row[arranged]
        first = torch.ones(count, dtype=torch.bool)
        first[1:] = row[1:] != row[:-1]
        starts = torch.nonzero(first).squeeze(1)
        batch_start = torch.tensor(begins, dtype=torch.bool)[row[starts]]
        return arranged, lengths[arranged], starts[batch_start]

    def _level_budget(self) -> int:
        # The costliest batch: every row one sample of max_length (for a cost that is at
        # least additive; a costlier batch goes to the top level).
        # Kept below the limit the capped costs need (a larger one: the same top level).
        return min(self.rows_per_batch * self.model.cost_of(self.max_length), BUDGET_LIMIT - 1)

    def halves(self, lows: torch.Tensor, highs: torch.Tensor) -> torch.Tensor:
        """Cut batches ``[lows, highs)`` between rows, the first part ``ceil(rows / 2)``
        rows; a batch of one row is cut at ``ceil(n / 2)`` samples (both parts fit)."""
        with self.lock:  # from the sampler's own copy of the lengths, if it has one
            self._own_lengths()
            lengths = self.lengths
        cuts = []
        for low, high in zip(lows.tolist(), highs.tolist(), strict=True):
            positions = torch.arange(low, high, dtype=torch.int64)
            values = lengths[self.at(positions)].tolist()
            starts = row_starts(values, self.max_length)
            if len(starts) >= 2:
                cuts.append(low + starts[(len(starts) + 1) // 2])
            else:
                cuts.append(low + (high - low + 1) // 2)
        return torch.tensor(cuts, dtype=torch.int64)
