"""Finding: mixing datasets by weight: ours against the ways in use, on proportions at
every prefix, repeats within a pass, resuming on another world size, and reweighting; the
same for mixtures packed into rows of tokens (:mod:`studies.mixtures.packed_tables`, in
words by :mod:`studies.findings.packed_mixture_words`), with what each choice of cutting
documents costs; and their time and memory to the first index, read from the recorded
mixture benchmark."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from studies.common import records
from studies.findings import Evidence, Table
from studies.findings import mixture_record as mixture
from studies.findings import packed_mixture_words as packed_words
from studies.findings.wording import count_of, joined, up_to
from studies.mixtures import bench as mixture_bench
from studies.mixtures import packed_tables, ways

NAME = "mixtures"
TITLE = "Mixing datasets by weight: proportions, passes, resume and reweighting"
GUARDED_BY = "tests/test_mixture_finding.py::test_the_claim_holds_in_the_table"
SLOW = True
SECONDS = 20

#: The weights set mid-run, and after how many steps (the state is saved there too).
NEW_WEIGHTS = (1, 2, 1, 2, 1, 3)
STEPS_BEFORE = 100
WORLD_SIZES = (4, 8)

#: The reweighting cells of a sampler without ``set_weights``.
NOT_REWEIGHTED = "no set_weights"


def _source(indices: Sequence[int]) -> np.ndarray:
    return np.searchsorted(ways.OFFSETS, np.asarray(indices, dtype=np.int64), side="right") - 1


def _stream(shares: Sequence[Sequence[int]]) -> list[int]:
    """The ranks' items step by step (all ranks' first items, then their second, ...)."""
    longest = max(len(share) for share in shares)
    return [share[k] for k in range(longest) for share in shares if k < len(share)]


def largest_deviation(stream: Sequence[int], weights: Sequence[int]) -> float:
    """max over prefixes k and sources d of |count_d(k) - k * share_d| (in samples)."""
    if not stream:
        return 0.0
    sources = _source(stream)
    shares = np.asarray(weights, dtype=np.float64) / sum(weights)
    counts = np.cumsum(np.eye(len(ways.SIZES), dtype=np.int64)[sources], axis=0)
    k = np.arange(1, len(stream) + 1)[:, None]
    return float(np.abs(counts - k * shares).max())


def largest_step_deviation(stream: Sequence[int], weights: Sequence[int], world: int) -> float:
    """max over whole steps (``world`` items, one a rank) and sources d of
    |count_d(step) - world * share_d| (in samples)."""
    whole = len(stream) // world * world
    if not whole:
        return 0.0
    sources = _source(stream[:whole]).reshape(-1, world)
    counts = np.stack([(sources == d).sum(axis=1) for d in range(len(ways.SIZES))], axis=1)
    shares = np.asarray(weights, dtype=np.float64) / sum(weights)
    return float(np.abs(counts - world * shares).max())


def repeats_within_passes(stream: Sequence[int]) -> int:
    """Draws that repeat a sample within its source's pass (draws cut every n_d)."""
    repeated = 0
    sources = _source(stream)
    for d, size in enumerate(ways.SIZES):
        draws = [i for i, s in zip(stream, sources, strict=True) if s == d]
        for start in range(0, len(draws), size):
            one_pass = draws[start : start + size]
            repeated += len(one_pass) - len(set(one_pass))
    return repeated


def _take(iterator: Any, count: int) -> list[int]:
    """The next ``count`` items (fewer when the iterator ends first)."""
    return [int(item) for item in itertools.islice(iterator, count)]


