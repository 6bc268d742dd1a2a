"""Each source's passes: a keyed permutation per ``(source, pass)``, evaluated for many
sources and passes in one tensor computation.

Guarantee: :meth:`Passes.items` maps ``(source, pass, item)`` to the item's sample in
that pass, a pure function of ``(seed, source's size, source, pass, item)``: for every
source and pass, ``item -> sample`` is a bijection of ``[0, size)``, so within a pass no
sample repeats. How the items of a chunk are grouped (which sources and passes share a
call, in what order) never changes a value, and a call costs O(1) tensor operations per
item, whatever the number of sources or passes it touches. A call of at least
:data:`TABLED_MIN` elements reads each round's ``F`` from a table per ``(source, pass)``
it touches (``F(key, x) & mask`` for every right half ``x``: ``2**high`` entries, the
same values; a dictionary lookup per ``(source, pass)`` finds them), kept across calls
up to :data:`TABLE_BUDGET` entries per round, so what is held is bounded whatever the
sources' sizes or the stream's length (tables first asked for that would outnumber the
call's elements by more than :data:`_FIRST_ASK` to one are built only when a later call
asks for them again: the first call is evaluated directly); a larger call is evaluated a block of
``samplers.cycle_walk._BLOCK`` elements at a time, in int32 when every source has at most
``2**30`` samples.

The permutation is the Feistel network of :mod:`samplers.feistel` (its round function
``F``, eight rounds, the halves' widths, cycle-walking), with its round keys derived per
pass in 32-bit arithmetic, so they too are tensors: with ``K[0..7]`` the round keys of
the source's key (:func:`samplers.feistel.round_keys` of ``(source_seed, 0)``) and the
pass ``q`` split into 32-bit halves ``lo, hi``, the pass words are
``m0 = F(K[0], F(K[1], lo) ^ hi)`` (distinct for distinct passes below ``2**32``) and
``m1 = F(K[2], m0)``, and round ``r`` is keyed by ``K[r] ^ m(r mod 2)`` (the pass is a
tweak of the source's key, as in tweakable block ciphers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch

from samplers.cycle_walk import _BLOCK
from samplers.feistel import ROUNDS, _mix64, _round_function, round_keys

__all__ = ["Passes", "drawn_items", "source_seed"]

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
#: Calls of at least this many elements read ``F`` from per-pass tables when those are
#: small enough (:meth:`Passes._tabled`).
TABLED_MIN = 1 << 12
#: Sources whose wider half is at most this many bits (below 2**32 samples) are tabled.
_TABLE_BITS = 16
#: A call touching more ``(source, pass)`` groups than this is evaluated directly.
_MAX_GROUPS = 4096
#: Tables of groups asked for the first time are built only up to this many entries per
#: element of the call (:meth:`_Tables.offsets`); past it the call is evaluated directly.
_FIRST_ASK = 2
#: A cycle walk down to this many elements finishes in Python integers
#: (:meth:`Passes._walk_scalar`): cheaper than a round of tensor operations for them.
_SCALAR_WALK = 64
#: The tables kept hold at most this many entries per round (int64: 8 MB for all rounds);
#: past it they are rebuilt for the groups of the call at hand.
TABLE_BUDGET = 1 << 17


def _mix(key: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``F(key, x)`` elementwise, for a tensor of keys: the round function's code serves a
    key tensor unchanged (``x ^ key`` and then operations on that tensor alone)."""
    return _round_function(cast(Any, key), x)


def source_seed(seed: int, source: int) -> int:
    """The 64-bit key of ``source``'s passes under ``seed`` (distinct per source)."""
    return _mix64((_mix64(seed & _MASK64) ^ (source + 1) * 0x9E3779B97F4A7C15) & _MASK64)


def _widths(size: int) -> tuple[int, int]:
    """The high and low halves' widths of the network over ``[0, size)``."""
    bits = (size - 1).bit_length() if size > 1 else 0
    return bits - bits // 2, bits // 2


