"""The mixing schedule: which source each position of the stream draws from, exactly.

Guarantee: with proportions ``a_d / T`` (integers, :func:`parts`), after any ``k``
positions of a segment each source has been drawn ``c_d`` times with
``|c_d - k * a_d / T| < 1``, and position ``p`` is located (its source and how many
times that source was drawn before it) in O(1) tensor operations per position plus
O(number of sources + :data:`CHECKPOINT`) per segment, whatever ``p``.

How: the ``k``-th draw of source ``d`` in a period of ``T`` positions has a window of
steps that keeps every prefix within 1 of its target: it may come no earlier than
``floor(k * T / a_d)`` and no later than ``ceil((k + 1) * T / a_d) - 1``. Earliest
deadline first over those windows meets every deadline (unit jobs with integer windows;
a schedule meeting them exists, Tijdeman's chairman assignment theorem, and earliest
deadline first finds one when one exists; every step is checked anyway).
After ``T`` steps each source has exactly ``a_d`` draws, so the schedule repeats: one
period, ``T`` source numbers and each draw's rank within the period, is all that is
kept, and any position follows from ``divmod(p, T)``.

The period is computed as far as positions ask (:class:`Period`): its first
:data:`FIRST_STEPS` steps one step at a time (:func:`_earliest_deadline_first`, so a
position near a period's start costs only those), and, when a position lies beyond
them, a prefix at least four times as long as the one done (the whole period once that
passes half of it), in ``log2`` rounds of tensor operations (:func:`_whole_period`). A
prefix is the same problem over the draws released before its end. That second way gives
the same schedule, because earliest
deadline first is the same as taking the draws in (deadline, source) order and giving
each the first step at or after its release that no draw before it in that order took
(a draw only ever waits for draws due before it). Which steps a set of draws takes that
way does not depend on the order they are placed in (as with linear probing), and
follows from their releases alone: a step is taken when a draw released there, or one
still waiting from before, is there to take it, a queue whose length is a cumulative sum
minus its cumulative minimum. So the draws are split in halves by that order: the first
half's steps follow from its releases, the second half takes the others, and each half
is again the same problem on its own steps, all halves of a round computed at once.

A :class:`Schedule` is a list of segments (a global start position and its parts): a
change of weights starts a new segment at the current position, with every source's
count carried over, so each source's passes continue where they were.
"""

from __future__ import annotations

import functools
import heapq
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import torch

__all__ = [
    "CHECKPOINT",
    "FIRST_STEPS",
    "MAX_PERIOD",
    "Period",
    "Schedule",
    "fraction",
    "parts",
    "period",
]

#: The longest period kept: proportions with a larger common denominator are rounded to
#: multiples of ``1 / MAX_PERIOD`` (a positive weight never to 0), so at most this many
#: sources can have a positive weight at once (:func:`parts` refuses more).
MAX_PERIOD = 1 << 16
#: Every ``CHECKPOINT`` positions of a period its cumulative counts are kept.
CHECKPOINT = 256
#: The first piece of a period, computed step by step; a position past it computes the
#: whole period (see the module docstring).
FIRST_STEPS = 1 << 11
#: The longest period computed in rounds of tensor operations, whose int32 places stay
#: exact up to here (periods from :func:`parts` are at most :data:`MAX_PERIOD`); a longer
#: one, only from parts given by hand, is computed step by step.
_WHOLE_IN_ROUNDS = 1 << 26
#: Weights given as floats are read as the simplest fraction within this relative
#: distance of the float (so ``0.6`` is ``3/5`` and ``1/3`` is ``1/3``).
_FLOAT_TOLERANCE = 1e-12
_SIMPLE_DENOMINATOR = 10**6


_TOLERANCE_NUMERATOR, _TOLERANCE_DENOMINATOR = _FLOAT_TOLERANCE.as_integer_ratio()