def measure(name: str, world: int) -> dict[str, Any]:
    """One row: the epoch's deviation and repeats, a resume on the other world size and a
    reweight, all after ``STEPS_BEFORE`` steps."""
    build = ways.BUILDERS[name]
    epoch = _stream([list(build(world, r)) for r in range(world)])
    row: dict[str, Any] = {
        "sampler": name,
        "ranks": world,
        "samples in the epoch": len(epoch),
        "largest deviation over all prefixes (samples)": largest_deviation(epoch, ways.WEIGHTS),
        "largest deviation within a step (samples)": largest_step_deviation(
            epoch, ways.WEIGHTS, world
        ),
        "repeats within a pass": repeats_within_passes(epoch),
    }
    # Resume on the other world size.
    other = WORLD_SIZES[1] if world == WORLD_SIZES[0] else WORLD_SIZES[0]
    ranks = [build(world, r) for r in range(world)]
    iterators = [iter(s) for s in ranks]
    head = _stream([_take(it, STEPS_BEFORE) for it in iterators])
    if isinstance(ranks[0], ways.Megatron):
        state: Any = ranks[0].state_dict(STEPS_BEFORE)
    elif hasattr(ranks[0], "state_dict"):
        state = ranks[0].state_dict()
    else:
        state = None  # no state: the restarted job begins the epoch again
    resumed = [build(other, r) for r in range(other)]
    if state is not None:
        for sampler in resumed:
            sampler.load_state_dict(state)
    rest = _stream([list(s) for s in resumed])
    whole, seen = Counter(epoch), Counter(head + rest)
    row["resumed: samples lost"] = sum((whole - seen).values())
    row["resumed: samples repeated"] = sum((seen - whole).values())
    # Reweight after STEPS_BEFORE steps.
    ranks = [build(world, r) for r in range(world)]
    iterators = [iter(s) for s in ranks]
    head = _stream([_take(it, STEPS_BEFORE) for it in iterators])
    if isinstance(ranks[0], ways.Megatron):
        for sampler in ranks:
            sampler.set_weights(NEW_WEIGHTS, STEPS_BEFORE * world)
    elif hasattr(ranks[0], "set_weights"):
        for sampler in ranks:
            sampler.set_weights(list(NEW_WEIGHTS))
    else:
        row["reweighted: repeats within a pass"] = NOT_REWEIGHTED
        row["reweighted: deviation after (samples)"] = NOT_REWEIGHTED
        return row
    after = _stream([list(s) for s in ranks])
    row["reweighted: repeats within a pass"] = repeats_within_passes(head + after)
    row["reweighted: deviation after (samples)"] = f"{largest_deviation(after, NEW_WEIGHTS):.2f}"
    return row


def measured(name: str, world: int) -> dict[str, Any]:
    """:func:`measure`, quiet: ``set_weights`` during an iteration says what it does."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return measure(name, world)


#: The ways run from Hugging Face ``datasets``' code: a minute and a half of the report on
#: two cores, so their rows are recorded (:data:`PEERS`).
RECORDED = (ways.HF_MAP, ways.HF_MAP_ALL, ways.HF_MAP_ONCE, ways.HF_STREAM, ways.HF_SPLIT_FIRST)
#: The command that re-measures :data:`PEERS`.
COMMAND = "python -m studies.findings.mixtures --record"


def _settings() -> dict[str, Any]:
    return {
        "sizes": ways.SIZES,
        "weights": ways.WEIGHTS,
        "seed": ways.SEED,
        "shards": ways.SHARDS,
        "world sizes": WORLD_SIZES,
        "steps before": STEPS_BEFORE,
        "new weights": NEW_WEIGHTS,
    }


#: The recorded rows of the :data:`RECORDED` ways, by ``(way, ranks)``.
PEERS = records.Rows(
    records.DATA / "mixture-peers.json",
    COMMAND,
    measured,
    lambda: [(name, world) for name in RECORDED for world in WORLD_SIZES],
    _settings,
    ("datasets", "torch"),
)


def table() -> pd.DataFrame:
    """One row per way and world size: the :data:`RECORDED` ways' from :data:`PEERS`,
    every other way's measured now."""
    recorded = PEERS.load()
    rows = [
        recorded[(name, world)] if name in RECORDED else PEERS.row(name, world)
        for name in ways.BUILDERS
        for world in WORLD_SIZES
    ]
    return pd.DataFrame(rows)


def exact_rows(frame: pd.DataFrame) -> pd.Series:
    """Rows that hold all four: within 1 at every prefix, no repeat within a pass, nothing
    lost or repeated on resume, and a reweight without repeats within 1 of the new shares."""
    return (
        (frame["largest deviation over all prefixes (samples)"] < 1)
        & (frame["repeats within a pass"] == 0)
        & (frame["resumed: samples lost"] == 0)
        & (frame["resumed: samples repeated"] == 0)
        & (frame["reweighted: repeats within a pass"].map(lambda v: v == 0))
        & (pd.to_numeric(frame["reweighted: deviation after (samples)"], errors="coerce") < 1)
    )