class Passes:
    """The passes of sources of ``sizes`` under ``seed`` (see the module docstring)."""

    def __init__(self, sizes: Sequence[int], seed: int) -> None:
        self.sizes = torch.tensor(list(sizes), dtype=torch.int64)
        keys = [round_keys(source_seed(seed, d), 0) for d in range(len(sizes))]
        # One tensor per round (a gather of a chunk stays one element per position).
        self.keys = [torch.tensor([k[r] for k in keys], dtype=torch.int64) for r in range(ROUNDS)]
        widths = [_widths(size) for size in sizes]
        self.high = torch.tensor([a for a, _ in widths], dtype=torch.int64)
        self.low = torch.tensor([b for _, b in widths], dtype=torch.int64)
        self._high = [a for a, _ in widths]
        self._low_masks = (torch.ones_like(self.low) << self.low) - 1
        #: The tables' and the tabled network's dtype: int32 when every source's domain
        #: (below twice its size) and every table entry (at most 16 bits) fit it.
        self._dtype = torch.int32 if max(sizes, default=0) <= 1 << 30 else torch.int64
        self._store = _Tables()

    def items(self, source: torch.Tensor, passes: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """The sample at ``item`` of pass ``passes`` of ``source`` (int64 tensors, one
        value per element; ``0 <= item < size``)."""
        if source.numel() >= TABLED_MIN:
            tabled = self._tabled(source, passes, item)
            if tabled is not None:
                return tabled
        if source.numel() <= _BLOCK:
            return self._direct(source, passes, item)
        return torch.cat(
            [
                self._direct(*(t[lo : lo + _BLOCK] for t in (source, passes, item)))
                for lo in range(0, source.numel(), _BLOCK)
            ]
        )

    def _pass_keys(self, source: torch.Tensor, passes: torch.Tensor) -> list[torch.Tensor]:
        """The ``ROUNDS`` round keys of each ``(source, pass)``: the source's keys tweaked
        by the pass words (see the module docstring)."""
        keys = [k.index_select(0, source) for k in self.keys]
        low = passes & _MASK32
        high = (passes >> 32) & _MASK32
        word = _mix(keys[0], _mix(keys[1], low) ^ high)
        words = word, _mix(keys[2], word)
        return [k ^ words[r % 2] for r, k in enumerate(keys)]

    def _tabled(
        self, source: torch.Tensor, passes: torch.Tensor, item: torch.Tensor
    ) -> torch.Tensor | None:
        """:meth:`items` reading each round's ``F`` from a table per ``(source, pass)``
        (``F(key, x) & mask(left)`` for every right half ``x``), kept across calls in
        :class:`_Tables`; ``None`` when a source is too large for tables or the call
        touches too many passes. The same values as :meth:`_direct`."""
        count, length = len(self.high), source.numel()
        blocks = range(0, length, _BLOCK)  # every operation below on a block at most
        first = torch.full((count,), _MASK64 >> 1, dtype=torch.int64)
        last = torch.full((count,), -1, dtype=torch.int64)
        for lo in blocks:
            first.scatter_reduce_(0, source[lo : lo + _BLOCK], passes[lo : lo + _BLOCK], "amin")
            last.scatter_reduce_(0, source[lo : lo + _BLOCK], passes[lo : lo + _BLOCK], "amax")
        span = (last - first + 1).clamp_(min=0)
        spans = span.tolist()
        if sum(spans) > _MAX_GROUPS:
            return None
        starts = first.tolist()
        wanted = [(d, starts[d] + k) for d, n in enumerate(spans) for k in range(n)]
        if any(self._high[d] > _TABLE_BITS for d, _ in wanted):
            return None
        offsets = self._store.offsets(wanted, self, length)
        if offsets is None:
            return None
        group_start = span.cumsum(0) - span
        dtype = self._dtype  # int32 when every value fits: half the memory traffic
        group_offset = torch.tensor(offsets, dtype=dtype)
        tables = self._store.tables
        low, low_masks, sizes = (t.to(dtype) for t in (self.low, self._low_masks, self.sizes))
        # Per element: where its group's tables begin, its low half's width and mask, and
        # its source's size (kept for the walk).
        base, low_bits, low_mask, size, result = (
            torch.empty(length, dtype=dtype) for _ in range(5)
        )
        walking = []
        for lo in blocks:
            hi = min(lo + _BLOCK, length)
            block_source = source[lo:hi]
            group = group_start.index_select(0, block_source)
            group += passes[lo:hi]
            group -= first.index_select(0, block_source)
            torch.index_select(group_offset, 0, group, out=base[lo:hi])
            torch.index_select(low, 0, block_source, out=low_bits[lo:hi])
            torch.index_select(low_masks, 0, block_source, out=low_mask[lo:hi])
            torch.index_select(sizes, 0, block_source, out=size[lo:hi])
            value = self._tabled_network(
                item[lo:hi].to(dtype), tables, base[lo:hi], low_bits[lo:hi], low_mask[lo:hi]
            )
            result[lo:hi] = value
            walking.append((value >= size[lo:hi]).nonzero()[:, 0] + lo)
        pending = torch.cat(walking)
        # Cycle-walking: the values outside ``[0, size)`` step again, gathered from every
        # block, so each step of the walk costs a few operations for the whole call.
        while pending.numel():
            still = []
            for lo in range(0, pending.numel(), _BLOCK):
                slots = pending[lo : lo + _BLOCK]
                value = self._tabled_network(
                    result.index_select(0, slots),
                    tables,
                    base.index_select(0, slots),
                    low_bits.index_select(0, slots),
                    low_mask.index_select(0, slots),
                )
                result.index_copy_(0, slots, value)
                still.append(slots.masked_select(value >= size.index_select(0, slots)))
            pending = torch.cat(still)
        if dtype == torch.int64:
            return result
        wide = torch.empty(length, dtype=torch.int64)
        for lo in blocks:
            wide[lo : lo + _BLOCK] = result[lo : lo + _BLOCK]
        return wide

    def build_tables(self, groups: list[tuple[int, int]]) -> list[torch.Tensor]:
        """The round tables of ``groups`` (``(source, pass)`` pairs), end to end, each
        ``2**high`` entries long (the wider half), one tensor per round."""
        group_source = torch.tensor([d for d, _ in groups], dtype=torch.int64)
        group_pass = torch.tensor([q for _, q in groups], dtype=torch.int64)
        keys = self._pass_keys(group_source, group_pass)
        entries = torch.ones_like(group_source) << self.high.index_select(0, group_source)
        offset = entries.cumsum(0) - entries
        total = int(entries.sum())
        # Each entry's group: a mark where each group after the first begins, summed up.
        marks = torch.zeros(total, dtype=torch.int64)
        marks.index_add_(0, offset[1:], torch.ones(len(groups) - 1, dtype=torch.int64))
        entry_group = marks.cumsum(0)
        tables = [torch.empty(total, dtype=torch.int64) for _ in range(ROUNDS)]
        # A block at a time: below torch's threshold for intra-op parallelism, whose
        # start-up on busy cores costs far more than the work.
        for lo in range(0, total, _BLOCK):
            block = entry_group[lo : lo + _BLOCK]
            x = torch.arange(lo, lo + block.numel()) - offset.index_select(0, block)
            entry_source = group_source.index_select(0, block)
            one = torch.ones_like(entry_source)
            masks = (  # the left half's mask, by the round's parity
                (one << self.high.index_select(0, entry_source)) - 1,
                (one << self.low.index_select(0, entry_source)) - 1,
            )
            for r, (k, table) in enumerate(zip(keys, tables, strict=True)):
                table[lo : lo + block.numel()] = _mix(k.index_select(0, block), x) & masks[r % 2]
        return tables

    def table_length(self, source: int) -> int:
        """How many entries a round table of ``source`` holds."""
        return 1 << self._high[source]

    @staticmethod
    def _tabled_network(
        x: torch.Tensor,
        tables: list[torch.Tensor],
        base: torch.Tensor,
        low: torch.Tensor,
        low_mask: torch.Tensor,
    ) -> torch.Tensor:
        """The eight rounds, each ``F`` read from its table at ``base + right``."""
        left = x >> low
        right = x & low_mask
        index = torch.empty_like(x)
        for table in tables:
            torch.add(right, base, out=index)
            mixed = table.index_select(0, index)
            mixed ^= left
            left, right = right, mixed
        return (left << low) | right

    def _direct(
        self, source: torch.Tensor, passes: torch.Tensor, item: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`items`, each round's ``F`` computed from the element's key."""
        round_keys_ = self._pass_keys(source, passes)
        halves = self.high.index_select(0, source), self.low.index_select(0, source)
        size = self.sizes.index_select(0, source)
        result = self._network(item, round_keys_, *halves)
        # Cycle-walking: the values outside ``[0, size)`` step again, as their own subset
        # (measured faster than stepping the whole tensor while many walk).
        walking = (result >= size).nonzero()[:, 0]
        count = walking.numel()
        while count:
            if count <= _SCALAR_WALK:
                self._walk_scalar(result, walking, round_keys_, halves, size)
                break
            keys_now = [k.index_select(0, walking) for k in round_keys_]
            high_now, low_now = (h.index_select(0, walking) for h in halves)
            value = self._network(result.index_select(0, walking), keys_now, high_now, low_now)
            result.index_copy_(0, walking, value)
            walking = walking.index_select(
                0, (value >= size.index_select(0, walking)).nonzero()[:, 0]
            )
            count = walking.numel()
        return result

    @staticmethod
    def _walk_scalar(
        result: torch.Tensor,
        walking: torch.Tensor,
        keys: list[torch.Tensor],
        halves: tuple[torch.Tensor, torch.Tensor],
        size: torch.Tensor,
    ) -> None:
        """The last steps of the cycle walk of a few elements (``walking``, indices into
        ``result``) in Python integers, written back into ``result``: the same rounds as
        :meth:`_network` (the round function gives the same values on ints), without
        a dozen tensor operations per step for a handful of values."""
        columns = [result, size, *halves, *keys]
        rows = zip(*(c.index_select(0, walking).tolist() for c in columns), strict=True)
        walked = []
        for value, bound, high, low, *element_keys in rows:
            masks = ((1 << high) - 1, (1 << low) - 1)
            while value >= bound:
                left, right = value >> low, value & masks[1]
                for r, key in enumerate(element_keys):
                    left, right = right, left ^ (_round_function(key, right) & masks[r % 2])
                value = (left << low) | right
            walked.append(value)
        result.index_copy_(0, walking, torch.tensor(walked, dtype=result.dtype))

    @staticmethod
    def _network(
        x: torch.Tensor, keys: list[torch.Tensor], high: torch.Tensor, low: torch.Tensor
    ) -> torch.Tensor:
        """The eight rounds on ``[0, 2**(high + low))``, per element widths and keys."""
        one = torch.ones_like(high)
        left_mask = (one << high) - 1
        right_mask = (one << low) - 1
        left = x >> low
        right = x & right_mask
        for key in keys:
            mixed = _mix(key, right) & left_mask
            left, right = right, left ^ mixed
            left_mask, right_mask = right_mask, left_mask
        return (left << low) | right


class _Tables:
    """Round tables of recently used ``(source, pass)`` groups, end to end, one tensor per
    round, with where each group begins. They hold at most :data:`TABLE_BUDGET` entries
    per round: past it, they start again from the groups asked for (a source's passes
    only move forward, so the groups dropped are mostly done)."""

    def __init__(self) -> None:
        self.where: dict[tuple[int, int], int] = {}
        self.tables: list[torch.Tensor] = []
        self.used = 0
        #: Groups a call asked for without their tables being built (see :meth:`offsets`).
        self.asked: set[tuple[int, int]] = set()

    def offsets(
        self, groups: list[tuple[int, int]], passes: Passes, elements: int
    ) -> list[int] | None:
        """Where each of ``groups`` begins in :attr:`tables`, building the missing ones;
        ``None`` when their tables alone would exceed the budget, or when the missing
        groups never asked for before would take more than :data:`_FIRST_ASK` entries per
        element of the call (``elements``): a call alone is cheaper evaluated directly
        than building tables it reads once (a sampler's first batch); they are built
        when a later call asks for them again."""
        missing = [g for g in groups if g not in self.where]
        if missing:
            length = sum(passes.table_length(d) for d, _ in missing)
            unasked = [g for g in missing if g not in self.asked]
            if sum(passes.table_length(d) for d, _ in unasked) > _FIRST_ASK * elements:
                if len(self.asked) + len(unasked) > _MAX_GROUPS:
                    self.asked.clear()
                self.asked.update(unasked)
                return None
            self.asked.difference_update(missing)
            if self.used + length > TABLE_BUDGET:
                self._keep(set(groups), passes)
                if self.used + length > TABLE_BUDGET:
                    self.where, self.used = {}, 0
                    missing = groups
                    length = sum(passes.table_length(d) for d, _ in missing)
                    if length > TABLE_BUDGET:
                        return None  # more than the budget for this call alone
            capacity = self.tables[0].numel() if self.tables else 0
            if self.used + length > capacity:
                grown = min(max(2 * capacity, 2 * (self.used + length), 1 << 12), TABLE_BUDGET)
                fresh = [torch.empty(grown, dtype=passes._dtype) for _ in range(ROUNDS)]
                for old, new in zip(self.tables, fresh, strict=False):
                    new[: self.used] = old[: self.used]
                self.tables = fresh
            built = passes.build_tables(missing)
            for table, new in zip(self.tables, built, strict=True):
                table[self.used : self.used + length] = new
            for d, q in missing:
                self.where[d, q] = self.used
                self.used += passes.table_length(d)
        return [self.where[g] for g in groups]

    def _keep(self, groups: set[tuple[int, int]], passes: Passes) -> None:
        """Drop every group but ``groups``, moving the kept ones to the front."""
        kept = [(g, at) for g, at in self.where.items() if g in groups]
        if not kept:
            self.where, self.used = {}, 0
            return
        entries = [passes.table_length(d) for (d, _), _ in kept]
        moved = [torch.empty_like(table) for table in self.tables]
        used = 0
        for (_, at), n in zip(kept, entries, strict=True):
            for old, new in zip(self.tables, moved, strict=True):
                new[used : used + n] = old[at : at + n]
            used += n
        self.tables = moved
        self.where, self.used = {}, 0
        for ((d, q), _), n in zip(kept, entries, strict=True):
            self.where[d, q] = self.used
            self.used += n


def drawn_items(
    passes: Passes,
    sizes: torch.Tensor,
    shuffle: bool,
    source: torch.Tensor,
    drawn: torch.Tensor,
) -> torch.Tensor:
    """The index within its source of each ``source``'s ``drawn``-th draw (over all its
    passes: draw ``j`` is item ``j mod n_d`` of pass ``j // n_d``; ``sizes`` the sources'
    sizes as a tensor), evaluated a block at a time; without ``shuffle`` the item itself."""
    pass_number, item = torch.empty_like(drawn), torch.empty_like(drawn)
    for lo in range(0, drawn.numel(), _BLOCK):
        block_sizes = sizes.index_select(0, source[lo : lo + _BLOCK])
        torch.div(
            drawn[lo : lo + _BLOCK],
            block_sizes,
            rounding_mode="floor",
            out=pass_number[lo : lo + _BLOCK],
        )
        torch.sub(
            drawn[lo : lo + _BLOCK],
            pass_number[lo : lo + _BLOCK] * block_sizes,
            out=item[lo : lo + _BLOCK],
        )
    if not shuffle:
        return item
    return passes.items(source, pass_number, item)
