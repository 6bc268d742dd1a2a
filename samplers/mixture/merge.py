"""A mixing schedule counted in tokens: each source's draws merged by its tokens over its weight.

Guarantee: with integer token parts ``a_d`` (``A`` their sum, the weight ``w_d = a_d /
A``), after any prefix of a segment of the stream there is a level ``L`` such that every
source ``d`` with a positive part has drawn ``X_d`` tokens in the segment with

    ``L * w_d <= X_d < L * w_d + max_d + w_d``

(``max_d`` the longest length of source ``d``): each source is within one of its samples
(and one token) of the same level, so ``|X_d - w_d * X| < max_d + w_d * (1 + sum_e
max_e)`` with ``X`` the tokens of the prefix. Each source's draws come in its order
(its ``j``-th draw is item ``j mod n_d`` of its pass ``j // n_d``, as
:class:`~samplers.mixture.order.MixtureOrder` reads them), so a pass is read once before
the next begins. A source with a part of 0 is not drawn.

How: draw ``y`` of source ``d`` starts after ``T_d(y)`` tokens of that source (the
lengths of its draws before it, over its passes; ``T_d(C_d) = B_d`` where the segment
begins) and gets the key ``floor((T_d(y) - B_d) * A / a_d)``; the segment's positions
hold the draws in (key, source, draw) order, a merge of the sources' draws by their
tokens so far over their weight. At the ``m``-th position the next draw's key ``k`` is
the level: every source has drawn all its draws with a smaller key, so ``X_d * A / a_d
>= k`` and ``(X_d - its last length) * A / a_d < k + 1``.

A pass's tokens ``S_d`` are known, so ``T_d(y) = (y // n_d) * S_d + P(y mod n_d)``, with
``P`` the prefix sums of the lengths of pass ``y // n_d`` in pass order: only the pass
the position is in is read, a block of :data:`BLOCK` items at a time, its running sums
kept every block (``n_d / BLOCK`` integers per pass). Positions read in order (a window
after the one before) continue from where the last call stopped, O(1) tensor operations
per position; a position elsewhere finds its level by bisection, reading each source's
current pass up to its place (O(n_d) per source, once). Exact int64 arithmetic: a
segment's keys must stay below ``2**63`` (about ``2**63 / A`` tokens per segment);
``OverflowError`` past them.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from samplers.mixture.passes import Passes, drawn_items

__all__ = ["BLOCK", "TokenMerge"]

#: Items of a pass read together (and the spacing of the running sums kept per pass).
BLOCK = 1 << 12
#: Passes whose running sums are kept (the most recently read).
_CACHED_PASSES = 256
#: Blocks of lengths kept (the most recently read).
_CACHED_BLOCKS = 512
_INT64_MAX = (1 << 63) - 1


@dataclass
class _Derived:
    """What a :class:`TokenMerge` computes from its settings, and its caches."""

    lengths: torch.Tensor
    sizes: torch.Tensor
    offsets: list[int]
    offsets_tensor: torch.Tensor
    totals: list[int]
    passes: Passes
    #: (source, pass) -> the pass's running sums before each block read so far.
    sums: OrderedDict[tuple[int, int], list[int]] = field(default_factory=OrderedDict)
    #: (source, pass, block) -> its lengths.
    blocks: OrderedDict[tuple[int, int, int], torch.Tensor] = field(default_factory=OrderedDict)
    #: segment -> each source's draws and tokens where it begins.
    bases: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    #: (segment, position, counts, tokens) where the last run ended.
    cursor: tuple[int, int, tuple[int, ...], tuple[int, ...]] | None = None
    lock: Any = field(default_factory=threading.RLock)


@dataclass(frozen=True)
class TokenMerge:
    """The schedule of a stream mixed by token parts (see the module): ``segments`` are
    ``(start position, parts)`` as for :class:`~samplers.mixture.schedule.Schedule`;
    ``lengths`` has one length per sample of ``ConcatDataset`` of sources of ``sizes``."""

    sizes: tuple[int, ...]
    segments: tuple[tuple[int, tuple[int, ...]], ...]
    lengths: torch.Tensor = field(repr=False, compare=False)
    seed: int = 0
    shuffle: bool = True
    _derived: _Derived = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [start for start, _ in self.segments]
        if not starts or starts[0] != 0 or starts != sorted(set(starts)):
            raise ValueError(f"a schedule's segments start at 0 and increase, got {self.segments}")
        lengths = torch.as_tensor(self.lengths).reshape(-1).to(torch.int64)
        if lengths.numel() != sum(self.sizes):
            raise ValueError(
                f"lengths must have one value per sample ({sum(self.sizes)}), got {lengths.numel()}"
            )
        sizes = torch.tensor(self.sizes, dtype=torch.int64)
        offsets = sizes.cumsum(0) - sizes
        totals = [int(part.sum()) for part in torch.split(lengths, list(self.sizes))]
        for _, parts in self.segments:
            if len(parts) != len(self.sizes):
                raise ValueError(f"parts must have {len(self.sizes)} values, got {parts}")
            for d, (part, total) in enumerate(zip(parts, totals, strict=True)):
                if part > 0 and total == 0:
                    raise ValueError(
                        f"source {d} has a positive token weight but no tokens (its "
                        f"{self.sizes[d]} lengths sum to 0)"
                    )
        derived = _Derived(
            lengths, sizes, offsets.tolist(), offsets, totals, Passes(self.sizes, self.seed)
        )
        object.__setattr__(self, "_derived", derived)

    def __getstate__(self) -> dict[str, Any]:
        """The settings only: what is derived from them is rebuilt on unpickling."""
        return {k: v for k, v in self.__dict__.items() if k != "_derived"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
        self.__post_init__()

    def changed(self, position: int, parts: tuple[int, ...]) -> TokenMerge:
        """This schedule with ``parts`` from ``position`` on (later segments replaced)."""
        kept = tuple(s for s in self.segments if s[0] < position)
        return TokenMerge(
            self.sizes, (*kept, (position, parts)), self.lengths, self.seed, self.shuffle
        )

    # Each source's tokens ----------------------------------------------------------------

    def _block(self, d: int, q: int, b: int) -> torch.Tensor:
        """The lengths of items ``[b * BLOCK, (b + 1) * BLOCK)`` of pass ``q`` of ``d``."""
        blocks = self._derived.blocks
        key = (d, q, b)
        found = blocks.get(key)
        if found is not None:
            blocks.move_to_end(key)
            return found
        n = self.sizes[d]
        items = torch.arange(b * BLOCK, min((b + 1) * BLOCK, n), dtype=torch.int64)
        drawn = items + q * n
        source = torch.full_like(drawn, d)
        within = drawn_items(self._derived.passes, self._derived.sizes, self.shuffle, source, drawn)
        found = self._derived.lengths.index_select(0, within + self._derived.offsets[d])
        blocks[key] = found
        if len(blocks) > _CACHED_BLOCKS:
            blocks.popitem(last=False)
        return found

    def _sums(self, d: int, q: int, upto: int) -> list[int]:
        """The running sums of pass ``q`` of ``d`` before each block, at least through
        block ``upto`` (all of them: ``upto`` past the last block)."""
        sums_of = self._derived.sums
        key = (d, q)
        sums = sums_of.setdefault(key, [0])
        sums_of.move_to_end(key)
        if len(sums_of) > _CACHED_PASSES:
            sums_of.popitem(last=False)
        last = -(-self.sizes[d] // BLOCK)
        while len(sums) <= min(upto, last):
            b = len(sums) - 1
            sums.append(sums[-1] + int(self._block(d, q, b).sum()))
        return sums

    def tokens(self, d: int, y: int) -> int:
        """``T_d(y)``: the tokens of source ``d``'s first ``y`` draws."""
        n = self.sizes[d]
        q, i = divmod(y, n)
        b, r = divmod(i, BLOCK)
        before = self._sums(d, q, b)[b]
        inside = int(self._block(d, q, b)[:r].sum()) if r else 0
        return q * self._derived.totals[d] + before + inside

    def below(self, d: int, value: int) -> int:
        """How many of ``d``'s draws start before ``value`` tokens (``T_d(y) < value``)."""
        if value <= 0:
            return 0
        n, total = self.sizes[d], self._derived.totals[d]
        q = (value - 1) // total
        room = value - q * total  # 1 <= room <= total: the pass ends at or after it
        last = -(-n // BLOCK)
        sums = self._sums(d, q, 0)
        while len(sums) <= last and sums[-1] < room:
            sums = self._sums(d, q, len(sums))
        b = min(bisect.bisect_left(sums, room), last) - 1  # the last block starting below
        lengths = self._block(d, q, b)
        starts = lengths.cumsum(0) - lengths + sums[b]
        inside = int(torch.searchsorted(starts, torch.tensor([room]), side="left")[0])
        return q * n + b * BLOCK + inside

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
        """Each source's draws in segment ``i`` with a key below ``level``."""
        parts = self.segments[i][1]
        total = sum(parts)
        counts, tokens = self._base(i)
        found = []
        for d, part in enumerate(parts):
            if part == 0 or level <= 0:
                found.append(0)
                continue
            # key < level  <=>  (T - B) * A < level * a  <=>  T < B + ceil(level * a / A)
            found.append(self.below(d, tokens[d] - (-level * part // total)) - counts[d])
        return found

    def _counts(self, position: int) -> list[int]:
        """Every source's draws (over the whole stream) before ``position``."""
        return self._counts_in(self._segment(position), position)

    def _counts_in(self, i: int, position: int) -> list[int]:
        """:meth:`_counts` of a ``position`` of segment ``i`` (or where it ends)."""
        start = self.segments[i][0]
        cursor = self._derived.cursor
        if cursor is not None and cursor[0] == i and cursor[1] == position:
            return list(cursor[2])
        base, _ = self._base(i)
        wanted = position - start
        if wanted == 0:
            return list(base)
        # The level: the largest ``low`` with at most ``wanted`` draws keyed below it.
        # The count grows about linearly with the level, so each step guesses where it
        # reaches ``wanted`` between the bounds, and halves them when that gains little.
        parts = self.segments[i][1]
        totals = self._derived.totals
        rates = [a * n / t for a, n, t in zip(parts, self.sizes, totals, strict=True) if a]
        per_draw = sum(parts) / sum(rates)  # the tokens a position holds, on average
        low, below_low = 0, 0
        high = 2 * int(wanted * per_draw) + 1
        below_high = sum(self._count_below(i, high))
        while below_high <= wanted:
            low, below_low = high, below_high
            high *= 2
            below_high = sum(self._count_below(i, high))
        halve = False
        while high - low > 1:
            if halve:
                middle = (low + high) // 2
            else:
                step = (wanted - below_low) * (high - low) // max(below_high - below_low, 1)
                middle = min(max(low + step, low + 1), high - 1)
            found = sum(self._count_below(i, middle))
            width = high - low
            if found <= wanted:
                low, below_low = middle, found
            else:
                high, below_high = middle, found
            halve = not halve and 2 * (high - low) > width
        below, at_most = self._count_below(i, low), self._count_below(i, low + 1)
        left = wanted - sum(below)
        counts = []
        for d, (c, more) in enumerate(zip(below, at_most, strict=True)):
            taken = min(more - c, left)  # the draws keyed ``low``, in source order
            left -= taken
            counts.append(base[d] + c + taken)
        return counts

    def counts(self, position: int) -> list[int]:
        """Every source's draws in the stream's first ``position`` positions."""
        with self._derived.lock:
            return self._counts(position)

    def _run(self, i: int, start: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sources and draw numbers of positions ``[start, start + size)`` of segment ``i``,
        the merge continued from the counts at ``start``, a round of tensor operations
        at a time: each source's next draws (about as many as its share of the positions
        left, a quarter more) are keyed, and those keyed below the first draw no source
        fetched are the merge's next positions."""
        parts = self.segments[i][1]
        total = sum(parts)
        cursor = self._derived.cursor
        if cursor is not None and cursor[0] == i and cursor[1] == start:
            counts, tokens = list(cursor[2]), list(cursor[3])
        else:
            counts = self._counts_in(i, start)
            tokens = [self.tokens(d, c) for d, c in enumerate(counts)]
        _, base_tokens = self._base(i)
        active = [d for d, part in enumerate(parts) if part > 0]
        rates = [parts[d] * self.sizes[d] / self._derived.totals[d] for d in active]
        shares = torch.tensor([rate / sum(rates) for rate in rates], dtype=torch.float64)
        owners = torch.tensor(active, dtype=torch.int64)
        divisors = torch.tensor([parts[d] for d in active], dtype=torch.int64)
        at = torch.tensor([counts[d] for d in active], dtype=torch.int64)
        so_far = torch.tensor([tokens[d] - base_tokens[d] for d in active], dtype=torch.int64)
        lengths_of, offsets = self._derived.lengths, self._derived.offsets_tensor
        sources: list[torch.Tensor] = []
        draws: list[torch.Tensor] = []
        left, spare = size, 1.25
        while left > 0:
            fetch = (shares * (left * spare)).to(torch.int64) + 8
            owner = torch.repeat_interleave(owners, fetch)
            first = torch.cumsum(fetch, 0) - fetch
            place = torch.arange(owner.numel()) - torch.repeat_interleave(first, fetch)
            number = place + torch.repeat_interleave(at, fetch)
            within = drawn_items(
                self._derived.passes, self._derived.sizes, self.shuffle, owner, number
            )
            length = lengths_of.index_select(0, within + offsets.index_select(0, owner))
            running = torch.cumsum(length, 0)
            ends = running.index_select(0, torch.cumsum(fetch, 0) - 1)
            sums = ends - torch.cat([ends.new_zeros(1), ends[:-1]])  # each source's fetched
            after = so_far + sums
            if int(after.max()) > _INT64_MAX // total:
                raise OverflowError(
                    f"a source's tokens in the segment from position {self.segments[i][0]} "
                    f"({int(after.max())}) times the parts' sum ({total}) pass 2**63"
                )
            begin = (
                running
                - length
                - torch.repeat_interleave(
                    running.index_select(0, first) - length.index_select(0, first), fetch
                )
            )
            key = torch.div(
                (begin + torch.repeat_interleave(so_far, fetch)) * total,
                torch.repeat_interleave(divisors, fetch),
                rounding_mode="floor",
            )
            next_key = torch.div(after * total, divisors, rounding_mode="floor")
            limit = int(torch.argmin(next_key))  # the first minimum: the lowest source
            below = (key < next_key[limit]) | ((key == next_key[limit]) & (owner < owners[limit]))
            chosen = torch.nonzero(below).squeeze(1)
            if chosen.numel() == 0:
                spare *= 2
                continue
            order = chosen.index_select(
                0, torch.sort(key.index_select(0, chosen), stable=True).indices[:left]
            )
            sources.append(owner.index_select(0, order))
            draws.append(number.index_select(0, order))
            left -= order.numel()
            # Each source's draws taken are a prefix of those fetched (keys rise).
            slot = torch.repeat_interleave(torch.arange(len(active)), fetch)
            taken = torch.zeros(len(active), dtype=torch.int64).scatter_add_(
                0, slot.index_select(0, order), torch.ones_like(order)
            )
            gained = torch.zeros(len(active), dtype=torch.int64).scatter_add_(
                0, slot.index_select(0, order), length.index_select(0, order)
            )
            at += taken
            so_far += gained
        counts_now, tokens_now = list(counts), list(tokens)
        for k, d in enumerate(active):
            counts_now[d] = int(at[k])
            tokens_now[d] = int(so_far[k]) + base_tokens[d]
        self._derived.cursor = (i, start + size, tuple(counts_now), tuple(tokens_now))
        return torch.cat(sources), torch.cat(draws)

    def _lengths(self, d: int, first: int, count: int) -> torch.Tensor:
        """The lengths of source ``d``'s draws ``[first, first + count)``."""
        n = self.sizes[d]
        pieces = []
        y = first
        while y < first + count:
            q, item = divmod(y, n)
            b, r = divmod(item, BLOCK)
            block = self._block(d, q, b)
            piece = block[r : r + first + count - y]
            pieces.append(piece)
            y += piece.numel()
        return torch.cat(pieces) if len(pieces) != 1 else pieces[0]

    def locate(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For each stream position: its source, and how many times that source drew
        before it (over the whole stream). Positions close together are computed as one
        run from the first of them."""
        with self._derived.lock:
            source = torch.empty_like(positions)
            drawn = torch.empty_like(positions)
            if positions.numel() == 0:
                return source, drawn
            wanted, inverse = torch.unique(positions, return_inverse=True)
            found_source, found_drawn = torch.empty_like(wanted), torch.empty_like(wanted)
            starts = torch.tensor([s for s, _ in self.segments], dtype=torch.int64)
            segment = torch.searchsorted(starts, wanted, right=True) - 1
            # Runs: positions of one segment, each within BLOCK of the one before.
            breaks = ((wanted[1:] - wanted[:-1]) > BLOCK) | (segment[1:] != segment[:-1])
            edges = [0, *(torch.nonzero(breaks).squeeze(1) + 1).tolist(), wanted.numel()]
            for lo, hi in itertools.pairwise(edges):
                first, last = int(wanted[lo]), int(wanted[hi - 1])
                run_source, run_drawn = self._run(int(segment[lo]), first, last - first + 1)
                at = wanted[lo:hi] - first
                found_source[lo:hi] = run_source.index_select(0, at)
                found_drawn[lo:hi] = run_drawn.index_select(0, at)
            source.copy_(found_source.index_select(0, inverse))
            drawn.copy_(found_drawn.index_select(0, inverse))
            return source, drawn

    def draw_lengths(self, sources: Sequence[int], drawn: Sequence[int]) -> list[int]:
        """The lengths of the given draws (for checks)."""
        return [int(self._lengths(d, y, 1)[0]) for d, y in zip(sources, drawn, strict=True)]
