"""Token batches under a cost model: padded, quadratic and packed, run and measured.

Each sampler is run on every rank of ``W`` and gives ``shares[rank][step]`` (a batch of
dataset indices); :func:`measure` reduces one epoch to the numbers the finding compares,
under the step model of :mod:`studies.tokens.batching` (:class:`StepModel`), whose
attention term is lhotse's quadratic cost with ``q = 1 / per_square``
(:data:`QUADRATIC`):

* ``padded``: :class:`samplers.DistributedTokenBatchSampler`, ``cost="padded"``;
* ``quadratic``: the same under ``TokenCost("padded", quadratic=QUADRATIC)`` with the
  budget :func:`quadratic_budget` (what a batch of ``max_tokens / context`` samples of the
  context length costs under it, so the same fullest batch fits both budgets);
* ``packed``: :class:`samplers.DistributedPackedBatchSampler` with rows of the context
  length, ``max_tokens / context`` rows per batch, ``TokenCost("sum", quadratic=...)``;
* ``fixed``: torch's ``DistributedSampler`` with the largest fixed batch size that never
  exceeds ``max_tokens`` (``max_tokens / context``);
* ``rebalance``: transformers' ``BatchRebalanceSampler`` called directly, each step
  ``W x`` ours' mean samples per batch, one micro-batch per rank per step
  (``grad_accum=1``), ``seed`` the study's, its own defaults otherwise (``drop_last=True``
  among them: the epoch's last partial global batch is left out);
* ``rebalance-trainer``: the same sampler exactly as the Trainer builds it for
  ``train_sampling_strategy="batch_rebalance"`` (``Trainer._get_train_sampler``):
  ``drop_last`` from ``dataloader_drop_last`` (default ``False``: the last partial
  global batch is kept), ``seed`` and ``shuffle`` left at the sampler's defaults (42,
  ``True``), the same batch size (optional peers: skipped without transformers);
* ``trainer-grouped``: the Hugging Face Trainer's ``group_by_length`` path, reassembled
  from its parts: transformers' ``LengthGroupedSampler`` (the global batch size, drawn
  from the global RNG, seeded ``seed + epoch`` on every rank as ``set_seed`` does),
  batched by torch's ``BatchSampler`` and sharded by accelerate's ``BatchSamplerShard``
  (``even_batches=True``, what ``Trainer`` + ``accelerate.prepare`` use), batches of
  ours' mean samples per batch (optional peer: skipped without transformers and
  accelerate);
* ``lhotse``, ``lhotse-quadratic``: lhotse's ``DynamicBucketingSampler`` with durations
  = tokens, ``max_duration=max_tokens`` (a sum of durations, not a padded cost), its
  ``world_size``/``rank`` and ``sync_buckets=True``, ``drop_last=False``, its default
  ``num_buckets`` (:data:`LHOTSE_BUCKETS`, 10); the quadratic one with
  ``quadratic_duration=QUADRATIC`` and the quadratic budget; ``lhotse-30`` and
  ``lhotse-quadratic-30`` the same with ``num_buckets=30`` (:data:`LHOTSE_TUNED`, a
  tuned setting) (optional peers: skipped without lhotse);
* ``trl-bfd``: TRL's ``pack_dataset(strategy="bfd")`` as a reimplementation written here
  from its idea (not TRL's code): the whole dataset packed best-fit decreasing into rows
  of the context length, the rows then served as a dataset by torch's
  ``DistributedSampler`` (what the Trainer's sharding does to them) in batches of
  ``max_tokens / context`` rows.

A packed batch is processed as its rows (``rows x max_length`` tokens through the linear
layers) with attention within each sample (``sum of d²``); a padded batch as ``count x
longest`` tokens with attention over each padded row (``count x longest²``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedPackedBatchSampler, DistributedTokenBatchSampler, TokenCost
from samplers.tokens.packing import row_starts
from studies.tokens.batching import Shares, StepModel, batch_size_like

__all__ = [
    "LHOTSE_BUCKETS",
    "LHOTSE_TUNED",
    "PACKED",
    "QUADRATIC",
    "QUADRATIC_KEYS",
    "SAMPLERS",
    "measure",
    "ours_under",
    "quadratic_budget",
    "resumes_elsewhere",
    "simulated_step",
]

#: ``q`` of the quadratic cost: the step model's ``1 / per_square`` (width 1024 x 6).
QUADRATIC = round(1 / StepModel().per_square)
#: lhotse's ``DynamicBucketingSampler`` ``num_buckets``: its default, and a tuned setting.
LHOTSE_BUCKETS, LHOTSE_TUNED = 10, 30


def quadratic_budget(max_tokens: int, context: int) -> int:
    """The quadratic budget in which ``max_tokens / context`` samples of ``context`` fit:
    ``ceil(max_tokens x (1 + context / q))``."""
    return -(-max_tokens * (QUADRATIC + context) // QUADRATIC)


def _quiet(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return make()


def _listed(sampler: Any) -> Any:
    """One epoch of ``sampler`` (its warnings, e.g. of over-long samples, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return list(sampler)


def _build(
    key: str, lengths: torch.Tensor, world: int, rank: int, seed: int, max_tokens: int, context: int
) -> Any:
    rows = max_tokens // context
    if key == "padded":
        return _quiet(
            lambda: DistributedTokenBatchSampler(lengths, max_tokens, world, rank, seed=seed)
        )
    if key == "quadratic":
        cost = TokenCost("padded", quadratic=QUADRATIC)
        budget = quadratic_budget(max_tokens, context)
        return _quiet(
            lambda: DistributedTokenBatchSampler(lengths, budget, world, rank, seed=seed, cost=cost)
        )
    if key == "packed":
        cost = TokenCost("sum", quadratic=QUADRATIC)
        return _quiet(
            lambda: DistributedPackedBatchSampler(
                lengths, context, rows, world, rank, seed=seed, cost=cost
            )
        )
    raise ValueError(f"unknown sampler {key!r}")


def _stock(size: int, world: int, epoch: int, seed: int, batch_size: int) -> Shares:
    """torch's ``DistributedSampler`` over ``range(size)`` on every rank, its shares cut
    into batches of ``batch_size`` (the last one kept)."""
    shares = []
    for rank in range(world):
        dataset: Any = range(size)
        stock: StockSampler[int] = StockSampler(dataset, world, rank, seed=seed)
        stock.set_epoch(epoch)
        indices = list(stock)
        shares.append([indices[i : i + batch_size] for i in range(0, len(indices), batch_size)])
    return shares


def _ours_per_batch(
    lengths: torch.Tensor, world: int, seed: int, max_tokens: int, context: int
) -> int:
    """Ours' mean samples per batch (padded, epoch 0): the peers' fixed batch size."""
    return batch_size_like(_epoch("padded", lengths, world, 0, seed, max_tokens, context))


def _epoch(
    key: str,
    lengths: torch.Tensor,
    world: int,
    epoch: int,
    seed: int,
    max_tokens: int,
    context: int,
) -> Shares:
    if key == "fixed":
        return _stock(lengths.numel(), world, epoch, seed, max_tokens // context)
    shares = []
    for rank in range(world):
        sampler = _build(key, lengths, world, rank, seed, max_tokens, context)
        sampler.set_epoch(epoch)
        shares.append(_listed(sampler))
    return shares


def _trl_bfd(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int, context: int
) -> Shares:
    from samplers.tokens.packing import best_fit_decreasing

    order = sorted(range(lengths.numel()), key=lambda i: -int(lengths[i]))  # stable: ties by index
    values = lengths.tolist()
    assigned = best_fit_decreasing([values[i] for i in order], context)
    rows: list[list[int]] = [[] for _ in range(max(assigned, default=-1) + 1)]
    for index, row in zip(order, assigned, strict=True):
        rows[row].append(index)
    # A batch's rows in the order they were opened: their lengths alone tell them apart
    # again (samplers.tokens.packing.row_starts), as measure() reads them.
    return [
        [[i for r in sorted(batch) for i in rows[r]] for batch in share]
        for share in _stock(len(rows), world, epoch, seed, max_tokens // context)
    ]


def _rebalance(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int, context: int
) -> Shares | None:
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    per_batch = _ours_per_batch(lengths, world, seed, max_tokens, context)
    values = lengths.tolist()
    shares = []
    for rank in range(world):
        sampler = BatchRebalanceSampler(values, world * per_batch, world, 1, seed=seed, rank=rank)
        sampler.set_epoch(epoch)
        shares.append([list(batch) for batch in sampler])
    return shares


#: ``TrainingArguments.dataloader_drop_last``'s default: what the Trainer passes as the
#: rebalancing sampler's ``drop_last``.
TRAINER_DROP_LAST = False


def _rebalance_trainer(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int, context: int
) -> Shares | None:
    """``BatchRebalanceSampler`` with the arguments ``Trainer._get_train_sampler`` gives it
    (``seed`` is the sampler's default: the Trainer passes none)."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    per_batch = _ours_per_batch(lengths, world, seed, max_tokens, context)
    values = lengths.tolist()
    shares = []
    for rank in range(world):
        sampler = BatchRebalanceSampler(
            lengths=values,
            # train_batch_size x gradient_accumulation_steps (1) x world_size:
            effective_batch_size=per_batch * world,
            dp_size=world,
            grad_accum=1,
            rank=rank,
            drop_last=TRAINER_DROP_LAST,
        )
        sampler.set_epoch(epoch)
        shares.append([list(batch) for batch in sampler])
    return shares


def _trainer_grouped(
    lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int, context: int
) -> Shares | None:
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("transformers", "accelerate")):
        return None
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler
    from transformers.trainer_pt_utils import LengthGroupedSampler

    per_batch = _ours_per_batch(lengths, world, seed, max_tokens, context)
    values = lengths.tolist()
    shares = []
    for rank in range(world):
        grouped = LengthGroupedSampler(per_batch, lengths=values)
        shard = BatchSamplerShard(
            BatchSampler(grouped, per_batch, drop_last=False), world, rank, even_batches=True
        )
        state = torch.random.get_rng_state()
        torch.manual_seed(seed + epoch)
        try:
            shares.append([list(batch) for batch in shard])
        finally:
            torch.random.set_rng_state(state)
    return shares


def _lhotse_sampler(
    lengths: torch.Tensor,
    world: int,
    rank: int,
    seed: int,
    max_tokens: int,
    context: int,
    quadratic: bool,
    buckets: int = LHOTSE_BUCKETS,
) -> Any:
    from lhotse import CutSet, MonoCut
    from lhotse.dataset import DynamicBucketingSampler

    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0, duration=float(d), channel=0)
        for i, d in enumerate(lengths.tolist())
    )
    budget = quadratic_budget(max_tokens, context) if quadratic else max_tokens
    return _quiet(
        lambda: DynamicBucketingSampler(
            cuts,
            max_duration=budget,
            quadratic_duration=QUADRATIC if quadratic else None,
            num_buckets=buckets,
            shuffle=True,
            seed=seed,
            world_size=world,
            rank=rank,
            sync_buckets=True,
            drop_last=False,
        )
    )


def _lhotse_settings(key: str) -> tuple[bool, int]:
    """(quadratic, num_buckets) of an lhotse key: ``lhotse[-quadratic][-30]``."""
    buckets = LHOTSE_TUNED if key.endswith(f"-{LHOTSE_TUNED}") else LHOTSE_BUCKETS
    return "-quadratic" in key, buckets


def _lhotse(quadratic: bool, buckets: int = LHOTSE_BUCKETS) -> Callable[..., Shares | None]:
    def run(
        lengths: torch.Tensor, world: int, epoch: int, seed: int, max_tokens: int, context: int
    ) -> Shares | None:
        import importlib.util

        if importlib.util.find_spec("lhotse") is None:
            return None
        shares = []
        for rank in range(world):
            sampler = _lhotse_sampler(
                lengths, world, rank, seed, max_tokens, context, quadratic, buckets
            )
            sampler.set_epoch(epoch)
            # lhotse names a cut it hands out again "<id>_dup<k>".
            shares.append(
                [[int(cut.id.split("_dup")[0]) for cut in batch] for batch in _listed(sampler)]
            )
        return shares

    return run


def _lhotse_resume(
    key: str,
    lengths: torch.Tensor,
    world: int,
    other: int,
    seed: int,
    max_tokens: int,
    context: int,
) -> str:
    """What lhotse does with a state of ``world`` ranks loaded on ``other``: ``refused``
    with the start of its error, or the exactly-once outcome."""
    quadratic, buckets = _lhotse_settings(key)
    saver = _lhotse_sampler(lengths, world, 0, seed, max_tokens, context, quadratic, buckets)
    iterator = iter(saver)
    next(iterator)
    state = saver.state_dict()
    loader = _lhotse_sampler(lengths, other, 0, seed, max_tokens, context, quadratic, buckets)
    try:
        loader.load_state_dict(state)
    except Exception as error:  # lhotse asserts the same world size
        first = str(error).split("(")[0].strip()
        return f"refused ({type(error).__name__}: {first})"
    return "loaded"


#: The samplers by key: ``(lengths, world, epoch, seed, max_tokens, context) -> shares``.
SAMPLERS: dict[str, Callable[..., Shares | None]] = {
    **{
        key: (lambda *arguments, key=key: _epoch(key, *arguments))
        for key in ("padded", "quadratic", "packed", "fixed")
    },
    "rebalance": _rebalance,
    "rebalance-trainer": _rebalance_trainer,
    "trainer-grouped": _trainer_grouped,
    "lhotse": _lhotse(quadratic=False),
    f"lhotse-{LHOTSE_TUNED}": _lhotse(quadratic=False, buckets=LHOTSE_TUNED),
    "lhotse-quadratic": _lhotse(quadratic=True),
    f"lhotse-quadratic-{LHOTSE_TUNED}": _lhotse(quadratic=True, buckets=LHOTSE_TUNED),
    "trl-bfd": _trl_bfd,
}
#: Samplers measured as packed rows of the context length.
PACKED = ("packed", "trl-bfd")
#: Samplers whose limit is the quadratic budget (:func:`quadratic_budget`).
QUADRATIC_KEYS = ("quadratic", "lhotse-quadratic", f"lhotse-quadratic-{LHOTSE_TUNED}")


def ours_under(cost: TokenCost, max_tokens: int) -> Callable[[torch.Tensor, int, int, int], Shares]:
    """Ours (:class:`~samplers.DistributedTokenBatchSampler`) under ``cost`` and
    ``max_tokens`` (e.g. a fitted cost and its budget), as ``(lengths, world, epoch,
    seed) -> shares``."""

    def run(lengths: torch.Tensor, world: int, epoch: int, seed: int) -> Shares:
        shares = []
        for rank in range(world):
            sampler = _quiet(
                partial(
                    DistributedTokenBatchSampler,
                    lengths,
                    max_tokens,
                    world,
                    rank,
                    seed=seed,
                    cost=cost,
                )
            )
            sampler.set_epoch(epoch)
            shares.append(_listed(sampler))
        return shares

    return run


def resumes_elsewhere(
    key: str,
    lengths: torch.Tensor,
    world: int,
    other: int,
    seed: int,
    max_tokens: int,
    context: int,
) -> str:
    """``"yes"`` when an epoch stopped at half its steps on ``world`` ranks and resumed on
    ``other`` ranks sees every sample exactly once, ``"no"`` otherwise, ``"no state"`` for
    a sampler without one."""
    if key.startswith("lhotse"):
        return _lhotse_resume(key, lengths, world, other, seed, max_tokens, context)
    if key not in ("padded", "quadratic", "packed"):
        return "no state"
    first = [_build(key, lengths, world, rank, seed, max_tokens, context) for rank in range(world)]
    steps = len(first[0]) // 2
    iterators = [iter(sampler) for sampler in first]
    seen = [i for it in iterators for _ in range(steps) for i in next(it)]
    state = first[0].state_dict()
    for rank in range(other):
        sampler = _build(key, lengths, other, rank, seed, max_tokens, context)
        sampler.load_state_dict(state)
        seen += [i for batch in _listed(sampler) for i in batch]
    return "yes" if sorted(seen) == list(range(lengths.numel())) else "no"


def _processed(key: str, lengths: list[int], context: int) -> tuple[int, float, bool]:
    """A batch of ``lengths`` (in the sampler's order) as sampler ``key`` processes it:
    (tokens processed, attention term d²/q summed, over the sampler's own limit)."""
    if not lengths:
        return 0, 0.0, False
    if key in PACKED:
        starts = row_starts(lengths, context)
        ends = [*starts[1:], len(lengths)]
        rows = [sum(lengths[a:b]) for a, b in zip(starts, ends, strict=True)]
        over = any(r > context and b - a > 1 for r, a, b in zip(rows, starts, ends, strict=True))
        return len(rows) * context, sum(d * d for d in lengths) / QUADRATIC, over
    longest = max(lengths)
    return len(lengths) * longest, len(lengths) * longest**2 / QUADRATIC, False


def simulated_step(
    key: str, lengths: list[int], context: int, model: StepModel | None = None
) -> float:
    """The simulated time of one rank's batch of ``lengths`` under ``model`` (default
    ``StepModel()``): its overhead, the tokens processed and the attention term; 0 for
    no batch."""
    model = model or StepModel()
    if not lengths:
        return 0.0
    done, attention, _ = _processed(key, lengths, context)
    return model.overhead + model.per_token * done + attention


def measure(
    key: str,
    lengths: torch.Tensor,
    shares: Shares,
    max_tokens: int,
    context: int,
    model: StepModel | None = None,
) -> dict[str, Any]:
    """One epoch's numbers for sampler ``key`` (under ``model``, default ``StepModel()``)."""
    model = model or StepModel()
    values = lengths.tolist()
    steps = max((len(share) for share in shares), default=0)
    real = processed = over = 0
    worst = mean = worst_time = mean_time = epoch_time = 0.0
    quadratic = quadratic_budget(max_tokens, context)
    for step in range(steps):
        tokens, weighted, times = [], [], []
        for share in shares:
            batch = [values[i] for i in share[step]] if step < len(share) else []
            done, attention, beyond = _processed(key, batch, context)
            real += sum(batch)
            processed += done
            if key in QUADRATIC_KEYS:
                beyond = len(batch) > 1 and done + attention > quadratic
            elif key not in PACKED:
                beyond = len(batch) > 1 and done > max_tokens
            over += beyond
            tokens.append(done)
            weighted.append(done + attention)
            times.append(simulated_step(key, batch, context, model))
        worst += max(tokens)
        mean += sum(tokens) / len(tokens)
        worst_time += max(weighted)
        mean_time += sum(weighted) / len(weighted)
        epoch_time += max(times)
    seen = torch.bincount(
        torch.tensor([i for share in shares for batch in share for i in batch], dtype=torch.int64),
        minlength=len(values),
    )
    return {
        "steps": steps,
        "equal batch counts": "yes" if len({len(share) for share in shares}) == 1 else "no",
        "efficiency": real / processed if processed else 1.0,
        "straggler ratio, tokens": worst / mean if mean else 1.0,
        "straggler ratio, with attention": worst_time / mean_time if mean_time else 1.0,
        "batches over its limit": over,
        "simulated epoch time": epoch_time,
        "samples repeated": int((seen - 1).clamp(min=0).sum()),
        "samples not seen": int((seen == 0).sum()),
    }
