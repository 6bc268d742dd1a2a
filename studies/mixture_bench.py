"""A bounded measurement of the mixture sampler at scale (not recorded in the benchmark).

Rank 7 of 8 over 100 sources whose sizes span three orders of magnitude: the time and the
traced memory to the first index at a total of 10**6 and 10**9 samples, and a whole epoch
against the stock ``DistributedSampler`` over a ``ConcatDataset`` of the same sources at
a size where the stock one fits in memory. Run: ``python -m studies.mixture_bench``.
"""

from __future__ import annotations

import json
import random
import time
import tracemalloc
from typing import Any

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


def first_index(total: int) -> dict[str, Any]:
    datasets, weights = sources(total)
    period.cache_clear()
    tracemalloc.start()
    started = time.perf_counter()
    sampler = DistributedMixtureSampler(datasets, weights, WORLD, RANK, epoch_length=total)
    next(iter(sampler))
    cold = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    started = time.perf_counter()
    sampler = DistributedMixtureSampler(datasets, weights, WORLD, RANK, epoch_length=total)
    next(iter(sampler))
    warm = time.perf_counter() - started
    return {
        "total": total,
        "period": sum(parts(weights)),
        "first index, schedule not yet built (ms)": round(cold * 1e3, 1),
        "first index, schedule built (ms)": round(warm * 1e3, 1),
        "traced peak to the first index (KiB)": round(peak / 1024, 1),
    }


def whole_epoch(total: int) -> dict[str, Any]:
    datasets, weights = sources(total)
    sampler = DistributedMixtureSampler(datasets, weights, WORLD, RANK, epoch_length=total)
    next(iter(sampler))  # the schedule built once, as every later epoch finds it
    started = time.perf_counter()
    ours = sum(1 for _ in DistributedMixtureSampler(datasets, weights, WORLD, RANK))
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    theirs = sum(1 for _ in StockSampler(ConcatDataset(datasets), WORLD, RANK))
    stock_seconds = time.perf_counter() - started
    return {
        "total": total,
        "ours (s)": round(ours_seconds, 2),
        "stock over ConcatDataset (s)": round(stock_seconds, 2),
        "ratio": round(ours_seconds / stock_seconds, 1),
        "items": [ours, theirs],
    }


def main() -> None:
    print(json.dumps([first_index(10**6), first_index(10**9)], indent=1))
    print(json.dumps(whole_epoch(10**6), indent=1))


if __name__ == "__main__":
    main()
