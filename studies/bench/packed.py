"""The packed samplers at scale: the packed sampler and the packed mixture against the token
sampler, each in fresh processes, recorded.

What is measured (:data:`VARIANTS`), rank ``W - 1`` of ``W`` = :data:`WORLD_SIZE`, over
``N`` lognormal lengths (:func:`lengths`: the token benchmark's distribution, log-mean 6,
sigma 0.9, clamped to ``1..`` :data:`MAX_LENGTH`, drawn here):

* ``token``: ``DistributedTokenBatchSampler(lengths, MAX_LENGTH * ROWS_PER_BATCH, W, r)``,
  the reference of issue 40's target ("whole epoch within 2x of the token sampler at the
  same sizes");
* ``packed``: ``DistributedPackedBatchSampler(lengths, MAX_LENGTH, ROWS_PER_BATCH, W, r)``;
* ``packed mixture``: ``DistributedPackedMixtureSampler`` over :data:`SOURCES` sources whose
  sizes span three orders of magnitude (:func:`sources`, the mixture benchmark's draw),
  the same lengths, weights in tokens, rows as ``packed`` (issue 37's target: "within 2x
  of the packed sampler on one source").

``python -m studies.bench.packed --record`` measures every variant at every size of
:data:`SIZES`, :data:`REPEATS` fresh processes each (``--sizes``, ``--variants`` and
``--repeats`` narrow it; ``--out`` writes elsewhere), and writes the medians, ranges and
the machine's facts to :data:`RECORDED`, which the speed finding shows (it says "not yet
recorded" while there is none); nothing is timed when the reports are built. Without
``--record`` it prints one tiny run in this process (a check that everything builds).

How a process measures (``--probe``, started by
:func:`studies.bench.probe.in_fresh_interpreter` so that it does not inherit the measuring
process's memory high-water mark): it imports everything, draws the lengths (and the
sources), runs a warm-up on 1,000 samples on :data:`THREADS` intra-op thread and a full
garbage collection, takes its baseline resident set (psutil), then times building the
sampler and ``iter()`` to the first batch and on to the last (the rank's whole epoch); the
peak is the kernel's high-water mark (``ru_maxrss``) minus the baseline.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from studies.bench.probe import in_fresh_interpreter, timed_epoch

__all__ = [
    "MAX_LENGTH",
    "QUANTITIES",
    "RECORDED",
    "ROWS_PER_BATCH",
    "SIZES",
    "SOURCES",
    "VARIANTS",
    "WORLD_SIZE",
    "lengths",
    "load",
    "measure_in_fresh_process",
    "probe",
    "record",
    "sources",
]

RECORDED = Path(__file__).resolve().parents[1] / "data" / "packed-bench.json"
VARIANTS = ("token", "packed", "packed mixture")
SIZES = (10**6, 10**7, 10**8)
WORLD_SIZE = 8
#: A row's tokens (the longest length drawn) and the rows of a batch: the token sampler's
#: budget is their product, the token benchmark's 16,384.
MAX_LENGTH = 4096
ROWS_PER_BATCH = 4
SOURCES = 100
REPEATS = 3
#: torch's intra-op threads in each measuring process (as the other benchmarks).
THREADS = 1
QUANTITIES = ("first batch (s)", "whole epoch (s)", "peak RSS above baseline (MB)")
#: Samples drawn at a time (the lengths of 10**8 samples are drawn in chunks).
_CHUNK = 1 << 20


class Sized:
    """A source of ``n`` samples that holds nothing."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def lengths(size: int, seed: int = 0) -> torch.Tensor:
    """``size`` lognormal lengths (log-mean 6, sigma 0.9, rounded, clamped to
    ``1..MAX_LENGTH``), int64, drawn a chunk at a time."""
    generator = torch.Generator().manual_seed(seed)
    out = torch.empty(size, dtype=torch.int64)
    for start in range(0, size, _CHUNK):
        count = min(_CHUNK, size - start)
        normal = torch.randn(count, generator=generator, dtype=torch.float64)
        out[start : start + count] = torch.exp(normal * 0.9 + 6.0).round().clamp(1, MAX_LENGTH)
    return out


def sources(total: int, seed: int = 0) -> tuple[list[Sized], list[float]]:
    """:data:`SOURCES` sources of ``total`` samples, sizes log-uniform over three orders of
    magnitude, and a random weight each (the mixture benchmark's draw)."""
    generator = random.Random(seed)
    raw = [10 ** generator.uniform(0, 3) for _ in range(SOURCES)]
    sizes = [max(1, int(total * r / sum(raw))) for r in raw]
    sizes[-1] += total - sum(sizes)
    weights = [generator.random() for _ in range(SOURCES)]
    return [Sized(n) for n in sizes], weights


