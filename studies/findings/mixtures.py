"""Finding: mixing datasets by weight: ours against the ways in use, on proportions at
every prefix, repeats within a pass, resuming on another world size, and reweighting."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.utils.data import ConcatDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedMixtureSampler, DistributedSamplerWrapper
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined

NAME = "mixtures"
TITLE = "Mixing datasets by weight: proportions, passes, resume and reweighting"
GUARDED_BY = "tests/test_mixture_finding.py::test_the_claim_holds_in_the_table"
SLOW = True
SECONDS = 15

#: Six sources whose sizes span three orders of magnitude, and their weights.
SIZES = (20, 60, 300, 1000, 3000, 10000)
WEIGHTS = (3, 1, 2, 1, 2, 1)
#: The weights set mid-run, and after how many steps (the state is saved there too).
NEW_WEIGHTS = (1, 2, 1, 2, 1, 3)
STEPS_BEFORE = 100
WORLD_SIZES = (4, 8)
SEED = 0
LENGTH = sum(SIZES)
OFFSETS = np.cumsum((0, *SIZES[:-1]))

OURS = "ours: DistributedMixtureSampler"
MEGATRON = "Megatron-style blend (reimplemented from its published algorithm)"
WEIGHTED = "WeightedRandomSampler in our DistributedSamplerWrapper"
STOCK = "ConcatDataset + stock DistributedSampler"
TORCHDATA = "torchdata.nodes MultiNodeWeightedSampler over per-rank shards"
#: The reweighting cells of a sampler without ``set_weights``.
NOT_REWEIGHTED = "no set_weights"


def _source(indices: Sequence[int]) -> np.ndarray:
    return np.searchsorted(OFFSETS, np.asarray(indices, dtype=np.int64), side="right") - 1


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
    counts = np.cumsum(np.eye(len(SIZES), dtype=np.int64)[sources], axis=0)
    k = np.arange(1, len(stream) + 1)[:, None]
    return float(np.abs(counts - k * shares).max())


def repeats_within_passes(stream: Sequence[int]) -> int:
    """Draws that repeat a sample within its source's pass (draws cut every n_d)."""
    repeated = 0
    sources = _source(stream)
    for d, size in enumerate(SIZES):
        draws = [i for i, s in zip(stream, sources, strict=True) if s == d]
        for start in range(0, len(draws), size):
            one_pass = draws[start : start + size]
            repeated += len(one_pass) - len(set(one_pass))
    return repeated


# The samplers ----------------------------------------------------------------------------


