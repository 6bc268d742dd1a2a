"""The mixture sampler at scale: a bounded measurement, and a recorded one.

Rank ``W - 1`` of ``W`` over :data:`SOURCES` sources whose sizes span three orders of
magnitude (:func:`sources`). ``python -m studies.mixtures.bench`` measures in this process
(CPU time, best of a few runs; for development): the time and traced memory to the first
index at 10**6 and 10**9 samples, and a whole epoch of ours against the stock
``DistributedSampler`` over a ``ConcatDataset`` of the same sources and the floor (handing
out a held list of the rank's indices) at 10**6 and 10**7 samples on 8 ranks and on 1.

``python -m studies.mixtures.bench --record`` (a few minutes) measures in fresh processes
instead (each started through a small launcher, on :data:`THREADS` intra-op thread,
after a warm-up on 1,000 samples and a full garbage collection, as in the main
benchmark, so that no collection owed by earlier work runs on the clock; the clock runs
from building the sampler to its first index and on to its last; the peak is the
kernel's high-water mark above the process's baseline resident set, the mark reset to
the baseline where Linux allows) and writes the medians over :data:`REPEATS` processes,
with the machine's facts, to :data:`RECORDED`, which the speed and mixtures findings
show; nothing is timed when the reports are built. The grid: every variant of
:data:`VARIANTS` at every size of :data:`EPOCH_SIZES` on every world size of
:data:`WORLD_SIZES` (the stock sampler cannot run at 10**9 samples here: its list of
every index alone needs more memory than the machine has, so the whole epoch stops at
10**8), and ours' first index alone at :data:`FIRST_INDEX_SIZES` on :data:`WORLD` ranks.

The record also holds, under ``"ways"``, the time and peak memory to the first index of
every way of mixing that the mixtures finding compares (``BUILDERS`` of
:mod:`studies.mixtures.ways`, the finding's own code), on rank ``WORLD - 1`` of
:data:`WORLD`, over the finding's six sources at each total of :data:`WAY_SIZES` (its
sizes, scaled; :func:`scaled`): the same probe in fresh processes, the sources built
before the clock, after a warm-up over all of :data:`WAY_WARM_UP` samples. A way whose
first process does not finish within :data:`WAY_TIMEOUT` seconds (imports and warm-up
included) is recorded as skipped at that total.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import ConcatDataset
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedMixtureSampler
from samplers.mixture.schedule import parts, period
from studies.bench.probe import in_fresh_interpreter

SOURCES = 100
WORLD, RANK = 8, 7
RECORDED = Path(__file__).resolve().parents[1] / "data" / "mixture-bench.json"
#: The recorded grid (see the module docstring).
VARIANTS = ("ours", "stock", "floor")
EPOCH_SIZES = (10**6, 10**7, 10**8)
WORLD_SIZES = (1, WORLD)
FIRST_INDEX_SIZES = (10**6, 10**9)
REPEATS = 3
#: torch's intra-op threads in each measuring process (as in :mod:`studies.tokens.bench`).
THREADS = 1
QUANTITIES = ("first index (s)", "whole epoch (s)", "peak RSS above baseline (MB)")
#: The quantity of a way's row at a total where its first process took over the timeout.
SKIPPED = "skipped"
#: The totals of the ways of mixing's first index (the finding's own, then larger).
WAY_SIZES = (14_380, 10**6)
#: Seconds a way's probe process may take (imports and warm-up included) before the way is
#: recorded as skipped at that total.
WAY_TIMEOUT = 30.0
#: The total of a way's warm-up: half the finding's, so that each source has at least
#: ``SHARDS`` samples (a streamed source is split in that many shards).
WAY_WARM_UP = 7_190


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
    """Time and traced memory from constructing the sampler to its first index, the
    mixing period computed afresh each time (as far as the first index needs it), and
    the time to compute the whole period."""
    datasets, weights = sources(total)
    segment_parts = parts(weights)

    def whole() -> None:
        period.cache_clear()
        period(segment_parts).ensure(sum(segment_parts))

    built = _timed(whole, 3)

    def first() -> None:
        period.cache_clear()
        sampler = DistributedMixtureSampler(datasets, weights, WORLD, RANK, epoch_length=total)
        next(iter(sampler))

    fresh = _timed(first, 5)
    tracemalloc.start()
    first()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "total": total,
        "period": sum(segment_parts),
        "the whole period, CPU / wall (ms)": [round(built[0] * 1e3, 1), round(built[1] * 1e3, 1)],
        "first index, period afresh, CPU / wall (ms)": [
            round(fresh[0] * 1e3, 1),
            round(fresh[1] * 1e3, 1),
        ],
        "traced peak to the first index (KiB)": round(peak / 1024, 1),
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


def _iterator(variant: str, total: int, world: int, seed: int = 0) -> Callable[[], Iterator[int]]:
    """A function that builds rank ``world - 1``'s sampler over :func:`sources` of ``seed``
    (or the floor's held list, built here, before any clock) and returns its iterator."""
    rank = world - 1
    datasets, weights = sources(total, seed)
    if variant == "ours":
        return lambda: iter(DistributedMixtureSampler(datasets, weights, world, rank))
    if variant == "stock":
        concat: ConcatDataset[int] = ConcatDataset(datasets)  # type: ignore[arg-type]
        return lambda: iter(StockSampler(concat, world, rank))
    if variant == "floor":
        held = list(range(rank, total, world))
        return lambda: iter(held)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def _reset_peak(psutil: Any) -> int:
    """The resident set now (the baseline), the kernel's high-water mark reset to it where
    Linux allows (``/proc/self/clear_refs``), so that the warm-up's peak is not counted."""
    with contextlib.suppress(OSError):  # elsewhere the peak is the process's, warm-up included
        Path("/proc/self/clear_refs").write_text("5")
    rss: int = psutil.Process().memory_info().rss
    return rss


def probe(variant: str, total: int, world: int, epoch: bool) -> dict[str, float]:
    """One measurement in this process (see the module docstring): the time to the first
    index, to the last one when ``epoch``, and the peak resident memory above the
    baseline."""
    import psutil

    torch.set_num_threads(THREADS)
    for _ in _iterator(variant, 1000, world, seed=1)():
        pass  # warm-up (other weights: nothing measured below is cached by it)
    build = _iterator(variant, total, world)
    gc.collect()  # as in the main benchmark: no collection owed by earlier work on the clock
    baseline = _reset_peak(psutil)
    start = time.perf_counter()
    iterator = build()
    next(iterator)
    first = time.perf_counter()
    if epoch:
        for _ in iterator:
            pass
    end = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    measured = {QUANTITIES[0]: first - start, QUANTITIES[2]: max(peak - baseline, 0) / 10**6}
    if epoch:
        measured[QUANTITIES[1]] = end - start
    return measured


def scaled(total: int) -> tuple[int, ...]:
    """The mixtures finding's source sizes scaled to ``total`` samples (each at least 1)."""
    from studies.mixtures import ways as mixture_ways

    sizes = [max(1, round(n * total / sum(mixture_ways.SIZES))) for n in mixture_ways.SIZES]
    sizes[-1] += total - sum(sizes)
    return tuple(sizes)


def _use_sizes(total: int) -> Any:
    """Set the mixtures finding's sources to :func:`scaled` ``(total)`` in this process
    (the ways' builders read ``SIZES``, ``OFFSETS`` and ``LENGTH`` from
    :mod:`studies.mixtures.ways`; a probe is a process of its own) and forget the sources
    and mixes built for other sizes."""
    import numpy as np

    from studies.mixtures import ways as mixture_ways

    mixture_ways.SIZES = scaled(total)
    mixture_ways.LENGTH = total
    mixture_ways.OFFSETS = np.cumsum((0, *mixture_ways.SIZES[:-1]))
    mixture_ways.hf_sources.cache_clear()
    mixture_ways.hf_dataset_mix.cache_clear()
    return mixture_ways


def probe_way(name: str, total: int, world: int) -> dict[str, float]:
    """One way of mixing of the mixtures finding (``BUILDERS[name]``) on rank ``world - 1``
    over its sources at ``total`` samples, in this process: the time from building the
    sampler to its first index and the peak resident memory above the baseline (taken
    after the warm-up and after the sources are built)."""
    import psutil

    torch.set_num_threads(THREADS)
    ways_of_mixing = _use_sizes(WAY_WARM_UP)
    for _ in ways_of_mixing.BUILDERS[name](world, world - 1):
        pass  # warm-up: imports and first calls, on other sizes (nothing below is cached)
    ways_of_mixing = _use_sizes(total)
    build = ways_of_mixing.BUILDERS[name]
    if name.startswith("datasets: "):
        ways_of_mixing.hf_sources(False)  # the sources (a user's datasets), before the clock
        ways_of_mixing.hf_sources(True)
    gc.collect()
    baseline = _reset_peak(psutil)
    start = time.perf_counter()
    next(iter(build(world, world - 1)))
    first = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {QUANTITIES[0]: first - start, QUANTITIES[2]: max(peak - baseline, 0) / 10**6}


def _in_fresh_process(arguments: list[str], timeout: float) -> dict[str, float]:
    """This module run with ``arguments`` in a fresh interpreter
    (:func:`studies.bench.probe.in_fresh_interpreter`), its last line of output read as
    JSON; ``subprocess.TimeoutExpired`` after ``timeout`` seconds, the probe killed."""
    done = in_fresh_interpreter("studies.mixtures.bench", arguments, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments)} failed:\n{done.stderr}")
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def measure_way_in_fresh_process(
    name: str, total: int, world: int, timeout: float = WAY_TIMEOUT
) -> dict[str, float]:
    """:func:`probe_way` in a new interpreter (as :func:`measure_in_fresh_process`);
    raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    return _in_fresh_process(["--probe-way", name, str(total), str(world)], timeout)


def measure_in_fresh_process(
    variant: str, total: int, world: int, epoch: bool, timeout: float = 600
) -> dict[str, float]:
    """:func:`probe` in a new interpreter, started through a small launcher (``python
    -S``) so that it does not inherit this process's memory high-water mark."""
    return _in_fresh_process(["--probe", variant, str(total), str(world), str(int(epoch))], timeout)


