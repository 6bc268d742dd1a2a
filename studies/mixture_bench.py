"""A bounded measurement of the mixture sampler at scale (not recorded in the benchmark).

Rank 7 of 8 over 100 sources whose sizes span three orders of magnitude: the time and the
traced memory to the first index at a total of 10**6 and 10**9 samples, and a whole epoch
against the stock ``DistributedSampler`` over a ``ConcatDataset`` of the same sources and
the floor (handing out a held list of the rank's indices), at 10**6 and 10**7 samples on
8 ranks and on 1, measured in one run as ratios (CPU time counts every thread of the
process; wall time is inflated by other load). Run: ``python -m studies.mixture_bench``.
"""

from __future__ import annotations

import json
import os
import random
import time
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import ConcatDataset
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedMixtureSampler
from samplers.mixture.schedule import parts, period

SOURCES = 100
WORLD, RANK = 8, 7


class Sized:
    """A dataset of ``n`` samples that holds nothing."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def sources(total: int, seed: int = 0) -> tuple[list[Sized], list[float]]:
    generator = random.Random(seed)
    raw = [10 ** generator.uniform(0, 3) for _ in range(SOURCES)]
    sizes = [max(1, int(total * r / sum(raw))) for r in raw]
    sizes[-1] += total - sum(sizes)
    weights = [generator.random() for _ in range(SOURCES)]
    return [Sized(n) for n in sizes], weights


def _timed(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The best (CPU seconds, wall seconds) of ``repeats`` runs."""
    best: tuple[float, float] | None = None
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        run()
        measured = (time.process_time() - cpu, time.perf_counter() - wall)
        best = measured if best is None else min(best, measured)
    assert best is not None
    return best


def first_index(total: int) -> dict[str, Any]:
    """Time and traced memory from constructing the sampler to its first index."""
    datasets, weights = sources(total)
    segment_parts = parts(weights)
    period.cache_clear()

    def build() -> None:
        period.cache_clear()
        period(segment_parts)

    built = _timed(build, 3)
    period(segment_parts)

    def first() -> None:
        sampler = DistributedMixtureSampler(datasets, weights, WORLD, RANK, epoch_length=total)
        next(iter(sampler))

    warm = _timed(first, 5)
    tracemalloc.start()
    first()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "total": total,
        "period": sum(segment_parts),
        "building the period, CPU / wall (ms)": [
            round(built[0] * 1e3, 1),
            round(built[1] * 1e3, 1),
        ],
        "first index, period built, CPU / wall (ms)": [
            round(warm[0] * 1e3, 1),
            round(warm[1] * 1e3, 1),
        ],
        "traced peak to the first index, period built (KiB)": round(peak / 1024, 1),
    }


def whole_epoch(total: int, world: int) -> dict[str, Any]:
    """A whole epoch on the last rank: ours, the stock sampler over ConcatDataset, and the
    floor (handing out a held list of the rank's indices), best of a few runs each."""
    rank = world - 1
    datasets, weights = sources(total)
    next(iter(DistributedMixtureSampler(datasets, weights, world, rank)))  # period built
    concat: ConcatDataset[int] = ConcatDataset(datasets)  # type: ignore[arg-type]
    held = list(range(rank, total, world))
    repeats = 3 if total <= 10**6 else 2

    def count(sampler: Iterable[int]) -> int:
        return sum(1 for _ in sampler)

    ours = _timed(lambda: count(DistributedMixtureSampler(datasets, weights, world, rank)), repeats)
    stock = _timed(lambda: count(StockSampler(concat, world, rank)), repeats)
    floor = _timed(lambda: count(iter(held)), repeats)
    return {
        "total": total,
        "ranks": world,
        "CPU s: ours, stock, floor": [round(t[0], 3) for t in (ours, stock, floor)],
        "wall s: ours, stock, floor": [round(t[1], 3) for t in (ours, stock, floor)],
        "ours / stock, CPU": round(ours[0] / stock[0], 2),
        "ours / stock, wall": round(ours[1] / stock[1], 2),
        "stock / floor, CPU": round(stock[0] / floor[0], 2),
    }


def main() -> None:
    print(f"load average: {os.getloadavg()}, torch threads: {torch.get_num_threads()}")
    print(json.dumps([first_index(10**6), first_index(10**9)], indent=1))
    for total in (10**6, 10**7):
        for world in (WORLD, 1):
            print(json.dumps(whole_epoch(total, world)))
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
