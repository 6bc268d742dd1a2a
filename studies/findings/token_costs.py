"""Token batches under a cost model: padded, quadratic and packed rows, side by side.

On the token finding's two length distributions and world sizes, ours under three cost
models (padded tokens; lhotse's quadratic d + d²/q; packed rows of the context length)
against a fixed batch size that never exceeds the budget and the peers in use (each
under its documented default and a recommended setting, named), each measured as in
:mod:`studies.tokens.costing`. Then the recorded CPU timing of their batches
(:mod:`studies.tokens.timing`), the cost fitted to it and ours under that cost as the
fit predicts (:mod:`studies.tokens.fitting`), the attention shapes each epoch asks for
and why the default SDPA backend slows padded batches on a GPU (reasoned from PyTorch's
source: :data:`SLOWDOWN_SOURCES`), and the newest device record of whole epochs
(:mod:`studies.tokens.epoch_timing`), when one is committed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.common import records
from studies.findings import Evidence, Table
from studies.findings.token_batches import WORLD_SIZES
from studies.findings.wording import count_of, joined
from studies.tokens import epoch_record, fitting
from studies.tokens import timing as token_timing
from studies.tokens.costing import (
    LHOTSE_BUCKETS,
    LHOTSE_TUNED,
    PACKED,
    QUADRATIC,
    SAMPLERS,
    TRAINER_DROP_LAST,
    measure,
    quadratic_budget,
    resumes_elsewhere,
)
from studies.tokens.epoch_timing import PAD_MULTIPLE
from studies.tokens.lengths import CONTEXT, MAX_TOKENS, SEED, datasets
from studies.tokens.shapes import distinct_shapes

NAME = "token-costs"
TITLE = "Token batches under a cost model: padded, quadratic and packed rows"
GUARDED_BY = "tests/test_token_costs_finding.py::test_the_claim_holds_in_the_tables"
SLOW = True
SECONDS = 25

ROWS = MAX_TOKENS // CONTEXT
_LHOTSE = "lhotse DynamicBucketingSampler"
_BUCKETS = {
    "": f"num_buckets={LHOTSE_BUCKETS} (default)",
    f"-{LHOTSE_TUNED}": (f"num_buckets={LHOTSE_TUNED} (tuned)"),
}
NAMES = {
    "padded": "ours, padded tokens",
    "quadratic": f"ours, quadratic (q={QUADRATIC})",
    "packed": f"ours, packed rows of {CONTEXT:,}",
    "fixed": f"stock DistributedSampler, batches of {ROWS}",
    "rebalance": "transformers BatchRebalanceSampler, its defaults (drop_last=True)",
    "rebalance-trainer": (
        "transformers BatchRebalanceSampler as the Trainer calls it (drop_last="
        f"dataloader_drop_last={TRAINER_DROP_LAST}, the default)"
    ),
    "trainer-grouped": "Trainer group_by_length (LengthGroupedSampler + accelerate)",
    **{f"lhotse{tail}": f"{_LHOTSE}, {buckets}" for tail, buckets in _BUCKETS.items()},
    **{
        f"lhotse-quadratic{tail}": f"{_LHOTSE}, quadratic_duration={QUADRATIC}, {buckets}"
        for tail, buckets in _BUCKETS.items()
    },
    "trl-bfd": "TRL-style global BFD (reimplemented), stock sampler over rows",
}
_UNLIMITED = f"none (counted: count x longest > {MAX_TOKENS:,})"
LIMITS = {
    "padded": f"count x longest <= {MAX_TOKENS:,}",
    "quadratic": f"count x (L + L²/{QUADRATIC}) <= {quadratic_budget(MAX_TOKENS, CONTEXT):,}",
    "packed": f"{ROWS} rows of <= {CONTEXT:,} tokens",
    "fixed": f"{ROWS} samples (<= {MAX_TOKENS:,} padded)",
    "rebalance": _UNLIMITED,
    "rebalance-trainer": _UNLIMITED,
    "trainer-grouped": _UNLIMITED,
    **{
        f"lhotse{tail}": f"sum <= {MAX_TOKENS:,} (counted: count x longest > {MAX_TOKENS:,})"
        for tail in _BUCKETS
    },
    **{
        f"lhotse-quadratic{tail}": (
            f"sum of (d + d²/{QUADRATIC}) <= {quadratic_budget(MAX_TOKENS, CONTEXT):,} "
            "(counted: padded, as ours)"
        )
        for tail in _BUCKETS
    },
    "trl-bfd": f"{ROWS} rows of <= {CONTEXT:,} tokens",
}
#: Packing efficiency the packed sampler must reach on both distributions.
PACKED_TARGET = 0.98


#: The command that re-measures :data:`PEERS`.
COMMAND = "python -m studies.findings.token_costs --record"
#: lhotse's samplers: each rank's sampler walks the whole epoch in Python, most of this
#: finding's time on two cores, so their runs are recorded (:data:`PEERS`).
RECORDED = tuple(key for key in SAMPLERS if key.startswith("lhotse"))


def run(data: str, world: int, key: str) -> dict[str, Any]:
    """One sampler's epoch on ``data`` and ``world`` ranks: its ``shares`` (each rank's
    batches), the measures of :func:`~studies.tokens.costing.measure` and whether it
    resumes elsewhere (on ``world // 2 + 1`` ranks); ``shares`` is ``None`` when the
    sampler is an optional peer that is not installed."""
    lengths = datasets()[data]
    shares = SAMPLERS[key](lengths, world, 0, SEED, MAX_TOKENS, CONTEXT)
    if shares is None:
        return {"shares": None}
    return {
        "shares": shares,
        "measured": measure(key, lengths, shares, MAX_TOKENS, CONTEXT),
        "resumed": resumes_elsewhere(
            key, lengths, world, world // 2 + 1, SEED, MAX_TOKENS, CONTEXT
        ),
    }


def _settings() -> dict[str, Any]:
    """What the recorded runs depend on besides the code: the lengths (a digest), the
    budget, the context, the seed, the quadratic term, the buckets, the world sizes."""
    import hashlib

    return {
        "lengths (sha256)": {
            name: hashlib.sha256(lengths.numpy().tobytes()).hexdigest()
            for name, lengths in datasets().items()
        },
        "max_tokens": MAX_TOKENS,
        "context": CONTEXT,
        "seed": SEED,
        "quadratic": QUADRATIC,
        "buckets": [LHOTSE_BUCKETS, LHOTSE_TUNED],
        "world sizes": WORLD_SIZES,
    }


#: The :data:`RECORDED` samplers' runs, by ``(data, ranks, sampler key)``.
PEERS = records.Rows(
    records.DATA / "token-costs-peers.json",
    COMMAND,
    run,
    lambda: [(d, world, key) for d in datasets() for world in WORLD_SIZES for key in RECORDED],
    _settings,
    ("lhotse", "torch"),
)


def compare() -> tuple[pd.DataFrame, dict[tuple[str, int, str], Any]]:
    """The runs' table; and every run's shares, with the lengths, by (data, ranks,
    sampler key): the timing record is checked against those at its world size, the
    fitted cost predicts their epochs. The :data:`RECORDED` samplers' runs are
    :data:`PEERS`', every other sampler runs now."""
    rows: list[dict[str, Any]] = []
    current: dict[tuple[str, int, str], Any] = {}
    recorded = PEERS.load()
    for name, lengths in datasets().items():
        values = lengths.tolist()
        for world in WORLD_SIZES:
            times: dict[str, float] = {}
            for key in SAMPLERS:
                found = recorded[(name, world, key)] if key in RECORDED else run(name, world, key)
                if found["shares"] is None:
                    continue  # an optional peer that is not installed
                current[(name, world, key)] = (found["shares"], values)
                measured = dict(found["measured"])
                times[key] = float(measured.pop("simulated epoch time"))
                rows.append(
                    {
                        "data": name,
                        "ranks": world,
                        "sampler": NAMES[key],
                        "limit": LIMITS[key],
                        **measured,
                        "simulated epoch time / padded": times[key] / times["padded"],
                        "resumed elsewhere, each sample once": found["resumed"],
                    }
                )
    return pd.DataFrame(rows), current


def _range(values: pd.Series, form: str) -> str:
    low, high = (format(float(v), form) for v in (values.min(), values.max()))
    return low if low == high else f"{low} to {high}"


def _of(key: str, table: pd.DataFrame) -> pd.DataFrame:
    return table[table["sampler"] == NAMES[key]].set_index(["data", "ranks"])


def claim(table: pd.DataFrame) -> str:
    """The claim, every count read from the table."""
    ours = table[table["sampler"].isin([NAMES[k] for k in ("padded", "quadratic", "packed")])]
    total = len(ours)

    def of(count: int, out_of: int = total) -> str:
        return count_of(int(count), out_of, "runs")

    within = (ours["batches over its limit"] == 0).sum()
    equal = (ours["equal batch counts"] == "yes").sum()
    once = ((ours["samples repeated"] == 0) & (ours["samples not seen"] == 0)).sum()
    resumed = (ours["resumed elsewhere, each sample once"] == "yes").sum()
    packed, padded, quadratic = (_of(k, table) for k in ("packed", "padded", "quadratic"))
    filled = (packed["efficiency"] >= PACKED_TARGET).sum()
    steadier = (
        quadratic["straggler ratio, with attention"] < padded["straggler ratio, with attention"]
    ).sum()
    data = len(packed.index.unique("data"))
    configurations = (
        f"{len(packed)} configurations of {data} length distributions x {joined(WORLD_SIZES)} ranks"
    )
    return (
        f"Over {total} runs of ours under three cost models (padded, quadratic, packed; "
        f"{configurations} each), every batch stayed within its limit in {of(within)}, every "
        f"rank took the same number of steps in {of(equal)}, each sample came exactly once "
        f"in {of(once)}, and a state saved at half the epoch resumed on another world size "
        f"with each sample once in {of(resumed)}. Packed rows were filled to at least "
        f"{PACKED_TARGET} in {count_of(int(filled), len(packed), 'configurations')}, and the "
        "quadratic cost balanced the attention-weighted work per step better than padded "
        f"tokens in {count_of(int(steadier), len(packed), 'configurations')}."
    )


def prose(table: pd.DataFrame) -> str:
    padded, quadratic, packed, fixed = (
        _of(k, table) for k in ("padded", "quadratic", "packed", "fixed")
    )
    return (
        "Efficiency is real tokens over the tokens processed (a padded batch: count x "
        f"longest; a packed batch: rows x {CONTEXT:,}). The straggler ratio is the sum over "
        "steps of the costliest rank's work over the sum of the mean, once in tokens "
        f"processed and once with attention (tokens + the sum of each row's L²/{QUADRATIC}, "
        "the step model of the token-batches finding without its fixed overhead; within "
        "each sample for packed rows).\n\n"
        f"Under padded tokens, ours' attention-weighted straggler ratio was "
        f"{_range(padded['straggler ratio, with attention'], '.3f')} (in tokens "
        f"{_range(padded['straggler ratio, tokens'], '.3f')}): batches of the same tokens "
        "cost different time when their lengths differ. Budgeting by "
        f"d + d²/{QUADRATIC} per sample (max_tokens "
        f"{quadratic_budget(MAX_TOKENS, CONTEXT):,}, which {ROWS} samples of {CONTEXT:,} "
        "tokens fill, as they fill the padded budget) brought it to "
        f"{_range(quadratic['straggler ratio, with attention'], '.3f')}, the tokens' ratio "
        f"rising to {_range(quadratic['straggler ratio, tokens'], '.3f')}, and the simulated "
        f"epoch to {_range(quadratic['simulated epoch time / padded'], '.2f')} times the "
        "padded one's.\n\n"
        f"Packed into rows of {CONTEXT:,} tokens best-fit decreasing, {ROWS} rows a batch, "
        f"ours filled {_range(packed['efficiency'], '.4f')} of the rows (padded batches: "
        f"{_range(padded['efficiency'], '.3f')}), with straggler ratios of "
        f"{_range(packed['straggler ratio, tokens'], '.3f')} in tokens and "
        f"{_range(packed['straggler ratio, with attention'], '.3f')} with attention, and a "
        f"simulated epoch of {_range(packed['simulated epoch time / padded'], '.2f')} times "
        "the padded one's.\n\n"
        f"A fixed batch size of {ROWS} (the largest that never exceeds max_tokens at the "
        f"{CONTEXT:,}-token context) took {_range(fixed['steps'], 'g')} steps against "
        f"{_range(padded['steps'], 'g')} for ours, with an efficiency of "
        f"{_range(fixed['efficiency'], '.3f')}, straggler ratios of "
        f"{_range(fixed['straggler ratio, tokens'], '.3f')} and a simulated epoch "
        f"{_range(fixed['simulated epoch time / padded'], '.2f')} times ours (padded); the stock "
        "sampler has no state to resume from."
    ) + _anchors(table, packed)


def _rebalance(table: pd.DataFrame) -> str:
    """transformers' rebalancing sampler, called directly (its defaults) and as the
    Trainer calls it."""
    if NAMES["rebalance"] not in set(table["sampler"]):
        return "\n\ntransformers is not installed: its BatchRebalanceSampler was not measured."
    own, trainer = _of("rebalance", table), _of("rebalance-trainer", table)
    share = own["batches over its limit"] / (own["steps"] * own.index.get_level_values("ranks"))
    return (
        "\n\ntransformers' BatchRebalanceSampler (each step the ranks' mean samples per "
        "batch of ours' padded epoch, times the ranks; one micro-batch per rank) balances a "
        "cost of its own (count x longest + 0.001 x count x longest²) with a fixed number of "
        "samples per step and no token budget. Called directly with its defaults "
        f"(drop_last=True): efficiency {_range(own['efficiency'], '.3f')}, straggler ratios "
        f"{_range(own['straggler ratio, tokens'], '.3f')} in tokens and "
        f"{_range(own['straggler ratio, with attention'], '.3f')} with attention, "
        f"{_range(own['batches over its limit'], 'g')} batches over max_tokens "
        f"({_range(share, '.0%')} of them), {_range(own['samples not seen'], 'g')} samples "
        "not seen in the epoch (its last partial global batch dropped). As the Trainer calls "
        'it (train_sampling_strategy="batch_rebalance": drop_last from '
        f"dataloader_drop_last, default {TRAINER_DROP_LAST}, its default seed): efficiency "
        f"{_range(trainer['efficiency'], '.3f')}, straggler ratios "
        f"{_range(trainer['straggler ratio, tokens'], '.3f')} in tokens and "
        f"{_range(trainer['straggler ratio, with attention'], '.3f')} with attention, "
        f"{_range(trainer['batches over its limit'], 'g')} batches over max_tokens, "
        f"{_range(trainer['samples not seen'], 'g')} samples not seen and "
        f"{_range(trainer['samples repeated'], 'g')} repeated. Neither has a state to "
        "resume from."
    )


def _lhotse(table: pd.DataFrame) -> str:
    """lhotse's bucketing sampler at its default and a tuned number of buckets."""
    if NAMES["lhotse"] not in set(table["sampler"]):
        return "\n\nlhotse is not installed: its DynamicBucketingSampler was not measured."
    default, tuned = _of("lhotse", table), _of(f"lhotse-{LHOTSE_TUNED}", table)
    squared = _of("lhotse-quadratic", table)
    squared_tuned = _of(f"lhotse-quadratic-{LHOTSE_TUNED}", table)
    plain = pd.concat([default, tuned, squared, squared_tuned])
    equal = int((plain["equal batch counts"] == "yes").sum())
    return (
        "\n\nlhotse's DynamicBucketingSampler (durations = tokens, max_duration = "
        "max_tokens, a sum of durations rather than a padded cost, synchronised buckets), at "
        f"its default num_buckets={LHOTSE_BUCKETS}, had an efficiency of "
        f"{_range(default['efficiency'], '.3f')}, straggler ratios of "
        f"{_range(default['straggler ratio, tokens'], '.3f')} in tokens and "
        f"{_range(default['straggler ratio, with attention'], '.3f')} with attention and "
        f"{_range(default['batches over its limit'], 'g')} batches whose padded cost "
        f"exceeded max_tokens; tuned to num_buckets={LHOTSE_TUNED}, an efficiency of "
        f"{_range(tuned['efficiency'], '.3f')}, straggler ratios of "
        f"{_range(tuned['straggler ratio, tokens'], '.3f')} and "
        f"{_range(tuned['straggler ratio, with attention'], '.3f')}, "
        f"{_range(tuned['batches over its limit'], 'g')} batches over. With "
        f"quadratic_duration={QUADRATIC} and the quadratic budget, the straggler ratio with "
        f"attention was {_range(squared['straggler ratio, with attention'], '.3f')} "
        f"({LHOTSE_BUCKETS} buckets) and "
        f"{_range(squared_tuned['straggler ratio, with attention'], '.3f')} "
        f"({LHOTSE_TUNED}). Over its {len(plain)} runs: equal steps in "
        f"{count_of(equal, len(plain), 'runs')}, {_range(plain['samples repeated'], 'g')} "
        f"samples repeated and {_range(plain['samples not seen'], 'g')} not seen. A state "
        "loaded on another world size: "
        + ", ".join(sorted(set(plain["resumed elsewhere, each sample once"])))
        + "."
    )


def _anchors(table: pd.DataFrame, packed: pd.DataFrame) -> str:
    """The peers' paragraphs: transformers' samplers, lhotse's and a TRL-style global
    BFD."""
    text = _rebalance(table)
    if NAMES["trainer-grouped"] in set(table["sampler"]):
        grouped = _of("trainer-grouped", table)
        text += (
            " The Trainer's group_by_length path (train_sampling_strategy="
            '"group_by_length": LengthGroupedSampler over the whole dataset on every '
            "process, its batches sharded by accelerate, the same batch size): efficiency "
            f"{_range(grouped['efficiency'], '.3f')}, straggler ratios "
            f"{_range(grouped['straggler ratio, tokens'], '.3f')} in tokens and "
            f"{_range(grouped['straggler ratio, with attention'], '.3f')} with attention, "
            f"{_range(grouped['batches over its limit'], 'g')} batches over max_tokens, "
            f"{_range(grouped['samples repeated'], 'g')} samples repeated (accelerate's even "
            "batches), no state of its own."
        )
    text += _lhotse(table)
    trl = _of("trl-bfd", table)
    tighter = (trl["efficiency"] > packed["efficiency"]).sum()
    steadier = (
        packed["straggler ratio, with attention"] < trl["straggler ratio, with attention"]
    ).sum()
    total = len(packed)
    text += (
        "\n\nA TRL-style global best-fit decreasing packing (reimplemented here from TRL's "
        "idea, not its code: the whole dataset packed at once, the rows then sharded by the "
        f"stock sampler) filled {_range(trl['efficiency'], '.4f')} of its rows, more than "
        f"ours' windows in {count_of(int(tighter), total, 'configurations')}, with a "
        f"straggler ratio of {_range(trl['straggler ratio, tokens'], '.3f')} in tokens but "
        f"{_range(trl['straggler ratio, with attention'], '.3f')} with attention (ours "
        "packed was steadier with attention in "
        f"{count_of(int(steadier), total, 'configurations')}); the same rows every epoch, "
        f"{_range(trl['samples repeated'], 'g')} samples repeated by the stock sampler's "
        "padding of the rows, and no state to resume from."
    )
    return text


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per sampler: each measure's range over the configurations."""
    rows = []
    for sampler, group in table.groupby("sampler", sort=False):
        rows.append(
            {
                "sampler": sampler,
                "steps": _range(group["steps"], "g"),
                "efficiency": _range(group["efficiency"], ".3f"),
                "straggler ratio, tokens": _range(group["straggler ratio, tokens"], ".3f"),
                "straggler ratio, with attention": _range(
                    group["straggler ratio, with attention"], ".3f"
                ),
                "batches over its limit": _range(group["batches over its limit"], "g"),
                "equal batch counts": ", ".join(sorted(set(group["equal batch counts"]))),
                "samples repeated": _range(group["samples repeated"], "g"),
                "samples not seen": _range(group["samples not seen"], "g"),
                "resumed elsewhere, each sample once": ", ".join(
                    sorted(set(group["resumed elsewhere, each sample once"]))
                ),
            }
        )
    return pd.DataFrame(rows)


#: The timed table's columns (read from the record by :func:`timed`).
MEASURED, SIMULATED = "per sample / padded, measured", "per sample / padded, simulated"
STRAGGLER_MEASURED, STRAGGLER_SIMULATED = "straggler ratio, measured", "straggler ratio, simulated"


def timed(current: dict[tuple[str, int, str], Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The recorded CPU timing (:mod:`studies.tokens.timing`) against the simulated time
    of the same batches, one row per run; and the record (with ``"stale"``: its runs
    whose batches differ from the samplers' ``current`` shares)."""
    recorded = token_timing.load()
    recorded["stale"] = token_timing.stale(recorded, current)
    frame = pd.DataFrame(token_timing.compared(recorded, CONTEXT))
    frame["sampler"] = frame["sampler"].map(NAMES)
    frame["CPU ms per sample, measured"] = frame["per sample, measured"] * 1000
    columns = ["data", "ranks", "sampler", "steps timed", "epoch steps", "samples"]
    columns += ["CPU ms per sample, measured", MEASURED, SIMULATED]
    return frame[[*columns, STRAGGLER_MEASURED, STRAGGLER_SIMULATED]], recorded


def agreement(frame: pd.DataFrame) -> dict[str, Any]:
    """How the measured and simulated columns agree: per configuration, the pairs of
    samplers ordered differently by time per sample (measured against simulated); and
    the largest relative gap of the ratio to ours padded and of the straggler ratio,
    with where it was."""
    swapped, pairs = {}, {}
    for configuration, group in frame.groupby(["data", "ranks"], sort=False):
        measured, simulated = group[MEASURED].tolist(), group[SIMULATED].tolist()
        both = [
            (measured[i] - measured[j]) * (simulated[i] - simulated[j])
            for i in range(len(group))
            for j in range(i + 1, len(group))
        ]
        swapped[configuration] = sum(product < 0 for product in both)
        pairs[configuration] = len(both)
    found: dict[str, Any] = {"swapped": swapped, "pairs": pairs}
    for name, (one, other) in {
        "ratio": (MEASURED, SIMULATED),
        "straggler": (STRAGGLER_MEASURED, STRAGGLER_SIMULATED),
    }.items():
        gaps = (frame[one] / frame[other] - 1).abs()
        worst = frame.loc[gaps.idxmax()]
        found[name] = (float(gaps.max()), worst["sampler"], worst["data"])
        found[name + " values"] = (float(worst[one]), float(worst[other]))
    return found


def _timed_claim(frame: pd.DataFrame) -> str:
    found = agreement(frame)
    same = sum(count == 0 for count in found["swapped"].values())
    gap = found["ratio"][0]
    return (
        " Timed on CPU (forward and backward passes of a small transformer over the batches "
        "each rank gets), the samplers came in the simulated order of time per sample in "
        f"{count_of(same, len(found['swapped']), 'configurations timed')}, each one's "
        f"ratio to ours padded within {gap:.0%} of the simulated ratio."
    )


def _by_batch_kind(frame: pd.DataFrame) -> str:
    """The gap of the ratios to ours padded, measured over simulated, for packed batches
    and for padded ones apart."""
    packed = frame["sampler"].isin([NAMES[key] for key in PACKED])
    over = frame[MEASURED] / frame[SIMULATED]
    padded = frame[~packed]
    gaps = (over[~packed] - 1).abs()
    worst = padded.loc[gaps.idxmax()]
    return (
        f"; the packed batches' measured ratios were {_range(over[packed], '.2f')} times "
        "the simulated ones (their attention ran as one call per sample), the padded "
        f"batches' within {gaps.max():.0%} ({worst['sampler']}, {worst['data']})"
    )


def _timed_prose(frame: pd.DataFrame, recorded: dict[str, Any]) -> str:
    model, machine = recorded["model"], recorded["machine"]
    scale, context = recorded["scale"], recorded["context"]
    found = agreement(frame)
    configurations = len(found["swapped"])
    same = sum(count == 0 for count in found["swapped"].values())
    order = f"in {count_of(same, configurations, 'configurations')}"
    if same < configurations:
        order += "; " + "; ".join(
            f"on the {data} data {found['swapped'][(data, ranks)]} of the "
            f"{found['pairs'][(data, ranks)]} pairs of samplers came the other way round"
            for data, ranks in found["swapped"]
            if found["swapped"][(data, ranks)]
        )
    gap, gap_sampler, gap_data = found["ratio"]
    measured, simulated = found["ratio values"]
    lag, lag_sampler, lag_data = found["straggler"]
    lagged, modelled = found["straggler values"]
    fastest = [
        f"{group.loc[group[MEASURED].idxmin(), 'sampler']} on the {data} data (simulated: "
        f"{group.loc[group[SIMULATED].idxmin(), 'sampler']})"
        for (data, _), group in frame.groupby(["data", "ranks"], sort=False)
    ]
    before, after = recorded["load average (1 min) before, after"]
    stale = recorded["stale"]
    text = (
        "\n\nMeasured, not only simulated. The batches each rank gets at "
        f"{recorded['steps per run']} steps spread evenly over each sampler's epoch "
        f"({joined(sorted(set(frame['ranks'])))} ranks, both distributions) went through a "
        f"{model['layers']}-layer transformer of width {model['width']} ({model['heads']} "
        f"heads, MLP {model['mlp']}) on CPU, forward and backward, one rank after the "
        f"other in one process ({recorded['threads']} thread, torch {machine['torch']}, "
        f"{machine['cores']} cores), each timed in CPU seconds of the process "
        f"{recorded['repeats']} times, every sampler's first timed step before any "
        f"second one, the median kept. Lengths were divided by {scale} (a row of the "
        f"context is {context // scale} positions), so that attention costs the share of "
        "a token's work it has in the step model at width 1024. A padded batch ran as "
        "count x longest, attention over "
        f"each whole row; a packed batch as its rows of {context // scale} positions with "
        "attention within each sample only, one scaled_dot_product_attention call per "
        "sample: the work of a varlen kernel given cu_seqlens, in as many calls as "
        "samples. Time per sample is the sum over the timed steps of the slowest rank's "
        "time over the samples the ranks took at those steps (not the whole epoch's mix "
        "of lengths), shown over ours padded's; the straggler "
        "ratio is the slowest rank's time summed over the ranks' mean. The simulated "
        "columns are the step model's times (with its overhead) for the same batches."
        "\n\nBy time per sample, the measured order of the "
        f"{len(frame) // configurations} samplers was the simulated one {order}. The "
        f"measured ratio to ours padded was at most {gap:.0%} from the simulated one "
        f"({gap_sampler}, {gap_data}: {measured:.2f} measured against {simulated:.2f})"
        f"{_by_batch_kind(frame)}. Fastest per sample, measured: {joined(fastest)}. The "
        "measured straggler ratios "
        f"were {_range(frame[STRAGGLER_MEASURED], '.3f')} against "
        f"{_range(frame[STRAGGLER_SIMULATED], '.3f')} simulated, at most {lag:.0%} apart "
        f"({lag_sampler}, {lag_data}: {lagged:.3f} against {modelled:.3f}). The times "
        f"were recorded in {recorded['seconds recording']:.0f} s (load average {before} "
        f"before, {after} after): the clock is the process's CPU time, which leaves out "
        "the time other work held a core, not its contention for caches and memory. "
    )
    if stale:
        return text + (
            f"The record's batches differ from what the samplers give now in {len(stale)} "
            f"runs ({'; '.join(stale)}): re-record with `python -m studies.token_timing "
            "--record`."
        )
    return text + "The recorded batches are the ones the samplers give now, run by run."


def _untimed(current: dict[tuple[str, int, str], Any], frame: pd.DataFrame) -> str:
    """The samplers measured at the timed world size that the CPU record has no run of."""
    missing = [
        NAMES[key]
        for key in dict.fromkeys(k for _, world, k in current if world == token_timing.RANKS)
        if NAMES[key] not in set(frame["sampler"])
    ]
    if not missing:
        return ""
    return (
        f" Not in this record (added to the finding after it was made; the next `--record` "
        f"times them): {'; '.join(missing)}."
    )


#: The key of ours under the fitted cost (:mod:`studies.tokens.fitting`, the device record).
FITTED = "fitted"


def _fitted(
    recorded: dict[str, Any], shares: dict[tuple[str, int, str], Any]
) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """The cost fitted to the CPU record: its table, the goal table of ours under it as
    the fit predicts, the claim's sentence and the prose."""
    fitted = fitting.cpu_fit(recorded)
    check = fitted.check
    assert check is not None and check.r2 is not None
    fit = fitting.fit_table(fitted, "the CPU record's padded batches (full-scale lengths)")
    goals = fitting.goal(fitting.predicted(fitted, shares, datasets()))
    names = {**NAMES, FITTED: f"ours, fitted cost ({fitted.label})"}
    goals["best padded peer"] = goals["best padded peer"].map(names)
    met = int((goals["goal met (predicted)"] == "yes").sum())
    configurations = count_of(met, len(goals), "configurations")
    straggler = _range(goals["ours fitted: straggler ratio"], ".3f")
    shorter = _range(goals["ours fitted shorter by"], ".1%")
    claim = (
        f" Fitted to the recorded CPU step times, the padded cost predicted the "
        f"{check.batches} held-out batches with R² {check.r2:.3f}; ours under it had a "
        f"predicted straggler ratio of {straggler} and a predicted epoch {shorter} shorter "
        "than the best padded peer's (the goal, predicted on CPU, held in "
        f"{configurations}); no GPU record exists to measure it."
    )
    prose = (
        '\n\nA cost fitted to the measured steps. `samplers.fit_cost` (kind "padded": '
        "overhead + a·count·L + b·count·L², least squares with every coefficient at least 0) "
        f"was fitted to the CPU record's {check.fitted_on + check.batches} padded batches, "
        f"each as its full-scale lengths, {check.batches} of them held out: overhead "
        f"{fitted.overhead:.3g} s, a = {fitted.per_token:.3g} s per token, b = "
        f"{fitted.per_attention:.3g} s per token², so the sampler's cost is {fitted.label} "
        f"(q = a / b rounded). On the held-out batches it had R² {check.r2:.4f}, a largest "
        f"relative error of {check.max_relative_error:.1%} and a mean one of "
        f"{check.mean_relative_error:.1%}. Ours under it (cost=fitted.cost, max_tokens="
        f"fitted.max_tokens of the fitted time of {fitting.ROWS} samples of {CONTEXT:,} "
        f"tokens: {fitting.budget(fitted):,}) was set against every padded sampler, each "
        "batch's time predicted by the same fit: a straggler ratio of "
        f"{straggler} (the goal: at most {epoch_record.GOAL_STRAGGLER}) and a whole epoch "
        f"{shorter} shorter than the padded peer of the shortest predicted epoch "
        f"({joined(sorted(set(goals['best padded peer'])))}; the goal: at least "
        f"{epoch_record.GOAL_FASTER:.0%}), both met in {configurations}. These are the "
        "fit's predictions of the CPU model's steps, by the model that also cut ours' "
        "batches, not measurements; the goal is set for a GPU run, which no record here "
        "holds yet."
    )
    return fit, goals, claim, prose


def _shapes(current: dict[tuple[str, int, str], Any]) -> pd.DataFrame:
    """Per data and sampler at the timed world size: the epoch's attention shapes."""
    rows = []
    for (data, world, key), (shares, values) in current.items():
        if world != token_timing.RANKS:
            continue
        found = distinct_shapes(shares, values, key in PACKED, CONTEXT, PAD_MULTIPLE)
        rows.append({"data": data, "sampler": NAMES[key], **found})
    return pd.DataFrame(rows)


#: Where the slowdown is read from: PyTorch's source (pytorch/pytorch), file: functions.
SLOWDOWN_SOURCES = {
    "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp": (
        "select_sdp_backend, priority_order, check_prefer_cudnn_attention, "
        "can_use_cudnn_attention, can_use_flash_attention (check_for_attn_mask)"
    ),
    "aten/src/ATen/native/cudnn/MHA.cpp": (
        "run_cudnn_SDP_fprop, run_cudnn_SDP_bprop, MHAGraphCache, MHAParams, build_graph, "
        "use_ragged_in_dense"
    ),
    "aten/src/ATen/native/transformers/attention.cpp": (
        "scaled_dot_product_attention, convert_boolean_attn_mask"
    ),
}


def _slowdown(shapes: pd.DataFrame) -> str:
    """Why the default SDPA backend slows padded batches on a GPU: reasoned from PyTorch's
    source, with the shapes each epoch asks for (computed here)."""
    rounded = f"distinct shapes, lengths to a multiple of {PAD_MULTIPLE}"
    ours = shapes[shapes["sampler"] == NAMES["padded"]]
    packed = shapes[shapes["sampler"].isin([NAMES[key] for key in PACKED])]
    padded = shapes[~shapes["sampler"].isin([NAMES[key] for key in PACKED])]
    share = padded["distinct shapes"] / padded["batches"]
    sources = "; ".join(f"`{path}`: {names}" for path, names in SLOWDOWN_SOURCES.items())
    return (
        "\n\nWhy padded batches slow down on PyTorch's default attention backend on a GPU "
        "(reasoned from PyTorch's source, not measured here). `scaled_dot_product_attention` "
        "runs the first backend of `priority_order()` whose checks pass "
        "(`select_sdp_backend`): flash, memory-efficient, math, cuDNN by default, but cuDNN "
        "first where `check_prefer_cudnn_attention()` holds, on an SM 9.0 or 10.x device "
        "(an H100 or H200 is SM 9.0) with a runtime cuDNN newer than 9.15.0, unless "
        "TORCH_CUDNN_SDPA_DEPRIORITIZED=1. A causal padded batch in bf16 with no mask and a "
        "head size of at most 128 (the device recorder's: is_causal=True, 64 at its default "
        "model) passes `can_use_cudnn_attention`, so it runs cuDNN attention; "
        "with a padding mask, flash is never eligible (`check_for_attn_mask`), cuDNN still "
        "is, and else memory-efficient attention takes it, the boolean mask first "
        "materialised as an additive one of one value per query and key "
        "(`convert_boolean_attn_mask`). cuDNN attention (`run_cudnn_SDP_fprop`, "
        "`run_cudnn_SDP_bprop`) looks its execution graph up in a per-thread cache keyed by "
        "the exact sizes and strides (`MHAParams`: batch, heads, query and key lengths, "
        "head size) and, for a shape it has not seen, builds one on the host (`build_graph`: "
        "validate, build the operation graph, heuristics' execution plans, check support, "
        "build the plans), once for the forward and once for the backward, the device "
        "idle once it has run what was queued; the layers of a step share a shape, so one "
        "step pays at most once per direction. Flash attention takes the shape as launch "
        "arguments and builds "
        "nothing per shape. So the cost follows the number of shapes new to the process, "
        "not the tokens: a padded batch's shape is (count, longest), and at "
        f"{token_timing.RANKS} ranks the padded samplers' epochs asked for "
        f"{_range(share, '.0%')} as many distinct shapes as batches (ours padded: "
        f"{_range(ours['distinct shapes'], ',.0f')} shapes in "
        f"{_range(ours['batches'], ',.0f')} batches), where packed rows asked for "
        f"{_range(packed['distinct shapes'], ',.0f')} (rows x the context, the last batch's "
        "rows aside). The cures: run padded batches on flash (`with torch.nn.attention."
        "sdpa_kernel(SDPBackend.FLASH_ATTENTION)`, or flash first with `set_priority=True`, "
        "or TORCH_CUDNN_SDPA_DEPRIORITIZED=1); pad each batch's length to a multiple, "
        f"which bounds the shapes to be planned (to a multiple of {PAD_MULTIPLE}: "
        f"{_range(ours[rounded], ',.0f')} for ours padded, each planned once and then found "
        "in the cache, epoch after epoch); or pack, one shape whatever the samples, its "
        "attention through a varlen kernel. PyTorch's opt-in "
        "TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 (experimental; `use_ragged_in_dense`) rounds "
        "the cached sequence lengths of BSHD-contiguous inputs up to a power of two, the "
        f"batch size still part of the key. Sources (pytorch/pytorch): {sources}."
    )


def _no_device_record() -> str:
    return (
        "\n\nOn a GPU: no GPU record exists yet. `python -m studies.tokens.epoch_timing "
        "--device cuda --record` on a CUDA machine times whole epochs of every sampler "
        "above (padded batches under the default SDPA backend, under flash and padded to a "
        f"multiple of {PAD_MULTIPLE}, packed rows through varlen_attn, and ours under a cost "
        "fitted to that run's steps) and commits `studies/data/token-epochs-*.json`, which "
        "this finding then renders next to the CPU record. Until then every time here comes "
        "from the CPU record, and the goal for ours under the fitted cost (a measured "
        f"straggler ratio of at most {epoch_record.GOAL_STRAGGLER} and a whole epoch at "
        f"least {epoch_record.GOAL_FASTER:.0%} shorter than the best padded peer's on the "
        "recorded GPU run) is not measured."
    )


def device_section(path: str, recorded: dict[str, Any]) -> tuple[str, tuple[Table, ...]]:
    """The device record's prose and tables (:mod:`studies.tokens.epoch_record`)."""
    device, model = recorded["device"], recorded["model"]
    frame = epoch_record.epochs(recorded)
    names = {**NAMES, FITTED: "ours, fitted cost"}
    slow = epoch_record.slowdown(frame)
    goals = epoch_record.goal(frame)
    for table, column in ((frame, "sampler"), (slow, "sampler"), (goals, "best padded peer")):
        if not table.empty:
            table[column] = table[column].map(names)
    if not goals.empty:
        goals["fastest of all"] = goals["fastest of all"].map(names)
    hardware = ", ".join(
        f"{key} {value}"
        for key, value in device.items()
        if key in ("name", "capability", "driver", "CUDA", "cuDNN", "torch")
    )
    met = int((goals["goal met"] == "yes").sum()) if not goals.empty else 0
    packed_first = int((goals["fastest of all"] == NAMES["packed"]).sum()) if not goals.empty else 0
    default, multiple = "default / flash", f"{epoch_record.MULTIPLE} / flash"

    def load(key: str) -> str:
        return ", ".join(f"{name} {value}" for name, value in recorded[key].items())

    fits = "; ".join(
        f"{data}: {fit.get('label', fit.get('error', ''))}"
        for data, fit in recorded["fits"].items()
    )
    prose = (
        f"\n\nOn a device: {hardware} (recorded {recorded['recorded at']}, `{path}`), a "
        f"{model['layers']}-layer model of width {model['width']} ({model['heads']} heads, "
        f"vocabulary {model['vocabulary']:,}, {model['parameters']:,} parameters, "
        f"{model['dtype']}, {model['optimizer']}), {recorded['ranks']} ranks' batches one "
        f"after the other, {recorded['samples']:,} samples of each distribution, every "
        f"step of a whole epoch timed ({recorded['clock']}); packed attention: "
        f"{recorded['packed attention']}; SDPA's priority order after the run: "
        f"{', '.join(device['SDPA priority order'])}; the load before: {load('load before')}, "
        f"after: {load('load after')}. "
        + (
            "No padded sampler ran in all three modes. "
            if slow.empty
            else "The padded samplers' whole epochs on the default backend were "
            f"{_range(slow[default], '.2f')} times their flash ones, padded to a multiple "
            f"of {recorded['pad multiple']} {_range(slow[multiple], '.2f')} times. "
        )
        + f"Ours under the cost fitted to the flash steps ({fits}) "
        f"met the goal in {count_of(met, len(goals), 'distributions')}; ours packed had "
        f"the shortest epoch of all in {count_of(packed_first, len(goals), 'distributions')}."
    )
    failed = epoch_record.failed(recorded)
    if failed:
        prose += f" Runs that failed, left out of the tables: {'; '.join(failed)}."

    tables = (
        Table(
            f"Whole epochs on {device['name']}, recorded",
            frame,
            floatfmt=".3f",
            name="device-epochs",
            summary=slow,
            note="The whole table is every run; its summary, each padded sampler's modes.",
        ),
        Table("The goal for ours under the fitted cost, measured", goals, floatfmt=".3f"),
    )
    return prose, tables


def build() -> Evidence:
    table, shares = compare()
    current = {key: found for key, found in shares.items() if key[1] == token_timing.RANKS}
    measured, recorded = timed(current)
    machine = recorded["machine"]
    fit, goals, fit_claim, fit_prose = _fitted(recorded, shares)
    shapes = _shapes(current)
    found = epoch_record.newest()
    device_tables: tuple[Table, ...] = ()
    if found is None:
        device_prose = _no_device_record()
    else:
        path, device_recorded = found
        relative = path.relative_to(token_timing.RECORDED.parents[2])
        device_prose, device_tables = device_section(str(relative), device_recorded)
    return Evidence(
        claim=claim(table) + _timed_claim(measured) + fit_claim,
        prose=prose(table)
        + " "
        + PEERS.provenance(
            "lhotse's samplers walk the whole epoch in Python on every rank, most of this "
            "finding's time on two cores",
            "their runs (each rank's batches, their measures and the resume)",
            "tests/test_token_costs_finding.py runs some of them again and compares",
        )
        + _timed_prose(measured, recorded)
        + _untimed(current, measured)
        + fit_prose
        + _slowdown(shapes)
        + device_prose,
        tables=(
            Table(
                "One epoch per sampler, side by side",
                table,
                floatfmt=".3f",
                name="runs",
                summary=summary(table),
                note=(
                    f"Seed {SEED}, epoch 0; max_tokens={MAX_TOKENS:,}; lengths truncated to "
                    f"{CONTEXT:,} tokens; resumed on world size // 2 + 1 ranks from a state "
                    "saved at half the epoch's steps."
                ),
            ),
            Table(
                "Measured on CPU against simulated, the same steps",
                measured,
                floatfmt=".3f",
                note=(
                    "Recorded by `python -m studies.token_timing --record` "
                    f"({token_timing.RECORDED.relative_to(token_timing.RECORDED.parents[2])}) "
                    f"on {machine['cores']} cores ({machine['processor']}), Python "
                    f"{machine['Python']}, torch {machine['torch']}: CPU, no GPU."
                ),
            ),
            Table(
                "The cost fitted to the CPU record, checked on held-out batches",
                fit,
                floatfmt=".4g",
                note="Seconds are the CPU record's (its model at 1/4 of the lengths).",
            ),
            Table(
                "Ours under the fitted cost against the padded peers, as the fit predicts",
                goals,
                floatfmt=".3f",
                note=(
                    "Predicted CPU seconds of the whole epoch (each batch's fitted time, "
                    "the slowest rank's per step), not measured; the goal is for a GPU run."
                ),
            ),
            Table(
                f"Attention shapes an epoch asks for, {token_timing.RANKS} ranks",
                shapes,
                note=(
                    "A padded batch's shape is (count, longest); a packed batch's (rows, "
                    "the context). All ranks' batches together, as in one process (the "
                    "recorders run the ranks so); a backend that plans per shape plans once "
                    "per distinct one."
                ),
            ),
            *device_tables,
        ),
    )


if __name__ == "__main__":
    PEERS.main()
