"""The ``dsampler`` command: ``explain`` one case, or write the ``report``.

``dsampler explain --dataset-size 10 --world-size 2 --batch-size 4`` shows, epoch by
epoch and rank by rank, the batches each rank's DataLoader yields, then the case's
summary and what is wrong with it and how to fix it. ``--format csv|json`` prints the
tidy table instead (``studies.simulate.COLUMNS``). ``--launch`` runs real processes
(``studies.launch.run_case``) instead of simulating; the output is the same either way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from studies.bench import cli as bench
from studies.cases import IMPLEMENTATIONS, Case
from studies.simulate import case_rows, frame
from studies.summary import SUMMARY_COLUMNS, summarize
from studies.tables import to_csv_text, to_json_text
from studies.verdicts import verdicts

__all__ = ["build_parser", "main", "render_table"]

FORMATS = ("table", "csv", "json")

#: explain lists every batch of every rank; past this it is a table nobody reads.
EXPLAIN_MAX_DATASET_SIZE = 100_000

#: The Case field each ``explain`` option sets, so Case's errors can name the option.
_OPTIONS = {field.name: f"--{field.name.replace('_', '-')}" for field in fields(Case)}


def build_parser() -> argparse.ArgumentParser:
    """The ``dsampler`` argument parser with its ``explain`` and ``report`` subcommands."""
    parser = argparse.ArgumentParser(
        prog="dsampler",
        description="What DistributedSampler + DataLoader hand each rank.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    explain = commands.add_parser(
        "explain",
        help="show what every rank receives for one configuration, and what to fix",
        description="Show what every rank's DataLoader yields for one configuration.",
    )
    explain.set_defaults(command_parser=explain)  # so errors show this command's usage
    explain.add_argument("--dataset-size", type=int, required=True, help="samples in the dataset")
    explain.add_argument("--world-size", type=int, required=True, help="number of ranks")
    explain.add_argument("--batch-size", type=int, required=True, help="DataLoader batch size")
    explain.add_argument("--epochs", type=int, default=2, help="epochs to run (default 2)")
    explain.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    explain.add_argument("--no-shuffle", action="store_true", help="sampler shuffle=False")
    explain.add_argument("--drop-last", action="store_true", help="sampler drop_last=True")
    explain.add_argument(
        "--loader-drop-last", action="store_true", help="DataLoader drop_last=True"
    )
    explain.add_argument(
        "--no-set-epoch", action="store_true", help="do not call sampler.set_epoch(epoch)"
    )
    explain.add_argument(
        "--implementation",
        choices=IMPLEMENTATIONS,
        default="torch",
        help="torch's sampler, ours (samplers), or none (no sampler); default torch",
    )
    explain.add_argument("--format", choices=FORMATS, default="table", help="default table")
    explain.add_argument(
        "--launch", action="store_true", help="run real processes instead of simulating"
    )
    explain.add_argument(
        "--num-workers", type=int, default=0, help="DataLoader num_workers (default 0)"
    )

    report = commands.add_parser(
        "report",
        help="write the study's reports",
        description="Run the study grid and write its reports.",
    )
    report.add_argument(
        "--output", type=Path, default=Path("reports"), help="directory (default ./reports)"
    )
    report.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dsampler`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Never raises ``SystemExit``: bad options print a message naming the option and the
    value to stderr and return 2; a case that cannot be run returns 1.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "explain":
            return _explain(args.command_parser, args)
        if args.command == "bench":
            return bench.run(args)
        return _report(args)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)


def _explain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.num_workers < 0:
        parser.error(f"--num-workers must be at least 0, got {args.num_workers}")
    if args.dataset_size > EXPLAIN_MAX_DATASET_SIZE:
        parser.error(
            f"--dataset-size must be at most {EXPLAIN_MAX_DATASET_SIZE} for explain, which "
            f"lists every batch, got {args.dataset_size}"
        )
    case = _case(parser, args)
    try:
        if args.launch:
            from studies.launch import run_case

            rows = run_case(case, num_workers=args.num_workers)
        else:
            rows = frame(case_rows(case, num_workers=args.num_workers))
    except (RuntimeError, ValueError) as error:
        print(f"dsampler explain: error: cannot run the case: {error}", file=sys.stderr)
        return 1
    if args.format == "csv":
        sys.stdout.write(to_csv_text(rows))
    elif args.format == "json":
        sys.stdout.write(to_json_text(rows))
    else:
        sys.stdout.write(render_table(case, rows))
    return 0


def _case(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Case:
    """The Case the options describe; Case's own validation, reported by option name."""
    try:
        return Case(
            dataset_size=args.dataset_size,
            world_size=args.world_size,
            batch_size=args.batch_size,
            shuffle=not args.no_shuffle,
            seed=args.seed,
            drop_last=args.drop_last,
            loader_drop_last=args.loader_drop_last,
            set_epoch=not args.no_set_epoch,
            epochs=args.epochs,
            implementation=args.implementation,
        )
    except (TypeError, ValueError) as error:
        message = str(error)
        name = message.split(" ", 1)[0]
        if name in _OPTIONS:
            message = _OPTIONS[name] + message[len(name) :]
        parser.error(message)


def render_table(case: Case, rows: pd.DataFrame) -> str:
    """The human-readable explanation of one case from its tidy rows.

    Per epoch, one line per batch of every rank (a rank without batches says so), then
    the summary numbers, then each verdict with its fix, or "No problems found.".
    """
    settings = ", ".join(f"{name}={value}" for name, value in case.key().items())
    parts = [f"Case: {settings}, epochs={case.epochs}"]
    listing = rows.sort_values(["epoch", "rank", "batch"])
    for epoch in range(case.epochs):
        lines: list[list[Any]] = []
        this_epoch = listing[listing["epoch"] == epoch]
        for rank in range(case.world_size):
            mine = this_epoch[this_epoch["rank"] == rank]
            if mine.empty:
                lines.append([rank, "-", 0, "(no batches)"])
            for batch, indices in zip(mine["batch"], mine["indices"], strict=True):
                lines.append([rank, batch, len(indices), list(indices)])
        table = tabulate(lines, headers=["rank", "batch", "size", "indices"], disable_numparse=True)
        parts.append(f"Epoch {epoch}\n{table}")
    summary = summarize([case], rows).iloc[0]
    numbers = tabulate([[name, summary[name]] for name in SUMMARY_COLUMNS], tablefmt="plain")
    parts.append(f"Summary (epoch 0 unless stated)\n{numbers}")
    found = verdicts(case, summary)
    if found:
        items = [f"- [{v.name}] {v.finding}\n  Fix: {v.fix}" for v in found]
        parts.append("Findings\n" + "\n".join(items))
    else:
        parts.append("No problems found.")
    return "\n\n".join(parts) + "\n"


def _report(args: argparse.Namespace) -> int:
    from studies.report import write_reports

    progress = not args.no_progress and sys.stderr.isatty()
    for path in write_reports(output=args.output, progress=progress):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
