"""The ``dsampler`` command: ``explain`` one case, ``observe`` it under torchrun, or ``report``.

``dsampler explain --dataset-size 10 --world-size 2 --batch-size 4`` shows, epoch by
epoch and rank by rank, the batches each rank's DataLoader yields, then the case's
summary and what is wrong with it and how to fix it. ``--format csv`` prints the tidy
rows (``studies.core.simulate.COLUMNS``); ``--format json`` one object with the ``rows``, the
``summary`` (``studies.core.summary.COLUMNS``) and the ``verdicts``. ``--summary`` skips the
batches and computes the summary from the sampler's plan (any dataset size), and what
each sampler holds in memory per rank (``studies.core.sampler_memory``; JSON: ``memory``).
``--launch`` runs real local processes (``studies.engines.case_runs``) instead of
simulating; the output is the same either way.

``--sampler tokens|packed|mixture|mixture-batch|mixture-tokens|packed-mixture|wrapper``
explains the token, packed and mixture samplers and the wrapper instead: their options
(``--lengths``, ``--max-tokens``, ``--max-length``, ``--rows-per-batch``, ``--split``,
``--source-sizes``, ``--weights``, ...), checks and output are ``studies.sampler_cli``'s:
every rank's batches with their tokens, rows and fill, or sources against the weights.

``torchrun --nproc-per-node N --no-python dsampler observe ...`` runs the case on the
ranks torchrun started, on any backend and any number of nodes
(``studies.engines.torchrun``); rank 0 prints what ``explain`` prints, the rows marked
``source`` = ``processes``, plus the agreement with the simulation. No other rank writes
to stdout.

``dsampler report`` writes the study's reports into ``--output``: a new or empty
directory, or one it generated before; anything else only with ``--force``
(``studies.report.write_reports`` checks this, and the extras it needs, before it
starts).

Exit status: 0 on success; 2 for bad options (including an ``--output`` that cannot or
may not be written, and ``observe`` outside torchrun) and for ``dsampler`` without a
command (it prints the help); 1 when a case cannot be run (a rank failed) or when the
report lacks an extra; 130 or 143 when ``report`` is interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies import sampler_cli
from studies.bench import cli as bench
from studies.common.options import Parser, size
from studies.core.cases import IMPLEMENTATIONS, SAMPLER_KINDS, TAILS, Case, Implementation
from studies.kit import cli as check_cli

if TYPE_CHECKING:
    import pandas as pd

    from studies.core.verdicts import Verdict

__all__ = ["build_parser", "main", "render_table"]

FORMATS = ("table", "csv", "json")

#: observe's --timeout bound (a week): a process-group timeout must be a finite timedelta.
MAX_TIMEOUT = 7 * 24 * 3600.0

#: explain and observe list every batch of every rank; past this many samples over all
#: epochs (dataset size x epochs), use --summary.
EXPLAIN_MAX_LISTED = 200_000
#: explain builds one DataLoader per rank in this process, and iterates each every epoch:
#: at most this many ranks, and this many DataLoader passes (ranks x epochs).
EXPLAIN_MAX_WORLD_SIZE = 1024
EXPLAIN_MAX_PASSES = 2048
#: --summary keeps a few numbers per rank.
SUMMARY_MAX_WORLD_SIZE = 65_536
#: Dataset indices are int64.
MAX_DATASET_SIZE = 2**63 - 1
#: --summary of a shuffled case with set_epoch and 2+ epochs compares two epochs'
#: permutations: 16 bytes per sample (torch.randperm, int64).
SUMMARY_MAX_PERMUTED = 200_000_000
MAX_EPOCHS = 100
MAX_NUM_WORKERS = 16
#: --launch starts world_size ranks, each with up to num_workers DataLoader workers.
LAUNCH_MAX_PROCESSES = 64
#: Lists longer than this are shown in the table by their distinct values.
_SHOWN_LIST = 16

#: The Case field each option sets, so Case's errors can name the option.
_OPTIONS = {field.name: f"--{field.name.replace('_', '-')}" for field in fields(Case)}
#: What --sampler chooses: the Case's index and batch samplers, or one of the token,
#: packed and mixture samplers and the wrapper (studies.sampler_cli).
SAMPLERS = (*SAMPLER_KINDS, *sampler_cli.KINDS)
#: The bounds of a listing, for studies.sampler_cli.
LIMITS = sampler_cli.Limits(
    listed=EXPLAIN_MAX_LISTED,
    world_size=EXPLAIN_MAX_WORLD_SIZE,
    passes=EXPLAIN_MAX_PASSES,
    epochs=MAX_EPOCHS,
    num_workers=MAX_NUM_WORKERS,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``dsampler`` parser with its ``explain``, ``observe`` and ``report`` commands."""
    parser = Parser(
        prog="dsampler",
        description="What DistributedSampler + DataLoader hand each rank.",
        epilog="Without a command, dsampler prints this help and exits with status 2.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    explain = commands.add_parser(
        "explain",
        help="show what every rank receives for one configuration, and what to fix",
        description="Show what every rank's DataLoader yields for one configuration.",
    )
    _configuration_options(explain, world_size=True)
    explain.add_argument(
        "--summary",
        action="store_true",
        help="only the summary and verdicts, computed from the sampler's plan (any size)",
    )
    explain.add_argument(
        "--launch", action="store_true", help="run real local processes instead of simulating"
    )

    observe = commands.add_parser(
        "observe",
        help="run under torchrun: what every rank of the job receives, and what to fix",
        description=(
            "Run by torchrun on every rank: each rank builds the sampler and DataLoader from "
            "the process group (backend nccl with GPUs, gloo otherwise), the batches are "
            "gathered to rank 0, and rank 0 alone prints what explain prints, plus the "
            "agreement with the simulation. Example: torchrun --standalone "
            "--nproc-per-node 3 --no-python dsampler observe --dataset-size 11 --batch-size 2"
        ),
    )
    _configuration_options(observe, world_size=False)
    observe.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds joining the group and each collective may take (default 300)",
    )

    report = commands.add_parser(
        "report",
        help="write the study's reports",
        description=(
            "Run the study and write its reports into a new or empty directory, or one this "
            "command generated before (it keeps a MANIFEST there)."
        ),
    )
    report.set_defaults(command_parser=report)
    report.add_argument(
        "--output", type=Path, default=Path("reports"), help="directory (default ./reports)"
    )
    report.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty directory this command did not generate",
    )
    report.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    bench.add_parser(commands)
    check_cli.add_parser(commands)
    return parser