def fraction(value: float | int | Fraction) -> Fraction:
    """``value`` as the fraction it stands for (a float within 1e-12 of a fraction with a
    denominator up to 10**6 is that fraction: ``0.6`` is ``3/5``; else the fraction its
    shortest decimal ``repr`` writes)."""
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    n, d = value.as_integer_ratio()
    p, q = _closest(n, d, _SIMPLE_DENOMINATOR)
    # |p / q - n / d| <= |n / d| * tolerance, in integers.
    if abs(p * d - n * q) * _TOLERANCE_DENOMINATOR <= abs(n) * q * _TOLERANCE_NUMERATOR:
        return Fraction(p, q)
    return Fraction(*Decimal(repr(float(value))).as_integer_ratio())  # numpy floats too


def _closest(n: int, d: int, limit: int) -> tuple[int, int]:
    """The fraction with a denominator of at most ``limit`` closest to ``n / d`` (``d > 0``,
    in lowest terms; ties to the convergent), as ``Fraction.limit_denominator`` gives it,
    in integers alone: the last convergent of ``n / d``'s continued fraction whose
    denominator fits, or the semiconvergent before the next one, whichever is closer."""
    if d <= limit:
        return n, d
    p0, q0, p1, q1 = 0, 1, 1, 0
    x, y = n, d
    while True:
        a = x // y
        q2 = q0 + a * q1
        if q2 > limit:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        x, y = y, x - a * y
    k = (limit - q0) // q1
    p_semi, q_semi = p0 + k * p1, q0 + k * q1
    # |p1 / q1 - n / d| <= |p_semi / q_semi - n / d|, cross-multiplied (denominators > 0).
    if abs(p1 * d - n * q1) * q_semi <= abs(p_semi * d - n * q_semi) * q1:
        return p1, q1
    return p_semi, q_semi


