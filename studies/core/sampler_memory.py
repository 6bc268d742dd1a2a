"""What each sampler holds in memory on one rank in one epoch, computed from the sizes.

Guarantee: :func:`memory_per_rank` returns, for a case's dataset size and world size,
a lower bound on the bytes each sampler holds at once on every rank when an epoch's
``iter()`` starts, counting only what grows with the dataset (no tensor is built, so it
answers for any size):

* the stock ``DistributedSampler`` builds ``torch.randperm(N)`` (int64, 8 bytes a sample)
  and, while it is alive, ``.tolist()``: a list of ``N`` Python ints (an 8-byte slot
  each, and an int object for each value from 257 on: ``sys.getsizeof``, 28 bytes below
  ``2**30``, 32 below ``2**60``). Without shuffling, ``list(range(N))``: the list alone.
* ours (``permutation="randperm"``) draws the same permutation as int32 below ``2**31``
  samples (int64 above), and cuts the rank's share from it (a copy of the share's
  indices, unless the share is the whole order): both are alive at that moment. Without
  shuffling nothing of the dataset's size is built.
* ours with ``permutation="feistel"`` computes the positions a chunk at a time: nothing
  of the dataset's size (a domain of at most ``2**20`` values may be held whole, 4 MiB
  at most, which is not counted).

``tests/test_sampler_memory.py`` checks these bounds against tracemalloc and the
tensor allocations of real samplers. :data:`NO_MACHINE` is the rule for what no machine
can hold: more than 1 TiB for one rank's sampler (:func:`beyond_any_machine`).
"""

from __future__ import annotations

from dataclasses import dataclass

from samplers.plan import ShardSizes
from studies.core.cases import Case

__all__ = [
    "NO_MACHINE",
    "SAMPLERS",
    "Held",
    "beyond_any_machine",
    "bytes_text",
    "memory_per_rank",
    "python_int_list",
]

#: The rule for memory no machine can give one rank's sampler: more than this (1 TiB).
NO_MACHINE = 1 << 40
#: The samplers compared, in the order :func:`memory_per_rank` lists them.
SAMPLERS = ("torch DistributedSampler", "ours (randperm)", "ours (feistel)")
#: Python caches the int objects -5 to 256; a list of indices shares them.
_CACHED_INTS = 257


@dataclass(frozen=True)
class Held:
    """What one sampler holds on one rank: at least ``bytes``, made of ``parts``."""

    sampler: str
    bytes: int
    parts: tuple[tuple[str, int], ...]

    def text(self) -> str:
        """``at least 8.0 TiB (randperm(N) int64 ...)`` for a reader."""
        if not self.parts:
            return "nothing of the dataset's size (computed a chunk at a time)"
        shown = " + ".join(f"{what} {bytes_text(size)}" for what, size in self.parts)
        return f"at least {bytes_text(self.bytes)} ({shown})"

    def record(self) -> dict[str, object]:
        return {"sampler": self.sampler, "bytes_at_least": self.bytes, "held": self.text()}


def python_int_list(length: int) -> int:
    """Bytes of ``list(range(length))`` (any order of the same values): its slots and
    the int objects of the values that Python does not cache (``sys.getsizeof``)."""
    small = max(min(length, 1 << 30) - _CACHED_INTS, 0)
    large = max(min(length, 1 << 60) - max(1 << 30, _CACHED_INTS), 0)
    huge = max(length - (1 << 60), 0)
    return 8 * length + 28 * small + 32 * large + 36 * huge


def memory_per_rank(case: Case) -> list[Held]:
    """What each of :data:`SAMPLERS` holds on every rank for ``case``'s sizes (see the
    module's docstring), in that order."""
    size = case.dataset_size
    sizes = ShardSizes.of(size, case.world_size, case.drop_last)
    listed = ("list of N Python ints", python_int_list(size))
    if case.shuffle:
        stock = (("randperm(N) int64", 8 * size), listed)
        width = 4 if size < 2**31 else 8
        dtype = "int32" if width == 4 else "int64"
        ours: tuple[tuple[str, int], ...] = ((f"randperm(N) {dtype}", width * size),)
        if sizes.num_samples != size or sizes.padding:
            ours += ((f"the rank's share {dtype}", width * sizes.num_samples),)
    else:
        stock, ours = (listed,), ()
    return [
        Held(SAMPLERS[0], sum(part[1] for part in stock), stock),
        Held(SAMPLERS[1], sum(part[1] for part in ours), ours),
        Held(SAMPLERS[2], 0, ()),
    ]


def beyond_any_machine(held: Held) -> bool:
    """Whether ``held`` is more than :data:`NO_MACHINE` (the rule for no machine)."""
    return held.bytes > NO_MACHINE


def bytes_text(count: int) -> str:
    """``count`` bytes in binary units with 3 significant figures (``7.28 TiB``)."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def memory_problem(case: Case) -> tuple[str, str, str] | None:
    """``(name, finding, fix)`` when the case's own sampler holds more than
    :data:`NO_MACHINE` on a rank (see :func:`studies.core.verdicts.verdicts`), else ``None``.

    The fix is a sampler that holds less than the rule here, as computed above; a case
    without a sampler is not judged (the DataLoader's own sampler is not modelled).
    """
    if case.implementation == "none":
        return None
    stock, ours, feistel = memory_per_rank(case)
    mine = stock if case.implementation == "torch" else ours
    if not beyond_any_machine(mine):
        return None
    if case.shuffle:
        better, how = feistel, 'ours with permutation="feistel"'
    else:
        better, how = ours, "ours (samplers.DistributedSampler), which computes an unshuffled order"
    assert not beyond_any_machine(better)
    finding = (
        f"The {mine.sampler} holds {mine.text()} on every rank in every epoch, before its "
        f"first index: more than {bytes_text(NO_MACHINE)}, the rule here for what no "
        "machine gives one rank's sampler."
    )
    fix = f"Use {how}: it holds {better.text()}."
    return "memory-beyond-any-machine", finding, fix
