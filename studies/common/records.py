"""Committed records of measurements too costly for every report: what they name, how they
are written and read.

A finding whose measurement is expensive and whose result is a recorded fact (what a Ray
cluster's restarts observed, the guarantee search's full outcome, bytes counted in fresh
interpreters) renders a record under ``studies/data/`` instead of measuring it again. A
record is allowed only when a documented command re-measures it, the record names its
machine and versions, and a test re-runs a cheap sample of it and compares. This module
holds the first two: every record starts with ``generated_by`` (the command that
re-measures it, which also marks the file as a record), ``machine`` (:func:`machine`) and
``versions`` (:func:`versions`).

Guarantee: :func:`load` gives back exactly the object :func:`save` was given (JSON
values), or raises :class:`RecordError` naming the file; :func:`save` replaces only a file
carrying the same command, and writes it whole or not at all (a temporary file renamed
over it).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = [
    "DATA",
    "MARK",
    "RecordError",
    "Rows",
    "cpu_model",
    "load",
    "machine",
    "save",
    "versions",
    "write_whole",
]

#: Where the records live.
DATA = Path(__file__).resolve().parents[1] / "data"
#: The key whose value is the command that re-measures a record.
MARK = "generated_by"


class RecordError(ValueError):
    """A record cannot be read, or may not be replaced; the message names the file."""


def machine() -> dict[str, str]:
    """The machine a record was measured on: processor, cores, memory, operating system."""
    import psutil

    return {
        "CPU": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": f"{round(psutil.virtual_memory().total / 10**9)} GB",
        "system": f"{platform.system()} {platform.machine()}",
    }


def versions(*distributions: str) -> dict[str, str]:
    """Python's version and each distribution's (``"not installed"`` when missing)."""
    found = {"Python": platform.python_version()}
    for name in distributions:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def save(path: Path, command: str, content: dict[str, Any]) -> None:
    """Write ``content`` to ``path`` as the record re-measured by ``command``.

    Raises :class:`RecordError` when ``path`` exists and is not a record of ``command``.
    """
    path = Path(path)
    if path.exists():
        try:
            load(path, command)
        except RecordError:
            raise RecordError(
                f"{path} exists and is not a record of {command!r}: not replaced"
            ) from None
    write_whole(path, _text({MARK: command, **content}))


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(name, 0o644)
        os.replace(name, path)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def load(path: Path, command: str) -> dict[str, Any]:
    """The record in ``path``, which ``command`` re-measures (``RecordError`` otherwise)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordError(f"{path} cannot be read as a record: {error}") from None
    if not isinstance(data, dict) or data.get(MARK) != command:
        raise RecordError(f"{path} is not a record of {command!r} (its {MARK!r} differs)")
    for key in ("machine", "versions"):
        if not isinstance(data.get(key), dict):
            raise RecordError(f"{path} does not name its {key}")
    return data


def _text(data: dict[str, Any]) -> str:
    """The record as JSON: one line per top-level key, a list's items one per line."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            items = ",\n".join(f"    {json.dumps(item)}" for item in value)
            lines.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


@dataclass(frozen=True)
class Rows:
    """Rows of a finding's table that come from running a peer's code too costly for every
    report, recorded one per key.

    ``measure(*key)`` computes the row of ``key`` (a dict of JSON values; numpy scalars
    are stored as Python numbers), ``keys()`` lists the keys the table needs, in its
    order, and ``settings()`` what the rows depend on besides the code and the versions
    (sizes, seeds, weights): a record made with other settings, or without a row the
    table needs, is refused with the command that re-measures it.

    Guarantee: :meth:`load` gives back, for every key of ``keys()``, the row
    ``measure(*key)`` returned when :meth:`save` ran, equal as JSON values (a test runs a
    cheap key again and compares it with :meth:`load`'s).
    """

    path: Path
    command: str
    measure: Callable[..., dict[str, Any]]
    keys: Callable[[], Sequence[tuple[Hashable, ...]]]
    settings: Callable[[], dict[str, Any]]
    #: The distributions whose versions the record names (Python's always).
    distributions: tuple[str, ...]

    def row(self, *key: Hashable) -> dict[str, Any]:
        """``measure(*key)`` as the record stores it (JSON values)."""
        return _json_values(self.measure(*key))

    def save(self) -> None:
        """Measure every key and write the record (whole or not at all)."""
        rows = [{"key": list(key), "row": self.row(*key)} for key in self.keys()]
        content = {
            "machine": machine(),
            "versions": versions(*self.distributions),
            "settings": _json_values(self.settings()),
            "rows": rows,
        }
        save(self.path, self.command, content)

    def load(self) -> dict[tuple[Hashable, ...], dict[str, Any]]:
        """Every key's recorded row (:class:`RecordError` naming the file and the command
        when the record is missing, is not this one, or was made with other settings or
        for other keys)."""
        data = load(self.path, self.command)
        if data.get("settings") != _json_values(self.settings()):
            raise RecordError(
                f"{self.path} was recorded with other settings than the code's now: "
                f"re-measure it with {self.command}"
            )
        rows = {tuple(item["key"]): item["row"] for item in data.get("rows", [])}
        missing = [key for key in self.keys() if tuple(key) not in rows]
        if missing:
            raise RecordError(
                f"{self.path} has no row for {missing[0]!r}: re-measure it with {self.command}"
            )
        return {tuple(key): rows[tuple(key)] for key in self.keys()}

    def main(self, arguments: Sequence[str] | None = None) -> None:
        """The record's command line: ``--record`` measures every key and writes the
        record (:meth:`save`), naming the file on stderr; anything else exits with the
        usage (the command)."""
        import sys

        given = sys.argv[1:] if arguments is None else list(arguments)
        if given != ["--record"]:
            sys.exit(f"usage: {self.command}")
        self.save()
        print(f"wrote {self.path}", file=sys.stderr)

    def provenance(self, why: str, what: str, test: str) -> str:
        """A sentence for a finding: ``why`` measuring is costly, so it renders ``what``
        from this record, where it is, the command that re-measures it, ``test`` (which
        runs some of it again and compares), and the machine and versions it names."""
        data = load(self.path, self.command)
        root = DATA.parents[1]
        where = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        return (
            f"{why}, so this finding renders {what} from a record (`{where}`, made with "
            f"`{self.command}`, which re-measures it; {test}): on "
            + ", ".join(f"{key} {value}" for key, value in data["machine"].items())
            + "; "
            + ", ".join(f"{key} {value}" for key, value in data["versions"].items())
            + "."
        )


def _json_values(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists, numpy scalars as numbers)."""

    def plain(item: Any) -> Any:
        if hasattr(item, "item") and callable(item.item):
            return item.item()
        raise TypeError(f"{item!r} ({type(item).__name__}) is not a JSON value")

    return json.loads(json.dumps(value, default=plain))


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