def _rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    return frame[frame["sampler"] == name]


def stock_shares(world: int = WORLD_SIZES[0]) -> tuple[np.ndarray, np.ndarray]:
    """Each source's share of the stock sampler's epoch over the ``ConcatDataset`` (on
    ``world`` ranks), and its share under the weights."""
    epoch = _stream([list(ways.BUILDERS[ways.STOCK](world, r)) for r in range(world)])
    counts = np.bincount(_source(epoch), minlength=len(ways.SIZES))
    weights = np.asarray(ways.WEIGHTS, dtype=np.float64)
    return counts / counts.sum(), weights / weights.sum()


def _stock_prose() -> str:
    """What the stock sampler over a ``ConcatDataset`` does with the weights."""
    shares, weighted = stock_shares()
    sizes = np.asarray(ways.SIZES, dtype=np.float64) / ways.LENGTH
    follows = "its sources' sizes" if np.allclose(shares, sizes) else "neither"
    return (
        "ConcatDataset + the stock DistributedSampler never applies the weights: it takes "
        "none, and its epoch holds each source in proportion to "
        f"{follows} ({shares.min():.1%} to {shares.max():.1%} of the epoch on "
        f"{WORLD_SIZES[0]} ranks, against the weights' {weighted.min():.1%} to "
        f"{weighted.max():.1%}). It is in the table as what a job gets that concatenates "
        "its sources without weighting them, the starting point of every other row."
    )


def _all_exhausted_chunks() -> str:
    """The ``all_exhausted`` ``Dataset`` mix's length, and what each rank reads of its
    contiguous chunk of it."""
    from datasets.distributed import split_dataset_by_node

    mix = ways.hf_dataset_mix(ways.WEIGHTS, "all_exhausted")
    parts = []
    for world in WORLD_SIZES:
        chunks = sorted({len(split_dataset_by_node(mix, r, world)) for r in range(world)})
        read = sorted({len(range(r, ways.LENGTH, world)) for r in range(world)})
        parts.append(
            f"on {world} ranks each rank's chunk holds {joined(f'{n:,}' for n in chunks)} "
            f"rows, of which it reads the first {joined(f'{n:,}' for n in read)}"
        )
    return (
        f"With 'all_exhausted' the Dataset's mix holds {len(mix):,} rows (every source run "
        "to its end, the small ones many times over), and split_dataset_by_node gives each "
        f"rank a contiguous chunk of it: {'; '.join(parts)} (its share of the epoch), so "
        "each rank reads only the first rows of its chunk"
    )


def _hugging_face_prose(frame: pd.DataFrame) -> str:
    """What the table says of ``datasets``' mixes, each number read from it."""
    import datasets

    short, whole = _rows(frame, ways.HF_MAP), _rows(frame, ways.HF_MAP_ALL)
    stream, first = _rows(frame, ways.HF_STREAM), _rows(frame, ways.HF_SPLIT_FIRST)
    once = _rows(frame, ways.HF_MAP_ONCE)
    step = "largest deviation within a step (samples)"
    measures = [c for c in frame.columns if c != "sampler"]
    same = stream[measures].reset_index(drop=True).equals(first[measures].reset_index(drop=True))
    hugging = frame[frame["sampler"].str.startswith("datasets: ")]
    return (
        "Hugging Face's datasets (version "
        f"{datasets.__version__}) mixes with interleave_datasets, the weights as probabilities: "
        "a random source at each draw, each source read in its order (not shuffled here). "
        "It has no resume on "
        "another world size and no change of probabilities; its rows do what a user does: "
        "a streamed mix (IterableDataset) loads rank 0's state_dict() into the new one, a "
        "Dataset skips the steps done on each rank (as the Trainer does), and a reweight "
        "rebuilds the mix with the new probabilities from that state. With the default "
        "stopping_strategy ('first_exhausted') the mix ends when a source runs out: "
        f"{joined(sorted(set(short['samples in the epoch'])))} samples of the {ways.LENGTH} "
        f"an epoch should hold. {_all_exhausted_chunks()}; so read, it repeats "
        f"{up_to(whole['repeats within a pass'])} samples within a pass. With "
        "'all_exhausted_without_replacement' the mix repeats "
        f"{up_to(once['repeats within a pass'])} samples within a pass and leaves the "
        "weights as its sources run out: up to "
        f"{once['largest deviation over all prefixes (samples)'].max():.1f} samples off at a "
        "prefix. A streamed mix of "
        f"sources in {ways.SHARDS} shards each gives each rank whole shards, every rank drawing "
        "sources with the same seed, and one step's items are up to "
        f"{stream[step].max():.1f} samples off the step's target "
        f"(ours: up to {_rows(frame, ways.OURS)[step].max():.1f}). Splitting each source before "
        "the mix (the order of datasets#7868) gives "
        + ("the same rows as splitting the mix" if same else "other rows than splitting the mix")
        + ". On resume on another world size its mixes lose "
        f"{up_to(hugging['resumed: samples lost'])} and repeat "
        f"{up_to(hugging['resumed: samples repeated'])} samples; after the reweight they "
        "repeat "
        f"{up_to(pd.to_numeric(hugging['reweighted: repeats within a pass']))} samples "
        "within a pass."
    )


