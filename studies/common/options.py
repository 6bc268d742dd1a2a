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

* The option types of the token, packed and mixture samplers (:func:`size_list`,
  :func:`weight_list`, :func:`cost_label`, :func:`lengths_spec`, :func:`split_value`)
  read exactly what their help says and refuse anything else with an ``argparse`` error
  naming the text and what is expected; :func:`read_lengths` reads a file of lengths and
  refuses a missing, unreadable or too large file, or a value that is not a length,
  naming the file and the value.

None of them imports anything beyond the standard library, so ``dsampler --help`` and
every argument error are answered before torch or the studies are imported.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "DISTRIBUTIONS",
    "MAX_LENGTH_FILE_BYTES",
    "MAX_SIZE_DIGITS",
    "LengthsSpec",
    "Parser",
    "closest",
    "cost_label",
    "lengths_spec",
    "read_lengths",
    "size",
    "size_list",
    "split_value",
    "weight_list",
]

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


#: At most this many values in a list option (``--source-sizes``, ``--weights``).
MAX_LIST = 64
#: The distributions ``--lengths`` draws from, with the parameters each takes.
DISTRIBUTIONS = {"uniform": "LO:HI", "lognormal": "MEDIAN:SIGMA"}
#: A file of lengths is read whole: at most this many bytes.
MAX_LENGTH_FILE_BYTES = 64 * 2**20
#: The longest length a sample may have (the samplers count tokens in int64).
MAX_LENGTH = 2**62


def size_list(text: str) -> tuple[int, ...]:
    """Comma-separated sizes (each as :func:`size` reads it), at least one, at most
    :data:`MAX_LIST`: ``600,400`` or ``1e3,500``."""
    values = tuple(size(part) for part in text.split(","))
    if len(values) > MAX_LIST:
        raise argparse.ArgumentTypeError(
            f"invalid list {text!r}: {len(values)} values, at most {MAX_LIST}"
        )
    return values


