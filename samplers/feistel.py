"""A keyed permutation of ``[0, N)`` that needs O(1) memory: any position, any order.

:class:`FeistelPermutation` maps a position of the epoch order to a dataset index without
materialising the order: ``perm(positions)`` evaluates a tensor of positions at once
(vectorised in torch), ``perm.at(position)`` one position in pure Python, and
``perm.inverse(indices)`` the position that holds each index. A rank therefore computes
only its own share of an epoch, in chunks, and can start at any position.

The algorithm is integer arithmetic only and is specified below, so the same
``(size, seed, epoch)`` gives the same order on every platform and torch version. The
torch path never relies on integer overflow: every intermediate value stays in
``[0, 2**63)``.

Specification
=============

Notation: ``^`` is bitwise xor, ``&`` bitwise and, ``>>``/``<<`` shifts of non-negative
integers, ``mask(w) = 2**w - 1``.

Domain. Let ``N = size`` with ``0 <= N <= 2**63``. For ``N <= 1`` the permutation is the
identity. Otherwise let ``n = (N - 1).bit_length()`` (so ``2**(n-1) < N <= 2**n``), and
split ``n`` bits into a high half of ``a = n - n // 2`` bits and a low half of
``b = n // 2`` bits (``a = b + 1`` when ``n`` is odd; ``a <= 32``, ``b <= 31``).

Key schedule. ``s = seed mod 2**64`` and ``e = epoch mod 2**64`` (so ``-1`` means
``2**64 - 1``). With ``GAMMA = 0x9E3779B97F4A7C15`` and the 64-bit mixer::

    mix64(z):  z ^= z >> 30;  z = z * 0xBF58476D1CE4E5B9 mod 2**64
               z ^= z >> 27;  z = z * 0x94D049BB133111EB mod 2**64
               z ^= z >> 31;  return z

the four key words are::

    w0 = mix64((s + GAMMA) mod 2**64)
    w1 = mix64(((w0 ^ e) + GAMMA) mod 2**64)
    w2 = mix64((w1 + GAMMA) mod 2**64)
    w3 = mix64((w2 + GAMMA) mod 2**64)

and the round keys are the 32-bit halves, low half first:
``K[r] = (w[r // 2] >> (32 * (r % 2))) & mask(32)`` for ``r = 0 .. 7``. ``mix64`` and
adding ``GAMMA`` are bijections of 64-bit words, so ``(w0, w1)`` determines ``(s, e)``:
two ``(seed, epoch)`` pairs that differ modulo ``2**64`` get different keys (in
particular ``(1, 0)`` and ``(0, 1)`` do; the key is not a function of ``seed + epoch``).

Round function, for a key ``k < 2**32`` and an input ``x < 2**32``::

    F(k, x):   h = x ^ k
               h ^= h >> 16;  h = h * 0x59950A6B & mask(32)
               h ^= h >> 15;  h = h * 0x6CE9DB8F & mask(32)
               h ^= h >> 16;  return h

Both multipliers are below ``2**31``, so every product is below ``2**63``. They were
chosen among 300 random odd 31-bit pairs as the pair whose avalanche matrix (flip one
input bit, how often does each output bit flip) was closest to one half, at the
sampling noise of the measurement.

Feistel network ``E`` on ``[0, 2**n)``, eight rounds: split ``x`` into ``L = x >> b``
(``wL = a`` bits) and ``R = x & mask(b)`` (``wR = b`` bits); for ``r = 0 .. 7``::

    L, R, wL, wR = R, L ^ (F(K[r], R) & mask(wL)), wR, wL

After eight rounds (an even number) the widths are back to ``(a, b)`` and
``E(x) = (L << b) | R``. Each round is invertible (``R`` is passed on unchanged), so ``E``
is a permutation of ``[0, 2**n)``; the inverse runs the rounds backwards.

Cycle-walking: the permutation of ``[0, N)`` is ``P(x) = E(x)`` if ``E(x) < N``, else
``E(E(x))`` if that is ``< N``, and so on. Since ``2**n < 2 * N``, fewer than two
applications of ``E`` are needed on average. The inverse walks ``E``'s inverse the same way.

Why eight rounds: four rounds of a Feistel network with independent random round
functions already give a strong pseudorandom permutation (Luby and Rackoff), but the
round function here is a fast keyed mixer, not a random function, the halves may differ
by a bit, domains can be tiny, and rounds 0 and 1 are keyed by the seed alone (two epochs
of one seed differ from round 2 on). Measured with the quality tests in
``tests/test_feistel.py``: with four rounds the chi-square test at sizes 5 and 37 and
the tests of unrelated orders across seeds and epochs fail; with six all pass; eight
keeps a margin. It is not a cryptographic permutation and must not be used as one.

Test vectors: ``P(0), ..., P(9)`` for ``FeistelPermutation(size, seed, epoch)``
(all positions when ``size < 10``)::

    size=1 seed=0 epoch=0: 0
    size=2 seed=0 epoch=0: 0 1
    size=7 seed=0 epoch=0: 4 5 6 3 1 2 0
    size=10 seed=0 epoch=0: 8 6 2 9 3 0 5 7 1 4
    size=10 seed=0 epoch=1: 6 7 1 0 9 3 4 2 5 8
    size=10 seed=1 epoch=0: 8 3 6 1 7 2 4 9 5 0
    size=1000000 seed=12345 epoch=3:
        869192 697769 201755 857359 936252 473712 930278 364487 699535 431261
    size=4611686018427387904 seed=-1 epoch=7:
        1999274720723619753 623728832819260815 2640877624141184226 595538487203060059
        3131187599100712590 955497345825730012 2179672261655001005 1064108479211629011
        3806880165002154099 1044339445102258906
    size=9223372036854775808 seed=18446744073709551621 epoch=-3:
        7393789957781474912 8632755906932843433 309061503008742809 4061211212371775857
        7760599350647127785 4358417178966584396 8504067870367823096 7023753903783455225
        1732308909476576230 6995643411771780341

Example::

    >>> perm = FeistelPermutation(10, seed=0, epoch=0)
    >>> perm(torch.arange(10)).tolist() == [perm.at(p) for p in range(10)]
    True
    >>> sorted(perm(torch.arange(10)).tolist()) == list(range(10))
    True
    >>> perm.inverse(perm(torch.tensor([3, 7]))).tolist()
    [3, 7]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from samplers import checks
from samplers.cycle_walk import _BLOCK, walk, walked_domain

__all__ = ["MAX_SIZE", "ROUNDS", "WHOLE_BITS", "FeistelPermutation", "round_keys"]

#: The largest supported size: every position and index then fits an int64.
MAX_SIZE = 1 << 63
#: Number of Feistel rounds (even, so the half widths end where they started).
ROUNDS = 8

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX64_MULTIPLIERS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
_F_MULTIPLIERS = (0x59950A6B, 0x6CE9DB8F)
#: Halves at most this wide evaluate ``F`` from per-round tables (see ``_run``).
_TABLE_BITS = 16
#: Domains of at most ``2**WHOLE_BITS`` values can be walked whole (``_walked``): a call
#: for at least half of such a domain is, and so is :meth:`FeistelPermutation.table`.
#: The temporaries are two int32 tensors of the domain's size (8 MB at most).
WHOLE_BITS = 20

#: A Python int or an int64 tensor: the round code below serves both unchanged.
_Word = TypeVar("_Word", int, torch.Tensor)


def _mix64(z: int) -> int:
    """The 64-bit bijective mixer of the key schedule."""
    z ^= z >> 30
    z = (z * _MIX64_MULTIPLIERS[0]) & _MASK64
    z ^= z >> 27
    z = (z * _MIX64_MULTIPLIERS[1]) & _MASK64
    return z ^ (z >> 31)


def round_keys(seed: int, epoch: int) -> tuple[int, ...]:
    """The ``ROUNDS`` 32-bit round keys for ``seed`` and ``epoch`` (each reduced mod 2**64).

    Different ``(seed mod 2**64, epoch mod 2**64)`` pairs give different keys.
    """
    s, e = seed & _MASK64, epoch & _MASK64
    w0 = _mix64((s + _GAMMA) & _MASK64)
    w1 = _mix64(((w0 ^ e) + _GAMMA) & _MASK64)
    w2 = _mix64((w1 + _GAMMA) & _MASK64)
    w3 = _mix64((w2 + _GAMMA) & _MASK64)
    words = (w0, w1, w2, w3)
    return tuple((words[r // 2] >> (32 * (r % 2))) & _MASK32 for r in range(ROUNDS))


def _round_function(key: int, x: _Word) -> _Word:
    """``F(key, x)`` of the specification, for ``x`` (or each element) in ``[0, 2**32)``.

    On a tensor every intermediate stays in ``[0, 2**63)``: ``h < 2**32`` before each
    product and both multipliers are below ``2**31``. On a Python int the same
    operations run with unbounded integers, so the two agree only if nothing overflows.
    """
    h = x ^ key  # a new value: the in-place steps below never touch ``x``
    h ^= h >> 16
    h *= _F_MULTIPLIERS[0]
    h &= _MASK32
    h ^= h >> 15
    h *= _F_MULTIPLIERS[1]
    h &= _MASK32
    h ^= h >> 16
    return h


class FeistelPermutation:
    """A bijection of ``[0, size)`` chosen by ``(seed, epoch)``, evaluated position by position.

    Guarantee: for every ``size``, ``seed`` and ``epoch``, ``perm(p)`` for ``p`` in
    ``range(size)`` is a permutation of ``range(size)``; ``perm.inverse`` undoes it; the
    tensor path (``perm(...)``), the pure-Python path (``perm.at``) and the
    specification in this module's docstring give the same values, on every platform
    and torch version. Memory is O(1) in ``size``: only the positions asked for are
    computed, each in O(1) expected time (``ROUNDS`` rounds, fewer than two cycle-walking
    steps on average). Up to ``size = 2**32`` the tensor path reads the round function
    from a table per round (at most 2**16 entries each: int32 below ``2**31``, 2 MB for
    all eight; int64 above, 4 MB), built on first use. Two exceptions trade memory for
    speed where the caller takes most of a small domain: a call for at least half of a
    domain of at most ``2**WHOLE_BITS`` values walks the whole domain at once (two int32
    temporaries of its size), and :meth:`table` keeps the whole permutation.

    Args:
        size: the number of elements ``N``, an integer in ``[0, 2**63]``.
        seed: any integer; it enters the key reduced modulo ``2**64``.
        epoch: any integer; it enters the key reduced modulo ``2**64``, separately from
            ``seed`` (``(seed=1, epoch=0)`` and ``(seed=0, epoch=1)`` differ).
    """

    def __init__(self, size: int, seed: int, epoch: int) -> None:
        size = checks.as_int("size", size)
        if not 0 <= size <= MAX_SIZE:
            raise ValueError(f"size must be in [0, 2**63], got {size}")
        self.size = size
        self.seed = checks.as_int("seed", seed)
        self.epoch = checks.as_int("epoch", epoch)
        self._keys = round_keys(self.seed, self.epoch)
        self._tables: dict[tuple[int, int, int], torch.Tensor] = {}
        # The rounds' (key, widths) forward and inverse, once asked for (``_rounds``).
        self._specs: dict[bool, list[tuple[int, int, int]]] = {}
        bits = (size - 1).bit_length() if size > 1 else 0
        # Widths of the high and low halves of the Feistel domain [0, 2**bits).
        self._high_bits = bits - bits // 2
        self._low_bits = bits // 2
        # With size a power of two there is nothing to walk (and 2**63 fits no int64).
        self._walks = size > 1 and size != 1 << bits
        # The tables' dtype: int32 holds every value of a domain below 2**31.
        self._table_dtype = torch.int32 if bits <= 31 else torch.int64
        # The whole permutation once :meth:`table` has computed it.
        self._kept: torch.Tensor | None = None

    def __repr__(self) -> str:
        return f"FeistelPermutation(size={self.size}, seed={self.seed}, epoch={self.epoch})"

    def at(self, position: int) -> int:
        """The dataset index at ``position``, in pure Python integer arithmetic."""
        position = checks.as_int("position", position)
        if not 0 <= position < self.size:
            raise ValueError(
                f"position must be in [0, {self.size}) for size={self.size}, got {position}"
            )
        if self.size == 1:
            return position
        value = self._encrypt(position)
        while value >= self.size:
            value = self._encrypt(value)
        return value

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        """The dataset index at each of ``positions`` (an integer tensor of any shape).

        Returns an int64 tensor of the same shape; raises ``ValueError`` if a position is
        outside ``[0, size)``.
        """
        return self._map("positions", positions, inverse=False)

    def inverse(self, indices: torch.Tensor) -> torch.Tensor:
        """The position that holds each of ``indices``: ``perm.inverse(perm(p)) == p``."""
        return self._map("indices", indices, inverse=True)

    def whole_pays(self, count: int) -> bool:
        """Whether ``count`` positions cost less computed together with the rest of the
        domain, walked whole (:meth:`_walked`): at least half of a domain of at most
        ``2**WHOLE_BITS`` values."""
        bits = self._low_bits + self._high_bits
        return bits <= WHOLE_BITS and 2 * count >= 1 << bits

    def table(self) -> torch.Tensor:
        """The whole permutation, ``perm(p)`` for every ``p`` in ``range(size)``, computed
        once and kept: int32 below ``2**31`` values, else int64. Later calls of
        ``perm(...)`` read it. Memory is O(size): for a caller that takes most of the
        order anyway (see :meth:`whole_pays`)."""
        if self._kept is None:
            if self._walks and self.whole_pays(self.size):
                self._kept = self._walked(inverse=False)
            else:
                self._kept = self(torch.arange(self.size)).to(self._table_dtype)
        return self._kept

    def _map(self, name: str, values: Any, *, inverse: bool) -> torch.Tensor:
        """The network (or its inverse), cycle-walked, on every element of ``values``
        (:meth:`_run`), each block checked first.

        Raises ``TypeError`` unless ``values`` is an integer tensor and ``ValueError``
        (naming ``name`` and the value) if an element is outside ``[0, size)``.
        """
        if not isinstance(values, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
        if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
            raise TypeError(f"{name} must be an integer tensor, got dtype {values.dtype}")
        flat = values.reshape(-1)

        def block(lo: int, hi: int, dtype: torch.dtype) -> torch.Tensor:
            part = flat[lo:hi].to(torch.int64)  # checked in int64, whatever ``dtype``
            smallest, largest = (int(bound) for bound in torch.aminmax(part))
            bad = smallest if smallest < 0 else largest if largest >= self.size else None
            if bad is not None:
                raise ValueError(
                    f"{name} must be in [0, {self.size}) for size={self.size}, got {bad}"
                )
            return part

        result = self._run(flat.numel(), block, inverse=inverse, device=flat.device)
        return result.reshape(values.shape)

    def range(self, lo: int, hi: int, *, narrow: bool = False) -> torch.Tensor:
        """``perm(torch.arange(lo, hi))`` (int64), without building or checking positions
        (``0 <= lo <= hi <= size``, else ``ValueError``); with ``narrow``, in the dtype
        computed in (int32 when the round tables are, below ``2**31``), not converted."""
        lo, hi = checks.as_int("lo", lo), checks.as_int("hi", hi)
        if not 0 <= lo <= hi <= self.size:
            raise ValueError(
                f"lo and hi must satisfy 0 <= lo <= hi <= {self.size}, got lo={lo}, hi={hi}"
            )
        # arange(b - a) + (lo + a): no bound past int64 (hi may be 2**63).
        return self._run(
            hi - lo,
            lambda a, b, dtype: torch.arange(b - a, dtype=dtype).add_(lo + a),
            inverse=False,
            narrow=narrow,
        )

    def _run(
        self,
        count: int,
        block: Callable[[int, int, torch.dtype], torch.Tensor],
        *,
        inverse: bool,
        device: torch.device | None = None,
        narrow: bool = False,
    ) -> torch.Tensor:
        """The network (or its inverse), cycle-walked, on ``count`` values, ``block(lo,
        hi, dtype)`` giving values ``[lo, hi)`` (in ``dtype``, the one computed in, if it
        builds them).

        Values are mapped ``_BLOCK`` at a time, then those still ``>= size`` are walked
        together (:func:`~samplers.cycle_walk.walk`). A call for at least half of a small
        domain (:meth:`whole_pays`) instead looks every value up in the whole domain
        walked at once (:meth:`_walked`), which costs less than searching for the values
        still walking; so does every call once :meth:`table` has kept the permutation.
        Returns int64, or with ``narrow`` the dtype computed in.
        """
        # Tables (halves at most _TABLE_BITS wide: domains up to 2**32) are worth building
        # for a call of at least a table's entries, not for one block; once built, every
        # call reads them. The values are then computed in the tables' dtype.
        tabled = self._high_bits <= _TABLE_BITS and (
            bool(self._tables) or count >= 1 << self._high_bits
        )
        if tabled:
            self._round_tables(inverse)
        dtype = self._table_dtype if tabled else torch.int64
        result = torch.empty(count, dtype=dtype, device=device)
        step = functools.partial(self._step, inverse=inverse, tabled=tabled)
        walked = None if inverse else self._kept
        if walked is None and self._walks and self.whole_pays(count):
            walked = self._walked(inverse)
        for start in range(0, count, _BLOCK):
            stop = min(start + _BLOCK, count)
            values = block(start, stop, dtype)
            if walked is not None:
                result[start:stop] = walked.index_select(0, values)
            else:
                result[start:stop] = step(values) if self.size > 1 else values
        if self._walks and walked is None:
            walk(result, self.size, step)
        return result if narrow else result.to(torch.int64)

    def _step(self, x: _Word, *, inverse: bool, tabled: bool) -> _Word:
        """One application of the network (or its inverse): a tensor from the tables
        when ``tabled`` (in their dtype), else :meth:`_network`."""
        if tabled and isinstance(x, torch.Tensor):
            return self._tabled_network(x, inverse)
        return self._network(x, inverse=inverse)

    def _walked(self, inverse: bool) -> torch.Tensor:
        """The cycle-walked network at every value of ``[0, size)``, in the tables' dtype
        (:func:`~samplers.cycle_walk.walked_domain`)."""
        bits = self._low_bits + self._high_bits
        network = functools.partial(self._tabled_network, inverse=inverse)
        return walked_domain(self.size, bits, self._table_dtype, network)

    def _encrypt(self, x: _Word) -> _Word:
        """``E`` of the specification on ``[0, 2**n)``, for an int or each tensor element."""
        return self._network(x, inverse=False)

    def _decrypt(self, y: _Word) -> _Word:
        """The inverse of :meth:`_encrypt`."""
        return self._network(y, inverse=True)

    def _rounds(self, inverse: bool) -> list[tuple[int, int, int]]:
        """Each round's ``(key, width of the right half, width of the left half)``.

        Undoing ``left, right = right, left ^ F(right)`` is the same round on the swapped
        pair ``(right, left)``, so the inverse runs the rounds in reverse key order,
        starting from the low half's width.
        """
        if inverse not in self._specs:
            bits = self._low_bits + self._high_bits
            left_bits = self._low_bits if inverse else self._high_bits
            rounds = []
            for key in self._keys[::-1] if inverse else self._keys:
                rounds.append((key, bits - left_bits, left_bits))
                left_bits = bits - left_bits
            self._specs[inverse] = rounds
        return self._specs[inverse]

    def _round_tables(self, inverse: bool) -> list[torch.Tensor]:
        """Each round's table, ``F(key, x) & mask(left_bits)`` for every ``x < 2**right_bits``.

        Built on first use, in the dtype of :meth:`_tabled_network`'s halves, all rounds
        together (``F(key, x)`` is ``F(0, x ^ key)``: one pass of the round function over
        a keys x inputs grid). The forward and inverse networks use the same eight
        ``(key, widths)`` rounds, so they share their tables.
        """
        rounds = self._rounds(inverse)
        missing = [spec for spec in rounds if spec not in self._tables]
        if missing:
            keys = torch.tensor([key for key, _, _ in missing], dtype=torch.int64)[:, None]
            width = 1 << max(right_bits for _, right_bits, _ in missing)
            step = max(1, _BLOCK // len(missing))  # a grid block stays below _BLOCK
            grid = torch.cat(
                [
                    _round_function(0, keys ^ torch.arange(lo, min(lo + step, width)))
                    for lo in range(0, width, step)
                ],
                dim=1,
            )
            for row, spec in zip(grid, missing, strict=True):
                _, right_bits, left_bits = spec
                table = row[: 1 << right_bits] & ((1 << left_bits) - 1)
                self._tables[spec] = table.to(self._table_dtype)
        return [self._tables[spec] for spec in rounds]

    def _network(self, x: _Word, *, inverse: bool) -> _Word:
        """The Feistel rounds (see :meth:`_rounds`), on an int or each tensor element,
        each round computing ``F`` directly (:meth:`_run` decides when a tensor is mixed
        from tables instead, :meth:`_tabled_network`)."""
        low = self._low_bits
        high_half, low_half = x >> low, x & ((1 << low) - 1)
        left, right = (low_half, high_half) if inverse else (high_half, low_half)
        for key, _, left_bits in self._rounds(inverse):
            mixed = _round_function(key, right)
            mixed &= (1 << left_bits) - 1
            mixed ^= left
            left, right = right, mixed
        high_half, low_half = (right, left) if inverse else (left, right)
        high_half <<= low
        high_half |= low_half
        return high_half

    def _tabled_network(self, x: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The rounds of :meth:`_network` on a tensor, each reading ``F`` from its table:
        the same values, two tensor operations per round instead of thirteen. Below
        2**31 the halves are int32 (every value fits), which makes each operation
        lighter; the result is in the halves' dtype."""
        tables = self._round_tables(inverse)
        low = self._low_bits
        x = x.to(self._table_dtype)
        high_half, low_half = x >> low, x & ((1 << low) - 1)
        left, right = (low_half, high_half) if inverse else (high_half, low_half)
        spare = torch.empty_like(left)  # three buffers in turn: no allocation per round
        for table in tables:
            torch.index_select(table, 0, right, out=spare)
            spare ^= left
            left, right, spare = right, spare, left
        high_half, low_half = (right, left) if inverse else (left, right)
        high_half <<= low
        high_half |= low_half
        return high_half
