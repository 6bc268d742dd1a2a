"""``dsampler check MODULE:FACTORY``: the guarantees of ``samplers.testing``, on any sampler.

Imports ``FACTORY`` from ``MODULE`` (the current directory is importable), checks that it
builds a sampler, searches each guarantee with hypothesis (derandomised; ``--thorough``
searches longer, with random examples) and prints one row per guarantee: ``--format
table`` (default) for a reader, ``--format json`` a list of objects with ``guarantee``,
``holds`` (true, false, or null when the guarantee does not apply), ``counterexample``
(the smallest configuration found and what went wrong, or null) and ``detail``.

Exit status: 0 when no guarantee is violated, 1 when one is, 2 for a ``MODULE:FACTORY``
that cannot be imported, is not callable or does not build a sampler (one line naming it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tabulate import tabulate

__all__ = ["add_parser", "render_json", "render_table", "run"]

#: How ``holds`` reads in the table.
SHOWN = {True: "held", False: "violated", None: "not supported"}


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``check`` command to ``commands`` (an argparse sub-parsers object)."""
    check = commands.add_parser(
        "check",
        help="check a sampler of yours against each guarantee (with hypothesis)",
        description=(
            "Import FACTORY from MODULE, a callable taking the keyword arguments dataset, "
            "num_replicas, rank, seed and batch_size (those it names) and returning a sampler "
            "or batch sampler, and search for the smallest configuration that breaks each "
            "guarantee. Needs hypothesis (the test extra)."
        ),
    )
    check.set_defaults(command_parser=check)
    check.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. mypackage.data:make_sampler")
    check.add_argument("--format", choices=("table", "json"), default="table")
    check.add_argument(
        "--thorough", action="store_true", help="search longer, with random examples"
    )
    return check


def run(args: argparse.Namespace) -> int:
    """Run ``dsampler check``; the exit status (see the module's docstring)."""
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError:
        print(
            "dsampler check: error: needs hypothesis, which is not installed: install the "
            "test extra, e.g. pip install 'dsampler[test]'",
            file=sys.stderr,
        )
        return 2
    from samplers import testing

    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = testing.validated(testing.load_factory(args.factory), args.factory)
    except (ValueError, TypeError) as error:
        print(f"dsampler check: error: {error}", file=sys.stderr)
        return 2
    results = testing.check_all(factory, thorough=args.thorough)
    text = render_json(results) if args.format == "json" else render_table(args.factory, results)
    sys.stdout.write(text)
    return 1 if any(result.holds is False for result in results) else 0


def _records(results: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "guarantee": result.guarantee,
            "holds": result.holds,
            "counterexample": result.counterexample,
            "detail": result.detail,
        }
        for result in results
    ]


def render_json(results: list[Any]) -> str:
    """The results as a JSON list, one object per guarantee and per line."""
    lines = ",\n".join(json.dumps(record) for record in _records(results))
    return f"[\n{lines}\n]\n"


def counterexample_text(counterexample: dict[str, Any] | None) -> str:
    """``N=5 W=1 B=4, rank 0, epoch 0: what went wrong`` (``-`` when there is none)."""
    if not counterexample:
        return "-"
    shown = dict(counterexample)
    place = [
        f"N={shown.pop('dataset_size')} W={shown.pop('world_size')} B={shown.pop('batch_size')}"
    ]
    rank = shown.pop("rank", None)
    if rank is not None:
        place.append(f"rank {rank}")
    place.append(f"epoch {shown.pop('epoch')}")
    what = shown.pop("what", "")
    place.extend(f"{key.replace('_', ' ')} {value}" for key, value in shown.items())
    return ", ".join(place) + (f": {what}" if what else "")


def render_table(reference: str, results: list[Any]) -> str:
    """A table for a reader: each guarantee, held/violated/not supported, the smallest
    counterexample and what a user experiences."""
    rows = [
        [
            result.guarantee,
            SHOWN[result.holds],
            counterexample_text(result.counterexample),
            result.experience
            or (result.detail if result.holds is None or "skipped" in result.detail else ""),
        ]
        for result in results
    ]
    table = tabulate(
        rows,
        headers=["guarantee", "result", "smallest counterexample", "what a user sees"],
        disable_numparse=True,
    )
    violated = sum(result.holds is False for result in results)
    return (
        f"{reference}: {violated} of {len(results)} guarantees violated "
        "(N: dataset size, W: world size, B: batch size)\n\n" + table + "\n"
    )
