"""Finding: wrapping a sampler per rank without seeding it overlaps ranks; ours does not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch.utils.data import RandomSampler, SubsetRandomSampler, WeightedRandomSampler

from samplers import DistributedSamplerWrapper
from samplers.plan import Strided
from studies.core.simulate import IndexDataset
from studies.findings import Evidence, Table
from studies.findings.wording import count_of

NAME = "wrapping-samplers"
TITLE = "Sharding any sampler: one seeded stream, or a different stream on every rank"
GUARDED_BY = "tests/test_beyond_torch_findings.py::test_wrapped_streams_overlap_unless_seeded"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
SECONDS = 20

#: Samples each wrapped sampler draws per epoch (its support holds this many samples).
STREAM_SIZE = 1000
WORLD_SIZES: tuple[int, ...] = tuple(range(2, 17))
#: Rank ``r``'s global RNG is seeded with ``RANK_SEED + r``, as in per-rank seeding.
RANK_SEED = 0
#: The wrapper's seed (the same on every rank).
WRAPPER_SEED = 0

COMMON = "each rank draws, keeps every W-th"
LIGHTNING = "Lightning's DistributedSamplerWrapper"
OURS = "DistributedSamplerWrapper"
#: The patterns, in table order.
PATTERNS = (COMMON, LIGHTNING, OURS)

#: The wrapped samplers, each drawing STREAM_SIZE distinct samples per epoch (built anew
#: on every rank, as each process builds its own).
INNER: dict[str, Callable[[], Any]] = {
    "RandomSampler": lambda: RandomSampler(IndexDataset(STREAM_SIZE)),
    "SubsetRandomSampler (even indices)": lambda: SubsetRandomSampler(range(0, 2 * STREAM_SIZE, 2)),
    "WeightedRandomSampler (no replacement)": lambda: WeightedRandomSampler(
        [1.0 + index % 5 for index in range(STREAM_SIZE)], STREAM_SIZE, replacement=False
    ),
}

ON_SEVERAL = "samples on more than one rank"
NEVER = "samples never seen"
STREAMS = "distinct streams drawn"
EXACT = "parts = one stream, exactly once"


def common_part(inner: Any, world_size: int, rank: int) -> tuple[list[int], list[int]]:
    """The common pattern on ``rank``: (its whole stream, the part it keeps).

    The rank draws the wrapped sampler's stream from its own global RNG, untouched (the
    caller seeded it with ``RANK_SEED + rank``), and keeps positions ``rank, rank + W,
    ...`` of it (no padding).
    """
    stream = [int(index) for index in inner]
    positions = Strided.of(len(stream), world_size, "uneven").positions(rank).tolist()
    return stream, [stream[position] for position in positions]


def lightning_part(
    make: Callable[[], Any], world_size: int, rank: int
) -> tuple[list[int], list[int]]:
    """Lightning's wrapper on ``rank``, built as a user builds it (its defaults), its
    global RNG seeded with ``RANK_SEED + rank``: (the stream it drew, the part it yields).

    The wrapper draws the wrapped sampler's whole stream when iterated, from the rank's
    global RNG; the same draw, repeated from the same seed, is the stream returned (and
    every index of the part must come from it).
    """
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper as Wrapper

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANK_SEED + rank)
        stream = [int(index) for index in make()]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANK_SEED + rank)
        part = [int(index) for index in Wrapper(make(), num_replicas=world_size, rank=rank)]
    if not set(part) <= set(stream):
        raise RuntimeError("Lightning's wrapper yielded indices its rank's stream lacks")
    return stream, part


def ours_part(inner: Any, world_size: int, rank: int) -> tuple[list[int], list[int]]:
    """Ours on ``rank``: (the stream it drew, the part it yields)."""
    wrapper = DistributedSamplerWrapper(inner, world_size, rank, seed=WRAPPER_SEED, tail="uneven")
    part = list(wrapper)
    return wrapper.stream().tolist(), part


def overlap(parts: Sequence[Sequence[int]], support: set[int]) -> dict[str, int]:
    """Samples held by two ranks or more, and samples of ``support`` no rank holds."""
    holders = Counter(index for part in parts for index in set(part))
    return {
        ON_SEVERAL: sum(1 for ranks in holders.values() if ranks > 1),
        NEVER: len(support - set(holders)),
    }


def measure() -> pd.DataFrame:
    """One row per (wrapped sampler, pattern, world size)."""
    rows = []
    for name, make in INNER.items():
        support = set(int(index) for index in make())
        for world_size in WORLD_SIZES:
            drawn: dict[str, list[tuple[list[int], list[int]]]] = {name: [] for name in PATTERNS}
            for rank in range(world_size):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(RANK_SEED + rank)
                    drawn[COMMON].append(common_part(make(), world_size, rank))
                    drawn[OURS].append(ours_part(make(), world_size, rank))
                drawn[LIGHTNING].append(lightning_part(make, world_size, rank))
            for pattern, streams_and_parts in drawn.items():
                streams = [stream for stream, _ in streams_and_parts]
                parts = [part for _, part in streams_and_parts]
                distinct = len({tuple(stream) for stream in streams})
                together = Counter(index for part in parts for index in part)
                rows.append(
                    {
                        "wrapped sampler": name,
                        "pattern": pattern,
                        "world size": world_size,
                        STREAMS: distinct,
                        **overlap(parts, support),
                        EXACT: distinct == 1 and together == Counter(streams[0]),
                    }
                )
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (wrapped sampler, pattern): the range over world sizes of each count."""
    rows = []
    for (name, pattern), own in frame.groupby(["wrapped sampler", "pattern"], sort=False):
        first, last = own.iloc[0], own.iloc[-1]
        rows.append(
            {
                "wrapped sampler": name,
                "pattern": pattern,
                f"{STREAMS}, largest": int(own[STREAMS].max()),
                f"{ON_SEVERAL} ({int(first['world size'])} ranks)": int(first[ON_SEVERAL]),
                f"{ON_SEVERAL} ({int(last['world size'])} ranks)": int(last[ON_SEVERAL]),
                f"{NEVER} ({int(first['world size'])} ranks)": int(first[NEVER]),
                f"{NEVER} ({int(last['world size'])} ranks)": int(last[NEVER]),
                f"world sizes with {EXACT}": f"{int(own[EXACT].sum())} of {len(own)}",
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Facts:
    """Per pattern, over every wrapped sampler and world size: the worst overlap and gap."""

    configurations: int
    #: pattern -> configurations with samples never seen.
    lossy: dict[str, int]
    #: pattern -> the most samples never seen in one configuration.
    never: dict[str, int]
    #: pattern -> configurations whose parts were one stream, exactly once.
    exact: dict[str, int]


def facts(frame: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table."""
    grouped = frame.groupby("pattern", sort=False)
    return Facts(
        configurations=int(grouped.size().iloc[0]),
        lossy={str(k): int(v) for k, v in grouped[NEVER].agg(lambda s: (s > 0).sum()).items()},
        never={str(k): int(v) for k, v in grouped[NEVER].max().items()},
        exact={str(k): int(v) for k, v in grouped[EXACT].sum().items()},
    )


def claim(found: Facts) -> str:
    """The claim, from the facts."""
    total = found.configurations

    def lost(pattern: str) -> str:
        return (
            f"samples were never seen in {count_of(found.lossy[pattern], total, 'configurations')}"
            + (f", up to {found.never[pattern]}" if found.never[pattern] else "")
        )

    return (
        "Sharding a wrapped sampler (WeightedRandomSampler, RandomSampler, "
        "SubsetRandomSampler) by letting each rank draw its stream and keep every W-th "
        "index, with each rank's global RNG seeded differently (torch.manual_seed(seed + "
        f"rank)): {lost(COMMON)} of {STREAM_SIZE}. Lightning's DistributedSamplerWrapper "
        f"draws the stream on each rank the same way: {lost(LIGHTNING)}. "
        "samplers.DistributedSamplerWrapper seeds the stream from (seed, epoch) on every "
        "rank: its parts were the stream exactly once in "
        f"{count_of(found.exact[OURS], total, 'configurations')} (world sizes "
        f"{min(WORLD_SIZES)} to {max(WORLD_SIZES)})."
    )


def describe(frame: pd.DataFrame) -> str:
    """The prose, from :func:`measure`'s frame."""
    common, ours = frame[frame["pattern"] == COMMON], frame[frame["pattern"] == OURS]
    lightning = frame[frame["pattern"] == LIGHTNING]
    worst_never = common.loc[common[NEVER].idxmax()]
    worst_several = common.loc[common[ON_SEVERAL].idxmax()]
    return (
        f"Over {frame['wrapped sampler'].nunique()} wrapped samplers of {STREAM_SIZE} "
        f"samples and world sizes {min(WORLD_SIZES)} to {max(WORLD_SIZES)} "
        f"({len(common)} configurations), with rank r's global RNG seeded with "
        f"{RANK_SEED} + r: in the common pattern the ranks drew up to "
        f"{int(common[STREAMS].max())} different streams, and in "
        f"{int((common[NEVER] > 0).sum())} configurations samples were never seen, up to "
        f"{int(worst_never[NEVER])} of {STREAM_SIZE} ({worst_never['wrapped sampler']}, "
        f"{int(worst_never['world size'])} ranks), while up to "
        f"{int(worst_several[ON_SEVERAL])} were seen by more than one rank "
        f"({worst_several['wrapped sampler']}, {int(worst_several['world size'])} ranks). "
        "Lightning's DistributedSamplerWrapper (its defaults: a DistributedSampler over the "
        "positions of the stream, shuffled with its own seed, padded) leaves the randomness "
        "to the wrapped sampler, so each rank draws its own stream: up to "
        f"{int(lightning[STREAMS].max())} streams, samples never seen in "
        f"{int((lightning[NEVER] > 0).sum())} configurations (up to "
        f"{int(lightning[NEVER].max())}), and on more than one rank up to "
        f"{int(lightning[ON_SEVERAL].max())}. (The guarantee matrix checks the wrappers with "
        "a wrapped sampler seeded alike on every rank, which is not this situation.) "
        f'With ours (tail="uneven") the ranks drew {int(ours[STREAMS].max())} stream per '
        f"configuration, no sample was on more than one rank in "
        f"{int((ours[ON_SEVERAL] == 0).sum())} of {len(ours)} configurations, none was "
        f"missed in {int((ours[NEVER] == 0).sum())}, and the parts together held exactly "
        f"the stream's samples in {int(ours[EXACT].sum())}."
    )


def build() -> Evidence:
    frame = measure()
    found = facts(frame)
    return Evidence(
        claim=claim(found),
        facts=found,
        prose=describe(frame),
        tables=(
            Table(
                "Overlap between ranks, by wrapped sampler and pattern",
                frame,
                name="overlap",
                summary=summary(frame),
                note=(
                    f"Each wrapped sampler draws {STREAM_SIZE} distinct samples per epoch "
                    "(WeightedRandomSampler without replacement, so that overlap is a count "
                    "of samples). Rank r builds its own wrapped sampler after "
                    f"`torch.manual_seed({RANK_SEED} + r)`; the common pattern and ours "
                    '(`tail="uneven"`) do not pad, Lightning\'s wrapper pads (its default).'
                ),
            ),
        ),
    )
