"""The ``dsampler`` console command: the study's CLI, or which extra to install for it.

The sampler (``samplers``) installs with torch alone; the study needs the ``study`` extra
(pandas, matplotlib, tabulate, tqdm). Without it, ``dsampler`` says so in one line and
exits with status 1 instead of failing with an import traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["STUDY_MODULES", "main"]

#: Top-level modules of the ``study`` extra.
STUDY_MODULES = frozenset({"pandas", "matplotlib", "tabulate", "tqdm", "psutil"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``studies.cli.main``; without the study extra, say how to install it."""
    try:
        from studies.cli import main as cli_main
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in STUDY_MODULES:
            raise
        print(
            f"dsampler: error: the study needs {error.name}, which is not installed: "
            "install the study extra, e.g. pip install 'dsampler[study]' (or, from a "
            "checkout, pip install -e '.[study]')",
            file=sys.stderr,
        )
        return 1
    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
