"""Shard the stream of any sampler: ranks get disjoint parts of one identical stream."""

from __future__ import annotations

import contextlib
import operator
import random
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from samplers import checks, consistency, groups, resharding
from samplers.core import SamplerCore
from samplers.iterators import ShareIterator
from samplers.options import Tail
from samplers.plan import EpochPlan, ShardSizes, StreamOrder, Strided

__all__ = ["DistributedSamplerWrapper"]


class DistributedSamplerWrapper(SamplerCore, Sampler[int]):
    """Shards any sampler's stream (weighted, subset, custom) across ranks, exactly.

    Guarantee: every rank draws the *same* stream from the wrapped sampler each epoch,
    and the ranks take disjoint strided parts of it (with the same ``tail`` policies as
    :class:`samplers.DistributedSampler`), so together they see the stream exactly once
    (``"uneven"``), padded (``"pad"``) or trimmed (``"drop"``). Why: before drawing, the
    wrapped sampler's randomness is seeded from ``(seed, epoch)``, identically on every
    rank, whether it draws from its ``generator`` attribute (``RandomSampler``,
    ``WeightedRandomSampler``, ``SubsetRandomSampler``) or from the global random number
    generators (torch's and Python's, and numpy's when numpy is imported); the caller's
    global RNG state is restored afterwards. The common pattern of letting every rank
    draw its own, unseeded stream and keep every W-th index gives overlapping parts and
    loses samples (see the report's wrapper finding).

    The epoch reaches the wrapped sampler's ``set_epoch`` when it has one, before each
    stream is drawn (whether ``set_epoch``, ``auto_epoch`` or a loaded state set it).
    ``len()`` is this rank's share of ``len(sampler)``; the wrapped sampler must yield
    exactly that many indices. Unlike the other samplers, the wrapper keeps the current
    stream (``len(sampler)`` int64 indices), and its iterators carry it when pickled: it
    is the epoch's order and cannot be drawn again without the wrapped sampler.

    Example::

        >>> from torch.utils.data import WeightedRandomSampler
        >>> weighted = WeightedRandomSampler([0.1, 0.9, 0.5, 0.5], num_samples=8)
        >>> parts = [list(DistributedSamplerWrapper(weighted, 2, r, seed=3)) for r in (0, 1)]
        >>> [len(part) for part in parts]
        [4, 4]

    Args:
        sampler: any sampler yielding dataset indices, with ``__len__``.
        num_replicas: number of ranks; default: the default process group's world size.
        rank: this process's rank in ``[0, num_replicas)``; default: from the process group.
        seed: seeds the wrapped sampler's stream with ``seed + epoch``; the same on every
            rank (``None``: one random seed agreed by all ranks, a collective).
        tail: ``"pad"``, ``"drop"`` or ``"uneven"``.
        auto_epoch: advance the epoch on each new iteration without ``set_epoch``.
        group: the data-parallel group to shard over (a ``ProcessGroup`` or a 1-D
            ``DeviceMesh``); default: the default process group.
    """

    def __init__(
        self,
        sampler: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int | None = 0,
        *,
        tail: Tail = "pad",
        auto_epoch: bool = False,
        group: groups.Group = None,
    ) -> None:
        if not hasattr(sampler, "__iter__"):
            raise TypeError(f"sampler must be iterable, got {type(sampler).__name__}")
        if not hasattr(type(sampler), "__len__"):
            raise TypeError(
                f"sampler must have a length (__len__), got {type(sampler).__name__} without one"
            )
        self.sampler = sampler
        self.group = groups.reference(group)
        self.num_replicas, self.rank = groups.placement(num_replicas, rank, self.group)
        self.tail = checks.tail(tail, drop_last=False)
        self.seed = consistency.seed_or_agreed(seed)
        checks.checked_key(self.seed, 0)  # seed + epoch must fit the generator's manual_seed
        self.shuffle = True  # the stream is seeded from (seed, epoch)
        self.permutation = "stream"
        self.epoch = 0
        self._init_core(auto_epoch)
        self._stream: tuple[tuple[int, int], torch.Tensor] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Use ``seed + epoch`` for the next stream; the wrapped sampler's too. Raises
        ``ValueError`` when ``seed + epoch`` does not fit ``manual_seed``."""
        if self._initialised:
            checks.checked_key(checks.seed(self.seed), checks.epoch(epoch))
        super().set_epoch(epoch)
        inner_set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(inner_set_epoch):
            inner_set_epoch(self.epoch)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As :meth:`samplers.DistributedSampler.load_state_dict`; a state whose ``seed +
        epoch`` does not fit ``manual_seed`` (the stream's seed) is refused here too."""
        if isinstance(state_dict, dict):
            seed, epoch = state_dict.get("seed"), state_dict.get("epoch")
            if type(seed) is int and type(epoch) is int:  # other values: refused below
                try:
                    checks.checked_key(seed, epoch)
                except ValueError as error:
                    raise ValueError(
                        f"state fields 'seed' and 'epoch' do not fit: {error}"
                    ) from None
        super().load_state_dict(state_dict)

    def stream(self) -> torch.Tensor:
        """The wrapped sampler's stream for the current epoch, as every rank draws it."""
        seed, epoch = checks.seed(self.seed), checks.epoch(self.epoch)
        if self._stream is not None and self._stream[0] == (seed, epoch):
            return self._stream[1]
        key = checks.checked_key(seed, epoch)
        inner_set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(inner_set_epoch):
            inner_set_epoch(epoch)  # also when auto_epoch or a loaded state set the epoch
        with _seeded(self.sampler, key):
            drawn = [_index(value) for value in self.sampler]
        expected = len(self.sampler)
        if len(drawn) != expected:
            raise ValueError(
                f"the wrapped sampler yielded {len(drawn)} indices but its len() is {expected}"
            )
        stream = torch.tensor(drawn, dtype=torch.int64)
        self._stream = ((seed, epoch), stream)
        return stream

    def _plan(self, start: int) -> EpochPlan:
        num_replicas = checks.world_size(self.num_replicas)
        checks.rank(self.rank, num_replicas)
        tail = checks.tail(self.tail, drop_last=False)
        stream = self.stream()
        size = stream.numel()
        return EpochPlan(
            ShardSizes.of(size, num_replicas, drop_last=tail == "drop"),
            shuffle=True,
            seed=checks.seed(self.seed),
            epoch=checks.epoch(self.epoch),
            layout=Strided.of(size, num_replicas, tail, start),
            given=StreamOrder(stream),
        )

    def _dataset_length(self) -> int:
        return len(self.sampler)

    def _new_iterator(self, plan: EpochPlan) -> ShareIterator:
        return ShareIterator.of(plan, checks.as_int("rank", self.rank))

    def __iter__(self) -> Iterator[int]:
        resharding.check(self)
        iterator: Iterator[int] = self._begin()
        return iterator

    def __len__(self) -> int:
        remaining = self._remaining_count()
        if remaining is not None:
            return remaining
        tail = checks.tail(self.tail, drop_last=False)
        layout = Strided.of(len(self.sampler), checks.world_size(self.num_replicas), tail)
        return layout.count(checks.as_int("rank", self.rank))

    def settings(self) -> dict[str, Any]:
        """What must agree across ranks, including the wrapped sampler's type."""
        return {**super().settings(), "wrapped sampler": type(self.sampler).__name__}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.sampler!r}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, seed={self.seed}, tail={self.tail!r}, epoch={self.epoch})"
        )


def _index(value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            "the wrapped sampler must yield dataset indices (integers), got "
            f"{type(value).__name__} {value!r}; wrap a sampler, not a batch sampler"
        ) from None


@contextlib.contextmanager
def _seeded(sampler: Any, key: int) -> Iterator[None]:
    """Seed everything the wrapped sampler may draw from with ``key``; restore after."""
    generator = torch.Generator()
    generator.manual_seed(key)
    python_state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    has_generator = hasattr(sampler, "generator")
    saved = sampler.generator if has_generator else None
    try:
        with torch.random.fork_rng(devices=[]):
            # The CPU generator alone: fork_rng restores only it, and torch.manual_seed
            # would also queue a seed for every accelerator (CUDA, XPU, MTIA) that is
            # not restored, each call recording its stack (the cost of a small epoch).
            torch.default_generator.manual_seed(key)
            random.seed(key)
            if numpy is not None:
                numpy.random.seed(key % 2**32)
            if has_generator:
                sampler.generator = generator
            yield
    finally:
        if has_generator:
            sampler.generator = saved
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)
