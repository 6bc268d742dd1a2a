"""The layout of a token-budgeted epoch: the order's batches dealt one per rank per step.

:class:`TokenLayout` takes a :class:`~samplers.tokens.order.TokenOrder` from a global
``start`` position and deals its batches over ``W`` ranks: step ``k`` hands the ``W``
consecutive batches ``k * W .. k * W + W - 1`` to ranks ``0 .. W - 1``. The order puts
batches of about the same cost next to each other, so each step's ``W`` batches cost
about the same. A ``start`` inside one of the order's batches makes the rest of that
batch the first batch.

After ``k`` steps the ranks have together consumed the positions ``[start,
position_after(k))``: progress is one global position whatever ``W`` is, and a run resumed
at that position on any world size lays out the rest of the same order. Resumed with the
same ``W`` at a step boundary, the layout from there is exactly the rest of the
uninterrupted one, tail included (the tail rules below are counted from the end).

The tail, when the batches left (``B``) are not a multiple of ``W``:

* ``"uneven"``: every sample exactly once. The last ``(-B) mod W`` batches with at least two
  samples are each cut in two (the first part holds ``ceil(n / 2)``), which makes the
  count a multiple of ``W``: every rank the same number of steps. Only when fewer batches
  can be cut (an epoch of fewer than ``W - 1`` batches with two samples or more, e.g. of
  fewer samples than ranks) do the last ranks get one batch fewer.
* ``"pad"``: ``ceil(B / W)`` steps; the missing batches of the last step are the order's
  first batches again (positions from ``N`` on hold ``order[p % N]``).
* ``"drop"``: ``floor(B / W)`` steps; the last ``B mod W`` batches are not handed out.

Nothing here needs the whole epoch planned until the tail does: the steps before it are
known as soon as the chunks of the order they lie in (and a few batches after them) are.
"""

from __future__ import annotations

import bisect
from typing import Any, ClassVar

import torch

from samplers.plan import TAILS, Layout, Tail, ceil_div
from samplers.tokens.order import TokenOrder, locked, repeat

__all__ = ["TokenLayout"]


