"""Words for numbers: how the findings put counts and lists into sentences.

Guarantee: a quantifier these functions return is never stronger than the counts they
were given. ``"all"``, ``"every"`` and ``"none"`` appear only when the count is the
total or zero; anything in between is said as the count itself. A finding's claim and
prose take their quantifiers from here, computed from its tables, instead of typing
"every", "only", "never" or "a few" into a sentence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

__all__ = ["count_of", "every", "joined", "listed", "plural", "up_to"]


def listed(values: Iterable[int]) -> str:
    """Indices as a table cell: ``[4, 1, 2]``."""
    return json.dumps([int(value) for value in values])


def joined(values: Iterable[object]) -> str:
    """Values for prose: ``"5"``, ``"4 and 5"``, ``"1, 2 and 3"``."""
    texts = [str(value) for value in values]
    if len(texts) <= 1:
        return "".join(texts)
    return f"{', '.join(texts[:-1])} and {texts[-1]}"


def plural(count: int, singular: str, many: str = "") -> str:
    """``"1 run"``, ``"2 runs"`` (``many`` for an irregular plural)."""
    return f"{count} {singular if count == 1 else many or singular + 's'}"


def count_of(count: int, total: int, noun: str) -> str:
    """``count`` of ``total`` things, as strong as the numbers allow and no stronger.

    ``"all 12 epochs"``, ``"none of the 12 epochs"``, ``"7 of the 12 epochs"``,
    ``"both epochs"``, and for a single thing ``"the 1 epoch"`` or ``"none of the 1
    epoch"``. ``noun`` is plural; a total of one uses it as given.
    """
    if not 0 <= count <= total:
        raise ValueError(f"count must lie in [0, total={total}], got {count}")
    if count == total:
        return {1: f"the 1 {noun}", 2: f"both {noun}"}.get(total, f"all {total} {noun}")
    if count == 0:
        return f"none of the {total} {noun}"
    return f"{count} of the {total} {noun}"


def every(count: int, total: int) -> str:
    """``"every"`` when ``count == total`` (and ``total > 0``), else ``"count of total"``.

    For sentences such as "held in every configuration" / "held in 7 of 12 configurations".
    """
    if not 0 <= count <= total:
        raise ValueError(f"count must lie in [0, total={total}], got {count}")
    return "every" if count == total and total else f"{count} of {total}"


def up_to(values: Iterable[int]) -> str:
    """The largest of counts for prose: ``"up to 7"``, or ``"0"`` when every value is 0."""
    largest = max((int(value) for value in values), default=0)
    return f"up to {largest}" if largest else "0"