def weight_list(text: str) -> tuple[float, ...]:
    """Comma-separated weights: finite numbers of at least 0, not all 0 (``0.7,0.3``)."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid weights {text!r}: {part!r} is not a number; give numbers such as "
                "0.7,0.3 (only their ratios matter)"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(
                f"invalid weights {text!r}: {part!r} is not a finite number of at least 0"
            )
        values.append(value)
    if not any(values):
        raise argparse.ArgumentTypeError(f"invalid weights {text!r}: all are 0")
    if len(values) > MAX_LIST:
        raise argparse.ArgumentTypeError(
            f"invalid weights {text!r}: {len(values)} values, at most {MAX_LIST}"
        )
    return tuple(values)


_COST = re.compile(r"^(?P<kind>padded|sum)(?:, ?quadratic=(?P<q>[0-9]+))?$")


def cost_label(text: str) -> str:
    """A token cost model as its label: ``padded``, ``sum``, or either with
    ``,quadratic=Q`` (``Q`` a whole number of at least 1), e.g. ``padded,quadratic=32``;
    returned as :attr:`samplers.TokenCost.label` writes it (``padded, quadratic=32``)."""
    found = _COST.match(text.strip())
    if not found or (found["q"] is not None and int(found["q"]) < 1):
        raise argparse.ArgumentTypeError(
            f"invalid cost {text!r}: give padded or sum, optionally with ,quadratic=Q for a "
            "whole Q of at least 1 (e.g. padded,quadratic=32)"
        )
    if found["q"] is None:
        return found["kind"]
    return f"{found['kind']}, quadratic={int(found['q'])}"


def split_value(text: str) -> str | int:
    """``long`` or a piece length (a size of at least 1): how the packed samplers cut
    documents (``split=``)."""
    if text == "long":
        return text
    try:
        value = size(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"invalid split {text!r}: give long or a piece length of at least 1"
        )
    return value


@dataclass(frozen=True)
class LengthsSpec:
    """What ``--lengths`` says: ``values`` given (a list or a file's), or a distribution
    (``kind`` one of :data:`DISTRIBUTIONS`) with its two parameters."""

    text: str
    kind: str  # "values", "file" or a distribution's name
    values: tuple[int, ...] = ()
    parameters: tuple[float, ...] = ()

    @property
    def path(self) -> Path:
        """The file a ``file`` spec names."""
        return Path(self.text)


_LIST = re.compile(r"[0-9]+(,[0-9]+)*")
_DIGITS = re.compile(r"[0-9]+")


def lengths_spec(text: str) -> LengthsSpec:
    """``--lengths``: comma-separated lengths (``8,1,8,6``), a distribution
    (``uniform:LO:HI``, whole numbers with ``1 <= LO <= HI``; ``lognormal:MEDIAN:SIGMA``,
    ``MEDIAN >= 1`` and ``SIGMA >= 0``) or the path of a file of lengths (read by
    :func:`read_lengths` once the options are checked)."""
    parts = [part.strip() for part in text.split(",")]
    if "," in text and not Path(text).exists():
        bad = next((part for part in parts if not _DIGITS.fullmatch(part)), None)
        if bad is not None:
            raise argparse.ArgumentTypeError(
                f"invalid lengths {text!r}: {bad!r} is not a length (comma-separated whole "
                "numbers of at least 0, e.g. 8,1,8,6)"
            )
    if _LIST.fullmatch(text) or ("," in text and all(map(_DIGITS.fullmatch, parts))):
        values = tuple(int(part) for part in parts)
        too_long = [value for value in values if value > MAX_LENGTH]
        if too_long:
            raise argparse.ArgumentTypeError(
                f"invalid lengths {text!r}: {too_long[0]} is longer than 2**62"
            )
        return LengthsSpec(text, "values", values)
    name, colon, rest = text.partition(":")
    if not colon or name not in DISTRIBUTIONS:
        return LengthsSpec(text, "file")
    expected = f"{name}:{DISTRIBUTIONS[name]}"
    parts = rest.split(":")
    try:
        numbers = tuple(float(part) for part in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != 2 or not all(math.isfinite(number) for number in numbers):
        raise argparse.ArgumentTypeError(
            f"invalid lengths {text!r}: {name} takes two numbers, {expected}"
        )
    first, second = numbers
    if name == "uniform" and not (
        first == int(first) and second == int(second) and 1 <= first <= second <= MAX_LENGTH
    ):
        raise argparse.ArgumentTypeError(
            f"invalid lengths {text!r}: uniform takes whole numbers 1 <= LO <= HI "
            "(e.g. uniform:16:512)"
        )
    if name == "lognormal" and not (1 <= first <= 2**40 and 0 <= second <= 4):
        raise argparse.ArgumentTypeError(
            f"invalid lengths {text!r}: lognormal takes MEDIAN >= 1 (at most 2**40) and "
            "SIGMA from 0 to 4 (e.g. lognormal:200:0.8)"
        )
    return LengthsSpec(text, name, parameters=numbers)


def read_lengths(spec: LengthsSpec, option: str = "--lengths") -> LengthsSpec:
    """``spec`` with the lengths of the file it names (integers separated by commas or
    whitespace, ``#`` comments); ``ValueError`` naming ``option``, the file and the
    reason otherwise. Other specs are returned as they are."""
    if spec.kind != "file":
        return spec
    where = f"{option} {spec.text}"
    try:
        found = spec.path.stat().st_size
        if found > MAX_LENGTH_FILE_BYTES:
            raise ValueError(
                f"{where}: the file holds {found} bytes, at most {MAX_LENGTH_FILE_BYTES}"
            )
        text = spec.path.read_text()
    except FileNotFoundError:
        raise ValueError(
            f"{where}: no such file (give comma-separated lengths, "
            f"{' or '.join(f'{n}:{p}' for n, p in DISTRIBUTIONS.items())}, or a file)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{where}: cannot be read ({error})") from None
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        for part in line.split("#", 1)[0].replace(",", " ").split():
            if not _DIGITS.fullmatch(part) or int(part) > MAX_LENGTH:
                raise ValueError(
                    f"{where}: line {number} holds {part!r}, not a length (a whole number "
                    "from 0 to 2**62)"
                )
            values.append(int(part))
    return LengthsSpec(spec.text, "file", tuple(values))


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
