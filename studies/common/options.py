"""Option types and the parser the ``dsampler`` commands share.

Guarantees:

* :func:`size` accepts exactly the integers written as ``1000000``, ``10**6``, ``1e6`` or
  ``1.5e3`` (a decimal number, or an integer power, whose value is a whole number of at
  most 65 digits) and rejects everything else with an ``argparse`` error naming the text
  and the reason (not a number, not a whole number, too many digits), so ``explain --dataset-size
  1e5`` and ``bench --sizes 1e5`` read the same number. The range is the caller's to
  check (``explain`` names ``--dataset-size must be at least 0``).
* :class:`Parser` refuses an option it does not know before anything else (before
  "required" errors), in the usage of the command it was given to, and names the
  closest known option ("did you mean --drop-last?"), as it does for a misspelt command.

Neither imports anything beyond the standard library, so ``dsampler --help`` and every
argument error are answered before torch or the studies are imported.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

__all__ = ["MAX_SIZE_DIGITS", "Parser", "closest", "size"]

#: A size has at most this many digits (10**64): a size, not a number to spend minutes on.
MAX_SIZE_DIGITS = 65


def size(text: str) -> int:
    """A size written as ``1000000``, ``10**6``, ``1e6`` or ``1.5e3`` (whole numbers only)."""

    def invalid(reason: str) -> argparse.ArgumentTypeError:
        example = "such as 1000000, 10**6, 1e6 or 1.5e3"
        return argparse.ArgumentTypeError(
            f"invalid size {text!r}: {reason}; give an integer {example}"
        )

    base, power, exponent = text.partition("**")
    try:
        if power and not 0 <= int(exponent) <= MAX_SIZE_DIGITS:
            raise invalid(f"more than {MAX_SIZE_DIGITS} digits")
        number = Decimal(int(base) ** int(exponent)) if power else Decimal(text.strip())
    except (ValueError, InvalidOperation):
        raise invalid("not a number") from None
    if number.is_nan():
        raise invalid("not a number")
    if not number.is_finite() or number.adjusted() >= MAX_SIZE_DIGITS:
        raise invalid(f"more than {MAX_SIZE_DIGITS} digits")
    if number != number.to_integral_value():
        raise invalid(f"{number.normalize():f} is not a whole number")
    return int(number)


def closest(word: str, known: Sequence[str]) -> str | None:
    """The entry of ``known`` closest to ``word`` (``_`` read as ``-``), if one is close."""
    spelled = word.replace("_", "-")
    if spelled in known:
        return spelled
    found = difflib.get_close_matches(spelled, known, n=1, cutoff=0.7)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that names the closest option for one it does not know.

    argparse checks required options before it reports unknown ones, and leaves unknown
    options of a sub-command to the top-level parser, so ``explain --dataset-sise 10``
    said only "required: --dataset-size" and ``explain --drop_last`` showed the top-level
    usage. This parser looks at every ``--option`` it is given first (up to a ``--``), in
    the parser that owns them. Sub-parsers are of this class too (argparse makes them of
    their parent's class).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = sys.argv[1:] if args is None else list(args)
        self._refuse_unknown(given)
        return super().parse_known_args(given, namespace)

    def _refuse_unknown(self, args: list[str]) -> None:
        """``error`` for the first ``--option`` this parser does not know.

        argparse reads every ``--word`` as an option (never as a value), so each is
        checked; a parser with sub-commands stops at the first positional (the command,
        whose own parser checks the rest), and every parser stops at ``--``.
        """
        known = [option for option in self._option_string_actions if option.startswith("--")]
        commands = any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        for arg in args:
            if arg == "--" or (commands and not arg.startswith("-")):
                return
            if not arg.startswith("--"):
                continue
            name = arg.split("=", 1)[0]
            if name in known or (self.allow_abbrev and any(o.startswith(name) for o in known)):
                continue  # known, or a prefix argparse resolves (or calls ambiguous)
            near = closest(name, known)
            self.error(f"unrecognized option {name}" + (f"; did you mean {near}?" if near else ""))

    def error(self, message: str) -> NoReturn:
        """argparse's error, with the closest choice for an invalid choice."""
        found = _INVALID_CHOICE.search(message)
        if found:
            near = closest(found["wrong"], _QUOTED.findall(found["choices"]))
            if near and near != found["wrong"]:
                message += f"; did you mean {near}?"
        super().error(message)


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<wrong>[^']*)' \(choose from (?P<choices>.*)\)")
_QUOTED = re.compile(r"'([^']*)'")