def ours(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    return DistributedMixtureSampler(
        [range(n) for n in SIZES], list(weights), world, rank, seed=SEED, tail="uneven"
    )


def weighted(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    per_sample = [w / n for n, w in zip(SIZES, weights, strict=True) for _ in range(n)]
    generator = torch.Generator().manual_seed(SEED)
    inner = WeightedRandomSampler(per_sample, LENGTH, generator=generator)
    return DistributedSamplerWrapper(inner, world, rank, seed=SEED, tail="uneven")


def stock(world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> Any:
    return StockSampler(ConcatDataset([range(n) for n in SIZES]), world, rank, seed=SEED)


def megatron_stream(weights: Sequence[int], length: int) -> list[int]:
    """Megatron's blend: at each position the source with the largest error
    ``share_d * (k + 1) - count_d`` (ties to the lower index), and that source's next
    sample; each source's passes are fresh permutations of it (``randperm`` seeded with
    the seed, the source and the pass)."""
    shares = np.asarray(weights, dtype=np.float64) / sum(weights)
    counts = np.zeros(len(SIZES), dtype=np.int64)
    stream = []
    orders: dict[tuple[int, int], list[int]] = {}
    for k in range(length):
        d = int(np.argmax(shares * (k + 1) - counts))
        number, item = divmod(int(counts[d]), SIZES[d])
        if (d, number) not in orders:
            generator = torch.Generator().manual_seed(SEED * 1_000_003 + d * 1009 + number)
            orders[(d, number)] = torch.randperm(SIZES[d], generator=generator).tolist()
        stream.append(int(OFFSETS[d]) + orders[(d, number)][item])
        counts[d] += 1
    return stream


class Megatron:
    """The blend sharded by global position (Megatron's ``consumed_samples``): rank ``r``
    takes positions ``r, r + W, ...``; the state is the position; new weights rebuild the
    blend from scratch, which is then read from the same position."""

    def __init__(self, world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> None:
        self.world, self.rank, self.weights, self.start = world, rank, tuple(weights), 0

    def __iter__(self) -> Any:
        stream = megatron_stream(self.weights, LENGTH)
        return iter(stream[self.start + self.rank :: self.world])

    def state_dict(self, taken: int) -> dict[str, int]:
        return {"position": self.start + taken * self.world}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["position"]

    def set_weights(self, weights: Sequence[int], position: int) -> None:
        self.weights, self.start = tuple(weights), position


class Torchdata:
    """torchdata's ``MultiNodeWeightedSampler`` (the ``peers`` extra): each source a node
    over this rank's shard (``[rank::W]``) of a permutation of it, drawn by weight with
    the sampler's random draws, each rank taking its share of the epoch's length. Its
    state is per rank and per shard, so it does not carry over to another world size:
    a restarted job begins the epoch again."""

    def __init__(self, world: int, rank: int, weights: Sequence[int] = WEIGHTS) -> None:
        self.world, self.rank, self.weights = world, rank, tuple(weights)

    def __iter__(self) -> Any:
        import torchdata.nodes as nodes

        shards = {}
        for d, size in enumerate(SIZES):
            generator = torch.Generator().manual_seed(SEED * 1_000_003 + d)
            order = (torch.randperm(size, generator=generator) + int(OFFSETS[d])).tolist()
            shards[str(d)] = nodes.IterableWrapper(order[self.rank :: self.world])
        node = nodes.MultiNodeWeightedSampler(
            shards,
            {str(d): float(w) for d, w in enumerate(self.weights)},
            rank=self.rank,
            world_size=self.world,
            seed=SEED,
        )
        count = len(range(self.rank, LENGTH, self.world))
        return itertools.islice(nodes.Loader(node), count)


BUILDERS: dict[str, Callable[..., Any]] = {
    OURS: ours,
    MEGATRON: Megatron,
    TORCHDATA: Torchdata,
    WEIGHTED: weighted,
    STOCK: stock,
}


def _take(iterator: Any, count: int) -> list[int]:
    return [int(next(iterator)) for _ in range(count)]


def measure(name: str, world: int) -> dict[str, Any]:
    """One row: the epoch's deviation and repeats, a resume on the other world size and a
    reweight, all after ``STEPS_BEFORE`` steps."""
    build = BUILDERS[name]
    epoch = _stream([list(build(world, r)) for r in range(world)])
    row: dict[str, Any] = {
        "sampler": name,
        "ranks": world,
        "largest deviation over all prefixes (samples)": largest_deviation(epoch, WEIGHTS),
        "repeats within a pass": repeats_within_passes(epoch),
    }
    # Resume on the other world size.
    other = WORLD_SIZES[1] if world == WORLD_SIZES[0] else WORLD_SIZES[0]
    ranks = [build(world, r) for r in range(world)]
    iterators = [iter(s) for s in ranks]
    head = _stream([_take(it, STEPS_BEFORE) for it in iterators])
    if isinstance(ranks[0], Megatron):
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
    if isinstance(ranks[0], Megatron):
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


def table() -> pd.DataFrame:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_weights during an iteration says what it does
        rows = [measure(name, world) for name in BUILDERS for world in WORLD_SIZES]
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


def build() -> Evidence:
    frame = table()
    exact = exact_rows(frame)
    holding = sorted(set(frame.loc[exact, "sampler"]))
    samplers = frame["sampler"].nunique()
    deviation = "largest deviation over all prefixes (samples)"
    prefix_ok = sorted(set(frame.loc[frame[deviation] < 1, "sampler"]))
    worst = frame.loc[frame[deviation].idxmax()]
    megatron = frame[frame["sampler"] == MEGATRON]
    claim = (
        "Every prefix within 1 sample of the target, no repeat within a pass, a resume on "
        "another world size without loss or repeat, and a reweight mid-run without repeats "
        f"hold together for {count_of(len(holding), samplers, 'ways of mixing measured')}"
        f"{': ' + joined(holding) if holding else ''}."
    )
    prose = (
        f"Sources of sizes {joined(SIZES)} with weights {joined(WEIGHTS)}, an epoch of "
        f"{LENGTH} samples (their sum), seed {SEED}, on {joined(WORLD_SIZES)} ranks. The "
        "stream is the ranks' items step by step; a source's draws are cut into passes of "
        f"its size. The state is saved after {STEPS_BEFORE} steps and loaded into the "
        f"other world size; the weights change to {joined(NEW_WEIGHTS)} after "
        f"{STEPS_BEFORE} steps. Within 1 at every prefix: {joined(prefix_ok) or 'none'}. "
        f"The largest deviation, {worst[deviation]:.1f} samples, is {worst['sampler']}'s "
        f"on {worst['ranks']} ranks. The Megatron-style blend repeats "
        f"up to {int(megatron['reweighted: repeats within a pass'].max())} samples within a pass "
        "after the reweight: rebuilt with the new weights and read from the same position, "
        "its sources' counts are those of the new weights' blend, not those consumed. "
        "A sampler without a state that carries over to another world size (the stock one, "
        "torchdata's) begins the epoch again on restart; "
        f"one without set_weights is not reweighted ({NOT_REWEIGHTED!r}). Time and memory to the "
        "first index are not in this table (a finding's numbers must be deterministic); "
        "Hugging Face's interleave_datasets is not measured here (datasets is not installed)."
    )
    return Evidence(
        claim,
        prose,
        (
            Table(
                "Proportions, passes, resume and reweighting, by way of mixing",
                frame,
                floatfmt=".2f",
            ),
        ),
    )
