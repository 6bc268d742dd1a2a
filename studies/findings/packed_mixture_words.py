"""The packed mixtures' tables (:mod:`studies.mixtures.packed_tables`) as the mixtures
finding's claim, sentences and evidence tables.

Guarantee: every number and quantifier below is read from the two tables (or from the
corpus and the samplers that made them); nothing is typed in.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from studies.findings import Table
from studies.findings.wording import count_of, joined
from studies.mixtures import packed_tables as packed
from studies.mixtures import ways
from studies.mixtures.corpus import (
    LOG_MEANS,
    LONGEST,
    MAX_LENGTH,
    NEW_TOKEN_WEIGHTS,
    ROWS,
    SIGMA,
    TOKEN_WEIGHTS,
    corpus,
)
from studies.mixtures.packing import WAYS, MegatronStyle, Ours, ours_rows

__all__ = ["claim", "holding", "prose", "tables"]

WAY, SETTING = packed.WAY, packed.SETTING
OURS, RECOMMENDED_OURS = WAYS[0], WAYS[1]
MEGATRON, MEGATRON_MASKED = WAYS[2], WAYS[3]
HF_DEFAULT, HF_RECOMMENDED = WAYS[4], WAYS[5]


def _of(frame: pd.DataFrame, way: Any) -> pd.Series:
    """The table's row of ``way`` under its setting."""
    match = (frame[WAY] == way.name) & (frame[SETTING] == way.setting)
    return frame[match].iloc[0]