def _configuration_options(command: argparse.ArgumentParser, *, world_size: bool) -> None:
    command.set_defaults(command_parser=command)  # so errors show this command's usage
    command.add_argument(
        "--dataset-size",
        type=size,
        help="samples in the dataset (e.g. 1e5); required but for --lengths given as "
        "values or a file, and for mixtures (--source-sizes)",
    )
    if world_size:
        command.add_argument("--world-size", type=int, required=True, help="number of ranks")
    command.add_argument(
        "--batch-size",
        type=int,
        help="DataLoader batch size; required but for the token and packed samplers",
    )
    command.add_argument(
        "--epochs", type=int, default=2, help=f"epochs to run (default 2, at most {MAX_EPOCHS})"
    )
    command.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    command.add_argument("--no-shuffle", action="store_true", help="sampler shuffle=False")
    command.add_argument("--drop-last", action="store_true", help="sampler drop_last=True")
    command.add_argument(
        "--loader-drop-last", action="store_true", help="DataLoader drop_last=True"
    )
    command.add_argument(
        "--no-set-epoch", action="store_true", help="do not call sampler.set_epoch(epoch)"
    )
    command.add_argument(
        "--implementation",
        choices=IMPLEMENTATIONS,
        default=None,
        help="torch's sampler, ours (samplers), or none (no sampler); default torch, or "
        "samplers with --tail or --sampler",
    )
    command.add_argument(
        "--tail",
        choices=TAILS,
        default=None,
        help="ours: pad (as the stock sampler), drop (as its drop_last) or uneven (every "
        "sample once, shares differing by one)",
    )
    command.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=None,
        help="ours: index (a DistributedSampler, batched by the DataLoader; the default), "
        "batch (DistributedBatchSampler, the DataLoader's batch_sampler), wrapper "
        "(DistributedSamplerWrapper over a RandomSampler, or a SequentialSampler with "
        "--no-shuffle), tokens "
        "(DistributedTokenBatchSampler), packed (DistributedPackedBatchSampler), mixture, "
        "mixture-batch, mixture-tokens (DistributedMixture[Batch|TokenBatch]Sampler) or "
        "packed-mixture (DistributedPackedMixtureSampler)",
    )
    command.add_argument("--format", choices=FORMATS, default="table", help="default table")
    command.add_argument(
        "--num-workers",
        type=int,
        default=0,
        help=f"DataLoader num_workers (default 0, at most {MAX_NUM_WORKERS})",
    )
    command.add_argument(
        "--persistent-workers",
        action="store_true",
        help="DataLoader persistent_workers=True (needs --num-workers 1 or more)",
    )
    sampler_cli.add_options(command)


