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
    "follow",
    "longest_first",
    "repeat",
]

#: Windows whose lengths are all at most this are sorted by a radix sort (16-bit keys).
RADIX_LONGEST = 2**16 - 1
#: With at least this many windows in a chunk, :func:`follow` follows their batch chains
#: together (a step costs about as much as a few dozen links followed in Python).
LOCKSTEP_WINDOWS = 8


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


def follow(after: torch.Tensor, count: int, window: int) -> torch.Tensor:
    """The chain of positions ``0, after[0], after[after[0]], ...`` below ``count``
    (int64), where ``after[i] > i`` never passes the end of ``i``'s window (windows of
    ``window`` positions from 0, the last one shorter): so the chain is every window's
    own chain from its first position, one window after the other.

    With numpy and at least :data:`LOCKSTEP_WINDOWS` windows, every window's chain is
    followed at once, one link of each per step (as many steps as the longest chain has
    links, each a few numpy calls on one value per window); otherwise one Python step
    per link, reading ``after`` through a memoryview (a Python int per read, nothing
    converted in bulk), or a list without numpy.
    """
    windows = ceil_div(count, window)
    if numpy is not None and windows >= LOCKSTEP_WINDOWS:
        following = after.numpy()
        heads = numpy.arange(0, count, window, dtype=following.dtype)
        ends = numpy.minimum(heads + window, count)
        found = []
        while heads.size:
            found.append(heads)
            heads = following[heads]
            going = heads < ends
            if not going.all():
                heads, ends = heads[going], ends[going]
        chain = numpy.concatenate(found)
        chain.sort()
        return torch.from_numpy(chain.astype(numpy.int64, copy=False))
    links = after.tolist() if numpy is None else memoryview(after.contiguous().numpy().data)
    chained, position = [], 0
    while position < count:
        chained.append(position)
        position = links[position]
    return torch.tensor(chained, dtype=torch.int64)


def longest_first(lengths: torch.Tensor, rows: int, window: int, count: int) -> torch.Tensor:
    """Where each window's samples go, longest first: ``rows x window`` columns (int64),
    row ``r``'s column ``j`` the place in window ``r`` of its ``j``-th longest sample,
    ties in window order; the last row's missing cells (past ``count``) come last.

    Lengths up to :data:`RADIX_LONGEST` are sorted as 16-bit keys (numpy's stable sort of
    16-bit integers is a radix sort, several times faster than a comparison sort);
    longer ones, or without numpy, by torch's stable sort (the same order).
    """
    if numpy is not None and count and int(lengths.max()) <= RADIX_LONGEST:
        keys = numpy.full(rows * window, RADIX_LONGEST, dtype=numpy.uint16)
        # Longest first = smallest key first; a missing cell gets the largest key, and
        # comes after any real sample of length 0 (stable: it is later in its row).
        numpy.subtract(RADIX_LONGEST, lengths.numpy(), out=keys[:count], casting="unsafe")
        found = numpy.argsort(keys.reshape(rows, window), axis=1, kind="stable")
        return torch.from_numpy(found.astype(numpy.int64, copy=False)).view(-1)
    grid = torch.full((rows * window,), -1, dtype=lengths.dtype)
    grid[:count] = lengths
    _, column = torch.sort(grid.view(rows, window), dim=1, descending=True, stable=True)
    return column.view(-1)


def by_cost_level(
    costs: torch.Tensor,
    starts: torch.Tensor,
    sizes: torch.Tensor,
    column: torch.Tensor,
    first_window: int,
    window: int,
    budget: int,
    levels: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's batches put in order of cost level (``levels`` levels of ``budget /
    levels`` each, over-budget batches above them) within each window, rising in even
    windows (counted from the epoch's start, ``first_window`` being the chunk's first)
    and falling in odd ones; ties by where the batch's first sample was in the
    permutation (a batch's first sample is its own: the keys differ).

    Returns, in the new order, each batch's shift (its old start minus its new one), its
    size and its new start (local). The same arithmetic in numpy when installed (a few
    thousand batches a chunk, where each torch call costs more than its work) or torch.
    """
    xp: Any = torch if numpy is None else numpy
    arrays = [t if numpy is None else t.numpy() for t in (costs, starts, sizes, column)]
    costs_, starts_, sizes_, column_ = arrays
    batch_window = starts_ // window
    level = xp.where(costs_ > budget, levels + 1, costs_ * levels // max(budget, 1))
    odd = (batch_window + first_window) % 2 == 1
    level = xp.where(odd, levels + 1 - level, level)
    sequence = xp.argsort((batch_window * (levels + 2) + level) * window + column_[starts_])
    new_sizes = sizes_[sequence]
    new_starts = xp.cumsum(new_sizes, 0) - new_sizes
    found = (starts_[sequence] - new_starts, new_sizes, new_starts)
    return tuple(torch.as_tensor(value) for value in found)  # type: ignore[return-value]
