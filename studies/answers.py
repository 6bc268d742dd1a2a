"""The reports' opening table: for a job, what to use and which finding says why.

Guarantee: every number in :func:`answers` is read from the built findings' tables (the
same ones the reports show), and every recommendation names only options that exist in
torch or in this project today; where an API is missing, the row says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from studies.findings import Finding, resume, tail_policies, wrapping_samplers, zip_and_truncate
from studies.findings.distributed_evaluation import ERROR_COLUMNS

__all__ = ["COLUMNS", "NEEDED", "answers"]

#: The table's columns.
COLUMNS = ("if you are doing", "use", "because")

#: The findings (by NAME) whose tables the answers read; all of them are fast to build.
NEEDED = (
    "distributed-evaluation",
    "set-epoch",
    "set-epoch-timing",
    "manual-seed",
    "seed-per-rank",
    "tiny-datasets",
    "drop-last",
    "equal-batch-counts",
    "batch-of-one",
    "strided-prefix",
    "resume",
    "tail-policies",
    "zip-and-truncate",
    "wrapping-samplers",
)


def _table(findings: Mapping[str, Finding], name: str, number: int = 0) -> pd.DataFrame:
    if name not in findings:
        raise KeyError(f"the answers need the finding {name!r}, which was not built")
    return findings[name].tables[number].frame


def _link(findings: Mapping[str, Finding], name: str) -> str:
    return f"[{name}]({name}.md)"


def answers(findings: Mapping[str, Finding]) -> pd.DataFrame:
    """One row per job: what to use, and the measured reason, linking its findings."""
    link = {name: _link(findings, name) for name in NEEDED}

    evaluation = _table(findings, "distributed-evaluation")
    pooled = float(evaluation[ERROR_COLUMNS["pooled_counts"]].abs().max())
    gathered = float(evaluation[ERROR_COLUMNS["gathered"]].abs().max())

    repeats = _table(findings, "set-epoch")
    without = repeats[~repeats["set_epoch"]]
    repeated = int(without["later epochs equal to epoch 0"].sum())
    later = int((without["epochs"] - 1).sum())
    seeds = _table(findings, "manual-seed")
    ignored = int(seeds["stock, no seed argument"].nunique())
    coverage = _table(findings, "seed-per-rank")
    unseen = float(coverage["never seen (fraction)"].max())
    timing = _table(findings, "set-epoch-timing")
    kept = int((timing["that is epoch"] == 0).sum())

    tiny = _table(findings, "tiny-datasets")
    trimmed = tiny[tiny["sampler drop_last"]]
    emptied = int((trimmed["distinct samples received"] == 0).sum())
    copies = int(tiny["copies of the most repeated sample"].max())
    dropping = _table(findings, "drop-last")
    empty = dropping[dropping["empty epoch"]]
    empty_example = (
        f"{int(empty.iloc[0]['dataset size'])} samples on {int(empty.iloc[0]['world size'])} "
        f"ranks with batch size {int(empty.iloc[0]['batch size'])} gave an empty epoch"
        if not empty.empty
        else "no configuration measured gave an empty epoch"
    )

    counts = _table(findings, "equal-batch-counts")
    by_sampler = counts["how each rank gets its part"].str.contains("DistributedSampler")
    sampler_unequal = int(counts[by_sampler]["ranks' batch counts differ"].sum())
    by_hand_unequal = int(counts[~by_sampler]["ranks' batch counts differ"].min())
    total = int(counts["configurations"].iloc[0])

    norms = _table(findings, "batch-of-one", 2)
    failing = norms[norms["train mode"] != "ok"]
    failing_inputs = ", ".join(
        f"{row['layer']} {row['input shape']}" for _, row in failing.iterrows()
    )

    prefix = _table(findings, "strided-prefix")
    prefixes = int(prefix["= first positions of the order"].sum())
    resumed = _table(findings, "resume", 1)
    moved = resumed[resumed["old world size"] != resumed["new world size"]]
    approach = moved["how the job resumes"]
    exact = moved[approach == resume.OURS["uneven"]]
    exact_wrong = int((exact["samples repeated"] + exact["samples never seen"]).max())
    skipping = moved[approach == resume.SKIP]
    restarting = moved[approach == resume.RESTART]

    tails = _table(findings, "tail-policies").set_index("sampler")
    exact_rows = tails[(tails[tail_policies.ONCE] == "yes") & (tails[tail_policies.EQUAL] == "yes")]
    exact_names = " and ".join(f"`{name}`" for name in exact_rows.index)
    full_rows = tails[tails[tail_policies.SMALLEST].astype(float) == 1.0]
    stock_smallest = float(tails.loc[tail_policies.STOCK_PAD, tail_policies.SMALLEST])
    zipped = zip_and_truncate.summary(_table(findings, "zip-and-truncate")).set_index("sampler")
    uneven_zip = zipped.loc['ours, tail="uneven"']
    unshard_wrong = int(zipped["unshard wrong"].sum())
    wrapped = _table(findings, "wrapping-samplers")
    by_pattern = wrapped.groupby("pattern")[wrapping_samplers.NEVER].max()
    common_unseen = int(by_pattern[wrapping_samplers.COMMON])
    ours_unseen = int(by_pattern[wrapping_samplers.OURS])

    rows = [
        (
            "evaluation",
            'Ours: `DistributedBatchSampler(dataset, batch_size, shuffle=False, tail="uneven")` '
            '(or `DistributedSampler(..., tail="uneven")` without per-batch collectives) and '
            "`gather_unsharded(per_sample_results, sampler)`: every sample exactly once, for "
            "any metric. With the stock sampler: gather per-sample results, interleave them "
            "by rank and truncate to the dataset size; do not sum counts or average rank means.",
            f"{link['distributed-evaluation']}: summed counts were off by up to {pooled:.1e}; "
            + ("gathering was exact" if gathered == 0 else f"gathering by {gathered:.1e}")
            + f"; {link['tail-policies']}: every sample exactly once with equal batch counts "
            f"only with {exact_names}; {link['zip-and-truncate']}: zipping unequal parts went "
            f"wrong in {int(uneven_zip['zip and truncate wrong'])} of "
            f"{int(uneven_zip['configurations'])} configurations, unshard in {unshard_wrong}.",
        ),
        (
            "training",
            "A DistributedSampler with `shuffle=True`, the same `seed=` on every rank (ours: "
            "`seed=None` agrees one random seed), and `sampler.set_epoch(epoch)` before each "
            "epoch's loop starts (ours warns when it is missing; `auto_epoch=True` does it). "
            "For a weighted or custom sampler, ours: `DistributedSamplerWrapper(sampler)`.",
            f"{link['set-epoch']}: without set_epoch {repeated} of {later} later epochs "
            f"repeated epoch 0; {link['manual-seed']}: {len(seeds)} torch.manual_seed values "
            f"gave {ignored} sampler order(s); {link['seed-per-rank']}: seed=rank left up to "
            f"{unseen:.0%} of the samples unseen; {link['set-epoch-timing']}: set_epoch "
            f"called after iteration began had no effect in {kept} of {len(timing)} cases; "
            f"{link['wrapping-samplers']}: unseeded per-rank streams left up to "
            f"{common_unseen} samples unseen, the wrapper {ours_unseen}.",
        ),
        (
            "small datasets",
            "The sampler's `drop_last=False` when there are fewer samples than ranks, and "
            "the DataLoader's `drop_last=False` when a rank's share is smaller than the batch "
            "size; expect repeated samples. Ours warns when drop_last empties every rank.",
            f"{link['tiny-datasets']}: with the sampler's drop_last {emptied} of "
            f"{len(trimmed)} tiny configurations gave every rank nothing, without it a "
            f"sample was handed out up to {copies} times; {link['drop-last']}: "
            f"{empty_example}.",
        ),
        (
            "splitting data across ranks",
            "A DistributedSampler (stock or ours) or ours `DistributedBatchSampler`, not "
            "Subset chunks or slicing per rank.",
            f"{link['equal-batch-counts']}: ranks' batch counts differed in {sampler_unequal} "
            f"of {total} configurations with a DistributedSampler, in {by_hand_unequal} or more "
            "with each hand-made split.",
        ),
        (
            "BatchNorm",
            'Ours: `DistributedBatchSampler(..., tail="pad")` or `tail="drop"` (every batch '
            "full); with the stock sampler, the DataLoader's `drop_last=True` (or a batch "
            "size that leaves no rank a last batch of one).",
            f"{link['batch-of-one']}: in train mode a batch of one raised with {failing_inputs}; "
            f"{link['tail-policies']}: every batch was full with "
            + " and ".join(f"`{name}`" for name in full_rows.index)
            + f", while the stock sampler's smallest batch was {stock_smallest:.2f} of the "
            "batch size.",
        ),
        (
            "checkpointing",
            "Our sampler: save `sampler.state_dict()` with the checkpoint (with a DataLoader "
            "with workers, `state_dict(consumed=steps * batch_size)`; torchdata's "
            "`StatefulDataLoader` calls it itself) and call `sampler.load_state_dict(state)` "
            "on every rank of the resumed job, on the same or another world size; "
            '`tail="uneven"` for every sample exactly once.',
            f'{link["resume"]}: resumed on another world size, ours with tail "uneven" '
            + (
                f"repeated and lost no sample in any of {len(exact)} configurations; "
                if exact_wrong == 0
                else f"repeated or lost up to {exact_wrong} samples in {len(exact)} "
                "configurations; "
            )
            + "skipping what each rank had yielded (the StatefulDataLoader's way for a sampler "
            f"without state) left up to {int(skipping['samples never seen'].max())} samples "
            "never seen, restarting the epoch repeated up to "
            f"{int(restarting['samples repeated'].max())}; {link['strided-prefix']}: after "
            f"{prefixes} of the {len(prefix)} steps measured, the consumed samples were a "
            "prefix of the epoch order.",
        ),
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))
