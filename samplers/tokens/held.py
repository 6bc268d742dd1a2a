"""The lengths a token sampler plans from: checked at once, copied when first needed.

A sampler must not see its lengths change under it, so it plans from its own copy. But
copying 10**8 lengths takes longer than planning the first batch (the fresh pages cost
as much as the copy), and the first chunk of an epoch needs only a few thousand of them.
:class:`HeldLengths` therefore checks the caller's lengths in one pass when the sampler
is built (no negative one; the largest and the exact sum, which fix the default window,
and each part's sum when the lengths come in parts), reads the first chunk's lengths
from the caller's tensor, and makes the copy when it is next needed: planning another
chunk (a one-chunk epoch copies at once), the length digest of a state, a pickle, or
anything else that asks for :meth:`HeldLengths.owned`. The copy is checked against what
was planned before it, and against each part's sum when the lengths come in parts
(``parts=``: the packed mixture's sources, whose sums turn its token weights into draw
rates). :func:`length_sum` and :func:`length_digest` read lengths a chunk at a time (the
exact sum; a digest of them in order).
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch

from samplers.optional import numpy

#: Lengths summed or digested at a time (an int64 cast of a chunk, not of them all).
_SUM_CHUNK = 1 << 20
#: Values below this sum in int64 :data:`_SUM_CHUNK` at a time without overflow.
_DIRECT_LIMIT = 2**63 // _SUM_CHUNK

__all__ = ["SCAN_SAMPLES", "HeldLengths", "copy_dtype", "length_digest", "length_sum"]

#: The check reads the lengths this many at a time (so that the sum reads them from the
#: cache, right after the maximum did).
SCAN_SAMPLES = 1 << 15
#: Lengths of these dtypes are checked by numpy when installed (reading them unsigned,
#: a negative length is above every valid one: one maximum checks both bounds).
_NUMPY_READS = (torch.int32, torch.int64)
#: The unsigned numpy dtype of each of their sizes.
_UNSIGNED_NAMES = {4: "uint32", 8: "uint64"}
#: Values below this sum in int64 :data:`SCAN_SAMPLES` at a time without overflow.
_SPLIT_LIMIT = 2**47
#: Lengths below this are held in int16 (half the memory a random read of them touches,
#: which is most of its time); below :data:`_INT32_LIMIT` in int32; else in int64.
_INT16_LIMIT = 2**15
#: Lengths below this are held in int32 (or int16); a larger one makes the copy int64.
_INT32_LIMIT = 2**31


class HeldLengths:
    """A caller's lengths (a 1-D CPU integer tensor), checked, and the copy planned from.

    Guarantee: :meth:`owned` is a contiguous copy, in the smallest of int16, int32 and
    int64 that holds the longest length, that later changes to the caller's tensor never
    reach (:meth:`widened` is a copy of it in int32 at least, for arithmetic on it).
    Before the copy exists, :meth:`read` gives the lengths at the first chunk's samples
    from the caller's tensor itself, once; every other read is the copy's. The copy is
    refused (``RuntimeError``) unless it agrees with everything planned before it: the
    sum and the largest length checked when the sampler was built (they fix the default
    window) and the values that first read returned. So a change the caller makes
    before the copy either is refused or reaches every plan alike (the copy holds it, and
    the length digest that states carry is the copy's). The copy is made at most once
    (under a lock); pickling or copying a :class:`HeldLengths` makes it first.

    Lengths of another dtype than int32 or int64, and tensors that cannot be read
    later as they are (inference tensors), are copied at once.
    """

    def __init__(self, given: torch.Tensor, *, parts: tuple[int, ...] = ()) -> None:
        #: The caller's tensor, until the copy is made.
        self.given: torch.Tensor | None = given
        self.size = given.numel()
        #: Where parts of the lengths end (e.g. a mixture's sources).
        self.parts = parts
        #: The largest length (0 for no lengths), the exact sum and each part's exact sum,
        #: read in one pass now; the copy is refused unless it has the same.
        self.longest, self.total, self.part_totals = _scan(given, parts)
        #: The copy's dtype.
        self.dtype = copy_dtype(self.longest)
        self._copy: torch.Tensor | None = None
        # The indices and values of the one read from ``given`` (checked against the copy).
        self._read: tuple[torch.Tensor, torch.Tensor] | None = None
        # How many counted reads came from ``given`` (one at most).
        self._counted = 0
        self._lock = threading.Lock()
        if given.dtype not in _NUMPY_READS or given.is_inference():
            self.owned()

    @classmethod
    def copied(cls, given: torch.Tensor) -> HeldLengths:
        """Checked and copied at once."""
        held = cls(given)
        held.owned()
        return held

    @property
    def current(self) -> torch.Tensor:
        """The copy once made, else the caller's tensor (for its size; planning reads
        through :meth:`read` and :meth:`owned`)."""
        given = self.given  # read first: the copy is set before ``given`` is dropped
        copy = self._copy
        if copy is not None:
            return copy
        assert given is not None
        return given

    def read(self, indices: torch.Tensor, *, counted: bool = True) -> torch.Tensor:
        """The lengths at ``indices`` (int32 or int64), in :attr:`dtype`: from the caller's
        tensor the first time, when the copy does not exist yet; else from the copy. A
        read not ``counted`` (a mixture's schedule reading ahead of the plan) comes from
        the caller's tensor whenever the copy does not exist yet, and is checked against
        it as the first read is.

        A length read from the caller's tensor that is negative or longer than the
        longest checked when the sampler was built is refused (``RuntimeError``), as the
        copy would be: planned from, it could be wrapped by :attr:`dtype`."""
        with self._lock:
            given = self.given
            if self._copy is None and given is not None and not (counted and self._counted):
                read = given.index_select(0, indices)
                self._check_read(indices, read)
                values = read.to(self.dtype)
                before = self._read
                self._read = (
                    (indices, values)
                    if before is None
                    else (torch.cat([before[0], indices]), torch.cat([before[1], values]))
                )
                self._counted += counted
                return values
        return self.owned().index_select(0, indices)

    def peek(self, indices: torch.Tensor) -> torch.Tensor:
        """:meth:`read`, not counted."""
        return self.read(indices, counted=False)

    def _check_read(self, indices: torch.Tensor, read: torch.Tensor) -> None:
        """Refuse lengths read from the caller's tensor that the sampler was not built
        from: a negative one, or one longer than the longest then."""
        if read.numel() == 0:
            return
        low, high = (int(bound) for bound in torch.aminmax(read))
        if low >= 0 and high <= self.longest:
            return
        where = int(torch.argmin(read) if low < 0 else torch.argmax(read))
        why = "negative" if low < 0 else f"longer than the longest then ({self.longest})"
        raise RuntimeError(
            "lengths changed after the sampler was built (before it made its own copy): "
            f"lengths[{int(indices[where])}] = {int(read[where])} is {why}; build the "
            "sampler again from the new lengths"
        )

    def owned(self) -> torch.Tensor:
        """The copy (made now if it does not exist yet)."""
        with self._lock:
            if self._copy is None:
                assert self.given is not None
                self._copy = self._copied(self.given)
                self.given, self._read = None, None
            return self._copy

    def widened(self) -> torch.Tensor:
        """A new copy of :meth:`owned`, in int32 if it is int16 (a tensor to compute with:
        int16 arithmetic wraps past 32767, and torch compares an int16 tensor with a
        larger Python int as if it had wrapped it)."""
        copy = self.owned()
        return copy.to(torch.int32 if copy.dtype == torch.int16 else copy.dtype, copy=True)

    def _copied(self, given: torch.Tensor) -> torch.Tensor:
        copy = torch.empty(self.size, dtype=self.dtype)
        top, total = 0, 0
        sums = [0] * (len(self.parts) + 1)
        # Each piece is checked as the caller's values (before the cast, so a value the
        # copy's dtype would wrap is seen), right before copying it (from the cache).
        into: Any = copy.numpy() if _numpy_reads(given) else copy
        source: Any = given.numpy() if _numpy_reads(given) else given
        for lo, hi, part in _pieces(self.size, self.parts):
            piece = source[lo:hi]
            piece_top, piece_total = _part_stats(piece)
            top, total = max(top, piece_top), total + piece_total
            sums[part] += piece_total
            into[lo:hi] = piece
        if (total, top) != (self.total, self.longest):
            low = int(given.min())
            change = (
                f"lengths[{int(given.argmin())}] = {low} is negative"
                if low < 0
                else f"they summed to {self.total} with the longest {self.longest}, now "
                f"{length_sum(given)} and {int(given.max())}"
            )
            raise RuntimeError(
                f"lengths changed after the sampler was built (before it made its own copy): "
                f"{change}; build the sampler again from the new lengths"
            )
        changed = [d for d, total in enumerate(self.part_totals) if sums[d] != total]
        if changed:
            part = changed[0]
            low = self.parts[part - 1] if part else 0
            raise RuntimeError(
                f"lengths changed after the sampler was built (before it made its own copy): "
                f"the lengths of part {part} (samples {low} to {self.parts[part]}) "
                f"summed to {self.part_totals[part]}, now {sums[part]}; build the sampler "
                "again from the new lengths"
            )
        if self._read is not None:
            indices, values = self._read
            now = copy.index_select(0, indices)
            moved = torch.nonzero(now != values).reshape(-1)
            if moved.numel():
                where = int(indices[moved[0]])
                raise RuntimeError(
                    f"lengths changed after the sampler was built (before it made its own "
                    f"copy), under samples it had already planned: lengths[{where}] was "
                    f"{int(values[moved[0]])}, now {int(now[moved[0]])}; build the sampler "
                    "again from the new lengths"
                )
        return copy

    def __getstate__(self) -> dict[str, Any]:
        copy = self.owned()
        state = dict(self.__dict__)
        state.update(given=None, _copy=copy)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def copy_dtype(longest: int) -> torch.dtype:
    """The dtype of the copy of lengths whose longest is ``longest``: the smallest of
    int16, int32 and int64 that holds it."""
    if longest < _INT16_LIMIT:
        return torch.int16
    return torch.int32 if longest < _INT32_LIMIT else torch.int64


def _numpy_reads(values: torch.Tensor) -> bool:
    """Whether numpy checks and copies ``values`` (int32 or int64, contiguous)."""
    return numpy is not None and values.dtype in _NUMPY_READS and values.is_contiguous()


def _part_stats(part: Any) -> tuple[int, int]:
    """The largest of a part of the lengths (a negative one makes it ``2**63`` or more)
    and its exact sum. A numpy part (int32 or int64) is read unsigned: one maximum checks
    both bounds (a negative int32 length reads as ``2**31`` or more). Past ``2**47`` the
    sum is taken in two 32-bit halves, so no sum of :data:`SCAN_SAMPLES` overflows."""
    wide: Any
    if isinstance(part, torch.Tensor):
        part, wide = part.to(torch.int64), torch.int64
        low, top = (int(bound) for bound in torch.aminmax(part)) if part.numel() else (0, 0)
        top = 2**64 if low < 0 else top
    else:  # a numpy array: numpy is installed
        assert numpy is not None
        wide = numpy.int64
        top = int(part.view(_UNSIGNED_NAMES[part.dtype.itemsize]).max()) if part.size else 0
    if top < _SPLIT_LIMIT:
        return top, int(part.sum(dtype=wide))
    high, rest = part >> 32, part & 0xFFFFFFFF
    return top, (int(high.sum(dtype=wide)) << 32) + int(rest.sum(dtype=wide))


def _pieces(size: int, parts: tuple[int, ...]) -> Iterator[tuple[int, int, int]]:
    """The lengths ``[0, size)`` cut where each block of :data:`SCAN_SAMPLES` and each of
    ``parts`` ends (non-decreasing ends, at most ``size``), in order: ``(lo, hi, part)``
    for each piece, ``part`` its part's number (``len(parts)`` past the last part)."""
    part, count, lo = 0, len(parts), 0
    while lo < size:
        while part < count and parts[part] <= lo:
            part += 1
        hi = min(lo - lo % SCAN_SAMPLES + SCAN_SAMPLES, size)
        if part < count:
            hi = min(hi, parts[part])
        yield lo, hi, part
        lo = hi


def _scan(values: torch.Tensor, parts: tuple[int, ...] = ()) -> tuple[int, int, tuple[int, ...]]:
    """The largest of ``values`` (0 if empty), their exact sum and the exact sum of each
    of ``parts`` (``[0, parts[0])``, ``[parts[0], parts[1])``, ...), or a ``ValueError``
    naming a negative one: one pass, :data:`SCAN_SAMPLES` at a time, each block cut where
    a part ends (numpy reads int32 and int64 lengths; torch the rest)."""
    source: Any = values.numpy() if _numpy_reads(values) else values
    longest, total = 0, 0
    sums = [0] * (len(parts) + 1)
    for lo, hi, part in _pieces(values.numel(), parts):
        top, piece_total = _part_stats(source[lo:hi])
        if top >= 2**63 or (top >= _INT32_LIMIT and values.dtype == torch.int32):
            where = int(torch.argmin(values))
            raise ValueError(
                f"lengths must be at least 0, got lengths[{where}] = {int(values[where])}"
            )
        longest, total = max(longest, top), total + piece_total
        sums[part] += piece_total
    return longest, total, tuple(sums[: len(parts)])


def length_sum(lengths: torch.Tensor, *, longest: int | None = None) -> int:
    """The exact sum of ``lengths``, a chunk at a time: summing an int32 tensor into int64
    at once first casts all of it (8 bytes a sample). ``longest``, when the caller knows
    it, is the largest length.

    A chunk of :data:`_SUM_CHUNK` values below :data:`_DIRECT_LIMIT` sums in int64 without
    overflow; a chunk that may hold a larger one (int64 lengths, ``longest`` unknown or
    that large) is summed in two 32-bit halves, so the sum is exact for every int64 value.
    """
    step = _SUM_CHUNK
    direct = lengths.dtype != torch.int64 or (longest is not None and longest < _DIRECT_LIMIT)
    total = 0
    for start in range(0, lengths.numel(), step):
        chunk = lengths[start : start + step]
        if not direct and chunk.numel():
            low, top = (int(bound) for bound in torch.aminmax(chunk))
            if low < 0 or top >= _DIRECT_LIMIT:
                high, rest = chunk >> 32, chunk & 0xFFFFFFFF  # chunk == high * 2**32 + rest
                total += (int(high.sum()) << 32) + int(rest.sum())
                continue
        total += int(chunk.sum(dtype=torch.int64))
    return total


def length_digest(lengths: torch.Tensor) -> str:
    """A digest of ``lengths`` in order (BLAKE2b of their little-endian int64 bytes, a
    chunk at a time): the same on every rank and platform for the same lengths, different
    for another order of the same lengths."""
    digest = hashlib.blake2b(digest_size=16)
    step = _SUM_CHUNK
    for start in range(0, lengths.numel(), step):
        chunk = lengths[start : start + step].to(torch.int64).contiguous()
        if sys.byteorder != "little":
            chunk = chunk.view(torch.uint8).view(-1, 8).flip(1).contiguous()
        digest.update(ctypes.string_at(chunk.data_ptr(), chunk.numel() * chunk.element_size()))
    return digest.hexdigest()