def _rows(
    variant: str, total: int, world: int, runs: list[dict[str, float]]
) -> list[dict[str, Any]]:
    rows = []
    for quantity in QUANTITIES:
        values = [measured[quantity] for measured in runs if quantity in measured]
        if values:
            rows.append(
                {
                    "variant": variant,
                    "total": total,
                    "world size": world,
                    "quantity": quantity,
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                    "processes": len(values),
                }
            )
    return rows


def record(
    epoch_sizes: Sequence[int] = EPOCH_SIZES,
    first_index_sizes: Sequence[int] = FIRST_INDEX_SIZES,
    repeats: int = REPEATS,
    world_sizes: Sequence[int] = WORLD_SIZES,
) -> dict[str, Any]:
    """Measure the grid (see the module docstring) in fresh processes; what :func:`load`
    reads."""
    import psutil

    rows: list[dict[str, Any]] = []
    for total in epoch_sizes:
        for world in world_sizes:
            for variant in VARIANTS:
                runs = [
                    measure_in_fresh_process(variant, total, world, True) for _ in range(repeats)
                ]
                rows += _rows(variant, total, world, runs)
                print(f"{variant} at {total:,} on {world}: done", file=sys.stderr)
    for total in first_index_sizes:
        runs = [measure_in_fresh_process("ours", total, WORLD, False) for _ in range(repeats)]
        rows += [
            {**row, "quantity": f"{row['quantity']}, first index only"}
            for row in _rows("ours", total, WORLD, runs)
        ]
        print(f"ours' first index at {total:,}: done", file=sys.stderr)
    measured_ways = ways(repeats=repeats)
    return {**_machine(psutil), "processes": repeats, "rows": rows, "ways": measured_ways}


