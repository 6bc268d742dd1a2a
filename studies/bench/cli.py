"""``dsampler bench``: the samplers' speed and memory against the cost of ``randperm``.

``dsampler bench`` measures the stock sampler, ours, bare ``torch.randperm`` (int64 and
int32) and the feistel permutation side by side (:mod:`studies.bench.grid`) and prints
the medians, spreads and ratios; ``--format csv|json`` prints the tidy table instead.
``--output DIR`` also writes the table (``bench.txt``, ``bench.csv`` or ``bench.json``)
and the picture (``bench.png``) there, refusing to replace existing files; it is checked
before anything is measured. ``--record`` measures the report's grid and records the run
for the ``speed`` finding (:mod:`studies.bench.record`).

Every option is bounded, as ``explain`` bounds its inputs, and so is each measuring
process's time (``--timeout``). Ctrl-C or SIGTERM stops the run: the measuring process
and its DataLoader workers are killed before ``dsampler bench`` exits (status 130 or
143), and a measuring process also kills itself at its time limit, should ``dsampler
bench`` itself be killed outright.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.common.interrupts import exit_status, terminated_as_interrupt
from studies.common.options import size

if TYPE_CHECKING:
    from studies.bench.grid import Grid

__all__ = ["DEFAULT_SIZES", "LARGE_SIZES", "add_parser", "output_paths", "run", "settings"]

DEFAULT_SIZES = (10**5, 10**6, 10**7)
#: What ``--large`` adds.
LARGE_SIZES = (10**8, 10**9)
DEFAULT_WORLD_SIZES = (1, 8, 64)
#: The largest dataset size torch can index (int64).
#: The largest dataset measured: the stock sampler holds its epoch's permutation, 8 bytes
#: a sample (80 GB at 10**10), and one measurement may take at most MAX_TIMEOUT.
MAX_SIZE = 10**10
DEFAULT_REPEATS = 3
DEFAULT_NUM_WORKERS = (0, 2)
#: Bounds: fresh processes per measurement, values per list option, ranks (one process
#: measures the last rank), DataLoader workers, and one process's seconds.
MAX_REPEATS = 20
MAX_VALUES = 8
MAX_WORLD_SIZE = 65_536
MAX_NUM_WORKERS = 16
#: The same bound as the default's (``studies.bench.grid.MAX_TIMEOUT``), kept here so that
#: the command line does not import the grid (and pandas) to check its options.
MAX_TIMEOUT = 3600.0
FORMATS = ("table", "csv", "json")
_SUFFIX = {"table": "txt", "csv": "csv", "json": "json"}


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``commands`` (``ArgumentParser.add_subparsers()``)."""
    bench = commands.add_parser(
        "bench",
        help="measure speed and memory: stock sampler, ours, bare randperm, feistel",
        description=(
            "Measure, each in a fresh process, the time to the first index, the time for "
            "the last rank's epoch and the peak RSS above baseline, and the DataLoader's "
            "time to its first batch; print medians, spreads and ratios."
        ),
    )
    bench.set_defaults(bench_parser=bench)
    bench.add_argument(
        "--sizes",
        type=size,
        nargs="+",
        default=list(DEFAULT_SIZES),
        metavar="N",
        help="dataset sizes (default 10**5 10**6 10**7)",
    )
    bench.add_argument("--large", action="store_true", help="also measure 10**8 and 10**9")
    bench.add_argument(
        "--world-sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_WORLD_SIZES),
        metavar="W",
        help="world sizes; the last rank is measured (default 1 8 64)",
    )
    bench.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"fresh processes per measurement (default {DEFAULT_REPEATS})",
    )
    bench.add_argument(
        "--num-workers",
        type=int,
        nargs="+",
        default=list(DEFAULT_NUM_WORKERS),
        metavar="K",
        help="DataLoader num_workers for the first-batch times (default 0 2)",
    )
    bench.add_argument("--format", choices=FORMATS, default="table", help="default table")
    bench.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write the table and bench.png into DIR (existing files are not replaced)",
    )
    bench.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds one measuring process may take (default: 60 plus 5 per million "
        f"samples; at most {MAX_TIMEOUT:g})",
    )
    bench.add_argument(
        "--record",
        action="store_true",
        help="measure the report's grid (the defaults) and record the run for the speed "
        "finding (studies/data/bench_record.json)",
    )
    return bench


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The validated options; ``ValueError`` naming the option and the value otherwise."""
    sizes = list(args.sizes) + (list(LARGE_SIZES) if args.large else [])
    _distinct("--sizes", args.sizes)
    _at_least("--sizes", args.sizes, 1)
    if max(args.sizes) > MAX_SIZE:
        raise ValueError(
            f"--sizes must all be at most 10**10 (the stock sampler's permutation takes 8 "
            f"bytes a sample), got {max(args.sizes)}"
        )
    _at_least("--world-sizes", args.world_sizes, 1)
    _at_most("--world-sizes", args.world_sizes, MAX_WORLD_SIZE)
    _distinct("--world-sizes", args.world_sizes)
    _at_least("--num-workers", args.num_workers, 0)
    _at_most("--num-workers", args.num_workers, MAX_NUM_WORKERS)
    _distinct("--num-workers", args.num_workers)
    for option, values in (
        ("--sizes", sizes),
        ("--world-sizes", args.world_sizes),
        ("--num-workers", args.num_workers),
    ):
        if len(values) > MAX_VALUES:
            raise ValueError(f"{option} takes at most {MAX_VALUES} values, got {len(values)}")
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise ValueError(
            f"--repeats must be at least 1 and at most {MAX_REPEATS}, got {args.repeats}"
        )
    if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT:
        raise ValueError(
            f"--timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {args.timeout}"
        )
    if args.output is not None:
        _check_output(args.output, args.format)
    options = {
        "sizes": tuple(sorted(set(sizes))),
        "world_sizes": tuple(sorted(args.world_sizes)),
        "repeats": args.repeats,
        "num_workers": tuple(sorted(args.num_workers)),
    }
    if args.record:
        from studies.bench.record import GRID, RECORD, RecordError, is_record

        chosen = _grid_options(GRID)
        if options != chosen or args.output is not None:
            raise ValueError(
                "--record measures the report's grid (the defaults): leave out --sizes, "
                "--large, --world-sizes, --repeats, --num-workers and --output"
            )
        if RECORD.exists() and not is_record(RECORD):
            raise ValueError(f"--record: {RECORD} exists and is not a recorded run")
        try:
            _try_writing(RECORD.parent)
        except RecordError as error:
            raise ValueError(f"--record: {error}") from None
    return options


def _grid_options(grid: Any) -> dict[str, Any]:
    """A :class:`studies.bench.grid.Grid`'s options as :func:`settings` returns them."""
    return {
        "sizes": grid.sizes,
        "world_sizes": grid.world_sizes,
        "repeats": grid.repeats,
        "num_workers": grid.num_workers,
    }


