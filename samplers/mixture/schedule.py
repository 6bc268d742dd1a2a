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
deadline first finds one when one exists; :func:`period` checks every step anyway).
After ``T`` steps each source has exactly ``a_d`` draws, so the schedule repeats: one
period, ``T`` source numbers and each draw's rank within the period, is all that is
kept, and any position follows from ``divmod(p, T)``. The period is computed as far as
positions ask (:class:`Period`), so a position near a period's start costs only the
period's first piece; the first position past what is computed costs up to ``O(T log n)``
once.

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
from fractions import Fraction

import torch

__all__ = ["CHECKPOINT", "MAX_PERIOD", "Period", "Schedule", "parts", "period"]

#: The longest period kept: proportions with a larger common denominator are rounded to
#: multiples of ``1 / MAX_PERIOD`` (a positive weight never to 0).
MAX_PERIOD = 1 << 16
#: Every ``CHECKPOINT`` positions of a period its cumulative counts are kept.
CHECKPOINT = 256
#: The first piece of a period computed (later pieces double what is computed).
_FIRST_STEPS = 1 << 11
#: Weights given as floats are read as the simplest fraction within this relative
#: distance of the float (so ``0.6`` is ``3/5`` and ``1/3`` is ``1/3``).
_FLOAT_TOLERANCE = 1e-12
_SIMPLE_DENOMINATOR = 10**6


def _fraction(value: float | int | Fraction) -> Fraction:
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    exact = Fraction(value)
    simple = exact.limit_denominator(_SIMPLE_DENOMINATOR)
    if abs(simple - exact) <= abs(exact) * Fraction(_FLOAT_TOLERANCE):
        return simple
    return Fraction(repr(value))


def parts(weights: Sequence[float | int | Fraction]) -> tuple[int, ...]:
    """Integer parts ``a_d`` (their sum ``T`` is the period) for checked weights (finite,
    non-negative, not all zero): the weights' exact proportions in lowest terms, or,
    when their common denominator exceeds :data:`MAX_PERIOD`, those proportions rounded
    to ``MAX_PERIOD`` parts (largest remainder; a positive weight keeps at least 1)."""
    fractions = [_fraction(w) for w in weights]
    # Integer arithmetic over one common denominator: share d is numerators[d] / total.
    denominator = math.lcm(*(f.denominator for f in fractions))
    numerators = [f.numerator * (denominator // f.denominator) for f in fractions]
    total = sum(numerators)
    common = math.lcm(*(total // math.gcd(n, total) for n in numerators))
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
    else:  # the minimum of 1 overshot: take back from the largest
        for d in sorted(range(len(scaled)), key=lambda d: (-floors[d], d))[:-left]:
            floors[d] -= 1
    divisor = math.gcd(*floors)
    return tuple(a // divisor for a in floors)


class Period:
    """One period of the schedule for ``parts``: ``source[o]`` draws at offset ``o``,
    ``rank[o]`` is how many times that source drew before ``o`` in the period, and
    ``checkpoints[c]`` every source's count before offset ``c * CHECKPOINT``.

    Computed as far as asked and no further: earliest deadline first runs from the
    period's start in steps that at least double what is computed (so the whole period
    costs O(T) once) and stops where it is, its state being every source's count; a
    stream position near a period's start is located without the rest of the period.
    Safe to share between threads."""

    def __init__(self, parts: tuple[int, ...]) -> None:
        self.parts = parts
        total = sum(parts)
        self._source = torch.empty(total, dtype=torch.int64)
        self._rank = torch.empty(total, dtype=torch.int64)
        self._checkpoints = torch.zeros(total // CHECKPOINT + 1, len(parts), dtype=torch.int64)
        self._done = 0
        self._drawn = [0] * len(parts)
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
        """Compute the period's first ``offset`` positions, if not yet done."""
        if offset <= self._done:
            return
        with self._lock:
            done = self._done
            if offset <= done:
                return
            stop = min(self.length, max(offset, 2 * done, _FIRST_STEPS))
            stop = min(self.length, -(-stop // CHECKPOINT) * CHECKPOINT)
            sources, ranks = _earliest_deadline_first(self.parts, done, stop, self._drawn)
            block = torch.tensor(sources, dtype=torch.int64)
            self._source[done:stop] = block
            self._rank[done:stop] = torch.tensor(ranks, dtype=torch.int64)
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
    parts: tuple[int, ...], start: int = 0, stop: int | None = None, drawn: list[int] | None = None
) -> tuple[list[int], list[int]]:
    """Earliest deadline first (ties to the lower source), steps ``[start, stop)`` from
    the state at ``start`` (every source's count, ``drawn``, updated in place): each
    step's source and that source's count before it."""
    total = sum(parts)
    stop = total if stop is None else stop
    drawn = [0] * len(parts) if drawn is None else drawn
    ready: list[tuple[int, int]] = []
    releases: dict[int, list[int]] = {}  # step -> the sources whose next draw opens then
    for d, a in enumerate(parts):
        if a == 0 or drawn[d] >= a:
            continue
        release = drawn[d] * total // a
        if release <= start:
            ready.append((-(-(drawn[d] + 1) * total // a) - 1, d))
        else:
            releases.setdefault(release, []).append(d)
    heapq.heapify(ready)
    sources: list[int] = []
    ranks: list[int] = []
    push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
    for step in range(start, stop):
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
