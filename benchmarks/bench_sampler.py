"""Wall-clock and resident-memory cost of the stock sampler against ours, measured once.

Prints, for each dataset size, the time to the first index, the time for a whole epoch on
one rank, and the extra peak resident memory of a process iterating one epoch, each for
both samplers and as a ratio ours / stock. These numbers depend on the machine and the
run, which is why they are printed here and never written to ``reports/`` (the report's
``cost`` finding records only deterministic byte counts).

Run from the project root::

    python benchmarks/bench_sampler.py                  # 10**4 .. 10**7, 8 ranks
    python benchmarks/bench_sampler.py --sizes 100000 --repeats 5 --no-rss
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tabulate import tabulate  # noqa: E402

from studies.cases import Case, Implementation  # noqa: E402
from studies.simulate import IndexDataset, make_sampler  # noqa: E402

IMPLEMENTATIONS: tuple[Implementation, ...] = ("torch", "samplers")


def build(size: int, world_size: int, implementation: Implementation) -> object:
    """The last rank's sampler: shuffle on, seed 0, epoch 0."""
    case = Case(size, world_size, 1, implementation=implementation)
    return make_sampler(case, IndexDataset(size), world_size - 1)


def timings(size: int, world_size: int, implementation: Implementation, repeats: int) -> dict:
    """Best-of-``repeats`` seconds to the first index and for the whole epoch."""
    first, epoch = float("inf"), float("inf")
    for _ in range(repeats):
        sampler = build(size, world_size, implementation)
        start = time.perf_counter()
        iterator = iter(sampler)  # type: ignore[call-overload]
        next(iterator, None)
        first = min(first, time.perf_counter() - start)
        sampler = build(size, world_size, implementation)
        start = time.perf_counter()
        for _ in sampler:  # type: ignore[attr-defined]
            pass
        epoch = min(epoch, time.perf_counter() - start)
    return {"first": first, "epoch": epoch}


def extra_peak_rss_kib(size: int, world_size: int, implementation: Implementation) -> int:
    """Peak resident memory a fresh process gains while iterating one epoch (KiB)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(size), str(world_size), implementation],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return int(json.loads(done.stdout)["extra_kib"])


def _peak_rss_kib() -> int:
    """This process's peak resident set (KiB).

    ``VmHWM`` from ``/proc`` where there is one: ``ru_maxrss`` survives ``exec`` on Linux,
    so a child started by a large parent would report the parent's peak.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(size: int, world_size: int, implementation: Implementation) -> None:
    sampler = build(size, world_size, implementation)
    before = _peak_rss_kib()
    for _ in sampler:  # type: ignore[attr-defined]
        pass
    print(json.dumps({"extra_kib": _peak_rss_kib() - before}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS processes")
    parser.add_argument(
        "--child", nargs=3, metavar=("SIZE", "WORLD", "IMPL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        size, world, implementation = args.child
        _child(int(size), int(world), implementation)
        return 0
    if args.world_size < 1 or args.repeats < 1 or min(args.sizes) < 1:
        parser.error(
            f"--world-size, --repeats and --sizes must be at least 1, got {args.world_size}, "
            f"{args.repeats} and {args.sizes}"
        )
    rows = []
    for size in args.sizes:
        measured = {
            name: timings(size, args.world_size, name, args.repeats) for name in IMPLEMENTATIONS
        }
        row = {
            "dataset size": f"{size:,}",
            "first index, stock (ms)": 1e3 * measured["torch"]["first"],
            "first index, ours (ms)": 1e3 * measured["samplers"]["first"],
            "first index: ours/stock": measured["samplers"]["first"] / measured["torch"]["first"],
            "epoch, stock (ms)": 1e3 * measured["torch"]["epoch"],
            "epoch, ours (ms)": 1e3 * measured["samplers"]["epoch"],
            "epoch: ours/stock": measured["samplers"]["epoch"] / measured["torch"]["epoch"],
        }
        if not args.no_rss:
            rss = {
                name: extra_peak_rss_kib(size, args.world_size, name) for name in IMPLEMENTATIONS
            }
            row["extra peak RSS, stock (MiB)"] = rss["torch"] / 1024
            row["extra peak RSS, ours (MiB)"] = rss["samplers"] / 1024
            row["RSS: ours/stock"] = (
                rss["samplers"] / rss["torch"] if rss["torch"] else float("nan")
            )
        rows.append(row)
        print(f"measured {size:,}", file=sys.stderr)
    print(
        f"rank {args.world_size - 1} of {args.world_size}, shuffle on, best of {args.repeats}; "
        "one run on this machine, not a stable benchmark"
    )
    formats = [".3f" if "ours/stock" in key else ",.1f" for key in rows[0]]
    print(tabulate(rows, headers="keys", floatfmt=formats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