def _check_output(directory: Path, format_: str) -> None:
    """``--output`` must be a directory (or creatable) that takes new files, none taken."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--output must be a directory, got the file {directory}")
    taken = [str(path) for path in output_paths(directory, format_) if path.exists()]
    if taken:
        raise ValueError(f"--output {directory} already holds {', '.join(taken)}")
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--output {directory} cannot be created: {existing} is not a directory")
    try:
        _try_writing(existing)
    except Exception as error:
        raise ValueError(f"--output {directory} cannot be written: {error}") from None


def _try_writing(directory: Path) -> None:
    """Create and remove a file in ``directory``; the OS error's reason if that fails."""
    from studies.bench.record import RecordError

    try:
        handle, name = tempfile.mkstemp(prefix=".dsampler-", dir=directory)
    except OSError as error:
        raise RecordError(f"{directory} cannot be written ({error.strerror})") from None
    os.close(handle)
    os.unlink(name)


def output_paths(directory: Path, format_: str) -> tuple[Path, Path]:
    """Where ``--output`` writes the table and the picture."""
    return directory / f"bench.{_SUFFIX[format_]}", directory / "bench.png"


def run(args: argparse.Namespace) -> int:
    """Run ``dsampler bench``; bad options exit through the subcommand's parser (status 2).

    Ctrl-C and SIGTERM end the run with status 130 and 143, after the measuring process
    (and its workers) has been killed.
    """
    try:
        options = settings(args)
    except ValueError as error:
        args.bench_parser.error(str(error))
    try:
        with terminated_as_interrupt():
            return _measure_and_write(args, options)
    except KeyboardInterrupt as interrupt:
        print("dsampler bench: interrupted; the measuring processes were stopped", file=sys.stderr)
        return exit_status(interrupt)


def _measure_and_write(args: argparse.Namespace, options: dict[str, Any]) -> int:
    from tqdm import tqdm

    from studies.bench.grid import Grid, machine_facts, run_grid
    from studies.bench.plot import draw, figure_size
    from studies.bench.tables import render_text, to_csv_text, to_json_text
    from studies.common.figures import render_png

    grid = Grid(**options)
    show = sys.stderr.isatty()
    facts = machine_facts()  # the load average before measuring

    def progress(cells: Any) -> Any:
        return tqdm(cells, desc="bench", unit="process", disable=not show)

    frame = run_grid(grid, progress=progress, timeout=args.timeout)
    if args.record:
        from studies.bench.record import RECORD, record_text, save

        save(record_text(frame, grid, facts))
        print(f"recorded {RECORD}", file=sys.stderr)
    if args.format == "csv":
        text = to_csv_text(frame)
    elif args.format == "json":
        text = to_json_text(frame)
    else:
        text = render_text(frame, header(grid, facts))
    sys.stdout.write(text)
    if args.output is not None:
        table_path, picture_path = output_paths(args.output, args.format)
        args.output.mkdir(parents=True, exist_ok=True)
        picture = render_png(lambda figure: draw(figure, frame), figure_size(len(grid.world_sizes)))
        for path, content in ((table_path, text.encode()), (picture_path, picture)):
            try:
                with path.open("xb") as file:  # never replaces a file
                    file.write(content)
            except FileExistsError:
                print(f"dsampler bench: error: --output: {path} appeared while measuring; "
                      "it was not replaced", file=sys.stderr)  # fmt: skip
                return 1
            print(f"wrote {path}", file=sys.stderr)
    return 0


def header(grid: Grid, facts: dict[str, str]) -> str:
    """The lines above the tables: the machine, and what each number is."""
    machine = ", ".join(f"{name} {value}" for name, value in facts.items())
    return (
        f"Machine: {machine}.\n"
        f"Each cell: the last rank's sampler (seed {grid.seed}, epoch 0), median (min..max) "
        f"of {grid.repeats} fresh processes;\n"
        "ratios divide medians by the stock sampler's (/ stock) and by bare int64 "
        "torch.randperm's (/ floor).\n"
        f"DataLoader: batch size {grid.batch_size}, at world size {grid.loader_world_size}."
    )


def _at_least(option: str, values: list[int], low: int) -> None:
    bad = [value for value in values if value < low]
    if bad:
        raise ValueError(f"{option} must all be at least {low}, got {bad[0]}")


def _at_most(option: str, values: list[int], high: int) -> None:
    bad = [value for value in values if value > high]
    if bad:
        raise ValueError(f"{option} must all be at most {high}, got {bad[0]}")


def _distinct(option: str, values: list[int]) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{option} must not repeat a value, got {values}")
