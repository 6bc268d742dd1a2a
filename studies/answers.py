"""The reports' opening table: for a job, what to use and which finding says why.

Guarantee: every number in :func:`answers` is one of the facts the findings export
(:func:`studies.findings.facts_of`), computed from the same tables the reports show, and
every recommendation names only options that exist in torch or in this project today.
The answers read no table and no column header themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from studies.findings import (
    Finding,
    batch_of_one,
    distributed_evaluation,
    drop_last,
    equal_batches,
    facts_of,
    frameworks,
    manual_seed,
    resume,
    seed_per_rank,
    set_epoch,
    set_epoch_timing,
    strided_prefix,
    tail_policies,
    tiny_datasets,
    token_batches,
    wrapping_samplers,
)
from studies.findings.wording import count_of, joined

__all__ = ["COLUMNS", "NEEDED", "answers"]

#: The table's columns.
COLUMNS = ("if you are doing", "use", "because")

#: The finding modules whose facts the answers read (built by every render of the
#: reports, slow ones included, so the README does not depend on which findings were built).
SOURCES = (
    distributed_evaluation,
    set_epoch,
    set_epoch_timing,
    manual_seed,
    seed_per_rank,
    tiny_datasets,
    drop_last,
    equal_batches,
    batch_of_one,
    strided_prefix,
    resume,
    tail_policies,
    wrapping_samplers,
    frameworks,
    token_batches,
)
#: Their names, as the report builds them.
NEEDED = tuple(module.NAME for module in SOURCES)
#: Findings linked without numbers (slow ones may be among them): the README is the same
#: whether they were built or not, so their rows say what they measure, not what they found.
LINKED = ("exact-evaluation", "zip-and-truncate", "token-costs", "mixtures", "engines")


def _built(findings: Mapping[str, Finding], name: str) -> Finding:
    if name not in findings:
        raise KeyError(f"the finding {name!r} is needed but was not built")
    return findings[name]


def _link(name: str) -> str:
    """A Markdown link to the finding's file."""
    return f"[{name}]({name}.md)"


