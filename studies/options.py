"""Option types the ``dsampler`` commands share: sizes written as a user writes them.

Guarantee: :func:`size` accepts exactly the non-negative integers written as ``1000000``,
``10**6`` or ``1e6`` (an integer mantissa, an exponent from 0 to 64) and rejects
everything else with an ``argparse`` error naming the text, so ``explain --dataset-size
1e5`` and ``bench --sizes 1e5`` read the same number.
"""

from __future__ import annotations

import argparse

__all__ = ["size"]


def size(text: str) -> int:
    """A size written as ``1000000``, ``10**6`` or ``1e6`` (integers only)."""
    base, power, exponent = text.partition("**")
    if not power:
        base, power, exponent = text.lower().partition("e")
    try:
        if not power:
            return int(text)
        if not 0 <= int(exponent) <= 64:  # a size, not a number to spend minutes on
            raise ValueError(exponent)
        return int(base) * 10 ** int(exponent) if power == "e" else int(base) ** int(exponent)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: give an integer such as 1000000, 10**6 or 1e6"
        ) from None
