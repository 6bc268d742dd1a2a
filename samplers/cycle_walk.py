"""Cycle-walking: a permutation of ``[0, 2**n)`` restricted to ``[0, N)``, on tensors.

A value the network maps to ``N`` or above is mapped again, and again, until it lands
below ``N`` (:mod:`samplers.feistel`'s specification). :func:`walk` finishes the walks of
a tensor of values already mapped once; :func:`walked_domain` walks every value of a
small domain at once. Both give exactly what mapping each value in Python would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from samplers.optional import numpy

__all__ = ["walk", "walked_domain"]

#: Tensors are evaluated in blocks of this many elements: below torch's threshold for
#: intra-op parallelism (32768 elements), where each of the network's elementwise
#: operations (thirteen a round computing ``F``, two reading it from tables) would open a
#: parallel region (on two busy cores that made a 65536-position chunk 50 times slower),
#: and small enough that a block's temporaries stay in cache.
_BLOCK = (1 << 15) - 1
#: Values still cycle-walking are finished in Python once at most this many remain: a
#: tensor step on a few values costs about as much as seven single-value steps in Python
#: (26 us against 3.8 us on one thread), and each pass also finds the values still walking.
_PYTHON_TAIL = 8


def blockwise(length: int, part: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """``part(lo, hi)`` over ``[0, length)`` in ranges of at most ``_BLOCK``, concatenated."""
    return torch.cat([part(lo, min(lo + _BLOCK, length)) for lo in range(0, length, _BLOCK)])


def _stepped(step: Callable[[Any], Any], values: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """``step`` applied to ``values[lo:hi]``."""
    result: torch.Tensor = step(values[lo:hi])
    return result


def walk(result: torch.Tensor, size: int, step: Callable[[Any], Any]) -> None:
    """Apply ``step`` again, in place, to the values of ``result`` still ``>= size``,
    until none is (``step`` maps a tensor, in ``result``'s dtype, or a Python int).

    The values still walking are gathered from all blocks and stepped together,
    ``_BLOCK`` at a time, so each pass costs a few large steps rather than one small step
    per block; once at most :data:`_PYTHON_TAIL` remain, they are finished in Python.
    Finding and gathering them (most of a walk's cost besides ``step``) is numpy's
    ``flatnonzero`` and integer indexing when numpy is installed, about five times faster
    than torch's ``nonzero`` and ``masked_select`` on these sizes; otherwise index_select
    / index_copy_ / masked_select (advanced indexing, ``result[pending]``, opens a
    parallel region even on small tensors).
    """
    if numpy is not None:
        values = result.numpy()
        pending = numpy.flatnonzero(values >= size)
        walking = values[pending]
        while pending.size > _PYTHON_TAIL:
            stepped = blockwise(
                walking.size, functools.partial(_stepped, step, torch.from_numpy(walking))
            ).numpy()
            values[pending] = stepped
            still = numpy.flatnonzero(stepped >= size)
            pending, walking = pending[still], stepped[still]
        tail, slots = walking.tolist(), torch.from_numpy(pending)
    else:
        slots = torch.cat(
            [
                (result[start : start + _BLOCK] >= size).nonzero().reshape(-1) + start
                for start in range(0, result.numel(), _BLOCK)
            ]
            or [torch.empty(0, dtype=torch.int64)]
        )
        while slots.numel() > _PYTHON_TAIL:
            still = []
            for start in range(0, slots.numel(), _BLOCK):
                some = slots[start : start + _BLOCK]
                stepped = step(result.index_select(0, some))
                result.index_copy_(0, some, stepped)
                still.append(some.masked_select(stepped >= size))
            slots = torch.cat(still)
        tail = result.index_select(0, slots).tolist()
    if tail:
        walked = []
        for value in tail:
            value = step(value)
            while value >= size:
                value = step(value)
            walked.append(value)
        result.index_copy_(0, slots, torch.tensor(walked, dtype=result.dtype))


def walked_domain(
    size: int, bits: int, dtype: torch.dtype, network: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """The cycle-walked ``network`` at every value of ``[0, size)``, in ``dtype``.

    The network runs once over the whole domain ``[0, 2**bits)`` (its *image*); a walk
    that reaches ``v >= size`` goes on to ``image[v]``, so the end of every walk through
    ``[size, 2**bits)`` is found by stepping through the image, with no network
    evaluation; each value then looks its end up. Values above ``size`` that lie on a
    cycle that never goes below ``size`` are no walk's continuation: they are left as
    they are once stepping no longer resolves any value.
    """
    domain = 1 << bits
    image = torch.empty(domain, dtype=dtype)
    for lo in range(0, domain, _BLOCK):
        hi = min(lo + _BLOCK, domain)
        image[lo:hi] = network(torch.arange(lo, hi, dtype=dtype))
    # lookup[v]: where a walk that reaches v ends: v itself below size; above, found by
    # stepping each pending value through the image.
    lookup = torch.empty(domain, dtype=dtype)
    torch.arange(size, dtype=dtype, out=lookup[:size])
    ends = lookup[size:]
    ends.copy_(image[size:])
    pending = blockwise(
        ends.numel(), lambda lo, hi: (ends[lo:hi] >= size).nonzero().reshape(-1) + lo
    )
    while pending.numel():
        stepped = image.index_select(0, ends.index_select(0, pending))
        ends.index_copy_(0, pending, stepped)
        still = pending.masked_select(stepped >= size)
        if still.numel() == pending.numel():
            break  # only cycles above size are left
        pending = still
    walked = image[:size]
    for lo in range(0, size, _BLOCK):
        hi = min(lo + _BLOCK, size)
        walked[lo:hi] = lookup.index_select(0, walked[lo:hi])
    return walked