def holding(mixing: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The ways (rows of ``mixing``) that hold all of: no token beyond an even spread, a
    resume without loss or repeat, a reweight without extra repeats, no token dropped by
    packing and no row longer than the context."""
    both = mixing.merge(rows[[WAY, SETTING, packed.DROPPED, packed.OVER]], on=[WAY, SETTING])
    keep = (
        (both[packed.SPREAD] == 0)
        & (both[packed.LOST] == 0)
        & (both[packed.RESUME_REPEATED] == 0)
        & (both[packed.REWEIGHT_SPREAD] == 0)
        & (both[packed.DROPPED] == 0)
        & (both[packed.OVER] == 0)
    )
    return both[keep]


def _short(row: pd.Series) -> str:
    """What the prose calls the way of a table's row."""
    for way in (*WAYS, *(Ours(k) for k in packed.SPLITS)):
        if (way.name, way.setting) == (row[WAY], row[SETTING]):
            return str(way.short)
    raise KeyError(f"no way {row[WAY]!r} with setting {row[SETTING]!r}")


def _labels(frame: pd.DataFrame) -> list[str]:
    return [_short(row) for _, row in frame.iterrows()]


def claim(mixing: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The packed part of the claim."""
    held = holding(mixing, rows)
    closest = mixing[mixing[packed.PREFIX] == mixing[packed.PREFIX].min()]
    ours = _of(mixing, RECOMMENDED_OURS)
    return (
        f"Packed into rows of {MAX_LENGTH} tokens, no token beyond an even spread over its "
        "source's passes, a resume on another world size without loss or repeat, a reweight "
        "without extra repeats, no token dropped and no row longer than the context hold "
        f"together for {count_of(len(held), len(mixing), 'ways and settings measured')}"
        f"{': ' + joined(_labels(held)) if len(held) else ''}; the token shares closest to "
        f"the weights at every prefix are those of {joined(_labels(closest))} "
        f"({closest[packed.PREFIX].iloc[0]:,.1f} tokens off at most; "
        f"{RECOMMENDED_OURS.short}: {ours[packed.PREFIX]:,.1f})."
    )


def _setup() -> str:
    import datasets
    import trl

    data = corpus()
    over = int((data.lengths > MAX_LENGTH).sum())
    return (
        "Packed mixtures. The same six sources as documents of tokens: each document's "
        f"length is lognormal (log-means {joined(LOG_MEANS)} by source, sigma {SIGMA:g}, "
        f"clamped to 1..{LONGEST}), {data.tokens:,} tokens in {len(data.lengths):,} "
        f"documents, {over:,} of them longer than a row of {MAX_LENGTH} tokens. The weights "
        f"{joined(TOKEN_WEIGHTS)} share the tokens; {ROWS} rows per rank per step on "
        f"{packed.WORLD} ranks, the state saved after {packed.STEPS_BEFORE} steps and "
        f"loaded on {packed.OTHER} ranks, the token weights changed to "
        f"{joined(NEW_TOKEN_WEIGHTS)} after {packed.STEPS_BEFORE} steps. Every way's epoch "
        f"is cut to the {ours_rows():,} rows of {RECOMMENDED_OURS.short}'s, in step order. "
        "The ways, each under its documented defaults and under a setting for pretraining "
        f"(both named in the tables): {Ours.name}; {MegatronStyle.name}: "
        "each source's documents shuffled over as many epochs as its share needs, "
        f"concatenated and cut every {MAX_LENGTH} tokens, the samples shuffled, and the "
        "blend by Megatron's rule as its build_blending_indices writes it, "
        f"`{ways.MEGATRON_FORMULA}`, each rank taking its rows of each global batch "
        "(consumed_samples its state); Hugging Face datasets "
        f"{datasets.__version__}'s interleave_datasets, with the token weights turned into "
        "document probabilities, then TRL "
        f"{trl.__version__}'s pack_dataset, the packed rows shuffled and dealt by torch's "
        "DistributedSampler as a Trainer's rows are."
    )


def _mixing_words(mixing: pd.DataFrame, rows: pd.DataFrame) -> str:
    step, prefix = packed.STEP, packed.PREFIX
    ours, megatron = _of(mixing, RECOMMENDED_OURS), _of(mixing, MEGATRON)
    hf, short = _of(mixing, HF_RECOMMENDED), _of(rows, HF_DEFAULT)
    sampler = RECOMMENDED_OURS.sampler(1, 0)
    window = sampler.window
    smallest = int(min(range(len(ways.SIZES)), key=lambda d: sampler.sizes[d]))
    passes = window * float(sampler.proportions[smallest]) / sampler.sizes[smallest]
    repeating = mixing[mixing[packed.REPEATED] > 0]
    spread = mixing[mixing[packed.SPREAD] > 0]
    resumed = mixing[(mixing[packed.LOST] > 0) | (mixing[packed.RESUME_REPEATED] > 0)]
    reweighted = mixing[mixing[packed.REWEIGHT_SPREAD] > 0]
    unequal = mixing[mixing["steps on each rank"].str.contains("..", regex=False)]
    within = "within one row's tokens" if megatron[prefix] < MAX_LENGTH else "further"
    ours_names = {RECOMMENDED_OURS.name}
    passes_words = (
        f"a window holds {passes:.1f} passes of its smallest source "
        f"({sampler.sizes[smallest]} pieces)"
    )
    if set(repeating[WAY]) & ours_names:
        why = f"ours because {passes_words} and hands them out in its own order, "
    else:
        why = (
            f"not ours, although {passes_words}: it packs and hands out each window pass by "
            "pass, so no source's next pass comes before the one it ends; "
        )
    if set(resumed[WAY]) & {MEGATRON.name}:
        megatron_resumed = (
            "the Megatron-style blend keeps whole global batches only, so its last partial "
            "one changes with the world size (the resumed run hands out "
            f"{megatron[packed.RESUME_REPEATED]:,} tokens more often, "
            f"{megatron[packed.LOST]:,} less often), and "
        )
    else:
        megatron_resumed = ""
    return (
        f"Token shares: within a step the Megatron-style blend is at most "
        f"{megatron[step]:,.1f} tokens off a source's share, ours (split='long') "
        f"{ours[step]:,.1f} and {HF_RECOMMENDED.short} {hf[step]:,.1f}; at "
        f"every prefix the Megatron-style blend stays {within} ({megatron[prefix]:,.1f}), "
        f"ours reaches {ours[prefix]:,.1f} tokens ({ours[prefix] / MAX_LENGTH:.1f} rows' "
        f"worth): ours packs a window of {window:,} draws at once and hands its rows out "
        "in an order of its own (its sources' passes in order, by cost within them), so "
        f"its weights hold at the windows' boundaries and not within them; "
        f"{HF_RECOMMENDED.short} reaches {hf[prefix]:,.1f}. Counted in the order the rows "
        "are handed out, "
        f"{count_of(len(repeating), len(mixing), 'ways and settings')} repeat tokens within "
        f"a pass of their source ({joined(_labels(repeating)) or 'none'}): {why}the "
        "Megatron-style blend because it shuffles a source's documents over all "
        "the epochs it builds; over the epoch, tokens handed out beyond an even spread over "
        f"the passes: {joined(_labels(spread)) or 'none'}. Steps differ across ranks in "
        f"{count_of(len(unequal), len(mixing), 'ways and settings')}. On resume on "
        f"{packed.OTHER} ranks, the tokens handed out differ from the uninterrupted run's "
        f"for {joined(_labels(resumed)) or 'none'}: {megatron_resumed}datasets + TRL skip "
        "the steps done on "
        f"another sampler's order ({hf[packed.LOST]:,} lost, {hf[packed.RESUME_REPEATED]:,} "
        f"repeated or added with {HF_RECOMMENDED.short}). After the reweight, tokens "
        f"beyond an even spread: {joined(_labels(reweighted)) or 'none'} "
        f"(the Megatron-style blend, rebuilt for the new shares and read on from the same "
        f"row, {megatron[packed.REWEIGHT_SPREAD]:,}); ours applies new weights from its next "
        f"window boundary, as documented, so its rows are up to "
        f"{ours[packed.REWEIGHT_PREFIX]:,.1f} tokens off the new shares at a prefix, against "
        f"{megatron[packed.REWEIGHT_PREFIX]:,.1f} for the Megatron-style blend. With its "
        "defaults, interleave_datasets ends the mix when its smallest source runs out: "
        f"{short['rows']:,} rows in all, of the {ours_rows():,} of the budget."
    )


def _rows_words(rows: pd.DataFrame) -> str:
    ours, long = _of(rows, OURS), _of(rows, RECOMMENDED_OURS)
    megatron, masked = _of(rows, MEGATRON), _of(rows, MEGATRON_MASKED)
    hf = _of(rows, HF_DEFAULT)
    dropped = [
        f"{_short(row)}: {row[packed.DROPPED]:,}"
        for _, row in rows[rows[packed.DROPPED] > 0].iterrows()
    ]
    splits = [long] + [_of(rows, Ours(k)) for k in packed.SPLITS]
    costs = "; ".join(
        f"{_short(row)}: {row[packed.EFFICIENCY]:.4f} of the rows filled, "
        f"{row[packed.CUT]:,} documents cut, {row[packed.PIECE]:.1f} tokens per piece, "
        f"{1 - row[packed.ATTENTION] / ours[packed.ATTENTION]:.0%} less attention per token"
        for row in splits
    )
    return (
        f"Rows: every way fills from {rows[packed.EFFICIENCY].min():.4f} to "
        f"{rows[packed.EFFICIENCY].max():.4f} of its rows. The Megatron-style blend fills "
        f"them whole by cutting documents: {megatron[packed.CUT]:,} documents cut across "
        f"rows, and under its defaults attention crosses documents in "
        f"{megatron[packed.MIXED]:,} spans (with --reset-attention-mask and "
        f"--reset-position-ids: {masked[packed.MIXED]:,}). Tokens dropped by packing: "
        f"{joined(dropped) or 'none'} (the Megatron-style blend's are the last partial "
        f"sample of each source; TRL's bfd keeps the first {MAX_LENGTH} tokens of a "
        f"document longer than a row: {hf[packed.CUT]:,} documents cut in its rows). "
        f"Without split, ours makes {ours[packed.OVER]:,} rows longer than the context of "
        f"the documents longer than a row. What each choice of split costs, against "
        f"whole-document rows (split=None: {ours[packed.EFFICIENCY]:.4f} filled, "
        f"{ours[packed.PIECE]:.1f} tokens per piece, {ours[packed.ATTENTION]:,.1f} attention "
        f"per token): {costs}."
    )


def prose(mixing: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The packed mixtures in words."""
    return "\n\n".join((_setup(), _mixing_words(mixing, rows), _rows_words(rows)))


def tables(mixing: pd.DataFrame, rows: pd.DataFrame) -> tuple[Table, Table]:
    """The two tables as the finding shows them."""
    note = (
        f"{packed.WORLD} ranks, {ROWS} rows of {MAX_LENGTH} tokens per rank per step, every "
        f"epoch cut to {ours_rows():,} rows; tokens counted by their global ids."
    )
    return (
        Table(
            "Packed mixtures: token shares, passes, resume and reweighting, by way",
            mixing,
            ".1f",
            note=note,
        ),
        Table(
            "Packed mixtures: rows, documents cut, tokens dropped and attention, by way",
            rows,
            ("", "", "", ".4f", "", "", "", ".1f", ".1f", ""),
            intfmt=",",
            note=note
            + f" Ours with split={joined(packed.SPLITS)} on 1 rank: its rows, in order, are "
            "the same on any world size.",
        ),
    )