def build() -> Evidence:
    frame, recorded = table(), mixture_bench.load()
    mixing, packed_rows = packed_tables.mixing_table(), packed_tables.rows_table()
    exact = exact_rows(frame)
    holding = sorted(set(frame.loc[exact, "sampler"]))
    samplers = frame["sampler"].nunique()
    deviation = "largest deviation over all prefixes (samples)"
    prefix_ok = sorted(set(frame.loc[frame[deviation] < 1, "sampler"]))
    worst = frame.loc[frame[deviation].idxmax()]
    megatron = frame[frame["sampler"] == ways.MEGATRON]
    claim = (
        "Every prefix within 1 sample of the target, no repeat within a pass, a resume on "
        "another world size without loss or repeat, and a reweight mid-run without repeats "
        f"hold together for {count_of(len(holding), samplers, 'ways of mixing measured')}"
        f"{': ' + joined(holding) if holding else ''}. " + packed_words.claim(mixing, packed_rows)
    )
    prose = (
        f"Sources of sizes {joined(ways.SIZES)} with weights {joined(ways.WEIGHTS)}, an epoch of "
        f"{ways.LENGTH} samples (their sum), seed {ways.SEED}, on {joined(WORLD_SIZES)} ranks. The "
        "stream is the ranks' items step by step; a source's draws are cut into passes of "
        f"its size. The state is saved after {STEPS_BEFORE} steps and loaded into the "
        f"other world size; the weights change to {joined(NEW_WEIGHTS)} after "
        f"{STEPS_BEFORE} steps. Within 1 at every prefix: {joined(prefix_ok) or 'none'}. "
        f"The largest deviation, {worst[deviation]:.1f} samples, is {worst['sampler']}'s "
        f"on {worst['ranks']} ranks. The Megatron-style blend picks at each position the "
        "source with the largest error, as Megatron's build_blending_indices writes it: "
        f"`{ways.MEGATRON_FORMULA}` (the first source on a tie). It repeats "
        f"up to {int(megatron['reweighted: repeats within a pass'].max())} samples within a pass "
        "after the reweight: rebuilt with the new weights and read from the same position, "
        "its sources' counts are those of the new weights' blend, not those consumed. "
        "A sampler without a state that carries over to another world size (the stock one, "
        "torchdata's) begins the epoch again on restart; "
        f"one without set_weights is not reweighted ({NOT_REWEIGHTED!r}). "
        + _stock_prose()
        + " "
        + _hugging_face_prose(frame)
        + "\n\n"
        + packed_words.prose(mixing, packed_rows)
        + "\n\n"
        + mixture.ways_prose(recorded, ways.OURS)
        + " The Megatron-style blend's time is that of its reimplementation here, in "
        "Python; Megatron builds its blend in C++.\n\n"
        + PEERS.provenance(
            "Iterating the Hugging Face `datasets` mixes sample by sample takes more than a "
            "minute on two cores",
            "those ways' rows of the first table",
            "tests/test_mixture_finding.py runs some of them again and compares",
        )
    )
    return Evidence(
        claim,
        prose,
        (
            Table("Proportions, passes, resume and reweighting, by way of mixing", frame, ".2f"),
            *packed_words.tables(mixing, packed_rows),
            mixture.ways_evidence_table(recorded),
        ),
    )


if __name__ == "__main__":
    PEERS.main()
