"""Time and memory to plan an epoch of token batches: ours and the three others, recorded.

Run ``python -m studies.tokens.bench`` (several minutes; at 10**8 samples the stock
sampler's process needs about 5 GB, as the record shows; ``--sizes``, ``--samplers``,
``--repeats`` and ``--merge`` add rows to the record): for each sampler of
:mod:`studies.tokens.batching` and each dataset size (the samplers that sort the whole
epoch up to :data:`LARGEST` samples), fresh processes each build rank ``W - 1``'s
sampler for ``W`` = :data:`WORLD_SIZE` over lognormal lengths and measure the time to
its first batch, the time to its last batch (the rank's whole epoch), and the peak
resident memory above the process's baseline. Medians (and the range) over the processes
are written with the machine's facts to :data:`RECORDED`, which the token-batches finding
shows; nothing there is timed when the reports are built.

How a process measures (``--probe``, started through a small launcher so that it does
not inherit the measuring process's memory high-water mark): it imports everything,
prepares the sampler's input as its users hold it (a tensor of lengths; a list of ints
for transformers' sampler), runs a small warm-up on :data:`THREADS` intra-op thread and
a full garbage collection (as the main benchmark does), then takes its baseline resident
set (psutil), and refuses to go on if its high-water mark is already above that by more
than :data:`SLACK`. The clock runs from building the sampler to the first batch, and on
to the last one; the peak is the kernel's high-water mark (``ru_maxrss``) after the
epoch minus the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from studies.bench.probe import in_fresh_interpreter, timed_epoch

__all__ = [
    "LARGEST",
    "QUANTITIES",
    "RECORDED",
    "SIZES",
    "WORLD_SIZE",
    "load",
    "measure_in_fresh_process",
    "probe",
    "run",
]

RECORDED = Path(__file__).resolve().parents[1] / "data" / "token-bench.json"
SIZES = (10**6, 10**7, 10**8)
#: The largest size a sampler is measured at: the ones that sort the whole epoch hold it
#: in Python lists, and at 10**8 samples would take most of the run and its memory.
LARGEST = {"length-grouped": 10**7, "sorted-by-size": 10**7}
WORLD_SIZE = 8
MAX_TOKENS = 16384
REPEATS = 3
#: torch's intra-op threads in each measuring process. One: on a machine whose cores are
#: busy with other work, more threads than free cores make torch's pool wait on itself,
#: which measures the machine's load rather than the samplers.
THREADS = 1
#: How far the high-water mark may exceed the baseline before the sampler is built.
SLACK = 64 * 10**6
QUANTITIES = ("first batch (s)", "whole epoch (s)", "peak RSS above baseline (MB)")
SAMPLERS = ("ours", "stock", "length-grouped", "sorted-by-size")


def _batches(name: str, lengths: Any, size: int, batch_size: int) -> Callable[[], Iterator[Any]]:
    """A function that builds rank ``W - 1``'s sampler and returns its batch iterator."""
    from studies.tokens import batching as token_batching

    rank = WORLD_SIZE - 1
    if name == "ours":
        from samplers import DistributedTokenBatchSampler

        def build() -> Iterator[Any]:
            return iter(DistributedTokenBatchSampler(lengths, MAX_TOKENS, WORLD_SIZE, rank))

    elif name == "stock":
        from torch.utils.data import BatchSampler
        from torch.utils.data.distributed import DistributedSampler

        def build() -> Iterator[Any]:
            indices = range(size)
            sampler: DistributedSampler[int] = DistributedSampler(
                indices,  # type: ignore[arg-type]
                WORLD_SIZE,
                rank,
                seed=0,
            )
            return iter(BatchSampler(sampler, batch_size, drop_last=False))

    elif name == "length-grouped":
        from torch.utils.data import BatchSampler
        from transformers.trainer_pt_utils import DistributedLengthGroupedSampler

        def build() -> Iterator[Any]:
            sampler = DistributedLengthGroupedSampler(
                batch_size, num_replicas=WORLD_SIZE, rank=rank, seed=0, lengths=lengths
            )
            return iter(BatchSampler(sampler, batch_size, drop_last=False))

    elif name == "sorted-by-size":

        def build() -> Iterator[Any]:
            shares = token_batching.sorted_by_size(lengths, WORLD_SIZE, 0, 0, MAX_TOKENS)
            return iter(shares[rank])

    else:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {name!r}")
    return build


