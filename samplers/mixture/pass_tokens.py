"""Each source's tokens over its passes, and their inverse, for the merge by tokens.

Guarantee: :meth:`PassTokens.tokens` is ``T_d(y)``, the lengths of source ``d``'s first
``y`` draws summed exactly (draw ``j`` is item ``j mod n_d`` of pass ``j // n_d``, as
:func:`~samplers.mixture.passes.drawn_items` reads it), and :meth:`PassTokens.below` the
number of draws that start before a number of tokens, its inverse; both exact integers,
the same on every rank.

How: a pass's tokens ``S_d`` are known, so ``T_d(y) = (y // n_d) * S_d + P(y mod n_d)``,
with ``P`` the prefix sums of the lengths of pass ``y // n_d`` in pass order: only the
pass ``y`` is in is read. Its running sums are kept every :data:`BLOCK` items
(``n_d / BLOCK`` integers per pass, for the latest :data:`_CACHED_PASSES` passes), and the
lengths of the latest :data:`_CACHED_BLOCKS` blocks read. Sums still missing are read in
calls of up to :data:`_BULK` blocks (a call to shuffle a pass's items costs several
times as much per item for one block as for many; its last :data:`_KEPT` blocks are kept
with the others), and :meth:`PassTokens.below` reads on
from the sums it has to about where the tokens it looks for are, by the pass's mean
length, then again from what it has read, with a margin that doubles.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from samplers.mixture.passes import Passes, drawn_items

__all__ = ["BLOCK", "PassTokens"]

#: Items of a pass read together for a position (and the spacing of the running sums).
BLOCK = 1 << 12
#: Passes whose running sums are kept (the most recently read).
_CACHED_PASSES = 256
#: Blocks of lengths kept (the most recently read).
_CACHED_BLOCKS = 512
#: Blocks whose running sums are read in one call at most.
_BULK = 64
#: The last blocks of such a call kept with the blocks read one at a time.
_KEPT = 3


@dataclass
class PassTokens:
    """The tokens of the passes of sources of ``sizes`` over ``passes``: ``read`` gives
    the lengths at ``ConcatDataset`` indices, ``totals`` each source's tokens in a pass
    (see the module). Not thread-safe: its merge reads it under its lock."""

    read: Callable[[torch.Tensor], torch.Tensor]
    sizes: tuple[int, ...]
    offsets: list[int]
    totals: list[int]
    passes: Passes
    shuffle: bool
    size_tensor: torch.Tensor = field(init=False)
    #: (source, pass) -> the pass's running sums before each block read so far.
    sums: OrderedDict[tuple[int, int], list[int]] = field(default_factory=OrderedDict)
    #: (source, pass, block) -> its lengths.
    blocks: OrderedDict[tuple[int, int, int], torch.Tensor] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self.size_tensor = torch.tensor(self.sizes, dtype=torch.int64)

    def lengths(self, d: int, q: int, low: int, high: int) -> torch.Tensor:
        """The lengths of items ``[low, high)`` of pass ``q`` of ``d``, in pass order."""
        items = torch.arange(low, high, dtype=torch.int64)
        drawn = items + q * self.sizes[d]
        source = torch.full_like(drawn, d)
        within = drawn_items(self.passes, self.size_tensor, self.shuffle, source, drawn)
        return self.read(within + self.offsets[d]).to(torch.int64)

    def block(self, d: int, q: int, b: int) -> torch.Tensor:
        """The lengths of items ``[b * BLOCK, (b + 1) * BLOCK)`` of pass ``q`` of ``d``."""
        key = (d, q, b)
        found = self.blocks.get(key)
        if found is not None:
            self.blocks.move_to_end(key)
            return found
        found = self.lengths(d, q, b * BLOCK, min((b + 1) * BLOCK, self.sizes[d]))
        self._keep(key, found)
        return found

    def _keep(self, key: tuple[int, int, int], lengths: torch.Tensor) -> None:
        self.blocks[key] = lengths
        self.blocks.move_to_end(key)
        if len(self.blocks) > _CACHED_BLOCKS:
            self.blocks.popitem(last=False)

    def running_sums(self, d: int, q: int, upto: int) -> list[int]:
        """The running sums of pass ``q`` of ``d`` before each block, at least through
        block ``upto`` (all of them: ``upto`` past the last block)."""
        key = (d, q)
        sums = self.sums.setdefault(key, [0])
        self.sums.move_to_end(key)
        if len(self.sums) > _CACHED_PASSES:
            self.sums.popitem(last=False)
        n = self.sizes[d]
        end = min(upto, -(-n // BLOCK))
        while len(sums) <= end:
            b = len(sums) - 1
            if end - b == 1:  # one block: kept, for the reads inside it
                sums.append(sums[-1] + int(self.block(d, q, b).sum()))
                continue
            stop = min(end, b + _BULK)
            read = self.lengths(d, q, b * BLOCK, min(stop * BLOCK, n))
            padded = torch.zeros((stop - b) * BLOCK, dtype=torch.int64)
            padded[: read.numel()] = read
            rows = padded.view(-1, BLOCK)
            each = rows.sum(1).tolist()
            sums += itertools.accumulate(each, initial=sums[-1])
            del sums[-len(each) - 1]  # the initial value, already there
            # The last blocks read, where the place looked for usually is, are kept.
            for k in range(max(b, stop - _KEPT), stop):
                self._keep((d, q, k), rows[k - b, : min(BLOCK, n - k * BLOCK)].clone())
        return sums

    def tokens(self, d: int, y: int) -> int:
        """``T_d(y)``: the tokens of source ``d``'s first ``y`` draws."""
        if y == 0:
            return 0
        q, i = divmod(y, self.sizes[d])
        b, r = divmod(i, BLOCK)
        # Through block b when it is read inside: a call of many blocks keeps it.
        before = self.running_sums(d, q, b + 1 if r else b)[b]
        inside = int(self.block(d, q, b)[:r].sum()) if r else 0
        return q * self.totals[d] + before + inside

    def below(self, d: int, value: int) -> int:
        """How many of ``d``'s draws start before ``value`` tokens (``T_d(y) < value``)."""
        if value <= 0:
            return 0
        n, total = self.sizes[d], self.totals[d]
        q = (value - 1) // total
        room = value - q * total  # 1 <= room <= total: the pass ends at or after it
        last = -(-n // BLOCK)
        sums = self.running_sums(d, q, 0)
        if len(sums) <= last and sums[-1] < room:  # read on to about where room is
            sums = self.running_sums(d, q, room * last // total + 2)
        spare = 1
        while len(sums) <= last and sums[-1] < room:  # short: estimate again from here
            read = len(sums) - 1
            mean = max(sums[-1] // max(read, 1), 1)  # tokens a block, so far
            sums = self.running_sums(d, q, read + -(-(room - sums[-1]) // mean) + spare)
            spare *= 2
        b = min(bisect.bisect_left(sums, room), last) - 1  # the last block starting below
        lengths = self.block(d, q, b)
        starts = lengths.cumsum(0) - lengths + sums[b]
        inside = int(torch.searchsorted(starts, torch.tensor([room]), side="left")[0])
        return q * n + b * BLOCK + inside