def ways(
    sizes: Sequence[int] = WAY_SIZES,
    repeats: int = REPEATS,
    timeout: float = WAY_TIMEOUT,
    names: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The first index of every way of mixing of the mixtures finding at every total of
    ``sizes`` on rank ``WORLD - 1`` of :data:`WORLD` (see the module docstring): rows as
    :func:`_rows` gives them, the way's name as ``variant``, or one row with the quantity
    ``"skipped"`` and the ``timeout`` when its first process did not finish in time (a
    later one that does not is left out: its rows' ``processes`` count the rest).
    ``names`` picks some of the ways (all of them when empty)."""
    from studies.mixtures import ways as mixture_ways

    rows: list[dict[str, Any]] = []
    for total in sizes:
        for name in names or mixture_ways.BUILDERS:
            runs = []
            try:
                for _ in range(repeats):
                    runs.append(measure_way_in_fresh_process(name, total, WORLD, timeout))
            except subprocess.TimeoutExpired:
                if not runs:
                    rows.append(
                        {
                            "variant": name,
                            "total": total,
                            "world size": WORLD,
                            "quantity": SKIPPED,
                            "timeout (s)": timeout,
                        }
                    )
            rows += _rows(name, total, WORLD, runs)
            print(f"{name} at {total:,}: {len(runs)} processes", file=sys.stderr)
    return rows


def _machine(psutil: Any) -> dict[str, Any]:
    return {
        "machine": {
            **_machine_facts(),
            "load average (1, 5, 15 min) at the end": [round(v, 2) for v in os.getloadavg()],
        },
        "threads": THREADS,
        "sources": SOURCES,
    }


def load(path: Path = RECORDED) -> dict[str, Any]:
    """The recorded run."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def in_process() -> None:
    """The bounded in-process measurement (see the module docstring), printed, on
    :data:`THREADS` intra-op thread(s) as the recorded one."""
    torch.set_num_threads(THREADS)
    print(f"load average: {os.getloadavg()}, torch threads: {torch.get_num_threads()}")
    print(json.dumps([first_index(10**6), first_index(10**9)], indent=1))
    for total in (10**6, 10**7):
        for world in (WORLD, 1):
            print(json.dumps(whole_epoch(total, world)))
    print(f"load average: {os.getloadavg()}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--record", action="store_true", help=f"record to {RECORDED.name}")
    parser.add_argument("--probe", nargs=4, metavar=("VARIANT", "TOTAL", "WORLD", "EPOCH"))
    parser.add_argument("--probe-way", nargs=3, metavar=("NAME", "TOTAL", "WORLD"))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--out", type=Path, default=RECORDED)
    arguments = parser.parse_args(argv)
    if arguments.probe:
        variant, total, world, epoch = arguments.probe
        print(json.dumps(probe(variant, int(total), int(world), bool(int(epoch)))))
    elif arguments.probe_way:
        name, total, world = arguments.probe_way
        print(json.dumps(probe_way(name, int(total), int(world))))
    elif arguments.record:
        recorded = record(repeats=arguments.repeats)
        arguments.out.write_text(json.dumps(recorded, indent=1) + "\n")
        print(f"written to {arguments.out}", file=sys.stderr)
    else:
        in_process()


def _machine_facts() -> dict[str, Any]:
    from studies.bench.record import machine_facts  # pandas only when recording

    return machine_facts()


if __name__ == "__main__":
    main()
