"""The ``dsampler`` console command: the study's CLI, or which extra to install for it.

The sampler (``samplers``) installs with torch alone; the study needs the ``study`` extra
(pandas, matplotlib, tabulate, tqdm, psutil, hypothesis). Without it, ``dsampler`` says
so in one line and exits with status 1 instead of failing with an import traceback;
``dsampler --version`` works without it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from studies.common.extras import EXTRAS, MissingExtra, require

__all__ = ["STUDY_MODULES", "main"]

#: Top-level modules of the ``study`` extra.
STUDY_MODULES = frozenset(EXTRAS["study"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``studies.cli.main``; without the study extra, say how to install it
    (``dsampler --version`` answers without it)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:
        print(f"dsampler {_version()}")
        return 0
    try:
        require("study")
    except MissingExtra as error:
        print(f"dsampler: error: {error}", file=sys.stderr)
        return 1
    from studies.cli import main as cli_main

    return cli_main(argv)


def _version() -> str:
    try:
        return version("dsampler")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    raise SystemExit(main())
