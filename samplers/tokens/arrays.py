"""The array arithmetic the token order runs per chunk: numpy's when installed, torch's
otherwise, with the same results.

Guarantee: every function here gives the same values with or without numpy (the sampler
needs only torch; numpy, when installed, is faster on a chunk's small arrays and sorts
16-bit keys by a radix sort). ``tests/test_tokens.py`` plans with and without it, and in
an interpreter where numpy cannot be imported.
"""

from __future__ import annotations

from typing import Any

import torch

from samplers.optional import numpy
from samplers.plan import ceil_div

__all__ = [
    "LOCKSTEP_WINDOWS",
    "RADIX_LONGEST",
    "by_cost_level",
    "capped_sums",
    "follow",
    "level_thresholds",
    "longest_first",
    "reach_within",
    "repeat",
]

#: Windows whose lengths are all at most this are sorted by a radix sort (16-bit keys).
RADIX_LONGEST = 2**16 - 1
#: With at least this many windows in a chunk, :func:`follow` follows their batch chains
#: together (a step costs about as much as a few dozen links followed in Python).
LOCKSTEP_WINDOWS = 8
#: The two 31-bit limbs of :func:`reach_within`'s exact prefix sums.
_LIMB = 31
_LIMB_MASK = (1 << _LIMB) - 1


def reach_within(each: torch.Tensor, budget: int) -> torch.Tensor:
    """For each position ``i`` of ``each`` (non-negative int64 costs, each at most
    ``2**62``), the largest ``j`` (in ``[i, count]``) such that ``each[i:j]`` sums to at
    most ``budget`` (``0 <= budget < 2**62``), exactly, with no int64 overflow.

    Prefix sums in int64 when the whole chunk's sum is sure to fit (the common case, one
    ``searchsorted``); otherwise in two 31-bit limbs (each prefix sum ``P = H * 2**31 +
    L``, ``L < 2**31``), compared through a key that fits: ``H``'s rank among the
    distinct ``H`` (a dense rank, below the count) times ``2**31`` plus ``L``, which is
    ordered as ``P`` is. Costs above ``budget`` may be given as ``budget + 1`` (what
    :meth:`~samplers.tokens.cost.TokenCost.capped_costs` gives): a range holding one
    sums to more than ``budget`` either way.
    """
    count = each.numel()
    if count == 0:
        return torch.zeros(0, dtype=torch.int64)
    largest = int(each.max())
    if largest * count < 1 << 62:
        total = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(each, 0)])
        budget = min(budget, int(total[-1]) + 1)  # past the chunk's sum: no overflow
        return torch.searchsorted(total, total[:-1] + budget, right=True) - 1
    zero = torch.zeros(1, dtype=torch.int64)
    low = torch.cat([zero, torch.cumsum(each & _LIMB_MASK, 0)])
    high = torch.cat([zero, torch.cumsum(each >> _LIMB, 0)]) + (low >> _LIMB)
    low &= _LIMB_MASK
    # The targets P[i] + budget, for i in [0, count), in the same limbs.
    target_low = low[:-1] + (budget & _LIMB_MASK)
    target_high = high[:-1] + (budget >> _LIMB) + (target_low >> _LIMB)
    target_low &= _LIMB_MASK
    distinct = torch.unique_consecutive(high)  # high never decreases
    key = (torch.searchsorted(distinct, high) << _LIMB) | low
    rank = torch.searchsorted(distinct, target_high)
    found = distinct.index_select(0, rank.clamp(max=distinct.numel() - 1)) == target_high
    found &= rank < distinct.numel()
    # Present: every j of a lower rank, and of the same rank with L[j] <= the target's;
    # absent: every j of a lower rank (``rank`` is where the target's high would go).
    wanted = torch.where(found, (rank << _LIMB) | target_low, (rank << _LIMB) - 1)
    return torch.searchsorted(key, wanted, right=True) - 1


def capped_sums(each: torch.Tensor, starts: torch.Tensor, cap: int) -> torch.Tensor:
    """The sums of ``each`` (non-negative int64, each at most ``2**62``) over the
    consecutive ranges that begin at ``starts`` (the last ending at the end), each
    capped at ``cap`` (below ``2**62``), exactly and without int64 overflow: from prefix
    sums in two 31-bit limbs, as :func:`reach_within` keeps them."""
    if starts.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    zero = torch.zeros(1, dtype=torch.int64)
    low = torch.cat([zero, torch.cumsum(each & _LIMB_MASK, 0)])
    high = torch.cat([zero, torch.cumsum(each >> _LIMB, 0)]) + (low >> _LIMB)
    low &= _LIMB_MASK
    ends = torch.cat([starts[1:], torch.tensor([each.numel()], dtype=torch.int64)])
    high_part = high.index_select(0, ends) - high.index_select(0, starts)
    low_part = low.index_select(0, ends) - low.index_select(0, starts)
    # The low part is in (-2**31, 2**31): a high part clamped at 2**31 + 1 still sums to
    # more than 2**62 > cap, and below it the sum is exact (and fits int64).
    sums = (high_part.clamp(max=(1 << _LIMB) + 1) << _LIMB) + low_part
    return sums.clamp(max=cap)


