"""Whole epochs of the token-costs finding's samplers timed on a device (a GPU), recorded.

On a CUDA machine, from the repository's root::

    python -m studies.tokens.epoch_timing --device cuda --record

(``--layers``, ``--width``, ``--heads`` and ``--vocabulary`` give the model, by default
:data:`DEFAULT_MODEL`; ``--samples`` the subset of each length distribution; it prints its
progress and writes ``studies/data/token-epochs-<device>-<date>.json``, which the
token-costs finding renders, the newest one, next to the CPU record of
:mod:`studies.tokens.timing`.) ``--smoke`` runs the same code on CPU in seconds (a tiny
model, :data:`SMOKE_SAMPLES` samples, lengths divided by :data:`SMOKE_SCALE`) and writes
where ``--out`` says: ``tests/test_token_epochs.py`` runs it, so CI covers the recorder
on machines without a GPU. A smoke record is marked as one and never rendered.

What is timed. For each length distribution of :func:`studies.tokens.lengths.datasets`, a
random subset of ``--samples`` samples (seeded), and each sampler of
:data:`studies.tokens.costing.SAMPLERS` at :data:`RANKS` ranks, every rank's batch at
every step of the whole epoch, one rank after the other in this one process (the ranks'
batches are what the samplers give each rank; the model is one), through a GPT-style
model (:class:`Model`: embedding, pre-norm blocks with causal attention, a
language-model head and cross-entropy; bf16 autocast and AdamW on CUDA), forward,
backward and the optimizer's step. Each (step, rank) is timed alone: the device is
synchronised, a CUDA event recorded, the step run, a second event recorded and waited
for (``time.perf_counter`` on CPU), so a step's time includes the host's work the device
waited on (an attention plan built on the host, say).

* Padded samplers' batches (each sample padded to the batch's longest, padding left out
  of the loss, ``is_causal=True`` and no mask, the layout flash attention can run) are
  timed once per mode of :data:`PADDED_MODES`: ``"default"`` (PyTorch's SDPA picks the
  backend), ``"flash"`` (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``) and
  ``"default, x128"`` (the default backend, each batch padded further to a multiple of
  :data:`PAD_MULTIPLE` positions: one of the cures of the default backend's per-shape
  planning, see ``docs/guides/packing.md``);
* packed samplers' batches (rows of the context, :data:`studies.tokens.costing.PACKED`)
  once, mode ``"varlen"``: attention within each sample through
  ``torch.nn.attention.varlen.varlen_attn`` over the rows' ``cu_seqlens`` (each row's
  unused tail a sequence of its own); on CPU, where it has no kernel, one
  ``scaled_dot_product_attention`` call per sequence instead.

The backend each batch ran on is recorded: for SDPA what ``torch._fused_sdp_choice``
picks for that batch's tensors under the mode, for packed batches the varlen kernel;
with each batch whether its attention shape was new to that backend in this process.

**The fitted cost.** After a distribution's samplers, :func:`samplers.fit_cost` is fitted
to the ``"flash"`` steps of its padded samplers (``kind="padded"``, a quarter held out)
and ours is run under it (``cost=fitted.cost``, ``max_tokens=fitted.max_tokens`` of the
fitted time of the fullest padded batch, :data:`ROWS` samples of the context), timed in
the padded modes as sampler ``"fitted"``; the fit and its held-out check are recorded.

The record also holds the device (name, capability, memory), the driver, CUDA, cuDNN,
torch and SDPA's backend priority order, the model, and the load (the load average
before and after, the device's memory in use and utilisation before).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import inspect
import itertools
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from studies.tokens.lengths import CONTEXT, MAX_TOKENS
from studies.tokens.timing import scaled_batch

__all__ = [
    "DATA",
    "DEFAULT_MODEL",
    "MARK",
    "PADDED_MODES",
    "PAD_MULTIPLE",
    "RANKS",
    "ROWS",
    "SMOKE_MODEL",
    "Model",
    "ModelShape",
    "Prepared",
    "fit_padded",
    "main",
    "prepare",
    "record",
    "subset",
]

DATA = Path(__file__).resolve().parents[1] / "data"
#: The key and value that mark a file as a recorded epoch timing.
MARK = ("generated_by", "python -m studies.tokens.epoch_timing --record")
#: Ranks whose batches are timed (the token-costs finding's smaller world size).
RANKS = 4
#: Samples of each length distribution (a seeded random subset), and in smoke mode.
SAMPLES, SMOKE_SAMPLES = 3000, 96
#: Lengths are processed at 1 / scale: 1 on a GPU, this in smoke mode.
SMOKE_SCALE = 32
#: The default mode's cure: padded lengths rounded up to a multiple of this.
PAD_MULTIPLE = 128
PADDED_MODES = ("default", "flash", f"default, x{PAD_MULTIPLE}")
PACKED_MODE = "varlen"
SEED = 0
#: The samplers' epoch timed.
EPOCH = 0


@dataclass(frozen=True)
class ModelShape:
    """The GPT-style model: layers, width, heads (the MLP is 4 x width), vocabulary."""

    layers: int
    width: int
    heads: int
    vocabulary: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.width % self.heads:
            raise ValueError(
                f"width must be a multiple of heads, got {self.width} and {self.heads}"
            )


#: What the issue measured on an H200: about 141M parameters.
DEFAULT_MODEL = ModelShape(layers=6, width=1024, heads=16, vocabulary=32000)
SMOKE_MODEL = ModelShape(layers=1, width=32, heads=2, vocabulary=64)


# The batches ------------------------------------------------------------------------------


@dataclass
class Prepared:
    """One rank's batch as the model takes it (on the device), and what the record keeps."""

    tokens: torch.Tensor  # (rows, positions)
    labels: torch.Tensor  # (rows, positions), -100 where no loss is taken
    packed: bool
    #: Packed: the sequences' boundaries in ``tokens.view(-1)`` (int32) and the longest.
    cu_seqlens: torch.Tensor | None
    max_seqlen: int
    #: Padded: [count, positions]; packed: [samples, rows].
    shape: list[int]


