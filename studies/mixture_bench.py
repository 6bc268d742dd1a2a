"""``python -m studies.mixture_bench``: the command ``reports/mixtures.md`` and
``reports/speed.md`` quote for their record, kept at this path; the benchmark is
:mod:`studies.mixtures.bench`.
"""

from __future__ import annotations

from studies.mixtures.bench import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