def answers(findings: Mapping[str, Finding]) -> pd.DataFrame:
    """One row per job: what to use, and the measured reason, linking its findings."""
    link = {name: _link(name) for name in (*NEEDED, *LINKED)}
    evaluation = facts_of(findings, distributed_evaluation)
    repeats = facts_of(findings, set_epoch)
    seeds = facts_of(findings, manual_seed)
    coverage = facts_of(findings, seed_per_rank)
    timing = facts_of(findings, set_epoch_timing)
    tiny = facts_of(findings, tiny_datasets)
    dropping = facts_of(findings, drop_last)
    counts = facts_of(findings, equal_batches)
    norms = facts_of(findings, batch_of_one)
    prefix = facts_of(findings, strided_prefix)
    resumed = facts_of(findings, resume)
    tails = facts_of(findings, tail_policies)
    wrapped = facts_of(findings, wrapping_samplers)

    total = tails.configurations
    batched_uneven = tail_policies.BATCHED_UNEVEN
    full = [name for name, smallest in tails.smallest.items() if smallest == 1.0]
    exceptions = (
        "whose batch counts were unequal only with batch size 1 or fewer samples than ranks"
        if tails.unequal_large[batched_uneven] == 0
        else "whose batch counts were unequal in "
        f"{tails.unequal_large[batched_uneven]} configurations with N ≥ W and B ≥ 2 too"
    )
    rows = [
        (
            "evaluation",
            'Ours: `DistributedSampler(dataset, shuffle=False, tail="uneven")` and '
            "`gather_unsharded(per_sample_results, sampler)`: every sample exactly once, for "
            "any metric, gathered once at the end. With per-batch collectives, "
            '`DistributedBatchSampler(dataset, batch_size, shuffle=False, tail="uneven")`, '
            f"{exceptions}. "
            "With the stock sampler: gather per-sample results, interleave them by rank and "
            "truncate to the dataset size; do not sum counts or average rank means.",
            f"{link['distributed-evaluation']}: summed counts were off by up to "
            f"{evaluation.pooled_worst:.1e}; "
            + (
                "gathering was exact"
                if evaluation.gathered_worst == 0
                else f"gathering by {evaluation.gathered_worst:.1e}"
            )
            + f"; {link['tail-policies']}: {batched_uneven} gave every sample exactly once in "
            f"{count_of(tails.once[batched_uneven], total, 'configurations')} and unequal "
            f"batch counts in {tails.unequal[batched_uneven]}, "
            f"{tails.unequal_large[batched_uneven]} of them with N ≥ W and B ≥ 2; "
            f"{link['exact-evaluation']} and {link['zip-and-truncate']} measure gathering and "
            "collecting in real processes.",
        ),
        (
            "training",
            "A DistributedSampler with `shuffle=True`, the same `seed=` on every rank (ours: "
            "`seed=None` agrees one random seed), and `sampler.set_epoch(epoch)` before each "
            "epoch's loop starts (ours warns when it is missing; `auto_epoch=True` does it). "
            "For a weighted or custom sampler, ours: `DistributedSamplerWrapper(sampler)`.",
            f"{link['set-epoch']}: without set_epoch {repeats.repeated} of {repeats.later} "
            f"later epochs repeated epoch 0; {link['manual-seed']}: {seeds.manual_seeds} "
            f"torch.manual_seed values gave {seeds.stock_unseeded} sampler order(s); "
            f"{link['seed-per-rank']}: seed=rank left up to {coverage.most_never:.0%} of the "
            f"samples unseen; {link['set-epoch-timing']}: set_epoch called after iteration "
            f"began had no effect in {timing.kept} of {timing.moments} cases; "
            f"{link['wrapping-samplers']}: per-rank streams left up to "
            f"{wrapped.never[wrapping_samplers.COMMON]} samples unseen, Lightning's wrapper "
            f"{wrapped.never[wrapping_samplers.LIGHTNING]}, ours "
            f"{wrapped.never[wrapping_samplers.OURS]}.",
        ),
        (
            "small datasets",
            "The sampler's `drop_last=False` when there are fewer samples than ranks, and "
            "the DataLoader's `drop_last=False` when a rank's share is smaller than the batch "
            "size; expect repeated samples. Ours warns when drop_last empties every rank.",
            f"{link['tiny-datasets']}: with the sampler's drop_last {tiny.emptied} of "
            f"{tiny.trimmed} tiny configurations gave every rank nothing, without it a "
            f"sample was handed out up to {tiny.most_copies} times; {link['drop-last']}: "
            f"{drop_last.empty_text(dropping.empty_example)}.",
        ),
        (
            "splitting data across ranks",
            "For training, where every step runs a collective: a DistributedSampler that "
            'pads or trims (stock, or ours with `tail="pad"` or `tail="drop"`) or ours '
            "`DistributedBatchSampler`. Not Subset chunks or slicing per rank, and not ours "
            'with `tail="uneven"`, which splits as every W-th sample does: unequal splits '
            "suit a loop without per-step collectives, such as evaluation gathered once.",
            f"{link['equal-batch-counts']}: over {counts.configurations} configurations and "
            "both DataLoader drop_last settings, batch counts differed in "
            f"{counts.equal_shares} runs of the samplers that pad or trim; "
            f'with tail="uneven" in {joined(counts.uneven)}, with every W-th sample by hand '
            f"in {joined(counts.strided)}, with contiguous chunks in "
            f"{joined(counts.contiguous)}.",
        ),
        (
            "BatchNorm",
            'Ours: `DistributedBatchSampler(..., tail="pad")` or `tail="drop"` (every batch '
            "full); with the stock sampler, the DataLoader's `drop_last=True` (or a batch "
            "size that leaves no rank a last batch of one).",
            f"{link['batch-of-one']}: in train mode a batch of one raised with "
            f"{joined(norms.failing)}; {link['tail-policies']}: every batch was full with "
            + " and ".join(f"`{name}`" for name in full)
            + ", while the stock sampler's smallest batch was "
            f"{tails.smallest[tail_policies.STOCK_PAD]:.2f} of the batch size.",
        ),
        (
            "checkpointing",
            "Our sampler: save `sampler.state_dict()` with the checkpoint (the same on every "
            "rank, exact at the step the loop reached under a DataLoader or torchdata's "
            "`StatefulDataLoader`; `state_dict(consumed=...)` for a loop the sampler cannot "
            "see) and call `sampler.load_state_dict(state)` on every rank of the resumed "
            'job, on the same or another world size; `tail="uneven"` for every sample '
            "exactly once.",
            f'{link["resume"]}: resumed on another world size, ours with tail "uneven" '
            + (
                f"repeated and lost no sample in any of {resumed.moved} configurations; "
                if resumed.uneven_wrong == 0
                else f"repeated or lost up to {resumed.uneven_wrong} samples in "
                f"{resumed.moved} configurations; "
            )
            + "skipping what each rank had yielded (the StatefulDataLoader's way for a sampler "
            f"without state) left up to {resumed.skip_never} samples never seen, restarting "
            f"the epoch repeated up to {resumed.restart_repeated}; {link['strided-prefix']}: "
            f"after {prefix.prefixes} of the {prefix.steps} steps measured, the consumed "
            "samples were a prefix of the epoch order.",
        ),
        frameworks.answer(_built(findings, frameworks.NAME)),
        token_batches.answer(_built(findings, token_batches.NAME)),
        *linked_rows(link),
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def linked_rows(link: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The rows for packed rows, mixtures and Ray Train, each linking the finding that
    measures it (:data:`LINKED`, built only by a full render), with no number of its own."""
    return [
        (
            "training on packed rows (documents concatenated, no padding)",
            "Ours: `DistributedPackedBatchSampler(lengths, max_length, rows_per_batch)` as the "
            "DataLoader's `batch_sampler`, with its collate function (`packed_collate`: "
            "`input_ids`, `position_ids`, `cu_seqlens`): every sample whole in one row of at "
            "most `max_length` tokens, packed best-fit decreasing, the same number of batches "
            "on every rank, resumable on any world size; its `split` cuts documents longer "
            "than a row into pieces. `dsampler explain --sampler packed` shows each rank's "
            "rows and their fill.",
            f"{link['token-costs']} measures packed rows against padded batches, in tokens "
            "and in time, under linear and quadratic cost models.",
        ),
        (
            "mixing datasets by weight",
            "Ours: `DistributedMixtureSampler(datasets, weights)` (or "
            "`DistributedMixtureBatchSampler` for the same number of batches on every rank): "
            "every prefix of the stream within one sample of the weights, each source read "
            "in passes without repeats, `sampler.state_dict()` resumed on any world size, "
            "new weights mid-run with its `set_weights`. Under a token budget "
            "`DistributedMixtureTokenBatchSampler`; packed into rows "
            "`DistributedPackedMixtureSampler(datasets, weights, lengths, max_length, "
            "rows_per_batch)`, its weights in tokens or in samples. `dsampler explain "
            "--sampler mixture` shows each rank's sources against the weights.",
            f"{link['mixtures']} measures the proportions at every prefix, the repeats within "
            "a pass, a resume on another world size and a reweighting, ours against the "
            "ways of mixing in use.",
        ),
        (
            "training with Ray Train",
            "Ours through `samplers.integrations.ray`: its `prepare_data_loader(loader)` in "
            "place of Ray's `ray.train.torch.prepare_data_loader` (which replaces a sampler "
            "of ours or breaks its batches), and its `save_state` and `load_state` with Ray's "
            "checkpoints, restarts on fewer workers included.",
            f"{link['engines']} runs real `TorchTrainer` jobs, Ray's prepare_data_loader "
            "against ours, and restarts them from their checkpoints, sample by sample.",
        ),
    ]
