"""The ``dsampler`` console command: the study's CLI, or which extra to install for it.

The sampler (``samplers``) installs with torch alone; the study needs the ``study`` extra
(pandas, matplotlib, tabulate, tqdm, psutil, hypothesis). Without it, a command says so
in one line and exits with status 1 instead of failing with an import traceback. Help
always works: ``dsampler --version``, ``dsampler --help``, ``dsampler COMMAND --help``
and ``dsampler`` alone answer as they do with the extra (the parser needs only the
standard library), followed on stderr by one line naming the extra the commands need.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from studies.common.extras import EXTRAS, MissingExtra, require

__all__ = ["STUDY_MODULES", "asks_for_help", "main"]

#: Top-level modules of the ``study`` extra.
STUDY_MODULES = frozenset(EXTRAS["study"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``studies.cli.main``; without the study extra, say how to install it (help and
    ``--version`` answer without it)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:
        print(f"dsampler {_version()}")
        return 0
    try:
        require("study")
    except MissingExtra as error:
        if not asks_for_help(arguments):
            print(f"dsampler: error: {error}", file=sys.stderr)
            return 1
        from studies.cli import main as cli_main

        code = cli_main(arguments)
        print(f"dsampler: note: the commands need the study extra: {error}", file=sys.stderr)
        return code
    from studies.cli import main as cli_main

    return cli_main(argv)


def asks_for_help(arguments: Sequence[str]) -> bool:
    """Whether ``arguments`` only ask for help: none at all (``dsampler`` prints its help),
    or ``-h``/``--help`` before any ``--``."""
    given = list(arguments)
    before = given[: given.index("--")] if "--" in given else given
    return not given or "-h" in before or "--help" in before


def _version() -> str:
    try:
        return version("dsampler")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    raise SystemExit(main())