def parts(weights: Sequence[float | int | Fraction]) -> tuple[int, ...]:
    """Integer parts ``a_d`` (their sum ``T`` is the period) for checked weights (finite,
    non-negative, not all zero): the weights' exact proportions in lowest terms, or,
    when their common denominator exceeds :data:`MAX_PERIOD`, those proportions rounded
    to ``MAX_PERIOD`` parts: largest remainder, a positive weight keeps at least 1 part,
    and the parts that minimum adds are taken back, one at a time, from the source most
    above its exact share among those holding more than 1. Every positive weight gets a
    positive part; more than :data:`MAX_PERIOD` positive weights raise ``ValueError``
    (there are not that many parts to give)."""
    positive = sum(1 for w in weights if w)
    if positive > MAX_PERIOD:
        raise ValueError(
            f"weights: {positive} sources have a positive weight, more than the "
            f"{MAX_PERIOD} a mixture draws from at once (its period has {MAX_PERIOD} "
            "draws, each source's share at least 1 of them); give weight 0 to some, or "
            "merge small sources into one"
        )
    fractions = [fraction(w) for w in weights]
    # Integer arithmetic over one common denominator: share d is numerators[d] / total.
    denominator = math.lcm(*(f.denominator for f in fractions))
    numerators = [f.numerator * (denominator // f.denominator) for f in fractions]
    total = sum(numerators)
    common = 1  # the shares' common denominator, or past MAX_PERIOD (floats: huge ones)
    for n in numerators:
        common = math.lcm(common, total // math.gcd(n, total))
        if common > MAX_PERIOD:
            break
    if common <= MAX_PERIOD:
        exact = [n * common // total for n in numerators]
        divisor = math.gcd(*exact)
        return tuple(a // divisor for a in exact)
    scaled = [n * MAX_PERIOD for n in numerators]
    floors = [max(v // total, 1 if v > 0 else 0) for v in scaled]
    left = MAX_PERIOD - sum(floors)
    by_remainder = sorted(range(len(scaled)), key=lambda d: (-(scaled[d] - floors[d] * total), d))
    if left >= 0:
        for d in by_remainder[:left]:
            floors[d] += 1
    else:  # the minimum of 1 overshot: take back where a part is furthest above its share
        # A part above 1 stands ``floors[d] * total - scaled[d]`` (in units of
        # 1 / total parts) above its exact share; take the largest excess first, ties
        # to the lower source, again after each part taken. Enough parts above 1 remain:
        # at most MAX_PERIOD positive weights, each kept at 1.
        excess = [(scaled[d] - floors[d] * total, d) for d in range(len(scaled)) if floors[d] > 1]
        heapq.heapify(excess)
        for _ in range(-left):
            _, d = heapq.heappop(excess)
            floors[d] -= 1
            if floors[d] > 1:
                heapq.heappush(excess, (scaled[d] - floors[d] * total, d))
    divisor = math.gcd(*floors)
    return tuple(a // divisor for a in floors)


class Period:
    """One period of the schedule for ``parts``: ``source[o]`` draws at offset ``o``,
    ``rank[o]`` is how many times that source drew before ``o`` in the period, and
    ``checkpoints[c]`` every source's count before offset ``c * CHECKPOINT``.

    Computed as far as asked: the first :data:`FIRST_STEPS` steps, or the whole period
    (see the module docstring), so a stream position near a period's start is located
    without the rest of the period. Safe to share between threads."""

    def __init__(self, parts: tuple[int, ...]) -> None:
        self.parts = parts
        total = sum(parts)
        self._source = torch.empty(total, dtype=torch.int64)
        self._rank = torch.empty(total, dtype=torch.int64)
        self._checkpoints = torch.zeros(total // CHECKPOINT + 1, len(parts), dtype=torch.int64)
        self._done = 0
        self._lock = threading.Lock()

    @property
    def length(self) -> int:
        """``T``, the sum of the parts."""
        return self._source.numel()

    @property
    def source(self) -> torch.Tensor:
        """The source at every offset of the period (computed whole)."""
        self.ensure(self.length)
        return self._source

    @property
    def rank(self) -> torch.Tensor:
        """Each offset's draw rank within the period (computed whole)."""
        self.ensure(self.length)
        return self._rank

    @property
    def checkpoints(self) -> torch.Tensor:
        """Every source's count before each multiple of :data:`CHECKPOINT` (computed
        whole)."""
        self.ensure(self.length)
        return self._checkpoints

    def ensure(self, offset: int) -> None:
        """Compute the period's first ``offset`` positions, if not yet done: the first
        :data:`FIRST_STEPS` steps one at a time, beyond them a prefix at least four times
        as long as the one done (so that a period asked for piece by piece costs at most
        4/3 of computing it whole), the whole period once that prefix would reach past
        half of it."""
        if offset <= self._done:
            return
        with self._lock:
            done = self._done
            if offset <= done:
                return
            if done == 0 and offset <= FIRST_STEPS < self.length:
                stop = FIRST_STEPS
                sources, ranks = _earliest_deadline_first(self.parts, stop)
                block = torch.tensor(sources, dtype=torch.int64)
                self._source[:stop] = block
                self._rank[:stop] = torch.tensor(ranks, dtype=torch.int64)
            else:
                # A multiple of CHECKPOINT, as done is, or the period's end.
                stop = -(-max(offset, 4 * done) // CHECKPOINT) * CHECKPOINT
                if 2 * stop > self.length:
                    stop = self.length
                prefix, prefix_rank = _whole_period(self.parts, stop)
                block = prefix[done:stop]
                self._source[done:stop] = block
                self._rank[done:stop] = prefix_rank[done:stop]
            # Checkpoints: done is a multiple of CHECKPOINT, so are the complete blocks.
            complete = (stop - done) // CHECKPOINT
            if complete:
                blocks = block[: complete * CHECKPOINT].reshape(-1, CHECKPOINT)
                per_block = torch.zeros(complete, len(self.parts), dtype=torch.int64)
                per_block.scatter_add_(1, blocks, torch.ones_like(blocks))
                first = done // CHECKPOINT
                self._checkpoints[first + 1 : first + 1 + complete] = self._checkpoints[
                    first
                ] + per_block.cumsum(0)
            self._done = stop

    def at(self, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The source and the draw rank at each offset of the period."""
        if offsets.numel():
            self.ensure(int(offsets.max()) + 1)
        return self._source.index_select(0, offsets), self._rank.index_select(0, offsets)

    def counts_before(self, offset: int) -> torch.Tensor:
        """Every source's count in the period's first ``offset`` positions (int64)."""
        self.ensure(offset)
        block = offset // CHECKPOINT
        counts = self._checkpoints[block].clone()
        rest = self._source[block * CHECKPOINT : offset]
        return counts + torch.bincount(rest, minlength=len(self.parts))

    def counts(self, length: int) -> torch.Tensor:
        """Every source's count in a segment's first ``length`` positions."""
        whole, offset = divmod(length, self.length)
        return whole * torch.tensor(self.parts, dtype=torch.int64) + self.counts_before(offset)


@functools.lru_cache(maxsize=16)
def period(parts: tuple[int, ...]) -> Period:
    """The period of ``parts`` (earliest deadline first, see the module docstring),
    computed as far as it is used; cached, as every rank and every epoch of a mixture
    uses the same."""
    return Period(parts)


def _earliest_deadline_first(
    parts: tuple[int, ...], stop: int | None = None
) -> tuple[list[int], list[int]]:
    """Earliest deadline first (ties to the lower source), one step at a time, over the
    period's first ``stop`` steps (all of them by default): each step's source and that
    source's count before it."""
    total = sum(parts)
    stop = total if stop is None else stop
    drawn = [0] * len(parts)
    ready: list[tuple[int, int]] = []
    releases: dict[int, list[int]] = {}  # step -> the sources whose next draw opens then
    for d, a in enumerate(parts):
        if a:
            ready.append((-(-total // a) - 1, d))
    heapq.heapify(ready)
    sources: list[int] = []
    ranks: list[int] = []
    push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
    for step in range(stop):
        released = releases.pop(step, None)
        if released:
            for d in released:
                push(ready, (-(-(drawn[d] + 1) * total // parts[d]) - 1, d))
        due, d = ready[0]
        if due < step:  # never: a schedule within 1 exists and EDF finds it
            raise RuntimeError(f"mixture schedule for parts {parts} missed a deadline at {step}")
        k = drawn[d]
        sources.append(d)
        ranks.append(k)
        k += 1
        drawn[d] = k
        a = parts[d]
        if k < a:
            release = k * total // a
            if release <= step + 1:  # its next draw is open at once: stays ready
                replace(ready, (-(-(k + 1) * total // a) - 1, d))
                continue
            releases.setdefault(release, []).append(d)
        pop(ready)
    return sources, ranks


def _whole_period(
    parts: tuple[int, ...], stop: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Earliest deadline first over the period's first ``stop`` steps (default: the whole
    period) in ``log2`` rounds of tensor operations (see the module docstring): each
    step's source and that source's count before it, the same as
    :func:`_earliest_deadline_first` gives.

    A prefix needs only the draws released before ``stop``: a draw released later takes
    no step before it, and whether an earlier one finds a free step before ``stop`` depends
    only on which steps before ``stop`` the draws before it took. Those ``n`` draws take
    exactly the first ``n`` steps (every step before ``stop`` is taken, the rest follow it
    without a gap), the same problem on ``n`` steps: solved as the whole period is, its
    first ``stop`` steps kept."""
    total = sum(parts)
    stop = total if stop is None else stop
    if not 0 < stop <= total:
        raise ValueError(f"stop must lie in [1, {total}], got {stop}")
    if total > _WHOLE_IN_ROUNDS:
        sources, ranks = _earliest_deadline_first(parts, stop)
        return torch.tensor(sources, dtype=torch.int64), torch.tensor(ranks, dtype=torch.int64)
    counts = torch.tensor(parts, dtype=torch.int64)
    # Source d's draws released before stop: k * total // a_d < stop, k < ceil(stop * a_d / T).
    before = torch.minimum(-(-stop * counts // total), counts)
    n = int(before.sum())
    bits = (n - 1).bit_length()
    size = 1 << bits
    source = torch.repeat_interleave(torch.arange(len(parts)), before)
    draw = torch.arange(n) - (before.cumsum(0) - before).repeat_interleave(before)
    share = counts.index_select(0, source)
    release = draw * total // share
    deadline = -(-(draw + 1) * total // share) - 1
    # The draws in (deadline, source) order: a stable sort of the source-major list.
    by_deadline = torch.sort(deadline.to(torch.int32), stable=True).indices
    # Over ``size`` places (int32: size <= 2 * MAX_PERIOD): place ``i`` is both the i-th
    # draw in that order and a step of the current arrangement, whose rows of ``width``
    # places each hold a group's draws and the steps they take. ``released`` is each
    # draw's release as a place of its row; padding draws past the period come last and
    # take their own steps, so that the rows are halves of aligned powers of two.
    released = torch.arange(size, dtype=torch.int32)
    released[:n] = release.index_select(0, by_deadline)
    arrangement = torch.arange(size, dtype=torch.int32)  # each step's place
    ones = torch.ones(size // 2, dtype=torch.int32)
    # The rounds' tensors, allocated once (fresh pages on every round cost more than the
    # arithmetic): the next ``released`` and ``arrangement``, and the working rows.
    next_released, next_arrangement = torch.empty_like(released), torch.empty_like(released)
    first_half = torch.empty(size // 2, dtype=torch.int32)
    arrivals, arrived, walk, low, taken, moved, scratch = (
        torch.empty(size, dtype=torch.int32) for _ in range(7)
    )
    low_at = torch.empty(size, dtype=torch.int64)  # where each running minimum was
    for level in range(bits):
        half = 1 << (bits - 1 - level)
        width = 2 * half
        rows = size // width
        column = torch.arange(width, dtype=torch.int32).view(1, width)
        row_start = torch.arange(0, size, width, dtype=torch.int32).view(rows, 1)

        def row(flat: torch.Tensor, rows: int = rows, width: int = width) -> torch.Tensor:
            return flat.view(rows, width)

        placed = row(released)
        # The first half's draws by release, and the queue they form along each row: at
        # each step, the draws arrived so far less the steps so far (``walk``, before the
        # step's arrivals); the steps taken before it are its index plus the walk's
        # minimum so far (a step is idle only when the queue is empty), and the first half
        # takes the step when draws are waiting there, arrivals included.
        first_half.view(rows, half).copy_(placed[:, :half])
        arrivals.zero_().index_add_(0, first_half, ones)
        torch.cumsum(row(arrivals), 1, dtype=torch.int32, out=row(arrived)).sub_(column)
        torch.sub(row(arrived), row(arrivals), out=row(walk))
        if width >= 16:
            torch.cummin(row(walk), 1, out=(row(low), row(low_at)))
        else:  # short rows: one running minimum, each row shifted below the ones before
            shift = row_start * 5  # (|walk| <= width)
            torch.sub(row(walk), shift, out=row(scratch))
            torch.cummin(scratch, 0, out=(low, low_at))
            row(low).add_(shift)
        # The row's steps before each step that the first half took.
        torch.add(row(low), column, out=row(taken))
        mine = row(arrived).sub_(row(low)).clamp_(max=1)  # 1 where the first half takes it
        # Each step's new place: the first half's steps first, then the others'.
        torch.sub(row_start + half, row(low), out=row(moved))  # row_start + half + column - taken
        row(moved).add_(torch.add(taken, low, out=scratch).sub_(half).view(rows, width).mul_(mine))
        torch.index_select(moved, 0, arrangement, out=next_arrangement)
        arrangement, next_arrangement = next_arrangement, arrangement
        # Each draw's release in its new row: the first step there at or after it.
        taken_at = row(torch.index_select(taken, 0, released, out=scratch))
        out = row(next_released)
        torch.add(row_start, taken_at[:, :half], out=out[:, :half])
        torch.sub(placed[:, half:], taken_at[:, half:], out=out[:, half:]).add_(half)
        released, next_released = next_released, released
    if not torch.equal(released, torch.arange(size, dtype=torch.int32)):
        raise RuntimeError(f"mixture schedule for parts {parts}: the rounds disagree")  # never
    drawn_at = by_deadline.index_select(0, arrangement[:stop].to(torch.int64))
    steps = torch.arange(stop)
    early = release.index_select(0, drawn_at) > steps
    late = deadline.index_select(0, drawn_at) < steps
    if bool((early | late).any()):  # never: every draw within its window
        raise RuntimeError(f"mixture schedule for parts {parts} missed a window")
    return source.index_select(0, drawn_at), draw.index_select(0, drawn_at)


@dataclass(frozen=True)
class Schedule:
    """Segments of the stream, each from a global start position with its parts; the
    first starts at 0. ``base[i]`` is every source's count before segment ``i``."""

    segments: tuple[tuple[int, tuple[int, ...]], ...]
    base: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.segments or self.segments[0][0] != 0:
            raise ValueError(f"a schedule's first segment starts at 0, got {self.segments}")
        starts = [start for start, _ in self.segments]
        if starts != sorted(set(starts)):
            raise ValueError(f"segment starts must increase, got {starts}")
        counts = torch.zeros(len(self.segments[0][1]), dtype=torch.int64)
        base = []
        for i, (start, segment_parts) in enumerate(self.segments):
            base.append(tuple(counts.tolist()))
            if i + 1 < len(self.segments):
                counts = counts + period(segment_parts).counts(self.segments[i + 1][0] - start)
        object.__setattr__(self, "base", tuple(base))

    @classmethod
    def of(cls, segment_parts: tuple[int, ...]) -> Schedule:
        return cls(((0, segment_parts),))

    def changed(self, position: int, segment_parts: tuple[int, ...]) -> Schedule:
        """This schedule with ``segment_parts`` from ``position`` on (later segments, which
        no position before ``position`` depends on, are replaced). A new segment starts
        there even with the same parts: every prefix from ``position`` on is exact."""
        kept = tuple(s for s in self.segments if s[0] < position)
        return Schedule((*kept, (position, segment_parts)))

    def counts(self, position: int) -> list[int]:
        """Every source's draws in the stream's first ``position`` positions."""
        i = max(j for j, (start, _) in enumerate(self.segments) if start <= position)
        start, segment_parts = self.segments[i]
        within = period(segment_parts).counts(position - start)
        return [b + c for b, c in zip(self.base[i], within.tolist(), strict=True)]

    def locate(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For each stream position: its source, and how many times that source drew
        before it (over the whole stream)."""
        if len(self.segments) == 1:
            return self._locate_in(0, positions)
        source = torch.empty_like(positions)
        drawn = torch.empty_like(positions)
        starts = torch.tensor([s for s, _ in self.segments], dtype=torch.int64)
        which = torch.searchsorted(starts, positions, right=True) - 1
        for i in torch.unique(which).tolist():
            chosen = (which == i).nonzero()[:, 0]
            d, j = self._locate_in(i, positions.index_select(0, chosen))
            source.index_copy_(0, chosen, d)
            drawn.index_copy_(0, chosen, j)
        return source, drawn

    def _locate_in(self, i: int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`locate` for positions of segment ``i``."""
        start, segment_parts = self.segments[i]
        one = period(segment_parts)
        relative = positions - start
        whole = torch.div(relative, one.length, rounding_mode="floor")
        offset = relative - whole * one.length
        d, rank = one.at(offset)
        counts = torch.tensor(self.base[i], dtype=torch.int64)
        sizes = torch.tensor(segment_parts, dtype=torch.int64)
        drawn = counts.index_select(0, d) + whole * sizes.index_select(0, d)
        return d, drawn + rank
