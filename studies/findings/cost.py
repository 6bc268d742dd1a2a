"""Finding: what an epoch costs in memory, stock sampler against ours, as N grows.

The bytes are counted in :data:`PROCESSES` fresh interpreters (more than a minute on two
cores) and are the same every run for the same code, Python and torch; so the finding
renders :data:`RECORD`, which ``python -m studies.findings.cost --record`` re-measures (it
names the machine and versions), and ``tests/test_cost_determinism.py`` measures a cheap
sample of it again in a fresh interpreter and compares.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from studies.common import records
from studies.common.figures import draw_lines
from studies.core.cases import Case, Implementation
from studies.core.simulate import IndexDataset, make_sampler
from studies.findings import Evidence, Picture, Table
from studies.findings.memory import python_heap, tensor_bytes

NAME = "cost"
TITLE = "Memory per epoch: the stock sampler against ours"
GUARDED_BY = "tests/test_findings.py::test_stock_heap_grows_with_n_and_ours_is_bounded"

#: The command that re-measures :data:`RECORD`, and the record.
COMMAND = "python -m studies.findings.cost --record"
RECORD = records.DATA / "cost-memory.json"

#: Small sizes locate where ours stops using less; large ones show the growth.
DATASET_SIZES: tuple[int, ...] = (10, 100, 300, 1_000, 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6)
WORLD_SIZE = 8
#: The rank measured (the last one, which receives the padding when there is any).
RANK = WORLD_SIZE - 1
IMPLEMENTATIONS: tuple[Implementation, ...] = ("torch", "samplers")

_MIB = 2**20
#: Fresh processes measured, each with its own hash seed; each number is their median.
PROCESSES = 5


def sampler(dataset_size: int, implementation: Implementation) -> object:
    """The sampler rank :data:`RANK` builds (shuffle on, seed 0, epoch 0)."""
    case = Case(dataset_size, WORLD_SIZE, 1, implementation=implementation)
    return make_sampler(case, IndexDataset(dataset_size), RANK)


def measure(dataset_size: int, implementation: Implementation) -> dict[str, int]:
    """One row of measurements: a pass under tracemalloc, then one counting tensors."""
    heap = python_heap(sampler(dataset_size, implementation))  # type: ignore[arg-type]
    tensors = tensor_bytes(sampler(dataset_size, implementation))  # type: ignore[arg-type]
    return {
        "dataset size": dataset_size,
        "implementation": implementation,
        "heap peak to first index": heap.peak_to_first,
        "heap held at first index": heap.held_at_first,
        "heap peak over the epoch": heap.peak_epoch,
        "tensor bytes to first index": tensors.to_first,
        "tensor bytes over the epoch": tensors.epoch,
        "largest tensor": tensors.largest,
    }


def measure_all(sizes: Sequence[int] = DATASET_SIZES) -> list[dict[str, int]]:
    """The table's rows for ``sizes``, measured in this process after a warm-up pass.

    The warm-up (each implementation at the smallest size) keeps one-off allocations
    (lazy imports, caches) out of the numbers.
    """
    for name in IMPLEMENTATIONS:
        measure(min(sizes), name)
    return [measure(size, name) for size in sizes for name in IMPLEMENTATIONS]


def measure_in_fresh_process(
    sizes: Sequence[int] = DATASET_SIZES, processes: int = PROCESSES
) -> list[dict[str, int]]:
    """:func:`measure_all` in ``processes`` new interpreters, the ``k``-th with hash seed
    ``k``; each number is the median over them.

    Python's free lists, arenas and caches depend on everything the process did before,
    which moves tracemalloc's numbers by a few dozen bytes. So each interpreter has only
    imported this module, and runs without address-space randomisation where Linux's
    ``setarch -R`` allows it. What it still cannot fix is CPython's type attribute cache,
    which keeps a name alive or evicts it depending on the name's address (see
    :func:`~studies.findings.memory.python_heap`): the bytes held at the first index leave
    those names out and are the same in every interpreter, but a peak can include one
    (67 bytes) in one interpreter and not in another, with the same hash seed too. So
    each number is the median of :data:`PROCESSES` interpreters, each with its own hash
    seed: two odd interpreters cannot move it.
    """
    rows = [_fresh_rows(sizes, hash_seed) for hash_seed in range(processes)]
    first = rows[0]
    return [
        {
            key: (
                value
                if key in ("dataset size", "implementation")
                else int(statistics.median_low(run[index][key] for run in rows))
            )
            for key, value in row.items()
        }
        for index, row in enumerate(first)
    ]


def _command(sizes: Sequence[int]) -> list[str]:
    command = [sys.executable, "-m", "studies.findings.cost", *map(str, sizes)]
    setarch = shutil.which("setarch")
    if sys.platform.startswith("linux") and setarch:
        return [setarch, platform.machine(), "-R", *command]
    return command


#: The variables a measuring process keeps: where programs, home and temporary files are.
_KEPT = ("PATH", "HOME", "TMPDIR", "LANG")


def _fresh_rows(sizes: Sequence[int], hash_seed: int = 0) -> list[dict[str, int]]:
    """:func:`measure_all` in one new interpreter with ``PYTHONHASHSEED=hash_seed``.

    Its environment is only :data:`_KEPT` of this one's, so that what earlier work left in
    ``os.environ`` (a test's or a report part's ``RANK``, Ray's variables, ...) cannot
    change what the measuring process imports and allocates."""
    root = Path(__file__).resolve().parents[2]
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    environment = {name: os.environ[name] for name in _KEPT if name in os.environ}
    environment["PYTHONHASHSEED"] = str(hash_seed)
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    command = _command(sizes)
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0 and command[0] != sys.executable:
        # setarch refused (e.g. no personality syscall in a sandbox): randomised layout.
        command = command[command.index(sys.executable) :]
        done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"measuring in a fresh process failed with exit code {done.returncode}:\n{done.stderr}"
        )
    rows: list[dict[str, int]] = json.loads(done.stdout)
    return rows


def settings() -> dict[str, object]:
    """What the record measures: sizes, world size, rank, implementations, processes."""
    return {
        "dataset sizes": list(DATASET_SIZES),
        "world size": WORLD_SIZE,
        "rank": RANK,
        "implementations": list(IMPLEMENTATIONS),
        "processes": PROCESSES,
    }


def record() -> dict[str, object]:
    """Measure the table in fresh interpreters (a minute or more): the record's content."""
    return {
        "machine": records.machine(),
        "versions": records.versions("torch"),
        "settings": settings(),
        "rows": measure_in_fresh_process(),
    }


def load(path: Path = RECORD) -> tuple[list[dict[str, int]], dict[str, dict[str, str]]]:
    """The recorded rows, and the record's machine and versions; ``RecordError`` naming
    the file when it is not the record or was made with other settings than the code's."""
    data = records.load(path, COMMAND)
    if data.get("settings") != settings():
        raise records.RecordError(
            f"{path} was recorded with other settings than the code's now: re-measure it "
            f"with {COMMAND}"
        )
    return data["rows"], {"machine": data["machine"], "versions": data["versions"]}


def crossover(stock: pd.Series, ours: pd.Series) -> str:
    """Where ours starts using less than stock, over the measured sizes (index: size)."""
    sizes = list(stock.index)
    less = [bool(ours[size] < stock[size]) for size in sizes]
    if all(less):
        return f"less at every size measured ({sizes[0]:,} to {sizes[-1]:,})"
    if not any(less):
        return f"more or the same at every size measured ({sizes[0]:,} to {sizes[-1]:,})"
    last_more = max(size for size, smaller in zip(sizes, less, strict=True) if not smaller)
    later = [size for size in sizes if size > last_more]
    if later and all(ours[size] < stock[size] for size in later):
        return f"more up to {last_more:,} samples, less from {later[0]:,} on"
    return "less at " + ", ".join(
        f"{size:,}" for size, smaller in zip(sizes, less, strict=True) if smaller
    )


def build() -> Evidence:
    rows, recorded = load()
    return evidence(rows, recorded)


def evidence(
    rows: Sequence[dict[str, int]], recorded: dict[str, dict[str, str]] | None = None
) -> Evidence:
    """The finding from measured rows (:func:`measure_in_fresh_process`'s, or the
    record's, whose machine and versions ``recorded`` gives)."""
    table = pd.DataFrame(list(rows))
    sizes = sorted(set(table["dataset size"]))
    stock = table[table["implementation"] == "torch"].set_index("dataset size")
    ours = table[table["implementation"] == "samplers"].set_index("dataset size")
    measured = [
        column for column in table.columns if column not in ("dataset size", "implementation")
    ]
    ratios = (ours[measured] / stock[measured]).reset_index(drop=True)
    ratios.columns = [f"{column}: ours / stock" for column in measured]
    ratios.insert(0, "dataset size", [f"{size:,}" for size in sizes])

    def draw(figure: Figure) -> None:
        draw_lines(
            figure,
            sizes,
            {
                "stock: peak to first index": (stock["heap peak to first index"] / _MIB).tolist(),
                "ours: peak to first index": (ours["heap peak to first index"] / _MIB).tolist(),
                "stock: held at first index": (stock["heap held at first index"] / _MIB).tolist(),
                "ours: held at first index": (ours["heap held at first index"] / _MIB).tolist(),
            },
            xlabel="dataset size",
            ylabel="Python heap (MiB, tracemalloc)",
            title=f"Rank {RANK} of {WORLD_SIZE}, shuffled, first index of epoch 0",
            logx=True,
            logy=True,
        )

    crossovers = pd.DataFrame(
        [
            {"measured": column, "ours compared with stock": crossover(stock[column], ours[column])}
            for column in measured
        ]
    )
    largest, previous = sizes[-1], sizes[-2]
    peak = "heap peak to first index"
    held = "heap held at first index"
    tensors = "tensor bytes to first index"
    stock_growth = stock.loc[largest, peak] / stock.loc[previous, peak]
    ours_growth = ours.loc[largest, peak] / ours.loc[previous, peak]
    claim = (
        "Before yielding its first index, the stock sampler turns the whole epoch order into "
        f"a list of Python ints: from {previous:,} to {largest:,} samples (x"
        f"{largest / previous:.2f}) its Python-heap peak grew {stock_growth:.2f} times, to "
        f"{stock.loc[largest, peak] / largest:.1f} bytes per sample. Ours converts only this "
        f"rank's share, a bounded chunk at a time: its peak grew {ours_growth:.4f} times. "
        f"Ours used {crossover(stock[peak], ours[peak])} for that peak."
    )
    prose = (
        f"At {largest:,} samples on {WORLD_SIZE} ranks, the stock sampler's Python heap peaks "
        f"at {_size(stock.loc[largest, peak])} before its first index "
        f"({stock.loc[largest, peak] / largest:.1f} bytes per sample), ours at "
        f"{_size(ours.loc[largest, peak])}. From {previous:,} to {largest:,} samples "
        f"the stock peak grows {stock.loc[largest, peak] / stock.loc[previous, peak]:.2f} "
        f"times and ours {ours.loc[largest, peak] / ours.loc[previous, peak]:.4f} times. "
        "While the iterator is alive after its first index, the stock sampler holds "
        f"{_size(stock.loc[largest, held])} (its rank's share as a list) and ours "
        f"{_size(ours.loc[largest, held])}. Tensor storage allocated by torch "
        f"operators before the first index is {stock.loc[largest, tensors] / largest:.2f} "
        f"bytes per sample for the stock sampler and {ours.loc[largest, tensors] / largest:.2f} "
        "for ours: both draw the whole permutation as a tensor; ours then also builds its "
        "positions and gathers its share in tensors.\n\n"
        "Where ours uses less: heap peak to the first index, "
        f"{crossover(stock[peak], ours[peak])}; heap held at the first index, "
        f"{crossover(stock[held], ours[held])}; tensor bytes to the first index, "
        f"{crossover(stock[tensors], ours[tensors])}. Below the first crossover the fixed "
        "cost of our chunked iterator outweighs the stock sampler's list.\n\n"
        "What is measured: bytes requested through Python's allocators (tracemalloc, with "
        "the garbage collector paused) and storage bytes of torch operator outputs (summed "
        "over the pass; frees are not tracked, so these are totals, not peaks). What is not: "
        "wall-clock time, resident memory, kernel scratch space and allocator overhead. "
        "Those depend on the machine and the run: `dsampler bench` measures them, and the "
        "speed finding records one such run with the machine it ran on."
    )
    if recorded is not None:
        prose += (
            "\n\nThese counts are a record: counting them takes "
            f"{PROCESSES} fresh interpreters, each measuring every size, and they are the "
            "same every run for the same code, Python and torch. So this finding renders "
            f"`studies/data/cost-memory.json`, made with `{COMMAND}` (which re-measures it) "
            "on "
            + ", ".join(f"{key} {value}" for key, value in recorded["machine"].items())
            + "; "
            + ", ".join(f"{key} {value}" for key, value in recorded["versions"].items())
            + ". tests/test_cost_determinism.py counts a sample of them again in a fresh "
            "interpreter and compares."
        )
    return Evidence(
        claim=claim,
        prose=prose,
        tables=(
            Table(
                "Bytes measured during one epoch on one rank",
                table,
                intfmt=",",
                note=(
                    f"Rank {RANK} of {WORLD_SIZE}, shuffle on, seed 0, epoch 0; each sampler is "
                    "iterated once under tracemalloc and once under an operator counter."
                ),
            ),
            Table("Ours divided by stock", ratios, floatfmt=".4f", intfmt=","),
            Table(
                "Where ours uses less than the stock sampler",
                crossovers,
                note="Over the dataset sizes measured above; `less` means strictly fewer bytes.",
            ),
        ),
        pictures=(
            Picture(
                "heap",
                "Python heap before and at the first index, against dataset size",
                draw,
                size=(6.4, 5.2),
            ),
        ),
    )


def _size(count: float) -> str:
    """A byte count in MiB, or in KiB below one MiB (so a small value does not read 0.0)."""
    if count >= _MIB:
        return f"{count / _MIB:,.1f} MiB"
    return f"{count / 2**10:,.1f} KiB"


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        records.save(RECORD, COMMAND, record())
        print(f"wrote {RECORD}", file=sys.stderr)
    else:
        print(json.dumps(measure_all([int(size) for size in sys.argv[1:]] or DATASET_SIZES)))
