"""How long ``dsampler report`` takes, part by part: measured, recorded with the machine's load.

``python -m studies.report_time --record`` runs ``dsampler report`` on this checkout into a
new temporary directory, in a fresh process as a user runs it, and times the whole
command; each part's seconds are read from the lines the report prints on stderr as the
parts finish (``dsampler report: 3/30 padding, 1.2 s``). It writes :data:`RECORD` (the
machine, the versions, the load average before and after, the seconds, and any other
line on stderr: a quiet report prints none) and rewrites the table of the CLI guide's
section on how long the report takes, between :data:`MARKERS`. Run it on a quiet machine.

``tests/test_reports.py`` holds the record to :data:`CEILING` (the goal, :data:`BUDGET`):
the report within it, silent, with every part the report has now, so a new finding
cannot add minutes without a new measurement showing that the report still fits.
(What makes the report fast is checked there too, without a clock: the findings that
render records start no process.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from studies.common import records

__all__ = [
    "BUDGET",
    "CEILING",
    "COMMAND",
    "GUIDE",
    "MARKERS",
    "RECORD",
    "duration",
    "guide_block",
    "load",
    "measure",
    "parse",
    "with_block",
]

#: Seconds ``dsampler report`` should take on the project's 2-core machine when quiet: the
#: goal, which the recorded run does not meet yet (the guide's table says by how much).
BUDGET = 120.0
#: Seconds the recorded run may take at most: the goal, met by the recorded run, so a
#: re-measured report slower than it fails ``tests/test_reports.py``.
CEILING = BUDGET
#: The command that re-measures :data:`RECORD`.
COMMAND = "python -m studies.report_time --record"
#: The measured run.
RECORD = records.DATA / "report-time.json"
#: The CLI guide, whose table between :data:`MARKERS` is generated from the record.
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "cli.md"
MARKERS = ("<!-- report-time:start -->", "<!-- report-time:end -->")

_PROGRESS = re.compile(r"^dsampler report: (\d+)/(\d+) (.+), (\d+(?:\.\d+)?) s$")


def parse(stderr: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The parts' ``{"part", "seconds"}`` in the order they finished, and every other
    non-empty line of ``stderr``."""
    parts, other = [], []
    for line in stderr.splitlines():
        found = _PROGRESS.match(line)
        if found:
            parts.append({"part": found.group(3), "seconds": float(found.group(4))})
        elif line.strip():
            other.append(line)
    return parts, other


def measure() -> dict[str, Any]:
    """Run ``dsampler report`` into a new temporary directory and time it: the record's
    content. Raises ``RuntimeError`` with its stderr when the report fails."""
    script = Path(sys.executable).with_name("dsampler")
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from studies.console import main; main()"]
    )
    root = Path(__file__).resolve().parents[1]
    before = _load_average()
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "reports"
        started = time.perf_counter()
        done = subprocess.run(
            [*command, "report", "--output", str(output)],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        same = _same_as_committed(output, root / "reports")
    if done.returncode != 0:
        raise RuntimeError(f"dsampler report failed ({done.returncode}):\n{done.stderr}")
    parts, other = parse(done.stderr)
    return {
        "machine": records.machine(),
        "versions": records.versions("torch", "ray", "hypothesis"),
        "load average (1 min) before, after": [before, _load_average()],
        "seconds": round(seconds, 1),
        "same as the committed reports": same,
        "stderr": other,
        "parts": parts,
    }


def _same_as_committed(output: Path, committed: Path) -> bool:
    """Whether the report wrote exactly the committed reports' files, byte for byte."""
    names = {path.name for path in output.iterdir()}
    if names != {path.name for path in committed.iterdir()}:
        return False
    return all((output / name).read_bytes() == (committed / name).read_bytes() for name in names)


def _load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def load(path: Path = RECORD) -> dict[str, Any]:
    """The recorded run (``RecordError`` naming the file when it is not the record)."""
    return records.load(path, COMMAND)


def duration(seconds: float) -> str:
    """``seconds`` as the README and Getting started say how long the report took: whole
    seconds, in minutes and seconds from a minute on (``"2 min 5 s"``)."""
    whole = round(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if minutes else f"{whole} s"


def guide_block(record: dict[str, Any]) -> str:
    """The CLI guide's text between :data:`MARKERS`, from the record."""
    machine = record["machine"]
    rows = sorted(record["parts"], key=lambda part: -part["seconds"])
    table = "\n".join(f"| {part['part']} | {part['seconds']:.1f} |" for part in rows)
    seconds = record["seconds"]
    load = record["load average (1 min) before, after"]
    verdict = (
        f"within the {BUDGET:.0f} s goal"
        if seconds <= BUDGET
        else f"{seconds / BUDGET:.1f} times the {BUDGET:.0f} s goal, which it does not meet yet"
    )
    return (
        f"In one run ({machine['cores']} cores, {machine['CPU']}; load average over one "
        f"minute {load[0]} before it and {load[1]} after; "
        f"recorded by `{COMMAND}` in `studies/data/report-time.json`), `dsampler report` "
        f"took {seconds:.0f} s: {verdict}. How long each part took in that run, longest "
        "first (`dsampler report` prints these lines as the parts finish, side by side):\n"
        "\n"
        "| part | seconds |\n"
        "|:--|--:|\n"
        f"{table}\n" + _stderr_said(record["stderr"])
    )


def _stderr_said(lines: list[str]) -> str:
    """What the run printed on stderr besides its progress lines, as the guide says it."""
    if not lines:
        return "\nIt printed nothing on stderr besides those lines.\n"
    quoted = "\n".join(f"    {line}" for line in lines)
    return f"\nBesides those lines it printed on stderr what follows:\n\n{quoted}\n"


def with_block(text: str, block: str) -> str:
    """``text`` with what lies between :data:`MARKERS` replaced by ``block``."""
    start, end = MARKERS
    head, found, rest = text.partition(f"{start}\n")
    _middle, closed, tail = rest.partition(end)
    if not found or not closed:
        raise ValueError(f"the guide has no {start} ... {end} block")
    return f"{head}{start}\n{block}{end}{tail}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        raise SystemExit(f"usage: {COMMAND}")
    measured = measure()
    records.save(RECORD, COMMAND, measured)
    GUIDE.write_text(with_block(GUIDE.read_text(), guide_block(measured)))
    print(f"wrote {RECORD} and the table of {GUIDE}", file=sys.stderr)
