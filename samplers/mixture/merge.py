"""A mixing schedule counted in tokens: each source's draws merged by its tokens over its weight.

Guarantee: with token parts ``a_d`` (integers below ``2**53``; ``w_d = a_d / A``, ``A``
their sum), after any prefix of a segment of the stream there is a level ``L`` such that
every source ``d`` with a positive part has drawn ``X_d`` tokens in the segment with

    ``|X_d - L * w_d| <= max_d / 2``

(``max_d`` the longest length of source ``d``; up to the keys' rounding, a relative
``2**-52`` of ``L``): each source is within half of one of its samples of the same
level, so ``|X_d - w_d * X| <= (max_d + w_d * (sum of the others' max_e)) / 2`` with
``X`` the prefix's tokens. Each source's draws come in its order (its ``j``-th draw is
item ``j mod n_d`` of its pass ``j // n_d``, as
:class:`~samplers.mixture.order.MixtureOrder` reads them), so a pass is read once before
the next begins; and with parts proportional to the sources' token totals every
source's pass ends at the same level, so the first ``sum n_d`` positions are every
sample once. A source with a part of 0 is not drawn.

How: draw ``y`` of source ``d`` starts after ``T_d(y)`` tokens of that source (the
lengths of its draws before it, over its passes; ``B_d`` where the segment begins) and
gets the key of its middle, ``(2 (T_d(y) - B_d) + len_y) / 2 a_d``, a double (both are
exact below ``2**53``, the quotient correctly rounded, so every rank computes the same);
the segment's positions hold the draws in (key, pass, source, draw) order, a merge of
the sources' draws by their tokens over their weight. At any position the next draw's
key is the level: every source has drawn its draws whose middles are below it.

``T_d`` and its inverse are :class:`~samplers.mixture.pass_tokens.PassTokens`'s: only
the pass a draw is in is read, its running sums kept every
:data:`~samplers.mixture.pass_tokens.BLOCK` items. Consecutive positions (a chunk
after the one before) continue from where the last call stopped, a round of tensor
operations over each source's next draws (O(1) per position), which also hands back
each draw's item so that the order need not compute it again; a position up to
:data:`_FORWARD` past the last one is merged on to, and one further away is merged on to
from a level at most :data:`_CLOSE` draws before it (the draws keyed below a level are a
prefix of the merge; where more than that tie on one key, from the level of the
position itself, its ties in (pass, source, draw) order), found by a search over the
doubles that reads each source's current pass up to its place (O(n_d) per source,
once). ``OverflowError`` once a
source's tokens in a segment pass ``2**51``.
"""

from __future__ import annotations

import functools
import itertools
import math
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from samplers.mixture.pass_tokens import BLOCK, PassTokens
from samplers.mixture.passes import Passes, drawn_items
from samplers.mixture.schedule import Schedule

__all__ = ["BLOCK", "EXACT", "Mixing", "TokenMerge", "over_passes"]

#: Where runs ended, kept (the most recent): a read continues from the nearest before it.
_MARKS = 64
#: Tokens and parts up to here are exact as doubles, so is each key's quotient's rounding.
EXACT = 1 << 53
#: A position at most this far past the last run is reached by merging on to it.
_FORWARD = 1 << 22
#: A position further away is merged on to from a level at most this far before it.
_CLOSE = 1 << 14
#: Each round fetches this times a source's share of the positions left (and 9 more).
_SPARE = 1.25


def _bits(value: float) -> int:
    """The bits of a non-negative double, as an integer (they rise with the value)."""
    return int.from_bytes(struct.pack(">d", value), "big")


def _double(bits: int) -> float:
    """The double of :func:`_bits`."""
    return float(struct.unpack(">d", bits.to_bytes(8, "big"))[0])


@dataclass
class _Derived:
    """What a :class:`TokenMerge` computes from its settings, and its caches."""

    read: Callable[[torch.Tensor], torch.Tensor]
    sizes: torch.Tensor
    offsets_tensor: torch.Tensor
    totals: list[int]
    passes: Passes
    pass_tokens: PassTokens
    #: segment -> each source's draws and tokens where it begins.
    bases: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    #: (segment, position) -> (counts, tokens) where the last runs ended, the latest last.
    marks: OrderedDict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=OrderedDict
    )
    #: The last run: (segment, start, counts there, its sources), for counts inside it.
    last_run: tuple[int, int, tuple[int, ...], torch.Tensor] | None = None
    lock: Any = field(default_factory=threading.RLock)


