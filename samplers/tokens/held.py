"""The lengths a token sampler plans from: checked at once, copied when first needed.

A sampler must not see its lengths change under it, so it plans from its own copy. But
copying 10**8 lengths takes longer than planning the first batch (the fresh pages cost
as much as the copy), and the first chunk of an epoch needs only a few thousand of them.
:class:`HeldLengths` therefore checks the caller's lengths in one pass when the sampler
is built (no negative one; the largest and the exact sum, which fix the default window)
and makes the copy when it is first needed: planning any chunk but the first of an
epoch of several (a one-chunk epoch copies at once), a checkpoint's digest, a pickle,
or anything else that asks for :meth:`HeldLengths.owned`.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from samplers.optional import numpy
from samplers.tokens.order import length_sum

__all__ = ["SCAN_SAMPLES", "HeldLengths"]

#: The check reads the lengths this many at a time (so that the sum reads them from the
#: cache, right after the maximum did).
SCAN_SAMPLES = 1 << 15
#: Lengths of these dtypes are checked by numpy when installed (reading them unsigned,
#: a negative length is above every valid one: one maximum checks both bounds).
_UNSIGNED = {torch.int32: "uint32", torch.int64: "uint64"}
#: Lengths below this are held in int32; a larger one makes the copy int64.
_INT32_LIMIT = 2**31


class HeldLengths:
    """A caller's lengths (a 1-D CPU integer tensor), checked, and the copy planned from.

    Guarantee: :meth:`owned` is a contiguous copy, int32 (int64 when a length is
    ``2**31`` or more), that later changes to the caller's tensor never reach, equal to
    the lengths as they were when checked. A change made in between is refused with a
    ``RuntimeError`` when the copy is made: a torch in-place operation on the tensor
    (its version counter moved), or any change of the sum or of the largest length
    (e.g. written through a numpy array sharing the tensor's memory). One change goes
    unseen: values rearranged through shared memory with the same sum and largest
    length, before the copy; the chunk planned from :attr:`given` then used the values
    as they were when it read them. The copy is made at most once (under a lock);
    pickling or copying a :class:`HeldLengths` makes it first, so both hold it.

    Until the copy exists, :attr:`given` is the caller's tensor itself; :attr:`current`
    is the copy once made, else the caller's tensor.
    """

    def __init__(self, given: torch.Tensor) -> None:
        #: The caller's tensor, until the copy is made.
        self.given: torch.Tensor | None = given
        self.size = given.numel()
        #: The largest length (0 for no lengths) and the exact sum.
        self.longest, self.total = _scan(given)
        self._version = given._version
        self._copy: torch.Tensor | None = None
        self._lock = threading.Lock()

    @classmethod
    def copied(cls, given: torch.Tensor) -> HeldLengths:
        """Checked and copied at once."""
        held = cls(given)
        held.owned()
        return held

    @property
    def current(self) -> torch.Tensor:
        """The copy once made, else the caller's tensor (the same values)."""
        given = self.given  # read first: the copy is set before ``given`` is dropped
        copy = self._copy
        if copy is not None:
            return copy
        assert given is not None
        return given

    def owned(self) -> torch.Tensor:
        """The copy (made now if it does not exist yet)."""
        with self._lock:
            if self._copy is None:
                assert self.given is not None
                self._copy = self._copied(self.given)
                self.given = None
            return self._copy

    def _copied(self, given: torch.Tensor) -> torch.Tensor:
        if given._version != self._version:
            raise RuntimeError(
                "lengths were changed in place after the sampler was built (before it made "
                "its own copy): build the sampler again from the new lengths"
            )
        dtype = torch.int32 if self.longest < _INT32_LIMIT else torch.int64
        copy = torch.empty(self.size, dtype=dtype)
        total, longest = 0, 0
        # The copy is checked a part at a time, right after copying it (from the cache).
        # numpy's copy and reductions where it reads the dtype (a quarter faster here).
        into: Any = copy
        source: Any = given
        wide: Any = torch.int64
        if numpy is not None and given.is_contiguous() and given.dtype in _UNSIGNED:
            into, source, wide = copy.numpy(), given.numpy(), numpy.int64
        for lo in range(0, self.size, SCAN_SAMPLES):
            part = into[lo : lo + SCAN_SAMPLES]
            part[:] = source[lo : lo + SCAN_SAMPLES]
            total += int(part.sum(dtype=wide))
            longest = max(longest, int(part.max()))
        if (total, longest) != (self.total, self.longest):
            raise RuntimeError(
                f"lengths changed after the sampler was built (before it made its own copy): "
                f"they summed to {self.total} with the longest {self.longest}, now "
                f"{total} and {longest}; build the sampler again from the new lengths"
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


def _scan(values: torch.Tensor) -> tuple[int, int]:
    """The largest of ``values`` (0 if empty) and their exact sum, or a ``ValueError``
    naming a negative one: one pass, :data:`SCAN_SAMPLES` at a time, where numpy reads
    int32 and int64 lengths (a length of ``2**31`` or more, or a negative one, sends it
    to torch's path, which tells them apart)."""
    size = values.numel()
    if numpy is not None and values.dtype in _UNSIGNED and values.is_contiguous():
        array = values.numpy()
        unsigned = array.view(_UNSIGNED[values.dtype])
        longest, total = 0, 0
        for lo in range(0, size, SCAN_SAMPLES):
            top = int(unsigned[lo : lo + SCAN_SAMPLES].max())
            if top >= _INT32_LIMIT:
                break
            longest = max(longest, top)
            total += int(array[lo : lo + SCAN_SAMPLES].sum())
        else:
            return longest, total
    if size == 0:
        return 0, 0
    low, high = (int(bound) for bound in torch.aminmax(values))
    if low < 0:
        where = int(torch.argmin(values))
        raise ValueError(f"lengths must be at least 0, got lengths[{where}] = {int(values[where])}")
    return high, length_sum(values)
