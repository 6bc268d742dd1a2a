"""Token batches under a cost model: padded, quadratic and packed rows, side by side.

On the token finding's two length distributions and world sizes, ours under three cost
models (padded tokens; lhotse's quadratic d + d²/q; packed rows of the context length)
against a fixed batch size that never exceeds the budget, each measured as in
:mod:`studies.tokens.costing`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.findings import Evidence, Table
from studies.findings.token_batches import WORLD_SIZES
from studies.findings.wording import count_of, joined
from studies.tokens import timing as token_timing
from studies.tokens.costing import (
    PACKED,
    QUADRATIC,
    SAMPLERS,
    measure,
    quadratic_budget,
    resumes_elsewhere,
)
from studies.tokens.lengths import CONTEXT, MAX_TOKENS, SEED, datasets

NAME = "token-costs"
TITLE = "Token batches under a cost model: padded, quadratic and packed rows"
GUARDED_BY = "tests/test_token_costs_finding.py::test_the_claim_holds_in_the_tables"
SLOW = True
SECONDS = 120

ROWS = MAX_TOKENS // CONTEXT
NAMES = {
    "padded": "ours, padded tokens",
    "quadratic": f"ours, quadratic (q={QUADRATIC})",
    "packed": f"ours, packed rows of {CONTEXT:,}",
    "fixed": f"stock DistributedSampler, batches of {ROWS}",
    "rebalance": "transformers BatchRebalanceSampler",
    "trainer-grouped": "Trainer group_by_length (LengthGroupedSampler + accelerate)",
    "lhotse": "lhotse DynamicBucketingSampler",
    "lhotse-quadratic": f"lhotse DynamicBucketingSampler, quadratic_duration={QUADRATIC}",
    "trl-bfd": "TRL-style global BFD (reimplemented), stock sampler over rows",
}
LIMITS = {
    "padded": f"count x longest <= {MAX_TOKENS:,}",
    "quadratic": f"count x (L + L²/{QUADRATIC}) <= {quadratic_budget(MAX_TOKENS, CONTEXT):,}",
    "packed": f"{ROWS} rows of <= {CONTEXT:,} tokens",
    "fixed": f"{ROWS} samples (<= {MAX_TOKENS:,} padded)",
    "rebalance": f"none (counted: count x longest > {MAX_TOKENS:,})",
    "trainer-grouped": f"none (counted: count x longest > {MAX_TOKENS:,})",
    "lhotse": f"sum <= {MAX_TOKENS:,} (counted: count x longest > {MAX_TOKENS:,})",
    "lhotse-quadratic": (
        f"sum of (d + d²/{QUADRATIC}) <= {quadratic_budget(MAX_TOKENS, CONTEXT):,} (counted: "
        "padded, as ours)"
    ),
    "trl-bfd": f"{ROWS} rows of <= {CONTEXT:,} tokens",
}
#: Packing efficiency the packed sampler must reach on both distributions.
PACKED_TARGET = 0.98


def compare() -> tuple[pd.DataFrame, dict[tuple[str, int, str], Any]]:
    """The runs' table; and the shares at the timed world size, with the lengths, by
    (data, ranks, sampler key), to check the timing record against."""
    rows: list[dict[str, Any]] = []
    current: dict[tuple[str, int, str], Any] = {}
    for name, lengths in datasets().items():
        values = lengths.tolist()
        for world in WORLD_SIZES:
            other = world // 2 + 1
            times: dict[str, float] = {}
            for key, run in SAMPLERS.items():
                shares = run(lengths, world, 0, SEED, MAX_TOKENS, CONTEXT)
                if shares is None:
                    continue  # an optional peer that is not installed
                if world == token_timing.RANKS:
                    current[(name, world, key)] = (shares, values)
                measured = measure(key, lengths, shares, MAX_TOKENS, CONTEXT)
                times[key] = float(measured.pop("simulated epoch time"))
                rows.append(
                    {
                        "data": name,
                        "ranks": world,
                        "sampler": NAMES[key],
                        "limit": LIMITS[key],
                        **measured,
                        "simulated epoch time / padded": times[key] / times["padded"],
                        "resumed elsewhere, each sample once": resumes_elsewhere(
                            key, lengths, world, other, SEED, MAX_TOKENS, CONTEXT
                        ),
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


def _anchors(table: pd.DataFrame, packed: pd.DataFrame) -> str:
    """The peers' paragraph: transformers' rebalancing sampler and a TRL-style global BFD."""
    text = ""
    if NAMES["rebalance"] in set(table["sampler"]):
        rebalance = _of("rebalance", table)
        share = rebalance["batches over its limit"] / (
            rebalance["steps"] * rebalance.index.get_level_values("ranks")
        )
        text += (
            "\n\ntransformers' BatchRebalanceSampler (each step the ranks' mean samples per "
            "batch of ours' padded epoch, times the ranks; one micro-batch per rank, its "
            "defaults otherwise, drop_last among them) balances a cost of its own (count x "
            "longest + 0.001 x count x longest²) with a fixed number of samples per step and "
            f"no token budget: efficiency {_range(rebalance['efficiency'], '.3f')}, straggler "
            f"ratios {_range(rebalance['straggler ratio, tokens'], '.3f')} in tokens and "
            f"{_range(rebalance['straggler ratio, with attention'], '.3f')} with attention, "
            f"{_range(rebalance['batches over its limit'], 'g')} batches over max_tokens "
            f"({_range(share, '.0%')} of them), "
            f"{_range(rebalance['samples not seen'], 'g')} samples not seen in the epoch, and "
            "no state to resume from."
        )
    else:
        text += "\n\ntransformers is not installed: its BatchRebalanceSampler was not measured."
    if NAMES["trainer-grouped"] in set(table["sampler"]):
        grouped = _of("trainer-grouped", table)
        text += (
            " The Trainer's group_by_length path (LengthGroupedSampler over the global "
            "batch, sharded by accelerate, the same batch size): efficiency "
            f"{_range(grouped['efficiency'], '.3f')}, straggler ratios "
            f"{_range(grouped['straggler ratio, tokens'], '.3f')} in tokens and "
            f"{_range(grouped['straggler ratio, with attention'], '.3f')} with attention, "
            f"{_range(grouped['batches over its limit'], 'g')} batches over max_tokens, "
            f"{_range(grouped['samples repeated'], 'g')} samples repeated (accelerate's even "
            "batches), no state of its own."
        )
    if NAMES["lhotse"] in set(table["sampler"]):
        plain, squared = _of("lhotse", table), _of("lhotse-quadratic", table)
        equal = int((plain["equal batch counts"] == "yes").sum())
        text += (
            "\n\nlhotse's DynamicBucketingSampler (durations = tokens, max_duration = "
            "max_tokens, a sum of durations rather than a padded cost, synchronised buckets) "
            f"had an efficiency of {_range(plain['efficiency'], '.3f')}, straggler ratios of "
            f"{_range(plain['straggler ratio, tokens'], '.3f')} in tokens and "
            f"{_range(plain['straggler ratio, with attention'], '.3f')} with attention, "
            f"{_range(plain['batches over its limit'], 'g')} batches whose padded cost "
            "exceeded max_tokens, equal steps in "
            f"{count_of(equal, len(plain), 'configurations')}, "
            f"{_range(plain['samples repeated'], 'g')} samples repeated and "
            f"{_range(plain['samples not seen'], 'g')} not seen; with quadratic_duration="
            f"{QUADRATIC} and the quadratic budget, straggler ratio with attention "
            f"{_range(squared['straggler ratio, with attention'], '.3f')}. A state loaded "
            "on another world size: "
            + ", ".join(sorted(set(plain["resumed elsewhere, each sample once"])))
            + "."
        )
    else:
        text += "\n\nlhotse is not installed: its DynamicBucketingSampler was not measured."
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


def build() -> Evidence:
    table, current = compare()
    measured, recorded = timed(current)
    machine = recorded["machine"]
    return Evidence(
        claim=claim(table) + _timed_claim(measured),
        prose=prose(table) + _timed_prose(measured, recorded),
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
                    f"{machine['Python']}, torch {machine['torch']}."
                ),
            ),
        ),
    )