@dataclass(frozen=True)
class TokenMerge:
    """The schedule of a stream mixed by token parts (see the module): ``segments`` are
    ``(start position, parts)`` as for :class:`~samplers.mixture.schedule.Schedule`;
    ``lengths`` has one length per sample of ``ConcatDataset`` of sources of ``sizes``."""

    sizes: tuple[int, ...]
    segments: tuple[tuple[int, tuple[int, ...]], ...]
    lengths: Any = field(repr=False, compare=False)
    seed: int = 0
    shuffle: bool = True
    totals: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    _derived: _Derived = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [start for start, _ in self.segments]
        if not starts or starts[0] != 0 or starts != sorted(set(starts)):
            raise ValueError(f"a schedule's segments start at 0 and increase, got {self.segments}")
        if isinstance(self.lengths, torch.Tensor):
            lengths = self.lengths.reshape(-1).to(torch.int64)
            if lengths.numel() != sum(self.sizes):
                raise ValueError(
                    f"lengths must have one value per sample ({sum(self.sizes)}), got "
                    f"{lengths.numel()}"
                )
            read = functools.partial(torch.index_select, lengths, 0)
            totals = [int(part.sum()) for part in torch.split(lengths, list(self.sizes))]
        else:  # a reader of the lengths at indices (HeldLengths), with the totals given
            read = getattr(self.lengths, "peek", self.lengths.read)
            if self.totals is None:
                raise ValueError("totals must be given with a reader of the lengths")
            totals = list(self.totals)
        sizes = torch.tensor(self.sizes, dtype=torch.int64)
        offsets = sizes.cumsum(0) - sizes
        for _, parts in self.segments:
            if len(parts) != len(self.sizes):
                raise ValueError(f"parts must have {len(self.sizes)} values, got {parts}")
            for d, (part, total) in enumerate(zip(parts, totals, strict=True)):
                if part < 0 or part >= EXACT:
                    raise ValueError(f"parts must be at least 0 and below 2**53, got {parts}")
                if part > 0 and total == 0:
                    raise ValueError(
                        f"source {d} has a positive token weight but no tokens (its "
                        f"{self.sizes[d]} lengths sum to 0)"
                    )
        passes = Passes(self.sizes, self.seed)
        each = PassTokens(read, self.sizes, offsets.tolist(), totals, passes, self.shuffle)
        derived = _Derived(read, sizes, offsets, totals, passes, each)
        object.__setattr__(self, "_derived", derived)

    def __getstate__(self) -> dict[str, Any]:
        """The settings only: what is derived from them is rebuilt on unpickling."""
        return {k: v for k, v in self.__dict__.items() if k != "_derived"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
        self.__post_init__()

    def with_passes(self, seed: int, shuffle: bool) -> TokenMerge:
        """This schedule, or the same one over the passes of ``seed`` and ``shuffle``."""
        if (seed, shuffle) == (self.seed, self.shuffle):
            return self
        return TokenMerge(self.sizes, self.segments, self.lengths, seed, shuffle, self.totals)

    def changed(self, position: int, parts: tuple[int, ...]) -> TokenMerge:
        """This schedule with ``parts`` from ``position`` on (later segments replaced)."""
        kept = tuple(s for s in self.segments if s[0] < position)
        return TokenMerge(
            self.sizes,
            (*kept, (position, parts)),
            self.lengths,
            self.seed,
            self.shuffle,
            self.totals,
        )

    # Each source's tokens ----------------------------------------------------------------

    def tokens(self, d: int, y: int) -> int:
        """``T_d(y)``: the tokens of source ``d``'s first ``y`` draws."""
        with self._derived.lock:
            return self._derived.pass_tokens.tokens(d, y)

    def below(self, d: int, value: int) -> int:
        """How many of ``d``'s draws start before ``value`` tokens (``T_d(y) < value``)."""
        with self._derived.lock:
            return self._derived.pass_tokens.below(d, value)

    # The merge ---------------------------------------------------------------------------

    def _segment(self, position: int) -> int:
        return max(i for i, (start, _) in enumerate(self.segments) if start <= position)

    def _base(self, i: int) -> tuple[list[int], list[int]]:
        """Each source's draws and tokens where segment ``i`` begins."""
        bases = self._derived.bases
        if i not in bases:
            start = self.segments[i][0]
            counts = [0] * len(self.sizes) if i == 0 else self._counts_in(i - 1, start)
            bases[i] = (counts, [self.tokens(d, c) for d, c in enumerate(counts)])
        return bases[i]

    def _count_below(self, i: int, level: int) -> list[int]:
        """Each source's draws in segment ``i`` with a key below the double whose bits
        are ``level`` (the bits of non-negative doubles rise with them)."""
        bound = _double(level)
        parts = self.segments[i][1]
        counts, tokens = self._base(i)
        found = []
        for d, part in enumerate(parts):
            if part == 0 or bound <= 0:
                found.append(0)
                continue
            # The least ``m`` whose key ``m / 2a`` is at least the bound: the draws keyed
            # below it are those with ``2 (T(y) - B) + length < m``.
            m = max(math.ceil(bound * 2 * part), 1)
            while m > 1 and (m - 1) / (2 * part) >= bound:
                m -= 1
            while m / (2 * part) < bound:
                m += 1
            found.append(self._below_middle(d, 2 * tokens[d] + m) - counts[d])
        return found

    def _below_middle(self, d: int, value: int) -> int:
        """How many of ``d``'s draws have ``T(y) + T(y + 1) < value`` (twice their middle
        below it): those before the last that starts below half of it, and that one if
        its middle is."""
        last = self.below(d, -(-value // 2))  # draws with 2 T(y) < value
        if last == 0:
            return 0
        ends = self.tokens(d, last - 1) + self.tokens(d, last)
        return last - 1 + (ends < value)

    def _counts(self, position: int) -> list[int]:
        """Every source's draws (over the whole stream) before ``position``."""
        return self._counts_in(self._segment(position), position)

    def _counts_in(self, i: int, position: int) -> list[int]:
        """:meth:`_counts` of a ``position`` of segment ``i`` (or where it ends)."""
        start = self.segments[i][0]
        marks = self._derived.marks
        if (i, position) in marks:
            return list(marks[(i, position)][0])
        run = self._derived.last_run
        if run is not None and run[0] == i and run[1] <= position <= run[1] + run[3].numel():
            inside = torch.bincount(run[3][: position - run[1]], minlength=len(self.sizes))
            return [c + int(k) for c, k in zip(run[2], inside.tolist(), strict=True)]
        # Near enough past where a recent run ended (or the segment's start): merge on.
        begin = max((at for k, at in marks if k == i and at < position), default=start)
        if 0 < position - begin <= _FORWARD:
            self._run(i, begin, position - begin)
            return list(marks[(i, position)][0])
        base, _ = self._base(i)
        wanted = position - start
        if wanted == 0:
            return list(base)
        low, below = self._level(i, wanted)
        if wanted - sum(below) <= _CLOSE:  # a prefix of the merge near it: merge on
            at = start + sum(below)
            counts = [c + k for c, k in zip(base, below, strict=True)]
            if at < position:
                self._mark(i, at, counts, [self.tokens(d, c) for d, c in enumerate(counts)])
                self._run(i, at, position - at)
                return list(marks[(i, position)][0])
            return counts
        at_most = self._count_below(i, low + 1)
        # The draws keyed ``low`` itself, in (pass, source, draw) order, up to ``wanted``.
        tied = sorted(
            (y // self.sizes[d], d, y)
            for d, (c, more) in enumerate(zip(below, at_most, strict=True))
            for y in range(base[d] + c, base[d] + more)
        )
        counts = [b + c for b, c in zip(base, below, strict=True)]
        for _, d, _ in tied[: wanted - sum(below)]:
            counts[d] += 1
        return counts

    def _level(self, i: int, wanted: int) -> tuple[int, list[int]]:
        """A level (the bits of a double) with at most ``wanted`` draws of segment ``i``
        keyed below it, and each source's draws keyed below it: in all within
        :data:`_CLOSE` of ``wanted``, or the largest such level (the next double has
        more). The draws keyed below a level are a prefix of the merge. The count grows
        about linearly with the level: each step aims a little below ``wanted`` by the
        values of the bounds, and halves their bits when that gained little."""
        parts = self.segments[i][1]
        totals = self._derived.totals
        rates = [a * n / t for a, n, t in zip(parts, self.sizes, totals, strict=True) if a]
        per_draw = sum(parts) / sum(rates)  # the tokens a position holds, on average
        low, below_low, each = 0, 0, [0] * len(parts)  # the bits of 0.0
        guess = 1.01 * wanted * per_draw / sum(parts) + 1.0
        high = _bits(guess)
        found = self._count_below(i, high)
        while sum(found) <= wanted:
            low, below_low, each = high, sum(found), found
            if wanted - below_low <= _CLOSE:
                return low, each
            guess *= 1.25
            high = _bits(guess)
            found = self._count_below(i, high)
        below_high = sum(found)
        aim = max(wanted - _CLOSE // 2, 0)
        halve = False
        while high - low > 1 and wanted - below_low > _CLOSE:
            if halve:
                middle = (low + high) // 2
            else:
                low_value, high_value = _double(low), _double(high)
                share = (aim - below_low) / max(below_high - below_low, 1)
                middle = _bits(low_value + share * (high_value - low_value))
                middle = min(max(middle, low + 1), high - 1)
            found = self._count_below(i, middle)
            width = high - low
            if sum(found) <= wanted:
                low, below_low, each = middle, sum(found), found
            else:
                high, below_high = middle, sum(found)
            halve = not halve and 2 * (high - low) > width
        return low, each

    def _mark(self, i: int, position: int, counts: list[int], tokens: list[int]) -> None:
        """Keep the draws and tokens of each source at ``position`` of segment ``i``."""
        marks = self._derived.marks
        marks[(i, position)] = (tuple(counts), tuple(tokens))
        marks.move_to_end((i, position))
        if len(marks) > _MARKS:
            marks.popitem(last=False)

    def counts(self, position: int) -> list[int]:
        """Every source's draws in the stream's first ``position`` positions."""
        with self._derived.lock:
            return self._counts(position)

    def _run(self, i: int, start: int, size: int) -> tuple[torch.Tensor, ...]:
        """Sources, draw numbers and items (each draw's index in its source) of positions
        ``[start, start + size)`` of segment ``i``, the merge continued from the counts
        at ``start``, a round of tensor operations at a time: each source's next draws
        (about as many as its share of the positions left, a little more) are keyed, and
        those keyed below the first draw no source fetched are the merge's next
        positions."""
        parts = self.segments[i][1]
        if (i, start) not in self._derived.marks:
            counts = self._counts_in(i, start)  # merged on to it (a mark), or found
        mark = self._derived.marks.get((i, start))
        if mark is not None:
            counts, tokens = list(mark[0]), list(mark[1])
        else:
            tokens = [self.tokens(d, c) for d, c in enumerate(counts)]
        _, base_tokens = self._base(i)
        active = [d for d, part in enumerate(parts) if part > 0]
        rates = [parts[d] * self.sizes[d] / self._derived.totals[d] for d in active]
        shares = torch.tensor([rate / sum(rates) for rate in rates], dtype=torch.float64)
        owners = torch.tensor(active, dtype=torch.int64)
        divisors = torch.tensor([2 * parts[d] for d in active], dtype=torch.float64)
        at = torch.tensor([counts[d] for d in active], dtype=torch.int64)
        so_far = torch.tensor([tokens[d] - base_tokens[d] for d in active], dtype=torch.int64)
        read, offsets = self._derived.read, self._derived.offsets_tensor
        found: list[tuple[torch.Tensor, ...]] = []
        left, spare = size, _SPARE
        while left > 0:
            # Each source's next draws, and one more: the first not taken this round.
            fetch = (shares * (left * spare)).to(torch.int64) + 9
            owner = torch.repeat_interleave(owners, fetch)
            first = torch.cumsum(fetch, 0) - fetch
            number = torch.arange(owner.numel()) + torch.repeat_interleave(at - first, fetch)
            within = drawn_items(
                self._derived.passes, self._derived.sizes, self.shuffle, owner, number
            )
            length = read(within + offsets.index_select(0, owner)).to(torch.int64)
            begin = torch.cumsum(length, 0) - length  # each draw's start, from the first's
            begin += torch.repeat_interleave(so_far - begin.index_select(0, first), fetch)
            if int(begin.max()) >= EXACT // 4:
                raise OverflowError(
                    f"a source's tokens in the segment from position {self.segments[i][0]} "
                    f"({int(begin.max())}) pass 2**51: its keys would not be exact"
                )
            key = (2 * begin + length).to(torch.float64) / torch.repeat_interleave(divisors, fetch)
            passes = number.div(self._derived.sizes.index_select(0, owner), rounding_mode="floor")
            last = first + fetch - 1
            # The limit: the least (key, pass, source) of the draws not taken.
            last_key, last_pass = key.index_select(0, last), passes.index_select(0, last)
            tied = (last_key == last_key.min()).nonzero().squeeze(1)
            limit = int(last[tied[int(torch.argmin(last_pass.index_select(0, tied)))]])
            lk, lp, ls = key[limit], passes[limit], owner[limit]
            below = (key < lk) | ((key == lk) & ((passes < lp) | ((passes == lp) & (owner < ls))))
            chosen = torch.nonzero(below).squeeze(1)
            if chosen.numel() == 0:
                spare *= 2
                continue
            # In (key, pass, source, draw) order: the candidates are in (source, draw)
            # order, sorted stably by key, and first by pass where keys tie.
            keys, by_key = torch.sort(key.index_select(0, chosen), stable=True)
            if bool((keys[1:] == keys[:-1]).any()):
                by_pass = torch.sort(passes.index_select(0, chosen), stable=True).indices
                chosen = chosen.index_select(0, by_pass)
                by_key = torch.sort(key.index_select(0, chosen), stable=True).indices
            order = chosen.index_select(0, by_key[:left])
            found.append(tuple(t.index_select(0, order) for t in (owner, number, within)))
            left -= order.numel()
            # Each source's draws taken are a prefix of those fetched (keys rise).
            taken = torch.bincount(owner.index_select(0, order), minlength=len(self.sizes))
            taken = taken.index_select(0, owners)
            ends = first + taken
            so_far = begin.index_select(0, ends)
            at += taken
        counts_now, tokens_now = list(counts), list(tokens)
        for k, d in enumerate(active):
            counts_now[d] = int(at[k])
            tokens_now[d] = int(so_far[k]) + base_tokens[d]
        self._mark(i, start + size, counts_now, tokens_now)
        run = tuple(torch.cat(column) for column in zip(*found, strict=True))
        self._derived.last_run = (i, start, tuple(counts), run[0])
        return run

    def locate(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For each stream position: its source, and how many times that source drew
        before it (over the whole stream). Positions close together are computed as one
        run from the first of them."""
        source, drawn, _ = self.locate_items(positions)
        return source, drawn

    def locate_items(self, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`locate`, and each draw's index in its source (the item of its pass
        the merge read its length at)."""
        with self._derived.lock:
            count = positions.numel()
            if count == 0:
                return tuple(torch.empty_like(positions) for _ in range(3))
            first, last = int(positions[0]), int(positions[-1])
            i = self._segment(first)
            if (
                last - first == count - 1
                and i == self._segment(last)
                and bool((torch.diff(positions) == 1).all())
            ):  # consecutive positions (an order's chunk): one run
                return self._run(i, first, count)
            wanted, inverse = torch.unique(positions, return_inverse=True)
            found = [torch.empty_like(wanted) for _ in range(3)]
            starts = torch.tensor([s for s, _ in self.segments], dtype=torch.int64)
            segment = torch.searchsorted(starts, wanted, right=True) - 1
            # Runs: positions of one segment, each within BLOCK of the one before.
            breaks = ((wanted[1:] - wanted[:-1]) > BLOCK) | (segment[1:] != segment[:-1])
            edges = [0, *(torch.nonzero(breaks).squeeze(1) + 1).tolist(), wanted.numel()]
            for lo, hi in itertools.pairwise(edges):
                begin, end = int(wanted[lo]), int(wanted[hi - 1])
                run = self._run(int(segment[lo]), begin, end - begin + 1)
                at = wanted[lo:hi] - begin
                for column, values in zip(found, run, strict=True):
                    column[lo:hi] = values.index_select(0, at)
            return tuple(column.index_select(0, inverse) for column in found)


#: A stream's schedule: by draws, or merged by tokens.
Mixing = Schedule | TokenMerge


def over_passes(schedule: Mixing, seed: int, shuffle: bool) -> Mixing:
    """``schedule``, a merge by tokens over the passes of ``seed`` and ``shuffle``."""
    return schedule.with_passes(seed, shuffle) if isinstance(schedule, TokenMerge) else schedule
