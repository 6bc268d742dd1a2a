"""Forward and backward passes timed on CPU for the token-costs finding's samplers, recorded.

Run ``python -m studies.tokens.timing --record`` (about ten minutes on two cores; prints its
progress): for each length distribution of the finding at :data:`RANKS` ranks and each
sampler of :mod:`studies.tokens.costing`, the batches every rank gets at :data:`STEPS`
steps spread evenly over the epoch are put through a small transformer
(:class:`TinyTransformer`), one rank after the other in this one process, and each
rank's forward and backward pass is timed in CPU seconds of the process (on one thread,
the time other work holds the core is left out). Each (step, rank) is timed
:data:`REPEATS` times, interleaved (each repeat times the first chosen step of every
sampler, then the second, ...: a change of the machine's load falls on all of them
alike), and its median is written with the batches' lengths, the model's
shape and the machine's facts to :data:`RECORDED`, which the token-costs finding renders;
nothing is timed when the reports are built.

Guarantee: a recorded batch is processed as the finding's cost model counts it, at
1 / :data:`SCALE` of its length (each length ``max(1, length // SCALE)``):

* a padded batch is ``count`` rows of its longest sample, attention over each whole row
  (``count x longest²``, what a padded attention kernel computes);
* a packed batch (:data:`studies.tokens.costing.PACKED`) is its rows of the context length
  (rows told apart by :func:`samplers.tokens.packing.row_starts`, as the finding reads
  them), the linear layers over every position of the rows, attention within each
  sample only (one ``scaled_dot_product_attention`` call per sample: the work a varlen
  kernel given ``cu_seqlens`` does, without its single launch).

The model is :data:`WIDTH` wide, so that its attention costs about ``length / (6 x
width)`` of its linear layers per token at the scaled lengths: the same share as the
finding's step model (width 1024) at the full lengths. Weights come from
``torch.manual_seed(SEED)``, inputs from a generator seeded per batch; torch runs on
:data:`THREADS` thread; a warm-up passes the largest shapes through first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from samplers.tokens.packing import row_starts

__all__ = [
    "MARK",
    "RANKS",
    "RECORDED",
    "SCALE",
    "STEPS",
    "Batch",
    "TinyTransformer",
    "chosen_steps",
    "compared",
    "load",
    "record",
    "scaled_batch",
    "stale",
    "time_batch",
]

RECORDED = Path(__file__).resolve().parents[1] / "data" / "token-timing.json"
#: The key and value that mark a file as a recorded timing run: the command as the
#: committed record and the report quote it (``studies/token_timing.py`` runs this module).
MARK = ("generated_by", "python -m studies.token_timing --record")
#: Lengths (and so the context and the budget) are divided by this for CPU.
SCALE = 4
#: The transformer: layers, width, heads (the MLP is 4 x width wide).
LAYERS, WIDTH, HEADS = 2, 256, 4
#: Steps timed per sampler, spread evenly over its epoch.
STEPS = 4
#: Times each (step, rank) is timed; the record keeps the median.
REPEATS = 3
#: Ranks whose batches are timed (the finding's smaller world size).
RANKS = 4
#: torch's intra-op threads: one, so that the other work on a shared machine does not
#: make torch's pool wait on itself.
THREADS = 1
SEED = 0


class Batch:
    """A batch as the model processes it: ``rows`` rows of ``length`` positions, each row's
    samples as ``(start, end)`` spans (attention runs within each span only)."""

    def __init__(self, length: int, spans: list[list[tuple[int, int]]]) -> None:
        self.length = length
        self.spans = spans

    @property
    def rows(self) -> int:
        return len(self.spans)

    @property
    def samples(self) -> int:
        return sum(map(len, self.spans))


def scaled_batch(packed: bool, lengths: Sequence[int], context: int, scale: int = SCALE) -> Batch:
    """The batch of full-scale ``lengths`` (in the sampler's order) at 1/``scale``.

    Padded: one row per sample, each the longest sample's length, attended whole. Packed:
    the rows :func:`row_starts` finds for ``context``, each ``context // scale`` long (or
    its scaled samples' sum, if longer), attention within each sample.
    """
    if scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    scaled = [max(1, int(length) // scale) for length in lengths]
    if not scaled:
        return Batch(0, [])
    if not packed:
        longest = max(scaled)
        return Batch(longest, [[(0, longest)] for _ in scaled])
    starts = row_starts(list(lengths), context)
    ends = [*starts[1:], len(scaled)]
    spans = []
    for start, end in zip(starts, ends, strict=True):
        row, position = [], 0
        for size in scaled[start:end]:
            row.append((position, position + size))
            position += size
        spans.append(row)
    length = max(context // scale, *(row[-1][1] for row in spans))
    return Batch(length, spans)


class _Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, spans: list[list[tuple[int, int]]] | None) -> torch.Tensor:
        rows, length, width = x.shape
        qkv = self.qkv(self.norm1(x))
        if spans is None:  # padded rows: attention over each whole row
            q, k, v = qkv.view(rows, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            attended = attended.transpose(1, 2).reshape(rows, length, width)
        else:  # packed rows: attention within each sample; a row's unused tail gives 0
            q, k, v = qkv.view(rows * length, 3, self.heads, -1).permute(1, 2, 0, 3)
            sizes, attend = [], []
            for segments in spans:
                for a, b in segments:
                    sizes.append(b - a)
                    attend.append(True)
                if segments[-1][1] < length:
                    sizes.append(length - segments[-1][1])
                    attend.append(False)
            # split (not slicing): its backward is one concatenation, not a zero-filled
            # copy of the whole tensor per piece.
            parts = [
                F.scaled_dot_product_attention(qi, ki, vi, is_causal=True) if used else vi * 0
                for qi, ki, vi, used in zip(
                    q.split(sizes, 1), k.split(sizes, 1), v.split(sizes, 1), attend, strict=True
                )
            ]
            attended = torch.cat(parts, 1).transpose(0, 1).reshape(rows, length, width)
        x = x + self.out(attended)
        result: torch.Tensor = x + self.down(F.gelu(self.up(self.norm2(x))))
        return result


class TinyTransformer(nn.Module):
    """Pre-norm transformer blocks (no embedding: the inputs are random vectors)."""

    def __init__(self, layers: int = LAYERS, width: int = WIDTH, heads: int = HEADS) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width must be a multiple of heads, got {width} and {heads}")
        self.width = width
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, batch: Batch, packed: bool) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, batch.spans if packed else None)
        return x


def time_batch(model: TinyTransformer, batch: Batch, packed: bool, seed: int = SEED) -> float:
    """CPU seconds of one forward and backward pass over ``batch`` (0.0 for no batch):
    the process's CPU time (``time.process_time``), which on one thread leaves out the
    time other work on the machine holds the core. The inputs are drawn before the clock
    starts, the gradients dropped after it stops."""
    if batch.rows == 0:
        return 0.0
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch.rows, batch.length, model.width, generator=generator)
    start = time.process_time()
    model(x, batch, packed).square().mean().backward()
    elapsed = time.process_time() - start
    model.zero_grad(set_to_none=True)
    return elapsed


def chosen_steps(total: int, count: int = STEPS) -> list[int]:
    """``count`` steps of ``total`` spread evenly: the middle of each of ``count`` equal
    parts of the epoch (every step when there are no more than ``count``)."""
    if total <= count:
        return list(range(total))
    return [(2 * part + 1) * total // (2 * count) for part in range(count)]


#: One run to time: (data, ranks, sampler key, packed, epoch steps, the timed steps, and
#: per timed step each rank's batch as full-scale lengths).
Run = tuple[str, int, str, bool, int, list[int], list[list[list[int]]]]


def runs(
    steps: int = STEPS, ranks: int = RANKS, samplers: Sequence[str] | None = None
) -> list[Run]:
    """The batches to time: the finding's samplers on its distributions at ``ranks``."""
    from studies.tokens.costing import PACKED, SAMPLERS
    from studies.tokens.lengths import CONTEXT, MAX_TOKENS, datasets
    from studies.tokens.lengths import SEED as DATA_SEED

    chosen: list[Run] = []
    for name, lengths in datasets().items():
        values = lengths.tolist()
        for key, run in SAMPLERS.items():
            if samplers is not None and key not in samplers:
                continue
            shares = run(lengths, ranks, 0, DATA_SEED, MAX_TOKENS, CONTEXT)
            if shares is None:
                continue  # an optional peer that is not installed
            total = max(len(share) for share in shares)
            picked = chosen_steps(total, steps)
            batches = [
                [[values[i] for i in share[step]] if step < len(share) else [] for share in shares]
                for step in picked
            ]
            chosen.append((name, ranks, key, key in PACKED, total, picked, batches))
    return chosen


def measure(
    chosen: Sequence[Run],
    context: int,
    repeats: int = REPEATS,
    model: TinyTransformer | None = None,
    scale: int = SCALE,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Time every rank's batch at every chosen step ``repeats`` times (interleaved: each
    repeat times every run's first chosen step, then every run's second, ...); one row
    per run with each (step, rank)'s median, least and most CPU seconds."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if model is None:
        torch.manual_seed(SEED)
        model = TinyTransformer()
    scaled = [
        [[scaled_batch(packed, batch, context, scale) for batch in step] for step in batches]
        for _, _, _, packed, _, _, batches in chosen
    ]
    # Warm-up: the largest padded and packed batches of every run, once, untimed.
    for (_, _, _, packed, _, _, _), steps in zip(chosen, scaled, strict=True):
        largest = max((b for step in steps for b in step), key=lambda b: b.rows * b.length)
        time_batch(model, largest, packed)
    timings: list[list[list[list[float]]]] = [
        [[[] for _ in step] for step in steps] for steps in scaled
    ]
    started = time.perf_counter()
    most = max((len(steps) for steps in scaled), default=0)
    for repeat in range(repeats):
        for step in range(most):  # every run's step, then the next: a change of load is shared
            for number, ((*_, packed, _, _, _), steps) in enumerate(
                zip(chosen, scaled, strict=True)
            ):
                for rank, batch in enumerate(steps[step] if step < len(steps) else []):
                    timings[number][step][rank].append(time_batch(model, batch, packed))
            progress(
                f"repeat {repeat + 1}/{repeats}, timed step {step + 1}/{most} of every run "
                f"({time.perf_counter() - started:.0f} s)"
            )
    rows = []
    for (name, ranks, key, packed, total, picked, lengths), timed in zip(
        chosen, timings, strict=True
    ):
        rows.append(
            {
                "data": name,
                "ranks": ranks,
                "sampler": key,
                "packed": packed,
                "epoch steps": total,
                "steps": picked,
                "batches": lengths,
                "seconds": [[statistics.median(t) for t in step] for step in timed],
                "least": [[min(t) for t in step] for step in timed],
                "most": [[max(t) for t in step] for step in timed],
            }
        )
    return rows


def compared(recorded: dict[str, Any], context: int) -> list[dict[str, Any]]:
    """Each recorded run, measured against simulated over the same timed steps: the
    seconds per sample processed (the sum over steps of the slowest rank's time, over
    the samples the ranks took), the straggler ratio (the sum over steps of the slowest
    rank's time over the sum of the ranks' mean), each once measured (the medians) and
    once simulated (:func:`studies.tokens.costing.simulated_step` of the full-scale
    lengths); and the time per sample over ours padded's on the same data."""
    from studies.tokens.costing import simulated_step

    rows = []
    for run in recorded["runs"]:
        samples = sum(len(batch) for step in run["batches"] for batch in step)
        simulated = [
            [simulated_step(run["sampler"], batch, context) for batch in step]
            for step in run["batches"]
        ]
        found = {"data": run["data"], "ranks": run["ranks"], "sampler": run["sampler"]}
        for kind, times in (("measured", run["seconds"]), ("simulated", simulated)):
            slowest = sum(max(step) for step in times)
            mean = sum(sum(step) / len(step) for step in times)
            found[f"per sample, {kind}"] = slowest / samples if samples else 0.0
            found[f"straggler ratio, {kind}"] = slowest / mean if mean else 1.0
        found["steps timed"] = len(run["steps"])
        found["epoch steps"] = run["epoch steps"]
        found["samples"] = samples
        rows.append(found)
    for found in rows:
        padded = next(
            other
            for other in rows
            if other["sampler"] == "padded"
            and (other["data"], other["ranks"]) == (found["data"], found["ranks"])
        )
        for kind in ("measured", "simulated"):
            found[f"per sample / padded, {kind}"] = (
                found[f"per sample, {kind}"] / padded[f"per sample, {kind}"]
            )
    return rows


def stale(recorded: dict[str, Any], current: dict[tuple[str, int, str], Any]) -> list[str]:
    """The recorded runs whose batches differ from ``current[(data, ranks, key)]`` (the
    samplers' shares now, by dataset index, with ``lengths[data]``), as
    ``"data, ranks, key"``; a run with no current shares (a peer not installed) is left
    out."""
    differing = []
    for run in recorded["runs"]:
        found = current.get((run["data"], run["ranks"], run["sampler"]))
        if found is None:
            continue
        shares, values = found
        now = [
            [[values[i] for i in share[step]] if step < len(share) else [] for share in shares]
            for step in run["steps"]
        ]
        total = max(len(share) for share in shares)
        if now != run["batches"] or total != run["epoch steps"]:
            differing.append(f"{run['data']}, {run['ranks']}, {run['sampler']}")
    return differing


def _machine() -> dict[str, Any]:
    import psutil

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "processor": model or platform.processor(),
        "memory (GB)": round(psutil.virtual_memory().total / 10**9),
        "Python": platform.python_version(),
        "torch": torch.__version__,
    }


