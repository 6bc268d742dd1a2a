"""``python -m studies.token_timing --record``: the command ``reports/token-costs.md`` and its
record (``studies/data/token-timing.json``) quote, kept at this path; the timing is
:mod:`studies.tokens.timing`.
"""

from __future__ import annotations

from studies.tokens.timing import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
