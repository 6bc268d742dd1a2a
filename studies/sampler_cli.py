"""``explain`` and ``observe`` for the token, packed and mixture samplers and the wrapper.

``--sampler tokens|packed|mixture|mixture-batch|mixture-tokens|packed-mixture|wrapper``
chooses one of them (:data:`KINDS`; ``index`` and ``batch`` stay
:class:`studies.core.cases.Case`'s). Their options (:func:`add_options`) say what a user
passes the sampler: ``--lengths`` (comma-separated lengths, ``uniform:LO:HI``,
``lognormal:MEDIAN:SIGMA`` or a file; once, or once per source of a mixture),
``--max-tokens``, ``--cost``, ``--max-length``, ``--rows-per-batch``, ``--split``,
``--source-sizes``, ``--weights``, ``--weights-in`` and ``--epoch-length``, with the
shared ``--batch-size``, ``--tail``, ``--seed``, ``--no-shuffle``, ``--epochs``,
``--no-set-epoch``, ``--loader-drop-last``, ``--num-workers`` and ``--persistent-workers``.

Guarantees: every option is checked before torch is imported, and refused with an error
naming it and its value (exit status 2): an option the sampler does not take, one it
needs and lacks, a value out of range, lengths whose count disagrees with the dataset or
the sources, a file of lengths that cannot be read. What the sampler itself refuses is
reported as an option error too. The output (:mod:`studies.core.sampler_views`) lists
every rank's batches with their tokens and cost (token samplers), their rows and each
row's fill (packed samplers) and their sources (mixtures), then every rank's totals,
each source's share against its target, and what the numbers show.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any

from studies.common.options import (
    DISTRIBUTIONS,
    LengthsSpec,
    cost_label,
    lengths_spec,
    read_lengths,
    size,
    size_list,
    split_value,
    weight_list,
)

__all__ = [
    "INDEX_KINDS",
    "KINDS",
    "MIXTURES",
    "Limits",
    "add_options",
    "explain",
    "observe",
    "refuse",
]

#: The samplers this module runs, by the name ``--sampler`` gives them
#: (``studies.core.sampler_runs.KINDS``, kept here so the options need no torch).
KINDS = (
    "wrapper",
    "tokens",
    "packed",
    "mixture",
    "mixture-batch",
    "mixture-tokens",
    "packed-mixture",
)
MIXTURES = ("mixture", "mixture-batch", "mixture-tokens", "packed-mixture")
INDEX_KINDS = ("wrapper", "mixture")
_TOKENS = ("tokens", "mixture-tokens")
_PACKED = ("packed", "packed-mixture")
_LENGTHS = (*_TOKENS, *_PACKED)

#: Each option of this module by its destination.
OPTIONS = {
    "lengths": "--lengths",
    "max_tokens": "--max-tokens",
    "cost": "--cost",
    "max_length": "--max-length",
    "rows_per_batch": "--rows-per-batch",
    "split": "--split",
    "source_sizes": "--source-sizes",
    "weights": "--weights",
    "weights_in": "--weights-in",
    "epoch_length": "--epoch-length",
}
#: What each sampler takes, of this module's options and the shared ``batch_size`` and
#: ``loader_drop_last``; then what it needs.
TAKES: dict[str, tuple[str, ...]] = {
    "wrapper": ("batch_size", "loader_drop_last"),
    "tokens": ("lengths", "max_tokens", "cost"),
    "packed": ("lengths", "max_length", "rows_per_batch", "split", "cost"),
    "mixture": ("source_sizes", "weights", "epoch_length", "batch_size", "loader_drop_last"),
    "mixture-batch": ("source_sizes", "weights", "epoch_length", "batch_size"),
    "mixture-tokens": ("source_sizes", "weights", "epoch_length", "lengths", "max_tokens", "cost"),
    "packed-mixture": (
        "source_sizes",
        "weights",
        "epoch_length",
        "lengths",
        "max_length",
        "rows_per_batch",
        "split",
        "cost",
        "weights_in",
    ),
}
NEEDS: dict[str, tuple[str, ...]] = {
    "wrapper": ("batch_size",),
    "tokens": ("lengths", "max_tokens"),
    "packed": ("lengths", "max_length", "rows_per_batch"),
    "mixture": ("source_sizes", "weights", "batch_size"),
    "mixture-batch": ("source_sizes", "weights", "batch_size"),
    "mixture-tokens": ("source_sizes", "weights", "lengths", "max_tokens"),
    "packed-mixture": ("source_sizes", "weights", "lengths", "max_length", "rows_per_batch"),
}
_SHARED = {"batch_size": "--batch-size", "loader_drop_last": "--loader-drop-last"}


@dataclass(frozen=True)
class Limits:
    """The bounds ``explain`` and ``observe`` keep a listing within (``studies.cli``'s)."""

    #: Items listed over all epochs (an epoch's samples, pieces or draws, times epochs).
    listed: int
    #: Ranks, and DataLoader passes (ranks times epochs).
    world_size: int
    passes: int
    epochs: int
    num_workers: int


def add_options(command: argparse.ArgumentParser) -> None:
    """Add the token, packed and mixture samplers' options to ``command``."""
    group = command.add_argument_group(
        "token, packed and mixture samplers (--sampler tokens, packed, mixture, ...)"
    )
    names = ", ".join(f"{name}:{parameters}" for name, parameters in DISTRIBUTIONS.items())
    group.add_argument(
        "--lengths",
        type=lengths_spec,
        action="append",
        metavar="LENGTHS",
        help="each sample's length: comma-separated (8,1,8,6), drawn from a distribution "
        f"({names}; --dataset-size of them) or a file of whole numbers; a mixture takes "
        "one for all its samples or one per source",
    )
    group.add_argument("--max-tokens", type=size, help="tokens: the budget of a batch's cost")
    group.add_argument(
        "--cost",
        type=cost_label,
        help="padded or sum, optionally ,quadratic=Q (default: padded for tokens, sum for "
        "packed rows)",
    )
    group.add_argument("--max-length", type=size, help="packed: the longest row, in tokens")
    group.add_argument("--rows-per-batch", type=size, help="packed: rows in one batch")
    group.add_argument(
        "--split",
        type=split_value,
        help="packed: cut documents longer than a row (long) or than a piece length",
    )
    group.add_argument(
        "--source-sizes", type=size_list, help="mixtures: each source's size (600,400)"
    )
    group.add_argument(
        "--weights", type=weight_list, help="mixtures: each source's weight (0.7,0.3)"
    )
    group.add_argument(
        "--weights-in",
        choices=("tokens", "samples"),
        help="packed-mixture: what the weights share (default tokens)",
    )
    group.add_argument(
        "--epoch-length", type=size, help="mixtures: draws per epoch (default: the sources' total)"
    )


def refuse(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """For ``--sampler index`` or ``batch`` (or none): refuse this module's options."""
    for name, option in OPTIONS.items():
        if getattr(args, name, None) is not None:
            kinds = [kind for kind in KINDS if name in TAKES[kind]]
            parser.error(
                f"{option} is for --sampler {' or '.join(kinds)}, got --sampler "
                f"{args.sampler or 'index'}"
            )


# --- checks -------------------------------------------------------------------------------


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name, None)
    return value is not None and value is not False


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every check of the options that needs no torch (see the module)."""
    kind = args.sampler
    if args.implementation not in (None, "samplers"):
        parser.error(
            f"--sampler {kind} is ours (implementation samplers), got --implementation "
            f"{args.implementation}"
        )
    if args.drop_last:
        parser.error(f"--drop-last is for --sampler index; --sampler {kind} takes --tail drop")
    for flag in ("summary", "launch"):
        if getattr(args, flag, False):
            parser.error(
                f"--{flag} is for --sampler index or batch; drop it to list what every rank "
                f"of --sampler {kind} receives"
                + (" (observe runs it in a torchrun job)" if flag == "launch" else "")
            )
    for name, option in {**OPTIONS, **_SHARED}.items():
        if _given(args, name) and name not in TAKES[kind]:
            parser.error(
                f"{option} does not apply to --sampler {kind}, which takes "
                + ", ".join(_option(n) for n in TAKES[kind])
            )
    for name in NEEDS[kind]:
        if not _given(args, name):
            parser.error(f"--sampler {kind} needs {_option(name)}")
    for name in ("batch_size", "max_tokens", "max_length", "rows_per_batch", "epoch_length"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            parser.error(f"{_option(name)} must be at least 1, got {value}")
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.seed < -(2**63):
        parser.error(f"--seed must be at least {-(2**63)}, got {args.seed}")
    if args.seed + args.epochs - 1 > 2**64 - 1:
        parser.error(
            f"--seed must keep seed + epoch within [-2**63, 2**64 - 1] for all {args.epochs} "
            f"epochs, got {args.seed}"
        )
    if isinstance(args.split, int) and args.split > args.max_length:
        parser.error(
            f"--split {args.split} is longer than --max-length {args.max_length}: a piece must "
            "fit a row (--split long cuts only documents longer than a row)"
        )
    if args.cost is not None and kind in _PACKED and not args.cost.startswith("sum"):
        parser.error(
            f"--cost {args.cost} does not fit packed rows, which are not padded per sample: "
            "give sum or sum,quadratic=Q"
        )
    if kind in MIXTURES:
        _check_sources(parser, args)


def _check_sources(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    sizes, weights = args.source_sizes, args.weights
    if len(weights) != len(sizes):
        parser.error(
            f"--weights holds {len(weights)} weights for {len(sizes)} sources "
            f"(--source-sizes {','.join(map(str, sizes))})"
        )
    for source, (count, weight) in enumerate(zip(sizes, weights, strict=True)):
        if count < 1 and weight > 0:
            parser.error(
                f"--source-sizes gives source {source} 0 samples and --weights gives it "
                f"{weight:g}: a source with weight needs samples"
            )
    if args.dataset_size is not None and args.dataset_size != sum(sizes):
        parser.error(
            f"--dataset-size {args.dataset_size} disagrees with --source-sizes "
            f"{','.join(map(str, sizes))}, {sum(sizes)} samples (leave --dataset-size out)"
        )


def _option(name: str) -> str:
    return OPTIONS.get(name) or _SHARED.get(name) or f"--{name.replace('_', '-')}"


def _lengths(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[int, list[tuple[LengthsSpec, int]]]:
    """The dataset size and each ``--lengths`` with the count of lengths it gives (files
    read here); every disagreement refused naming the options."""
    kind = args.sampler
    specs = list(args.lengths or [])
    try:
        specs = [read_lengths(spec) for spec in specs]
    except ValueError as error:
        parser.error(str(error))
    sizes = list(args.source_sizes) if kind in MIXTURES else None
    if sizes is not None:
        total = sum(sizes)
        if not specs:
            return total, []
        if len(specs) == 1:
            counts = [total]
        elif len(specs) == len(sizes):
            counts = sizes
        else:
            parser.error(
                f"--lengths is given {len(specs)} times for {len(sizes)} sources: give it once "
                "for all the samples, or once per source"
            )
        for spec, count in zip(specs, counts, strict=True):
            if spec.kind in ("values", "file") and len(spec.values) != count:
                whose = "the sources' samples" if len(specs) == 1 else "its source's samples"
                parser.error(
                    f"--lengths {spec.text} holds {len(spec.values)} lengths, {whose} are "
                    f"{count} (--source-sizes {','.join(map(str, sizes))})"
                )
        return total, list(zip(specs, counts, strict=True))
    if not specs:
        if args.dataset_size is None:
            parser.error("the following arguments are required: --dataset-size")
        return int(args.dataset_size), []
    if len(specs) > 1:
        parser.error(f"--lengths is given {len(specs)} times; --sampler {kind} takes it once")
    (spec,) = specs
    if spec.kind in ("values", "file"):
        if args.dataset_size is not None and args.dataset_size != len(spec.values):
            parser.error(
                f"--dataset-size {args.dataset_size} disagrees with --lengths {spec.text}, "
                f"which holds {len(spec.values)} lengths (leave --dataset-size out)"
            )
        return len(spec.values), [(spec, len(spec.values))]
    if args.dataset_size is None:
        parser.error(f"--lengths {spec.text} draws --dataset-size lengths: give --dataset-size")
    return int(args.dataset_size), [(spec, int(args.dataset_size))]


def _items(args: argparse.Namespace, lengths: list[int] | None, size_: int) -> int:
    """How many items the listing holds per epoch, for the bounds: the samples, or the
    pieces ``--split`` cuts ``lengths`` into (the samplers hold them all), or a
    mixture's draws per epoch if more."""
    items = size_
    if args.split is not None and lengths is not None:
        piece = int(args.max_length if args.split == "long" else args.split)
        items = sum(-(-length // piece) if length > piece else 1 for length in lengths)
    if args.sampler in MIXTURES:
        items = max(items, int(args.epoch_length or 0))
    return items


def _bounded(
    parser: argparse.ArgumentParser, args: argparse.Namespace, items: int, limits: Limits
) -> None:
    world = getattr(args, "world_size", None)
    if world is not None and not 1 <= world <= limits.world_size:
        parser.error(
            f"--world-size must be from 1 to {limits.world_size} for --sampler "
            f"{args.sampler}, got {world}"
        )
    if args.epochs > limits.epochs:
        parser.error(f"--epochs must be at most {limits.epochs}, got {args.epochs}")
    if not 0 <= args.num_workers <= limits.num_workers:
        parser.error(
            f"--num-workers must be at least 0 and at most {limits.num_workers}, "
            f"got {args.num_workers}"
        )
    if args.persistent_workers and args.num_workers == 0:
        parser.error("--persistent-workers needs --num-workers 1 or more, got --num-workers 0")
    listed = items * args.epochs
    if listed > limits.listed:
        parser.error(
            f"{args.command} lists every batch of every epoch: an epoch's items (samples, "
            "the pieces --split cuts them into, a mixture's --epoch-length) times --epochs "
            f"must be at most {limits.listed:,}, got {items} x {args.epochs} = {listed:,}"
        )
    if world is not None and world * args.epochs > limits.passes:
        parser.error(
            f"{args.command} iterates one DataLoader per rank every epoch: --world-size "
            f"times --epochs must be at most {limits.passes:,}, got {world} x "
            f"{args.epochs} = {world * args.epochs:,}"
        )


def _setup(
    parser: argparse.ArgumentParser, args: argparse.Namespace, world_size: int, limits: Limits
) -> Any:
    """The checked :class:`studies.core.sampler_runs.Setup` the options describe."""
    _check(parser, args)
    dataset_size, given = _lengths(parser, args)
    given_values = all(spec.kind in ("values", "file") for spec, _ in given)
    known = [value for spec, _ in given for value in spec.values] if given_values else None
    _bounded(parser, args, _items(args, known if given else None, dataset_size), limits)
    from studies.core.sampler_runs import Setup, draw_lengths

    lengths = None
    if given:
        drawn = [
            list(spec.values)
            if spec.kind in ("values", "file")
            else draw_lengths(spec.kind, spec.parameters, count, seed)
            for seed, (spec, count) in enumerate(given)
        ]
        lengths = tuple(value for values in drawn for value in values)
        if not given_values:  # the pieces of drawn lengths, bounded as the others'
            _bounded(parser, args, _items(args, list(lengths), dataset_size), limits)
    return Setup(
        kind=args.sampler,
        world_size=world_size,
        dataset_size=dataset_size,
        epochs=args.epochs,
        shuffle=not args.no_shuffle,
        seed=args.seed,
        set_epoch=not args.no_set_epoch,
        tail=args.tail,
        batch_size=args.batch_size,
        loader_drop_last=args.loader_drop_last,
        lengths=lengths,
        lengths_from=tuple(spec.text for spec, _ in given) or None,
        max_tokens=args.max_tokens,
        cost=args.cost,
        max_length=args.max_length,
        rows_per_batch=args.rows_per_batch,
        split=args.split,
        source_sizes=args.source_sizes if args.sampler in MIXTURES else None,
        weights=args.weights,
        weights_in=args.weights_in,
        epoch_length=args.epoch_length,
    )


def _loader_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.num_workers == 0:
        return {}
    return {"num_workers": args.num_workers, "persistent_workers": args.persistent_workers}


def _printed(found: Any, form: str, **marks: Any) -> str:
    from studies.core.sampler_views import csv_text, json_text, text

    source = marks.get("source")
    if form == "csv":
        return str(csv_text(found, source=source))
    if form == "json":
        return str(json_text(found, source=source, extra=marks.get("extra")))
    return str(text(found, source=source, extra=marks.get("extra_text", "")))


# --- the commands -------------------------------------------------------------------------


def explain(parser: argparse.ArgumentParser, args: argparse.Namespace, limits: Limits) -> int:
    """``dsampler explain --sampler KIND ...``: every rank's batches, in this process."""
    setup = _setup(parser, args, args.world_size, limits)
    from studies.core.sampler_runs import run_in_process
    from studies.core.sampler_views import view

    try:
        batches, said = run_in_process(setup, **_loader_options(args))
        found = view(setup, batches, said)
    except (TypeError, ValueError, OverflowError) as error:
        parser.error(f"the sampler refuses these options: {error}")
    except RuntimeError as error:
        print(f"dsampler explain: error: cannot run the sampler: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(_printed(found, args.format))
    return 0


def observe(parser: argparse.ArgumentParser, args: argparse.Namespace, limits: Limits) -> int:
    """``dsampler observe --sampler KIND ...`` on every rank of a torchrun job; rank 0
    prints what explain prints, the batches marked ``processes``, and their agreement
    with a run of every rank in one process."""
    setup = _setup(parser, args, 1, limits)  # the group gives the world size
    from torch.distributed.elastic.multiprocessing.errors import record

    from studies.core.sampler_runs import gather_batches, run_in_process
    from studies.core.sampler_views import view
    from studies.engines.torchrun import NotStartedByTorchrun, process_group, require_environment

    try:
        require_environment()
    except NotStartedByTorchrun as error:
        print(f"dsampler observe: error: {error}", file=sys.stderr)
        return 2
    options = _loader_options(args)

    @record  # torchrun's failure summary then shows this rank's traceback
    def on_rank() -> tuple[str, str] | None:
        with process_group(args.timeout) as backend:
            gathered = gather_batches(setup, **options)
        if gathered is None:
            return None
        placed, batches, said = gathered
        simulated, _ = run_in_process(placed)
        rows = sum(len(mine) for mine in batches)
        match = simulated == batches
        agreement = {"simulated_rows": sum(map(len, simulated)), "processes_rows": rows}
        agreement["match"] = match
        words = (
            f"all {rows} batches match exactly."
            if match
            else f"differs ({rows} batches from the processes, {agreement['simulated_rows']} "
            "simulated without workers)."
        )
        line = (
            f"Ranks: {placed.world_size}, backend {backend}. Agreement with a run of every "
            f"rank in one process: {words}"
        )
        found = view(placed, batches, said)
        extra = {"backend": backend, "agreement": agreement}
        text = _printed(
            found, args.format, source="processes", extra=extra, extra_text=f"\n{line}\n"
        )
        return text, line

    try:
        answer = on_rank()
    except Exception as error:
        print(
            f"dsampler observe: error on rank {os.environ.get('RANK', '?')}: {error}",
            file=sys.stderr,
        )
        sys.stderr.flush()
        return 1
    if answer is not None:
        text, line = answer
        sys.stdout.write(text)
        if args.format == "csv":  # the CSV holds batches only
            print(f"dsampler observe: {line}", file=sys.stderr)
    return 0