def record(
    steps: int = STEPS,
    repeats: int = REPEATS,
    samplers: Sequence[str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Time the finding's samplers (see the module); the record :func:`load` reads."""
    from studies.tokens.lengths import CONTEXT

    torch.set_num_threads(THREADS)
    started = time.perf_counter()
    before = os.getloadavg()
    chosen = runs(steps, RANKS, samplers)
    progress(f"{len(chosen)} runs planned ({time.perf_counter() - started:.0f} s)")
    rows = measure(chosen, CONTEXT, repeats, progress=progress)
    after = os.getloadavg()
    return {
        MARK[0]: MARK[1],
        "machine": _machine(),
        "load average (1 min) before, after": [round(before[0], 2), round(after[0], 2)],
        "threads": THREADS,
        "clock": "time.process_time (CPU seconds of the process)",
        "model": {"layers": LAYERS, "width": WIDTH, "heads": HEADS, "mlp": 4 * WIDTH},
        "scale": SCALE,
        "context": CONTEXT,
        "steps per run": steps,
        "repeats": repeats,
        "seed": SEED,
        "seconds recording": round(time.perf_counter() - started, 1),
        "runs": rows,
    }


def record_text(recorded: dict[str, Any]) -> str:
    """The record's text: its facts indented, one line per run."""
    head = {key: value for key, value in recorded.items() if key != "runs"}
    lines = ",\n".join(f"    {json.dumps(row)}" for row in recorded["runs"])
    opening = json.dumps(head, indent=2)[:-2]  # without the closing brace
    return f'{opening},\n  "runs": [\n{lines}\n  ]\n}}\n'


def load(path: Path = RECORDED) -> dict[str, Any]:
    """The recorded run in ``path``; ``ValueError`` naming the file when it is not one."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get(MARK[0]) != MARK[1]:
        raise ValueError(f"{path} is not a recorded timing run (no {MARK[0]!r} mark)")
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--record", action="store_true", help=f"time and write {RECORDED}")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--samplers", nargs="+", help="only these sampler keys")
    parser.add_argument("--out", type=Path, default=RECORDED)
    arguments = parser.parse_args(argv)
    if not arguments.record:
        parser.error("nothing to do: pass --record")
    recorded = record(
        arguments.steps,
        arguments.repeats,
        arguments.samplers,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
    )
    arguments.out.write_text(record_text(recorded))
    print(f"written to {arguments.out} in {recorded['seconds recording']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