class TokenLayout(Layout):
    """One batch per rank per step over a :class:`TokenOrder` from ``start``.

    Guarantee: every rank takes :meth:`count` batches, the same for every rank except in
    the ``"uneven"`` case described in the module; every batch is a non-empty range of
    consecutive positions that lies within one of the order's batches (so it costs at most
    ``max_tokens`` unless it is one sample longer than that); with ``"uneven"`` the
    batches cover ``[start, N)`` exactly once; after ``k`` steps the positions consumed
    are ``[start, position_after(k))``; and everything is a function of the order,
    ``start``, ``world_size`` and ``tail``.
    """

    batched: ClassVar[bool] = True

    def __init__(self, order: TokenOrder, world_size: int, tail: Tail, start: int = 0) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if tail not in TAILS:
            raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {tail!r}")
        if not 0 <= start <= order.size:
            raise ValueError(f"start must be in [0, {order.size}], got {start}")
        self.order = order
        self.dataset_size = order.size
        self.world_size = world_size
        self.tail: Tail = tail
        self.start = start
        # The raw batches (the order's, the first one cut at `start`): their starts in
        # tables, one per planned chunk, and where the last planned one ends.
        self._tables: list[torch.Tensor] = []
        self._firsts: list[int] = []
        self._known = 0
        self._next_chunk = order.chunk_of(start) if start < order.size else order.chunks
        self._end = start
        # The latest raw batches of two samples or more (at most W - 1 of them).
        self._cuttable: list[int] = []
        self._final = False
        self._steps = 0
        self._raw_limit = 0
        self._pieces = torch.zeros(0, dtype=torch.int64)
        self._pad_starts = torch.zeros(0, dtype=torch.int64)

    @property
    def lock(self) -> Any:
        """The order's lock: one thread plans the order and its layouts at a time."""
        return self.order.lock

    def __repr__(self) -> str:
        return (
            f"TokenLayout(dataset_size={self.dataset_size}, world_size={self.world_size}, "
            f"tail={self.tail!r}, start={self.start})"
        )

    # Planning the raw batches, chunk by chunk ---------------------------------------------

    @property
    def _exhausted(self) -> bool:
        return self._next_chunk >= self.order.chunks

    def _extend(self) -> None:
        """Plan the next chunk of the order and append its batches."""
        chunk = self._next_chunk
        starts = self.order.starts(chunk)
        if not self._tables:
            starts = torch.cat([torch.tensor([self.start]), starts[starts > self.start]])
        _, end = self.order.chunk_bounds(chunk)
        sizes = torch.diff(starts, append=torch.tensor([end]))
        keep = self.world_size - 1
        if keep:
            latest = torch.nonzero(sizes >= 2).squeeze(1)[-keep:] + self._known
            self._cuttable = (self._cuttable + latest.tolist())[-keep:]
        self._tables.append(starts)
        self._firsts.append(self._known)
        self._known += starts.numel()
        self._end = end
        self._next_chunk += 1

    def _safe(self) -> int:
        """How many raw batches from the first are known to be the layout's own batches."""
        if self._final:
            return self._raw_limit
        if self.tail == "drop":
            return max(self._known - self.world_size, 0)
        if self.tail == "pad" or self.world_size == 1:
            return self._known
        # "uneven": batches before the last W - 1 cuttable ones are never cut.
        return self._cuttable[0] if len(self._cuttable) == self.world_size - 1 else 0

    def _ensure(self, batches: int) -> None:
        """Plan until the first ``batches`` layout batches are known (or the epoch is)."""
        while not self._final and self._safe() < batches:
            if self._exhausted:
                self._finish()
            else:
                self._extend()

    def _raw(self, lo: int, hi: int) -> torch.Tensor:
        """Boundaries of raw batches ``[lo, hi)``: ``hi - lo + 1`` positions (int64)."""
        if hi <= lo:
            return torch.tensor([self._end if lo >= self._known else self._starts_at(lo)])
        first = bisect.bisect_right(self._firsts, lo) - 1
        last = bisect.bisect_right(self._firsts, hi - 1) - 1
        parts = []
        for table in range(first, last + 1):
            offset = self._firsts[table]
            parts.append(self._tables[table][max(lo - offset, 0) : hi - offset])
        boundary = self._end if hi >= self._known else self._starts_at(hi)
        return torch.cat([*parts, torch.tensor([boundary])])

    def _starts_at(self, raw: int) -> int:
        table = bisect.bisect_right(self._firsts, raw) - 1
        return int(self._tables[table][raw - self._firsts[table]])

    # The tail -------------------------------------------------------------------------------

    def _finish(self) -> None:
        """The whole epoch is planned: settle the steps and the tail's batches."""
        raw, width = self._known, self.world_size
        self._final = True
        if self.tail == "drop":
            self._steps = raw // width
            self._raw_limit = self._steps * width
        elif self.tail == "pad":
            self._steps = ceil_div(raw, width)
            self._raw_limit = raw
            self._pad_starts = self._padding(self._steps * width - raw)
        else:
            needed = -raw % width
            cut = self._cuttable[len(self._cuttable) - needed :] if needed else []
            self._raw_limit = cut[0] if cut else raw
            bounds = self._raw(self._raw_limit, raw)
            lows, highs = bounds[:-1], bounds[1:]
            halves = self.order.halves(lows, highs)
            chosen = torch.tensor(cut, dtype=torch.int64) - self._raw_limit
            self._pieces = torch.sort(torch.cat([bounds, halves[chosen]])).values
            self._steps = ceil_div(raw + len(cut), width)

    def _padding(self, missing: int) -> torch.Tensor:
        """Boundaries of ``missing`` batches repeating the order's head (positions >= N)."""
        if missing == 0:
            return torch.tensor([self._end])
        size, known = self.dataset_size, 0
        heads: list[torch.Tensor] = []
        while known < missing and len(heads) < self.order.chunks:
            heads.append(self.order.starts(len(heads)))
            known += heads[-1].numel()
        head = torch.cat(heads)
        _, end = self.order.chunk_bounds(len(heads) - 1)
        ends = torch.cat([head[1:], torch.tensor([end])])
        number = torch.arange(missing)
        cycle, which = number // head.numel(), number % head.numel()
        starts = (cycle + 1) * size + head[which]
        last = (cycle[-1:] + 1) * size + ends[which[-1:]]
        return torch.cat([starts, last])

    # The protocol ---------------------------------------------------------------------------

    @property
    @locked
    def steps(self) -> int:
        """Steps in the epoch (plans the whole epoch)."""
        self._finish_if_needed()
        return self._steps

    def _finish_if_needed(self) -> None:
        while not self._final:
            if self._exhausted:
                self._finish()
            else:
                self._extend()

    def _total(self) -> int:
        """Layout batches over all ranks (plans the whole epoch)."""
        self._finish_if_needed()
        if self.tail == "uneven":
            return self._raw_limit + self._pieces.numel() - 1
        return self._steps * self.world_size if self.tail != "drop" else self._raw_limit

    @locked
    def count(self, rank: int) -> int:
        """How many batches ``rank`` takes this epoch (plans the whole epoch)."""
        total = self._total()
        return max(ceil_div(total - rank, self.world_size), 0)

    @property
    @locked
    def stop(self) -> int:
        """The global position where the layout ends (plans the whole epoch)."""
        total = self._total()
        return int(self._bounds(torch.tensor([total - 1]))[1][0]) if total else self.start

    def _bounds(self, batches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end positions of layout batches ``batches`` (ascending, all known)."""
        if batches.numel() == 0:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty
        lo = torch.empty_like(batches)
        hi = torch.empty_like(batches)
        limit = self._raw_limit if self._final else self._safe()
        raw = batches < limit
        if bool(raw.any()):
            chosen = batches[raw]
            first, last = int(chosen[0]), int(chosen[-1])
            bounds = self._raw(first, last + 1)
            lo[raw], hi[raw] = bounds[chosen - first], bounds[chosen - first + 1]
        rest = ~raw
        if bool(rest.any()):
            table = self._pieces if self.tail == "uneven" else self._pad_starts
            where = batches[rest] - limit
            lo[rest], hi[rest] = table[where], table[where + 1]
        return lo, hi

    @locked
    def items(
        self, rank: int, lo: int = 0, hi: int | None = None
    ) -> tuple[torch.Tensor, list[int]]:
        """Flat positions (int64) and sizes of ``rank``'s batches ``[lo, hi)``.

        Plans only as far as those batches need, unless they reach the tail.
        """
        if lo < 0 or (hi is not None and hi < 0):
            raise ValueError(f"lo and hi must be at least 0, got lo={lo}, hi={hi}")
        if hi is None:
            hi = self.count(rank)
        else:
            self._ensure(hi * self.world_size)
            if self._final:
                hi = min(hi, self.count(rank))
        if hi <= lo:
            return torch.zeros(0, dtype=torch.int64), []
        numbers = torch.arange(lo, hi, dtype=torch.int64) * self.world_size + rank
        starts, ends = self._bounds(numbers)
        sizes = ends - starts
        offsets = torch.cumsum(sizes, 0) - sizes
        flat = torch.arange(int(sizes.sum()), dtype=torch.int64)
        flat += repeat(starts - offsets, sizes)
        return flat, sizes.tolist()

    def positions(self, rank: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """Flat int64 positions of ``rank``'s batches ``[lo, hi)``."""
        return self.items(rank, lo, hi)[0]

    def batch_sizes(self, rank: int, lo: int = 0, hi: int | None = None) -> list[int]:
        """Sizes of ``rank``'s batches ``[lo, hi)``."""
        return self.items(rank, lo, hi)[1]

    @locked
    def position_after(self, steps: int) -> int:
        """The global position the ranks have reached after ``steps`` steps."""
        if steps < 0:
            raise ValueError(f"steps must be at least 0, got {steps}")
        first = steps * self.world_size
        self._ensure(first + 1)
        if self._final and first >= self._total():
            return self.stop
        return int(self._bounds(torch.tensor([first]))[0][0])