def _builder(variant: str, size: int, seed: int = 0) -> Callable[[], Iterator[Any]]:
    """A function that builds rank ``W - 1``'s sampler over inputs drawn here (before any
    clock) and returns its batch iterator."""
    from samplers import (
        DistributedPackedBatchSampler,
        DistributedPackedMixtureSampler,
        DistributedTokenBatchSampler,
    )

    drawn, rank = lengths(size, seed), WORLD_SIZE - 1
    if variant == "token":
        budget = MAX_LENGTH * ROWS_PER_BATCH
        return lambda: iter(DistributedTokenBatchSampler(drawn, budget, WORLD_SIZE, rank))
    if variant == "packed":
        return lambda: iter(
            DistributedPackedBatchSampler(drawn, MAX_LENGTH, ROWS_PER_BATCH, WORLD_SIZE, rank)
        )
    if variant == "packed mixture":
        datasets, weights = sources(size, seed)
        return lambda: iter(
            DistributedPackedMixtureSampler(
                datasets, weights, drawn, MAX_LENGTH, ROWS_PER_BATCH, WORLD_SIZE, rank
            )
        )
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def probe(variant: str, size: int) -> dict[str, float]:
    """One measurement in this process (see the module)."""
    torch.set_num_threads(THREADS)
    for _ in _builder(variant, 1000, seed=1)():
        pass  # warm-up: imports and first calls, on other lengths
    measured = timed_epoch(_builder(variant, size))
    return dict(zip(QUANTITIES, measured, strict=True))


def measure_in_fresh_process(variant: str, size: int, timeout: float = 3600) -> dict[str, float]:
    """:func:`probe` in a new interpreter; ``RuntimeError`` with its stderr if it fails."""
    # Named, not __name__: run as ``python -m studies.bench.packed`` this module is __main__.
    done = in_fresh_interpreter("studies.bench.packed", ["--probe", variant, str(size)], timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} at {size:,} failed:\n{done.stderr}")
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def record(
    sizes: Sequence[int] = SIZES,
    variants: Sequence[str] = VARIANTS,
    repeats: int = REPEATS,
    measure: Callable[[str, int], dict[str, float]] = measure_in_fresh_process,
) -> dict[str, Any]:
    """Every variant at every size, ``repeats`` processes each, the variants in turn within
    each repeat (so that a change in the machine's load falls on all alike); the record
    :func:`load` reads."""
    from studies.bench.record import machine_facts

    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for size in sizes:
        for _ in range(repeats):
            for variant in variants:
                runs.setdefault((variant, size), []).append(measure(variant, size))
        print(f"{size:,}: done", file=sys.stderr)
    rows = []
    for (variant, size), measured in runs.items():
        for quantity in QUANTITIES:
            values = [m[quantity] for m in measured]
            rows.append(
                {
                    "variant": variant,
                    "size": size,
                    "quantity": quantity,
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                    "processes": len(values),
                }
            )
    return {
        "machine": machine_facts(),
        "threads": THREADS,
        "world size": WORLD_SIZE,
        "rank": WORLD_SIZE - 1,
        "max_length": MAX_LENGTH,
        "rows_per_batch": ROWS_PER_BATCH,
        "sources": SOURCES,
        "rows": rows,
    }


def load(path: Path = RECORDED) -> dict[str, Any] | None:
    """The recorded run, or ``None`` when none is recorded yet."""
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--probe", nargs=2, metavar=("VARIANT", "SIZE"))
    parser.add_argument("--record", action="store_true", help=f"record to {RECORDED.name}")
    parser.add_argument("--sizes", type=float, nargs="+", default=list(SIZES))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--out", type=Path, default=RECORDED)
    arguments = parser.parse_args(argv)
    if arguments.probe:
        variant, size = arguments.probe
        print(json.dumps(probe(variant, int(float(size)))))
    elif arguments.record:
        sizes = [int(size) for size in arguments.sizes]
        made = record(sizes, arguments.variants, arguments.repeats)
        arguments.out.write_text(json.dumps(made, indent=1) + "\n")
        print(f"written to {arguments.out}", file=sys.stderr)
    else:
        for variant in VARIANTS:
            print(variant, json.dumps(probe(variant, 10_000)))


if __name__ == "__main__":
    main()