def _version() -> str:
    try:
        return version("dsampler")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dsampler`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Never raises ``SystemExit``: bad options print a message naming the option and the
    value to stderr and return 2; a case that cannot be run returns 1.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        if args.command == "explain":
            return _explain(args.command_parser, args)
        if args.command == "observe":
            return _observe(args.command_parser, args)
        if args.command == "bench":
            return bench.run(args)
        if args.command == "check":
            return check_cli.run(args)
        return _report(args.command_parser, args)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)


# --- explain ---------------------------------------------------------------------------


def _explain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.sampler in sampler_cli.KINDS:
        return sampler_cli.explain(parser, args, LIMITS)
    _check_case_options(parser, args)
    _check_bounds(parser, args)
    if args.summary and (args.tail == "uneven" or args.sampler == "batch"):
        parser.error(
            "--summary computes from the stock layout's plan; --tail uneven and --sampler "
            "batch give ranks different shares: drop --summary to list the batches"
        )
    if args.summary and args.launch:
        parser.error("--summary computes from the plan and --launch runs processes: pick one")
    if args.summary and args.format == "csv":
        parser.error("--format csv lists batches, which --summary skips: use json or table")
    if args.launch:
        processes = args.world_size * (1 + args.num_workers)
        if processes > LAUNCH_MAX_PROCESSES:
            parser.error(
                f"--launch would start {args.world_size} ranks with up to {args.num_workers} "
                f"DataLoader workers each, {processes} processes; at most "
                f"{LAUNCH_MAX_PROCESSES}: lower --world-size or --num-workers"
            )
    case = _case(parser, args, args.world_size)
    if args.summary:
        return _explain_summary(parser, case, args)
    options = _loader_options(parser, args, case)
    from studies.core.simulate import case_rows, frame

    try:
        if args.launch:
            from studies.engines.case_runs import run_case

            rows = run_case(case, **options)
        else:
            rows = frame(case_rows(case, **options))
    except (RuntimeError, ValueError) as error:
        print(f"dsampler explain: error: cannot run the case: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(_output(case, rows, args.format))
    return 0


def _explain_summary(parser: argparse.ArgumentParser, case: Case, args: argparse.Namespace) -> int:
    if case.implementation == "none" and case.shuffle:
        parser.error(
            "--summary reads the sampler's plan, and --implementation none shuffles with the "
            "DataLoader's own generator: add --no-shuffle or drop --summary"
        )
    permutes = case.implementation != "none" and case.shuffle and case.set_epoch
    if permutes and case.epochs > 1 and case.dataset_size > SUMMARY_MAX_PERMUTED:
        parser.error(
            f"--dataset-size must be at most {SUMMARY_MAX_PERMUTED} for --summary of a "
            "shuffled case with set_epoch over 2 or more epochs (it compares both epochs' "
            f"permutations, 16 bytes per sample), got {case.dataset_size}; "
            "add --epochs 1 or --no-shuffle"
        )
    _loader_options(parser, args, case)  # checked, though the plan needs no DataLoader
    from studies.core.plan_summary import planned_summary
    from studies.core.sampler_memory import memory_per_rank
    from studies.core.verdicts import verdicts

    summary = planned_summary(case)
    found = verdicts(case, summary)
    held = memory_per_rank(case)
    if args.format == "json":
        memory = [entry.record() for entry in held]
        records = {"summary": summary, "memory": memory, "verdicts": _verdict_records(found)}
        sys.stdout.write(_json(records))
    else:
        numbers, *verdict_parts = _summary_parts(summary, found)
        lines = [f"{entry.sampler:<25} {entry.text()}" for entry in held]
        memory_part = "Memory per rank, each epoch (computed from the sizes)\n" + "\n".join(lines)
        parts = [_case_line(case), numbers, memory_part, *verdict_parts]
        sys.stdout.write("\n\n".join(parts) + "\n")
    return 0


def _check_case_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The index and batch samplers: what argparse cannot require (the token, packed and
    mixture samplers need neither --dataset-size nor --batch-size), and none of the
    other samplers' options."""
    sampler_cli.refuse(parser, args)
    required = {"dataset_size": "--dataset-size", "batch_size": "--batch-size"}
    missing = [option for name, option in required.items() if getattr(args, name) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")


def _check_bounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Limits that keep a run bounded, checked before anything runs."""
    world = getattr(args, "world_size", None)
    if world is not None and world > SUMMARY_MAX_WORLD_SIZE:
        parser.error(f"--world-size must be at most {SUMMARY_MAX_WORLD_SIZE}, got {world}")
    if args.epochs > MAX_EPOCHS:
        parser.error(f"--epochs must be at most {MAX_EPOCHS}, got {args.epochs}")
    if not 0 <= args.num_workers <= MAX_NUM_WORKERS:
        parser.error(
            f"--num-workers must be at least 0 and at most {MAX_NUM_WORKERS}, "
            f"got {args.num_workers}"
        )
    if args.dataset_size > MAX_DATASET_SIZE:
        parser.error(
            f"--dataset-size must be at most 2**63 - 1 (int64 indices), got {args.dataset_size}"
        )
    if getattr(args, "summary", False):
        return
    hint = "; --summary takes any size" if args.command == "explain" else ""
    if world is not None and world > EXPLAIN_MAX_WORLD_SIZE:
        parser.error(
            f"--world-size must be at most {EXPLAIN_MAX_WORLD_SIZE} for explain, which builds "
            f"a DataLoader per rank, got {world}; --summary takes up to "
            f"{SUMMARY_MAX_WORLD_SIZE}"
        )
    listed = args.dataset_size * max(args.epochs, 1)
    if listed > EXPLAIN_MAX_LISTED:
        parser.error(
            f"{args.command} lists every batch of every epoch: --dataset-size times --epochs "
            f"must be at most {EXPLAIN_MAX_LISTED:,}, got {args.dataset_size} x "
            f"{args.epochs} = {listed:,}{hint}"
        )
    if world is not None and world * max(args.epochs, 1) > EXPLAIN_MAX_PASSES:
        parser.error(
            f"{args.command} iterates one DataLoader per rank every epoch: --world-size "
            f"times --epochs must be at most {EXPLAIN_MAX_PASSES:,}, got {world} x "
            f"{args.epochs} = {world * args.epochs:,}{hint}"
        )


def _loader_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, case: Case
) -> dict[str, Any]:
    """The DataLoader worker options for ``case``, as the real-process run passes them."""
    if args.persistent_workers and args.num_workers == 0:
        parser.error("--persistent-workers needs --num-workers 1 or more, got --num-workers 0")
    from studies.engines.case_runs import Run

    return Run(case, args.num_workers, args.persistent_workers).loader_options()


def _case(parser: argparse.ArgumentParser, args: argparse.Namespace, world_size: int) -> Case:
    """The Case the options describe; Case's own validation, reported by option name.

    ``--tail`` and ``--sampler`` choose ours unless ``--implementation`` says otherwise;
    ``--tail drop`` is the sampler's drop_last.
    """
    ours = args.tail is not None or args.sampler is not None
    implementation: Implementation = args.implementation or ("samplers" if ours else "torch")
    if args.tail in ("pad", "uneven") and args.drop_last:
        parser.error(f"--drop-last contradicts --tail {args.tail}: drop one of them")
    try:
        return Case(
            dataset_size=args.dataset_size,
            world_size=world_size,
            batch_size=args.batch_size,
            shuffle=not args.no_shuffle,
            seed=args.seed,
            drop_last=args.drop_last or args.tail == "drop",
            loader_drop_last=args.loader_drop_last,
            set_epoch=not args.no_set_epoch,
            epochs=args.epochs,
            implementation=implementation,
            tail=args.tail,
            sampler=args.sampler,
        )
    except (TypeError, ValueError) as error:
        message = str(error)
        name = message.split(" ", 1)[0].split("=", 1)[0]
        if name in _OPTIONS:
            message = _OPTIONS[name] + message[len(name) :]
        parser.error(message)


# --- output ------------------------------------------------------------------------------


def _output(
    case: Case,
    rows: pd.DataFrame,
    form: str,
    *,
    source: str | None = None,
    extra: dict[str, Any] | None = None,
    extra_text: str = "",
) -> str:
    """What explain and observe print: the rows, summary and verdicts in ``form``.

    ``source`` marks every row (observe: ``processes``); ``extra`` is added to the JSON
    object and ``extra_text`` appended to the table.
    """
    from studies.core.summary import summarize
    from studies.core.tables import to_csv_text, to_json_records
    from studies.core.verdicts import verdicts

    marked = {"source": source} if source else {}
    if form == "csv":
        text = to_csv_text(rows)
        if not source:
            return text
        header, *lines = text.splitlines(keepends=True)
        return "".join([f"source,{header}", *(f"{source},{line}" for line in lines)])
    summary = summarize([case], rows).iloc[0].to_dict()
    found = verdicts(case, summary)
    if form == "json":
        records = [{**marked, **record} for record in to_json_records(rows)]
        return _json(
            {"rows": records, "summary": summary, "verdicts": _verdict_records(found)}
            | (extra or {})
        )
    return render_table(case, rows, source=source) + extra_text


def _json(value: dict[str, Any]) -> str:
    """One JSON object; each row of a ``rows`` list on its own line."""
    parts = []
    for key, item in value.items():
        if key == "rows":
            lines = ",\n".join(f"    {json.dumps(row)}" for row in item)
            parts.append(f'  "rows": [\n{lines}\n  ]' if lines else '  "rows": []')
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(item)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _verdict_records(found: list[Verdict]) -> list[dict[str, str]]:
    return [{"name": v.name, "finding": v.finding, "fix": v.fix} for v in found]


def _case_line(case: Case, source: str | None = None) -> str:
    settings = ", ".join(f"{name}={value}" for name, value in case.key().items())
    line = f"Case: {settings}, epochs={case.epochs}"
    return f"{line}\nSource: {source}" if source else line


def render_table(case: Case, rows: pd.DataFrame, *, source: str | None = None) -> str:
    """The human-readable explanation of one case from its tidy rows.

    Per epoch, one line per batch of every rank (a rank without batches says so), then
    the summary numbers, then each verdict with its fix, or "No problems found.".
    ``source`` (e.g. ``processes``) is named under the case.
    """
    from tabulate import tabulate

    from studies.core.summary import summarize
    from studies.core.verdicts import verdicts

    parts = [_case_line(case, source)]
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
    summary = summarize([case], rows).iloc[0].to_dict()
    parts += _summary_parts(summary, verdicts(case, summary))
    return "\n\n".join(parts) + "\n"


def _summary_parts(summary: dict[str, Any], found: list[Verdict]) -> list[str]:
    """The summary numbers, then the verdicts (or "No problems found.")."""
    from tabulate import tabulate

    from studies.core.summary import SUMMARY_COLUMNS

    numbers = tabulate(
        [[name, _shown(summary[name])] for name in SUMMARY_COLUMNS],
        tablefmt="plain",
        disable_numparse=True,
    )
    parts = [f"Summary (epoch 0 unless stated)\n{numbers}"]
    if found:
        items = [f"- [{v.name}] {v.finding}\n  Fix: {v.fix}" for v in found]
        parts.append("Findings\n" + "\n".join(items))
    else:
        parts.append("No problems found.")
    return parts


def _shown(value: Any) -> str:
    """A summary value for the table; a long per-rank list by its distinct values."""
    if isinstance(value, list) and len(value) > _SHOWN_LIST:
        distinct = sorted(set(value))
        if len(distinct) == 1:
            return f"{distinct[0]} on each of the {len(value)} ranks"
        return f"{len(value)} ranks, values {distinct[:_SHOWN_LIST]}"
    return str(value)


# --- observe -----------------------------------------------------------------------------


def _observe(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= MAX_TIMEOUT:
        parser.error(
            f"--timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {args.timeout}"
        )
    if args.sampler in sampler_cli.KINDS:
        return sampler_cli.observe(parser, args, LIMITS)
    _check_case_options(parser, args)
    _check_bounds(parser, args)
    case = _case(parser, args, world_size=1)  # the group gives the world size
    options = _loader_options(parser, args, case)

    from torch.distributed.elastic.multiprocessing.errors import record

    from studies.core.simulate import frame
    from studies.engines.torchrun import (
        NotStartedByTorchrun,
        observe,
        process_group,
        require_environment,
    )

    try:
        require_environment()
    except NotStartedByTorchrun as error:
        print(f"dsampler observe: error: {error}", file=sys.stderr)
        return 2

    @record  # torchrun's failure summary then shows this rank's traceback
    def on_rank() -> tuple[str, str] | None:
        with process_group(args.timeout) as backend:
            found = observe(case, **options)
        if found is None:
            return None
        agreement = found.agreement.record(found.rows)
        said = f"Ranks: {found.run.case.world_size}, backend {backend}. " + _agreement_text(
            agreement
        )
        text = _output(
            found.run.case,
            frame(found.rows),
            args.format,
            source="processes",
            extra={"backend": backend, "agreement": agreement},
            extra_text=f"\n{said}\n",
        )
        return text, said

    try:
        answer = on_rank()
    except Exception as error:
        rank = os.environ.get("RANK", "?")
        print(f"dsampler observe: error on rank {rank}: {error}", file=sys.stderr)
        sys.stderr.flush()
        return 1
    if answer is not None:
        text, said = answer
        sys.stdout.write(text)
        if args.format == "csv":  # the CSV holds rows only
            print(f"dsampler observe: {said}", file=sys.stderr)
    return 0


def _agreement_text(agreement: dict[str, Any]) -> str:
    if agreement["match"]:
        return (
            f"Agreement with the simulation: all {agreement['processes_rows']} rows match exactly."
        )
    reproduced = "reproduces" if agreement["same_in_process"] else "does not reproduce"
    return (
        f"Agreement with the simulation: differs ({agreement['processes_rows']} rows from "
        f"the processes, {agreement['simulated_rows']} simulated without workers); an "
        f"in-process run with the same DataLoader options {reproduced} them."
    )


# --- report ------------------------------------------------------------------------------


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from studies.common.extras import MissingExtra
    from studies.common.interrupts import exit_status, terminated_as_interrupt
    from studies.report import OutputError, write_reports

    try:
        with terminated_as_interrupt():
            paths = write_reports(
                output=args.output, progress=not args.no_progress, force=args.force
            )
    except KeyboardInterrupt as interrupt:
        print("dsampler report: interrupted; no file is left half written", file=sys.stderr)
        return exit_status(interrupt)
    except OutputError as error:
        print(f"dsampler report: error: --output {error}", file=sys.stderr)
        return 2
    except MissingExtra as error:
        print(f"dsampler report: error: the report needs its extras: {error}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