def level_thresholds(budget: int, levels: int) -> list[int]:
    """The least cost of each level ``1 .. levels`` (``ceil(i * budget / levels)``), in
    Python integers: a cost ``c <= budget`` is at level ``floor(c * levels / budget)``,
    the number of thresholds at most ``c``, computed without multiplying ``c``."""
    return [-(-i * budget // levels) for i in range(1, levels + 1)]


def repeat(values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Each of ``values`` repeated ``counts`` times (non-negative), in order.

    ``numpy.repeat`` on the tensors' memory: ``torch.repeat_interleave``'s CPU kernel
    wakes the intra-op thread pool even for a handful of elements, which costs
    milliseconds per call on a busy machine, and takes twice as long as numpy's on one
    thread (a few thousand counts). Without numpy, ``torch.repeat_interleave``.
    """
    if numpy is None:
        return torch.repeat_interleave(values, counts)
    return torch.from_numpy(numpy.repeat(values.numpy(), counts.numpy()))


def follow(
    after: torch.Tensor, count: int, window: int, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Every window's chain of positions from its first one, one window after the other
    (int64): windows of ``window`` positions from 0 (the last one shorter, ending at
    ``count``), the chain of the window starting at ``w`` being ``w, after[w],
    after[after[w]], ...`` while below the window's end. ``after[i] > i``; a link that
    reaches or passes the window's end ends the window's chain (so the caller need not
    clamp ``after`` to the windows). With ``lengths``, ``after`` is a table of batch
    sizes by length instead (at least 1 each): the link from ``i`` is ``i +
    after[lengths[i]]``, read only at the chains' positions.

    With numpy and at least :data:`LOCKSTEP_WINDOWS` windows, every window's chain is
    followed at once, one link of each per step (as many steps as the longest chain has
    links, each a few numpy calls on one value per window); otherwise one Python step
    per link, reading ``after`` (and ``lengths``) through a memoryview (a Python int per
    read, nothing converted in bulk), or a list without numpy.
    """
    windows = ceil_div(count, window)
    if numpy is not None and windows >= LOCKSTEP_WINDOWS:
        following = after.numpy()
        sized = None if lengths is None else lengths.numpy()
        heads = numpy.arange(0, count, window, dtype=numpy.int64)
        ends = numpy.minimum(heads + window, count)
        found = []
        while heads.size:
            found.append(heads)
            heads = following[heads] if sized is None else heads + following[sized[heads]]
            going = heads < ends
            if not going.all():
                heads, ends = heads[going], ends[going]
        chain = numpy.concatenate(found)
        chain.sort()
        return torch.from_numpy(chain.astype(numpy.int64, copy=False))
    links, sizes = (_readable(values) for values in (after, lengths))
    chained = []
    for head in range(0, count, window):
        end, position = min(head + window, count), head
        while position < end:
            chained.append(position)
            position = links[position] if sizes is None else position + links[sizes[position]]
    return torch.tensor(chained, dtype=torch.int64)


def _readable(values: torch.Tensor | None) -> Any:
    """``values`` read one Python int at a time: a memoryview of them with numpy (nothing
    converted in bulk), else a list."""
    if values is None:
        return None
    return values.tolist() if numpy is None else memoryview(values.contiguous().numpy().data)


def longest_first(lengths: torch.Tensor, rows: int, window: int, count: int) -> torch.Tensor:
    """The ``count`` positions of ``lengths`` (int32 below ``2**31``, else int64), each
    window's longest first: the windows are ``rows`` runs of ``window`` positions (the
    last one shorter, ending at ``count``), each rearranged within itself, ties in
    position order.

    Lengths up to :data:`RADIX_LONGEST` are sorted as 16-bit keys (numpy's stable sort of
    16-bit integers is a radix sort, several times faster than a comparison sort);
    longer ones, or without numpy, by torch's stable sort (the same order).
    """
    dtype = torch.int32 if rows * window < 2**31 else torch.int64
    if numpy is not None and count and int(lengths.max()) <= RADIX_LONGEST:
        keys = numpy.empty(rows * window, dtype=numpy.uint16)
        # Longest first = smallest key first; a missing cell of the last window (past
        # ``count``) gets the largest key, and comes after any real sample of length 0
        # (stable: it is later in its row), so it is cut off at the end.
        keys[count:] = RADIX_LONGEST
        values = lengths.numpy()
        if values.dtype == numpy.int16:  # read unsigned (the lengths are not negative)
            values = values.view(numpy.uint16)
        numpy.subtract(RADIX_LONGEST, values, out=keys[:count], casting="unsafe")
        found = numpy.argsort(keys.reshape(rows, window), axis=1, kind="stable")
        # Each window's places made chunk positions, in the narrower dtype in one pass.
        positions = torch.empty(rows * window, dtype=dtype)
        offsets = numpy.arange(0, rows * window, window, dtype=found.dtype)[:, None]
        numpy.add(found, offsets, out=positions.numpy().reshape(rows, window), casting="unsafe")
        return positions[:count]
    grid = torch.full((rows * window,), -1, dtype=lengths.dtype)
    grid[:count] = lengths
    _, column = torch.sort(grid.view(rows, window), dim=1, descending=True, stable=True)
    column += torch.arange(0, rows * window, window)[:, None]
    return column.view(-1)[:count].to(dtype)


def by_cost_level(
    costs: torch.Tensor,
    starts: torch.Tensor,
    sizes: torch.Tensor,
    firsts: torch.Tensor,
    first_window: int,
    window: int,
    budget: int,
    levels: int,
    groups: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's batches put in order of cost level (``levels`` levels of ``budget /
    levels`` each, over-budget batches above them) within each window, rising in even
    windows (counted from the epoch's start, ``first_window`` being the chunk's first)
    and falling in odd ones; ties by where each batch's first sample was in its window
    of the permutation, ``firsts`` (a batch's first sample is its own: the keys differ).

    With ``groups`` (a phase per batch, or -1), each window's batches of phases keep the
    order they were cut in (a phase's before the next's); the batches at -1 keep the
    order above among themselves and are spread evenly between the others
    (:func:`_phased`).

    Returns, in the new order, each batch's shift (its old start minus its new one), its
    size and its new start (local). The same arithmetic in numpy when installed (a few
    thousand batches a chunk, where each torch call costs more than its work) or torch.
    """
    xp: Any = torch if numpy is None else numpy
    arrays = [t if numpy is None else t.numpy() for t in (costs, starts, sizes, firsts)]
    costs_, starts_, sizes_, firsts_ = arrays
    batch_window = starts_ // window
    if budget < 1 << 56:  # costs_ * levels fits int64 for every cost within the budget
        level = xp.where(costs_ > budget, levels + 1, costs_ * levels // max(budget, 1))
    else:  # the same levels, from thresholds: nothing multiplied
        thresholds = level_thresholds(budget, levels)
        bounds = torch.tensor(thresholds) if numpy is None else numpy.array(thresholds)
        level = xp.where(costs_ > budget, levels + 1, xp.searchsorted(bounds, costs_, side="right"))
    odd = (batch_window + first_window) % 2 == 1
    level = xp.where(odd, levels + 1 - level, level)
    sequence = xp.argsort((batch_window * (levels + 2) + level) * window + firsts_)
    if groups is not None:
        sequence = _phased(sequence, batch_window, groups)
    new_sizes = sizes_[sequence]
    new_starts = xp.cumsum(new_sizes, 0) - new_sizes
    found = (starts_[sequence] - new_starts, new_sizes, new_starts)
    shifts, sizes, starts = (torch.as_tensor(value) for value in found)
    return shifts, sizes, starts


def _phased(sequence: Any, batch_window: Any, groups: torch.Tensor) -> Any:
    """``sequence`` (batches by window, then level) rearranged within each window: the
    batches of phases (``groups >= 0``) in the order they were cut (their numbers: a
    phase's before the next's); the others (-1) in the order of ``sequence``; the two
    lists merged as if each were spread evenly over the window (the ``i``-th of ``n`` at
    ``(2i + 1) / 2n``, a phase's batch first on a tie). In torch (a few thousand batches),
    returned as given."""
    as_numpy = not isinstance(sequence, torch.Tensor)
    order = torch.as_tensor(sequence)
    window = torch.as_tensor(batch_window).index_select(0, order)
    group = groups.index_select(0, order)
    free = group < 0
    # Within each window: the free batches (in the order given), then the phases' as cut.
    key = window * (order.numel() + 1) + torch.where(free, 0, order + 1)
    moved = torch.argsort(key, stable=True)
    order, window, free = order[moved], window[moved], free[moved]
    # Each batch's rank in its window's list, and the other list's length there.
    count = order.numel()
    index = torch.arange(count)
    kind = window * 2 + (~free).to(torch.int64)
    begins = torch.ones(count, dtype=torch.bool)
    begins[1:] = kind[1:] != kind[:-1]
    rank = index - torch.cummax(torch.where(begins, index, 0), 0).values
    windows = int(window.max()) + 1
    frees = torch.zeros(windows, dtype=torch.int64).index_add_(0, window, free.to(torch.int64))
    fixed = torch.zeros(windows, dtype=torch.int64).index_add_(0, window, (~free).to(torch.int64))
    other = torch.where(free, fixed.index_select(0, window), frees.index_select(0, window))
    spread = (2 * rank + 1) * other * 2 + free.to(torch.int64)
    # By window, then spread, then rank: stable sorts by the last key first.
    keys = [rank, spread, window]
    for number in range(len(keys)):
        moved = torch.argsort(keys[number], stable=True)
        order, keys = order[moved], [key[moved] for key in keys]
    return order.numpy() if as_numpy else order
