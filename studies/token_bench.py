"""``python -m studies.token_bench``: the command ``reports/token-batches.md`` quotes for its
planning record, kept at this path; the benchmark is :mod:`studies.tokens.bench`.
"""

from __future__ import annotations

from studies.tokens.bench import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