def _input(name: str, size: int) -> Any:
    """The sampler's input as its users hold it (the stock sampler takes no lengths)."""
    from studies.tokens.lengths import synthetic_chunks, synthetic_lengths

    if name == "stock":
        return None
    if name == "length-grouped":  # a list, filled a chunk at a time (it never grows)
        values = [0] * size
        start = 0
        for chunk in synthetic_chunks(size):
            values[start : start + chunk.numel()] = chunk.tolist()
            start += chunk.numel()
        return values
    return synthetic_lengths(size)


def probe(name: str, size: int, batch_size: int) -> dict[str, float]:
    """One measurement in this process (see the module), on :data:`THREADS` thread(s)."""
    torch.set_num_threads(THREADS)
    warnings.simplefilter("ignore", UserWarning)
    for _ in _batches(name, _input(name, 1000), 1000, batch_size)():
        pass  # warm-up: one-off imports and initialisation
    build = _batches(name, _input(name, size), size, batch_size)
    measured = timed_epoch(build, SLACK)
    return dict(zip(QUANTITIES, measured, strict=True))


def measure_in_fresh_process(
    name: str, size: int, batch_size: int, timeout: float
) -> dict[str, float]:
    """:func:`probe` in a new interpreter (what :func:`run` records).

    On Linux a process started by ``exec`` inherits the resident high-water mark of the
    process it replaced, so the probe is started through a small launcher interpreter
    (``python -S``, nothing imported): the mark it inherits is the launcher's, below the
    probe's own baseline, whatever the size of the process measuring.
    """
    arguments = ["--probe", name, str(size), str(batch_size)]
    done = in_fresh_interpreter("studies.tokens.bench", arguments, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{name} at {size:,} failed:\n{done.stderr}")
    measured: dict[str, float] = json.loads(done.stdout)
    return measured


def batch_size() -> int:
    """The fixed batch size with ours' mean samples per batch (20,000 lognormal lengths)."""
    from studies.tokens.batching import batch_size_like, ours
    from studies.tokens.lengths import synthetic_lengths

    return batch_size_like(ours(synthetic_lengths(20_000), WORLD_SIZE, 0, 0, MAX_TOKENS))


def run(
    sizes: Sequence[int] = SIZES,
    repeats: int = REPEATS,
    samplers: Sequence[str] = SAMPLERS,
    timeout: float = 900,
) -> dict[str, Any]:
    """Measure every sampler at every size ``repeats`` times; the record :func:`load` reads."""

    fixed = batch_size()
    rows = []
    for size in sizes:
        for name in samplers:
            if size > LARGEST.get(name, size):
                continue
            runs = [measure_in_fresh_process(name, size, fixed, timeout) for _ in range(repeats)]
            for quantity in QUANTITIES:
                values = [measured[quantity] for measured in runs]
                rows.append(
                    {
                        "sampler": name,
                        "size": size,
                        "quantity": quantity,
                        "median": statistics.median(values),
                        "min": min(values),
                        "max": max(values),
                        "processes": repeats,
                    }
                )
            print(f"{name} at {size:,}: done", file=sys.stderr)
    return {
        "machine": _machine_facts(),
        "threads": THREADS,
        "world size": WORLD_SIZE,
        "rank": WORLD_SIZE - 1,
        "max_tokens": MAX_TOKENS,
        "batch size": fixed,
        "rows": rows,
    }


def load(path: Path = RECORDED) -> dict[str, Any]:
    """The recorded run."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--probe", nargs=3, metavar=("SAMPLER", "SIZE", "BATCH_SIZE"))
    parser.add_argument("--sizes", type=float, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    parser.add_argument("--out", type=Path, default=RECORDED)
    parser.add_argument(
        "--merge", action="store_true", help="add the rows to the record at --out (same machine)"
    )
    arguments = parser.parse_args(argv)
    if arguments.probe:
        name, size, fixed = arguments.probe
        print(json.dumps(probe(name, int(size), int(fixed))))
        return
    sizes = [int(size) for size in arguments.sizes]
    record = run(sizes, arguments.repeats, arguments.samplers)
    if arguments.merge:
        previous = load(arguments.out)
        if previous["machine"] != record["machine"]:
            raise SystemExit(
                f"--merge: the record at {arguments.out} is from {previous['machine']}, this "
                f"machine is {record['machine']}"
            )
        replaced = {(row["sampler"], row["size"]) for row in record["rows"]}
        kept = [row for row in previous["rows"] if (row["sampler"], row["size"]) not in replaced]
        record = {**previous, "rows": kept + record["rows"]}
    arguments.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written to {arguments.out}", file=sys.stderr)


def _machine_facts() -> dict[str, Any]:
    from studies.bench.record import machine_facts  # pandas only when recording

    return machine_facts()


if __name__ == "__main__":
    main()
