"""``dsampler check MODULE:FACTORY``: the guarantees of ``samplers.testing``, on any sampler.

Imports ``FACTORY`` from ``MODULE`` (the current directory is importable), checks that it
builds a sampler, searches each guarantee with hypothesis (derandomised; ``--thorough``
searches longer, with random examples) and prints one row per guarantee: ``--format
table`` (default) for a reader, ``--format json`` a list of objects with ``guarantee``,
``holds`` (true, false, or null when the guarantee does not apply), ``counterexample``
(the smallest configuration found and what went wrong, or null) and ``detail``.

A factory takes, by name, any of the kit's arguments (``samplers.testing.ARGUMENTS``); one
that requires another parameter is refused before anything runs, with the accepted names.
``--timeout`` bounds every call into the factory's code: importing it, the probe that
checks it builds a sampler, and each configuration searched (the kit's ``time_limit``: an
interval timer on the main thread; platforms without ``SIGALRM`` run unbounded). An
iteration that yields more than its configuration's share can hold is stopped whatever the
timeout (a memory bound): a probe that never ends is refused (status 2), a configuration
violates ``handles-every-size``.

Exit status: 0 when no guarantee is violated, 1 when one is or a configuration ran out
of time (the probe that checks the factory included), 2 for a ``MODULE:FACTORY`` that
cannot be imported (or takes longer than ``--timeout`` to import), is not callable, takes
parameters the kit does not pass, or does not build a sampler (one line naming it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = [
    "ARGUMENTS",
    "DEFAULT_TIMEOUT",
    "SHOWN",
    "add_parser",
    "counterexample_text",
    "render_json",
    "render_table",
    "run",
]

#: The keyword arguments the kit passes a factory (``samplers.testing.ARGUMENTS``, which
#: a test compares): named here so that parsing ``check``'s options imports no torch.
ARGUMENTS = ("dataset", "num_replicas", "rank", "seed", "batch_size")
#: How ``holds`` reads in the table.
SHOWN = {True: "held", False: "violated", None: "not supported"}
#: Seconds a configuration may take by default, and at most.
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3600.0


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``check`` command to ``commands`` (an argparse sub-parsers object)."""
    check = commands.add_parser(
        "check",
        help="check a sampler of yours against each guarantee (with hypothesis)",
        description=(
            "Import FACTORY from MODULE, a callable taking the keyword arguments "
            f"{', '.join(ARGUMENTS)} (those it names) and returning a sampler or batch "
            "sampler, and search for the smallest configuration that breaks each guarantee. "
            "Needs hypothesis (the study extra)."
        ),
    )
    check.set_defaults(command_parser=check)
    check.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. mypackage.data:make_sampler")
    check.add_argument("--format", choices=("table", "json"), default="table")
    check.add_argument(
        "--thorough", action="store_true", help="search longer, with random examples"
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds one configuration may take (default {DEFAULT_TIMEOUT:g}, at most "
        f"{MAX_TIMEOUT:g})",
    )
    return check


def run(args: argparse.Namespace) -> int:
    """Run ``dsampler check``; the exit status (see the module's docstring)."""
    if not 0 < args.timeout <= MAX_TIMEOUT:
        args.command_parser.error(
            f"--timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {args.timeout}"
        )
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError:
        from studies.common.extras import install_command

        print(
            "dsampler check: error: needs hypothesis, which is not installed: install the "
            f"study extra: {install_command(['study'])}",
            file=sys.stderr,
        )
        return 2
    from samplers import testing

    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    from samplers.testing.factories import ProbeTimedOut
    from samplers.testing.running import Expired, time_limit

    try:
        with time_limit(args.timeout):
            factory = testing.load_factory(args.factory)
        testing.validated(factory, args.factory, seconds=args.timeout)
    except Expired:
        print(
            f"dsampler check: error: importing {args.factory} took longer than --timeout "
            f"{args.timeout:g} s",
            file=sys.stderr,
        )
        return 2
    except ProbeTimedOut as late:  # a configuration (the probe) ran out of time
        print(f"dsampler check: error: {late}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as error:
        accepted = f"a factory takes, by name, any of: {', '.join(ARGUMENTS)}"
        shown = str(error) if "any of:" in str(error) else f"{error} ({accepted})"
        print(f"dsampler check: error: {shown}", file=sys.stderr)
        return 2
    try:
        checked = testing.check(factory, thorough=args.thorough, time_limit=args.timeout)
    except testing.TimedOut as late:
        print(
            f"dsampler check: error: {args.factory}: a configuration took longer than "
            f"--timeout {args.timeout:g} s ({late})",
            file=sys.stderr,
        )
        return 1
    results = checked.to_dict("records")
    text = render_json(results) if args.format == "json" else render_table(args.factory, results)
    sys.stdout.write(text)
    return 1 if any(result["holds"] is False for result in results) else 0


def _records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "guarantee": result["guarantee"],
            "holds": result["holds"],
            "counterexample": result["counterexample"],
            "detail": result["detail"],
        }
        for result in results
    ]


def render_json(results: list[dict[str, Any]]) -> str:
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


def render_table(reference: str, results: list[dict[str, Any]]) -> str:
    """A table for a reader: each guarantee, held/violated/not supported, the smallest
    counterexample and what a user experiences."""
    rows = [
        [
            result["guarantee"],
            SHOWN[result["holds"]],
            counterexample_text(result["counterexample"]),
            result["experience"]
            or (
                result["detail"] if result["holds"] is None or "skipped" in result["detail"] else ""
            ),
        ]
        for result in results
    ]
    from tabulate import tabulate

    table = tabulate(
        rows,
        headers=["guarantee", "result", "smallest counterexample", "what a user sees"],
        disable_numparse=True,
    )
    violated = sum(result["holds"] is False for result in results)
    return (
        f"{reference}: {violated} of {len(results)} guarantees violated "
        "(N: dataset size, W: world size, B: batch size)\n\n" + table + "\n"
    )