def prepare(
    lengths: Sequence[int],
    packed: bool,
    context: int,
    scale: int,
    vocabulary: int,
    device: torch.device,
    seed: int,
    multiple: int = 1,
) -> Prepared:
    """The batch of full-scale ``lengths`` (in the sampler's order) at 1 / ``scale``, its
    tokens drawn from a generator seeded ``seed``. Padded: one row per sample, as long as
    the longest rounded up to a multiple of ``multiple``, labels -100 past each sample.
    Packed: the rows :func:`studies.tokens.timing.scaled_batch` finds, each row's samples
    back to back and its tail a sequence of its own (label -100)."""
    batch = scaled_batch(packed, lengths, context, scale)
    if not packed:  # each row one sample, as long as the sample
        batch.spans = [[(0, max(1, int(length) // scale))] for length in lengths]
    width = batch.length if packed else -(-batch.length // multiple) * multiple
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocabulary, (batch.rows, width), generator=generator)
    labels = torch.full_like(tokens, -100)
    bounds = [0]
    for row, spans in enumerate(batch.spans):
        for start, end in spans:
            labels[row, start:end] = tokens[row, start:end]
            bounds.append(row * width + end)
        if bounds[-1] < (row + 1) * width:
            bounds.append((row + 1) * width)
    cu_seqlens = None
    longest = width
    if packed:
        cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=device)
        longest = max((b - a for a, b in itertools.pairwise(bounds)), default=0)
    shape = [batch.samples, batch.rows] if packed else [batch.rows, width]
    return Prepared(tokens.to(device), labels.to(device), packed, cu_seqlens, longest, shape)


# The model --------------------------------------------------------------------------------


def varlen_causal() -> dict[str, Any]:
    """The keyword that makes ``varlen_attn`` causal in the installed torch:
    ``is_causal=True`` where it has that parameter, else ``window_size=(-1, 0)``."""
    from torch.nn.attention.varlen import varlen_attn

    if "is_causal" in inspect.signature(varlen_attn).parameters:
        return {"is_causal": True}
    return {"window_size": (-1, 0)}


def packed_backend(device: torch.device) -> str:
    """What runs packed attention on ``device``: ``varlen_attn`` and its kernel on CUDA,
    one SDPA call per sequence elsewhere."""
    if device.type != "cuda":
        return "per-sequence sdpa (no varlen kernel on this device)"
    from torch.nn.attention import varlen

    choose = getattr(varlen, "_should_use_cudnn", None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:  # a private helper of torch's: its kernel choice where it has one
        kernel = "cudnn" if choose is not None and choose(index) else "flash"
    except Exception:
        return "varlen_attn"
    return f"varlen_attn ({kernel})"


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """The backend PyTorch's SDPA picks for these tensors, causal and unmasked, under the
    backends enabled now (``torch._fused_sdp_choice``), by name."""
    from torch.nn.attention import SDPBackend

    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    return str(SDPBackend(choose(q, k, v, None, 0.0, True)).name)


class _Block(nn.Module):
    def __init__(self, shape: ModelShape, reports: bool = False) -> None:
        super().__init__()
        width = shape.width
        self.heads = shape.heads
        #: Whether this block says which SDPA backend its padded batches ran on.
        self.reports = reports
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def attend(self, x: torch.Tensor, batch: Prepared) -> tuple[torch.Tensor, str | None]:
        rows, positions, width = x.shape
        qkv = self.qkv(self.norm1(x))
        if not batch.packed:
            q, k, v = qkv.view(rows, positions, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            chosen = sdpa_choice(q, k, v) if self.reports else None
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return out.transpose(1, 2).reshape(rows, positions, width), chosen
        assert batch.cu_seqlens is not None
        q, k, v = qkv.view(rows * positions, 3, self.heads, -1).unbind(1)
        if x.device.type == "cuda":
            from torch.nn.attention.varlen import varlen_attn

            cu, longest = batch.cu_seqlens, batch.max_seqlen
            found = varlen_attn(q, k, v, cu, cu, longest, longest, **varlen_causal())
            out = found[0] if isinstance(found, tuple) else found
        else:
            sizes = batch.cu_seqlens.diff().tolist()
            out = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        qi.transpose(0, 1), ki.transpose(0, 1), vi.transpose(0, 1), is_causal=True
                    ).transpose(0, 1)
                    for qi, ki, vi in zip(
                        q.split(sizes), k.split(sizes), v.split(sizes), strict=True
                    )
                ]
            )
        return out.reshape(rows, positions, width), None

    def forward(self, x: torch.Tensor, batch: Prepared) -> tuple[torch.Tensor, str | None]:
        attended, chosen = self.attend(x, batch)
        x = x + self.out(attended)
        return x + self.down(F.gelu(self.up(self.norm2(x)))), chosen


class Model(nn.Module):
    """A GPT-style language model without position embeddings (they cost nothing that
    matters here): embedding, :attr:`ModelShape.layers` pre-norm blocks, a final norm and
    a head to the vocabulary; :meth:`loss` is the cross-entropy of a batch."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocabulary, shape.width)
        # The layers share the shape: the first one says which backend ran.
        self.blocks = nn.ModuleList(_Block(shape, number == 0) for number in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, shape.vocabulary, bias=False)
        #: The SDPA backend of the last padded batch (its first layer's).
        self.last_backend: str | None = None

    def loss(self, batch: Prepared) -> torch.Tensor:
        x = self.embed(batch.tokens)
        for number, block in enumerate(self.blocks):
            x, chosen = block(x, batch)
            if number == 0:
                self.last_backend = chosen
        logits = self.head(self.norm(x))
        # Under autocast cross_entropy runs in float32 (no float copy of the logits here).
        return F.cross_entropy(
            logits.view(-1, logits.shape[-1]), batch.labels.view(-1), ignore_index=-100
        )


# Timing -------------------------------------------------------------------------------------

#: ``timer(step, batch)``: runs ``step()`` and returns its seconds.
Timer = Callable[[Callable[[], None], Prepared], float]


def device_timer(device: torch.device) -> Timer:
    """CUDA events around the step, the device synchronised before it and the second event
    waited for; ``time.perf_counter`` on any other device."""

    def cuda(step: Callable[[], None], batch: Prepared) -> float:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        torch.cuda.synchronize(device)
        start.record()
        step()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000

    def host(step: Callable[[], None], batch: Prepared) -> float:
        started = time.perf_counter()
        step()
        return time.perf_counter() - started

    return cuda if device.type == "cuda" else host


def mode_context(mode: str) -> AbstractContextManager[Any]:
    """``sdpa_kernel(FLASH_ATTENTION)`` for ``"flash"``, nothing for the other modes."""
    if mode == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    return nullcontext()


class Session:
    """The model, its optimizer and what this process has run so far: the attention
    shapes each backend has seen (a backend that plans per shape plans at a new one)."""

    def __init__(
        self,
        shape: ModelShape,
        device: torch.device,
        context: int,
        scale: int,
        timer: Timer | None = None,
    ) -> None:
        torch.manual_seed(SEED)
        self.device, self.context, self.scale = device, context, scale
        self.model = Model(shape).to(device)
        cuda = device.type == "cuda"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=cuda)
        self.autocast = (lambda: torch.autocast("cuda", torch.bfloat16)) if cuda else nullcontext
        self.timer = timer or device_timer(device)
        self.seen: dict[str, set[tuple[int, ...]]] = {}
        self.backends: list[str] = []

    def step(self, batch: Prepared) -> None:
        with self.autocast():
            loss = self.model.loss(batch)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def recover(self) -> None:
        """After a step that failed: the gradients dropped, the device's cache emptied."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def backend_code(self, name: str) -> int:
        if name not in self.backends:
            self.backends.append(name)
        return self.backends.index(name)

    def epoch(
        self, shares: list[list[list[int]]], values: list[int], packed: bool, mode: str
    ) -> dict[str, Any]:
        """Every rank's batch at every step timed under ``mode``: per (step, rank) the
        seconds (0.0 for no batch), the shape, the backend (an index into
        :attr:`backends`, -1 for no batch) and whether the shape was new to it."""
        multiple = PAD_MULTIPLE // self.scale if mode.startswith("default, x") else 1
        steps = max((len(share) for share in shares), default=0)
        seconds: list[list[float]] = []
        shapes: list[list[list[int]]] = []
        backends: list[list[int]] = []
        new: list[list[int]] = []
        packed_name = packed_backend(self.device) if packed else ""
        with mode_context(mode):
            for step in range(steps):
                row: list[list[Any]] = [[], [], [], []]
                for rank, share in enumerate(shares):
                    lengths = [values[i] for i in share[step]] if step < len(share) else []
                    if not lengths:
                        for column, empty in zip(row, (0.0, [], -1, 0), strict=True):
                            column.append(empty)
                        continue
                    seed = SEED + 7919 * step + rank
                    batch = prepare(
                        lengths,
                        packed,
                        self.context,
                        self.scale,
                        self.model.shape.vocabulary,
                        self.device,
                        seed,
                        max(1, multiple),
                    )
                    row[0].append(self.timer(partial(self.step, batch), batch))
                    name = packed_name or str(self.model.last_backend)
                    seen = self.seen.setdefault(name, set())
                    key = tuple(batch.tokens.shape)
                    row[1].append(batch.shape)
                    row[2].append(self.backend_code(name))
                    row[3].append(int(key not in seen))
                    seen.add(key)
                seconds.append(row[0])
                shapes.append(row[1])
                backends.append(row[2])
                new.append(row[3])
        return {"seconds": seconds, "shapes": shapes, "backend": backends, "new shape": new}

    def warm_up(self) -> None:
        """One untimed step of a padded and of a packed batch (kernels loaded, handles
        made), of a shape no sampler's batch has (a single row of 3 positions)."""
        for packed in (False, True):
            self.step(
                prepare([3 * self.scale], packed, 3 * self.scale, self.scale, 2, self.device, 0)
            )


# The fitted cost --------------------------------------------------------------------------

#: The fullest padded batch: max_tokens / context samples of the context.
ROWS = MAX_TOKENS // CONTEXT


def fit_padded(runs: Sequence[dict[str, Any]], scale: int) -> Any:
    """:func:`samplers.fit_cost` (``"padded"``, a quarter held out, seed 0) on the
    ``"flash"`` steps of the padded runs given, each batch as ``count`` samples of its
    padded length at full scale (``positions x scale``)."""
    from samplers import fit_cost

    batches, seconds = [], []
    for run in runs:
        for shapes, times in zip(run["shapes"], run["seconds"], strict=True):
            for shape, time_ in zip(shapes, times, strict=True):
                if shape:
                    batches.append([shape[1] * scale] * shape[0])
                    seconds.append(time_)
    return fit_cost(batches, seconds, "padded", holdout=0.25, seed=SEED)


def fit_facts(fitted: Any) -> dict[str, Any]:
    """The fit as the record keeps it."""
    check = fitted.check
    return {
        "label": fitted.label,
        "overhead (s)": fitted.overhead,
        "per token (s)": fitted.per_token,
        "per attention (s)": fitted.per_attention,
        "quadratic": fitted.quadratic,
        "fitted on": check.fitted_on,
        "held out": check.batches,
        "held-out R2": check.r2,
        "held-out largest relative error": check.max_relative_error,
        "held-out mean relative error": check.mean_relative_error,
    }


# The record -------------------------------------------------------------------------------


def subset(lengths: torch.Tensor, size: int, seed: int = SEED) -> torch.Tensor:
    """``size`` of ``lengths`` drawn without replacement (seeded), in the drawn order."""
    size = min(size, lengths.numel())
    chosen = torch.randperm(lengths.numel(), generator=torch.Generator().manual_seed(seed))
    return lengths[chosen[:size]].clone()


def digest(shares: list[list[list[int]]]) -> str:
    """A digest of the shares (which indices each rank takes at each step)."""
    return hashlib.sha256(json.dumps(shares).encode()).hexdigest()[:16]


def _driver() -> str | None:
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip().splitlines()[0] if found.stdout.strip() else None


def device_facts(device: torch.device) -> dict[str, Any]:
    """The device, its driver and software, SDPA's backend priority order now."""
    from torch.nn.attention import SDPBackend

    order: list[int] = getattr(torch._C, "_get_sdp_priority_order", list)()
    facts: dict[str, Any] = {
        "type": device.type,
        "torch": torch.__version__,
        "Python": platform.python_version(),
        "SDPA priority order": [SDPBackend(int(code)).name for code in order],
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        facts |= {
            "name": properties.name,
            "capability": f"{properties.major}.{properties.minor}",
            "memory (GB)": round(properties.total_memory / 10**9),
            "driver": _driver(),
            "CUDA": torch.version.cuda,
            "cuDNN": torch.backends.cudnn.version(),  # type: ignore[no-untyped-call]
        }
    else:
        facts |= {"name": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    return facts


def load_facts(device: torch.device) -> dict[str, Any]:
    """How busy the machine is: the load average, and the device's memory in use and
    utilisation (``None`` where torch cannot read it)."""
    facts: dict[str, Any] = {"load average (1 min)": round(os.getloadavg()[0], 2)}
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        facts["device memory in use (GB)"] = round((total - free) / 10**9, 2)
        try:
            facts["device utilisation (%)"] = torch.cuda.utilization(device)
        except Exception:  # needs pynvml or amdsmi
            facts["device utilisation (%)"] = None
    return facts


def _runs_of(
    session: Session, name: str, key: str, shares: list[list[list[int]]], values: list[int]
) -> Iterator[dict[str, Any]]:
    from studies.tokens.costing import PACKED

    packed = key in PACKED
    for mode in (PACKED_MODE,) if packed else PADDED_MODES:
        run = {"data": name, "sampler": key, "mode": mode, "packed": packed}
        try:
            timed = session.epoch(shares, values, packed, mode)
        except RuntimeError as error:  # out of memory, no kernel: recorded, the rest goes on
            session.recover()
            yield {**run, "error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
            continue
        yield {**run, **timed}


def record(
    device: torch.device,
    shape: ModelShape,
    samples: int,
    scale: int,
    *,
    smoke: bool = False,
    samplers: Sequence[str] | None = None,
    data: Sequence[str] | None = None,
    timer: Timer | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Time the samplers' epochs (see the module); the record as a dict."""
    from studies.tokens.costing import PACKED, SAMPLERS, ours_under
    from studies.tokens.lengths import datasets

    started = time.perf_counter()
    before = load_facts(device)
    session = Session(shape, device, CONTEXT, scale, timer)
    session.warm_up()
    runs: list[dict[str, Any]] = []
    fits: dict[str, Any] = {}
    missing: list[str] = []
    for name, full in datasets().items():
        if data is not None and name not in data:
            continue
        lengths = subset(full, samples)
        values = lengths.tolist()
        for key, run in SAMPLERS.items():
            if samplers is not None and key not in samplers:
                continue
            shares = run(lengths, RANKS, EPOCH, SEED, MAX_TOKENS, CONTEXT)
            if shares is None:
                missing.append(key)  # an optional peer that is not installed
                continue
            for timed in _runs_of(session, name, key, shares, values):
                runs.append({**timed, "digest": digest(shares)})
                progress(f"{name}, {key}, {timed['mode']} ({time.perf_counter() - started:.0f} s)")
        flash = [r for r in runs if r["data"] == name and r["mode"] == "flash" and "error" not in r]
        try:
            fitted = fit_padded(flash, scale)
        except ValueError as error:
            fits[name] = {"error": str(error)}
            continue
        budget = fitted.max_tokens(fitted.predict([CONTEXT] * ROWS))
        fits[name] = {**fit_facts(fitted), "max_tokens": budget}
        shares = ours_under(fitted.cost, budget)(lengths, RANKS, EPOCH, SEED)
        for timed in _runs_of(session, name, "fitted", shares, values):
            runs.append({**timed, "digest": digest(shares)})
            progress(f"{name}, fitted, {timed['mode']} ({time.perf_counter() - started:.0f} s)")
    after = load_facts(device)
    model_facts = {
        **asdict(shape),
        "parameters": sum(p.numel() for p in session.model.parameters()),
    }
    return {
        MARK[0]: MARK[1],
        "smoke": smoke,
        "recorded at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_facts(device),
        "load before": before,
        "load after": after,
        "model": {
            **model_facts,
            "dtype": "bfloat16 autocast" if device.type == "cuda" else "float32",
            "optimizer": "AdamW",
        },
        "clock": (
            "CUDA events around forward, backward and the optimizer's step, the device "
            "synchronised before each"
            if device.type == "cuda"
            else "time.perf_counter around forward, backward and the optimizer's step"
        ),
        "packed attention": packed_backend(device),
        "samples": samples,
        "scale": scale,
        "context": CONTEXT,
        "max_tokens": MAX_TOKENS,
        "ranks": RANKS,
        "epoch": EPOCH,
        "seed": SEED,
        "pad multiple": PAD_MULTIPLE,
        "packed samplers": list(PACKED),
        "not installed": sorted(set(missing)),
        "backends": session.backends,
        "fits": fits,
        "seconds recording": round(time.perf_counter() - started, 1),
        "runs": runs,
    }


def record_text(recorded: dict[str, Any]) -> str:
    """The record's text: its facts indented, one line per run."""
    head = {key: value for key, value in recorded.items() if key != "runs"}
    lines = ",\n".join(f"    {json.dumps(run)}" for run in recorded["runs"])
    opening = json.dumps(head, indent=2)[:-2]
    return f'{opening},\n  "runs": [\n{lines}\n  ]\n}}\n'


def default_path(recorded: dict[str, Any], directory: Path = DATA) -> Path:
    """``token-epochs-<device name>-<date>.json`` in ``directory``."""
    name = re.sub(r"[^a-z0-9]+", "-", str(recorded["device"]["name"]).lower()).strip("-")
    return directory / f"token-epochs-{name or 'device'}-{recorded['recorded at'][:10]}.json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--record", action="store_true", help="time and write the record")
    parser.add_argument("--smoke", action="store_true", help="a tiny run on CPU (needs --out)")
    parser.add_argument("--device", default="cuda")
    for field in ("layers", "width", "heads", "vocabulary"):
        parser.add_argument(f"--{field}", type=int)
    parser.add_argument("--samples", type=int)
    parser.add_argument("--samplers", nargs="+", help="only these sampler keys")
    parser.add_argument("--data", nargs="+", help="only these length distributions")
    parser.add_argument("--out", type=Path, help="where to write (default: studies/data)")
    arguments = parser.parse_args(argv)
    if arguments.record == arguments.smoke:
        parser.error("pass exactly one of --record (a device run) and --smoke (a CPU check)")
    if arguments.smoke and arguments.out is None:
        parser.error("--smoke writes only where --out says")
    base = SMOKE_MODEL if arguments.smoke else DEFAULT_MODEL
    shape = ModelShape(
        **{
            field: getattr(arguments, field) or getattr(base, field)
            for field in ("layers", "width", "heads", "vocabulary")
        }
    )
    device = torch.device("cpu" if arguments.smoke else arguments.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device (use --smoke on CPU)")
    recorded = record(
        device,
        shape,
        arguments.samples or (SMOKE_SAMPLES if arguments.smoke else SAMPLES),
        SMOKE_SCALE if arguments.smoke else 1,
        smoke=arguments.smoke,
        samplers=arguments.samplers,
        data=arguments.data,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
    )
    path = arguments.out or default_path(recorded)
    path.write_text(record_text(recorded))
    print(f"written to {path} in {recorded['seconds recording']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
